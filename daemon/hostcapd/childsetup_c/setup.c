/* The set-up sequence: child_main applies a plan in the spawn sequence's
 * order (ARCHITECTURE.md), from the signals to the exec. */
#include "childsetup.h"

static int write_all(int fd, const char *s)
{
    size_t len = strlen(s);
    while (len > 0) {
        ssize_t n = write(fd, s, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        s += n;
        len -= (size_t)n;
    }
    return 0;
}

static int write_file(const char *path, const char *value)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = write_all(fd, value);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/* mkdir -p in the child's own namespace; path is absolute. */
static int mkdir_p(const char *path)
{
    char buf[4096];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char saved = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            buf[i] = saved;
        }
    }
    return 0;
}

#define OLD_ROOT "/.hostcap-old-root"

/* pivot_root into `root` and detach the old root entirely. */
static int pivot_into(const char *root)
{
    char old[4096];
    size_t len = root ? strlen(root) : 0;
    if (len == 0 || len + sizeof OLD_ROOT >= sizeof old) {
        errno = EINVAL;
        return -1;
    }
    memcpy(old, root, len);
    memcpy(old + len, OLD_ROOT, sizeof OLD_ROOT);
    if (mkdir(old, 0700) != 0 && errno != EEXIST)
        return -1;
    if (syscall(SYS_pivot_root, root, old) != 0)
        return -1;
    if (chdir("/") != 0)
        return -1;
    if (umount2(OLD_ROOT, MNT_DETACH) != 0)
        return -1;
    return rmdir(OLD_ROOT);
}

int do_mount(struct plan *p, const struct mount_op *m)
{
    int slot = (int)m->flags;
    switch (m->kind) {
    case MOUNT_CALL:
        return mount(m->source, m->target, m->fstype, m->flags, m->data);
    case MOUNT_KEEP:
        if (slot < 0 || slot >= MAX_TREES) {
            errno = EINVAL;
            return -1;
        }
        p->trees[slot] = (int)syscall(SYS_open_tree, AT_FDCWD, m->source,
                                      OPEN_TREE_CLONE_ | AT_RECURSIVE_ | O_CLOEXEC);
        return p->trees[slot] < 0 ? -1 : 0;
    case MOUNT_RESTORE:
        if (slot < 0 || slot >= MAX_TREES || p->trees[slot] < 0) {
            errno = EINVAL;
            return -1;
        }
        if (mkdir_p(m->target) != 0)
            return -1;
        return (int)syscall(SYS_move_mount, p->trees[slot], "", AT_FDCWD, m->target,
                            MOVE_MOUNT_F_EMPTY_PATH_);
    case MOUNT_SYMLINK:
        if (!m->source || !m->target) {
            errno = EINVAL;
            return -1;
        }
        return symlink(m->source, m->target);
    case MOUNT_MKDIR:
        return m->target ? mkdir_p(m->target) : (errno = EINVAL, -1);
    case MOUNT_PIVOT:
        return pivot_into(m->target);
    case MOUNT_SETATTR:
    case MOUNT_SETATTR_TREE: {
        struct mount_attr_ attr = {m->flags, m->clear, 0, 0};
        return (int)syscall(SYS_mount_setattr, AT_FDCWD, m->target,
                            m->kind == MOUNT_SETATTR_TREE ? AT_RECURSIVE_ : 0, &attr, sizeof attr);
    }
    }
    errno = EINVAL;
    return -1;
}

/* A new network namespace has only a loopback device, and it is down. */
static int loopback_up(void)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    memcpy(ifr.ifr_name, "lo", 3);
    int rc = ioctl(s, SIOCGIFFLAGS, &ifr);
    if (rc == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        rc = ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    int saved = errno;
    close(s);
    errno = saved;
    return rc;
}

/* A failed step: recorded in the plan (memory the spawner shares, or the
 * init's own, which the command's process shares) and, from an init, sent on
 * its report pipe, since the spawner does not share the init's memory. */
void fail_now(struct plan *p, int step)
{
    p->fail_step = step;
    p->fail_errno = errno;
    if ((p->init || p->warm) && !p->in_command)
        init_report_setup(p->report_fd, step, p->fail_errno);
    _exit(127);
}

/* The init is a copy of the spawner: its /proc/1/cmdline (readable by every
 * process of the namespace, unlike exe, maps or environ, which the init's
 * being non-dumpable closes) would show the spawner's command line. The
 * init overwrites its own copy of that memory (the kernel reads cmdline
 * from the process's memory, between arg_start and arg_end, which the
 * spawner read once from /proc/self/stat: see read_arg_area). */
