#include "childsetup.h"

/*
 * The warm path: a child set up ahead of need.
 *
 * A warm child runs the whole set-up but the request's own part (stdio,
 * rlimits, the cwd, the executable, argv and envp) and stops after its
 * filters: it has its namespaces, mounts, cgroup, identity, landlock domain
 * and seccomp filter. It says so on its report pipe ({WARM_MAGIC, 0, 0}),
 * and waits on its channel (the spawner's end of a socketpair) for one
 * message: a header {WARM_MAGIC, size} with the fds stdin, stdout, stderr,
 * cancel, go and (by_fd) the executable, then `size` bytes laid out by
 * Python (childsetup.pack_request), native int64 words:
 *   by_fd, root (index into the roots, or -1), cwd, exe_path (offsets, or -1),
 *   n_rlimits, argc, envc, n_rlimits x (resource, soft, hard),
 *   argc + 1 argv offsets (the last -1), envc + 1 envp offsets (the last -1),
 * then the NUL-terminated strings the offsets point at. The offsets become
 * pointers in place; a layout that does not fit is refused (step "warm").
 * Then it applies that part and goes on to the last steps as a fresh child
 * does. It is used once: the channel is closed at exec. A channel or life
 * pipe that hangs up before a request ends it without a record.
 *
 * A warm child with an init (pid 1 of its pid namespace) clones its
 * command's process (pid 2) before it waits, in its own session: that
 * process waits for the request (warm_receive) while the init waits for its
 * exec (init_main, on a futex: an interruptible sleep, see
 * preclone_and_wait), so the clone and the new session are not on the
 * request's path. Its failures are the init's to report, as after a
 * fresh init's clone. */

static void warm_fail(struct plan *p, int err)
{
    errno = err;
    fail_now(p, STEP_WARM);
}

static int read_full(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* An offset into the buffer as a pointer; NULL for -1. */
static int warm_ptr(int64_t off, size_t size, char *base, char **out)
{
    if (off == -1) {
        *out = NULL;
        return 0;
    }
    if (off < 0 || (uint64_t)off >= size)
        return -1;
    *out = base + off;
    return 0;
}

/* Offsets [at, at + n] (the last -1) as a NULL-terminated vector, in place. */
static char **warm_vec(int64_t *w, size_t at, int64_t n, size_t words, size_t size, char *base)
{
    if (n < 0 || (uint64_t)n >= words || at + (size_t)n + 1 > words || w[at + n] != -1)
        return NULL;
    char **v = (char **)(w + at);
    for (int64_t i = 0; i <= n; i++) {
        char *ptr;
        if (warm_ptr(w[at + i], size, base, &ptr) != 0 || (i < n && !ptr))
            return NULL;
        v[i] = ptr;
    }
    return v;
}

/* Close every fd from 3 up but the `n` in `keep`. */
static void close_all_but(int *keep, int n)
{
    for (int i = 1; i < n; i++) { /* a few: insertion sort */
        for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
            int t = keep[j];
            keep[j] = keep[j - 1];
            keep[j - 1] = t;
        }
    }
    unsigned int from = 3;
    for (int i = 0; i < n; i++) {
        if (keep[i] < (int)from)
            continue;
        if ((unsigned int)keep[i] > from)
            syscall(SYS_close_range, from, (unsigned int)keep[i] - 1, 0);
        from = (unsigned int)keep[i] + 1;
    }
    syscall(SYS_close_range, from, ~0U, 0);
}

/* On by default: a warm init clones its command's process before the
 * request and waits for its exec on a futex (init.c, preclone_and_wait).
 * The switch, and the old vfork wait behind preclone_vfork (uninterruptible:
 * every waiting warm init in "D" and 1 in the load average), are the
 * bench's A/B (bench/README.md). */
int warm_preclone = 1;
int preclone_vfork = 0;

/* Dropped, or the spawner is gone: nothing to say. */
static void warm_dropped(struct plan *p)
{
    if (p->in_command)
        p->fail_step = STEP_DROPPED; /* nor will its init */
    _exit(127);
}

void warm_wait(struct plan *p)
{
    warm_prepare(p);
    warm_receive(p);
}

/* What the process that waits keeps: the spawner's fds it still needs. */
void warm_prepare(struct plan *p)
{
    int i;
    /* Not dumpable (the uid change made it so already; this says it). */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    /* It holds the spawner's fds as they were at the clone (its channel's
     * other end, the front-end's channel, other warm children's): only what
     * it still needs stays, so a closed channel hangs up here. */
    int keep[MAX_ROOTS + 3], n_keep = 0;
    keep[n_keep++] = p->channel_fd;
    keep[n_keep++] = p->report_fd;
    if (p->life_fd >= 0)
        keep[n_keep++] = p->life_fd;
    for (i = 0; i < p->n_roots; i++)
        keep[n_keep++] = p->root_fds[i];
    close_all_but(keep, n_keep);
}

