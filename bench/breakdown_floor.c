/* The floors of bench/breakdown.py, compiled at bench time: the least a chain call's parts need.
 *   floor true               exit at once (what one exec of a plugin costs before any work)
 *   floor fsync DIR N        N files created, written and fsynced, then DIR fsynced (ns printed)
 *   floor unlink DIR N       N files unlinked, then DIR fsynced (ns printed)
 *   floor netlink N          N RTM_GETLINK of ifindex 1 with their answers (ns printed)
 */
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int files(const char *dir, int n, int create) {
    char path[4096];
    int d = open(dir, O_RDONLY | O_DIRECTORY);
    if (d < 0) return 1;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/floor-%d", dir, i);
        if (create) {
            int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
            if (fd < 0 || write(fd, "bench0123456789abcdef\neth0", 26) != 26 || fsync(fd) != 0)
                return 1;
            close(fd);
        } else if (unlink(path) != 0) {
            return 1;
        }
    }
    if (fsync(d) != 0) return 1;
    close(d);
    return 0;
}

static int netlink(int n) {
    int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    struct sockaddr_nl addr = {.nl_family = AF_NETLINK};
    char buf[65536];
    if (s < 0 || bind(s, (struct sockaddr *)&addr, sizeof addr) < 0) return 1;
    for (int i = 0; i < n; i++) {
        struct {
            struct nlmsghdr h;
            struct ifinfomsg m;
        } req = {.h = {.nlmsg_len = sizeof req, .nlmsg_type = RTM_GETLINK,
                       .nlmsg_flags = NLM_F_REQUEST, .nlmsg_seq = (unsigned)i + 1},
                 .m = {.ifi_family = AF_UNSPEC, .ifi_index = 1}};
        if (send(s, &req, sizeof req, 0) < 0 || recv(s, buf, sizeof buf, 0) <= 0) return 1;
    }
    close(s);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "true") == 0) return 0;
    long long start = now_ns();
    int rc = 2;
    if (strcmp(argv[1], "fsync") == 0 && argc == 4) rc = files(argv[2], atoi(argv[3]), 1);
    if (strcmp(argv[1], "unlink") == 0 && argc == 4) rc = files(argv[2], atoi(argv[3]), 0);
    if (strcmp(argv[1], "netlink") == 0 && argc == 3) rc = netlink(atoi(argv[2]));
    printf("%lld\n", now_ns() - start);
    return rc;
}
