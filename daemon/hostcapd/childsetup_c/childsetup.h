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
 *
 * This header holds the plan (what the child applies) and the step list; one
 * file per job, as nsjail keeps one per mechanism:
 *   setup.c   the set-up sequence (child_main) and its steps, to the exec
 *   init.c    the init that stays pid 1 of a spawn's pid namespace
 *   warm.c    the warm child's wait for its request, and the go that sends it
 *   pools.c   the kept plan and stack, the vfork-style clone, the init's
 *             small copy of the spawner (its arena and MADV_DONTFORK marks)
 *   forker.c  the inits' small parent, which clones them from its own
 *             small memory (decision 0023)
 *   mntns.c   mount namespaces made ahead of need
 *   args.c    Python values into the plan's bounded C arrays
 *   module.c  the Python module: spawn, go, mount_namespace, SetupError
 * Only args.c and module.c include Python.h: what runs in the child does not.
 */
#ifndef HOSTCAP_CHILDSETUP_H
#define HOSTCAP_CHILDSETUP_H

/* The feature macros Python.h's pyconfig.h sets, so every file of the
 * extension sees the same libc declarations and struct layouts. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#ifndef _FILE_OFFSET_BITS
#define _FILE_OFFSET_BITS 64
#endif

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
#include <linux/futex.h>
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
#define MAX_LANDLOCK_RULES 12

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
    X(STEP_WARM, "warm")                    \
    X(STEP_IPCNS, "ipcns")                  \
    X(STEP_TTY, "tty")

#define STEP_ENUM(id, name) id,
enum step { SETUP_STEPS(STEP_ENUM) N_STEPS };
#undef STEP_ENUM
/* A zeroed plan has failed at no step. */
_Static_assert(STEP_NONE == 0, "STEP_NONE must be 0");

/* Its name, as SetupError carries it (module.c). */
extern const char *const step_names[N_STEPS];


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
    int mntns_copy;            /* with mntns_fd: then unshare a copy of it (an environment's:
                                  its /tmp and /dev/shm shared, this spawn's /proc its own) */
    int ipcns_fd;              /* >= 0: join this IPC namespace (an environment's) */
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
    /* Set in a warm init's command process (see init_main): its failures
     * are left in the plan for the init to report, not written. */
    int in_command;
    /* warm_preclone as it was when the plan was made (the forker's copy of
     * the global is its own). */
    int preclone;
    /* preclone_vfork as it was: the old wait across the idle period (the
     * A/B's; see preclone_and_wait). */
    int preclone_vfork;
    /* init_setsid_enabled as it was: an init in a session of its own (the
     * A/B's old way), or only a process group (see child_main). */
    int init_setsid;
    int channel_fd;
    const char *roots[MAX_ROOTS];
    int root_fds[MAX_ROOTS];
    int n_roots;
    char *warm_buf;
    /* the caller's CPU affinity, which the init takes back (see clone_init_small) */
    int restore_affinity;
    cpu_set_t affinity;
    /* A terminal (pty.c): the socket its master is sent on (>= 0: a tty
     * spawn), its size, and the slave, held from pty_open to pty_take. */
    int tty_fd;
    int tty_rows, tty_cols;
    int tty_slave;
    /* result, written by the child (shared memory) */
    volatile int fail_step;
    volatile int fail_errno;
};

/* ---- setup.c: the set-up sequence ---- */

/* The child: runs on its own stack, syscalls and async-signal-safe calls only. */
int child_main(void *arg);
/* A failed step: recorded in the plan and, from an init or a warm child,
 * sent on its report pipe; then _exit. */
void fail_now(struct plan *p, int step) __attribute__((noreturn));
#define FAIL(s) fail_now(p, (s))
int do_mount(struct plan *p, const struct mount_op *m);
int apply_stdio(struct plan *p);
int apply_rlimits(struct plan *p);
int apply_cwd(struct plan *p);
/* close_fds, the cancel/go gate, the exec; the step that failed otherwise. */
int last_steps(struct plan *p);
/* The spawner's command-line area, which an init overwrites (see setup.c),
 * and where its main thread's stack began (0: unknown). */
