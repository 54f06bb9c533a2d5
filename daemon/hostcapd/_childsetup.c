/*
 * hostcapd._childsetup: the child's set-up between clone and exec.
 *
 * The spawner (Python) decides everything and prepares every value: the
 * opened executable fd, argv/envp, pipes, clone flags, mounts, rlimits, the
 * identity, a landlock ruleset fd, a compiled seccomp BPF program. One call,
 * spawn(), clones a vfork-style child (CLONE_VM | CLONE_VFORK, so no page
 * tables are copied) that runs the set-up syscalls in the fixed order of the
 * spawn sequence and execs. No Python runs in the child, and nothing here
 * makes a policy decision.
 *
 * A failing step is reported as (step, errno) through memory shared with the
 * parent (CLONE_VM); the child then exits and is reaped here, and spawn()
 * raises SetupError(step, errno).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <net/if.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_landlock_add_rule
#define SYS_landlock_add_rule 445
#endif
#define OPEN_TREE_CLONE_ 1
#define AT_RECURSIVE_ 0x8000
#define MOVE_MOUNT_F_EMPTY_PATH_ 0x4
#define LANDLOCK_RULE_PATH_BENEATH_ 1
#define MAX_TREES 32
#define MAX_LANDLOCK_RULES 8

#define CHILD_STACK_SIZE (256 * 1024)
#define MAX_MOUNTS 64
#define MAX_RLIMITS 16
#define MAX_CGROUP_FDS 8
#define MAX_ROOTS 8
/* A warm child's buffer for its request's part (see warm_wait). */
#define WARM_BUFFER (4 * 1024 * 1024)
#define WARM_FDS 6

/* The steps a set-up can fail at: the enum and the names SetupError carries
 * (what Python sees) come from this one list, so they cannot drift apart.
 * The list is not the order the steps run in (child_main is): pdeathsig and
 * chdir run twice, mntns runs before mount, cwd's root is opened before
 * stdio, and clone (the clone itself) and mntns (also mount_namespace's
 * child) fail outside child_main; init is the init that stays pid 1, dead
 * before it could report. */
#define SETUP_STEPS(X)                      \
    X(STEP_NONE, "none")                    \
    X(STEP_SIGNALS, "signals")              \
    X(STEP_SETSID, "setsid")                \
    X(STEP_PDEATHSIG, "pdeathsig")          \
    X(STEP_CGROUP, "cgroup")                \
    X(STEP_MOUNT, "mount")                  \
    X(STEP_HOSTNAME, "hostname")            \
    X(STEP_NETNS, "netns")                  \
    X(STEP_LOOPBACK, "loopback")            \
    X(STEP_STDIO, "stdio")                  \
    X(STEP_CHDIR, "chdir")                  \
    X(STEP_RLIMITS, "limits")               \
    X(STEP_OOM_SCORE, "oom_score_adj")      \
    X(STEP_LOGINUID, "loginuid")            \
    X(STEP_CAPS_BOUNDING, "caps_bounding")  \
    X(STEP_GROUPS, "groups")                \
    X(STEP_GID, "gid")                      \
    X(STEP_UID, "uid")                      \
    X(STEP_CAPS, "caps")                    \
    X(STEP_NO_NEW_PRIVS, "no_new_privs")    \
    X(STEP_LANDLOCK, "landlock")            \
    X(STEP_SECCOMP, "seccomp")              \
    X(STEP_CLOSE_FDS, "close_fds")          \
    X(STEP_CANCELLED, "cancelled")          \
    X(STEP_PARENT_GONE, "parent_gone")      \
    X(STEP_EXEC, "exec")                    \
    X(STEP_CLONE, "clone")                  \
    X(STEP_MNTNS, "mntns")                  \
    X(STEP_INIT, "init")                    \
    X(STEP_WARM, "warm")

#define STEP_ENUM(id, name) id,
enum step { SETUP_STEPS(STEP_ENUM) N_STEPS };
#undef STEP_ENUM
/* A zeroed plan has failed at no step. */
_Static_assert(STEP_NONE == 0, "STEP_NONE must be 0");

#define STEP_NAME(id, name) [id] = name,
static const char *const step_names[N_STEPS] = { SETUP_STEPS(STEP_NAME) };
#undef STEP_NAME

/* A mount step. MOUNT_CALL is mount(2). MOUNT_KEEP clones the tree at
 * `source` (before later mounts hide it) into slot `flags`; MOUNT_RESTORE
 * creates `target` (mkdir -p) and attaches slot `flags` there. Together they
 * keep a tenant root visible beneath a fresh tmpfs mounted over its parent.
 * MOUNT_SETATTR changes the mount attributes of `target` (attr_set `flags`,
 * attr_clr `clear`), MOUNT_SETATTR_TREE of every mount beneath it too.
 * MOUNT_SYMLINK makes the symlink `target` -> `source`; MOUNT_MKDIR makes
 * `target` (mkdir -p); MOUNT_PIVOT makes `target` the root (pivot_root) and
 * detaches the old one, so nothing of the host not kept above is reachable. */
enum mount_kind {
    MOUNT_CALL = 0, MOUNT_KEEP = 1, MOUNT_RESTORE = 2, MOUNT_SETATTR = 3, MOUNT_SETATTR_TREE = 4,
    MOUNT_SYMLINK = 5, MOUNT_MKDIR = 6, MOUNT_PIVOT = 7,
};

struct mount_attr_ {
    uint64_t attr_set, attr_clr, propagation, userns_fd;
};

struct mount_op {
    int kind;
    const char *source, *target, *fstype, *data;
    unsigned long flags, clear;
};

struct open_how_ {
    uint64_t flags, mode, resolve;
};
#define RESOLVE_NO_MAGICLINKS_ 0x02
#define RESOLVE_BENEATH_ 0x08

struct landlock_path_beneath {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

struct plan {
    /* exec */
    int exe_fd;               /* execveat(exe_fd, "", AT_EMPTY_PATH) when >= 0 */
    const char *exe_path;     /* otherwise execve(exe_path) */
    char **argv, **envp;
    /* stdio: fds to become 0, 1, 2 */
    int stdio[3];
    /* cwd: opened as `cwd` beneath `cwd_root` (openat2 RESOLVE_BENEATH) in the
     * child's own mount namespace, entered with fchdir after the uid switch */
    const char *cwd_root;
    const char *cwd;
    int cwd_fd;
    /* namespaces and mounts */
    int clone_flags;
    struct mount_op mounts[MAX_MOUNTS];
    int n_mounts;
    const char *hostname;
    int loopback_up;
    int netns_fd;              /* >= 0: join this (fresh, unused) network namespace */
    int mntns_fd;              /* >= 0: join this (fresh, unused) mount namespace first */
    int trees[MAX_TREES];
    /* cgroup.procs fds; the child writes "0" to each to move itself */
    int cgroup_fds[MAX_CGROUP_FDS];
    int n_cgroup_fds;
    /* limits and identity */
    struct { int resource; struct rlimit lim; } rlimits[MAX_RLIMITS];
    int n_rlimits;
    const char *oom_score_adj; /* written to /proc/self/oom_score_adj */
    const char *loginuid;      /* written to /proc/self/loginuid */
    int drop_caps;
    int set_ids;
    uid_t uid;
    gid_t gid;
    int no_new_privs;
    int landlock_fd;
    /* rules for mounts made above, added to landlock_fd before restrict */
    struct { const char *path; uint64_t access; } landlock_rules[MAX_LANDLOCK_RULES];
    int n_landlock_rules;
    int umask;                 /* < 0: leave it */
    struct sock_fprog seccomp;
    int pdeathsig;
    /* checked at the last moment before exec */
    int cancel_fd;             /* readable: the spawn was cancelled */
    int go_fd;                 /* >= 0: wait until readable before exec */
    int go_timeout_ms;
    int life_fd;               /* hung up: the spawner is gone */
    /* pid 1 of the spawn's pid namespace is our init (see init_main): it
     * writes its records to report_fd and closes report_read at once */
    int init;
    int report_fd, report_read;
    /* A warm child (see warm_wait): its set-up stops after the filters and
     * waits on channel_fd for the request's part; the roots' fds are opened
     * (as root, after the mounts) for the cwd the request names. */
    int warm;
    int channel_fd;
    const char *roots[MAX_ROOTS];
    int root_fds[MAX_ROOTS];
    int n_roots;
    char *warm_buf;
    /* the caller's CPU affinity, which the init takes back (see clone_init_small) */
    int restore_affinity;
    cpu_set_t affinity;
    /* result, written by the child (shared memory) */
    volatile int fail_step;
    volatile int fail_errno;
};

static PyObject *SetupError;

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

static int do_mount(struct plan *p, const struct mount_op *m)
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
static void init_report_setup(int fd, int step, int err);

static void fail_now(struct plan *p, int step)
{
    p->fail_step = step;
    p->fail_errno = errno;
    if (p->init || p->warm)
        init_report_setup(p->report_fd, step, p->fail_errno);
    _exit(127);
}

#define FAIL(s) fail_now(p, (s))

static int init_main(struct plan *p);
static int last_steps(struct plan *p);
static int apply_cwd(struct plan *p);
static void warm_wait(struct plan *p);
static void write_record(int fd, const int64_t *rec, size_t n);
static int apply_stdio(struct plan *p);
static int apply_rlimits(struct plan *p);

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
static int child_main(void *arg)
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

