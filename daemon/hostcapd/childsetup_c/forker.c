#include "childsetup.h"

#include <linux/futex.h>
#include <stdio.h> /* sscanf, for /proc/self/maps */

/*
 * The forker: the inits' small parent.
 *
 * An init is cloned like fork (it outlives the exec: decision 0023), and a
 * fork's cost grows with the caller's address space: the kernel copies
 * every mapping (a Python process has hundreds, one per segment of each
 * loaded object), finding what not to copy reads /proc/self/maps, and the
 * init's exit tears its copy down again; all three on a spawn's path. So
 * the caller's first init clones the forker instead, once (clone_small):
 * a process that shares the caller's fd table (CLONE_FILES: every fd number
 * a plan names is the same there), unmaps every object it does not run
 * code of, and waits. For each init the caller writes the plan, its strings
 * packed, into memory it shares with the forker and wakes it (a futex); the
 * forker copies the plan into its own memory, clones the init from there
 * (CLONE_PARENT: the init is the caller's child, reaped and signalled as
 * before) and hands back its pid. The forker holds nothing of its own,
 * decides nothing, and dies with the caller (PR_SET_PDEATHSIG); if it is
 * gone, the caller clones the init itself as before, and starts a new
 * forker for the next one. The shared memory is not copied into an init
 * (MADV_DONTFORK in the forker). */

#define FORKER_ARENA (4 * 1024 * 1024)
#define FORKER_STACK (64 * 1024)
#define FORKER_WAIT_MS 200
#define FORKER_GIVE_UP_MS 10000

struct forker_shared {
    uint32_t request, done, ready;
    pid_t parent;
    int cpu;               /* the CPU to clone the init on, or -1 */
    pid_t pid;             /* the init's, or -1 */
    int err;
    size_t used;           /* of the arena */
    char *own_arena;       /* where the forker's copy of the arena is */
    struct plan plan;
};

int forker_enabled = 1;
static struct forker_shared *shared; /* and the arena after it */
static size_t shared_size;
static pid_t forker_pid = -1;
static uint32_t forker_seq;
static int forker_cpu = -1; /* the CPU it is pinned to; -1 none, -2 unknown */
static int forker_failed; /* it could not be started: do not try again */
static pid_t forker_owner; /* the process that started it (not a fork of it) */

static long futex(uint32_t *word, int op, uint32_t value, const struct timespec *timeout)
{
    return syscall(SYS_futex, word, op, value, timeout, NULL, 0);
}

static char *shared_arena(void)
{
    return (char *)shared + ((sizeof *shared + 4095) & ~4095UL);
}

/* The loaded objects the forker and the inits run code of: this module,
 * libc and the loader (every symbol is bound at load: Python loads an
 * extension with RTLD_NOW). */
#define MAX_OTHER 2048

struct object_spans {
    struct span spans[64];
    int n;
    /* the writable segments of every other object (their .bss is anonymous) */
    struct span other[MAX_OTHER];
    int n_other, other_full;
};

static int add_kept_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct object_spans *o = arg;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    int keep = strstr(name, "/libc.so") || strstr(name, "/ld-linux");
    for (int i = 0; !keep && i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        unsigned long start = info->dlpi_addr + ph->p_vaddr;
        unsigned long here = (unsigned long)(void *)forker_clone;
        keep = ph->p_type == PT_LOAD && here >= start && here < start + ph->p_memsz;
    }
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || (!keep && !(ph->p_flags & PF_W)))
            continue;
        unsigned long start = info->dlpi_addr + ph->p_vaddr;
        struct span seg = {start & ~4095UL, (start + ph->p_memsz + 4095UL) & ~4095UL};
        if (keep && o->n < 64)
            o->spans[o->n++] = seg;
        else if (!keep && o->n_other < MAX_OTHER)
            o->other[o->n_other++] = seg;
        else if (!keep)
            o->other_full = 1;
    }
    return 0;
}

#define MAX_UNMAP 4096

/* What the forker unmaps first (see forker_plan_shrink). */
static struct span drop[MAX_UNMAP];
static int n_drop;

/* On by default: the forker also trims what every init's fork would copy
 * and tear down again, none of which an init or the forker reads: other
 * threads' guard pages and reserved malloc arenas (no access, but a mapping
 * each to copy), the caller's stack frames below where its main thread's
 * stack began (the command line and environment above it stay: an init
 * overwrites its copy of the command line), and the scratch the caller
 * read its maps into. The A/B's switch (forker_restart). */
