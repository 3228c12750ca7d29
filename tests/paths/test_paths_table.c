/* SPDX-License-Identifier: MIT */
/*
 * The host path table: the plan at each default row's boundaries (size - 1, size,
 * size + 1; rank counts at the rows' edges; thread and process ranks; private and shared
 * buffers), the ARCOMM_PATHS grammar (good strings and every error), the digest that
 * carries it to the join's agreement, and comm_paths_query against the same rows.
 */
#include "arcomm_paths.h"
#include "backend.h"
#include "paths.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define K ((uint64_t)1 << 10)
#define M ((uint64_t)1 << 20)

struct setup {
    int n;
    bool threads, cma_fast;
    const char *cma_threshold; /* NULL: auto */
    const char *flag_threshold;
    const char *paths;
};

static struct rt_knobs g_k;
static struct coll_paths g_t;

/* The table a communicator of s would resolve (knobs as comm_init and setup make them). */
static void table_for(const struct setup *s)
{
    char err[320];
    assert_int_equal(rt_knobs_load(&g_k, err, sizeof(err)), COMM_OK);
    if (s->cma_threshold)
        assert_true(rt_parse_size(s->cma_threshold, &g_k.cma_threshold));
    if (s->flag_threshold)
        assert_true(rt_parse_size(s->flag_threshold, &g_k.flag_threshold));
    g_k.nt_threshold = RT_SIZE_OFF;
    coll_host_knobs.used(&g_k, NULL, s->n, s->threads);
    struct coll_paths_overrides ov;
    if (coll_paths_parse(s->paths, &ov, err, sizeof(err)) != COMM_OK)
        fail_msg("%s", err);
    struct coll_paths_config cfg = {.nranks = s->n,
                                    .threads = s->threads,
                                    .cma = !s->threads,
                                    .cma_fast = s->cma_fast,
                                    .k = &g_k};
    coll_paths_resolve(&cfg, &ov, &g_t);
}

static const char *plan_of(enum coll_kind kind, uint64_t bytes)
{
    struct coll_plan_ask ask = {.kind = kind, .bytes = bytes, .plain = true};
    struct coll_plan p;
    coll_paths_plan(NULL, &g_t, &ask, &p);
    return coll_path_name(p.path);
}

/* size - 1 and size on path a, size + 1 on path b. */
static void edge(enum coll_kind kind, uint64_t size, const char *a, const char *b)
{
    if (size > 0)
        assert_string_equal(plan_of(kind, size - 1), a);
    assert_string_equal(plan_of(kind, size), a);
    assert_string_equal(plan_of(kind, size + 1), b);
}

static void thread_flag_row(void **st)
{
    (void)st;
    for (int n = 1; n <= 8; n++) {
        table_for(&(struct setup){.n = n, .threads = true});
        for (int k = COLL_ALLREDUCE; k <= COLL_ALLGATHER; k++)
            edge((enum coll_kind)k, 1024, "flag", "one-pass");
        /* reduce_scatter and alltoall stage n blocks. */
        edge(COLL_REDUCE_SCATTER, 1024 / (uint64_t)n, "flag", "one-pass");
        edge(COLL_ALLTOALL, 1024 / (uint64_t)n, "flag", "one-pass");
        /* No single copy between threads, whatever the knob. */
        table_for(&(struct setup){.n = n, .threads = true, .cma_threshold = "0"});
        assert_string_equal(plan_of(COLL_ALLGATHER, 2 * M), "one-pass");
    }
}

