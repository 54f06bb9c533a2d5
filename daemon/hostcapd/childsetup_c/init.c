#include "childsetup.h"

/*
 * The init: pid 1 of a spawn's pid namespace.
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
 * Once the command exec'd and the set-up record is written, the init execs
 * hostcap-init (pid1/hostcap_init.c, carried by this module as bytes in a
 * sealed memfd: see init_image_fd and init_exec), which is the same loop in
 * a fresh address space of a few pages: what the init ran on until then (a
 * copy of the forker, its plan and the strings of the command) is gone from
 * it, and its exit tears down a few pages rather than that copy. Where
 * there is no image (another machine, a host that refuses executable
 * memfds) the init stays the copy and runs init_loop below.
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
#define COMMAND_STACK_SIZE (32 * 1024)

void write_record(int fd, const int64_t *rec, size_t n)
{
    ssize_t r;
    do {
        r = write(fd, rec, n * sizeof *rec);
    } while (r < 0 && errno == EINTR);
}

void init_report_setup(int fd, int step, int err)
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

/* The command's exit record: its wait status and rusage. */
static void init_report_exit(int fd, int status, const struct rusage *ru)
{
    int64_t rec[9] = {INIT_EXIT_MAGIC, status, tv_us(ru->ru_utime), tv_us(ru->ru_stime),
                      ru->ru_maxrss, ru->ru_nvcsw, ru->ru_nivcsw, ru->ru_inblock,
                      ru->ru_oublock};
    write_record(fd, rec, 9);
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
            init_report_exit(report_fd, status, &ru);
            init_exit(status);
        }
    }
}

/* hostcap-init's inputs (see pid1/hostcap_init.c): the report pipe is its
 * fd 3, its only one. */
#define INIT_REPORT_FD 3

/* The mask as hex digits, two a byte from CPU 0 (HOSTCAP_CPUS). */
static void hex_mask(char *out, const cpu_set_t *mask)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *b = (const unsigned char *)mask;
    size_t n = sizeof *mask;
    while (n > 1 && b[n - 1] == 0)
        n--;
    for (size_t i = 0; i < n; i++) {
        *out++ = digits[b[i] >> 4];
        *out++ = digits[b[i] & 15];
    }
    *out = '\0';
}

/* The command exec'd and the caller has the set-up record: exec
 * hostcap-init, with the report pipe as its fd 3 and nothing else open, the
 * command's pid (HOSTCAP_COMMAND) and this process's affinity
 * (HOSTCAP_CPUS) in its environment, which only whom may ptrace it can
 * read: nobody in the spawn. For the exec it is pinned to the CPU it runs
 * on, so that sched_exec does not move it (a stop-machine hop to the other
 * CPU's queue, while its command starts); hostcap-init takes the affinity
 * back first thing. If the exec fails, the command is killed (it must not
 * run without its init) and its exit record says so; then the init ends. */
static void init_exec(struct plan *p, pid_t command)
{
    int fd = p->report_fd;
    int exe = p->init_exec_fd;
    if (exe == INIT_REPORT_FD)
        exe = fcntl(exe, F_DUPFD_CLOEXEC, INIT_REPORT_FD + 1);
    int ok = exe >= 0;
    if (ok && fd != INIT_REPORT_FD)
        ok = dup2(fd, INIT_REPORT_FD) == INIT_REPORT_FD;
    else if (ok)
        ok = fcntl(fd, F_SETFD, 0) == 0;
    if (ok) {
        fd = INIT_REPORT_FD;
        syscall(SYS_close_range, 0, INIT_REPORT_FD - 1, 0);
        syscall(SYS_close_range, INIT_REPORT_FD + 1, ~0U, CLOSE_RANGE_CLOEXEC);
        char env[32] = "HOSTCAP_COMMAND=";
        char digits[12];
        int n = 0;
        for (unsigned v = (unsigned)command; n == 0 || v > 0; v /= 10)
            digits[n++] = (char)('0' + v % 10);
        size_t at = strlen(env);
        while (n > 0)
            env[at++] = digits[--n];
        env[at] = '\0';
        char cpus[16 + 2 * sizeof(cpu_set_t)] = "HOSTCAP_CPUS=";
        cpu_set_t mine;
        unsigned int cpu = 0;
        if (sched_getaffinity(0, sizeof mine, &mine) == 0 &&
            syscall(SYS_getcpu, &cpu, NULL, NULL) == 0) {
            cpu_set_t here;
            CPU_ZERO(&here);
            CPU_SET(cpu, &here);
            if (sched_setaffinity(0, sizeof here, &here) == 0)
                hex_mask(cpus + strlen(cpus), &mine);
        }
        char *argv[] = {(char *)"hostcap-init", NULL};
        char *envp[] = {env, cpus, NULL};
        syscall(SYS_execveat, exe, "", argv, envp, AT_EMPTY_PATH);
    }
    syscall(SYS_kill, command, SIGKILL);
    int status;
    struct rusage ru;
    while (wait4(command, &status, __WALL, &ru) < 0) {
        if (errno != EINTR)
            _exit(127);
    }
    init_report_exit(fd, status, &ru);
    _exit(128 + SIGKILL);
}

