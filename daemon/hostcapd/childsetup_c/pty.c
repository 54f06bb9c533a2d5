/* A tty spawn's terminal (decision 0031): a devpts instance of the spawn's
 * own, its slave the command's controlling terminal and 0, 1 and 2, its
 * master sent to the daemon. Python prepared every value (the socket, the
 * size, the identity); nothing here decides anything. Two hooks in setup.c:
 *   pty_open  in the spawn's mount namespace, as root, after its mounts:
 *             mount devpts (newinstance) on /dev/pts, open its ptmx, the
 *             slave through the master (TIOCGPTPEER: no path lookup), the
 *             size, the slave to the run-as uid, the master sent
 *             (SCM_RIGHTS) and closed here;
 *   pty_take  in the command's own process, right before its last steps:
 *             a session of its own (the init's command process has one
 *             already), the slave its controlling terminal and 0, 1, 2. */
#include "childsetup.h"

#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

static int send_fd(int sock, int fd)
{
    char byte = 'T';
    struct iovec iov = {&byte, 1};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    ssize_t n;
    do {
        n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n == 1 ? 0 : -1;
}

int pty_open(struct plan *p)
{
    int master = -1, slave = -1, unlock = 0;
    if (mkdir("/dev/pts", 0755) != 0 && errno != EEXIST)
        return -1;
    /* A new instance: its ptys are this spawn's alone, the host's and every
     * other spawn's are not in it (and hidden beneath it). */
    if (mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=620") != 0)
        return -1;
    master = open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0)
        return -1;
    if (ioctl(master, TIOCSPTLCK, &unlock) != 0)
        goto fail;
    slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (slave < 0)
        goto fail;
    struct winsize ws;
    memset(&ws, 0, sizeof ws);
    ws.ws_row = (unsigned short)p->tty_rows;
    ws.ws_col = (unsigned short)p->tty_cols;
    if (ioctl(slave, TIOCSWINSZ, &ws) != 0)
        goto fail;
    /* Its owner is the command's identity, as grantpt would make it. */
    if (p->set_ids && fchown(slave, p->uid, (gid_t)-1) != 0)
        goto fail;
    if (send_fd(p->tty_fd, master) != 0)
        goto fail;
    close(master);
    close(p->tty_fd);
    p->tty_fd = -1;
    p->tty_slave = slave;
    return 0;
fail:;
    int saved = errno;
    if (slave >= 0)
        close(slave);
    close(master);
    errno = saved;
    return -1;
}

int pty_take(struct plan *p)
{
    if (getsid(0) != getpid() && setsid() < 0)
        return -1;
    if (ioctl(p->tty_slave, TIOCSCTTY, 0) != 0)
        return -1;
    for (int i = 0; i < 3; i++) {
        if (dup2(p->tty_slave, i) < 0)
            return -1;
    }
    if (p->tty_slave > 2)
        close(p->tty_slave);
    p->tty_slave = -1;
    return 0;
}
