/* SPDX-License-Identifier: MIT */
/*
 * arrun, tested from the outside: each test runs the arrun binary on arrun_helper (or
 * on arrun_allreduce) and checks its exit status, its timing, its messages, what the
 * ranks saw, and that no rank and no segment name is left afterwards.
 *
 *   test_arrun ARRUN HELPER              the launcher's own behaviour
 *   test_arrun ARRUN HELPER ALLREDUCE    4 ranks of the library's allreduce under arrun
 */
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arrun_run.h"

static void test_env(void **state)
{
    (void)state;
    struct run_opts ro = {.env = "ARCOMM_ID=arc1-0123456789abcdef0123456789abcdef",
                          .leak_fd = true};
    struct env_line l[4], l2[4];
    struct run r;

    run_arrun(&r, &ro, "-n", "4", "--bind", "none", helper_path, "env", NULL);
    if (r.status != 0)
        fail_msg("arrun exited %d; stderr:\n%s", r.status, r.err);
    parse_env(r.out, 4, l);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(l[i].size, 4);
        assert_int_equal(l[i].local_rank, i);
        assert_int_equal(l[i].local_size, 4);
        assert_true(id_well_formed(l[i].id));
        assert_string_equal(l[i].id, l[0].id); /* one job, one id */
        /* The ARCOMM_ID arrun inherited is another job's: each job makes its own. */
        assert_string_not_equal(l[i].id, "arc1-0123456789abcdef0123456789abcdef");
        assert_int_equal(l[i].fds, 0); /* no fd of arrun's, nor the stray fd 9, reached it */
        assert_int_equal(l[i].pgid, l[0].pgid);
    }
    /* The ranks are in a group of their own, not in the test's (or arrun's) group. */
    assert_int_not_equal(l[0].pgid, (int)getpgrp());
    assert_string_equal(r.err, "");
    check_no_segments(l[0].id);
    run_free(&r);

    /* A second job gets a different id. */
    run_arrun(&r, NULL, "-n", "4", helper_path, "env", NULL);
    assert_int_equal(r.status, 0);
    parse_env(r.out, 4, l2);
    assert_true(id_well_formed(l2[0].id));
    assert_string_not_equal(l2[0].id, l[0].id);
    run_free(&r);

    /* One rank works too, and "--" ends arrun's options. */
    run_arrun(&r, NULL, "-n", "1", "--", helper_path, "env", NULL);
    assert_int_equal(r.status, 0);
    parse_env(r.out, 1, l2);
    assert_int_equal(l2[0].size, 1);
    run_free(&r);
}

static void test_stdin(void **state)
{
    (void)state;
    struct run_opts ro = {.stdin_text = "hello ranks\n"};
    struct run r;

    /* Rank 0 reads arrun's stdin; the others read /dev/null rather than race for it. */
    run_arrun(&r, &ro, "-n", "2", helper_path, "stdin", NULL);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "rank=0 stdin=hello ranks\n"));
    assert_non_null(strstr(r.out, "rank=1 stdin=(eof)\n"));
    run_free(&r);
}

/* ---- binding ------------------------------------------------------------------------- */

static void cpulist(hwloc_const_bitmap_t set, char *buf, size_t cap)
{
    size_t len = 0;
    unsigned i;
    buf[0] = '\0';
    hwloc_bitmap_foreach_begin(i, set)
    {
        len += (size_t)snprintf(buf + len, cap - len, "%s%u", len ? "," : "", i);
    }
    hwloc_bitmap_foreach_end();
}

/* The objects arrun spreads ranks over: those of `type` that have cpus. */
static int objs_with_cpus(hwloc_topology_t topo, hwloc_obj_type_t type, hwloc_obj_t *objs, int max)
{
    int n = 0;
    for (int i = 0; i < hwloc_get_nbobjs_by_type(topo, type) && n < max; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, type, (unsigned)i);
        if (o->cpuset && !hwloc_bitmap_iszero(o->cpuset))
            objs[n++] = o;
    }
    return n;
}

static void check_binding(hwloc_topology_t topo, const char *bind, hwloc_obj_type_t type)
{
    hwloc_obj_t objs[1024];
    int n = objs_with_cpus(topo, type, objs, 1024);
    /* More ranks than objects, so that the round robin wraps. */
    int nranks = n + 2 > 64 ? 64 : n + 2;
    char nr[16], want[2048];
    struct env_line l[64];
    struct run r;

    if (n == 0 && type == HWLOC_OBJ_CORE)
        n = objs_with_cpus(topo, HWLOC_OBJ_PU, objs, 1024);
    assert_true(n > 0);
    snprintf(nr, sizeof(nr), "%d", nranks);
    run_arrun(&r, NULL, "-n", nr, "--bind", bind, helper_path, "env", NULL);
    if (r.status != 0)
        fail_msg("arrun --bind %s exited %d; stderr:\n%s", bind, r.status, r.err);
    parse_env(r.out, nranks, l);
    for (int i = 0; i < nranks; i++) {
        cpulist(objs[i % n]->cpuset, want, sizeof(want));
        if (strcmp(l[i].cpus, want) != 0)
            fail_msg("--bind %s: rank %d runs on cpus %s, expected %s", bind, i, l[i].cpus, want);
    }
    /* Oversubscribed, and still quiet unless ARCOMM_LOG_LEVEL asks. */
    assert_string_equal(r.err, "");
    run_free(&r);
}

