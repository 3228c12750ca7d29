/* SPDX-License-Identifier: MIT */
/*
 * The device backends' path tables (collectives/paths_device.c), on the CPU: the plan at
 * each default row's boundaries of the "cuda" and "cuda-p2p" tables (size - 1, size,
 * size + 1; one rank and two; the bounds ARCOMM_COPY_THRESHOLD and the copy ring set),
 * ARCOMM_PATHS rows before them, the refusals (a host path on a CUDA communicator, a
 * CUDA path on a host one, a path for collectives it does not serve, malformed items),
 * the Hexagon table, and comm_paths_query without a communicator for each table.
 */
#include "arcomm_paths.h"
#include "backend.h"
#include "paths_device.h"

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

static struct coll_paths g_t;

/* The table a communicator of set with n ranks resolves at setup, with these knobs
 * (NULL: the default) and ARCOMM_PATHS. */
static void table_for(enum coll_paths_set set, int n, const char *copy_threshold, const char *paths)
{
    char err[320];
    struct rt_knobs k;
    assert_int_equal(rt_knobs_load(&k, err, sizeof(err)), COMM_OK);
    if (copy_threshold != NULL)
        assert_true(rt_parse_size(copy_threshold, &k.cuda.copy_threshold));
    struct coll_paths_overrides ov;
    if (coll_device_paths_parse(set, paths, &ov, err, sizeof(err)) != COMM_OK)
        fail_msg("%s", err);
    struct coll_device_paths_config cfg;
    coll_device_paths_config(set, &k, n, false, &cfg);
    coll_device_paths_resolve(&cfg, &ov, &g_t);
}