    /* New session and process group. */
    if (setsid() < 0)
        FAIL(STEP_SETSID);
    if (p->pdeathsig && prctl(PR_SET_PDEATHSIG, p->pdeathsig, 0, 0, 0) != 0)
        FAIL(STEP_PDEATHSIG);

    /* cgroup placement before anything costly, so set-up is accounted too. */
    for (i = 0; i < p->n_cgroup_fds; i++) {
        if (write_all(p->cgroup_fds[i], "0") != 0)
            FAIL(STEP_CGROUP);
    }

    /* A mount namespace made ahead of need, its new root assembled (see
     * mount_namespace); the mounts left are this spawn's own (its /proc). */
    if (p->mntns_fd >= 0 && syscall(SYS_setns, p->mntns_fd, CLONE_NEWNS) != 0)
        FAIL(STEP_MNTNS);
    /* Mounts (private propagation first, the new root, /tmp, ...). */
    for (i = 0; i < p->n_mounts; i++) {
        if (do_mount(p, &p->mounts[i]) != 0)
            FAIL(STEP_MOUNT);
    }
    for (i = 0; i < MAX_TREES; i++) {
        if (p->trees[i] >= 0)
            close(p->trees[i]);
    }
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

    /* A warm child waits here for its request and applies its part. */
    if (p->warm)
        warm_wait(p);
    /* With an init, the command's own process (its pid 2) runs the rest. */
    if (p->init)
        return init_main(p);
    FAIL(last_steps(p));
    return 127;
}

/* stdio. dup2 onto itself would keep O_CLOEXEC, so clear it explicitly. */
static int apply_stdio(struct plan *p)
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

static int apply_rlimits(struct plan *p)
{
    for (int i = 0; i < p->n_rlimits; i++) {
        if (setrlimit(p->rlimits[i].resource, &p->rlimits[i].lim) != 0)
            return -1;
    }
    return 0;
}

/* The cwd beneath cwd_fd (openat2 RESOLVE_BENEATH, as the run-as identity),
 * entered; cwd_fd is closed. */
static int apply_cwd(struct plan *p)
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

/* ---- the warm path: a child set up ahead of need ----
 *
 * A warm child runs the whole set-up but the request's own part (stdio,
 * rlimits, the cwd, the executable, argv and envp) and stops after its
 * filters: it has its namespaces, mounts, cgroup, identity, landlock domain
 * and seccomp filter. It says so on its report pipe ({WARM_MAGIC, 0, 0}),
 * and waits on its channel (the spawner's end of a socketpair) for one
 * message: a header {WARM_MAGIC, size} with the fds stdin, stdout, stderr,
 * cancel, go and (by_fd) the executable, then `size` bytes laid out by
 * Python (childsetup.pack_request), native int64 words:
 *   by_fd, root (index into the roots, or -1), cwd, exe_path (offsets, or -1),
 *   n_rlimits, argc, envc, n_rlimits x (resource, soft, hard),
 *   argc + 1 argv offsets (the last -1), envc + 1 envp offsets (the last -1),
 * then the NUL-terminated strings the offsets point at. The offsets become
 * pointers in place; a layout that does not fit is refused (step "warm").
 * Then it applies that part and goes on to the last steps as a fresh child
 * does. It is used once: the channel is closed at exec. A channel or life
 * pipe that hangs up before a request ends it without a record. */
#define WARM_MAGIC 0x31574348 /* "HCW1" */
#define WARM_WORDS 7

static void warm_fail(struct plan *p, int err)
{
    errno = err;
    fail_now(p, STEP_WARM);
}

static int read_full(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* An offset into the buffer as a pointer; NULL for -1. */
static int warm_ptr(int64_t off, size_t size, char *base, char **out)
{
    if (off == -1) {
        *out = NULL;
        return 0;
    }
    if (off < 0 || (uint64_t)off >= size)
        return -1;
    *out = base + off;
    return 0;
}

/* Offsets [at, at + n] (the last -1) as a NULL-terminated vector, in place. */
static char **warm_vec(int64_t *w, size_t at, int64_t n, size_t words, size_t size, char *base)
{
    if (n < 0 || (uint64_t)n >= words || at + (size_t)n + 1 > words || w[at + n] != -1)
        return NULL;
    char **v = (char **)(w + at);
    for (int64_t i = 0; i <= n; i++) {
        char *ptr;
        if (warm_ptr(w[at + i], size, base, &ptr) != 0 || (i < n && !ptr))
            return NULL;
        v[i] = ptr;
    }
    return v;
}

/* Close every fd from 3 up but the `n` in `keep`. */
static void close_all_but(int *keep, int n)
{
    for (int i = 1; i < n; i++) { /* a few: insertion sort */
        for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
            int t = keep[j];
            keep[j] = keep[j - 1];
            keep[j - 1] = t;
        }
    }
    unsigned int from = 3;
    for (int i = 0; i < n; i++) {
        if (keep[i] < (int)from)
            continue;
        if ((unsigned int)keep[i] > from)
            syscall(SYS_close_range, from, (unsigned int)keep[i] - 1, 0);
        from = (unsigned int)keep[i] + 1;
    }
    syscall(SYS_close_range, from, ~0U, 0);
}

