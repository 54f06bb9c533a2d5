#include "childsetup.h"

#include <stdio.h> /* sscanf, for /proc/self/maps */

/*
 * The plan and the child's stack, kept for the next call.
 *
 * Each call needs a plan (the child writes its result there) and a stack for
 * the child. Mapping and unmapping them per spawn cost more than the rest of
 * the parent's side (the munmap of pages the child touched on another CPU
 * flushes TLBs): one of each is kept, taken and given back with the GIL held,
 * so a concurrent call (threads, tests) maps its own. A mapping that fails
 * is NULL with errno (the caller raises). */
static struct plan *kept_plan;
static char *kept_stack;

struct plan *plan_take(void)
{
    struct plan *p = kept_plan;
    kept_plan = NULL;
    if (!p) {
        p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return NULL;
    }
    memset(p, 0, sizeof *p);
    return p;
}

void plan_give(struct plan *p)
{
    if (!p)
        return;
    if (!kept_plan)
        kept_plan = p;
    else
        munmap(p, sizeof *p);
}

char *stack_take(void)
{
    char *stack = kept_stack;
    kept_stack = NULL;
    if (!stack) {
        stack = mmap(NULL, CHILD_STACK_SIZE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (stack == MAP_FAILED)
            return NULL;
    }
    return stack;
}

void stack_give(char *stack)
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
pid_t run_child(int (*fn)(void *), char *stack, int flags, struct plan *p, int reap)
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
 * Used to start the forker (forker.c), which clones the inits from its own
 * small memory, and for an init when there is no forker. The init is cloned
 * like fork: the kernel copies the page tables of every
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

/* Where the copies are written (base) and where the child will find them
 * (at): the same place, or the forker's own copy of the arena (forker.c). */
struct arena {
    char *base, *at;
    size_t size, used;
};

/* Room for n bytes: where to write them, and in *child where the child
 * reads them. */
static void *arena_take(struct arena *a, size_t n, size_t align, void **child)
{
    size_t at = (a->used + align - 1) & ~(align - 1);
    if (at + n > a->size)
        return NULL;
    a->used = at + n;
    *child = a->at + at;
    return a->base + at;
}

static const char *arena_str(struct arena *a, const char *s, int *ok)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    void *child;
    char *d = arena_take(a, n, 1, &child);
    if (!d) {
        *ok = 0;
        return s;
    }
    memcpy(d, s, n);
    return child;
}

static char **arena_vec(struct arena *a, char **v, int *ok)
{
    size_t n = 0;
    while (v[n])
        n++;
    void *child;
    char **out = arena_take(a, (n + 1) * sizeof *out, sizeof(void *), &child);
    if (!out) {
        *ok = 0;
        return v;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = (char *)arena_str(a, v[i], ok);
    out[n] = NULL;
    return child;
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

/* The arena's size for the strings, vectors and seccomp program of p. */
static size_t plan_pack_size(struct plan *p)
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
    return need;
}

/* Copy every string, vector and the seccomp program the child reads into
 * the arena and point the plan at the copies (as the child will see them);
 * 0, or -1 (the arena was too small: the caller restores the plan). */
static int plan_pack_into(struct plan *p, struct arena *a)
{
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
        void *child;
        struct sock_filter *f = arena_take(a, n, 16, &child);
        if (f) {
            memcpy(f, p->seccomp.filter, n);
            p->seccomp.filter = child;
        } else {
            ok = 0;
        }
    }
    return ok ? 0 : -1;
}

/* A fresh arena for p, packed; 0, or -1 (nothing mapped, plan unchanged
 * where the copy failed: the full-copy clone still works). */
