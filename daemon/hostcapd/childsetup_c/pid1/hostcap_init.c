/*
 * hostcap-init: the program a spawn's init execs once its command exec'd
 * (init.c, init_exec). Built freestanding (no libc, no TLS, no relocations:
 * raw system calls only) into a static executable of a few KiB, which the
 * extension carries as bytes (setup.py) and loads into a sealed memfd. It
 * is the init's life after the command started, as init.c's init_loop was:
 * with every signal blocked (the mask survives the exec) it forwards each
 * signal it takes to the command's process group, reaps every child
 * (orphans too), and when the command ends writes the command's wait status
 * and rusage on its report pipe and exits with the same status as far as a
 * pid 1 can.
 *
 * Why an exec: the init needs memory of its own to outlive its command's
 * exec; a fork of the spawner's small forker gave it one, at the price of
 * the forker's wake-up, the fork's copy, its faults and a larger exit. The
 * exec gives it a fresh address space of four mappings instead, and the
 * spawn's pid 1 can then be cloned vfork-style, as a spawn without an init
 * is (decision 0023's addendum).
 *
 * Its inputs: fd 3, the report pipe (its only fd); the environment's one
 * string "HOSTCAP_COMMAND=<pid>", the command's pid in the namespace
 * (/proc/1/environ is readable only by whom may ptrace the init: nobody in
 * the spawn; its command line is "hostcap-init", as before). It is executed
 * from a file its uid may execute but not read, so the kernel makes it not
 * dumpable from the exec on; it says so again first thing. */

#if !defined(__x86_64__)
#error "hostcap-init is written for x86_64 (its system calls)"
#endif

typedef long i64;
typedef unsigned long u64;

#define NR_write 1
#define NR_rt_sigaction 13
#define NR_rt_sigprocmask 14
#define NR_exit 60
#define NR_wait4 61
#define NR_kill 62
#define NR_prctl 157
#define NR_rt_sigtimedwait 128
#define NR_sched_setaffinity 203

#define REPORT_FD 3
#define EXIT_MAGIC 0x31454348 /* "HCE1", init.c's INIT_EXIT_MAGIC */
#define SIGKILL_ 9
#define SIGCHLD_ 17
#define WNOHANG_ 1
#define WALL_ 0x40000000
#define PR_SET_NAME_ 15
#define PR_SET_DUMPABLE_ 4
#define SIG_SETMASK_ 2
#define SIG_UNBLOCK_ 1
#define EINTR_ 4

static inline i64 sys6(i64 n, i64 a, i64 b, i64 c, i64 d, i64 e, i64 f)
{
    i64 r;
    register i64 r10 __asm__("r10") = d;
    register i64 r8 __asm__("r8") = e;
    register i64 r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return r;
}
#define sys1(n, a) sys6(n, (i64)(a), 0, 0, 0, 0, 0)
#define sys2(n, a, b) sys6(n, (i64)(a), (i64)(b), 0, 0, 0, 0)
#define sys3(n, a, b, c) sys6(n, (i64)(a), (i64)(b), (i64)(c), 0, 0, 0)
#define sys4(n, a, b, c, d) sys6(n, (i64)(a), (i64)(b), (i64)(c), (i64)(d), 0, 0)

/* The kernel's struct rusage on x86_64. */
struct timeval_ {
    i64 sec, usec;
};
struct rusage_ {
    struct timeval_ utime, stime;
    i64 maxrss, ixrss, idrss, isrss, minflt, majflt, nswap, inblock, oublock, msgsnd, msgrcv,
        nsignals, nvcsw, nivcsw;
};
struct sigaction_ {
    u64 handler, flags, restorer, mask;
};
/* Large enough for the kernel's siginfo. */
struct siginfo_ {
    i64 words[16];
};

static __attribute__((noreturn)) void quit(int code)
{
    for (;;)
        sys1(NR_exit, code);
}

/* The value of `key` ("NAME=") among envp, or 0. */
static const char *env_value(char **envp, const char *key)
{
    for (; envp && *envp; envp++) {
        const char *s = *envp;
        unsigned i = 0;
        while (key[i] && s[i] == key[i])
            i++;
        if (!key[i])
            return s + i;
    }
    return 0;
}

