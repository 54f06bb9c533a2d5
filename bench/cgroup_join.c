/* A child's joins of a spawn's cgroups, timed (bench/cgroup_join.py).
 *
 *     cgroup_join N EXEC [cgroup.procs ...]
 *
 * N times: fork; the child writes "0" into each cgroup.procs given (as a
 * spawn's child does with the fds its order brings), then execs /bin/true
 * (EXEC 1) or exits (EXEC 0); the parent reaps it. Prints the child's CPU
 * (wait4's rusage, user + system) and the wall time per child, in µs. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3 || argc - 3 > 8) {
        fprintf(stderr, "usage: cgroup_join N EXEC [cgroup.procs ...] (at most 8)\n");
        return 2;
    }
    int n = atoi(argv[1]), exec_it = atoi(argv[2]), k = argc - 3, fds[8];
    for (int i = 0; i < k; i++) {
        fds[i] = open(argv[3 + i], O_WRONLY | O_CLOEXEC);
        if (fds[i] < 0) {
            perror(argv[3 + i]);
            return 1;
        }
    }
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    double cpu = 0;
    for (int j = 0; j < n; j++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (int i = 0; i < k; i++)
                if (write(fds[i], "0", 1) != 1) _exit(3);
            if (exec_it) execl("/bin/true", "true", (char *)0);
            _exit(exec_it ? 4 : 0);
        }
        int status;
        struct rusage ru;
        if (pid < 0 || wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            fprintf(stderr, "cgroup_join: a child failed\n");
            return 1;
        }
        cpu += ru.ru_utime.tv_sec * 1e6 + ru.ru_utime.tv_usec + ru.ru_stime.tv_sec * 1e6 +
               ru.ru_stime.tv_usec;
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    double wall = (end.tv_sec - start.tv_sec) * 1e6 + (end.tv_nsec - start.tv_nsec) / 1e3;
    printf("%.1f %.1f\n", cpu / n, wall / n);
    return 0;
}
