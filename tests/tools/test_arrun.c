/* SPDX-License-Identifier: MIT */
/*
 * arrun, tested from the outside: each test runs the arrun binary on arrun_helper (or
 * on arrun_allreduce) and checks its exit status, its timing, its messages, what the
 * ranks saw, and that no rank and no segment name is left afterwards.
 *
 *   test_arrun ARRUN HELPER              the launcher's own behaviour
 *   test_arrun ARRUN HELPER ALLREDUCE    4 ranks of the library's allreduce under arrun
 *
 * This file: the environment the ranks get (-x too), how a job ends when a rank fails,
 * on a signal or at its timeout, usage errors, the segment names removed, the library
 * under arrun, and main.  Binding (--bind, --cpus-per-rank, --report-bindings) is tested
 * in test_arrun_binding.c; the ranks' stdin and output (--label, --output-filename) in
 * test_arrun_streams.c.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arrun_run.h"
#include "test_arrun.h"

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
        ta_rank_var(r.out, i, "ARRUN_TEST_A", got, sizeof(got));
        assert_string_equal(got, "2=two");
        /* ta_rank_var stops at a space: the line holds the whole value. */
        assert_non_null(strstr(r.out, " ARRUN_TEST_PASSED=from arrun "));
        ta_rank_var(r.out, i, "ARRUN_TEST_EMPTY", got, sizeof(got));
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
        ta_rank_var(r.out, i, "RANK", got, sizeof(got));
        assert_string_equal(got, want);
        ta_rank_var(r.out, i, "LOCAL_RANK", got, sizeof(got));
        assert_string_equal(got, want);
        ta_rank_var(r.out, i, "ARCOMM_RANK", got, sizeof(got));
        assert_string_equal(got, want);
        ta_rank_var(r.out, i, "WORLD_SIZE", got, sizeof(got));
        assert_string_equal(got, "3");
        ta_rank_var(r.out, i, "LOCAL_WORLD_SIZE", got, sizeof(got));
        assert_string_equal(got, "3");
    }
    run_free(&r);
}

/* --shared-heap: libarcomm_heap.so (beside libarcomm) first in every rank's LD_PRELOAD,
 * ahead of the one the ranks would have had otherwise (-x here).  The ranks are sh, which
 * prints what it got: the helper, built with the sanitizers in their builds, cannot start
 * under another preloaded allocator (nor can arrun under any preload: -x keeps it away). */
#define SHOW_PRELOAD "echo \"rank=$ARCOMM_RANK LD_PRELOAD=$LD_PRELOAD \""
static void test_shared_heap(void **state)
{
    (void)state;
    char got[4096];
    struct run r;
    const char *tail = "/libarcomm_heap.so";

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* The heap library is built with the sanitizer too, and its runtime must come first
     * in any process it is preloaded into: the release build runs this. */
    skip();
#endif
    run_arrun(&r, NULL, "-n", "2", "--shared-heap", "sh", "-c", SHOW_PRELOAD, NULL);
    if (r.status != 0)
        fail_msg("arrun --shared-heap exited %d; stderr:\n%s", r.status, r.err);
    for (int i = 0; i < 2; i++) {
        ta_rank_var(r.out, i, "LD_PRELOAD", got, sizeof(got));
        size_t n = strlen(got);
        if (n < strlen(tail) || strcmp(got + n - strlen(tail), tail) != 0)
            fail_msg("rank %d: LD_PRELOAD=%s, not the heap library", i, got);
    }
    run_free(&r);
    run_arrun(&r, NULL, "-n", "2", "-x", "LD_PRELOAD=libc.so.6", "--shared-heap", "sh", "-c",
              SHOW_PRELOAD, NULL);
    assert_int_equal(r.status, 0);
    ta_rank_var(r.out, 1, "LD_PRELOAD", got, sizeof(got));
    if (strstr(got, "/libarcomm_heap.so:libc.so.6") == NULL)
        fail_msg("rank 1: LD_PRELOAD=%s, not the heap library then -x's", got);
    run_free(&r);
    run_arrun(&r, NULL, "-n", "2", "-x", "LD_PRELOAD=", "--shared-heap", "sh", "-c", SHOW_PRELOAD,
              NULL);
    assert_int_equal(r.status, 0);
    ta_rank_var(r.out, 0, "LD_PRELOAD", got, sizeof(got));
    if (strchr(got, ':') != NULL || strstr(got, tail) == NULL)
        fail_msg("rank 0: LD_PRELOAD=%s: -x LD_PRELOAD= leaves the heap library alone", got);
    run_free(&r);
}

/* The directory of the --shared-heap link in a rank's LD_PRELOAD ("/tmp/arrun-XXXXXX"). */
static void heap_link_dir(const char *preload, char *dir, size_t cap)
{
    const char *tail = strstr(preload, "/lib/libarcomm_heap.so");
    if (tail == NULL || strncmp(preload, "/", 1) != 0)
        fail_msg("LD_PRELOAD=%s: not through a link of arrun's", preload);
    snprintf(dir, cap, "%.*s", (int)(tail - preload), preload);
}