static const char *plan_of(enum coll_kind kind, uint64_t bytes)
{
    struct coll_plan_ask ask = {.kind = kind, .bytes = bytes, .plain = true};
    struct coll_plan p;
    coll_device_paths_plan(&g_t, &ask, &p);
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

static const enum coll_kind others[] = {COLL_BROADCAST, COLL_REDUCE, COLL_ALLGATHER,
                                        COLL_REDUCE_SCATTER, COLL_ALLTOALL};
#define NOTHERS (sizeof(others) / sizeof(others[0]))

/* The bytes per rank whose LL allreduce is v (coll_cuda_ll_bytes's inverse). */
static uint64_t per_rank(enum coll_kind kind, uint64_t v, int n)
{
    uint64_t f = kind == COLL_ALLTOALL                                   ? (uint64_t)n * n
                 : kind == COLL_ALLGATHER || kind == COLL_REDUCE_SCATTER ? (uint64_t)n
                                                                         : 1;
    return v / f;
}

/* One rank: the local row, whatever the size and collective; from two ranks the rest. */
static void cuda_local_row(void **st)
{
    (void)st;
    for (int set = COLL_PATHS_CUDA; set <= COLL_PATHS_CUDA_P2P; set++) {
        table_for((enum coll_paths_set)set, 1, NULL, NULL);
        for (int k = COLL_ALLREDUCE; k <= COLL_ALLTOALL; k++) {
            assert_string_equal(plan_of((enum coll_kind)k, 0), "local");
            assert_string_equal(plan_of((enum coll_kind)k, 256 * M), "local");
        }
        table_for((enum coll_paths_set)set, 2, NULL, NULL);
        assert_string_equal(plan_of(COLL_ALLREDUCE, 4),
                            set == COLL_PATHS_CUDA ? "kernel" : "one-shot");
        assert_string_equal(plan_of(COLL_BROADCAST, 4),
                            set == COLL_PATHS_CUDA ? "kernel" : "direct");
    }
}

/* cuda: allreduce on the kernel below ARCOMM_COPY_THRESHOLD (1M by default), the copy
 * engines from it; the others on the kernel while their allreduce is at most 64K and
 * below the threshold. */
static void cuda_rows(void **st)
{
    (void)st;
    for (int n = 2; n <= 8; n *= 2) {
        table_for(COLL_PATHS_CUDA, n, NULL, NULL);
        edge(COLL_ALLREDUCE, M - 1, "kernel", "copy");
        assert_string_equal(plan_of(COLL_ALLREDUCE, 0), "kernel");
        assert_string_equal(plan_of(COLL_ALLREDUCE, 256 * M), "copy");
        for (size_t i = 0; i < NOTHERS; i++) {
            uint64_t hi = per_rank(others[i], 64 * K, n);
            edge(others[i], hi, "kernel", "copy");
            assert_string_equal(plan_of(others[i], 0), "kernel");
        }
    }
    /* The threshold moves both rows' ends: 4K, so the others end at 4K - 1 too. */
    table_for(COLL_PATHS_CUDA, 2, "4K", NULL);
    edge(COLL_ALLREDUCE, 4 * K - 1, "kernel", "copy");
    edge(COLL_BROADCAST, 4 * K - 1, "kernel", "copy");
    edge(COLL_ALLGATHER, 2 * K - 1, "kernel", "copy");
    edge(COLL_ALLTOALL, K - 1, "kernel", "copy");
    /* 0: every call on the copy engines; off: allreduce never leaves the kernel. */
    table_for(COLL_PATHS_CUDA, 2, "0", NULL);
    for (int k = COLL_ALLREDUCE; k <= COLL_ALLTOALL; k++)
        assert_string_equal(plan_of((enum coll_kind)k, 0), "copy");
    table_for(COLL_PATHS_CUDA, 2, "off", NULL);
    assert_string_equal(plan_of(COLL_ALLREDUCE, 256 * M), "kernel");
    edge(COLL_REDUCE, 64 * K, "kernel", "copy");
}

/* cuda-p2p: allreduce one-shot below the threshold, two-shot from it; the others direct
 * at every size. */
static void cuda_p2p_rows(void **st)
{
    (void)st;
    table_for(COLL_PATHS_CUDA_P2P, 4, NULL, NULL);
    edge(COLL_ALLREDUCE, M - 1, "one-shot", "two-shot");
    for (size_t i = 0; i < NOTHERS; i++) {
        assert_string_equal(plan_of(others[i], 0), "direct");
        assert_string_equal(plan_of(others[i], 64 * K + 1), "direct");
        assert_string_equal(plan_of(others[i], 256 * M), "direct");
    }
    table_for(COLL_PATHS_CUDA_P2P, 2, "64K", NULL);
    edge(COLL_ALLREDUCE, 64 * K - 1, "one-shot", "two-shot");
}

/* ARCOMM_PATHS rows come first (after the one-rank row); a kernel row of the others stops
 * at half the copy ring (2 ranks: 4 slots of 4 MiB). */
static void overrides(void **st)
{
    (void)st;
    table_for(COLL_PATHS_CUDA, 2, NULL, "allreduce:0-64K:copy;broadcast:0-1G:kernel");
    edge(COLL_ALLREDUCE, 64 * K, "copy", "kernel");
    edge(COLL_ALLREDUCE, M - 1, "kernel", "copy");
    assert_int_equal(g_t.room, 8 * M);
    edge(COLL_BROADCAST, 8 * M, "kernel", "copy");
    assert_int_equal(g_t.row[0].item, 1);
    assert_int_equal(g_t.row[1].item, 2);
    /* A copy chunk above 4 MiB makes the ring's slots larger (transport.c's geometry). */
    setenv("ARCOMM_COPY_CHUNK_BYTES", "8M", 1);
    table_for(COLL_PATHS_CUDA, 2, NULL, "broadcast:0-1G:kernel");
    unsetenv("ARCOMM_COPY_CHUNK_BYTES");
    assert_int_equal(g_t.room, 16 * M);
    edge(COLL_BROADCAST, 16 * M, "kernel", "copy");
    /* One rank keeps the local row: an override never reaches it. */
    table_for(COLL_PATHS_CUDA, 1, NULL, "allreduce:0-:n=1:copy;reduce:0-:copy");
    assert_string_equal(plan_of(COLL_ALLREDUCE, 4), "local");
    assert_string_equal(plan_of(COLL_REDUCE, 4), "local");
    for (int i = 0; i < g_t.nrows; i++)
        assert_int_equal(g_t.row[i].item, 0);
    /* Rank counts and the copy ring growing with them. */
    table_for(COLL_PATHS_CUDA, 4, NULL, "alltoall:0-:n=3-4:kernel");
    assert_int_equal(g_t.room, 3 * 2 * 4 * M);
    edge(COLL_ALLTOALL, 24 * M / 16, "kernel", "copy");
    table_for(COLL_PATHS_CUDA, 5, NULL, "alltoall:0-:n=3-4:kernel");
    edge(COLL_ALLTOALL, 64 * K / 25, "kernel", "copy");
    table_for(COLL_PATHS_CUDA_P2P, 2, NULL, "allreduce:-4K:two-shot;allreduce:2M-:one-shot");
    edge(COLL_ALLREDUCE, 4 * K, "two-shot", "one-shot");
    edge(COLL_ALLREDUCE, M - 1, "one-shot", "two-shot");
    edge(COLL_ALLREDUCE, 2 * M - 1, "two-shot", "one-shot");
}

/* What comm_init refuses, and says so naming the item. */
static void refusals(void **st)
{
    (void)st;
    static const struct {
        enum coll_paths_set set;
        const char *text, *says;
    } bad[] = {
        /* docs/paths.md shows this one whole. */
        {COLL_PATHS_CUDA, "allreduce:0-64K:flag",
         "ARCOMM_PATHS item 1 \"allreduce:0-64K:flag\": \"flag\" is a path of the host (shm) "
         "backend, not of this cuda communicator: end the item with kernel or copy "
         "(ARCOMM_PATHS applies to every communicator of the process)"},
        {COLL_PATHS_CUDA, "allreduce:0-64K:kernel;;broadcast:1M-:direct",
         "ARCOMM_PATHS item 3 \"broadcast:1M-:direct\": \"direct\" is a path of the cuda-p2p "
         "backend, not of this cuda communicator"},
        {COLL_PATHS_HOST, "allreduce:0-64K:kernel",
         "\"kernel\" is a path of the cuda backend, not of this host (shm) communicator: end "
         "the item with flag, one-pass, cma or staged"},
        {COLL_PATHS_CUDA_P2P, "allreduce:0-:copy",
         "end the item with one-shot, two-shot or direct"},
        {COLL_PATHS_HEXAGON, "allreduce:0-:flag", "not of this hexagon communicator"},
        {COLL_PATHS_CUDA, "allreduce:0-64K:kernal",
         "unknown path \"kernal\": end the item with "
         "kernel or copy"},
        {COLL_PATHS_CUDA, "*:0-:local", "unknown path \"local\""},
        {COLL_PATHS_CUDA, "allreduce:64K-0:kernel", "bad sizes \"64K-0\""},
        {COLL_PATHS_CUDA, "allreduce:kernel", "too few fields"},
        {COLL_PATHS_CUDA_P2P, "*:0-4K:one-shot",
         "ARCOMM_PATHS item 1 \"*:0-4K:one-shot\": path \"one-shot\" of the cuda-p2p backend "
         "serves allreduce only"},
        {COLL_PATHS_CUDA_P2P, "allreduce:0-:two-shot; allreduce,alltoall:0-:direct ",
         "item 2 \"allreduce,alltoall:0-:direct\": path \"direct\" of the cuda-p2p backend "
         "serves broadcast,reduce,allgather,reduce_scatter,alltoall only"},
        {COLL_PATHS_HEXAGON, "broadcast:0-:session", "serves allreduce only"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[320] = "";
        struct coll_paths_overrides ov;
        comm_status_t s =
            bad[i].set == COLL_PATHS_HOST
                ? coll_paths_parse(bad[i].text, &ov, err, sizeof(err))
                : coll_device_paths_parse(bad[i].set, bad[i].text, &ov, err, sizeof(err));
        if (s != COMM_ERR_INVALID || strstr(err, bad[i].says) == NULL)
            fail_msg("%s on %s: status %d, \"%s\", expected \"%s\"", bad[i].text,
                     coll_paths_set_name(bad[i].set), (int)s, err, bad[i].says);
    }
    /* And what they accept. */
    struct coll_paths_overrides ov;
    char err[320];
    assert_int_equal(
        coll_device_paths_parse(COLL_PATHS_HEXAGON, "allreduce:0-:session", &ov, err, sizeof(err)),
        COMM_OK);
    assert_int_equal(coll_device_paths_parse(COLL_PATHS_CUDA, "*:0-:n=2-4:processes:copy", &ov, err,
                                             sizeof(err)),
                     COMM_OK);
    assert_int_equal(ov.n, 1);
}

static void hexagon_table(void **st)
{
    (void)st;
    for (int n = 1; n <= 4; n++) {
        table_for(COLL_PATHS_HEXAGON, n, NULL, NULL);
        assert_string_equal(plan_of(COLL_ALLREDUCE, 0), "session");
        assert_string_equal(plan_of(COLL_ALLREDUCE, 256 * M), "session");
        assert_string_equal(plan_of(COLL_BROADCAST, 4), "none");
    }
}

/* comm_paths_query without a communicator: q->ranks names the table. */
static void query(void **st)
{
    (void)st;
    comm_paths_row_t rows[COMM_PATHS_ROWS_MAX];
    size_t n = 0;
    comm_paths_plan_t plan;
    comm_paths_query_t q = {
        .collective = "allreduce", .bytes = M, .nranks = 2, .ranks = COMM_PATHS_CUDA};
    assert_int_equal(comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, &plan), COMM_OK);
    assert_int_equal(n, 3);
    assert_string_equal(plan.path, "copy");
    assert_string_equal(plan.row_path, "copy");
    assert_int_equal(plan.row, 2);
    assert_string_equal(rows[0].path, "kernel");
    assert_string_equal(rows[0].collectives, "allreduce");
    assert_int_equal(rows[0].hi, M - 1);
    assert_int_equal(rows[1].staged, 1);
    assert_string_equal(rows[1].collectives, "broadcast,reduce,allgather,reduce_scatter,alltoall");
    assert_int_equal(rows[2].hi, COMM_PATHS_NO_LIMIT);
    assert_string_equal(rows[2].collectives, "*");
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(rows[i].item, 0);
        assert_true(strstr(rows[i].why, ".md") != NULL);
    }
    q.bytes = M - 1;
    assert_int_equal(comm_paths_query(NULL, &q, NULL, 0, &n, &plan), COMM_OK);
    assert_string_equal(plan.path, "kernel");
    q.nranks = 1;
    assert_int_equal(comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, &plan), COMM_OK);
    assert_string_equal(plan.path, "local");
    assert_string_equal(rows[0].path, "local");
    /* cuda-p2p, with an ARCOMM_PATHS row from the environment. */
    setenv("ARCOMM_PATHS", "alltoall:0-:direct;allreduce:0-8K:two-shot", 1);
    q.ranks = COMM_PATHS_CUDA_P2P;
    q.nranks = 4;
    q.bytes = 4 * K;
    assert_int_equal(comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, &plan), COMM_OK);
    assert_string_equal(plan.path, "two-shot");
    assert_int_equal(plan.row, 1);
    assert_int_equal(rows[1].item, 2);
    q.collective = "alltoall";
    assert_int_equal(comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, &plan), COMM_OK);
    assert_string_equal(plan.path, "direct");
    assert_int_equal(rows[plan.row].item, 1);
    /* The same string on the cuda table: refused, as comm_init would. */
    q.ranks = COMM_PATHS_CUDA;
    assert_int_equal(comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, &plan),
                     COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "\"direct\" is a path of the cuda-p2p"));
    /* The host table still takes host rows only. */
    setenv("ARCOMM_PATHS", "allreduce:0-:copy", 1);
    q.ranks = COMM_PATHS_PROCESSES;
    assert_int_equal(comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, &plan),
                     COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "\"copy\" is a path of the cuda backend"));
    unsetenv("ARCOMM_PATHS");
    /* ARCOMM_COPY_THRESHOLD from the environment moves the bounds. */
    setenv("ARCOMM_COPY_THRESHOLD", "256K", 1);
    q.ranks = COMM_PATHS_CUDA;
    q.collective = "allreduce";
    q.bytes = 256 * K;
    assert_int_equal(comm_paths_query(NULL, &q, NULL, 0, &n, &plan), COMM_OK);
    assert_string_equal(plan.path, "copy");
    unsetenv("ARCOMM_COPY_THRESHOLD");
    /* Hexagon: allreduce only. */
    q.ranks = COMM_PATHS_HEXAGON;
    assert_int_equal(comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, &plan), COMM_OK);
    assert_int_equal(n, 1);
    assert_string_equal(plan.path, "session");
    q.collective = "broadcast";
    assert_int_equal(comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, &plan), COMM_OK);
    assert_string_equal(plan.path, "none");
    assert_int_equal(plan.row, -1);
    /* Bad queries. */
    q.ranks = (comm_paths_ranks_t)7;
    assert_int_equal(comm_paths_query(NULL, &q, NULL, 0, &n, &plan), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "COMM_PATHS_CUDA"));
    q.ranks = COMM_PATHS_CUDA;
    q.nranks = 0;
    assert_int_equal(comm_paths_query(NULL, &q, NULL, 0, &n, &plan), COMM_ERR_INVALID);
}

int main(void)
{
    unsetenv("ARCOMM_PATHS");
    unsetenv("ARCOMM_COPY_THRESHOLD");
    unsetenv("ARCOMM_COPY_CHUNK_BYTES");
    unsetenv("ARCOMM_CUDA_STAGING_BYTES");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cuda_local_row), cmocka_unit_test(cuda_rows),
        cmocka_unit_test(cuda_p2p_rows),  cmocka_unit_test(overrides),
        cmocka_unit_test(refusals),       cmocka_unit_test(hexagon_table),
        cmocka_unit_test(query),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
