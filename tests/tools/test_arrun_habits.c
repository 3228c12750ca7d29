/* SPDX-License-Identifier: MIT */
/*
 * What people used to mpirun do to a launcher, tested from the outside: its spellings
 * (-np, --bind-to, --oversubscribe), SIGUSR1 and SIGUSR2 passed on to the ranks, Ctrl-Z
 * (SIGTSTP) stopping the whole job and SIGCONT continuing it, a closed stdin, and many
 * ranks under --label with the usual limit of 1024 open files.  Part of test_arrun
 * (main in test_arrun.c).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arrun_run.h"
#include "test_arrun.h"

/* How many times needle occurs in text. */
static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

void test_mpirun_spellings(void **state)
{
    (void)state;
    struct env_line l[3];
    struct run r;

    run_arrun(&r, NULL, "-np", "3", "--bind-to", "none", helper_path, "env", NULL);
    if (r.status != 0)
        fail_msg("arrun -np 3 --bind-to none exited %d; stderr:\n%s", r.status, r.err);
    parse_env(r.out, 3, l);
    assert_string_equal(r.err, "");
    run_free(&r);
    run_arrun(&r, NULL, "--np", "2", helper_path, "env", NULL);
    assert_int_equal(r.status, 0);
    parse_env(r.out, 2, l);
    run_free(&r);

    /* More ranks than cores: the warning, unless --oversubscribe says it is meant. */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    char nr[32];
    snprintf(nr, sizeof(nr), "%ld", ncpu + 1);
    run_arrun(&r, NULL, "-n", nr, "--bind-to", "core", helper_path, "stdin", NULL);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.err, "ranks share cores"));
    run_free(&r);
    run_arrun(&r, NULL, "-n", nr, "--oversubscribe", helper_path, "stdin", NULL);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.err, "");
    run_free(&r);
    run_arrun(&r, NULL, "-n", "2", "--bind-to", "socket", helper_path, "env", NULL);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "--bind takes none, core or numa, not 'socket'"));
    run_free(&r);
}

/* Sends what arg says once every rank has said "up". */
struct pass_on {
    int nranks;
    int signos[2];
};

static bool send_when_up(int arrun_pid, const char *out, void *arg)
{
    struct pass_on *p = arg;
    if (count_of(out, " up\n") < p->nranks)
        return false;
    for (int k = 0; k < 2; k++)
        if (p->signos[k])
            kill(arrun_pid, p->signos[k]);
    return true;
}

/* Ranks that trap SIGUSR1 and SIGUSR2, say "up", then work for about 2 s. */
#define TRAPPING_RANK                                                                              \
    "trap 'echo \"rank=$ARCOMM_RANK usr1 \"' USR1; trap 'echo \"rank=$ARCOMM_RANK usr2 \"' USR2; " \
    "echo \"rank=$ARCOMM_RANK up\"; i=0; while [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done"

/*
 * SIGUSR1 and SIGUSR2 to arrun reach every rank, and the job goes on: each rank's trap
 * runs and the job ends 0.  Before, SIGUSR1 killed arrun (its default action), the ranks
 * died with it, and the job ended 138.
 */
void test_usr_signals_passed_on(void **state)
{
    (void)state;
    struct pass_on p = {.nranks = 2, .signos = {SIGUSR1, SIGUSR2}};
    struct run_opts ro = {.watch = send_when_up, .watch_arg = &p};
    struct run r;

    run_arrun(&r, &ro, "-n", "2", "--bind", "none", "sh", "-c", TRAPPING_RANK, NULL);
    if (r.status != 0)
        fail_msg("arrun exited %d after SIGUSR1 and SIGUSR2; stderr:\n%s", r.status, r.err);
    for (int i = 0; i < 2; i++) {
        char want[64];
        for (int k = 1; k <= 2; k++) {
            snprintf(want, sizeof(want), "rank=%d usr%d \n", i, k);
            if (strstr(r.out, want) == NULL)
                fail_msg("rank %d never got SIGUSR%d:\n%s", i, k, r.out);
        }
    }
    assert_string_equal(r.err, "");
    run_free(&r);
}

/* The state letter of /proc/PID/stat ('?' when gone). */
static char proc_state(int pid)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    char state = '?';
    if (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        const char *p = strrchr(line, ')');
        if (p != NULL && p[1] == ' ')
            state = p[2];
    }
    if (f != NULL)
        fclose(f);
    return state;
}