static void warm_wait(struct plan *p)
{
    int i;
    /* Not dumpable (the uid change made it so already; this says it). */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    /* It holds the spawner's fds as they were at the clone (its channel's
     * other end, the front-end's channel, other warm children's): only what
     * it still needs stays, so a closed channel hangs up here. */
    int keep[MAX_ROOTS + 3], n_keep = 0;
    keep[n_keep++] = p->channel_fd;
    keep[n_keep++] = p->report_fd;
    if (p->life_fd >= 0)
        keep[n_keep++] = p->life_fd;
    for (i = 0; i < p->n_roots; i++)
        keep[n_keep++] = p->root_fds[i];
    close_all_but(keep, n_keep);
    int64_t ready[3] = {WARM_MAGIC, 0, 0};
    write_record(p->report_fd, ready, 3);

    struct pollfd pfd[2] = {{p->channel_fd, POLLIN, 0}, {p->life_fd, POLLIN, 0}};
    for (;;) {
        int n = poll(pfd, p->life_fd >= 0 ? 2 : 1, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || pfd[1].revents || !(pfd[0].revents & POLLIN))
            _exit(127); /* dropped, or the spawner is gone: nothing to say */
        break;
    }
    int64_t header[2] = {0, 0};
    union {
        char buf[CMSG_SPACE(WARM_FDS * sizeof(int))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {header, sizeof header};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    ssize_t got;
    do {
        got = recvmsg(p->channel_fd, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    } while (got < 0 && errno == EINTR);
    if (got == 0)
        _exit(127); /* dropped */
    if (got != (ssize_t)sizeof header || header[0] != WARM_MAGIC || (msg.msg_flags & MSG_CTRUNC))
        warm_fail(p, EPROTO);
    int fds[WARM_FDS], n_fds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        if (n_fds + n > WARM_FDS)
            warm_fail(p, EPROTO);
        memcpy(fds + n_fds, CMSG_DATA(c), (size_t)n * sizeof(int));
        n_fds += n;
    }
    size_t size = (size_t)header[1];
    if (header[1] < (int64_t)(WARM_WORDS * sizeof(int64_t)) || size > WARM_BUFFER ||
        size % sizeof(int64_t) != 0)
        warm_fail(p, E2BIG);
    if (read_full(p->channel_fd, p->warm_buf, size) != 0)
        warm_fail(p, EPROTO);

    /* The layout: every offset inside the buffer, every string ending in it. */
    int64_t *w = (int64_t *)p->warm_buf;
    size_t words = size / sizeof(int64_t);
    int64_t by_fd = w[0], root = w[1], n_rl = w[4], argc = w[5], envc = w[6];
    char *cwd, *exe_path;
    if (p->warm_buf[size - 1] != '\0' || n_fds != 5 + (by_fd ? 1 : 0) ||
        root < -1 || root >= p->n_roots || n_rl < 0 || n_rl > MAX_RLIMITS || argc < 1 ||
        warm_ptr(w[2], size, p->warm_buf, &cwd) != 0 ||
        warm_ptr(w[3], size, p->warm_buf, &exe_path) != 0 || (!by_fd && !exe_path))
        warm_fail(p, EINVAL);
    size_t at = WARM_WORDS + 3 * (size_t)n_rl;
    if (at > words)
        warm_fail(p, EINVAL);
    char **argv = warm_vec(w, at, argc, words, size, p->warm_buf);
    if (!argv)
        warm_fail(p, EINVAL);
    at += (size_t)argc + 1;
    char **envp = at <= words ? warm_vec(w, at, envc, words, size, p->warm_buf) : NULL;
    if (!envp)
        warm_fail(p, EINVAL);
    for (i = 0; i < n_rl; i++) {
        int64_t *r = w + WARM_WORDS + 3 * i;
        p->rlimits[i].resource = (int)r[0];
        p->rlimits[i].lim.rlim_cur = (rlim_t)r[1];
        p->rlimits[i].lim.rlim_max = (rlim_t)r[2];
    }
    p->n_rlimits = (int)n_rl;
    for (i = 0; i < 3; i++)
        p->stdio[i] = fds[i];
    p->cancel_fd = fds[3];
    p->go_fd = fds[4];
    p->exe_fd = by_fd ? fds[5] : -1;
    p->exe_path = exe_path;
    p->argv = argv;
    p->envp = envp;
    p->cwd = cwd;

    /* The request's part, in the fresh set-up's order. */
    if (apply_stdio(p) != 0)
        FAIL(STEP_STDIO);
    if (apply_rlimits(p) != 0)
        FAIL(STEP_RLIMITS);
    for (i = 0; i < p->n_roots; i++) {
        if (i == root)
            p->cwd_fd = p->root_fds[i];
        else
            close(p->root_fds[i]);
    }
    if (p->cwd_fd >= 0 && apply_cwd(p) != 0)
        FAIL(STEP_CHDIR);
}

/* The last steps, from close_fds to the exec; the step that failed (errno
 * set) if the exec did not happen. */
static int last_steps(struct plan *p)
{
    int i;
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

    if (p->exe_fd >= 0)
        syscall(SYS_execveat, p->exe_fd, "", p->argv, p->envp, AT_EMPTY_PATH);
    else
        execve(p->exe_path, p->argv, p->envp);
    return STEP_EXEC;
}

/* ---- the init: pid 1 of a spawn's pid namespace ----
 *
 * A pid 1 gets only the signals it has a handler for (pid_namespaces(7)), so
 * a command that were pid 1 could not be ended by SIGTERM nor signal itself,
 * and orphans would pile up as zombies. With a pid namespace the child that
 * did the set-up stays as pid 1: after the last step that is not the exec's
 * own (seccomp) it clones the command's process (pid 2), which runs the last
 * steps (close_fds, the cancel/go gate, exec); then, with every signal
 * blocked and no fd but its report pipe, it forwards each signal it takes
 * to the command (its process group), reaps every child (orphans too) and, when the command
 * ends, writes the command's wait status and rusage on the pipe and exits
 * with the same status as far as a pid 1 can (see init_exit).
 *
 * The init is not a CLONE_VM child (it outlives the exec, so it needs
 * memory of its own): the spawner clones it like fork, and it clones the
 * command's process vfork-style from its own memory. It has the command's
 * uid, capabilities, no_new_privs, landlock domain, seccomp filter, cgroup
 * and rlimits, and is not dumpable: no foothold. Its records, on the pipe
 * the spawner reads (fixed size, in one write each):
 *   set-up: {INIT_SETUP_MAGIC, step, errno}: step "none" once the command
 *           exec'd, else the step that failed (the init then exits);
 *   exit:   {INIT_EXIT_MAGIC, wait status, utime_us, stime_us, maxrss_kib,
 *           nvcsw, nivcsw, inblock, oublock} of the command's process.
 * Every field is an int64 in the machine's byte order. */
#define INIT_SETUP_MAGIC 0x31534348 /* "HCS1" */
#define INIT_EXIT_MAGIC 0x31454348  /* "HCE1" */
#define COMMAND_STACK_SIZE (32 * 1024)

static void write_record(int fd, const int64_t *rec, size_t n)
{
    ssize_t r;
    do {
        r = write(fd, rec, n * sizeof *rec);
    } while (r < 0 && errno == EINTR);
}

static void init_report_setup(int fd, int step, int err)
{
    int64_t rec[3] = {INIT_SETUP_MAGIC, step, err};
    write_record(fd, rec, 3);
}

/* The command's process: a vfork-style child of the init (its memory, its
 * stack below), in its own session, signals unblocked, then the last steps.
 * A failure is left in the plan (the init's memory) for the init to send. */
static int command_main(void *arg)
{
    struct plan *p = arg;
    int step = STEP_SETSID;
    if (p->restore_affinity)
        sched_setaffinity(0, sizeof p->affinity, &p->affinity);
    if (setsid() >= 0) {
        sigset_t none;
        sigemptyset(&none);
        step = STEP_SIGNALS;
        if (sigprocmask(SIG_SETMASK, &none, NULL) == 0)
            step = last_steps(p);
    }
    p->fail_step = step;
    p->fail_errno = errno;
    _exit(127);
}

/* End the init with the command's status. An exit code is exact. A signal
 * is what the init cannot reproduce: the kernel drops a signal a pid 1 sends
 * itself while its disposition is the default (only the parent namespace's
 * SIGKILL and a fault are forced on it). It is tried, then 128 + N; the exit
 * record the spawner reads carries the command's status either way. */
static void init_exit(int status)
{
    if (WIFEXITED(status))
        _exit(WEXITSTATUS(status));
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, NULL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, sig);
    sigprocmask(SIG_UNBLOCK, &only, NULL);
    syscall(SYS_kill, 1, sig); /* its own pid in its namespace; no glibc raise() */
    _exit(128 + sig);
}

static int64_t tv_us(struct timeval tv)
{
    return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

/* The init's life once the command runs: every signal is blocked, so each is
 * queued for it and taken here; SIGCHLD reaps, any other is forwarded. */
static void init_loop(pid_t command, int report_fd)
{
    sigset_t all;
    sigfillset(&all);
    for (;;) {
        siginfo_t info;
        int sig = sigwaitinfo(&all, &info);
        if (sig < 0)
            continue; /* EINTR (a stop and continue) */
        if (sig != SIGCHLD) {
            /* To the command's process group (it is its session's leader),
             * as the daemon sent signals to the main process and its group
             * before the init: Ctrl-C's semantics; the command alone if its
             * group is gone. */
            if (syscall(SYS_kill, -command, sig) != 0)
                syscall(SYS_kill, command, sig);
            continue;
        }
        for (;;) {
            int status;
            struct rusage ru;
            pid_t w = wait4(-1, &status, WNOHANG | __WALL, &ru);
            if (w <= 0)
                break;
            if (w != command)
                continue; /* an orphan reparented to us, now reaped */
            int64_t rec[9] = {INIT_EXIT_MAGIC, status, tv_us(ru.ru_utime), tv_us(ru.ru_stime),
                              ru.ru_maxrss, ru.ru_nvcsw, ru.ru_nivcsw, ru.ru_inblock,
                              ru.ru_oublock};
            write_record(report_fd, rec, 9);
            init_exit(status);
        }
    }
}

/* The end of the set-up as pid 1: start the command's process, report, and
 * become the init. */
static int init_main(struct plan *p)
{
    char stack[COMMAND_STACK_SIZE] __attribute__((aligned(16)));
    /* Not dumpable (the uid change made it so already; this says it), and a
     * name that says what it is. Best effort: neither is a protection. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    prctl(PR_SET_NAME, "hostcap-init", 0, 0, 0);
    p->fail_step = STEP_NONE;
    pid_t command = clone(command_main, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, p);
    /* Born on this CPU too (the init waits for its exec); both take back
     * the spawner's affinity (see clone_init_small). */
    if (p->restore_affinity)
        sched_setaffinity(0, sizeof p->affinity, &p->affinity);
    if (command < 0)
        FAIL(STEP_CLONE);
    if (p->fail_step != STEP_NONE) {
        errno = p->fail_errno;
        FAIL(p->fail_step);
    }
    /* The command runs: the init keeps its report pipe and nothing else. */
    int fd = p->report_fd;
    if (fd > 0)
        syscall(SYS_close_range, 0, fd - 1, 0);
    syscall(SYS_close_range, fd + 1, ~0U, 0);
    init_report_setup(fd, STEP_NONE, 0);
    init_loop(command, fd);
    return 127;
}

#undef FAIL

/* ---- argument conversion (parent side, with the GIL) ---- */

/* A NULL-terminated char*[] of the bytes in `seq`; the bytes objects are
 * kept alive by `keep`. */
static char **to_cstrings(PyObject *seq, PyObject *keep, const char *what)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    char **out = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    if (!out) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "%s items must be bytes", what);
            goto fail;
        }
        if ((Py_ssize_t)strlen(PyBytes_AS_STRING(item)) != PyBytes_GET_SIZE(item)) {
            PyErr_Format(PyExc_ValueError, "%s item contains a NUL byte", what);
            goto fail;
        }
        if (PyList_Append(keep, item) != 0)
            goto fail;
        out[i] = PyBytes_AS_STRING(item);
    }
    Py_DECREF(fast);
    return out;