void read_arg_area(void);
extern unsigned long start_stack;

/* ---- pty.c: a tty spawn's terminal ---- */

/* As root after the mounts: devpts, master and slave, the master sent. */
int pty_open(struct plan *p);
/* In the command's process: its session's controlling terminal and 0-2. */
int pty_take(struct plan *p);

/* ---- init.c: pid 1 of a spawn's pid namespace ---- */

#define INIT_SETUP_MAGIC 0x31534348 /* "HCS1" */
#define INIT_EXIT_MAGIC 0x31454348  /* "HCE1" */

int init_main(struct plan *p);
void write_record(int fd, const int64_t *rec, size_t n);
void init_report_setup(int fd, int step, int err);
/* The parent's side: clone the init, then read its set-up record. */
pid_t start_init_child(char *stack, struct plan *p);
pid_t wait_init_child(pid_t pid, struct plan *p, int *report);

/* ---- warm.c: a child set up ahead of need ---- */

#define WARM_MAGIC 0x31574348 /* "HCW1" */
#define WARM_WORDS 7

/* The child's side: wait for the request's part and apply it. */
void warm_wait(struct plan *p);
/* warm_wait's two halves: what the process that waits keeps (in a warm
 * init, before it clones its command's process), and the wait itself. */
void warm_prepare(struct plan *p);
void warm_receive(struct plan *p);
/* A warm init clones its command's process before the request (see
 * init_main); a switch for the A/B. */
extern int warm_preclone;
extern int preclone_vfork;
/* Whether an init makes a session of its own (see child_main): the A/B's. */
extern int init_setsid_enabled;
/* A warm init's command process, dropped before its request: fail_step. */
#define STEP_DROPPED (-1)
/* The parent's side: send it; 0, or -1 with errno. */
int warm_send(int channel, const char *payload, size_t size, const int *fds, int n_fds);

/* ---- pools.c: the plan, the stack and the clones ---- */

/* NULL with errno if a mapping failed. */
struct plan *plan_take(void);
void plan_give(struct plan *p);
char *stack_take(void);
void stack_give(char *stack);
pid_t run_child(int (*fn)(void *), char *stack, int flags, struct plan *p, int reap);
/* Clone an init: through the forker, else like fork from the caller. */
pid_t clone_init_small(char *stack, struct plan *p);
struct span {
    unsigned long start, end;
};
/* Whether [start, end) overlaps any of the n spans. */
int spans_overlap(unsigned long start, unsigned long end, const struct span *spans, int n);
/* Clone fn like fork, copying of the caller's anonymous memory only `own`,
 * the TLS and the loaded objects' writable segments (n_own < 0: all). */
pid_t clone_small(int (*fn)(void *), char *stack_top, int flags, void *arg,
                  const struct span *own, int n_own);
/* p's strings packed at base, pointing where the child finds them (at). */
int plan_pack_at(struct plan *p, char *base, char *at, size_t size, size_t *used);
void plan_restore(struct plan *p, const struct plan *saved);
/* The CPU an init is born on (or -1), the caller's affinity in p. */
int init_placement(struct plan *p);

/* ---- forker.c: the inits' small parent ---- */

/* Clone the init through the forker: 0 with *pid (or -1 with errno: the
 * clone failed), or -1 if the forker cannot take it (the caller clones). */
int forker_clone(struct plan *p, pid_t *pid);
/* Whether inits are cloned through the forker (a switch for the A/B). */
extern int forker_enabled;
void forker_hide(int hide);
/* Whether a new forker trims its copy of the caller (see forker_trim_spans),
 * and a new forker with that setting now (the A/B's: 0, or -1). */
extern int forker_trim;
int forker_restart(void);

/* ---- mntns.c: mount namespaces made ahead of need ---- */

/* Run p->mounts in a new mount namespace; its fd in p->mntns_fd, or the
 * failure in the plan. */
void mntns_make(struct plan *p, char *stack);
/* The same for a copy of the base p->mntns_fd (p->mntns_copy), made by the
 * calling thread itself, which must have no other thread (see there). */
void mntns_copy_here(struct plan *p);

#endif
