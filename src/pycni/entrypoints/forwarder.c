/*
 * pycni entry point (C form): forward one CNI plugin call to the pycni daemon.
 *
 * Installed by `pycni plugins install DIR` (one binary hard-linked under each plugin type).
 * The plugin type is argv[0]'s basename. The call (environment, stdin, and fds of this
 * process's network namespace and of CNI_NETNS) goes to the daemon over its unix socket;
 * the daemon's stdout, stderr and exit code become ours. When no daemon accepts the
 * connection (or it tells us to: we are in another mount namespace), we exec the venv's
 * Python to run the plugin in-process instead, with the stdin we read put back on fd 0.
 * The call is sent only after the daemon acknowledged a HELLO (protocol version 2) within
 * ACK_TIMEOUT_MS: a daemon that does not (stalled, its accept queue never served), or that
 * speaks another version, received no call, so the plugin runs here instead. Once the call
 * may have reached the daemon we never re-run it: no reply within the bound the
 * acknowledgement announced (+ REPLY_SLACK_MS), or any other failure, is CNI error 11.
 * All of stdin is read before connecting, and a server that is not root (SO_PEERCRED) is
 * refused before anything is sent.
 *
 * Autostart (when installed with it): if connect() finds no socket or a stale one, we first
 * start a daemon in the background (fork twice, setsid, flock <socket>.lock or leave, wait
 * until this call is over, exec `pycni daemon`), then run this call in-process as above: the
 * call never waits for the daemon it started, nor shares the CPU with its start. See src/pycni/daemon/autostart.py. Nothing of this runs on the fast path.
 *
 * The wire protocol is described in docs/daemon.md and src/pycni/daemon/protocol.py. The
 * socket path, the fallback command and the protocol constants come from a header that
 * the installer generates (pycni_forwarder_config.h). Only libc is used.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pycni_forwarder_config.h"

/* Checked against pycni.daemon.protocol by tests/unit/test_entrypoints_wire_constants.py. */
#define PREFIX_SIZE 16
#define REPLY_SIZE 20
#define KIND_CALL 1
#define KIND_HELLO 4
#define LEGACY_VERSION 1
#define REPLY_BIT 0x80
#define FLAG_CALLER_NETNS 1
#define FLAG_TARGET_NETNS 2
#define REPLY_RUN_LOCALLY 1
#define REPLY_AT_ACCEPT 2
#define MAX_BODY (16u << 20)
#define MAX_REPLY_PART (64u << 20)
#define CONNECT_TIMEOUT_MS 1000
#define ACK_TIMEOUT_MS 2000
#define REPLY_SLACK_MS 5000
#define TRY_AGAIN_LATER 11
#define IO_FAILURE 5
#define INTERNAL 999

extern char **environ;

/* Found by the plugin framework in the file: tells it this is a pycni entry point. */
__attribute__((used)) static const char entry_marker[] = PYCNI_ENTRY_MARKER;
/* How this entry point was installed (form, autostart, socket): read by `pycni inspect`. */
__attribute__((used)) static const char entry_config[] = PYCNI_ENTRY_CONFIG;

_Static_assert(sizeof(PYCNI_SOCKET_PATH) <= sizeof(((struct sockaddr_un *)0)->sun_path),
               "socket path too long for sockaddr_un");

static void write_all(int fd, const char *data, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        data += n;
        len -= (size_t)n;
    }
}

static void put_str(int fd, const char *s) { write_all(fd, s, strlen(s)); }

static void put_int(int fd, int value) {
    char buf[16];
    size_t i = sizeof(buf);
    unsigned v = value < 0 ? 0u : (unsigned)value;
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v && i > 0);
    write_all(fd, buf + i, sizeof(buf) - i);
}

/* Print a CNI error object on stdout and exit 1, as a plugin does. Texts carry no quotes. */
static void fail(int code, const char *msg, const char *details) {
    put_str(1, "{\"code\": ");
    put_int(1, code);
    put_str(1, ", \"msg\": \"");
    put_str(1, msg);
    put_str(1, "\", \"details\": \"");
    put_str(1, details);
    put_str(1, "\"}\n");
    _exit(1);
}