fail:
    Py_DECREF(fast);
    PyMem_Free(out);
    return NULL;
}

/* bytes or None -> const char* (kept alive by keep) */
static int opt_cstring(PyObject *obj, PyObject *keep, const char **out)
{
    if (obj == Py_None) {
        *out = NULL;
        return 0;
    }
    if (!PyBytes_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "expected bytes or None");
        return -1;
    }
    if (PyList_Append(keep, obj) != 0)
        return -1;
    *out = PyBytes_AS_STRING(obj);
    return 0;
}

/* ---- the plan and the child's stack, kept for the next call ----
 *
 * Each call needs a plan (the child writes its result there) and a stack for
 * the child. Mapping and unmapping them per spawn cost more than the rest of
 * the parent's side (the munmap of pages the child touched on another CPU
 * flushes TLBs): one of each is kept, taken and given back with the GIL held,
 * so a concurrent call (threads, tests) maps its own. */
static struct plan *kept_plan;
static char *kept_stack;

static struct plan *plan_take(void)
{
    struct plan *p = kept_plan;
    kept_plan = NULL;
    if (!p) {
        p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            PyErr_SetFromErrno(PyExc_OSError);
            return NULL;
        }
    }
    memset(p, 0, sizeof *p);
    return p;
}

static void plan_give(struct plan *p)
{
    if (!p)
        return;
    if (!kept_plan)
        kept_plan = p;
    else
        munmap(p, sizeof *p);
}

static char *stack_take(void)
{
    char *stack = kept_stack;
    kept_stack = NULL;
    if (!stack) {
        stack = mmap(NULL, CHILD_STACK_SIZE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (stack == MAP_FAILED) {
            PyErr_SetFromErrno(PyExc_OSError);
            return NULL;
        }
    }
    return stack;
}

static void stack_give(char *stack)
{
    if (!stack)
        return;
    if (!kept_stack)
        kept_stack = stack;
    else
        munmap(stack, CHILD_STACK_SIZE);
}

/* Clone `fn` on `stack` in a vfork-style child (the caller resumes once it
 * execs or exits) with every signal blocked, so no handler of ours runs on
 * the child's stack. A clone that fails is recorded in the plan as step
 * "clone". The child is reaped here when `reap` is set or a step failed.
 * Called without the GIL. */
static pid_t run_child(int (*fn)(void *), char *stack, int flags, struct plan *p, int reap)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = clone(fn, stack + CHILD_STACK_SIZE, CLONE_VM | CLONE_VFORK | SIGCHLD | flags, p);
    int clone_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        p->fail_step = STEP_CLONE;
        p->fail_errno = clone_errno;
        return -1;
    }
    if (reap || p->fail_step != STEP_NONE) {
        int status;
        pid_t r;
        do {
            r = waitpid(pid, &status, __WALL);
        } while (r < 0 && errno == EINTR);
    }
    return pid;
}

/* ---- the init's copy of the spawner, kept small ----
 *
 * The init is cloned like fork: the kernel copies the page tables of every
 * private writable mapping of the caller, and the init's exit tears the copy
 * down, both on a spawn's critical path (decision 0023). The child reads
 * nothing of the Python heap once what it needs (strings, vectors, the
 * seccomp program) is copied into an arena of its own: so, for the clone
 * only, the caller's anonymous writable mappings are marked MADV_DONTFORK
 * and the init gets no copy of them. Kept: the plan, the arena and the
 * child's stack; the mappings around the thread's TLS (errno, the stack
 * guard); every loaded object's writable segments (a .bss is anonymous);
 * the main stack; every file mapping. The marks are taken off again right after
 * the clone, with the GIL held all along, so no other fork (Python's) sees
 * them. Anything unexpected (a /proc/self/maps too large, too many ranges)
 * only skips this: the init then gets the full copy. */
#define MAX_DONTFORK 1024
#define MAPS_BUFFER (1024 * 1024)

struct span {
    unsigned long start, end;
};

struct arena {
    char *base;
    size_t size, used;
};

static void *arena_take(struct arena *a, size_t n, size_t align)
{
    size_t at = (a->used + align - 1) & ~(align - 1);
    if (at + n > a->size)
        return NULL;
    a->used = at + n;
    return a->base + at;
}

static const char *arena_str(struct arena *a, const char *s, int *ok)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = arena_take(a, n, 1);
    if (!d) {
        *ok = 0;
        return s;
    }
    memcpy(d, s, n);
    return d;
}