/*
 * --shared-heap where libarcomm_heap.so's path holds a space (here: libarcomm found
 * through LD_LIBRARY_PATH in a directory named so, as an install under such a path): the
 * loader splits LD_PRELOAD at spaces, so arrun names the library through a link of its
 * own, every rank has the heap, and the link is gone after the job, also when arrun is
 * SIGKILLed (its watcher removes it).  Before, every rank printed "cannot be preloaded"
 * and ran without the heap, and arrun exited 0.
 */
static char heap_top[] = "/tmp/arrun heap test XXXXXX";

/* Removes what test_shared_heap_path made, also when it failed. */
static int remove_heap_top(void **state)
{
    (void)state;
    char path[sizeof(heap_top) + 32];
    if (strstr(heap_top, "XXXXXX") != NULL)
        return 0;
    snprintf(path, sizeof(path), "%s/libarcomm.so.0", heap_top);
    unlink(path);
    snprintf(path, sizeof(path), "%s/libarcomm_heap.so", heap_top);
    unlink(path);
    rmdir(heap_top);
    return 0;
}

static void test_shared_heap_path(void **state)
{
    (void)state;
    char real[PATH_MAX], *top = heap_top, path[PATH_MAX + 64];
    char env[PATH_MAX + 32], got[4096], dir[4096];
    struct run r;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    skip(); /* see test_shared_heap */
#endif
    /* The build tree's library, beside which arrun (tools/arrun/arrun) finds the heap. */
    const char *slash = strrchr(arrun_path, '/');
    if (slash == NULL)
        skip();
    snprintf(path, sizeof(path), "%.*s/../../libarcomm.so.0", (int)(slash - arrun_path),
             arrun_path);
    if (realpath(path, real) == NULL)
        skip();
    assert_non_null(mkdtemp(top));
    snprintf(path, sizeof(path), "%s/libarcomm.so.0", top);
    assert_int_equal(symlink(real, path), 0);
    *strrchr(real, '/') = '\0';
    strcat(real, "/libarcomm_heap.so");
    snprintf(path, sizeof(path), "%s/libarcomm_heap.so", top);
    assert_int_equal(symlink(real, path), 0);
    snprintf(env, sizeof(env), "LD_LIBRARY_PATH=%s", top);
    struct run_opts ro = {.env = env};

    run_arrun(&r, &ro, "-n", "2", "--bind", "none", "--shared-heap", helper_path, "heap", NULL);
    if (r.status != 0 || strcmp(r.err, "") != 0)
        fail_msg("arrun --shared-heap from '%s' exited %d; stderr:\n%s", top, r.status, r.err);
    for (int i = 0; i < 2; i++) {
        ta_rank_var(r.out, i, "heap", got, sizeof(got));
        if (strcmp(got, "yes") != 0)
            fail_msg("rank %d runs without the heap:\n%s", i, r.out);
        ta_rank_var(r.out, i, "LD_PRELOAD", got, sizeof(got));
        heap_link_dir(got, dir, sizeof(dir));
        if (access(dir, F_OK) == 0)
            fail_msg("arrun left its link directory %s", dir);
    }
    run_free(&r);

    /* arrun SIGKILLed while the ranks run: its watcher removes the link. */
    struct run_opts kill9 = {.env = env, .signo = SIGKILL, .signal_after = 1.0};
    run_arrun(&r, &kill9, "-n", "2", "--bind", "none", "--shared-heap", "sh", "-c",
              "echo \"rank=$ARCOMM_RANK LD_PRELOAD=$LD_PRELOAD \"; exec sleep 30", NULL);
    assert_int_equal(r.status, 137);
    ta_rank_var(r.out, 0, "LD_PRELOAD", got, sizeof(got));
    heap_link_dir(got, dir, sizeof(dir));
    double until = now_s() + 5.0;
    while (access(dir, F_OK) == 0 && now_s() < until)
        usleep(20000);
    if (access(dir, F_OK) == 0)
        fail_msg("%s is still there after arrun was killed", dir);
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

/* ---- usage --------------------------------------------------------------------------- */

static void expect_usage_error(const char *what, struct run *r)
{
    if (r->status != 2)
        fail_msg("%s: arrun exited %d, expected 2; stderr:\n%s", what, r->status, r->err);
    if (strncmp(r->err, "arrun: ", 7) != 0 || !strstr(r->err, "Usage: arrun -n N"))
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
    assert_non_null(strstr(r.out, "Usage: arrun -n N"));
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
        cmocka_unit_test(test_bind_inherited),
        cmocka_unit_test_teardown(test_bind_cgroup, ta_remove_cgroup),
        cmocka_unit_test(test_env_x),
        cmocka_unit_test(test_shared_heap),
        cmocka_unit_test_teardown(test_shared_heap_path, remove_heap_top),
        cmocka_unit_test_teardown(test_output_filename, ta_remove_output_top),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_segments_removed),
        cmocka_unit_test(test_mpirun_spellings),
        cmocka_unit_test(test_usr_signals_passed_on),
        cmocka_unit_test(test_job_control),
        cmocka_unit_test(test_closed_stdin),
        cmocka_unit_test(test_many_labelled_ranks),
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