/* The ready record, the wait, the request and its part applied. */
void warm_receive(struct plan *p)
{
    int i;
    int64_t ready[3] = {WARM_MAGIC, 0, 0};
    write_record(p->report_fd, ready, 3);

    struct pollfd pfd[2] = {{p->channel_fd, POLLIN, 0}, {p->life_fd, POLLIN, 0}};
    for (;;) {
        int n = poll(pfd, p->life_fd >= 0 ? 2 : 1, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || pfd[1].revents || !(pfd[0].revents & POLLIN))
            warm_dropped(p);
        break;
    }
    int64_t header[2] = {0, 0};
    union {
        char buf[CMSG_SPACE(WARM_FDS * sizeof(int))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {header, sizeof header};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    ssize_t got;
    do {
        got = recvmsg(p->channel_fd, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    } while (got < 0 && errno == EINTR);
    if (got == 0)
        warm_dropped(p);
    if (got != (ssize_t)sizeof header || header[0] != WARM_MAGIC || (msg.msg_flags & MSG_CTRUNC))
        warm_fail(p, EPROTO);
    int fds[WARM_FDS], n_fds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        if (n_fds + n > WARM_FDS)
            warm_fail(p, EPROTO);
        memcpy(fds + n_fds, CMSG_DATA(c), (size_t)n * sizeof(int));
        n_fds += n;
    }
    size_t size = (size_t)header[1];
    if (header[1] < (int64_t)(WARM_WORDS * sizeof(int64_t)) || size > WARM_BUFFER ||
        size % sizeof(int64_t) != 0)
        warm_fail(p, E2BIG);
    if (read_full(p->channel_fd, p->warm_buf, size) != 0)
        warm_fail(p, EPROTO);

    /* The layout: every offset inside the buffer, every string ending in it. */
    int64_t *w = (int64_t *)p->warm_buf;
    size_t words = size / sizeof(int64_t);
    int64_t by_fd = w[0], root = w[1], n_rl = w[4], argc = w[5], envc = w[6];
    char *cwd, *exe_path;
    if (p->warm_buf[size - 1] != '\0' || n_fds != 5 + (by_fd ? 1 : 0) ||
        root < -1 || root >= p->n_roots || n_rl < 0 || n_rl > MAX_RLIMITS || argc < 1 ||
        warm_ptr(w[2], size, p->warm_buf, &cwd) != 0 ||
        warm_ptr(w[3], size, p->warm_buf, &exe_path) != 0 || (!by_fd && !exe_path))
        warm_fail(p, EINVAL);
    size_t at = WARM_WORDS + 3 * (size_t)n_rl;
    if (at > words)
        warm_fail(p, EINVAL);
    char **argv = warm_vec(w, at, argc, words, size, p->warm_buf);
    if (!argv)
        warm_fail(p, EINVAL);
    at += (size_t)argc + 1;
    char **envp = at <= words ? warm_vec(w, at, envc, words, size, p->warm_buf) : NULL;
    if (!envp)
        warm_fail(p, EINVAL);
    for (i = 0; i < n_rl; i++) {
        int64_t *r = w + WARM_WORDS + 3 * i;
        p->rlimits[i].resource = (int)r[0];
        p->rlimits[i].lim.rlim_cur = (rlim_t)r[1];
        p->rlimits[i].lim.rlim_max = (rlim_t)r[2];
    }
    p->n_rlimits = (int)n_rl;
    for (i = 0; i < 3; i++)
        p->stdio[i] = fds[i];
    p->cancel_fd = fds[3];
    p->go_fd = fds[4];
    p->exe_fd = by_fd ? fds[5] : -1;
    p->exe_path = exe_path;
    p->argv = argv;
    p->envp = envp;
    p->cwd = cwd;

    /* The request's part, in the fresh set-up's order. */
    if (apply_stdio(p) != 0)
        FAIL(STEP_STDIO);
    if (apply_rlimits(p) != 0)
        FAIL(STEP_RLIMITS);
    for (i = 0; i < p->n_roots; i++) {
        if (i == root)
            p->cwd_fd = p->root_fds[i];
        else
            close(p->root_fds[i]);
    }
    if (p->cwd_fd >= 0 && apply_cwd(p) != 0)
        FAIL(STEP_CHDIR);
}

/* ---- the go: the parent's side ---- */

/* Send the request's part without blocking (the caller made the channel's
 * buffer large enough); 0, or -1 with errno (EAGAIN: it did not fit). */
int warm_send(int channel, const char *payload, size_t size, const int *fds, int n_fds)
{
    int64_t header[2] = {WARM_MAGIC, (int64_t)size};
    union {
        char buf[CMSG_SPACE(WARM_FDS * sizeof(int))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {header, sizeof header};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = CMSG_SPACE((size_t)n_fds * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)n_fds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)n_fds * sizeof(int));
    ssize_t r;
    do {
        r = sendmsg(channel, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (r < 0 && errno == EINTR);
    if (r >= 0 && r != (ssize_t)sizeof header)
        errno = EAGAIN;
    if (r != (ssize_t)sizeof header)
        return -1;
    size_t sent = 0;
    while (sent < size) {
        r = send(channel, payload + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        sent += (size_t)r;
    }
    return 0;
}