static int plan_pack(struct plan *p, struct arena *a)
{
    long page = sysconf(_SC_PAGESIZE);
    a->size = (plan_pack_size(p) + (size_t)page - 1) & ~((size_t)page - 1);
    a->used = 0;
    a->base = mmap(NULL, a->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a->base == MAP_FAILED) {
        a->base = NULL;
        return -1;
    }
    a->at = a->base;
    return plan_pack_into(p, a);
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

int spans_overlap(unsigned long start, unsigned long end, const struct span *spans, int n)
{
    for (int i = 0; i < n; i++) {
        if (start < spans[i].end && spans[i].start < end)
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
                !spans_overlap(start, end, keep, n_keep)) {
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

/* Clone `fn` like fork, with the GIL held, copying into the child only the
 * caller's `own` spans, the TLS and the loaded objects' writable segments of
 * its anonymous memory (see above); its pid, or -1 with errno. Every signal
 * is blocked in the child. */
pid_t clone_small(int (*fn)(void *), char *stack_top, int flags, void *arg,
                  const struct span *own, int n_own)
{
    static struct span marked[MAX_DONTFORK];
    static struct span spans[MAX_KEEP];
    int n_marked = 0;
    if (n_own >= 0 && n_own < MAX_KEEP - 1) {
        unsigned long tcb = (unsigned long)pthread_self();
        struct keep_list k = {spans, 0, 0};
        for (int i = 0; i < n_own; i++)
            spans[k.n++] = own[i];
        spans[k.n].start = tcb > (1UL << 20) ? tcb - (1UL << 20) : 0;
        spans[k.n++].end = tcb + (64UL << 10);
        dl_iterate_phdr(add_writable_segments, &k);
        if (!k.full)
            n_marked = mark_dontfork(spans, k.n, marked);
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = clone(fn, stack_top, flags, arg);
    int clone_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    unmark_dontfork(marked, n_marked);
    errno = clone_errno;
    return pid;
}

/* The plan's pointers back at the caller's values after a pack. */
static void plan_unpack(struct plan *p, const struct plan *saved)
{
    p->exe_path = saved->exe_path;
    p->cwd_root = saved->cwd_root;
    p->cwd = saved->cwd;
    p->hostname = saved->hostname;
    p->oom_score_adj = saved->oom_score_adj;
    p->loginuid = saved->loginuid;
    memcpy(p->mounts, saved->mounts, sizeof p->mounts);
    memcpy(p->landlock_rules, saved->landlock_rules, sizeof p->landlock_rules);
    memcpy(p->roots, saved->roots, sizeof p->roots);
    p->seccomp = saved->seccomp;
    p->argv = saved->argv;
    p->envp = saved->envp;
}

/* p packed into an arena the child will find at `at` (the forker's copy);
 * 0, or -1 with the plan unchanged. */
int plan_pack_at(struct plan *p, char *base, char *at, size_t size, size_t *used)
{
    struct plan saved = *p;
    struct arena a = {base, at, size, 0};
    if (plan_pack_size(p) > size || plan_pack_into(p, &a) != 0) {
        plan_unpack(p, &saved);
        return -1;
    }
    *used = a.used;
    return 0;
}

void plan_restore(struct plan *p, const struct plan *saved)
{
    plan_unpack(p, saved);
}

/* Born on the caller's CPU, which it leaves at once to wait for it, the init
 * runs at once (as a vfork child does), rather than being queued behind
 * other work on another CPU; it and the command's process take back the
 * caller's affinity (p->affinity) once the command's process is started.
 * The CPU to be born on, or -1. */
int init_placement(struct plan *p)
{
    int cpu = p->warm ? -1 : sched_getcpu(); /* a warm child waits: not pinned */
    p->restore_affinity = cpu >= 0 && sched_getaffinity(0, sizeof p->affinity, &p->affinity) == 0;
    return p->restore_affinity ? cpu : -1;
}

/* Clone the init with the GIL held (see above), through the forker when it
 * runs (forker.c); its pid, or -1 with errno. */
pid_t clone_init_small(char *stack, struct plan *p)
{
    pid_t pid;
    if (forker_clone(p, &pid) == 0)
        return pid;
    struct arena a = {NULL, NULL, 0, 0};
    struct plan saved = *p;
    int packed = plan_pack(p, &a) == 0;
    if (!packed)
        plan_unpack(p, &saved); /* the copy failed partway: the full copy then */
    struct span own[] = {
        {(unsigned long)p, (unsigned long)p + sizeof *p},
        {(unsigned long)a.base, (unsigned long)a.base + a.size},
        {(unsigned long)stack, (unsigned long)stack + CHILD_STACK_SIZE},
        {(unsigned long)p->warm_buf, (unsigned long)p->warm_buf + (p->warm_buf ? WARM_BUFFER : 0)},
    };
    int cpu = init_placement(p);
    if (cpu >= 0) {
        cpu_set_t here;
        CPU_ZERO(&here);
        CPU_SET(cpu, &here);
        if (sched_setaffinity(0, sizeof here, &here) != 0)
            p->restore_affinity = 0;
    }
    forker_hide(1);
    pid = clone_small(child_main, stack + CHILD_STACK_SIZE, SIGCHLD | p->clone_flags, p, own,
                      packed ? (int)(sizeof own / sizeof own[0]) : -1);
    int clone_errno = errno;
    forker_hide(0);
    if (p->restore_affinity)
        sched_setaffinity(0, sizeof p->affinity, &p->affinity);
    /* The parent's plan points at Python's values again (argv and envp are
     * freed by the caller); the init has its own copy of the arena. */
    if (packed)
        plan_unpack(p, &saved);
    if (a.base)
        munmap(a.base, a.size);
    errno = clone_errno;
    return pid;
}