static char **arena_vec(struct arena *a, char **v, int *ok)
{
    size_t n = 0;
    while (v[n])
        n++;
    char **out = arena_take(a, (n + 1) * sizeof *out, sizeof(void *));
    if (!out) {
        *ok = 0;
        return v;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = (char *)arena_str(a, v[i], ok);
    out[n] = NULL;
    return out;
}

static size_t str_size(const char *s)
{
    return s ? strlen(s) + 1 : 0;
}

static size_t vec_size(char **v)
{
    size_t n = 0, total = 0;
    for (; v[n]; n++)
        total += strlen(v[n]) + 1;
    return total + (n + 1) * sizeof(char *) + sizeof(void *);
}

/* Copy every string, vector and the seccomp program the child reads into a
 * fresh arena and point the plan at the copies; 0, or -1 (plan unchanged
 * where the copy failed: the full-copy clone still works). */
static int plan_pack(struct plan *p, struct arena *a)
{
    size_t need = 64 + str_size(p->exe_path) + str_size(p->cwd_root) + str_size(p->cwd) +
                  str_size(p->hostname) + str_size(p->oom_score_adj) + str_size(p->loginuid) +
                  vec_size(p->argv) + vec_size(p->envp) +
                  (size_t)p->seccomp.len * sizeof(struct sock_filter) + 16;
    for (int i = 0; i < p->n_mounts; i++)
        need += str_size(p->mounts[i].source) + str_size(p->mounts[i].target) +
                str_size(p->mounts[i].fstype) + str_size(p->mounts[i].data);
    for (int i = 0; i < p->n_landlock_rules; i++)
        need += str_size(p->landlock_rules[i].path);
    for (int i = 0; i < p->n_roots; i++)
        need += str_size(p->roots[i]);
    long page = sysconf(_SC_PAGESIZE);
    a->size = (need + (size_t)page - 1) & ~((size_t)page - 1);
    a->used = 0;
    a->base = mmap(NULL, a->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a->base == MAP_FAILED) {
        a->base = NULL;
        return -1;
    }
    int ok = 1;
    p->exe_path = arena_str(a, p->exe_path, &ok);
    p->cwd_root = arena_str(a, p->cwd_root, &ok);
    p->cwd = arena_str(a, p->cwd, &ok);
    p->hostname = arena_str(a, p->hostname, &ok);
    p->oom_score_adj = arena_str(a, p->oom_score_adj, &ok);
    p->loginuid = arena_str(a, p->loginuid, &ok);
    p->argv = arena_vec(a, p->argv, &ok);
    p->envp = arena_vec(a, p->envp, &ok);
    for (int i = 0; i < p->n_mounts; i++) {
        struct mount_op *m = &p->mounts[i];
        m->source = arena_str(a, m->source, &ok);
        m->target = arena_str(a, m->target, &ok);
        m->fstype = arena_str(a, m->fstype, &ok);
        m->data = arena_str(a, m->data, &ok);
    }
    for (int i = 0; i < p->n_landlock_rules; i++)
        p->landlock_rules[i].path = arena_str(a, p->landlock_rules[i].path, &ok);
    for (int i = 0; i < p->n_roots; i++)
        p->roots[i] = arena_str(a, p->roots[i], &ok);
    if (p->seccomp.len > 0) {
        size_t n = (size_t)p->seccomp.len * sizeof(struct sock_filter);
        struct sock_filter *f = arena_take(a, n, 16);
        if (f) {
            memcpy(f, p->seccomp.filter, n);
            p->seccomp.filter = f;
        } else {
            ok = 0;
        }
    }
    return ok ? 0 : -1;
}

#define MAX_KEEP 2048

struct keep_list {
    struct span *spans;
    int n, full;
};

/* The writable segments (.data and .bss) of every loaded object: a library's
 * .bss is an anonymous mapping, told apart from the heap only by this. */
static int add_writable_segments(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct keep_list *k = arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W))
            continue;
        if (k->n == MAX_KEEP) {
            k->full = 1;
            return 1;
        }
        unsigned long start = info->dlpi_addr + ph->p_vaddr;
        k->spans[k->n].start = start & ~4095UL;
        k->spans[k->n].end = (start + ph->p_memsz + 4095UL) & ~4095UL;
        k->n++;
    }
    return 0;
}

static int overlaps(unsigned long start, unsigned long end, const struct span *keep, int n)
{
    for (int i = 0; i < n; i++) {
        if (start < keep[i].end && keep[i].start < end)
            return 1;
    }
    return 0;
}

/* Mark the anonymous writable mappings but `keep` MADV_DONTFORK; the number
 * marked, their spans in `marked` (to be unmarked after the clone). */
static int mark_dontfork(const struct span *keep, int n_keep, struct span *marked)
{
    char *buf = mmap(NULL, MAPS_BUFFER, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return 0;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    size_t len = 0;
    if (fd >= 0) {
        for (;;) {
            ssize_t r = read(fd, buf + len, MAPS_BUFFER - 1 - len);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            len += (size_t)r;
            if (len >= MAPS_BUFFER - 1) {
                len = 0; /* too large to be sure of: no marks */
                break;
            }
        }
        close(fd);
    }
    buf[len] = '\0';
    int n = 0;
    for (char *line = buf; line < buf + len && *line;) {
        char *next = strchr(line, '\n');
        if (next)
            *next = '\0';
        unsigned long start, end, offset, inode;
        char perms[8];
        unsigned int major, minor;
        int path_at = 0;
        if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu %n", &start, &end, perms, &offset, &major,
                   &minor, &inode, &path_at) >= 7) {
            const char *path = path_at > 0 ? line + path_at : "";
            int file = inode != 0 || path[0] == '/';
            int anon = !file && (path[0] == '\0' || strcmp(path, "[heap]") == 0);
            if (anon && perms[1] == 'w' && perms[3] == 'p' &&
                !overlaps(start, end, keep, n_keep)) {
                if (n == MAX_DONTFORK ||
                    madvise((void *)start, end - start, MADV_DONTFORK) != 0) {
                    /* unexpected: undo what was marked and fall back */
                    for (int i = 0; i < n; i++)
                        madvise((void *)marked[i].start, marked[i].end - marked[i].start,
                                MADV_DOFORK);
                    n = 0;
                    break;
                }
                marked[n].start = start;
                marked[n].end = end;
                n++;
            }
        }
        if (!next)
            break;
        line = next + 1;
    }
    munmap(buf, MAPS_BUFFER);
    return n;
}

static void unmark_dontfork(const struct span *marked, int n)
{
    for (int i = 0; i < n; i++)
        madvise((void *)marked[i].start, marked[i].end - marked[i].start, MADV_DOFORK);
}

/* Clone the init with the GIL held (see above); its pid, or -1 with errno. */
static pid_t clone_init_small(char *stack, struct plan *p)
{
    static struct span marked[MAX_DONTFORK];
    struct arena a = {NULL, 0, 0};
    char **argv = p->argv, **envp = p->envp;
    struct plan saved = *p;
    int packed = plan_pack(p, &a) == 0;
    int n_marked = 0;
    if (packed) {
        static struct span spans[MAX_KEEP];
        unsigned long tcb = (unsigned long)pthread_self();
        struct span own[] = {
            {(unsigned long)p, (unsigned long)p + sizeof *p},
            {(unsigned long)a.base, (unsigned long)a.base + a.size},
            {(unsigned long)stack, (unsigned long)stack + CHILD_STACK_SIZE},
            {tcb > (1UL << 20) ? tcb - (1UL << 20) : 0, tcb + (64UL << 10)},
            {(unsigned long)p->warm_buf, (unsigned long)p->warm_buf + (p->warm_buf ? WARM_BUFFER : 0)},
        };
        struct keep_list k = {spans, 0, 0};
        for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
            spans[k.n++] = own[i];
        dl_iterate_phdr(add_writable_segments, &k);
        if (!k.full)
            n_marked = mark_dontfork(spans, k.n, marked);
    } else {
        /* the copy failed partway: back to the Python-owned values */
        memcpy(p, &saved, sizeof *p);
    }
    /* Born on this CPU, which the caller leaves at once to wait for it, the
     * init runs at once (as a vfork child does), rather than being queued
     * behind other work on another CPU; it and the command's process take
     * back the caller's affinity once the command's process is started. */
    int cpu = p->warm ? -1 : sched_getcpu(); /* a warm child waits: not pinned */
    p->restore_affinity = cpu >= 0 && sched_getaffinity(0, sizeof p->affinity, &p->affinity) == 0;
    if (p->restore_affinity) {
        cpu_set_t here;
        CPU_ZERO(&here);
        CPU_SET(cpu, &here);
        if (sched_setaffinity(0, sizeof here, &here) != 0)
            p->restore_affinity = 0;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = clone(child_main, stack + CHILD_STACK_SIZE, SIGCHLD | p->clone_flags, p);
    int clone_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (p->restore_affinity)
        sched_setaffinity(0, sizeof p->affinity, &p->affinity);
    unmark_dontfork(marked, n_marked);
    /* The parent's plan points at Python's values again (argv and envp are
     * freed by the caller); the init has its own copy of the arena. */
    if (packed) {
        p->exe_path = saved.exe_path;
        p->cwd_root = saved.cwd_root;
        p->cwd = saved.cwd;
        p->hostname = saved.hostname;
        p->oom_score_adj = saved.oom_score_adj;
        p->loginuid = saved.loginuid;
        memcpy(p->mounts, saved.mounts, sizeof p->mounts);
        memcpy(p->landlock_rules, saved.landlock_rules, sizeof p->landlock_rules);
        memcpy(p->roots, saved.roots, sizeof p->roots);
        p->seccomp = saved.seccomp;
    }
    p->argv = argv;
    p->envp = envp;
    if (a.base)
        munmap(a.base, a.size);
    errno = clone_errno;
    return pid;
}

/* Clone the init (see init_main): like fork (it needs memory of its own), in
 * the new namespaces, every signal blocked, with the GIL held (see
 * clone_init_small); then, without the GIL, wait on its report pipe for the
 * set-up record, which comes once the command exec'd or a step failed.
 * The pid, with the pipe's read end in *report (the exit record comes there),
 * or -1 with the failure in the plan (the init reaped). */
static pid_t start_init_child(char *stack, struct plan *p)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        p->fail_step = STEP_INIT;
        p->fail_errno = errno;
        return -1;
    }
    p->report_read = fds[0];
    p->report_fd = fds[1];
    pid_t pid = clone_init_small(stack, p);
    int clone_errno = errno;
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        p->fail_step = STEP_CLONE;
        p->fail_errno = clone_errno;
        return -1;
    }
    return pid;
}

