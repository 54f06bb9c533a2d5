/* The bench's C baselines, driven one command line at a time over stdin so
 * that they interleave with the measured daemon calls; every figure is timed
 * here, in C, so the pipe to the bench costs nothing measured.
 *
 *   true N       N x posix_spawn("/bin/true") + waitpid(pid): the spawn floor
 *   tree N       N x posix_spawn(argv...) then reap until no child is left
 *                (this process is a child subreaper, so an orphan of the tree
 *                comes back here and is waited for too)
 *   flood C MS   keep C copies of argv... running for MS ms; prints the
 *                number completed and the ns until the last was reaped
 *
 * argv... is the command line this helper was started with (bwrap ...).
 * Each command answers one line: numbers separated by spaces, or "error ...".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static pid_t start(char **argv) {
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], NULL, NULL, argv, environ);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return pid;
}

/* Wait until every descendant is reaped; 0 when `main_pid` exited 0. The
 * tree's other processes may die any way they like: bwrap's own pid-1 is
 * SIGKILLed by its parent-death signal once bwrap exits, and comes back to
 * this subreaper to be waited for. */
static int reap_all(pid_t main_pid) {
    int status, failed = main_pid > 0;
    for (;;) {
        pid_t p = waitpid(-1, &status, 0);
        if (p < 0) {
            if (errno == EINTR) continue;
            return failed;
        }
        if (p == main_pid) failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
}

int main(int argc, char **argv) {
    static char *true_argv[] = {"/bin/true", NULL};
    char **tree_argv = argc > 1 ? argv + 1 : true_argv;
    char line[256];
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
        perror("PR_SET_CHILD_SUBREAPER");
        return 1;
    }
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    while (fgets(line, sizeof line, stdin)) {
        char cmd[16];
        long a = 0, b = 0;
        int n = sscanf(line, "%15s %ld %ld", cmd, &a, &b);
        if (n >= 2 && strcmp(cmd, "true") == 0) {
            for (long i = 0; i < a; i++) {
                int status;
                long long t0 = now_ns();
                pid_t pid = start(true_argv);
                if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0) {
                    printf("error /bin/true failed: %s", strerror(errno));
                    break;
                }
                printf("%s%lld", i ? " " : "", now_ns() - t0);
            }
        } else if (n >= 2 && strcmp(cmd, "tree") == 0) {
            for (long i = 0; i < a; i++) {
                long long t0 = now_ns();
                if (reap_all(start(tree_argv)) != 0) {
                    printf("error %s failed", tree_argv[0]);
                    break;
                }
                printf("%s%lld", i ? " " : "", now_ns() - t0);
            }
        } else if (n == 3 && strcmp(cmd, "flood") == 0 && a > 0 && a <= 256) {
            pid_t slots[256];
            long long t0 = now_ns(), deadline = t0 + b * 1000000LL;
            long done = 0, running = 0;
            int failed = 0, status;
            for (long i = 0; i < a; i++) {
                slots[i] = start(tree_argv);
                if (slots[i] < 0) failed = 1;
                else running++;
            }
            while (running > 0) {
                pid_t p = waitpid(-1, &status, 0);
                if (p < 0) {
                    if (errno == EINTR) continue;
                    break;
                }
                long slot = -1;
                for (long i = 0; i < a; i++)
                    if (slots[i] == p) slot = i;
                if (slot < 0) continue; /* an orphan of some tree: part of its cost */
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
                running--;
                done++;
                slots[slot] = -1;
                if (now_ns() < deadline) {
                    slots[slot] = start(tree_argv);
                    if (slots[slot] < 0) failed = 1;
                    else running++;
                }
            }
            reap_all(0);
            if (failed) printf("error %s failed under flood", tree_argv[0]);
            else printf("%ld %lld", done, now_ns() - t0);
        } else {
            printf("error unknown command");
        }
        printf("\n");
        fflush(stdout);
    }
    return 0;
}
