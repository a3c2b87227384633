/*
 * toolrt-spawn: the launcher of a call's command, in C.
 *
 * The agent (Python) would otherwise fork itself for every call: a copy of a
 * Python process per call. This helper is started with posix_spawn (vfork,
 * no copy) and does what procs.spawn_fork does, which stays the fallback
 * when it is not built:
 *
 *   toolrt-spawn FILTER GROUP UID GID CWD SLACK PROGRAM ARG...
 *
 * fds 0/1/2 are the command's stdin/stdout/stderr, fd 3 the report pipe to
 * the agent; the environment is the command's. It starts a new session,
 * raises its oom_score_adj to 1000 (a memory bomb is killed before the
 * agent), takes GROUP as its only supplementary group (the mark by which the
 * agent finds every process of the call, tracker.py), takes a terminal on
 * its stdin as its controlling terminal, sets its timer slack to SLACK
 * nanoseconds (the agent's own is raised, and would be inherited; `-`
 * leaves it), drops to UID/GID,
 * enters CWD, installs FILTER (a seccomp program in hex, built by
 * seccomp.py: it stacks on the engine's profile) and execs PROGRAM (looked
 * up in PATH when it has no slash): its pid becomes the command's, and the agent
 * reads its exit status itself. When a step fails it writes one fixed
 * binary record (procs.REPORT: type, stage, errno) to fd 3 and exits 127; fd
 * 3 is close-on-exec, so it closes empty when PROGRAM starts. No byte of the
 * cwd or the command ever reaches the agent, so none can change a report.
 *
 * UID is `0:MASK` for root (MASK in hex: the capabilities root keeps,
 * agent/users.py). A root exec would otherwise be handed the container's
 * bounding set; dropping the permitted set first, under no-new-privileges
 * (the container's, and this helper's own for the filter), keeps it at MASK.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define REPORT_FD 3

/* procs.REPORT ("=Iii"), its record type and its stages. */
enum { REPORT_ERROR = 1 };
enum { STAGE_SETUP = 1, STAGE_USER = 2, STAGE_CWD = 3, STAGE_EXEC = 4, STAGE_FILTER = 5 };
#define FILTER_MAX 256 /* instructions */
struct report {
    uint32_t type;
    int32_t stage;
    int32_t err;
};

/* One record in one write (12 bytes: atomic on a pipe), then exit. */
static void fail(int stage, int err) {
    struct report r = {REPORT_ERROR, stage, err > 0 ? err : EIO};
    while (write(REPORT_FD, &r, sizeof r) < 0 && errno == EINTR) {
    }
    _exit(127);
}

static unsigned long number(const char *text) {
    char *end;
    errno = 0;
    unsigned long value = strtoul(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value > 0xFFFFFFFEul)
        fail(STAGE_SETUP, EINVAL);
    return value;
}

/* UID's uid; for `0:MASK`, MASK in *caps (else none is set). */
static uid_t user_of(char *text, unsigned long *caps, int *is_root) {
    char *colon = strchr(text, ':');
    *is_root = colon != NULL;
    if (colon == NULL)
        return (uid_t)number(text);
    *colon = '\0';
    char *end;
    errno = 0;
    *caps = strtoul(colon + 1, &end, 16);
    if (errno != 0 || end == colon + 1 || *end != '\0' || number(text) != 0)
        fail(STAGE_SETUP, EINVAL);
    return 0;
}

/* Keep only `mask` (the low 32 capabilities), permitted and effective. */
static void keep_capabilities(unsigned long mask) {
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &header, data) != 0)
        fail(STAGE_USER, errno);
    data[0].permitted &= (uint32_t)mask;
    data[0].effective = data[0].permitted;
    data[0].inheritable = 0;
    memset(&data[1], 0, sizeof data[1]);
    if (syscall(SYS_capset, &header, data) != 0)
        fail(STAGE_USER, errno);
}

static int nibble(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    fail(STAGE_FILTER, EINVAL);
    return 0;
}

/* Decode FILTER and install it; no filter is never a silent outcome. */
static void install_filter(const char *hex) {
    static struct sock_filter code[FILTER_MAX];
    size_t len = strlen(hex);
    if (len == 0 || len % (2 * sizeof code[0]) != 0 || len / 2 > sizeof code)
        fail(STAGE_FILTER, EINVAL);
    unsigned char *bytes = (unsigned char *)code;
    for (size_t i = 0; i < len / 2; i++)
        bytes[i] = (unsigned char)(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
    struct sock_fprog prog = {(unsigned short)(len / 2 / sizeof code[0]), code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0)
        fail(STAGE_FILTER, errno);
}

int main(int argc, char **argv) {
    fcntl(REPORT_FD, F_SETFD, FD_CLOEXEC);
    if (argc < 8)
        fail(STAGE_SETUP, EINVAL); /* usage: toolrt-spawn FILTER GROUP UID GID CWD SLACK PROGRAM ARG... */
    const char *filter = argv[1];
    gid_t group = (gid_t)number(argv[2]);
    unsigned long caps = 0;
    int is_root = 0;
    uid_t uid = user_of(argv[3], &caps, &is_root);
    gid_t gid = (gid_t)number(argv[4]);
    const char *cwd = argv[5];
    const char *slack = argv[6];
    char **command = &argv[7];

    if (setsid() < 0)
        fail(STAGE_SETUP, errno);
    /* A terminal on stdin (a Spawn with tty) becomes the session's
     * controlling terminal: job control, ^C, SIGWINCH and /dev/tty work. */
    if (isatty(0) && ioctl(0, TIOCSCTTY, 0) != 0)
        fail(STAGE_SETUP, errno);
    /* The slack the agent started with: a command's timers fire as they
     * would without the agent (best effort: precision, not a limit). */
    if (strcmp(slack, "-") != 0)
        (void)prctl(PR_SET_TIMERSLACK, number(slack), 0, 0, 0);
    int adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (adj >= 0) {
        ssize_t ignored = write(adj, "1000", 4);
        (void)ignored;
        close(adj);
    }
    if (setgroups(1, &group) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
        fail(STAGE_USER, errno);
    if (is_root)
        keep_capabilities(caps);
    if (chdir(cwd) != 0)
        fail(STAGE_CWD, errno);
    install_filter(filter);
    /* PROGRAM without a slash is looked up in the command's PATH (a Spawn's argv). */
    execvp(command[0], command);
    fail(STAGE_EXEC, errno);
    return 127;
}
