/* A process tree for the kill row: `tree N MARKER` forks N-1 children that
 * sleep until killed, prints its CLOCK_MONOTONIC start time and "ready", and
 * sleeps until killed. MARKER is only there so the bench can find the tree's
 * processes (all share this command line) in /proc. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long n = argc > 1 ? atol(argv[1]) : 50;
    for (long i = 1; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0)
            for (;;) pause();
    }
    printf("start %lld\nready\n", t.tv_sec * 1000000000LL + t.tv_nsec);
    fflush(stdout);
    for (;;) pause();
}