static void process_flag_row(void **st)
{
    (void)st;
    /* min(512K, 2M / n^2): 512K up to 2 ranks, then 2M / n^2. */
    for (int n = 1; n <= 2; n++) {
        table_for(&(struct setup){.n = n, .cma_threshold = "off"});
        edge(COLL_ALLREDUCE, 512 * K, "flag", "one-pass");
        edge(COLL_BROADCAST, 512 * K, "flag", "one-pass");
    }
    for (int n = 3; n <= 16; n++) {
        table_for(&(struct setup){.n = n, .cma_threshold = "off"});
        uint64_t hi = 2 * M / ((uint64_t)n * (uint64_t)n);
        edge(COLL_ALLREDUCE, hi, "flag", "one-pass");
        edge(COLL_ALLTOALL, hi / (uint64_t)n, "flag", "one-pass");
    }
    /* A flag threshold set replaces the row's bound; off drops it. */
    table_for(&(struct setup){.n = 2, .flag_threshold = "4K", .cma_threshold = "off"});
    edge(COLL_REDUCE, 4 * K, "flag", "one-pass");
    table_for(&(struct setup){.n = 2, .flag_threshold = "off"});
    assert_string_equal(plan_of(COLL_ALLREDUCE, 4), "one-pass");
}

static void cma_rows(void **st)
{
    (void)st;
    /* Allgather's window, 2 process ranks, before the flag rows. */
    table_for(&(struct setup){.n = 2});
    edge(COLL_ALLGATHER, 1 * M - 1, "one-pass", "cma");
    edge(COLL_ALLGATHER, 4 * M, "cma", "one-pass");
    edge(COLL_ALLREDUCE, 512 * K, "flag", "one-pass");
    assert_string_equal(plan_of(COLL_ALLREDUCE, 4 * M), "one-pass");
    /* Not at 3 ranks. */
    table_for(&(struct setup){.n = 3});
    assert_string_equal(plan_of(COLL_ALLGATHER, 2 * M), "one-pass");
    /* Where the single copy is fast: the bulk windows. */
    table_for(&(struct setup){.n = 2, .cma_fast = true});
    edge(COLL_ALLREDUCE, 512 * K, "flag", "cma");
    edge(COLL_ALLREDUCE, 16 * M, "cma", "one-pass");
    edge(COLL_REDUCE, 8 * M, "cma", "one-pass");
    edge(COLL_REDUCE_SCATTER, 8 * M, "cma", "one-pass");
    assert_string_equal(plan_of(COLL_BROADCAST, 1024 * M), "cma");
    assert_string_equal(plan_of(COLL_ALLTOALL, 1024 * M), "cma");
    /* Flag-sized calls: the choice rows need rank 0's word, which a plan without a
     * communicator never reads. */
    assert_string_equal(plan_of(COLL_ALLREDUCE, 16 * K), "flag");
    /* A size set: every bulk call from it, any rank count. */
    table_for(&(struct setup){.n = 4, .cma_threshold = "600K"});
    edge(COLL_ALLREDUCE, 600 * K - 1, "one-pass", "cma");
    edge(COLL_ALLREDUCE, 128 * K, "flag", "one-pass"); /* 2M / 4^2 */
    table_for(&(struct setup){.n = 4, .cma_threshold = "off"});
    assert_string_equal(plan_of(COLL_ALLREDUCE, 64 * M), "one-pass");
    /* Narrowed and fused-add calls have no CMA path. */
    table_for(&(struct setup){.n = 2, .cma_fast = true});
    struct coll_plan p;
    coll_paths_plan(NULL, &g_t, &(struct coll_plan_ask){COLL_ALLREDUCE, 4 * M, false}, &p);
    assert_string_equal(coll_path_name(p.path), "one-pass");
}