static void test_bind(void **state)
{
    (void)state;
    hwloc_topology_t topo;
    cpu_set_t mine;
    char want[4096] = "";
    size_t len = 0;
    struct env_line l[3];
    struct run r;

    assert_int_equal(hwloc_topology_init(&topo), 0);
    assert_int_equal(hwloc_topology_load(topo), 0);
    check_binding(topo, "core", HWLOC_OBJ_CORE);
    check_binding(topo, "numa", HWLOC_OBJ_NUMANODE);
    hwloc_topology_destroy(topo);

    /* Default: core, the same as --bind core. */
    run_arrun(&r, NULL, "-n", "3", helper_path, "env", NULL);
    assert_int_equal(r.status, 0);
    parse_env(r.out, 3, l);
    assert_int_not_equal(strcmp(l[0].cpus, ""), 0);
    run_free(&r);

    /* none: the ranks keep arrun's affinity, which is this process's. */
    assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &mine))
            len += (size_t)snprintf(want + len, sizeof(want) - len, "%s%d", len ? "," : "", c);
    run_arrun(&r, NULL, "-n", "3", "--bind", "none", helper_path, "env", NULL);
    assert_int_equal(r.status, 0);
    parse_env(r.out, 3, l);
    for (int i = 0; i < 3; i++)
        assert_string_equal(l[i].cpus, want);
    run_free(&r);
}

/* ---- failures ------------------------------------------------------------------------ */

static void test_rank_exits_3(void **state)
{
    (void)state;
    struct run r;

    run_arrun(&r, NULL, "-n", "4", helper_path, "fail", "2", "3", NULL);
    if (r.status != 3)
        fail_msg("arrun exited %d, expected 3; stderr:\n%s", r.status, r.err);
    /* Rank 2 fails after 100 ms; the sleeping ranks die of SIGTERM at once. */
    if (r.secs > 1.5)
        fail_msg("arrun took %.2f s to end a failed job", r.secs);
    assert_non_null(strstr(r.err, "rank 2 (pid "));
    assert_non_null(strstr(r.err, "exited with status 3; ending the other 3 ranks"));
    assert_int_equal(check_pids_gone(r.out, 0), 3);
    check_ids_leave_nothing(r.out);
    run_free(&r);
}

static void test_rank_sigkill(void **state)
{
    (void)state;
    struct run r;

    run_arrun(&r, NULL, "-n", "4", helper_path, "selfkill", "1", NULL);
    if (r.status != 137)
        fail_msg("arrun exited %d, expected 137; stderr:\n%s", r.status, r.err);
    if (r.secs > 1.5)
        fail_msg("arrun took %.2f s to end a job with a killed rank", r.secs);
    assert_non_null(strstr(r.err, "rank 1 (pid "));
    assert_non_null(strstr(r.err, "was killed by signal 9"));
    /* All four printed their pid: the killed one and the three ended by arrun. */
    assert_int_equal(check_pids_gone(r.out, 0), 4);
    run_free(&r);
}

static void test_grace_then_sigkill(void **state)
{
    (void)state;
    struct run r;

    /* Ranks 1 and 2 ignore SIGTERM: arrun must SIGKILL them once the grace is over. */
    run_arrun(&r, NULL, "-n", "3", "--grace", "0.5", helper_path, "stubborn", "0", "5", NULL);
    if (r.status != 5)
        fail_msg("arrun exited %d, expected 5; stderr:\n%s", r.status, r.err);
    if (r.secs < 0.5 || r.secs > 2.0)
        fail_msg("ending with a 0.5 s grace took %.2f s", r.secs);
    assert_non_null(strstr(r.err, "rank 0 (pid "));
    assert_non_null(strstr(r.err, "2 ranks still running"));
    assert_int_equal(check_pids_gone(r.out, 0), 2);
    run_free(&r);
}

static void test_timeout(void **state)
{
    (void)state;
    struct run r;

    run_arrun(&r, NULL, "-n", "3", "--timeout", "1", helper_path, "sleep", NULL);
    if (r.status != 124)
        fail_msg("arrun exited %d, expected 124; stderr:\n%s", r.status, r.err);
    if (r.secs < 0.95 || r.secs > 2.0)
        fail_msg("--timeout 1 ended the job after %.2f s", r.secs);
    assert_non_null(strstr(r.err, "arrun: job timed out after 1 s; ending 3 ranks"));
    assert_int_equal(check_pids_gone(r.out, 0), 3);
    run_free(&r);

    /* Fractions of a second are allowed. */
    run_arrun(&r, NULL, "-n", "2", "--timeout", "0.3", helper_path, "sleep", NULL);
    assert_int_equal(r.status, 124);
    assert_true(r.secs >= 0.25 && r.secs < 1.3);
    run_free(&r);

    /* A job that ends in time is not touched by its timeout. */
    run_arrun(&r, NULL, "-n", "2", "--timeout", "20", helper_path, "env", NULL);
    assert_int_equal(r.status, 0);
    assert_true(r.secs < 5);
    run_free(&r);
}

static void test_signals_reach_ranks(void **state)
{
    (void)state;
    struct run_opts term = {.signo = SIGTERM, .signal_after = 0.5};
    struct run_opts intr = {.signo = SIGINT, .signal_after = 0.5};
    struct run r;

    run_arrun(&r, &term, "-n", "3", helper_path, "sleep", NULL);
    if (r.status != 128 + SIGTERM)
        fail_msg("arrun exited %d after SIGTERM; stderr:\n%s", r.status, r.err);
    assert_true(r.secs < 2.0);
    assert_non_null(strstr(r.err, "got signal 15"));
    assert_int_equal(check_pids_gone(r.out, 0), 3);
    run_free(&r);

    run_arrun(&r, &intr, "-n", "3", helper_path, "sleep", NULL);
    assert_int_equal(r.status, 128 + SIGINT);
    assert_true(r.secs < 2.0);
    assert_int_equal(check_pids_gone(r.out, 0), 3);
    run_free(&r);
}

static void test_arrun_sigkilled(void **state)
{
    (void)state;
    struct run_opts kill9 = {.signo = SIGKILL, .signal_after = 0.5};
    struct run r;

    /* arrun cannot clean up after SIGKILL: the ranks must die with it on their own. */
    run_arrun(&r, &kill9, "-n", "3", helper_path, "sleep", NULL);
    assert_int_equal(r.status, 137);
    /* The ranks held the output pipes: EOF came only once they were gone. */
    assert_true(r.secs < 3.0);
    assert_int_equal(check_pids_gone(r.out, 2.0), 3);
    run_free(&r);
}

