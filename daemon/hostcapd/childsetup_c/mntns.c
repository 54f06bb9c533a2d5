/* Mount namespaces made ahead of need (the spawner keeps a pool: see
 * spawner/mntns.py): a new root assembled once, joined by a spawn with
 * mntns_fd; or a copy of a namespace made so (a profile's template, an
 * environment's) with the steps that must be fresh for each spawn. */
#include "childsetup.h"

enum which { ALL_STEPS, KEEPS, NOT_KEEPS };

/* The steps of p->mounts, in order: all, or only the ones that clone a tree
 * (MOUNT_KEEP), or all but those; 0, or -1 (the failure in the plan). */
static int run_steps(struct plan *p, enum which which)
{
    for (int i = 0; i < p->n_mounts; i++) {
        int keep = p->mounts[i].kind == MOUNT_KEEP;
        if ((which == KEEPS && !keep) || (which == NOT_KEEPS && keep))
            continue;
        if (do_mount(p, &p->mounts[i]) != 0) {
            p->fail_step = STEP_MOUNT;
            p->fail_errno = errno;
            return -1;
        }
    }
    return 0;
}

/* The child of mount_namespace: born in a copy of the caller's mount
 * namespace, it keeps an fd of it (the fd table is shared), assembles the
 * new root there and exits. The namespace lives on through the fd. With a
 * base (mntns_copy, the base's fd in mntns_fd), it makes a copy of that
 * namespace instead (setns, then unshare), as mntns_copy_here does. */
static int mntns_child(void *arg)
{
    struct plan *p = arg;
    int base = p->mntns_copy ? p->mntns_fd : -1;
    p->mntns_fd = -1;
    if (base >= 0) {
        if (run_steps(p, KEEPS) != 0)
            _exit(127);
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
    _exit(run_steps(p, base >= 0 ? NOT_KEEPS : ALL_STEPS) == 0 ? 0 : 127);
}

static void close_trees(struct plan *p)
{
    for (int i = 0; i < MAX_TREES; i++) {
        if (p->trees[i] >= 0)
            close(p->trees[i]);
        p->trees[i] = -1;
    }
}

void mntns_make(struct plan *p, char *stack)
{
    /* A copy of a base is made by the child itself (see there). */
    run_child(mntns_child, stack, CLONE_FILES | (p->mntns_copy ? 0 : CLONE_NEWNS), p, 1);
    /* The fd table is shared: what the child opened is ours to close. */
    close_trees(p);
    if (p->fail_step != STEP_NONE && p->mntns_fd >= 0) {
        close(p->mntns_fd);
        p->mntns_fd = -1;
    }
}

static void mntns_failed(struct plan *p, int step)
{
    if (p->fail_step == STEP_NONE) {
        p->fail_step = step;
        p->fail_errno = errno;
    }
}

/* The copy of the base p->mntns_fd, made by the calling thread itself (no
 * child: the pool maker's, which has no other thread; a process with
 * threads gets EINVAL from setns and takes mntns_make): the trees its steps
 * show (MOUNT_KEEP) cloned in the caller's namespace, then setns into the
 * base, unshare (the kernel copies all of its mounts in one call), its fd,
 * the other steps in the copy, and setns back home, the caller's root and
 * cwd restored. Its fd in p->mntns_fd, or the failure in the plan. If the
 * thread cannot get back, the process is ended (abort): it never goes on
 * in a namespace made for a spawn. */
void mntns_copy_here(struct plan *p)
{
    int base = p->mntns_fd, made = -1, entered = 0;
    int self = -1, home = -1, root = -1, cwd = -1;
    p->mntns_fd = -1;
    if (run_steps(p, KEEPS) != 0)
        goto done;
    self = open("/proc/thread-self", O_PATH | O_DIRECTORY | O_CLOEXEC);
    home = self < 0 ? -1 : openat(self, "ns/mnt", O_RDONLY | O_CLOEXEC);
    root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (self < 0 || home < 0 || root < 0 || cwd < 0) {
        mntns_failed(p, STEP_MNTNS);
        goto done;
    }
    if (syscall(SYS_setns, base, CLONE_NEWNS) != 0) {
        mntns_failed(p, STEP_MNTNS);
        goto done;
    }
    entered = 1;
    if (unshare(CLONE_NEWNS) != 0 || (made = openat(self, "ns/mnt", O_RDONLY | O_CLOEXEC)) < 0) {
        mntns_failed(p, STEP_MNTNS);
        goto done;
    }
    run_steps(p, NOT_KEEPS);
done:
    if (entered) {
        /* The namespace's root and cwd were the base's: the caller's again. */
        int saved = errno;
        if (syscall(SYS_setns, home, CLONE_NEWNS) != 0 || fchdir(root) != 0 || chroot(".") != 0 ||
            fchdir(cwd) != 0)
            abort();
        errno = saved;
    }
    int opened[] = {self, home, root, cwd};
    for (size_t i = 0; i < sizeof opened / sizeof opened[0]; i++) {
        if (opened[i] >= 0)
            close(opened[i]);
    }
    close_trees(p);
    if (p->fail_step != STEP_NONE && made >= 0) {
        close(made);
        made = -1;
    }
    p->mntns_fd = made;
}
