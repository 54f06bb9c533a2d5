/* Mount namespaces made ahead of need (the spawner keeps a pool: see
 * spawner/mntns.py): a new root assembled once, joined by a spawn with
 * mntns_fd. */
#include "childsetup.h"

/* The child of mount_namespace: born in a copy of the caller's mount
 * namespace, it keeps an fd of it (the fd table is shared), assembles the
 * new root there and exits. The namespace lives on through the fd. */
static int mntns_child(void *arg)
{
    struct plan *p = arg;
    p->mntns_fd = open("/proc/thread-self/ns/mnt", O_RDONLY | O_CLOEXEC);
    if (p->mntns_fd < 0) {
        p->fail_step = STEP_MNTNS;
        p->fail_errno = errno;
        _exit(127);
    }
    for (int i = 0; i < p->n_mounts; i++) {
        if (do_mount(p, &p->mounts[i]) != 0) {
            p->fail_step = STEP_MOUNT;
            p->fail_errno = errno;
            _exit(127);
        }
    }
    _exit(0);
}


void mntns_make(struct plan *p, char *stack)
{
    run_child(mntns_child, stack, CLONE_FILES | CLONE_NEWNS, p, 1);
    /* The fd table is shared: what the child opened is ours to close. */
    for (int i = 0; i < MAX_TREES; i++) {
        if (p->trees[i] >= 0)
            close(p->trees[i]);
    }
    if (p->fail_step != STEP_NONE && p->mntns_fd >= 0) {
        close(p->mntns_fd);
        p->mntns_fd = -1;
    }
}