static bool has_line_starting(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = text; p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, prefix, n) == 0)
            return true;
    return false;
}

/* ---- output -------------------------------------------------------------------------- */

/*
 * Every line "[r] r<r> <stream> l<j> " + len copies of the rank's letter, j counting up
 * from 0 for each rank, then "[r] r<r> tail" (the child wrote it without a newline).
 */
static void check_labelled(const char *text, const char *stream, int nranks, int nlines, int len)
{
    int next[64] = {0};
    bool tail[64] = {false};
    const char *p = text;

    while (*p) {
        const char *nl = strchr(p, '\n');
        int r, j, n = 0;
        char head[64];

        assert_non_null(nl);
        if (sscanf(p, "[%d] %n", &r, &n) != 1 || n == 0 || r < 0 || r >= nranks)
            fail_msg("line without a rank label: %.60s", p);
        const char *body = p + n;
        size_t body_len = (size_t)(nl - body);

        snprintf(head, sizeof(head), "r%d tail", r);
        if (body_len == strlen(head) && strncmp(body, head, body_len) == 0) {
            assert_false(tail[r]);
            tail[r] = true;
        } else {
            int h = snprintf(head, sizeof(head), "r%d %s l%d ", r, stream, next[r]);
            if (body_len != (size_t)h + (size_t)len || strncmp(body, head, (size_t)h) != 0)
                fail_msg("rank %d: line %d of %s is broken: %.80s", r, next[r], stream, body);
            for (j = 0; j < len; j++)
                if (body[h + j] != 'a' + r % 26)
                    fail_msg("rank %d: line %d of %s holds another rank's bytes at %d", r, next[r],
                             stream, j);
            assert_false(tail[r]); /* nothing after the tail */
            next[r]++;
        }
        p = nl + 1;
    }
    for (int r = 0; r < nranks; r++) {
        assert_int_equal(next[r], nlines);
        assert_true(tail[r]);
    }
}

static void test_label(void **state)
{
    (void)state;
    struct run r;

    /* 3000-byte lines written 7 bytes at a time by 4 ranks at once, on both streams. */
    run_arrun(&r, NULL, "-n", "4", "--label", helper_path, "label", "40", "3000", NULL);
    if (r.status != 0)
        fail_msg("arrun exited %d; stderr:\n%.2000s", r.status, r.err);
    check_labelled(r.out, "out", 4, 40, 3000);
    check_labelled(r.err, "err", 4, 40, 3000);
    run_free(&r);

    /* A line longer than any pipe buffer. */
    run_arrun(&r, NULL, "-n", "2", "--label", helper_path, "label", "2", "200000", NULL);
    assert_int_equal(r.status, 0);
    check_labelled(r.out, "out", 2, 2, 200000);
    check_labelled(r.err, "err", 2, 2, 200000);
    run_free(&r);

    /* arrun's own message after a failure comes unlabelled, on a line of its own. */
    run_arrun(&r, NULL, "-n", "3", "--label", helper_path, "fail", "1", "7", NULL);
    assert_int_equal(r.status, 7);
    assert_true(has_line_starting(r.err, "arrun: rank 1 (pid "));
    assert_non_null(strstr(r.out, "[0] pid="));
    assert_non_null(strstr(r.out, "[2] pid="));
    assert_int_equal(check_pids_gone(r.out, 0), 2);
    run_free(&r);
}

/* ---- multi-threaded ranks ------------------------------------------------------------ */

/* The value of " NAME=" on the line of rank `rank` in the `vars` mode's output. */
static void rank_var(const char *out, int rank, const char *name, char *buf, size_t cap)
{
    char head[32], key[128];
    const char *line = NULL, *v, *end;
    int n = snprintf(head, sizeof(head), "rank=%d ", rank);

    for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, head, (size_t)n) == 0) {
            line = p;
            break;
        }
    }
    if (!line)
        fail_msg("no line from rank %d in:\n%s", rank, out);
    end = strchrnul(line, '\n');
    snprintf(key, sizeof(key), " %s=", name);
    v = strstr(line, key);
    if (!v || v > end)
        fail_msg("rank %d printed no %s: %.*s", rank, name, (int)(end - line), line);
    v += strlen(key);
    n = (int)strcspn(v, " \n");
    snprintf(buf, cap, "%.*s", n, v);
}

/* "0-2,5" as "0,1,2,5": hwloc's list form as the helper prints cpus. */
static void expand_list(const char *list, char *buf, size_t cap)
{
    size_t len = 0;
    const char *p = list;

    buf[0] = '\0';
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        assert_true(end != p);
        if (*end == '-')
            b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b; c++)
            len += (size_t)snprintf(buf + len, cap - len, "%s%ld", len ? "," : "", c);
        p = *end == ',' ? end + 1 : end;
        assert_true(*end == ',' || *end == '\0');
    }
}

/* The cores arrun counts (PUs where the topology has no cores), in hwloc's order. */
static int cores_of(hwloc_topology_t topo, hwloc_obj_t *objs, int max)
{
    int n = objs_with_cpus(topo, HWLOC_OBJ_CORE, objs, max);
    return n > 0 ? n : objs_with_cpus(topo, HWLOC_OBJ_PU, objs, max);
}

/*
 * arrun -n nranks --cpus-per-rank per: each rank runs on cores [r*per, r*per+per) mod
 * the cores, gets OMP_NUM_THREADS=per, and a warning says how many ranks share cores
 * exactly when some do.
 */