int forker_trim = 1;
static int trimming;
static struct span trim_stack;
static struct object_spans kept_objects;
static char maps_buf[256 * 1024];

/* Every private file mapping but those objects' (python's, the other
 * extensions' and libraries', the locale files), found by the caller before
 * it clones the forker (the loader's lists are on the heap, which the
 * forker does not get), and unmapped by the forker: fewer mappings for
 * each init's fork to copy and its exit to tear down. */
static void forker_plan_shrink(void)
{
    char *buf = maps_buf;
    const size_t buf_size = sizeof maps_buf;
    kept_objects.n = kept_objects.n_other = kept_objects.other_full = 0;
    n_drop = 0;
    trimming = forker_trim;
    trim_stack.start = trim_stack.end = 0;
    unsigned long tcb = (unsigned long)pthread_self();
    dl_iterate_phdr(add_kept_object, &kept_objects);
    if (kept_objects.n < 3)
        return; /* not the three objects found: keep everything */
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fd, buf + len, buf_size - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
        if (len == buf_size - 1) {
            close(fd);
            return; /* too large to be sure of: keep everything */
        }
    }
    close(fd);
    buf[len] = '\0';
    for (char *line = buf; *line && n_drop < MAX_UNMAP;) {
        char *next = strchr(line, '\n');
        if (next)
            *next = '\0';
        unsigned long start, end, offset, inode;
        char perms[8];
        unsigned int major, minor;
        int path_at = 0;
        int parsed = sscanf(line, "%lx-%lx %7s %lx %x:%x %lu %n", &start, &end, perms, &offset,
                            &major, &minor, &inode, &path_at) >= 7;
        int anon = parsed && inode == 0 && (path_at == 0 || line[path_at] == '\0');
        unsigned long tls_from = tcb > (64UL << 10) ? tcb - (64UL << 10) : 0;
        unsigned long tls_to = tcb + (64UL << 10);
        if (anon && perms[3] == 'p' && n_drop < MAX_UNMAP - 2) {
            /* A kept object's .bss in one mapping with the anonymous memory
             * next to it (the kernel merges them): the rest is not its. */
            for (int i = 0; i < kept_objects.n; i++) {
                const struct span *k = &kept_objects.spans[i];
                if (!(start < k->end && k->start < end))
                    continue;
                if (start < k->start && !(start < tls_to && tls_from < k->start)) {
                    drop[n_drop].start = start;
                    drop[n_drop++].end = k->start;
                }
                if (k->end < end && !(k->end < tls_to && tls_from < end)) {
                    drop[n_drop].start = k->end;
                    drop[n_drop++].end = end;
                }
                break;
            }
        }
        if (trimming && parsed && path_at > 0 && strcmp(line + path_at, "[stack]") == 0 &&
            start_stack > start && start_stack < end) {
            trim_stack.start = start;
            trim_stack.end = start_stack & ~4095UL;
        }
        if (trimming && anon && strcmp(perms, "---p") == 0 && n_drop < MAX_UNMAP &&
            !(start < tls_to && tls_from < end)) {
            drop[n_drop].start = start; /* a guard page, a reserved arena */
            drop[n_drop++].end = end;
        } else if (parsed && perms[3] == 'p' && !spans_overlap(start, end, kept_objects.spans, kept_objects.n)) {
            /* A file mapping of another object, or the anonymous rest of
             * another object's writable segment (its .bss), away from the
             * thread's TLS. */
            int other_bss = anon && !kept_objects.other_full &&
                            spans_overlap(start, end, kept_objects.other, kept_objects.n_other) &&
                            !(start < tls_to && tls_from < end);
            if (inode != 0 || other_bss) {
                drop[n_drop].start = start;
                drop[n_drop++].end = end;
            }
        }
        if (!next)
            break;
        line = next + 1;
    }
}

/* The pages of [start, start + len) dropped (read again, they are zeros). */
static void forget(const void *start, size_t len)
{
    unsigned long from = ((unsigned long)start + 4095UL) & ~4095UL;
    unsigned long to = ((unsigned long)start + len) & ~4095UL;
    if (to > from)
        madvise((void *)from, to - from, MADV_DONTNEED);
}