/* Waits up to 5 s until every pid's state is (stopped) or is not (stopped) 'T'. */
static bool all_states(const int *pids, int n, bool stopped)
{
    double until = now_s() + 5.0;
    for (;;) {
        bool all = true;
        for (int i = 0; i < n && all; i++)
            all = (proc_state(pids[i]) == 'T') == stopped;
        if (all)
            return true;
        if (now_s() >= until)
            return false;
        usleep(10000);
    }
}

struct job_control {
    bool stopped, continued; /* what was seen */
    char why[256];
};

/* Once both sleeping ranks printed their pid: Ctrl-Z, look, continue, look, end. */
static bool stop_and_continue(int arrun_pid, const char *out, void *arg)
{
    struct job_control *jc = arg;
    int pids[3] = {arrun_pid, 0, 0}, n = 1;

    for (const char *p = out; n < 3 && (p = strstr(p, "pid=")) != NULL; p += 4)
        pids[n++] = atoi(p + 4);
    if (n < 3)
        return false;
    kill(arrun_pid, SIGTSTP);
    jc->stopped = all_states(pids, 3, true);
    if (!jc->stopped)
        snprintf(jc->why, sizeof(jc->why), "after SIGTSTP: arrun %c, ranks %c %c",
                 proc_state(pids[0]), proc_state(pids[1]), proc_state(pids[2]));
    kill(arrun_pid, SIGCONT);
    jc->continued = all_states(pids, 3, false);
    if (jc->stopped && !jc->continued)
        snprintf(jc->why, sizeof(jc->why), "after SIGCONT: arrun %c, ranks %c %c",
                 proc_state(pids[0]), proc_state(pids[1]), proc_state(pids[2]));
    kill(arrun_pid, SIGTERM);
    return true;
}

/*
 * Ctrl-Z (SIGTSTP to arrun) stops every rank and then arrun; SIGCONT (fg, bg) continues
 * them all; the job then ends as usual (SIGTERM: 143).  Before, arrun alone stopped and
 * the ranks ran on.
 */
void test_job_control(void **state)
{
    (void)state;
    struct job_control jc = {0};
    struct run_opts ro = {.watch = stop_and_continue, .watch_arg = &jc};
    struct run r;

    run_arrun(&r, &ro, "-n", "2", "--bind", "none", helper_path, "sleep", NULL);
    if (!jc.stopped || !jc.continued)
        fail_msg("job control: %s", jc.why);
    if (r.status != 128 + SIGTERM)
        fail_msg("arrun exited %d after SIGCONT and SIGTERM; stderr:\n%s", r.status, r.err);
    assert_int_equal(check_pids_gone(r.out, 2.0), 2);
    run_free(&r);
}

/* arrun started with stdin closed: rank 0 reads /dev/null (EOF), not a closed fd 0. */
void test_closed_stdin(void **state)
{
    (void)state;
    struct run_opts ro = {.close_stdin = true};
    struct run r;

    run_arrun(&r, &ro, "-n", "2", "--bind", "none", helper_path, "stdin", NULL);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "rank=0 stdin=(eof)\n"));
    assert_non_null(strstr(r.out, "rank=1 stdin=(eof)\n"));
    run_free(&r);
}

/*
 * 300 ranks under --label with a soft limit of 256 open files (the usual 1024 runs out at
 * about 500 ranks): arrun raises its own limit and gives the ranks the one it was given;
 * past the hard limit it says so before any rank starts.  Before, it failed after about
 * 120 ranks had started ("cannot make the output pipes of rank ...").
 */
void test_many_labelled_ranks(void **state)
{
    (void)state;
    struct run_opts soft = {.nofile = 256};
    struct run_opts hard = {.nofile = 256, .nofile_hard = 256};
    struct run r;

    run_arrun(&r, &soft, "-n", "300", "--bind", "none", "--label", "sh", "-c",
              "echo nofile=$(ulimit -n)", NULL);
    if (r.status != 0)
        fail_msg("300 labelled ranks exited %d; stderr:\n%.2000s", r.status, r.err);
    if (count_of(r.out, "] nofile=256\n") != 300)
        fail_msg("not every rank printed nofile=256:\n%.2000s", r.out);
    run_free(&r);

    run_arrun(&r, &hard, "-n", "300", "--bind", "none", "--label", "sh", "-c", "echo ran", NULL);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "--label with 300 ranks needs about "));
    assert_non_null(strstr(r.err, "(ulimit -Hn)"));
    assert_int_equal(r.out_len, 0);
    run_free(&r);
}