static void check_cpus_per_rank(hwloc_obj_t *objs, int ncores, int nranks, int per)
{
    char nr[16], np[16], got[2048], want[2048], warn[160];
    int users[1024] = {0}, sharing = 0;
    struct run r;

    snprintf(nr, sizeof(nr), "%d", nranks);
    snprintf(np, sizeof(np), "%d", per);
    run_arrun(&r, NULL, "-n", nr, "--cpus-per-rank", np, helper_path, "vars", "OMP_NUM_THREADS",
              NULL);
    if (r.status != 0)
        fail_msg("-n %d --cpus-per-rank %d: arrun exited %d; stderr:\n%s", nranks, per, r.status,
                 r.err);
    for (int i = 0; i < nranks; i++) {
        hwloc_bitmap_t set = hwloc_bitmap_alloc();
        for (int j = 0; j < per; j++) {
            hwloc_bitmap_or(set, set, objs[(i * per + j) % ncores]->cpuset);
            users[(i * per + j) % ncores]++;
        }
        cpulist(set, want, sizeof(want));
        hwloc_bitmap_free(set);
        rank_var(r.out, i, "cpus", got, sizeof(got));
        if (strcmp(got, want) != 0)
            fail_msg("-n %d --cpus-per-rank %d: rank %d runs on cpus %s, expected %s", nranks, per,
                     i, got, want);
        rank_var(r.out, i, "OMP_NUM_THREADS", got, sizeof(got));
        assert_string_equal(got, np);
    }
    for (int i = 0; i < nranks; i++) {
        for (int j = 0; j < per; j++) {
            if (users[(i * per + j) % ncores] > 1) {
                sharing++;
                break;
            }
        }
    }
    if (sharing == 0) {
        if (!strstr(r.err, "err rank=0") || strstr(r.err, "warning"))
            fail_msg("-n %d --cpus-per-rank %d: unexpected stderr:\n%s", nranks, per, r.err);
    } else {
        snprintf(warn, sizeof(warn), "ranks share cores");
        if (!strstr(r.err, warn))
            fail_msg("-n %d --cpus-per-rank %d: no warning about sharing:\n%s", nranks, per, r.err);
        snprintf(warn, sizeof(warn), ": %d of the %d ranks share cores\n", sharing, nranks);
        if (!strstr(r.err, warn))
            fail_msg("-n %d --cpus-per-rank %d: the warning does not say '%s':\n%s", nranks, per,
                     warn, r.err);
        /* One warning for the whole job. */
        assert_null(strstr(strstr(r.err, "warning") + 1, "warning"));
    }
    run_free(&r);
}

static void test_cpus_per_rank(void **state)
{
    (void)state;
    struct run_opts omp_env = {.env = "OMP_NUM_THREADS=7"};
    hwloc_topology_t topo;
    hwloc_obj_t objs[1024], nodes[64];
    char got[2048], want[2048], arg[16], msg[128];
    int n, nnodes, node_cores;
    struct run r;

    assert_int_equal(hwloc_topology_init(&topo), 0);
    assert_int_equal(hwloc_topology_load(topo), 0);
    n = cores_of(topo, objs, 1024);
    assert_true(n > 0);

    check_cpus_per_rank(objs, n, n < 64 ? n : 64, 1); /* one core each, none shared */
    check_cpus_per_rank(objs, n, n + 1, 1);           /* wraps: ranks 0 and n share */
    if (n >= 2) {
        check_cpus_per_rank(objs, n, 1, 2);
        check_cpus_per_rank(objs, n, n / 2, 2);
        check_cpus_per_rank(objs, n, n, 2); /* twice the cores there are */
        check_cpus_per_rank(objs, n, 2, n);
    }

    /* More cores per rank than the host has: refused before any rank starts. */
    snprintf(arg, sizeof(arg), "%d", n + 1);
    run_arrun(&r, NULL, "-n", "1", "--cpus-per-rank", arg, helper_path, "vars", NULL);
    assert_int_equal(r.status, 2);
    snprintf(msg, sizeof(msg), "arrun: --cpus-per-rank %d: this host has %d ", n + 1, n);
    if (!strstr(r.err, msg))
        fail_msg("expected '%s' in:\n%s", msg, r.err);
    assert_int_equal(r.out_len, 0);
    run_free(&r);

    /* A value the user set for OMP_NUM_THREADS wins: inherited, or through -x. */
    run_arrun(&r, &omp_env, "-n", "1", "--cpus-per-rank", "1", helper_path, "vars",
              "OMP_NUM_THREADS", NULL);
    assert_int_equal(r.status, 0);
    rank_var(r.out, 0, "OMP_NUM_THREADS", got, sizeof(got));
    assert_string_equal(got, "7");
    run_free(&r);
    run_arrun(&r, NULL, "-n", "1", "--cpus-per-rank", "1", "-x", "OMP_NUM_THREADS=5", helper_path,
              "vars", "OMP_NUM_THREADS", NULL);
    assert_int_equal(r.status, 0);
    rank_var(r.out, 0, "OMP_NUM_THREADS", got, sizeof(got));
    assert_string_equal(got, "5");
    run_free(&r);
    /* Without --cpus-per-rank arrun leaves it alone. */
    if (!getenv("OMP_NUM_THREADS")) {
        run_arrun(&r, NULL, "-n", "1", helper_path, "vars", "OMP_NUM_THREADS", NULL);
        assert_int_equal(r.status, 0);
        rank_var(r.out, 0, "OMP_NUM_THREADS", got, sizeof(got));
        assert_string_equal(got, "(unset)");
        run_free(&r);
    }

    /* --bind numa: the whole node, round robin; N counts the node's cores. */
    nnodes = objs_with_cpus(topo, HWLOC_OBJ_NUMANODE, nodes, 64);
    assert_true(nnodes > 0);
    node_cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, nodes[0]->cpuset, HWLOC_OBJ_CORE);
    if (node_cores <= 0)
        node_cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, nodes[0]->cpuset, HWLOC_OBJ_PU);
    run_arrun(&r, NULL, "-n", "2", "--bind", "numa", "--cpus-per-rank", "1", helper_path, "vars",
              "OMP_NUM_THREADS", NULL);
    if (r.status != 0)
        fail_msg("--bind numa --cpus-per-rank 1 exited %d; stderr:\n%s", r.status, r.err);
    for (int i = 0; i < 2; i++) {
        cpulist(nodes[i % nnodes]->cpuset, want, sizeof(want));
        rank_var(r.out, i, "cpus", got, sizeof(got));
        assert_string_equal(got, want);
        rank_var(r.out, i, "OMP_NUM_THREADS", got, sizeof(got));
        assert_string_equal(got, "1");
    }
    run_free(&r);
    snprintf(arg, sizeof(arg), "%d", node_cores + 1);
    run_arrun(&r, NULL, "-n", "1", "--bind", "numa", "--cpus-per-rank", arg, helper_path, "vars",
              NULL);
    assert_int_equal(r.status, 2);
    snprintf(msg, sizeof(msg), "arrun: --cpus-per-rank %d: NUMA node %u has %d ", node_cores + 1,
             nodes[0]->logical_index, node_cores);
    if (!strstr(r.err, msg))
        fail_msg("expected '%s' in:\n%s", msg, r.err);
    run_free(&r);
    if (nnodes == 1 && node_cores < 64) {
        /* The node's ranks ask for more cores than it has: they share, with a warning. */
        snprintf(arg, sizeof(arg), "%d", node_cores + 1);
        run_arrun(&r, NULL, "-n", arg, "--bind", "numa", "--cpus-per-rank", "1", helper_path,
                  "vars", NULL);
        assert_int_equal(r.status, 0);
        snprintf(msg, sizeof(msg), ": %d of the %d ranks share cores\n", node_cores + 1,
                 node_cores + 1);
        if (!strstr(r.err, msg))
            fail_msg("expected '%s' in:\n%s", msg, r.err);
        run_free(&r);
    }
    hwloc_topology_destroy(topo);
}