static void overrides(void **st)
{
    (void)st;
    table_for(&(struct setup){.n = 2, .threads = true, .paths = "allreduce:0-64K:flag"});
    edge(COLL_ALLREDUCE, 64 * K, "flag", "one-pass");
    edge(COLL_BROADCAST, 1024, "flag", "one-pass"); /* untouched */
    table_for(&(struct setup){.n = 2, .paths = " broadcast , allgather : 1M- : cma ; "});
    edge(COLL_BROADCAST, 1 * M - 1, "one-pass", "cma");
    assert_string_equal(plan_of(COLL_ALLGATHER, 64 * M), "cma");
    assert_string_equal(plan_of(COLL_ALLREDUCE, 64 * M), "one-pass");
    /* Rank counts and kinds of ranks. */
    const char *q = "*:0-:n=3-4:processes:staged";
    table_for(&(struct setup){.n = 3, .paths = q});
    assert_string_equal(plan_of(COLL_REDUCE, 8), "staged");
    table_for(&(struct setup){.n = 5, .paths = q});
    assert_string_equal(plan_of(COLL_REDUCE, 8), "flag");
    table_for(&(struct setup){.n = 3, .threads = true, .paths = q});
    assert_string_equal(plan_of(COLL_REDUCE, 8), "flag");
    /* One size; "cma" where there is no single copy (threads) is left out. */
    table_for(&(struct setup){.n = 2, .paths = "reduce:4K:staged"});
    assert_string_equal(plan_of(COLL_REDUCE, 4 * K), "staged");
    assert_string_equal(plan_of(COLL_REDUCE, 4 * K + 1), "flag");
    table_for(&(struct setup){.n = 2, .threads = true, .paths = "*:0-:cma"});
    assert_string_equal(plan_of(COLL_REDUCE, 4 * M), "one-pass");
    /* A flag row never stages more than a slot: alltoall of 4 ranks stages 4 blocks. */
    table_for(&(struct setup){.n = 4, .paths = "alltoall:0-1M:flag"});
    edge(COLL_ALLTOALL, 256 * K, "flag", "one-pass");
}

static void bad_string(const char *text, const char *says)
{
    struct coll_paths_overrides ov;
    char err[320] = "";
    assert_int_equal(coll_paths_parse(text, &ov, err, sizeof(err)), COMM_ERR_INVALID);
    if (strstr(err, says) == NULL)
        fail_msg("ARCOMM_PATHS=%s: \"%s\" does not say \"%s\"", text, err, says);
}

static void grammar_errors(void **st)
{
    (void)st;
    bad_string("allreduce:0-64K:flg", "item 1 \"allreduce:0-64K:flg\": unknown path \"flg\": end "
                                      "the item with flag, one-pass, cma or staged");
    bad_string("allreduce:0-:flag;allreducee:0-:flag", "item 2");
    bad_string("allreducee:0-:flag", "unknown collective \"allreducee\"");
    bad_string("allreduce:64K-1K:flag", "bad sizes \"64K-1K\"");
    bad_string("allreduce:off:flag", "bad sizes \"off\"");
    bad_string("allreduce:flag", "too few fields");
    bad_string("allreduce:0-:n=0:flag", "bad rank counts \"n=0\"");
    bad_string("allreduce:0-:n=3-2:flag", "bad rank counts");
    bad_string("allreduce:0-:sometimes:flag", "unknown qualifier \"sometimes\"");
    bad_string("allreduce:0-:threads:cma", "thread ranks have no path \"cma\"");
    bad_string(",:0-:flag", "no collective");
    char many[RT_KNOB_STR_MAX] = "";
    for (int i = 0; i < COLL_PATHS_OVERRIDES_MAX + 1; i++)
        strcat(many, "reduce:1:flag;");
    bad_string(many, "more than 16 items");
    /* Good ones, and nothing. */
    struct coll_paths_overrides ov;
    char err[320];
    assert_int_equal(coll_paths_parse("", &ov, err, sizeof(err)), COMM_OK);
    assert_int_equal(ov.n, 0);
    assert_int_equal(coll_paths_parse(";;*:-4K:flag;;", &ov, err, sizeof(err)), COMM_OK);
    assert_int_equal(ov.n, 1);
    assert_int_equal(ov.row[0].item, 3);
    assert_int_equal(ov.row[0].lo, 0);
    assert_int_equal(ov.row[0].hi, 4 * K);
}

