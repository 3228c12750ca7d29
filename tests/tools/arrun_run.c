/* SPDX-License-Identifier: MIT */
/*
 * The harness of test_arrun (see arrun_run.h).
 */
#include "arrun_run.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hwloc.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *arrun_path, *helper_path, *allreduce_path;

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void append(char **buf, size_t *len, const char *p, size_t n)
{
    *buf = realloc(*buf, *len + n + 1);
    assert_non_null(*buf);
    memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = '\0';
}

void run_free(struct run *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof(*r));
}

/* Runs arrun with the NULL-terminated arguments; waits for it and for EOF on its output. */
static void run_arrun_v(struct run *r, const struct run_opts *ro, va_list ap)
{
    static const struct run_opts none = {0};
    const char *argv[MAX_ARGS];
    int argc = 0, out[2], err[2], in[2] = {-1, -1}, wstatus;
    bool signalled = false, killed = false;
    double start;
    pid_t pid;

    if (!ro)
        ro = &none;
    memset(r, 0, sizeof(*r));
    argv[argc++] = arrun_path;
    for (const char *a; (a = va_arg(ap, const char *)) != NULL;) {
        assert_true(argc < MAX_ARGS - 1);
        argv[argc++] = a;
    }
    argv[argc] = NULL;

    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    assert_int_equal(pipe2(err, O_CLOEXEC), 0);
    if (ro->stdin_text) {
        assert_int_equal(pipe2(in, O_CLOEXEC), 0);
        assert_int_equal(write(in[1], ro->stdin_text, strlen(ro->stdin_text)),
                         (ssize_t)strlen(ro->stdin_text));
        close(in[1]);
    }
    start = now_s();
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int null_fd = open("/dev/null", O_RDONLY);
        dup2(in[0] >= 0 ? in[0] : null_fd, STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        dup2(err[1], STDERR_FILENO);
        /* arrun's default: quiet unless asked (the tests compare stderr). */
        setenv("ARCOMM_LOG_LEVEL", "error", 1);
        if (ro->env)
            putenv((char *)ro->env);
        if (ro->leak_fd)
            dup2(null_fd, 9); /* dup2 clears FD_CLOEXEC on 9 */
        if (ro->close_stdin)
            close(STDIN_FILENO);
        if (ro->cgroup) {
            char pid_text[24];
            int fd = open(ro->cgroup, O_WRONLY);
            int n = snprintf(pid_text, sizeof(pid_text), "%d\n", (int)getpid());
            if (fd < 0 || write(fd, pid_text, (size_t)n) != n)
                _exit(125);
            close(fd);
        }
        if (ro->nofile || ro->nofile_hard) {
            struct rlimit rl;
            getrlimit(RLIMIT_NOFILE, &rl);
            if (ro->nofile)
                rl.rlim_cur = (rlim_t)ro->nofile;
            if (ro->nofile_hard)
                rl.rlim_max = (rlim_t)ro->nofile_hard;
            if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
                _exit(125);
        }
        if (ro->cpus) {
            cpu_set_t set;
            CPU_ZERO(&set);
            for (const char *c = ro->cpus; *c; c += strspn(c, ","))
                CPU_SET((int)strtol(c, (char **)&c, 10), &set);
            if (sched_setaffinity(0, sizeof(set), &set) < 0)
                _exit(125);
        }
        execv(arrun_path, (char *const *)argv);
        _exit(126);
    }
    if (in[0] >= 0)
        close(in[0]);
    close(out[1]);
    close(err[1]);

    struct pollfd pfds[2] = {{.fd = out[0], .events = POLLIN}, {.fd = err[0], .events = POLLIN}};
    bool watched = ro->watch == NULL;
    while (pfds[0].fd >= 0 || pfds[1].fd >= 0) {
        if (!watched)
            watched = ro->watch((int)pid, r->out ? r->out : "", ro->watch_arg);
        int timeout = 100;
        char chunk[65536];

        if (ro->signo && !signalled && now_s() - start >= ro->signal_after) {
            kill(pid, ro->signo);
            signalled = true;
        }
        if (!killed && now_s() - start > RUN_LIMIT) {
            kill(pid, SIGKILL);
            killed = true;
        }
        if (poll(pfds, 2, timeout) < 0 && errno != EINTR)
            fail_msg("poll: %s", strerror(errno));
        for (int k = 0; k < 2; k++) {
            if (pfds[k].fd < 0 || !pfds[k].revents)
                continue;
            ssize_t n = read(pfds[k].fd, chunk, sizeof(chunk));
            if (n > 0) {
                if (k == 0)
                    append(&r->out, &r->out_len, chunk, (size_t)n);
                else
                    append(&r->err, &r->err_len, chunk, (size_t)n);
            } else if (n == 0 || errno != EINTR) {
                close(pfds[k].fd);
                pfds[k].fd = -1;
            }
        }
        if (killed && now_s() - start > RUN_LIMIT + 5)
            break; /* something else holds the pipes; give up on them */
    }
    while (waitpid(pid, &wstatus, 0) < 0)
        assert_int_equal(errno, EINTR);
    r->secs = now_s() - start;
    for (int k = 0; k < 2; k++)
        if (pfds[k].fd >= 0)
            close(pfds[k].fd);
    if (!r->out)
        append(&r->out, &r->out_len, "", 0);
    if (!r->err)
        append(&r->err, &r->err_len, "", 0);
    r->status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    if (killed)
        fail_msg("arrun ran past %.0f s; stderr:\n%s", RUN_LIMIT, r->err);
}