/*
 * Every "arrun: rank R (pid P): WHERE (PUs LIST)" line: one per rank, P the rank's pid,
 * LIST the cpus it runs on, WHERE as want_where(R) says.
 */
static void check_reports(const struct run *r, int nranks, const char *const *want_where)
{
    int seen = 0;

    for (const char *p = r->err; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        char where[256], pus[1024], cpus[2048], got[2048];
        int rank, pid, k = 0;

        if (strncmp(p, "arrun: rank ", 12) != 0)
            continue;
        if (sscanf(p, "arrun: rank %d (pid %d): %n", &rank, &pid, &k) != 2 || k == 0)
            fail_msg("malformed report: %.100s", p);
        const char *open = strstr(p + k, " (PUs ");
        const char *nl = strchrnul(p, '\n');
        assert_non_null(open);
        assert_true(open < nl && nl[-1] == ')');
        snprintf(where, sizeof(where), "%.*s", (int)(open - (p + k)), p + k);
        snprintf(pus, sizeof(pus), "%.*s", (int)(nl - 1 - (open + 6)), open + 6);
        assert_in_range(rank, 0, nranks - 1);
        expand_list(pus, cpus, sizeof(cpus));
        rank_var(r->out, rank, "cpus", got, sizeof(got));
        if (strcmp(cpus, got) != 0)
            fail_msg("rank %d: reported PUs %s, but it runs on %s", rank, pus, got);
        rank_var(r->out, rank, "pid", got, sizeof(got));
        assert_int_equal(atoi(got), pid);
        if (strcmp(where, want_where[rank]) != 0)
            fail_msg("rank %d: reported '%s', expected '%s'", rank, where, want_where[rank]);
        seen++;
    }
    assert_int_equal(seen, nranks);
}

/* Drops the "[R] " at the start of every line, so that rank_var finds "rank=R ". */
static void strip_labels(char *text)
{
    char *w = text;
    bool line_start = true;

    for (char *p = text; *p;) {
        if (line_start && *p == '[') {
            char *end = strstr(p, "] ");
            assert_non_null(end);
            p = end + 2;
        }
        line_start = *p == '\n';
        *w++ = *p++;
    }
    *w = '\0';
}

static void test_report_bindings(void **state)
{
    (void)state;
    hwloc_topology_t topo;
    hwloc_obj_t objs[1024], nodes[64];
    char where[3][256], nr[16];
    const char *want[3] = {where[0], where[1], where[2]};
    int n, nnodes;
    struct run r;

    assert_int_equal(hwloc_topology_init(&topo), 0);
    assert_int_equal(hwloc_topology_load(topo), 0);
    n = cores_of(topo, objs, 1024);
    nnodes = objs_with_cpus(topo, HWLOC_OBJ_NUMANODE, nodes, 64);
    const char *word =
        hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? "cores" : "processing units";

    /* Default binding, 3 ranks: core r mod n, the wrap included. */
    for (int i = 0; i < 3; i++)
        snprintf(where[i], sizeof(where[i]), "%s %u", word, objs[i % n]->logical_index);
    run_arrun(&r, NULL, "-n", "3", "--report-bindings", helper_path, "vars", NULL);
    assert_int_equal(r.status, 0);
    check_reports(&r, 3, want);
    run_free(&r);

    /* Two cores a rank, under --label: the reports stay unlabelled, on arrun's stderr. */
    if (n >= 2) {
        for (int i = 0; i < 2; i++) {
            hwloc_bitmap_t idx = hwloc_bitmap_alloc();
            char *list = NULL;
            hwloc_bitmap_set(idx, objs[(2 * i) % n]->logical_index);
            hwloc_bitmap_set(idx, objs[(2 * i + 1) % n]->logical_index);
            hwloc_bitmap_list_asprintf(&list, idx);
            snprintf(where[i], sizeof(where[i]), "%s %s", word, list);
            free(list);
            hwloc_bitmap_free(idx);
        }
        run_arrun(&r, NULL, "-n", "2", "--cpus-per-rank", "2", "--label", "--report-bindings",
                  helper_path, "vars", NULL);
        assert_int_equal(r.status, 0);
        strip_labels(r.out);
        assert_non_null(strstr(r.err, "[0] err rank=0\n"));
        check_reports(&r, 2, want);
        run_free(&r);
    }

    /* NUMA nodes: the node and all its cores. */
    for (int i = 0; i < 3; i++) {
        hwloc_obj_t node = nodes[i % nnodes];
        hwloc_bitmap_t idx = hwloc_bitmap_alloc();
        hwloc_obj_t o = NULL;
        char *list = NULL;
        while ((o = hwloc_get_next_obj_inside_cpuset_by_type(
                    topo, node->cpuset, strcmp(word, "cores") == 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU,
                    o)) != NULL)
            hwloc_bitmap_set(idx, o->logical_index);
        hwloc_bitmap_list_asprintf(&list, idx);
        snprintf(where[i], sizeof(where[i]), "NUMA node %u, %s %s", node->logical_index, word,
                 list);
        free(list);
        hwloc_bitmap_free(idx);
    }
    run_arrun(&r, NULL, "-n", "3", "--bind", "numa", "--report-bindings", helper_path, "vars",
              NULL);
    assert_int_equal(r.status, 0);
    check_reports(&r, 3, want);
    run_free(&r);

    /* Unbound: said so, with the cpus the rank inherited. */
    for (int i = 0; i < 2; i++)
        snprintf(where[i], sizeof(where[i]), "not bound");
    snprintf(nr, sizeof(nr), "%d", 2);
    run_arrun(&r, NULL, "-n", nr, "--bind", "none", "--report-bindings", helper_path, "vars", NULL);
    assert_int_equal(r.status, 0);
    check_reports(&r, 2, want);
    run_free(&r);
    hwloc_topology_destroy(topo);
}