/* Run the plugin in-process: exec the venv's Python, with the stdin we consumed (if any)
 * put back on fd 0 through a memfd. Nothing reached a daemon, so this is safe. */
static void fallback(const char *type, const char *body, size_t body_len, int have_body) {
    if (have_body) {
        int fd = memfd_create("pycni-stdin", 0);
        if (fd < 0)
            fail(INTERNAL, "pycni: cannot keep stdin for the in-process run", strerror(errno));
        write_all(fd, body, body_len);
        if (lseek(fd, 0, SEEK_SET) != 0 || dup2(fd, 0) < 0)
            fail(INTERNAL, "pycni: cannot keep stdin for the in-process run", strerror(errno));
        close(fd);
    }
    char *const args[] = {(char *)PYCNI_PYTHON, (char *)"-IS", (char *)"-c",
                          (char *)PYCNI_FALLBACK_CODE, (char *)type, NULL};
    execv(PYCNI_PYTHON, args);
    fail(INTERNAL, "pycni: cannot run the plugin in-process (exec of the venv python failed)",
         strerror(errno));
}

/* `TYPE daemon ARGS` (the reference's `dhcp daemon` in a distro unit): the plugin's own
 * command line, run by the venv's Python in this process (same PID: socket activation's
 * LISTEN_PID holds, and fd 3 stays open), never sent to the warm daemon. */
static void own_command_line(const char *type, int argc, char **argv) {
    char **args = calloc((size_t)argc + 5, sizeof(char *));
    if (!args)
        fail(INTERNAL, "pycni: out of memory", "");
    args[0] = (char *)PYCNI_PYTHON;
    args[1] = (char *)"-IS";
    args[2] = (char *)"-c";
    args[3] = (char *)PYCNI_FALLBACK_CODE;
    args[4] = (char *)type;
    for (int i = 1; i < argc; i++)
        args[4 + i] = argv[i];
    execv(PYCNI_PYTHON, args);
    fail(INTERNAL, "pycni: cannot run the plugin's command line (exec of the venv python failed)",
         strerror(errno));
}

#define CALLER_WAIT_MS 30000 /* then the daemon starts anyway */
#define LOCK_RETRIES 40      /* x LOCK_RETRY_US: 2 s for an exiting daemon to let go */
#define LOCK_RETRY_US 50000

/* In the grandchild: own session, nobody's child, stdio on the log, only the lock kept.
 * ``caller`` is a pidfd of the entry point (or -1): importing the plugins takes CPU that the
 * call running in-process needs, so the daemon starts once that call is over. */