/* HOSTCAP_COMMAND=<decimal>: the command's pid; 0 if absent. */
static i64 command_pid(char **envp)
{
    const char *s = env_value(envp, "HOSTCAP_COMMAND=");
    i64 pid = 0;
    for (; s && *s >= '0' && *s <= '9'; s++)
        pid = pid * 10 + (*s - '0');
    return pid;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* HOSTCAP_CPUS=<hex, two digits a byte from CPU 0>: the affinity the init
 * had before it was pinned to its CPU for the exec; taken back. */
static void restore_affinity(char **envp)
{
    const char *s = env_value(envp, "HOSTCAP_CPUS=");
    unsigned char mask[128];
    unsigned n = 0;
    for (; s && n < sizeof mask; s += 2, n++) {
        int hi = hex_digit(s[0]), lo = hi < 0 ? -1 : hex_digit(s[1]);
        if (hi < 0 || lo < 0)
            break;
        mask[n] = (unsigned char)(hi << 4 | lo);
    }
    if (n == 0)
        return;
    while (n % 8) /* whole words, as the kernel reads them */
        mask[n++] = 0;
    sys3(NR_sched_setaffinity, 0, n, mask);
}

/* End with the command's status (init.c's init_exit): an exit code is
 * exact; a signal is tried (the kernel drops a signal a pid 1 sends itself
 * while its disposition is the default), then 128 + N. */
static __attribute__((noreturn)) void end_as(int status)
{
    if ((status & 0x7f) == 0)
        quit((status >> 8) & 0xff);
    int sig = (status & 0x7f) != 0x7f ? (status & 0x7f) : SIGKILL_;
    struct sigaction_ dfl = {0, 0, 0, 0};
    sys4(NR_rt_sigaction, sig, &dfl, 0, 8);
    u64 only = 1UL << (sig - 1);
    sys4(NR_rt_sigprocmask, SIG_UNBLOCK_, &only, 0, 8);
    sys2(NR_kill, 1, sig);
    quit(128 + sig);
}

static __attribute__((noreturn, used)) void init_start(i64 *sp)
{
    i64 argc = sp[0];
    char **envp = (char **)(sp + 1 + argc + 1);
    /* Not dumpable (the exec of a file it may not read made it so already),
     * and its name (the exec named it after the fd). Best effort. */
    char name[16] = {'h', 'o', 's', 't', 'c', 'a', 'p', '-', 'i', 'n', 'i', 't', 0};
    sys2(NR_prctl, PR_SET_DUMPABLE_, 0);
    sys2(NR_prctl, PR_SET_NAME_, name);
    i64 command = command_pid(envp);
    restore_affinity(envp);
    u64 all = ~0UL;
    /* Every signal stays blocked (as the exec found it): taken below. */
    sys4(NR_rt_sigprocmask, SIG_SETMASK_, &all, 0, 8);
    for (;;) {
        struct siginfo_ info;
        i64 sig = sys4(NR_rt_sigtimedwait, &all, &info, 0, 8);
        if (sig < 0)
            continue; /* EINTR (a stop and continue) */
        if (sig != SIGCHLD_) {
            /* To the command's process group (it leads its session), or to
             * the command alone if its group is gone. */
            if (command > 0 && sys2(NR_kill, -command, sig) != 0)
                sys2(NR_kill, command, sig);
            continue;
        }
        for (;;) {
            int status = 0;
            struct rusage_ ru;
            i64 w = sys4(NR_wait4, -1, &status, WNOHANG_ | WALL_, &ru);
            if (w == -EINTR_)
                continue;
            if (w <= 0)
                break;
            if (w != command)
                continue; /* an orphan reparented to it, now reaped */
            i64 rec[9] = {EXIT_MAGIC,
                          status,
                          ru.utime.sec * 1000000 + ru.utime.usec,
                          ru.stime.sec * 1000000 + ru.stime.usec,
                          ru.maxrss,
                          ru.nvcsw,
                          ru.nivcsw,
                          ru.inblock,
                          ru.oublock};
            while (sys3(NR_write, REPORT_FD, rec, sizeof rec) == -EINTR_)
                ;
            end_as(status);
        }
    }
}

/* The entry: the kernel's initial stack (argc, argv, envp) as the argument. */
__asm__(".text\n"
        ".global _start\n"
        "_start:\n"
        "    mov %rsp, %rdi\n"
        "    and $-16, %rsp\n"
        "    call init_start\n"
        "    hlt\n");