static void test_env_x(void **state)
{
    (void)state;
    struct run_opts from_arrun = {.env = "ARRUN_TEST_PASSED=from arrun"};
    struct run_opts stale = {.env = "RANK=99"};
    char got[256];
    struct run r;

    /* Both forms, an empty value, and a later -x of the same NAME winning. */
    run_arrun(&r, &from_arrun, "-n", "2", "-x", "ARRUN_TEST_A=1", "-x", "ARRUN_TEST_PASSED", "-x",
              "ARRUN_TEST_EMPTY=", "-x", "ARRUN_TEST_A=2=two", helper_path, "vars", "ARRUN_TEST_A",
              "ARRUN_TEST_PASSED", "ARRUN_TEST_EMPTY", NULL);
    if (r.status != 0)
        fail_msg("arrun exited %d; stderr:\n%s", r.status, r.err);
    for (int i = 0; i < 2; i++) {
        rank_var(r.out, i, "ARRUN_TEST_A", got, sizeof(got));
        assert_string_equal(got, "2=two");
        /* rank_var stops at a space: the line holds the whole value. */
        assert_non_null(strstr(r.out, " ARRUN_TEST_PASSED=from arrun "));
        rank_var(r.out, i, "ARRUN_TEST_EMPTY", got, sizeof(got));
        assert_string_equal(got, "");
    }
    run_free(&r);

    /* torchrun's variables, per rank; arrun's values replace inherited ones. */
    run_arrun(&r, &stale, "-n", "3", helper_path, "vars", "RANK", "WORLD_SIZE", "LOCAL_RANK",
              "LOCAL_WORLD_SIZE", "ARCOMM_RANK", NULL);
    assert_int_equal(r.status, 0);
    for (int i = 0; i < 3; i++) {
        char want[16];
        snprintf(want, sizeof(want), "%d", i);
        rank_var(r.out, i, "RANK", got, sizeof(got));
        assert_string_equal(got, want);
        rank_var(r.out, i, "LOCAL_RANK", got, sizeof(got));
        assert_string_equal(got, want);
        rank_var(r.out, i, "ARCOMM_RANK", got, sizeof(got));
        assert_string_equal(got, want);
        rank_var(r.out, i, "WORLD_SIZE", got, sizeof(got));
        assert_string_equal(got, "3");
        rank_var(r.out, i, "LOCAL_WORLD_SIZE", got, sizeof(got));
        assert_string_equal(got, "3");
    }
    run_free(&r);
}

/* Removes dir and what the tests put in it: rank.R/{stdout,stderr}, and dirs below. */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;

    if (!d) {
        unlink(dir);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        char path[1024];
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        remove_tree(path);
    }
    closedir(d);
    rmdir(dir);
}

static char *read_whole(const char *path)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = fopen(path, "r");

    if (!f)
        fail_msg("cannot open %s: %s", path, strerror(errno));
    buf = calloc(1, 1 << 16);
    assert_non_null(buf);
    len = fread(buf, 1, (1 << 16) - 1, f);
    buf[len] = '\0';
    fclose(f);
    return buf;
}

/* DIR/rank.R/stdout holds exactly rank R's vars line, DIR/rank.R/stderr its err line. */
static void check_rank_files(const char *dir, int nranks)
{
    for (int i = 0; i < nranks; i++) {
        char path[1024], want[64], *text;
        snprintf(path, sizeof(path), "%s/rank.%d/stdout", dir, i);
        text = read_whole(path);
        snprintf(want, sizeof(want), "rank=%d pid=", i);
        if (strncmp(text, want, strlen(want)) != 0 || strchr(text, '\n') != text + strlen(text) - 1)
            fail_msg("%s holds: %s", path, text);
        free(text);
        snprintf(path, sizeof(path), "%s/rank.%d/stderr", dir, i);
        text = read_whole(path);
        snprintf(want, sizeof(want), "err rank=%d\n", i);
        assert_string_equal(text, want);
        free(text);
    }
}

/* test_output_filename's directory, removed by the teardown also when a check failed. */
static char output_top[] = "/tmp/arrun-test-output-XXXXXX";

static int remove_output_top(void **state)
{
    (void)state;
    if (strchr(output_top, 'X') == NULL)
        remove_tree(output_top);
    return 0;
}

