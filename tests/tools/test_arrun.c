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