/* The set-up record of the init started by start_init_child; see there. */
static pid_t wait_init_child(pid_t pid, struct plan *p, int *report)
{
    int fds[2] = {p->report_read, -1};
    *report = -1;
    int64_t rec[3] = {0, STEP_INIT, 0};
    size_t got = 0;
    while (got < sizeof rec) {
        ssize_t n = read(fds[0], (char *)rec + got, sizeof rec - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (got == sizeof rec && rec[0] == INIT_SETUP_MAGIC && rec[1] == STEP_NONE) {
        *report = fds[0];
        return pid;
    }
    /* A step failed, or the init died before it said (killed: "init"). */
    int valid = got == sizeof rec && rec[0] == INIT_SETUP_MAGIC && rec[1] > STEP_NONE &&
                rec[1] < N_STEPS;
    p->fail_step = valid ? (int)rec[1] : STEP_INIT;
    p->fail_errno = valid ? (int)rec[2] : 0;
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, __WALL) < 0 && errno == EINTR)
        ;
    return -1;
}

/* SetupError(step, errno) from the plan's failure. */
static void raise_setup_error(const struct plan *p)
{
    PyObject *exc_args = Py_BuildValue("(si)", step_names[p->fail_step], p->fail_errno);
    if (exc_args) {
        PyErr_SetObject(SetupError, exc_args);
        Py_DECREF(exc_args);
    }
}

/* mounts -> p->mounts (the strings kept alive by keep); 0, or -1 with an exception. */
static int parse_mounts(PyObject *mounts, struct plan *p, PyObject *keep)
{
    Py_ssize_t n = PySequence_Length(mounts);
    if (n < 0 || n > MAX_MOUNTS) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "too many mounts");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_GetItem(mounts, i);
        PyObject *src, *tgt, *fst, *dat;
        unsigned long flags, clear = 0;
        int kind;
        int ok = item && PyArg_ParseTuple(item, "iOOOkO|k;mount must be (kind, source, target, fstype, flags, data[, clear])",
                                          &kind, &src, &tgt, &fst, &flags, &dat, &clear);
        if (ok && (kind < MOUNT_CALL || kind > MOUNT_PIVOT)) {
            PyErr_SetString(PyExc_ValueError, "unknown mount kind");
            ok = 0;
        }
        if (ok) {
            struct mount_op *m = &p->mounts[i];
            m->kind = kind;
            m->flags = flags;
            m->clear = clear;
            ok = opt_cstring(src, keep, &m->source) == 0 && opt_cstring(tgt, keep, &m->target) == 0 &&
                 opt_cstring(fst, keep, &m->fstype) == 0 && opt_cstring(dat, keep, &m->data) == 0;
        }
        Py_XDECREF(item);
        if (!ok)
            return -1;
    }
    p->n_mounts = (int)n;
    return 0;
}

PyDoc_STRVAR(spawn_doc,
"spawn(*, exe_fd, exe_path, argv, envp, stdio, cwd_root, cwd, umask, clone_flags, mounts,\n"
"      hostname, loopback_up, cgroup_fds, rlimits, oom_score_adj, loginuid,\n"
"      drop_caps, ids, no_new_privs, landlock_fd, landlock_rules,\n"
"      seccomp_filter, pdeathsig, cancel_fd, life_fd[, go_fd, go_timeout_ms, netns_fd,\n"
"      mntns_fd, init]) -> pid, or (pid, report_fd) with init\n\n"
"Clone a child that applies the prepared set-up in order and execs.\n"
"exe_fd >= 0 execs that fd (execveat AT_EMPTY_PATH), else exe_path.\n"
"argv, envp: lists of bytes. stdio: (in, out, err) fds.\n"
"cwd_root, cwd: bytes or None: the child opens cwd beneath cwd_root (openat2\n"
"  RESOLVE_BENEATH) after its mounts and fchdir()s there after the uid switch.\n"
"umask: int, or -1 to inherit.\n"
"mounts: [(kind, source, target, fstype, flags, data[, clear])]: kind 0 mount(2);\n"
"  1 keep: clone the tree at source into slot `flags`; 2 restore: mkdir -p\n"
"  target and attach slot `flags` there; 3 mount_setattr(target, set=flags,\n"
"  clear=clear); 4 the same for every mount beneath target; 5 symlink target\n"
"  -> source; 6 mkdir -p target; 7 pivot_root into target, old root detached.\n"
"cgroup_fds: fds of cgroup.procs files the child writes \"0\" to.\n"
"rlimits: [(resource, soft, hard)]. ids: (uid, gid) or None.\n"
"landlock_rules: [(path, access)] added to landlock_fd after the mounts.\n"
"seccomp_filter: bytes of struct sock_filter[] (empty: none).\n"
"netns_fd >= 0: join that network namespace (instead of CLONE_NEWNET).\n"
"mntns_fd >= 0: join that mount namespace (made by mount_namespace, instead of\n"
"  CLONE_NEWNS) before the mounts, which are then only this spawn's own.\n"
"go_fd >= 0: right before exec, wait up to go_timeout_ms for it to be readable\n"
"  (a cancel or the spawner's death ends the wait: nothing is executed).\n"
"init (needs CLONE_NEWPID): the child stays as pid 1, a minimal init, and\n"
"  the command runs as its pid 2; report_fd (O_CLOEXEC, the caller's) gives\n"
"  the init's exit record once it ended (see init_main).\n"
"Raises SetupError(step, errno) if a step fails (the child is reaped).");