static const char init_cmdline[] = "hostcap-init";
static unsigned long arg_start, arg_end;

static void init_hide_cmdline(void)
{
    if (arg_end <= arg_start || arg_end - arg_start < sizeof init_cmdline)
        return;
    memset((void *)arg_start, 0, arg_end - arg_start);
    memcpy((void *)arg_start, init_cmdline, sizeof init_cmdline);
}

/* The child. Runs on its own stack in the parent's memory: only syscalls and
 * async-signal-safe libc calls, no allocation, no Python. */
int child_main(void *arg)
{
    struct plan *p = arg;
    int i;

    /* Signals: default dispositions, empty mask (the parent blocked all). */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (i = 1; i < _NSIG; i++) {
        if (i != SIGKILL && i != SIGSTOP)
            sigaction(i, &dfl, NULL); /* EINVAL for reserved signals is fine */
    }
    /* An init keeps every signal blocked: it takes them with sigwaitinfo
     * (a blocked signal is queued even for a pid 1 without a handler). */
    if (p->init || p->warm) {
        if (p->report_read >= 0)
            close(p->report_read);
    }
    if (p->init)
        init_hide_cmdline();
    sigset_t none;
    sigemptyset(&none);
    if (!p->init && sigprocmask(SIG_SETMASK, &none, NULL) != 0)
        FAIL(STEP_SIGNALS);

    /* New session and process group. An init takes a process group of its
     * own only: its command's process makes the spawn's session (init.c),
     * and a session is a scheduling group of its own with the kernel's
     * autogroup, whose making (setsid) reschedules the caller: under load,
     * a second one on the spawn's path is a second wait for a CPU. */
    if (p->init && !p->init_setsid ? setpgid(0, 0) != 0 : setsid() < 0)
        FAIL(STEP_SETSID);
    if (p->pdeathsig && prctl(PR_SET_PDEATHSIG, p->pdeathsig, 0, 0, 0) != 0)
        FAIL(STEP_PDEATHSIG);

    /* cgroup placement before anything costly, so set-up is accounted too. */
    for (i = 0; i < p->n_cgroup_fds; i++) {
        if (write_all(p->cgroup_fds[i], "0") != 0)
            FAIL(STEP_CGROUP);
    }

    /* A copy of a base (mntns_copy: an environment's namespace, a profile's
     * template) clones the trees its steps show in the spawner's view first,
     * as mount_namespace does (mntns.c). */
    int copy = p->mntns_fd >= 0 && p->mntns_copy;
    for (i = 0; copy && i < p->n_mounts; i++) {
        if (p->mounts[i].kind == MOUNT_KEEP && do_mount(p, &p->mounts[i]) != 0)
            FAIL(STEP_MOUNT);
    }
    /* A mount namespace made ahead of need, its new root assembled (see
     * mount_namespace); the mounts left are this spawn's own (its /proc). */
    if (p->mntns_fd >= 0 && syscall(SYS_setns, p->mntns_fd, CLONE_NEWNS) != 0)
        FAIL(STEP_MNTNS);
    /* An environment's mount namespace is shared: this spawn works in a copy
     * of it (the same /tmp and /dev/shm, its own /proc below). */
    if (p->mntns_fd >= 0 && p->mntns_copy && unshare(CLONE_NEWNS) != 0)
        FAIL(STEP_MNTNS);
    if (p->ipcns_fd >= 0 && syscall(SYS_setns, p->ipcns_fd, CLONE_NEWIPC) != 0)
        FAIL(STEP_IPCNS);
    /* Mounts (private propagation first, the new root, /tmp, ...). */
    for (i = 0; i < p->n_mounts; i++) {
        if ((!copy || p->mounts[i].kind != MOUNT_KEEP) && do_mount(p, &p->mounts[i]) != 0)
            FAIL(STEP_MOUNT);
    }
    for (i = 0; i < MAX_TREES; i++) {
        if (p->trees[i] >= 0)
            close(p->trees[i]);
    }
    /* A tty spawn's terminal, in its own mount namespace (pty.c). */
    if (p->tty_fd >= 0 && pty_open(p) != 0)
        FAIL(STEP_TTY);
    if (p->hostname && sethostname(p->hostname, strlen(p->hostname)) != 0)
        FAIL(STEP_HOSTNAME);
    if (p->netns_fd >= 0 && syscall(SYS_setns, p->netns_fd, CLONE_NEWNET) != 0)
        FAIL(STEP_NETNS);
    if (p->loopback_up && loopback_up() != 0)
        FAIL(STEP_LOOPBACK);
    /* The cwd's root, opened as root in this namespace's view (O_PATH needs
     * no permission on the root itself, only on its ancestors). */
    if (p->cwd_root) {
        p->cwd_fd = open(p->cwd_root, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (p->cwd_fd < 0)
            FAIL(STEP_CHDIR);
    }
    /* A warm child opens every root the request may name its cwd beneath. */
    for (i = 0; i < p->n_roots; i++) {
        p->root_fds[i] = open(p->roots[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (p->root_fds[i] < 0)
            FAIL(STEP_CHDIR);
    }

    /* stdio and rlimits; a warm child's stdio comes with its request, and
     * of its rlimits those that must precede the identity are here. */
    if (!p->warm && apply_stdio(p) != 0)
        FAIL(STEP_STDIO);
    if (apply_rlimits(p) != 0)
        FAIL(STEP_RLIMITS);
    if (p->oom_score_adj && write_file("/proc/self/oom_score_adj", p->oom_score_adj) != 0)
        FAIL(STEP_OOM_SCORE);
    if (p->loginuid && write_file("/proc/self/loginuid", p->loginuid) != 0)
        FAIL(STEP_LOGINUID);

    /* Identity. The bounding set needs CAP_SETPCAP, so it goes before setuid. */
    if (p->drop_caps) {
        for (i = 0; i <= 63; i++) {
            if (prctl(PR_CAPBSET_DROP, i, 0, 0, 0) != 0 && errno != EINVAL)
                FAIL(STEP_CAPS_BOUNDING);
        }
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
            FAIL(STEP_CAPS_BOUNDING);
    }
    if (p->set_ids) {
        /* Raw syscalls: glibc's wrappers would try to sync other threads. */
        if (syscall(SYS_setgroups, 0, NULL) != 0)
            FAIL(STEP_GROUPS);
        if (syscall(SYS_setresgid, p->gid, p->gid, p->gid) != 0)
            FAIL(STEP_GID);
        if (syscall(SYS_setresuid, p->uid, p->uid, p->uid) != 0)
            FAIL(STEP_UID);
    }
    if (p->drop_caps) {
        struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct data[2];
        memset(data, 0, sizeof data);
        if (syscall(SYS_capset, &hdr, data) != 0)
            FAIL(STEP_CAPS);
    }
    /* The credential change cleared the parent-death signal: set it again. */
    if (p->pdeathsig && prctl(PR_SET_PDEATHSIG, p->pdeathsig, 0, 0, 0) != 0)
        FAIL(STEP_PDEATHSIG);
    /* As the run-as identity, the cwd beneath its root (openat2 RESOLVE_BENEATH):
     * the kernel checks the tenant may search every directory below the root
     * and enter the cwd; no ancestor of the root needs to be searchable. */
    if (p->cwd_fd >= 0 && apply_cwd(p) != 0)
        FAIL(STEP_CHDIR);
    if (p->umask >= 0)
        umask((mode_t)p->umask);

    if (p->no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        FAIL(STEP_NO_NEW_PRIVS);
    if (p->landlock_fd >= 0) {
        /* Rules for this spawn's own mounts, which did not exist when the
         * ruleset was built (its fd is this spawn's alone). */
        for (i = 0; i < p->n_landlock_rules; i++) {
            struct landlock_path_beneath rule;
            rule.allowed_access = p->landlock_rules[i].access;
            rule.parent_fd = open(p->landlock_rules[i].path, O_PATH | O_CLOEXEC);
            if (rule.parent_fd < 0)
                FAIL(STEP_LANDLOCK);
            long rc = syscall(SYS_landlock_add_rule, p->landlock_fd, LANDLOCK_RULE_PATH_BENEATH_, &rule, 0);
            int saved = errno;
            close(rule.parent_fd);
            errno = saved;
            if (rc != 0)
                FAIL(STEP_LANDLOCK);
        }
        if (syscall(SYS_landlock_restrict_self, p->landlock_fd, 0) != 0)
            FAIL(STEP_LANDLOCK);
    }
    if (p->seccomp.len > 0 &&
        syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &p->seccomp) != 0)
        FAIL(STEP_SECCOMP);

    /* A warm child waits here for its request and applies its part; a warm
     * init's command process does, once cloned (see init_main). */
    if (p->warm && !(p->init && p->preclone))
        warm_wait(p);
    /* With an init, the command's own process (its pid 2) runs the rest. */
    if (p->init)
        return init_main(p);
    FAIL(last_steps(p));
    return 127;
}

/* stdio. dup2 onto itself would keep O_CLOEXEC, so clear it explicitly. */
int apply_stdio(struct plan *p)
{
    for (int i = 0; i < 3; i++) {
        if (p->stdio[i] == i) {
            if (fcntl(i, F_SETFD, 0) != 0)
                return -1;
        } else if (dup2(p->stdio[i], i) < 0) {
            return -1;
        }
    }
    return 0;
}

int apply_rlimits(struct plan *p)
{
    for (int i = 0; i < p->n_rlimits; i++) {
        if (setrlimit(p->rlimits[i].resource, &p->rlimits[i].lim) != 0)
            return -1;
    }
    return 0;
}

/* The cwd beneath cwd_fd (openat2 RESOLVE_BENEATH, as the run-as identity),
 * entered; cwd_fd is closed. */
int apply_cwd(struct plan *p)
{
    struct open_how_ how = {O_PATH | O_DIRECTORY | O_CLOEXEC, 0,
                            RESOLVE_BENEATH_ | RESOLVE_NO_MAGICLINKS_};
    int dir = (int)syscall(SYS_openat2, p->cwd_fd, p->cwd ? p->cwd : ".", &how, sizeof how);
    if (dir < 0 || fchdir(dir) != 0)
        return -1;
    close(dir);
    close(p->cwd_fd);
    p->cwd_fd = -1;
    return 0;
}

/* The last steps, from close_fds to the exec; the step that failed (errno
 * set) if the exec did not happen. */
int last_steps(struct plan *p)
{
    int i;
    /* The command's process: its terminal (pty.c) before its fds close. */
    if (p->tty_slave >= 0 && pty_take(p) != 0)
        return STEP_TTY;
    /* Every fd but 0-2 closes at exec (the exec fd itself included). */
    if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
        return STEP_CLOSE_FDS;

    /* Last moment: a cancel that arrived during set-up means nothing runs,
     * and a spawner that died after the pdeathsig re-arm is noticed here.
     * With a go fd, wait (bounded) until the front-end says the spawn may
     * run: its write-ahead audit record is durable by then. */
    struct pollfd pfd[3];
    int n = 0, go = -1;
    if (p->cancel_fd >= 0) {
        pfd[n].fd = p->cancel_fd;
        pfd[n].events = POLLIN;
        n++;
    }
    if (p->life_fd >= 0) {
        pfd[n].fd = p->life_fd;
        pfd[n].events = POLLIN;
        n++;
    }
    if (p->go_fd >= 0) {
        go = n;
        pfd[n].fd = p->go_fd;
        pfd[n].events = POLLIN;
        n++;
    }
    for (;;) {
        int ready = n > 0 ? poll(pfd, n, go >= 0 ? p->go_timeout_ms : 0) : 0;
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready < 0)
            return STEP_CANCELLED;
        if (ready == 0) {
            if (go < 0)
                break;
            errno = ETIMEDOUT;
            return STEP_CANCELLED;
        }
        for (i = 0; i < n; i++) {
            if (pfd[i].revents == 0 || i == go)
                continue;
            errno = 0;
            if (pfd[i].fd == p->cancel_fd)
                return STEP_CANCELLED;
            return STEP_PARENT_GONE;
        }
        break; /* only go is ready */
    }

    /* An init reports its command exec'd unless it failed or was killed
     * before this point (see init_main). */
    p->fail_step = STEP_NONE;
    if (p->exe_fd >= 0)
        syscall(SYS_execveat, p->exe_fd, "", p->argv, p->envp, AT_EMPTY_PATH);
    else
        execve(p->exe_path, p->argv, p->envp);
    return STEP_EXEC;
}

unsigned long start_stack;

/* arg_start and arg_end (fields 48 and 49 of /proc/self/stat, after the
 * comm in parentheses, which may itself hold spaces or parentheses), and
 * start_stack (field 28: where the main thread's stack began at exec). */
void read_arg_area(void)
{
    char buf[4096];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    char *s = strrchr(buf, ')');
    if (!s)
        return;
    /* s points at ')' which ends field 2; field 3 follows. */
    unsigned long values[2] = {0, 0};
    int field = 2;
    for (char *c = s + 1; *c && field < 49; c++) {
        if (*c != ' ')
            continue;
        field++;
        if (field == 28)
            start_stack = strtoul(c + 1, NULL, 10);
        if (field == 48 || field == 49)
            values[field - 48] = strtoul(c + 1, NULL, 10);
    }
    if (field >= 49 && values[1] > values[0]) {
        arg_start = values[0];
        arg_end = values[1];
    }
}

