/* SPDX-License-Identifier: MIT */
/*
 * Nothing of a job survives arrun, not even a SIGKILLed arrun: the processes the ranks
 * started are killed, every /dev/shm name of the job's id is removed, and arrun's
 * watcher does not linger after a job that ended normally.
 *
 *   test_arrun_orphans ARRUN ARRUN_ORPHAN
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "arrun_run.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NRANKS 2

static const char *orphan_path; /* arrun_path: arrun_run.c */

/* The first /dev/shm name of the id still there after wait_s, or NULL (static buffer). */
static const char *segment_left(const char *id, double wait_s)
{
    static char found[300];
    double until = now_s() + wait_s;
    char prefix[128];

    snprintf(prefix, sizeof(prefix), "arcomm-%s", id + 5);
    for (;;) {
        struct dirent *e;
        DIR *d = opendir("/dev/shm");
        found[0] = '\0';
        assert_non_null(d);
        while ((e = readdir(d)) != NULL)
            if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
                snprintf(found, sizeof(found), "%s", e->d_name);
        closedir(d);
        if (!found[0])
            return NULL;
        if (now_s() >= until)
            return found;
        usleep(10000);
    }
}

struct job {
    pid_t arrun;
    int err_fd; /* read end of arrun's stderr: EOF once no process of the job holds it */
    char dir[64];
};

static void job_start(struct job *j, const char *mode)
{
    int errp[2];

    snprintf(j->dir, sizeof(j->dir), "/tmp/test-arrun-orphans-XXXXXX");
    assert_non_null(mkdtemp(j->dir));
    assert_int_equal(pipe(errp), 0);
    j->arrun = fork();
    assert_true(j->arrun >= 0);
    if (j->arrun == 0) {
        int null_fd = open("/dev/null", O_RDWR);
        dup2(null_fd, STDIN_FILENO);
        dup2(null_fd, STDOUT_FILENO);
        dup2(errp[1], STDERR_FILENO);
        close(errp[0]);
        execl(arrun_path, arrun_path, "-n", "2", "--bind", "none", orphan_path, j->dir, mode,
              (char *)NULL);
        _exit(127);
    }
    close(errp[1]);
    j->err_fd = errp[0];
}

/* Reads what the rank wrote to DIR/rank<r>; waits for it up to wait_s. */
static bool read_rank(const struct job *j, int r, double wait_s, int *rank_pid, int *child_pid,
                      char *id, size_t id_len)
{
    double until = now_s() + wait_s;
    char path[128], fmt[32];

    snprintf(path, sizeof(path), "%s/rank%d", j->dir, r);
    snprintf(fmt, sizeof(fmt), "rank=%%d child=%%d id=%%%zus", id_len - 1);
    for (;;) {
        FILE *f = fopen(path, "r");
        if (f) {
            int n = fscanf(f, fmt, rank_pid, child_pid, id);
            fclose(f);
            return n == 3;
        }
        if (now_s() >= until)
            return false;
        usleep(10000);
    }
}

/* Reads arrun's stderr until EOF (true) or wait_s (false); keeps the text for messages. */
static bool stderr_closes(struct job *j, double wait_s, char *text, size_t cap)
{
    double until = now_s() + wait_s;
    size_t len = 0;

    text[0] = '\0';
    for (;;) {
        struct pollfd pfd = {.fd = j->err_fd, .events = POLLIN};
        int left = (int)((until - now_s()) * 1000);
        if (left <= 0 || poll(&pfd, 1, left) <= 0)
            return false;
        char buf[512];
        ssize_t n = read(j->err_fd, buf, sizeof(buf));
        if (n == 0)
            return true;
        if (n < 0)
            return false;
        if (len + (size_t)n < cap) {
            memcpy(text + len, buf, (size_t)n);
            len += (size_t)n;
            text[len] = '\0';
        }
    }
}

static void job_cleanup(struct job *j, const int *pids, int npids)
{
    char path[128];

    for (int k = 0; k < npids; k++)
        if (pids[k] > 0)
            kill(pids[k], SIGKILL); /* only what a failed check left behind */
    for (int r = 0; r < NRANKS; r++) {
        snprintf(path, sizeof(path), "%s/rank%d", j->dir, r);
        unlink(path);
    }
    rmdir(j->dir);
    close(j->err_fd);
}

static void test_sigkilled_arrun_leaves_nothing(void **state)
{
    (void)state;
    int pids[2 * NRANKS] = {0}, status;
    char id[128] = "", err[4096];
    const char *left;
    struct job j;

    job_start(&j, "wait");
    for (int r = 0; r < NRANKS; r++)
        if (!read_rank(&j, r, 20.0, &pids[2 * r], &pids[2 * r + 1], id, sizeof(id))) {
            kill(j.arrun, SIGKILL);
            waitpid(j.arrun, NULL, 0);
            job_cleanup(&j, pids, 2 * NRANKS);
            fail_msg("rank %d did not start its child within 20 s", r);
        }

    assert_int_equal(kill(j.arrun, SIGKILL), 0);
    assert_int_equal(waitpid(j.arrun, &status, 0), j.arrun);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    /* Ranks, their children and the watcher all held arrun's stderr. */
    bool closed = stderr_closes(&j, 10.0, err, sizeof(err));
    for (int k = 0; k < 2 * NRANKS; k++)
        if (!pid_gone(pids[k], 5.0)) {
            job_cleanup(&j, pids, 2 * NRANKS);
            fail_msg("%s %d of rank %d outlived the SIGKILLed arrun", k % 2 ? "child" : "rank",
                     pids[k], k / 2);
        }
    left = segment_left(id, 5.0);
    if (left) {
        char path[400];
        snprintf(path, sizeof(path), "/dev/shm/%s", left);
        job_cleanup(&j, pids, 2 * NRANKS);
        fail_msg("%s is left after the SIGKILLed arrun", path);
    }
    if (!closed) {
        job_cleanup(&j, pids, 2 * NRANKS);
        fail_msg("something of the job still holds arrun's stderr 10 s after the SIGKILL");
    }
    job_cleanup(&j, pids, 2 * NRANKS);
}

static void test_watcher_does_not_linger(void **state)
{
    (void)state;
    int pids[2 * NRANKS] = {0}, status;
    char id[128] = "", err[4096];
    struct job j;

    job_start(&j, "quick");
    assert_int_equal(waitpid(j.arrun, &status, 0), j.arrun);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        stderr_closes(&j, 5.0, err, sizeof(err));
        job_cleanup(&j, pids, 0);
        fail_msg("arrun exited with status 0x%x; stderr:\n%s", status, err);
    }
    for (int r = 0; r < NRANKS; r++)
        assert_true(read_rank(&j, r, 0, &pids[2 * r], &pids[2 * r + 1], id, sizeof(id)));
    /* arrun reaped its watcher before exiting: nothing holds its stderr any more. */
    assert_true(stderr_closes(&j, 5.0, err, sizeof(err)));
    assert_string_equal(err, "");
    assert_null(segment_left(id, 0));
    job_cleanup(&j, pids, 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigkilled_arrun_leaves_nothing),
        cmocka_unit_test(test_watcher_does_not_linger),
    };

    if (argc != 3) {
        fprintf(stderr, "usage: %s ARRUN ARRUN_ORPHAN\n", argv[0]);
        return 2;
    }
    arrun_path = argv[1];
    orphan_path = argv[2];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