/* ARCOMM_PATHS agrees by digest: different texts differ, the same text is the same. */
static void digest(void **st)
{
    (void)st;
    struct rt_knobs a, b;
    char err[320];
    assert_int_equal(rt_knobs_load(&a, err, sizeof(err)), COMM_OK);
    b = a;
    snprintf(a.paths, sizeof(a.paths), "allreduce:0-64K:flag");
    snprintf(b.paths, sizeof(b.paths), "allreduce:0-64K:flag");
    assert_true(rt_knob_value(&a, RT_KNOB_PATHS) == rt_knob_value(&b, RT_KNOB_PATHS));
    snprintf(b.paths, sizeof(b.paths), "allreduce:0-32K:flag");
    assert_true(rt_knob_value(&a, RT_KNOB_PATHS) != rt_knob_value(&b, RT_KNOB_PATHS));
    b.paths[0] = '\0';
    assert_true(rt_knob_value(&a, RT_KNOB_PATHS) != rt_knob_value(&b, RT_KNOB_PATHS));
    assert_true(rt_knob_table[RT_KNOB_PATHS].flags & RT_KNOB_AGREE);
}

/* comm_paths_query without a communicator: the same rows, the plan with the buffers. */
static void query(void **st)
{
    (void)st;
    comm_paths_row_t rows[COMM_PATHS_ROWS_MAX];
    size_t n = 0;
    comm_paths_plan_t plan;
    comm_paths_query_t q = {
        .collective = "allreduce", .bytes = 1 * M, .nranks = 4, .ranks = COMM_PATHS_PROCESSES};
    setenv("ARCOMM_CMA_THRESHOLD", "off", 1);
    assert_int_equal(comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, &plan), COMM_OK);
    assert_true(n > 0 && n <= COMM_PATHS_ROWS_MAX);
    assert_string_equal(plan.row_path, "one-pass");
    assert_string_equal(plan.path, "staged"); /* private buffers of process ranks */
    assert_string_equal(rows[plan.row].path, "one-pass");
    q.buffers = COMM_PATHS_SHARED;
    assert_int_equal(comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, &plan), COMM_OK);
    assert_string_equal(plan.path, "one-pass");
    q.bytes = 128 * K; /* the flag row of 4 process ranks: up to 2M / 4^2 */
    assert_int_equal(comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, &plan), COMM_OK);
    assert_string_equal(plan.path, "flag");
    assert_string_equal(rows[plan.row].path, "flag");
    assert_int_equal(rows[plan.row].hi, 128 * K);
    assert_int_equal(rows[plan.row].item, 0);
    assert_true(strstr(rows[plan.row].why, "PERFORMANCE.md") != NULL);
    /* ARCOMM_PATHS from the environment: its row first, and its errors. */
    setenv("ARCOMM_PATHS", "allreduce:0-:staged", 1);
    q.buffers = COMM_PATHS_SHARED;
    assert_int_equal(comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, &plan), COMM_OK);
    assert_string_equal(plan.path, "staged");
    assert_int_equal(plan.row, 0);
    assert_int_equal(rows[0].item, 1);
    setenv("ARCOMM_PATHS", "allreduce:0-:stage", 1);
    assert_int_equal(comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, &plan),
                     COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "unknown path \"stage\""));
    unsetenv("ARCOMM_PATHS");
    unsetenv("ARCOMM_CMA_THRESHOLD");
    /* Bad queries. */
    q.collective = "allreduc";
    assert_int_equal(comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, &plan),
                     COMM_ERR_INVALID);
    q.collective = "allreduce";
    q.nranks = 0;
    assert_int_equal(comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, &plan),
                     COMM_ERR_INVALID);
    /* Rows only, none wanted: the count still comes. */
    q.nranks = 2;
    q.collective = NULL;
    assert_int_equal(comm_paths_query(NULL, &q, NULL, 0, &n, NULL), COMM_OK);
    assert_true(n > 0);
}

int main(void)
{
    unsetenv("ARCOMM_PATHS");
    unsetenv("ARCOMM_FLAG_THRESHOLD");
    unsetenv("ARCOMM_CMA_THRESHOLD");
    unsetenv("ARCOMM_SHM_SLOT_BYTES");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(thread_flag_row), cmocka_unit_test(process_flag_row),
        cmocka_unit_test(cma_rows),        cmocka_unit_test(overrides),
        cmocka_unit_test(grammar_errors),  cmocka_unit_test(digest),
        cmocka_unit_test(query),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
