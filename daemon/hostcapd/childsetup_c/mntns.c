/* Mount namespaces made ahead of need (the spawner keeps a pool: see
 * spawner/mntns.py): a new root assembled once, joined by a spawn with
 * mntns_fd. */
#include "childsetup.h"

/* The child of mount_namespace: born in a copy of the caller's mount
 * namespace, it keeps an fd of it (the fd table is shared), assembles the
 * new root there and exits. The namespace lives on through the fd. With a
 * base (mntns_copy, the base's fd in mntns_fd: an environment's), it makes
 * a copy of that namespace instead, as a spawn in the environment would
 * (setns, then unshare); the base need not have a /proc. */
static int mntns_child(void *arg)
{
    struct plan *p = arg;
    int base = p->mntns_copy ? p->mntns_fd : -1;
    p->mntns_fd = -1;
    if (base >= 0) {
        int self = open("/proc/thread-self", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (self >= 0 && syscall(SYS_setns, base, CLONE_NEWNS) == 0 && unshare(CLONE_NEWNS) == 0)
            p->mntns_fd = openat(self, "ns/mnt", O_RDONLY | O_CLOEXEC);
        int saved = errno;
        if (self >= 0)
            close(self);
        errno = saved;
    } else {
        p->mntns_fd = open("/proc/thread-self/ns/mnt", O_RDONLY | O_CLOEXEC);
    }
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
    /* A copy of a base is made by the child itself (see there). */
    run_child(mntns_child, stack, CLONE_FILES | (p->mntns_copy ? 0 : CLONE_NEWNS), p, 1);
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