static PyObject *childsetup_spawn(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *kwlist[] = {
        "exe_fd", "exe_path", "argv", "envp", "stdio", "cwd_root", "cwd", "umask", "clone_flags",
        "mounts", "hostname", "loopback_up", "cgroup_fds", "rlimits", "oom_score_adj",
        "loginuid", "drop_caps", "ids", "no_new_privs", "landlock_fd", "landlock_rules",
        "seccomp_filter", "pdeathsig", "cancel_fd", "life_fd", "go_fd", "go_timeout_ms", "netns_fd",
        "mntns_fd", "init", "warm_channel", "roots", NULL,
    };
    /* Every argument but go_fd and go_timeout_ms is required: the sentinels
     * below say which one a call left out (the format makes all optional). */
    const int unset = INT_MIN;
    int exe_fd = unset, umask_value = unset, clone_flags = unset, loopback = unset;
    int drop_caps = unset, no_new_privs = unset, landlock_fd = unset, pdeathsig = unset;
    int cancel_fd = unset, life_fd = unset, go_fd = -1, go_timeout_ms = 30000, netns_fd = -1;
    int mntns_fd = -1, init = 0, warm_channel = -1;
    PyObject *warm_roots = NULL;
    PyObject *exe_path = NULL, *argv = NULL, *envp = NULL, *stdio = NULL, *cwd_root = NULL;
    PyObject *cwd = NULL, *mounts = NULL, *hostname = NULL, *cgroup_fds = NULL, *rlimits = NULL;
    PyObject *oom = NULL, *loginuid = NULL, *ids = NULL, *landlock_rules = NULL;
    Py_buffer filter = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$iOOOOOOiiOOpOOOOpOpiOy*iiiiiiipiO:spawn", kwlist,
                                     &exe_fd, &exe_path, &argv, &envp, &stdio, &cwd_root,
                                     &cwd, &umask_value, &clone_flags, &mounts, &hostname, &loopback,
                                     &cgroup_fds, &rlimits, &oom, &loginuid, &drop_caps, &ids,
                                     &no_new_privs, &landlock_fd, &landlock_rules, &filter,
                                     &pdeathsig, &cancel_fd, &life_fd, &go_fd, &go_timeout_ms, &netns_fd,
                                     &mntns_fd, &init, &warm_channel, &warm_roots))
        return NULL;
    if (exe_fd == unset || umask_value == unset || clone_flags == unset || loopback == unset ||
        drop_caps == unset || no_new_privs == unset || landlock_fd == unset ||
        pdeathsig == unset || cancel_fd == unset || life_fd == unset || !exe_path || !argv ||
        !envp || !stdio || !cwd_root || !cwd || !mounts || !hostname || !cgroup_fds ||
        !rlimits || !oom || !loginuid || !ids || !landlock_rules || !filter.obj) {
        if (filter.obj)
            PyBuffer_Release(&filter);
        PyErr_SetString(PyExc_TypeError, "spawn() is missing a required keyword argument");
        return NULL;
    }

    struct plan *p = NULL;
    char *stack = NULL;
    PyObject *result = NULL;
    PyObject *keep = PyList_New(0);
    if (!keep)
        goto done;
    /* The plan lives in its own mapping: the child writes its result there. */
    if (!(p = plan_take()))
        goto done;
    p->exe_fd = exe_fd;
    p->cwd_fd = -1;
    p->umask = umask_value;
    p->loopback_up = loopback;
    for (int i = 0; i < MAX_TREES; i++)
        p->trees[i] = -1;
    p->clone_flags = clone_flags;
    p->drop_caps = drop_caps;
    p->no_new_privs = no_new_privs;
    p->landlock_fd = landlock_fd;
    p->pdeathsig = pdeathsig;
    p->cancel_fd = cancel_fd;
    p->life_fd = life_fd;
    p->go_fd = go_fd;
    p->go_timeout_ms = go_timeout_ms;
    p->netns_fd = netns_fd;
    p->mntns_fd = mntns_fd;
    p->init = init;
    p->report_fd = p->report_read = -1;
    p->warm = warm_channel >= 0;
    p->channel_fd = warm_channel;

    if (opt_cstring(exe_path, keep, &p->exe_path) < 0 || opt_cstring(cwd, keep, &p->cwd) < 0 ||
        opt_cstring(cwd_root, keep, &p->cwd_root) < 0 ||
        opt_cstring(hostname, keep, &p->hostname) < 0 || opt_cstring(oom, keep, &p->oom_score_adj) < 0 ||
        opt_cstring(loginuid, keep, &p->loginuid) < 0)
        goto done;
    if (exe_fd < 0 && !p->exe_path && warm_channel < 0) {
        PyErr_SetString(PyExc_ValueError, "exe_fd < 0 needs exe_path");
        goto done;
    }
    if (!(p->argv = to_cstrings(argv, keep, "argv")) || !(p->envp = to_cstrings(envp, keep, "envp")))
        goto done;
    if (p->argv[0] == NULL && !p->warm) {
        PyErr_SetString(PyExc_ValueError, "argv must not be empty");
        goto done;
    }
    if (warm_roots) {
        Py_ssize_t n_roots = PySequence_Length(warm_roots);
        if (n_roots < 0 || n_roots > MAX_ROOTS) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "too many roots");
            goto done;
        }
        for (Py_ssize_t i = 0; i < n_roots; i++) {
            PyObject *item = PySequence_GetItem(warm_roots, i);
            int ok = item && opt_cstring(item, keep, &p->roots[i]) == 0 && p->roots[i];
            Py_XDECREF(item);
            if (!ok) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_TypeError, "roots must be bytes");
                goto done;
            }
        }
        p->n_roots = (int)n_roots;
    }
    if (p->n_roots > 0 && !p->warm) {
        PyErr_SetString(PyExc_ValueError, "roots are a warm child's (warm_channel)");
        goto done;
    }
    if (!PyArg_ParseTuple(stdio, "iii;stdio must be (in, out, err)", &p->stdio[0], &p->stdio[1], &p->stdio[2]))
        goto done;

    if (parse_mounts(mounts, p, keep) != 0)
        goto done;
    /* A step meant for the spawn's own namespace must never reach the host's:
     * refuse a plan that would rename the host, mount in its namespace or
     * bring its loopback up (a bug in the caller, not a choice made here). */
    if (p->hostname && !(p->clone_flags & CLONE_NEWUTS)) {
        PyErr_SetString(PyExc_ValueError, "hostname needs CLONE_NEWUTS (it would rename the host)");
        goto done;
    }
    if (p->n_mounts > 0 && !(p->clone_flags & CLONE_NEWNS) && p->mntns_fd < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "mounts need CLONE_NEWNS or mntns_fd (they would change the host's mounts)");
        goto done;
    }
    if (p->loopback_up && !(p->clone_flags & CLONE_NEWNET)) {
        PyErr_SetString(PyExc_ValueError, "loopback_up needs CLONE_NEWNET");
        goto done;
    }
    if (p->init && !(p->clone_flags & CLONE_NEWPID)) {
        PyErr_SetString(PyExc_ValueError, "init needs CLONE_NEWPID (it is pid 1 of the spawn)");
        goto done;
    }

    Py_ssize_t n = PySequence_Length(cgroup_fds);
    if (n < 0 || n > MAX_CGROUP_FDS) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "too many cgroup fds");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_GetItem(cgroup_fds, i);
        p->cgroup_fds[i] = item ? (int)PyLong_AsLong(item) : -1;
        Py_XDECREF(item);
        if (PyErr_Occurred())
            goto done;
    }
    p->n_cgroup_fds = (int)n;

    n = PySequence_Length(rlimits);
    if (n < 0 || n > MAX_RLIMITS) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "too many rlimits");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_GetItem(rlimits, i);
        unsigned long long soft, hard;
        int ok = item && PyArg_ParseTuple(item, "iKK;rlimit must be (resource, soft, hard)",
                                          &p->rlimits[i].resource, &soft, &hard);
        Py_XDECREF(item);
        if (!ok)
            goto done;
        p->rlimits[i].lim.rlim_cur = (rlim_t)soft;
        p->rlimits[i].lim.rlim_max = (rlim_t)hard;
    }
    p->n_rlimits = (int)n;

    n = PySequence_Length(landlock_rules);
    if (n < 0 || n > MAX_LANDLOCK_RULES) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "too many landlock rules");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_GetItem(landlock_rules, i);
        PyObject *path;
        unsigned long long access;
        int ok = item && PyArg_ParseTuple(item, "OK;landlock rule must be (path, access)", &path, &access);
        if (ok)
            ok = opt_cstring(path, keep, &p->landlock_rules[i].path) == 0 && p->landlock_rules[i].path;
        Py_XDECREF(item);
        if (!ok) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "landlock rule path must be bytes");
            goto done;
        }
        p->landlock_rules[i].access = access;
    }
    p->n_landlock_rules = (int)n;

    if (ids != Py_None) {
        unsigned int uid, gid;
        if (!PyArg_ParseTuple(ids, "II;ids must be (uid, gid)", &uid, &gid))
            goto done;
        p->set_ids = 1;
        p->uid = uid;
        p->gid = gid;
    }
    if (filter.len % sizeof(struct sock_filter) != 0 ||
        filter.len / sizeof(struct sock_filter) > BPF_MAXINSNS) {
        PyErr_SetString(PyExc_ValueError, "seccomp_filter is not a sock_filter array");
        goto done;
    }
    p->seccomp.len = (unsigned short)(filter.len / sizeof(struct sock_filter));
    p->seccomp.filter = filter.buf;

    if (!(stack = stack_take()))
        goto done;

    /* The child resets dispositions and unblocks signals before exec. */
    pid_t pid;
    int report = -1;
    if (p->warm) {
        /* Its own memory (it waits): cloned like the init, with a buffer for
         * its request that the parent need not keep. */
        p->warm_buf = mmap(NULL, WARM_BUFFER, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
        if (p->warm_buf == MAP_FAILED) {
            p->warm_buf = NULL;
            PyErr_SetFromErrno(PyExc_OSError);
            goto done;
        }
        pid = start_init_child(stack, p);
        munmap(p->warm_buf, WARM_BUFFER);
        p->warm_buf = NULL;
        /* Not waited for: its set-up runs while the caller goes on, and its
         * first record (ready, or the step that failed) comes on the pipe. */
        report = pid >= 0 ? p->report_read : -1;
    } else if (p->init) {
        pid = start_init_child(stack, p);
        if (pid >= 0) {
            Py_BEGIN_ALLOW_THREADS
            pid = wait_init_child(pid, p, &report);
            Py_END_ALLOW_THREADS
        }
    } else {
        Py_BEGIN_ALLOW_THREADS
        pid = run_child(child_main, stack, p->clone_flags, p, 0);
        Py_END_ALLOW_THREADS
    }
    if (p->fail_step != STEP_NONE) {
        raise_setup_error(p);
        goto done;
    }
    result = p->init || p->warm ? Py_BuildValue("(ii)", pid, report) : PyLong_FromLong(pid);
    if (!result && report >= 0)
        close(report);

done:
    stack_give(stack);
    if (p) {
        PyMem_Free(p->argv);
        PyMem_Free(p->envp);
        plan_give(p);
    }
    PyBuffer_Release(&filter);
    Py_XDECREF(keep);
    return result;
}