/* The forker's life (see above). Every signal is blocked (clone_small). */
static int forker_main(void *arg)
{
    (void)arg;
    struct forker_shared *sh = shared;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != sh->parent)
        _exit(0);
    /* Its children have the caller's name, as when the caller cloned them
     * (an init renames itself later; a warm child keeps it while it waits). */
    char caller_name[17] = {0};
    prctl(PR_GET_NAME, caller_name, 0, 0, 0);
    prctl(PR_SET_NAME, "hostcap-forker", 0, 0, 0);
    struct plan *plan = mmap(NULL, sizeof *plan, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *arena = mmap(NULL, FORKER_ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
    char *stack = mmap(NULL, CHILD_STACK_SIZE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    char *warm_buf = mmap(NULL, WARM_BUFFER, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                          -1, 0);
    if (plan == MAP_FAILED || arena == MAP_FAILED || stack == MAP_FAILED ||
        warm_buf == MAP_FAILED || madvise(sh, shared_size, MADV_DONTFORK) != 0)
        _exit(1);
    for (int i = 0; i < n_drop; i++)
        munmap((void *)drop[i].start, drop[i].end - drop[i].start);
    if (trimming) {
        if (trim_stack.end > trim_stack.start)
            madvise((void *)trim_stack.start, trim_stack.end - trim_stack.start, MADV_DONTNEED);
        forget(maps_buf, sizeof maps_buf);
        forget(drop, sizeof drop);
        forget(&kept_objects, sizeof kept_objects);
    }
    sh->own_arena = arena;
    __atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
    futex(&sh->ready, FUTEX_WAKE, 1, NULL);
    uint32_t seen = 0;
    /* How far earlier plans wrote the arena: the bytes past the current
     * plan's are cleared before its init is forked, so that no init (each a
     * copy of this arena) holds what earlier spawns asked for, whichever
     * tenant's they were (argv, environment, paths). */
    size_t written = 0;
    for (;;) {
        uint32_t req = __atomic_load_n(&sh->request, __ATOMIC_ACQUIRE);
        if (req == seen) {
            futex(&sh->request, FUTEX_WAIT, seen, NULL);
            continue;
        }
        seen = req;
        memcpy(plan, &sh->plan, sizeof *plan);
        memcpy(arena, shared_arena(), sh->used);
        if (written > sh->used)
            memset(arena + sh->used, 0, written - sh->used);
        written = sh->used;
        plan->warm_buf = plan->warm ? warm_buf : NULL;
        /* CLONE_PARENT: the caller's child, with the forker's exit signal
         * (SIGCHLD, as the caller cloned it). */
        prctl(PR_SET_NAME, caller_name, 0, 0, 0);
        pid_t pid = clone(child_main, stack + CHILD_STACK_SIZE,
                          CLONE_PARENT | (plan->clone_flags & ~0xff), plan);
        sh->err = errno;
        sh->pid = pid;
        prctl(PR_SET_NAME, "hostcap-forker", 0, 0, 0);
        __atomic_store_n(&sh->done, seen, __ATOMIC_RELEASE);
        futex(&sh->done, FUTEX_WAKE, 1, NULL);
    }
    return 0;
}

/* Is the forker alive: still the caller's child, not exited? (No fd is held
 * for it: the caller's fds are the caller's. A pid reused by another child
 * of the caller reads as alive; forker_wait bounds its wait for that.) */
static int forker_alive(void)
{
    siginfo_t info;
    info.si_pid = 0;
    if (forker_pid <= 0 ||
        waitid(P_PID, (id_t)forker_pid, &info, WEXITED | WNOHANG | WNOWAIT | __WALL) != 0)
        return 0;
    return info.si_pid == 0;
}

static void forker_gone(void)
{
    if (forker_pid > 0) {
        int status;
        while (waitpid(forker_pid, &status, WNOHANG | __WALL) < 0 && errno == EINTR)
            ;
    }
    forker_pid = -1;
}

/* Wait until *word is `want`; 0, or -1 if the forker is gone (or has not
 * answered for FORKER_GIVE_UP_MS). */
static int forker_wait(uint32_t *word, uint32_t want)
{
    for (int waited = 0;; waited += FORKER_WAIT_MS) {
        uint32_t now = __atomic_load_n(word, __ATOMIC_ACQUIRE);
        if (now == want)
            return 0;
        if (waited >= FORKER_GIVE_UP_MS)
            return -1;
        struct timespec t = {0, FORKER_WAIT_MS * 1000000L};
        if (futex(word, FUTEX_WAIT, now, &t) != 0 && errno == ETIMEDOUT && !forker_alive())
            return __atomic_load_n(word, __ATOMIC_ACQUIRE) == want ? 0 : -1;
    }
}

static int forker_start(void)
{
    if (!shared) {
        shared_size = ((sizeof *shared + 4095) & ~4095UL) + FORKER_ARENA;
        void *m = mmap(NULL, shared_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return -1;
        shared = m;
    }
    memset(shared, 0, sizeof *shared);
    shared->parent = getpid();
    forker_seq = 0;
    char *stack = mmap(NULL, FORKER_STACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
        return -1;
    struct span own[] = {{(unsigned long)stack, (unsigned long)stack + FORKER_STACK}};
    forker_plan_shrink();
    pid_t pid = clone_small(forker_main, stack + FORKER_STACK, CLONE_FILES | SIGCHLD, NULL, own, 1);
    munmap(stack, FORKER_STACK);
    if (pid < 0)
        return -1;
    forker_pid = pid;
    forker_owner = getpid();
    forker_cpu = -1;
    if (forker_wait(&shared->ready, 1) != 0) {
        kill(pid, SIGKILL);
        forker_gone();
        return -1;
    }
    return 0;
}

int forker_clone(struct plan *p, pid_t *pid)
{
    if (!forker_enabled || forker_failed)
        return -1;
    if (forker_pid > 0 && getpid() != forker_owner) {
        /* A fork of the process that started it: that forker is not ours,
         * nor is the memory it reads. */
        forker_pid = -1;
        shared = NULL;
    }
    if (forker_pid > 0 && !forker_alive())
        forker_gone(); /* it died: a new one */
    if (forker_pid <= 0 && forker_start() != 0) {
        forker_failed = 1;
        return -1;
    }
    struct plan saved = *p;
    size_t used;
    if (plan_pack_at(p, shared_arena(), shared->own_arena, FORKER_ARENA, &used) != 0)
        return -1; /* too large for the arena: the caller clones */
    shared->cpu = init_placement(p);
    memcpy(&shared->plan, p, sizeof *p);
    shared->plan.warm_buf = NULL;
    shared->used = used;
    plan_restore(p, &saved);
    p->restore_affinity = shared->plan.restore_affinity;
    /* The forker runs on the caller's CPU, which the caller leaves at once
     * to wait for it (as for a vfork child), and the init is born there
     * (see init_placement): neither waits behind other work on another
     * CPU. The forker is pinned so while it sleeps; it runs only when woken. */
    if (shared->cpu >= 0 && shared->cpu != forker_cpu) {
        cpu_set_t here;
        CPU_ZERO(&here);
        CPU_SET(shared->cpu, &here);
        forker_cpu = sched_setaffinity(forker_pid, sizeof here, &here) == 0 ? shared->cpu : -2;
    } else if (shared->cpu < 0 && forker_cpu != -1) {
        /* Not pinned (a warm child): born with the caller's affinity. */
        cpu_set_t mine;
        if (sched_getaffinity(0, sizeof mine, &mine) == 0 &&
            sched_setaffinity(forker_pid, sizeof mine, &mine) == 0)
            forker_cpu = -1;
        else
            forker_cpu = -2;
    }
    if (shared->cpu < 0 && forker_cpu != -1)
        return -1; /* it could not be unpinned: the caller clones this one */
    uint32_t req = ++forker_seq;
    __atomic_store_n(&shared->request, req, __ATOMIC_RELEASE);
    futex(&shared->request, FUTEX_WAKE, 1, NULL);
    if (forker_wait(&shared->done, req) != 0) {
        /* Gone with the request: it may have cloned the init, so this
         * spawn fails rather than run twice (an init left behind is the
         * caller's child, and without its go it never execs). */
        if (forker_alive())
            kill(forker_pid, SIGKILL); /* stuck: not to be used again */
        forker_gone();
        *pid = -1;
        errno = ECHILD;
        return 0;
    }
    *pid = shared->pid;
    errno = shared->err;
    return 0;
}

/* The forker ended and a new one started (with forker_trim as it is now):
 * the A/B's, outside its timing; 0, or -1 if none could be started. */
int forker_restart(void)
{
    if (forker_pid > 0 && getpid() == forker_owner) {
        kill(forker_pid, SIGKILL);
        int status;
        while (waitpid(forker_pid, &status, __WALL) < 0 && errno == EINTR)
            ;
    }
    forker_pid = -1;
    forker_failed = 0;
    if (!forker_enabled)
        return 0;
    return forker_start() == 0 ? 0 : (forker_failed = 1, -1);
}

/* The memory shared with the forker, kept out of an init the caller clones
 * itself (hide), or back (after the clone). */
void forker_hide(int hide)
{
    if (shared)
        madvise(shared, shared_size, hide ? MADV_DONTFORK : MADV_DOFORK);
}