/* The end of the set-up as pid 1: start the command's process, report, and
 * become the init. */
int init_main(struct plan *p)
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
    init_report_setup(fd, STEP_NONE, 0);
    if (p->init_exec_fd >= 0)
        init_exec(p, command); /* returns only if the image is not ours */
    if (fd > 0)
        syscall(SYS_close_range, 0, fd - 1, 0);
    syscall(SYS_close_range, fd + 1, ~0U, 0);
    init_loop(command, fd);
    return 127;
}

/* Clone the init (see init_main): like fork (it needs memory of its own), in
 * the new namespaces, every signal blocked, with the GIL held (see
 * clone_init_small); then, without the GIL, wait on its report pipe for the
 * set-up record, which comes once the command exec'd or a step failed.
 * The pid, with the pipe's read end in *report (the exit record comes there),
 * or -1 with the failure in the plan (the init reaped). */
pid_t start_init_child(char *stack, struct plan *p)
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
pid_t wait_init_child(pid_t pid, struct plan *p, int *report)
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


/* ---- hostcap-init's image ---- */

#include "hostcap_init_image.h"

int init_exec_enabled = 1;
static int image_fd = -1;
static dev_t image_dev;
static ino_t image_ino;

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif

int init_image_fd(void)
{
    static int failed;
    if (HOSTCAP_INIT_IMAGE_SIZE == 0 || failed || !init_exec_enabled)
        return -1;
    /* Still the memfd made below? (A caller may have closed every fd it did
     * not know of, and the number be another file's now.) */
    struct stat st;
    if (image_fd >= 0 && fstat(image_fd, &st) == 0 && st.st_dev == image_dev &&
        st.st_ino == image_ino)
        return image_fd;
    image_fd = -1;
    /* Executable (MFD_EXEC; where vm.memfd_noexec refuses that, the init
     * stays the forker's copy), sealed against any change, and mode 0111:
     * a tenant's uid may execute it but not read it, so the exec makes the
     * init not dumpable (fs/exec.c, would_dump). A memfd is beneath no path
     * a landlock domain governs. */
    int fd = (int)syscall(SYS_memfd_create, "hostcap-init",
                          MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
    if (fd < 0) {
        failed = 1;
        return -1;
    }
    size_t done = 0;
    while (done < HOSTCAP_INIT_IMAGE_SIZE) {
        ssize_t n = write(fd, hostcap_init_image + done, HOSTCAP_INIT_IMAGE_SIZE - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    if (done != HOSTCAP_INIT_IMAGE_SIZE || fchmod(fd, 0111) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) != 0 ||
        fstat(fd, &st) != 0) {
        close(fd);
        failed = 1;
        return -1;
    }
    image_fd = fd;
    image_dev = st.st_dev;
    image_ino = st.st_ino;
    return fd;
}

/* ---- the init cloned vfork-style ---- */

/* A fresh init that will exec hostcap-init needs no memory of its own until
 * then: it is cloned vfork-style as a spawn without an init is, the caller
 * waiting until it exec'd (or ended); its set-up record is on the pipe by
 * then. It is born on the caller's CPU, which the caller leaves at once to
 * wait for it (fork balancing would queue it behind whatever runs on the
 * other CPU), and keeps that pin for its command's clone and its own exec
 * (see init_exec); it gives the caller its affinity back at once
 * (child_main), the command's process takes it back first thing
 * (command_main), hostcap-init too. */
pid_t run_init_shared(char *stack, struct plan *p, int *report)
{
    int fds[2];
    *report = -1;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        p->fail_step = STEP_INIT;
        p->fail_errno = errno;
        return -1;
    }
    p->report_read = fds[0];
    p->report_fd = fds[1];
    p->init_shared = 1;
    /* The CPU is the kernel's word (getcpu): glibc's sched_getcpu reads the
     * rseq area of the calling thread, which a vfork-style child shares. */
    unsigned int cpu = 0;
    if (syscall(SYS_getcpu, &cpu, NULL, NULL) == 0 &&
        sched_getaffinity(0, sizeof p->affinity, &p->affinity) == 0) {
        cpu_set_t here;
        CPU_ZERO(&here);
        CPU_SET(cpu, &here);
        p->restore_affinity = sched_setaffinity(0, sizeof here, &here) == 0;
    }
    p->caller_tid = p->restore_affinity ? (pid_t)syscall(SYS_gettid) : 0;
    pid_t pid = run_child(child_main, stack, p->clone_flags, p, 0);
    if (p->restore_affinity) /* done already, unless the init failed first */
        sched_setaffinity(0, sizeof p->affinity, &p->affinity);
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return -1; /* the clone failed: in the plan */
    }
    if (p->fail_step != STEP_NONE) {
        close(fds[0]); /* run_child reaped it */
        return -1;
    }
    return wait_init_child(pid, p, report);
}