static void start_daemon(int caller) {
    if (setsid() < 0 || fork() != 0)
        _exit(0);
    /* The daemon's own rule: a root-owned directory nobody else can write (no planted files). */
    struct stat dir;
    if (lstat(PYCNI_SOCKET_DIR, &dir) == 0 &&
        (!S_ISDIR(dir.st_mode) || dir.st_uid != 0 || (dir.st_mode & 022)))
        _exit(0);
    int lock = open(PYCNI_LOCK_PATH, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (lock < 0 && errno == ENOENT && mkdir(PYCNI_SOCKET_DIR, 0700) == 0)
        lock = open(PYCNI_LOCK_PATH, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (lock < 0)
        _exit(0);
    /* The runtime's stdout and stderr are let go before any waiting, the lock's included: a
     * runtime reads them to their end, so it would wait as long as we hold them. */
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int log = open(PYCNI_LOG_PATH, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (null < 0 || log < 0 || dup2(null, 0) < 0 || dup2(log, 1) < 0 || dup2(log, 2) < 0)
        _exit(0);
    /* Held: another daemon is starting or serving, or one that left when idle is still
     * closing its files (its socket is gone already). Only the last lasts long: retry a while. */
    for (int tries = 0; flock(lock, LOCK_EX | LOCK_NB) < 0; tries++) {
        if (tries >= LOCK_RETRIES)
            _exit(0);
        usleep(LOCK_RETRY_US);
    }
    if (caller >= 0) {
        struct pollfd done = {.fd = caller, .events = POLLIN};
        while (poll(&done, 1, CALLER_WAIT_MS) < 0 && errno == EINTR)
            ;
        close(caller);
    }
    if (lock == 3) {
        if (fcntl(3, F_SETFD, 0) < 0)
            _exit(0);
    } else if (dup2(lock, 3) < 0) {
        _exit(0);
    }
    if (close_range(4, ~0U, 0) < 0) /* nothing else of the caller's stays open */
        for (int fd = 4; fd < 65536; fd++)
            close(fd);
    if (chdir("/") < 0)
        _exit(0);
    umask(077);
    char *const args[] = {(char *)PYCNI_PYTHON, (char *)"-IS", (char *)"-c",
                          (char *)PYCNI_DAEMON_CODE, (char *)"--socket", (char *)PYCNI_SOCKET_PATH,
                          (char *)"--idle-exit", (char *)PYCNI_IDLE_EXIT,
                          (char *)"--autostart-lock-fd", (char *)"3", NULL};
    char *const env[] = {(char *)"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                         (char *)"LANG=C.UTF-8", NULL};
    execve(PYCNI_PYTHON, args, env);
    _exit(127);
}

/* No daemon answered: start one in the background (root only; errors are the log's). */
static void autostart(void) {
    if (!PYCNI_AUTOSTART || geteuid() != 0)
        return;
    int self = (int)syscall(SYS_pidfd_open, getpid(), 0); /* pinned now: no pid reuse */
    pid_t child = fork();
    if (child == 0)
        start_daemon(self);
    if (child > 0)
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
            ;
    if (self >= 0)
        close(self);
}

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static uint32_t get32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* 0 when all was sent, -1 when the daemon closed its side (its reply may be waiting). */
static int send_all(int s, const char *data, size_t len) {
    while (len > 0) {
        ssize_t n = send(s, data, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EPIPE || errno == ECONNRESET)
                return -1;
            fail(TRY_AGAIN_LATER, "pycni daemon failed mid-call, try again later", strerror(errno));
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* 0 once len bytes arrived; else the errno (0 for end-of-file). SO_RCVTIMEO bounds it. */
static int recv_some(int s, char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = recv(s, buf, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno ? errno : EIO;
        if (n == 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static void recv_all(int s, char *buf, size_t len) {
    int err = recv_some(s, buf, len);
    if (err == EAGAIN || err == EWOULDBLOCK)
        fail(TRY_AGAIN_LATER, "pycni daemon failed mid-call, try again later",
             "no reply within the bound the daemon announced; the call may have run, so it is "
             "not re-run");
    if (err)
        fail(TRY_AGAIN_LATER, "pycni daemon failed mid-call, try again later",
             err < 0 ? "connection closed before the reply was complete" : strerror(err));
}

static char *read_stdin(size_t *len) {
    size_t cap = 8192, used = 0;
    char *buf = malloc(cap);
    if (!buf)
        fail(IO_FAILURE, "pycni: out of memory reading stdin", "");
    for (;;) {
        if (used == cap) {
            if (cap >= MAX_BODY)
                fail(IO_FAILURE, "pycni: network configuration on stdin is too large", "");
            cap *= 2;
            char *grown = realloc(buf, cap);
            if (!grown)
                fail(IO_FAILURE, "pycni: out of memory reading stdin", "");
            buf = grown;
        }
        ssize_t n = read(0, buf + used, cap - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            fail(IO_FAILURE, "pycni: error reading stdin", strerror(errno));
        if (n == 0)
            break;
        used += (size_t)n;
    }
    *len = used;
    return buf;
}

static char *read_part(int s, uint32_t len) {
    if (len > MAX_REPLY_PART)
        fail(TRY_AGAIN_LATER, "pycni daemon failed mid-call, try again later", "reply too large");
    char *buf = malloc(len ? len : 1);
    if (!buf)
        fail(IO_FAILURE, "pycni: out of memory reading the reply", "");
    recv_all(s, buf, len);
    return buf;
}

static void set_timeout(int s, int which, long ms) {
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    setsockopt(s, SOL_SOCKET, which, &tv, sizeof(tv));
}

static void set_send_timeout(int s, long ms) { set_timeout(s, SO_SNDTIMEO, ms); }

/* Print a reply's stdout and stderr (read from the socket) and return its exit code. */
static int relay(int s, const unsigned char *reply) {
    int code = (int)get32(reply + 8);
    uint32_t out_len = get32(reply + 12), err_len = get32(reply + 16);
    char *out = read_part(s, out_len);
    char *err = read_part(s, err_len);
    close(s);
    write_all(2, err, err_len);
    write_all(1, out, out_len);
    return code;
}

/* The HELLO: the reply bound (ms, >= 0) once the daemon acknowledged it; -1 when it ran and
 * will run nothing (silent for ACK_TIMEOUT_MS, gone, another version, or its own say-so:
 * run in-process); -2 when it answered for good at accept (a refusal), left in reply. */
static long hello(int s, unsigned char *reply) {
    unsigned char msg[PREFIX_SIZE];
    memset(msg, 0, sizeof(msg));
    memcpy(msg, PYCNI_MAGIC, 4);
    msg[4] = PYCNI_PROTOCOL_VERSION;
    msg[5] = KIND_HELLO;
    set_timeout(s, SO_RCVTIMEO, ACK_TIMEOUT_MS);
    ssize_t n;
    do
        n = send(s, msg, sizeof(msg), MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    /* A failed or short send is fine: a refusal answered at accept is waiting to be read. */
    if (recv_some(s, (char *)reply, REPLY_SIZE) != 0)
        return -1; /* no acknowledgement: the daemon has no byte of the call */
    if (memcmp(reply, PYCNI_MAGIC, 4) != 0 || !(reply[5] & REPLY_BIT))
        return -1;
    unsigned flags = (unsigned)(reply[6] << 8) | reply[7];
    if (flags & REPLY_RUN_LOCALLY)
        return -1;
    if (reply[4] == PYCNI_PROTOCOL_VERSION && reply[5] == (KIND_HELLO | REPLY_BIT)) {
        long bound = (long)(int32_t)get32(reply + 8);
        return bound < 0 ? 0 : bound;
    }
    if (reply[4] == LEGACY_VERSION && (flags & REPLY_AT_ACCEPT))
        return -2;
    return -1; /* a daemon of another protocol version: it ran nothing */
}

int main(int argc, char **argv) {
    const char *type = argc > 0 && argv[0] ? argv[0] : "";
    const char *slash = strrchr(type, '/');
    if (slash)
        type = slash + 1;
    if (!*type)
        fail(IO_FAILURE, "pycni: cannot tell the plugin type from argv[0]", "");
    if (argc > 1 && strcmp(argv[1], "daemon") == 0)
        own_command_line(type, argc, argv);

    /* All of stdin first: a runtime that feeds it slowly must not hold the daemon. */
    size_t body_len = 0;
    char *body = NULL;
    const char *command = getenv("CNI_COMMAND");
    int have_body = !command || strcmp(command, "VERSION") != 0;
    if (have_body)
        body = read_stdin(&body_len);

    /* The namespaces are opened before connecting, so that the call follows the daemon's
     * acknowledgement at once (the fds are close-on-exec: an in-process fallback drops them). */
    int fds[2], nfds = 0;
    unsigned flags = 0;
    int own = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (own >= 0) {
        fds[nfds++] = own;
        flags |= FLAG_CALLER_NETNS;
    }
    const char *netns = getenv("CNI_NETNS");
    if (netns && *netns) {
        int target = open(netns, O_RDONLY | O_CLOEXEC);
        if (target >= 0) { /* if missing, the plugin reports it (DEL tolerates it) */
            fds[nfds++] = target;
            flags |= FLAG_TARGET_NETNS;
        }
    }

    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, PYCNI_SOCKET_PATH, sizeof(PYCNI_SOCKET_PATH));
    if (s >= 0)
        set_send_timeout(s, CONNECT_TIMEOUT_MS); /* a full backlog: give up, run here */
    if (s < 0 || connect(s, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        if (s >= 0 && (errno == ENOENT || errno == ECONNREFUSED)) {
            close(s);
            autostart(); /* no daemon at all (not a busy one): start one for the next calls */
        }
        fallback(type, body, body_len, have_body); /* nothing reached a daemon */
    }
    set_send_timeout(s, 0);

    struct ucred cred;
    socklen_t cred_len = sizeof(cred);
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) < 0 || cred.uid != 0)
        fail(IO_FAILURE, "pycni: refusing the daemon socket: its server is not root",
             PYCNI_SOCKET_PATH);

    unsigned char reply[REPLY_SIZE];
    long bound = hello(s, reply);
    if (bound == -2)
        return relay(s, reply);
    if (bound < 0) {
        close(s); /* nothing of the call reached a daemon */
        fallback(type, body, body_len, have_body);
    }
    set_timeout(s, SO_RCVTIMEO, bound + REPLY_SLACK_MS);

    size_t head_len = strlen(type) + 1;
    for (char **e = environ; *e; e++)
        if ((*e)[0] != '=' && strchr(*e, '='))
            head_len += strlen(*e) + 1;
    char *msg = malloc(PREFIX_SIZE + head_len);
    if (!msg)
        fail(IO_FAILURE, "pycni: out of memory", "");
    unsigned char *p = (unsigned char *)msg;
    memcpy(p, PYCNI_MAGIC, 4);
    p[4] = PYCNI_PROTOCOL_VERSION;
    p[5] = KIND_CALL;
    p[6] = (unsigned char)(flags >> 8);
    p[7] = (unsigned char)flags;
    put32(p + 8, (uint32_t)head_len);
    put32(p + 12, (uint32_t)body_len);
    char *h = msg + PREFIX_SIZE;
    size_t n = strlen(type) + 1;
    memcpy(h, type, n);
    h += n;
    for (char **e = environ; *e; e++) {
        if ((*e)[0] == '=' || !strchr(*e, '='))
            continue;
        n = strlen(*e) + 1;
        memcpy(h, *e, n);
        h += n;
    }

    /* One sendmsg carries the namespace fds, the prefix, the head and the body: the daemon
     * finds the whole call in one read instead of waking up for the body again. */
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * 2)];
    } control;
    memset(&control, 0, sizeof(control));
    size_t msg_len = PREFIX_SIZE + head_len;
    struct iovec iov[2] = {{.iov_base = msg, .iov_len = msg_len},
                           {.iov_base = body ? body : (char *)"", .iov_len = body_len}};
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = iov;
    mh.msg_iovlen = body_len > 0 ? 2 : 1;
    if (nfds > 0) {
        mh.msg_control = control.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t sent;
    do
        sent = sendmsg(s, &mh, MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    if (sent >= 0) {
        /* A refusal is answered without reading: its reply waits for us even if sending fails.
         * What a short sendmsg left of either part goes out here. */
        size_t done = (size_t)sent;
        if (done < msg_len) {
            if (send_all(s, msg + done, msg_len - done) == 0)
                send_all(s, body ? body : "", body_len);
        } else if (done < msg_len + body_len) {
            send_all(s, body + (done - msg_len), msg_len + body_len - done);
        }
    } else if (errno != EPIPE && errno != ECONNRESET) {
        fail(TRY_AGAIN_LATER, "pycni daemon failed mid-call, try again later", strerror(errno));
    }

    recv_all(s, (char *)reply, sizeof(reply));
    if (memcmp(reply, PYCNI_MAGIC, 4) != 0 || reply[4] != PYCNI_PROTOCOL_VERSION ||
        !(reply[5] & REPLY_BIT))
        fail(TRY_AGAIN_LATER, "pycni daemon failed mid-call, try again later",
             "the reply is not a pycni daemon reply");
    if (((reply[6] << 8) | reply[7]) & REPLY_RUN_LOCALLY) {
        close(s); /* the daemon ran nothing */
        fallback(type, body, body_len, have_body);
    }
    return relay(s, reply);
}