/* ---- the go of a warm child ---- */

/* Send the request's part without blocking (the caller made the channel's
 * buffer large enough); 0, or -1 with errno (EAGAIN: it did not fit). */
static int warm_send(int channel, const char *payload, size_t size, const int *fds, int n_fds)
{
    int64_t header[2] = {WARM_MAGIC, (int64_t)size};
    union {
        char buf[CMSG_SPACE(WARM_FDS * sizeof(int))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {header, sizeof header};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = CMSG_SPACE((size_t)n_fds * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)n_fds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)n_fds * sizeof(int));
    ssize_t r;
    do {
        r = sendmsg(channel, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (r < 0 && errno == EINTR);
    if (r >= 0 && r != (ssize_t)sizeof header)
        errno = EAGAIN;
    if (r != (ssize_t)sizeof header)
        return -1;
    size_t sent = 0;
    while (sent < size) {
        r = send(channel, payload + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        sent += (size_t)r;
    }
    return 0;
}

PyDoc_STRVAR(go_doc,
"go(*, channel_fd, payload, fds) -> None\n\n"
"Give a warm child (made by spawn with warm_channel) its request: `payload`\n"
"(childsetup.pack_request's layout) and `fds` (stdin, stdout, stderr,\n"
"cancel, go[, executable]) on `channel_fd`, without blocking: the channel's\n"
"buffer holds the whole request (OSError EAGAIN if it cannot). What became of\n"
"it comes on its report pipe: with an init, the init's set-up record; without,\n"
"a record if a step failed, else the pipe hangs up at the exec.");

static PyObject *childsetup_go(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *kwlist[] = {"channel_fd", "payload", "fds", NULL};
    int channel = -1;
    Py_buffer payload = {0};
    PyObject *fd_seq = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$iy*O:go", kwlist, &channel, &payload,
                                     &fd_seq))
        return NULL;
    int fds[WARM_FDS];
    Py_ssize_t n = PySequence_Length(fd_seq);
    if (n < 5 || n > WARM_FDS || payload.len > WARM_BUFFER) {
        PyBuffer_Release(&payload);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "go needs 5 or 6 fds and a payload that fits");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_GetItem(fd_seq, i);
        fds[i] = item ? (int)PyLong_AsLong(item) : -1;
        Py_XDECREF(item);
        if (PyErr_Occurred()) {
            PyBuffer_Release(&payload);
            return NULL;
        }
    }
    int rc = warm_send(channel, payload.buf, (size_t)payload.len, fds, (int)n);
    int err = errno;
    PyBuffer_Release(&payload);
    if (rc != 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

/* ---- mount namespaces made ahead of need ---- */

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

PyDoc_STRVAR(mount_namespace_doc,
"mount_namespace(*, mounts) -> fd\n\n"
"Make a new mount namespace and run `mounts` (as spawn() takes them) in it,\n"
"in a short-lived child; return an O_CLOEXEC fd of the namespace, for one\n"
"spawn's mntns_fd. Raises SetupError(step, errno) if a step fails.");

static PyObject *childsetup_mount_namespace(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *kwlist[] = {"mounts", NULL};
    PyObject *mounts = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O:mount_namespace", kwlist, &mounts))
        return NULL;
    if (!mounts) {
        PyErr_SetString(PyExc_TypeError, "mount_namespace() needs mounts");
        return NULL;
    }

    PyObject *result = NULL;
    char *stack = NULL;
    struct plan *p = NULL;
    PyObject *keep = PyList_New(0);
    if (!keep || !(p = plan_take()))
        goto done;
    p->mntns_fd = -1;
    for (int i = 0; i < MAX_TREES; i++)
        p->trees[i] = -1;
    if (parse_mounts(mounts, p, keep) != 0)
        goto done;
    if (!(stack = stack_take()))
        goto done;

    Py_BEGIN_ALLOW_THREADS
    run_child(mntns_child, stack, CLONE_FILES | CLONE_NEWNS, p, 1);
    Py_END_ALLOW_THREADS

    /* The fd table is shared: what the child opened is ours to close. */
    for (int i = 0; i < MAX_TREES; i++) {
        if (p->trees[i] >= 0)
            close(p->trees[i]);
    }
    if (p->fail_step != STEP_NONE) {
        if (p->mntns_fd >= 0)
            close(p->mntns_fd);
        raise_setup_error(p);
        goto done;
    }
    result = PyLong_FromLong(p->mntns_fd);

done:
    stack_give(stack);
    plan_give(p);
    Py_XDECREF(keep);
    return result;
}

static PyMethodDef methods[] = {
    {"spawn", (PyCFunction)(void (*)(void))childsetup_spawn, METH_VARARGS | METH_KEYWORDS, spawn_doc},
    {"go", (PyCFunction)(void (*)(void))childsetup_go, METH_VARARGS | METH_KEYWORDS, go_doc},
    {"mount_namespace", (PyCFunction)(void (*)(void))childsetup_mount_namespace,
     METH_VARARGS | METH_KEYWORDS, mount_namespace_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "hostcapd._childsetup",
    "The child's set-up between clone and exec (see spawn).", -1, methods,
    NULL, NULL, NULL, NULL,
};

/* arg_start and arg_end (fields 48 and 49 of /proc/self/stat, after the
 * comm in parentheses, which may itself hold spaces or parentheses). */
static void read_arg_area(void)
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
        if (field == 48 || field == 49)
            values[field - 48] = strtoul(c + 1, NULL, 10);
    }
    if (field >= 49 && values[1] > values[0]) {
        arg_start = values[0];
        arg_end = values[1];
    }
}

PyMODINIT_FUNC PyInit__childsetup(void)
{
    read_arg_area();
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    SetupError = PyErr_NewExceptionWithDoc(
        "hostcapd._childsetup.SetupError",
        "A set-up step failed in the child: args are (step, errno).", PyExc_Exception, NULL);
    if (!SetupError || PyModule_AddObject(m, "SetupError", SetupError) < 0) {
        Py_XDECREF(SetupError);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(SetupError);
    if (PyModule_AddIntConstant(m, "WARM_BUFFER", WARM_BUFFER) < 0 ||
        PyModule_AddIntConstant(m, "WARM_WORDS", WARM_WORDS) < 0 ||
        PyModule_AddIntConstant(m, "WARM_MAGIC", WARM_MAGIC) < 0 ||
        PyModule_AddIntConstant(m, "INIT_SETUP_MAGIC", INIT_SETUP_MAGIC) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    /* The step names by number, for records read in Python (a warm child's). */
    PyObject *steps = PyTuple_New(N_STEPS);
    for (int i = 0; steps && i < N_STEPS; i++) {
        PyObject *name = PyUnicode_FromString(step_names[i]);
        if (!name) {
            Py_CLEAR(steps);
            break;
        }
        PyTuple_SET_ITEM(steps, i, name);
    }
    if (!steps || PyModule_AddObject(m, "STEPS", steps) < 0) {
        Py_XDECREF(steps);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