void run_arrun(struct run *r, const struct run_opts *ro, ...)
{
    va_list ap;
    va_start(ap, ro);
    run_arrun_v(r, ro, ap);
    va_end(ap);
}

/* True once pid is gone (or a zombie nobody but init will reap), waiting up to `wait_s`. */
bool pid_gone(int pid, double wait_s)
{
    double until = now_s() + wait_s;
    char path[64];

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    for (;;) {
        FILE *f = fopen(path, "r");
        char state = '?';
        if (!f)
            return true;
        /* "pid (comm) S ...": the state follows the last ')'. */
        char line[512];
        if (fgets(line, sizeof(line), f)) {
            char *p = strrchr(line, ')');
            if (p && p[1] == ' ')
                state = p[2];
        }
        fclose(f);
        if (state == 'Z' || state == 'X')
            return true;
        if (now_s() >= until)
            return false;
        usleep(10000);
    }
}

/* Every "pid=N" a rank printed: each of those processes must be gone. */
int check_pids_gone(const char *out, double wait_s)
{
    int count = 0;
    for (const char *p = out; (p = strstr(p, "pid=")) != NULL; p += 4) {
        int pid = atoi(p + 4);
        assert_true(pid > 1);
        if (!pid_gone(pid, wait_s))
            fail_msg("rank process %d outlived arrun", pid);
        count++;
    }
    return count;
}

/* No name of this job's id in /dev/shm ("arcomm-" + the hex part, with any suffix). */
void check_no_segments(const char *id)
{
    char prefix[128];
    struct dirent *e;
    DIR *d;

    assert_int_equal(strncmp(id, "arc1-", 5), 0);
    snprintf(prefix, sizeof(prefix), "arcomm-%s", id + 5);
    d = opendir("/dev/shm");
    assert_non_null(d);
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            fail_msg("/dev/shm/%s is left after the job", e->d_name);
    closedir(d);
}

/* Every "id=..." in out: the ids the ranks saw. */
void check_ids_leave_nothing(const char *out)
{
    for (const char *p = out; (p = strstr(p, "id=")) != NULL; p += 3) {
        char id[128];
        if (sscanf(p + 3, "%127s", id) == 1 && strncmp(id, "arc1-", 5) == 0)
            check_no_segments(id);
    }
}

bool id_well_formed(const char *id)
{
    if (strncmp(id, "arc1-", 5) != 0 || strlen(id) != 5 + 32)
        return false;
    for (const char *p = id + 5; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')))
            return false;
    return true;
}

/* Parses the `env` mode's lines into per-rank records; checks each rank printed once. */
void parse_env(const char *out, int nranks, struct env_line *lines)
{
    int seen = 0;
    const char *p = out;

    for (int i = 0; i < nranks; i++)
        lines[i].rank = -1;
    while (*p) {
        struct env_line l;
        const char *nl = strchr(p, '\n');
        assert_non_null(nl);
        int n =
            sscanf(p,
                   "rank=%d size=%d local_rank=%d local_size=%d id=%127s fds=%d pgid=%d "
                   "cpus=%2047s",
                   &l.rank, &l.size, &l.local_rank, &l.local_size, l.id, &l.fds, &l.pgid, l.cpus);
        if (n != 8)
            fail_msg("malformed line from a rank: %.*s", (int)(nl - p), p);
        assert_in_range(l.rank, 0, nranks - 1);
        assert_int_equal(lines[l.rank].rank, -1); /* each rank exactly once */
        lines[l.rank] = l;
        seen++;
        p = nl + 1;
    }
    assert_int_equal(seen, nranks);
}

/* ---- the environment ----------------------------------------------------------------- */
