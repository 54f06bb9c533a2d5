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
 * The init is not a CLONE_VM child (it outlives the exec, so it needs
 * memory of its own): the spawner clones it like fork, and it clones the
 * command's process vfork-style from its own memory (a warm init: in its
 * memory, without the vfork wait; see preclone_and_wait). It has the command's
 * uid, capabilities, no_new_privs, landlock domain, seccomp filter, cgroup
 * and rlimits, and is not dumpable: no foothold. Its records, on the pipe
 * the spawner reads (fixed size, in one write each):
 *   set-up: {INIT_SETUP_MAGIC, step, errno}: step "none" once the command
 *           exec'd, else the step that failed (the init then exits);
 *   exit:   {INIT_EXIT_MAGIC, wait status, utime_us, stime_us, maxrss_kib,
 *           nvcsw, nivcsw, inblock, oublock} of the command's process.
 * Every field is an int64 in the machine's byte order. */
#define COMMAND_STACK_SIZE (32 * 1024)

int init_setsid_enabled = 0;

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

/* Every fd of the init's but its report pipe, closed. */
static void close_all_but_report(int fd)
{
    if (fd > 0)
        syscall(SYS_close_range, 0, fd - 1, 0);
    syscall(SYS_close_range, fd + 1, ~0U, 0);
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
        /* A warm init's command process waits for the request here, in its
         * own session already, its signals still blocked (see init_main). */
        if (p->warm && p->preclone) {
            p->in_command = 1;
            warm_receive(p);
        }
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

/* A warm init's command process, cloned ahead: it shares the init's memory
 * (CLONE_VM: nothing is copied, the init's stack below is its stack) but not
 * a vfork wait, which the kernel makes uninterruptible: an init in it for as
 * long as its warm child waits would show as "D" in ps and count 1 in the
 * host's load average all that time. The init sleeps on a futex instead
 * (interruptible: "S"), on the word the kernel clears and wakes when the
 * command's process lets go of this memory (CLONE_CHILD_CLEARTID: at its
 * exec, or at its exit), the same point where it would end a vfork wait.
 * Until then the init writes no memory the command's process uses: with
 * every signal blocked its futex call sets no errno (the TLS they share)
 * before the word is cleared, nor do its close_range calls (ranges that
 * cannot be refused), nor the restore of the affinity it had. Its pid, or
 * -1. */
static pid_t preclone_and_wait(struct plan *p, char *stack_top)
{
    volatile pid_t word = 1;
    pid_t command = clone(command_main, stack_top, CLONE_VM | CLONE_CHILD_CLEARTID | SIGCHLD, p,
                          NULL, NULL, &word);
    if (command < 0)
        return -1;
    /* Off the path to the record, while it waits: its affinity back (see
     * clone_init_small), and every fd but its report pipe closed (the
     * command's process has a table of its own). */
    if (p->restore_affinity)
        sched_setaffinity(0, sizeof p->affinity, &p->affinity);
    close_all_but_report(p->report_fd);
    pid_t v;
    while ((v = __atomic_load_n(&word, __ATOMIC_ACQUIRE)) != 0)
        syscall(SYS_futex, &word, FUTEX_WAIT, v, NULL, NULL, 0);
    return command;
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
    /* A warm init clones its command's process before the request, which
     * that process waits for in its own session (warm_receive): the clone
     * and the new session (a scheduling group of its own, with the kernel's
     * autogroup) are off the request's path; the init waits for its exec as
     * for a fresh one's. What the init keeps is warm_wait's. */
    if (p->warm && p->preclone)
        warm_prepare(p);
    /* "none" only once the command's process reached its exec (last_steps):
     * killed before it, the init says so. */
    p->fail_step = STEP_INIT;
    p->fail_errno = 0;
    pid_t command;
    int futex_wait = p->warm && p->preclone && !p->preclone_vfork;
    if (futex_wait) {
        command = preclone_and_wait(p, stack + sizeof stack);
    } else {
        command = clone(command_main, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, p);
        /* Born on this CPU too (the init waits for its exec); both take
         * back the spawner's affinity (see clone_init_small). */
        if (p->restore_affinity)
            sched_setaffinity(0, sizeof p->affinity, &p->affinity);
    }
    p->in_command = 0;
    if (p->fail_step == STEP_DROPPED)
        _exit(127); /* dropped before its request (warm_receive) */
    if (command < 0)
        FAIL(STEP_CLONE);
    if (p->fail_step != STEP_NONE) {
        errno = p->fail_errno;
        FAIL(p->fail_step);
    }
    /* The command runs: the init keeps its report pipe and nothing else. */
    int fd = p->report_fd;
    if (!futex_wait)
        close_all_but_report(fd);
    init_report_setup(fd, STEP_NONE, 0);
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

