/* SPDX-License-Identifier: MIT */
/*
 * Settings that differ between the ranks of comm_init_mpi, as when mpirun passes a
 * variable set in one shell to the ranks of that host only (no -x): every rank returns
 * COMM_ERR_MISMATCH, well within the timeout, with a message that names the setting,
 * the ranks and their values, and the fix (`mpirun -x NAME`).  ARCOMM_MPI_RANKS_PER_HOST
 * on some ranks only sent them into MPI_Comm_split while the others were in
 * MPI_Comm_split_type, for ever; a knob every communicator's ranks must share
 * (ARCOMM_FLAG_THRESHOLD) on one rank only went unnoticed with one rank a host.  The
 * same values written differently ("16K", "16384") agree, and a communicator made after
 * the failures works.  Started by mpirun (run_mpi.sh) with ARCOMM_MPI_RANKS_PER_HOST 1,
 * 2 or unset; a watchdog ends a rank that hangs.
 */
#include "mpi_check.h"

#include <arcomm_mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_MS 4000
#define WATCHDOG_S 30

static int g_rank, g_size, g_failed;

static void fail(const char *test, const char *what, comm_status_t st, const char *detail)
{
    if (g_failed++ < 20)
        fprintf(stderr, "rank %d: %s: %s (got %s: %s)\n", g_rank, test, what,
                comm_status_string(st), detail);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_mpi_agree: a rank hung in comm_init_mpi (watchdog)\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)w;
    mc_shm_abandon();
    _exit(1);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* "rank 3", "ranks 0,2", "ranks 1-3": the ranks r with in(r), runs of consecutive
 * ranks as ranges, as comm_init_mpi names them. */
static void rank_text(bool (*in)(int r), char *buf, size_t len)
{
    size_t used = 0;
    int count = 0;
    for (int r = 0; r < g_size; r++) {
        if (!in(r))
            continue;
        int last = r;
        while (last + 1 < g_size && in(last + 1))
            last++;
        count += last - r + 1;
        used += (size_t)snprintf(buf + used, len - used, last == r ? "%s%d" : "%s%d-%d",
                                 used ? "," : "", r, last);
        r = last;
    }
    char tmp[128];
    snprintf(tmp, sizeof(tmp), "%s %s", count == 1 ? "rank" : "ranks", buf);
    snprintf(buf, len, "%s", tmp);
}

static bool even(int r)
{
    return r % 2 == 0;
}

static bool odd(int r)
{
    return r % 2 == 1;
}

static bool first(int r)
{
    return r == 0;
}

static bool not_first(int r)
{
    return r != 0;
}

static bool last(int r)
{
    return r == g_size - 1;
}

static bool not_last(int r)
{
    return r != g_size - 1;
}

/* Sets name to value in this rank's environment (NULL: unsets it). */
static void put_env(const char *name, const char *value)
{
    if (value != NULL)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

/* comm_init_mpi over MPI_COMM_WORLD (knob_defaults on this rank, or NULL): must fail
 * with COMM_ERR_MISMATCH on every rank, soon, naming the knob, "groups" (the ranks and
 * their values, in rank order) and the fix. */
static void expect_mismatch(const char *test, const char *knob, const char *groups,
                            const char *defaults)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.timeout_ms = TIMEOUT_MS;
    cfg.knob_defaults = defaults;
    comm_t *c = NULL;
    double t0 = now_ms();
    comm_status_t st = comm_init_mpi(&c, MPI_COMM_WORLD, &cfg);
    double ms = now_ms() - t0;
    const char *msg = comm_last_error(NULL);
    char fix[128];
    snprintf(fix, sizeof(fix), "mpirun -x %s", knob);
    if (st != COMM_ERR_MISMATCH || c != NULL)
        fail(test, "expected COMM_ERR_MISMATCH and no communicator", st, msg);
    else if (strstr(msg, knob) == NULL || strstr(msg, groups) == NULL || strstr(msg, fix) == NULL)
        fail(test, "the message does not name the knob, the ranks and values, and the fix", st,
             msg);
    if (defaults != NULL && strstr(msg, "cfg->knob_defaults") == NULL)
        fail(test, "the message does not name cfg->knob_defaults", st, msg);
    /* The verdict comes from the first exchange, not from a timeout. */
    if (ms > TIMEOUT_MS / 2)
        fail(test, "it took the timeout", st, msg);
    comm_destroy(c);
}