static void test_output_filename(void **state)
{
    (void)state;
    char *top = output_top, dir[256], file[512], under[600];
    struct stat st;
    struct run r;
    int fd;

    assert_non_null(mkdtemp(top));
    snprintf(dir, sizeof(dir), "%s/a/b", top); /* made, parents too */

    run_arrun(&r, NULL, "-n", "3", "--output-filename", dir, helper_path, "vars", NULL);
    if (r.status != 0)
        fail_msg("arrun exited %d; stderr:\n%s", r.status, r.err);
    assert_int_equal(r.out_len, 0); /* nothing on the terminal */
    assert_string_equal(r.err, "");
    check_rank_files(dir, 3);
    run_free(&r);

    /* Again with --label: the files as before (rewritten, not appended to), the terminal labelled.
     */
    run_arrun(&r, NULL, "-n", "2", "--label", "--output-filename", dir, helper_path, "vars", "RANK",
              NULL);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "[0] rank=0 pid="));
    assert_non_null(strstr(r.out, "[1] rank=1 pid="));
    assert_non_null(strstr(r.err, "[1] err rank=1\n"));
    check_rank_files(dir, 2);
    snprintf(file, sizeof(file), "%s/rank.2/stdout", dir);
    assert_int_equal(stat(file, &st), 0); /* rank 2's from the first run, left alone */
    run_free(&r);

    /* A DIR that cannot be a directory: a usage error, and no rank ran. */
    snprintf(file, sizeof(file), "%s/file", top);
    fd = open(file, O_CREAT | O_WRONLY, 0644);
    assert_true(fd >= 0);
    close(fd);
    run_arrun(&r, NULL, "-n", "2", "--output-filename", file, helper_path, "vars", NULL);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "arrun: --output-filename "));
    assert_non_null(strstr(r.err, ": Not a directory"));
    assert_int_equal(r.out_len, 0);
    run_free(&r);
    snprintf(under, sizeof(under), "%s/sub", file);
    run_arrun(&r, NULL, "-n", "2", "--output-filename", under, helper_path, "vars", NULL);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "cannot make directory"));
    assert_null(strstr(r.err, "err rank="));
    run_free(&r);
    /* Unwritable (root may write anywhere, so only when not root). */
    if (geteuid() != 0) {
        snprintf(under, sizeof(under), "%s/ro", top);
        assert_int_equal(mkdir(under, 0500), 0);
        snprintf(dir, sizeof(dir), "%s/ro/out", top);
        run_arrun(&r, NULL, "-n", "1", "--output-filename", dir, helper_path, "vars", NULL);
        assert_int_equal(r.status, 2);
        assert_non_null(strstr(r.err, "Permission denied"));
        run_free(&r);
        chmod(under, 0700);
    }
    remove_tree(top);
    assert_int_not_equal(stat(top, &st), 0);
}

/* ---- usage --------------------------------------------------------------------------- */

static void expect_usage_error(const char *what, struct run *r)
{
    if (r->status != 2)
        fail_msg("%s: arrun exited %d, expected 2; stderr:\n%s", what, r->status, r->err);
    if (strncmp(r->err, "arrun: ", 7) != 0 || !strstr(r->err, "usage: arrun -n N"))
        fail_msg("%s: no usage error on stderr:\n%s", what, r->err);
    if (r->out_len != 0)
        fail_msg("%s: something ran: %s", what, r->out);
    run_free(r);
}

static void test_usage(void **state)
{
    (void)state;
    char noexec[] = "/tmp/arrun-test-noexec-XXXXXX";
    int fd;
    struct run r;

    run_arrun(&r, NULL, NULL);
    expect_usage_error("no arguments", &r);
    run_arrun(&r, NULL, "-n", "4", NULL);
    expect_usage_error("no program", &r);
    run_arrun(&r, NULL, "-n", "4", "--", NULL);
    expect_usage_error("no program after --", &r);
    run_arrun(&r, NULL, helper_path, "env", NULL);
    expect_usage_error("no -n", &r);
    run_arrun(&r, NULL, "-n", "0", helper_path, "env", NULL);
    expect_usage_error("-n 0", &r);
    run_arrun(&r, NULL, "-n", "-3", helper_path, "env", NULL);
    expect_usage_error("-n -3", &r);
    run_arrun(&r, NULL, "-n", "four", helper_path, "env", NULL);
    expect_usage_error("-n four", &r);
    run_arrun(&r, NULL, "-n", "4x", helper_path, "env", NULL);
    expect_usage_error("-n 4x", &r);
    run_arrun(&r, NULL, "-n", "2", "--frobnicate", helper_path, "env", NULL);
    expect_usage_error("unknown long option", &r);
    run_arrun(&r, NULL, "-n", "2", "-q", helper_path, "env", NULL);
    expect_usage_error("unknown short option", &r);
    run_arrun(&r, NULL, "-n", "2", "--bind", "sideways", helper_path, "env", NULL);
    expect_usage_error("--bind sideways", &r);
    run_arrun(&r, NULL, "-n", "2", "--timeout", "soon", helper_path, "env", NULL);
    expect_usage_error("--timeout soon", &r);
    run_arrun(&r, NULL, "-n", "2", "--timeout", "0", helper_path, "env", NULL);
    expect_usage_error("--timeout 0", &r);
    run_arrun(&r, NULL, "-n", "2", "--grace", "-1", helper_path, "env", NULL);
    expect_usage_error("--grace -1", &r);
    run_arrun(&r, NULL, "-n", "2", "--timeout", NULL);
    expect_usage_error("--timeout without a value", &r);
    run_arrun(&r, NULL, "-n", "2", "--cpus-per-rank", "0", helper_path, "env", NULL);
    expect_usage_error("--cpus-per-rank 0", &r);
    run_arrun(&r, NULL, "-n", "2", "--cpus-per-rank", "two", helper_path, "env", NULL);
    expect_usage_error("--cpus-per-rank two", &r);
    run_arrun(&r, NULL, "-n", "2", "--bind", "none", "--cpus-per-rank", "1", helper_path, "env",
              NULL);
    expect_usage_error("--cpus-per-rank with --bind none", &r);
    run_arrun(&r, NULL, "-n", "2", "-x", "ARRUN_TEST_SURELY_UNSET", helper_path, "env", NULL);
    assert_non_null(
        strstr(r.err, "-x ARRUN_TEST_SURELY_UNSET: ARRUN_TEST_SURELY_UNSET is not set"));
    expect_usage_error("-x of an unset NAME", &r);
    run_arrun(&r, NULL, "-n", "2", "-x", "=value", helper_path, "env", NULL);
    expect_usage_error("-x with an empty NAME", &r);
    run_arrun(&r, NULL, "-n", "2", "-x", "", helper_path, "env", NULL);
    expect_usage_error("-x ''", &r);
    run_arrun(&r, NULL, "-n", "2", "-x", "RANK=5", helper_path, "env", NULL);
    assert_non_null(strstr(r.err, "arrun sets RANK itself"));
    expect_usage_error("-x RANK", &r);
    run_arrun(&r, NULL, "-n", "2", "-x", "ARCOMM_ID", helper_path, "env", NULL);
    expect_usage_error("-x ARCOMM_ID", &r);
    run_arrun(&r, NULL, "-n", "2", "-x", NULL);
    expect_usage_error("-x without a value", &r);
    run_arrun(&r, NULL, "-n", "2", "--output-filename", "", helper_path, "env", NULL);
    expect_usage_error("--output-filename ''", &r);
    run_arrun(&r, NULL, "-n", "2", "arrun-test-no-such-program", NULL);
    expect_usage_error("program not in PATH", &r);
    run_arrun(&r, NULL, "-n", "2", "/nonexistent/arrun-test/prog", NULL);
    expect_usage_error("no such path", &r);
    run_arrun(&r, NULL, "-n", "2", "/", NULL);
    expect_usage_error("a directory", &r);

    fd = mkstemp(noexec);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "#!/bin/sh\n", 10), 10);
    close(fd);
    assert_int_equal(chmod(noexec, 0644), 0);
    run_arrun(&r, NULL, "-n", "2", noexec, NULL);
    unlink(noexec);
    expect_usage_error("not executable", &r);

    /* Help goes to stdout and is not an error. */
    run_arrun(&r, NULL, "--help", NULL);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "usage: arrun -n N"));
    assert_non_null(strstr(r.out, "124"));
    assert_string_equal(r.err, "");
    run_free(&r);
    run_arrun(&r, NULL, "-h", NULL);
    assert_int_equal(r.status, 0);
    run_free(&r);

    /* A program found through PATH, and its own options are left to it. */
    run_arrun(&r, NULL, "-n", "2", "sh", "-c", "echo x-$ARCOMM_RANK", NULL);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "x-0\n"));
    assert_non_null(strstr(r.out, "x-1\n"));
    run_free(&r);
}

