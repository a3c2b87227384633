/*
 * toolrt-spawn: the per-call subreaper, in C.
 *
 * The agent (Python) would otherwise fork itself for every call and fork
 * again to start the command: two copies of a Python process per call. This
 * helper is started with posix_spawn (vfork, no copy) and does the same job
 * as procs.run_subreaper, which stays the fallback when it is not built:
 *
 *   toolrt-spawn UID GID GRACE_MS CWD PROGRAM ARG...
 *
 * fds 0/1/2 are the command's stdin/stdout/stderr, fd 3 the status pipe to
 * the agent; the environment is the command's. It stays root, marks itself
 * PR_SET_CHILD_SUBREAPER (so setsid/double-forked descendants land on it),
 * raises its oom_score_adj to 1000 (inherited: a memory bomb is killed before
 * the agent), starts the command as UID/GID with no supplementary groups,
 * reports its pid, then its wait status when the main process exits, and keeps
 * reaping until no descendant is left. SIGTERM kills the whole tree: TERM,
 * then KILL after GRACE_MS. Reports are fixed binary records (procs.REPORT:
 * type, then two ints), never text: no byte of the cwd or the command ever
 * reaches the agent, so none can change what a report says.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STATUS_FD 3
#define MAX_PIDS 65536

/* procs.REPORT ("=Iii") and its record types and stages. */
enum { REPORT_PID = 1, REPORT_STATUS = 2, REPORT_ERROR = 3 };
enum { STAGE_SUBREAPER = 1, STAGE_FORK = 2, STAGE_USER = 3, STAGE_CWD = 4, STAGE_EXEC = 5 };
struct report {
    uint32_t type;
    int32_t a;
    int32_t b;
};

static void on_child(int sig) { (void)sig; }

/* One record in one write (12 bytes: atomic on a pipe). */
static void report(uint32_t type, int32_t a, int32_t b) {
    struct report r = {type, a, b};
    while (write(STATUS_FD, &r, sizeof r) < 0 && errno == EINTR) {
    }
}

static void report_error(int stage, int err) { report(REPORT_ERROR, stage, err > 0 ? err : EIO); }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Every live process below us, from one pass over /proc. */
static int descendants(pid_t root, pid_t *out, int cap) {
    static pid_t pids[MAX_PIDS], ppids[MAX_PIDS];
    int n = 0;
    DIR *proc = opendir("/proc");
    if (proc == NULL)
        return 0;
    struct dirent *entry;
    while ((entry = readdir(proc)) != NULL && n < MAX_PIDS) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9')
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", entry->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t len = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (len <= 0)
            continue;
        buf[len] = '\0';
        /* The command name may hold spaces and parentheses: parse after the last ')'. */
        char *close_paren = strrchr(buf, ')');
        if (close_paren == NULL)
            continue;
        char state;
        int ppid;
        if (sscanf(close_paren + 1, " %c %d", &state, &ppid) != 2)
            continue;
        pids[n] = (pid_t)atoi(entry->d_name);
        ppids[n] = (pid_t)ppid;
        n++;
    }
    closedir(proc);
    /* Breadth-first from root over the parent links. */
    int found = 0, head = 0;
    pid_t queue_root = root;
    for (;;) {
        for (int i = 0; i < n && found < cap; i++) {
            if (ppids[i] == queue_root && pids[i] != root) {
                int seen = 0;
                for (int j = 0; j < found; j++)
                    if (out[j] == pids[i])
                        seen = 1;
                if (!seen)
                    out[found++] = pids[i];
            }
        }
        if (head >= found)
            break;
        queue_root = out[head++];
    }
    return found;
}

static void reap_nowait(void) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

static void kill_tree(double grace_s) {
    static pid_t found[MAX_PIDS];
    pid_t me = getpid();
    int n = descendants(me, found, MAX_PIDS);
    for (int i = 0; i < n; i++)
        kill(found[i], SIGTERM);
    double deadline = now() + grace_s;
    struct timespec pause = {0, 10 * 1000 * 1000};
    while (now() < deadline) {
        reap_nowait();
        if (descendants(me, found, MAX_PIDS) == 0)
            return;
        nanosleep(&pause, NULL);
    }
    /* Killed processes cannot fork and their children land on us: a few
     * passes converge even against a fork bomb. */
    struct timespec brief = {0, 2 * 1000 * 1000};
    for (;;) {
        n = descendants(me, found, MAX_PIDS);
        if (n == 0)
            break;
        for (int i = 0; i < n; i++)
            kill(found[i], SIGKILL);
        reap_nowait();
        nanosleep(&brief, NULL);
    }
    reap_nowait();
}

int main(int argc, char **argv) {
    if (argc < 6) {
        report_error(STAGE_FORK, EINVAL); /* usage: toolrt-spawn UID GID GRACE_MS CWD PROGRAM ARG... */
        return 2;
    }
    uid_t uid = (uid_t)strtoul(argv[1], NULL, 10);
    gid_t gid = (gid_t)strtoul(argv[2], NULL, 10);
    double grace_s = strtod(argv[3], NULL) / 1000.0;
    const char *cwd = argv[4];
    char **command = &argv[5];

    fcntl(STATUS_FD, F_SETFD, FD_CLOEXEC);
    /* SIGTERM (kill the call) and SIGCHLD stay blocked and are taken with
     * sigwaitinfo: no window where a kill request can be missed. The agent
     * spawned us with SIGTERM already blocked. */
    struct sigaction chld = {0};
    chld.sa_handler = on_child;
    sigemptyset(&chld.sa_mask);
    sigaction(SIGCHLD, &chld, NULL);
    sigset_t waitset, none;
    sigemptyset(&waitset);
    sigaddset(&waitset, SIGTERM);
    sigaddset(&waitset, SIGCHLD);
    sigemptyset(&none);
    sigprocmask(SIG_BLOCK, &waitset, NULL);

    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
        report_error(STAGE_SUBREAPER, errno);
        return 1;
    }
    int adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (adj >= 0) {
        ssize_t ignored = write(adj, "1000", 4);
        (void)ignored;
        close(adj);
    }

    pid_t child = fork();
    if (child < 0) {
        report_error(STAGE_FORK, errno);
        return 1;
    }
    if (child == 0) {
        struct sigaction dfl = {0};
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGCHLD, &dfl, NULL);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setsid();
        if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0) {
            report_error(STAGE_USER, errno);
            _exit(127);
        }
        if (chdir(cwd) != 0) {
            report_error(STAGE_CWD, errno);
            _exit(127);
        }
        execv(command[0], command);
        report_error(STAGE_EXEC, errno);
        _exit(127);
    }
    report(REPORT_PID, (int32_t)child, 0);

    for (;;) {
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            if (pid == child)
                report(REPORT_STATUS, status, 0);
        }
        if (pid < 0 && errno == ECHILD)
            return 0; /* nothing left below us */
        int sig = sigwaitinfo(&waitset, NULL);
        if (sig == SIGTERM) {
            kill_tree(grace_s);
            return 0;
        }
    }
}
