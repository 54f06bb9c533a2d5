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
pid_t clone_init_small(char *stack, struct plan *p)
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