/* ---- shared memory ------------------------------------------------------------------- */

static void test_segments_removed(void **state)
{
    (void)state;
    char created[2][128];
    const char *p;
    struct stat st;
    struct run r;

    /* Rank 0 makes the job's names as a rendezvous would, then rank 1 fails: arrun cleans. */
    run_arrun(&r, NULL, "-n", "3", helper_path, "shm", "1", NULL);
    if (r.status != 1)
        fail_msg("arrun exited %d, expected 1; stderr:\n%s", r.status, r.err);
    p = r.out;
    for (int k = 0; k < 2; k++) {
        char path[300];
        p = strstr(p, "created=");
        assert_non_null(p);
        assert_int_equal(sscanf(p + 8, "%127s", created[k]), 1);
        p += 8;
        snprintf(path, sizeof(path), "/dev/shm/%s", created[k]);
        if (stat(path, &st) == 0)
            fail_msg("%s is still there after arrun", path);
    }
    check_ids_leave_nothing(r.out);
    check_pids_gone(r.out, 0);
    run_free(&r);
}

/* ---- the library under arrun --------------------------------------------------------- */

static void test_allreduce(void **state)
{
    (void)state;
    struct run r;

    run_arrun(&r, NULL, "-n", "4", "--timeout", "60", allreduce_path, NULL);
    if (r.status != 0)
        fail_msg("4-rank allreduce under arrun exited %d;\nstdout:\n%s\nstderr:\n%s", r.status,
                 r.out, r.err);
    assert_non_null(strstr(r.out, "arrun_allreduce: ok"));
    check_ids_leave_nothing(r.out);
    run_free(&r);
}

static void test_rendezvous_cut_short(void **state)
{
    (void)state;
    char script[512];
    struct run r;

    /*
     * Rank 3 never joins: ranks 0-2 wait in comm_init with the segment made, until rank 3
     * fails and arrun ends them.  The segment name must not survive them.
     */
    snprintf(script, sizeof(script),
             "echo id=$ARCOMM_ID; if [ $ARCOMM_RANK = 3 ]; then sleep 0.5; exit 1; fi; exec %s",
             allreduce_path);
    run_arrun(&r, NULL, "-n", "4", "--timeout", "60", "sh", "-c", script, NULL);
    if (r.status != 1)
        fail_msg("arrun exited %d, expected 1; stderr:\n%s", r.status, r.err);
    assert_non_null(strstr(r.err, "rank 3 (pid "));
    check_ids_leave_nothing(r.out);
    run_free(&r);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest launcher[] = {
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_stdin),
        cmocka_unit_test(test_bind),
        cmocka_unit_test(test_rank_exits_3),
        cmocka_unit_test(test_rank_sigkill),
        cmocka_unit_test(test_grace_then_sigkill),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_signals_reach_ranks),
        cmocka_unit_test(test_arrun_sigkilled),
        cmocka_unit_test(test_label),
        cmocka_unit_test(test_cpus_per_rank),
        cmocka_unit_test(test_report_bindings),
        cmocka_unit_test(test_env_x),
        cmocka_unit_test_teardown(test_output_filename, remove_output_top),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_segments_removed),
    };
    const struct CMUnitTest library[] = {
        cmocka_unit_test(test_allreduce),
        cmocka_unit_test(test_rendezvous_cut_short),
    };

    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: test_arrun ARRUN HELPER [ALLREDUCE]\n");
        return 2;
    }
    arrun_path = argv[1];
    helper_path = argv[2];
    if (argc == 4) {
        allreduce_path = argv[3];
        return cmocka_run_group_tests_name("arrun_allreduce", library, NULL, NULL);
    }
    return cmocka_run_group_tests_name("arrun", launcher, NULL, NULL);
}