/* "V (SOURCE) on RANKS" for value v from the environment, or the default when unset. */
static void group_text(const char *v, const char *def, bool (*in)(int r), char *buf, size_t len)
{
    char ranks[128];
    rank_text(in, ranks, sizeof(ranks));
    snprintf(buf, len, "%s (%s) on %s", v != NULL ? v : def,
             v != NULL ? "environment" : "unset: the default", ranks);
}

/*
 * ARCOMM_MPI_RANKS_PER_HOST as the test runs (1, 2 or unset) on even ranks, another on
 * odd ones: the ranks would group themselves differently (split by N against MPI's
 * shared split, or by another N).
 */
static void t_ranks_per_host(void)
{
    const char *name = "ARCOMM_MPI_RANKS_PER_HOST";
    const char *given = getenv(name);
    char saved[32] = "";
    if (given != NULL)
        snprintf(saved, sizeof(saved), "%s", given);
    const char *v = given != NULL ? saved : NULL;
    const char *w = v == NULL ? "1" : NULL; /* unset where it is set, 1 where it is not */
    if (odd(g_rank))
        put_env(name, w);
    char a[256], b[256], groups[520];
    group_text(v, "0", even, a, sizeof(a));
    group_text(w, "0", odd, b, sizeof(b));
    snprintf(groups, sizeof(groups), "%s, %s", a, b);
    expect_mismatch("ARCOMM_MPI_RANKS_PER_HOST on some ranks", name, groups, NULL);
    put_env(name, v);
}

/* A knob every rank of a communicator must share, on rank 0 only. */
static void t_agree_knob(void)
{
    const char *name = "ARCOMM_FLAG_THRESHOLD";
    if (getenv(name) != NULL)
        return; /* the test sets it itself */
    if (g_rank == 0)
        put_env(name, "4K");
    char a[256], b[256], groups[520];
    group_text("4K", "auto", first, a, sizeof(a));
    group_text(NULL, "auto", not_first, b, sizeof(b));
    snprintf(groups, sizeof(groups), "%s, %s", a, b);
    expect_mismatch("ARCOMM_FLAG_THRESHOLD on rank 0 only", name, groups, NULL);
    put_env(name, NULL);
}

/* The same through the last rank's cfg->knob_defaults. */
static void t_config_knob(void)
{
    if (getenv("ARCOMM_BCAST_EAGER") != NULL)
        return;
    char a[256], b[256], ranks[128], groups[520];
    rank_text(not_last, ranks, sizeof(ranks));
    snprintf(a, sizeof(a), "off (unset: the default) on %s", ranks);
    rank_text(last, ranks, sizeof(ranks));
    snprintf(b, sizeof(b), "256 (config) on %s", ranks);
    snprintf(groups, sizeof(groups), "%s, %s", a, b);
    expect_mismatch("ARCOMM_BCAST_EAGER in the last rank's knob_defaults", "ARCOMM_BCAST_EAGER",
                    groups, last(g_rank) ? "ARCOMM_BCAST_EAGER=256" : NULL);
}

/* The same value written two ways agrees: a communicator that works. */
static void t_same_value(void)
{
    const char *name = "ARCOMM_FLAG_THRESHOLD";
    if (getenv(name) != NULL)
        return;
    put_env(name, even(g_rank) ? "16K" : "16384");
    comm_t *c = mc_world_comm(TIMEOUT_MS);
    put_env(name, NULL);
    float x[5] = {1, 2, 3, 4, 5}, y[5];
    comm_status_t st = comm_allreduce(c, x, y, 5, COMM_F32, COMM_SUM, NULL);
    if (st != COMM_OK || y[4] != 5.0f * (float)g_size)
        fail("16K and 16384", "the allreduce went wrong", st, comm_last_error(c));
    comm_destroy(c);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    signal(SIGALRM, on_alarm);
    alarm(WATCHDOG_S);
    mc_shm_begin();

    t_ranks_per_host();
    MPI_Barrier(MPI_COMM_WORLD);
    t_agree_knob();
    MPI_Barrier(MPI_COMM_WORLD);
    t_config_knob();
    MPI_Barrier(MPI_COMM_WORLD);
    t_same_value();
    MPI_Barrier(MPI_COMM_WORLD);

    alarm(0);
    return mc_finish(g_failed);
}
