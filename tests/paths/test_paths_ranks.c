/* SPDX-License-Identifier: MIT */
/*
 * ARCOMM_PATHS on live ranks: every rank must have the same (COMM_ERR_MISMATCH at join,
 * naming the knob, otherwise), a bad one fails comm_init with COMM_ERR_INVALID on every
 * rank, and a call forced onto each path by it gives the rank-order result
 * (((x0 + x1) + x2) + ..., bit for bit, on every rank) and takes the path it was forced
 * onto (libarcomm's count of the bulk paths taken); so do broadcast, reduce, allgather,
 * reduce_scatter and alltoall (exact copies, and reductions in rank order).
 */
#include "arcomm.h"
#include "arcomm_paths.h"
#include "harness.h"
#include "rt_hooks.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const size_t counts[] = {1000, 70001};

struct forced {
    const char *paths;
    const char *path; /* what comm_paths_query must say the call takes */
    bool every;       /* the row is for every collective, not allreduce alone */
};
static const struct forced *g_forced;

/* The rank-order f32 sum of every rank's input, as arcomm promises it. */
static void reference(float *ref, size_t count, int nranks, uint64_t seed)
{
    float *x = malloc(count * sizeof(float));
    assert_non_null(x);
    for (int r = 0; r < nranks; r++) {
        h_fill(x, count, COMM_F32, seed, r);
        for (size_t i = 0; i < count; i++)
            ref[i] = r == 0 ? x[i] : ref[i] + x[i];
    }
    free(x);
}

/* Every rank's f32 input of n * count elements (the blocks of reduce_scatter and
 * alltoall; the others use the first count). */
static float *input_of(int rank, size_t elems, uint64_t seed)
{
    float *x = malloc(elems * sizeof(float));
    if (x != NULL)
        h_fill(x, elems, COMM_F32, seed, rank);
    return x;
}

#define OTHER_COUNT 5000
#define OTHER_CALLS 5

/* Broadcast (root 1), reduce (root 0), allgather, reduce_scatter and alltoall on the
 * forced path: exact copies, and reductions in rank order. */
static void others(struct h_rank *r)
{
    size_t count = OTHER_COUNT, n = (size_t)r->nranks, all = n * count;
    uint64_t seed = 0x07e5;
    float *send = input_of(r->rank, all, seed), *recv = malloc(all * sizeof(float));
    float *ref = malloc(all * sizeof(float)), *x = NULL;
    if (!send || !recv || !ref) {
        h_fail(r, "out of memory");
        goto out;
    }
    reference(ref, all, r->nranks, seed); /* rank-order sum of every rank's n blocks */
    int root = 1 % r->nranks;
    x = input_of(root, all, seed);
    h_poison(recv, count, COMM_F32);
    if (comm_broadcast(r->comm, send, recv, count, COMM_F32, root, NULL) != COMM_OK ||
        memcmp(recv, x, count * sizeof(float)) != 0)
        h_fail(r, "%s: broadcast: %s", g_forced->paths, comm_last_error(r->comm));
    h_poison(recv, count, COMM_F32);
    if (comm_reduce(r->comm, send, recv, count, COMM_F32, COMM_SUM, 0, NULL) != COMM_OK ||
        (r->rank == 0 && memcmp(recv, ref, count * sizeof(float)) != 0))
        h_fail(r, "%s: reduce: %s", g_forced->paths, comm_last_error(r->comm));
    h_poison(recv, all, COMM_F32);
    if (comm_allgather(r->comm, send, recv, count, COMM_F32, NULL) != COMM_OK)
        h_fail(r, "%s: allgather: %s", g_forced->paths, comm_last_error(r->comm));
    for (int p = 0; p < r->nranks; p++) {
        free(x);
        x = input_of(p, all, seed);
        if (x == NULL || memcmp(recv + (size_t)p * count, x, count * sizeof(float)) != 0)
            h_fail(r, "%s: allgather: block %d is not rank %d's input", g_forced->paths, p, p);
    }
    h_poison(recv, count, COMM_F32);
    if (comm_reduce_scatter(r->comm, send, recv, count, COMM_F32, COMM_SUM, NULL) != COMM_OK ||
        memcmp(recv, ref + (size_t)r->rank * count, count * sizeof(float)) != 0)
        h_fail(r, "%s: reduce_scatter: %s", g_forced->paths, comm_last_error(r->comm));
    h_poison(recv, all, COMM_F32);
    if (comm_alltoall(r->comm, send, recv, count, COMM_F32, NULL) != COMM_OK)
        h_fail(r, "%s: alltoall: %s", g_forced->paths, comm_last_error(r->comm));
    for (int p = 0; p < r->nranks; p++) {
        free(x);
        x = input_of(p, all, seed);
        if (x == NULL || memcmp(recv + (size_t)p * count, x + (size_t)r->rank * count,
                                count * sizeof(float)) != 0)
            h_fail(r, "%s: alltoall: block %d is not rank %d's block %d", g_forced->paths, p, p,
                   r->rank);
    }
out:
    free(x);
    free(send);
    free(recv);
    free(ref);
}

static void forced_body(struct h_rank *r)
{
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        size_t count = counts[c];
        uint64_t seed = 0x9a75 + count;
        float *send = malloc(count * sizeof(float)), *recv = malloc(count * sizeof(float));
        float *ref = malloc(count * sizeof(float));
        if (!send || !recv || !ref) {
            h_fail(r, "out of memory");
            return;
        }
        h_fill(send, count, COMM_F32, seed, r->rank);
        h_poison(recv, count, COMM_F32);
        reference(ref, count, r->nranks, seed);
        comm_status_t st = comm_allreduce(r->comm, send, recv, count, COMM_F32, COMM_SUM, NULL);
        if (st != COMM_OK)
            h_fail(r, "allreduce of %zu: %s", count, comm_last_error(r->comm));
        else if (memcmp(recv, ref, count * sizeof(float)) != 0)
            h_fail(r, "%s: allreduce of %zu floats is not the rank-order sum", g_forced->paths,
                   count);
        /* The plan the library shows for this call. */
        comm_paths_plan_t plan;
        size_t nrows;
        comm_paths_query_t q = {.collective = "allreduce", .bytes = count * sizeof(float)};
        if (comm_paths_query(r->comm, &q, NULL, 0, &nrows, &plan) != COMM_OK ||
            strcmp(plan.path, g_forced->path) != 0 || plan.row != 0)
            h_fail(r, "%s: comm_paths_query plans %s (row %d) for %zu bytes, not %s (row 0)",
                   g_forced->paths, plan.path, plan.row, count * sizeof(float), g_forced->path);
        free(send);
        free(recv);
        free(ref);
    }
    if (g_forced->every)
        others(r);
    uint64_t calls[3];
    if (rt_hook_bulk_calls(r->comm, calls) != COMM_OK) {
        h_fail(r, "rt_hook_bulk_calls failed");
        return;
    }
    const char *p = g_forced->path;
    uint64_t want = 2 + (g_forced->every ? OTHER_CALLS : 0);
    bool ok = strcmp(p, "flag") == 0       ? calls[0] + calls[1] + calls[2] == 0
              : strcmp(p, "one-pass") == 0 ? calls[0] == want && calls[1] + calls[2] == 0
              : strcmp(p, "staged") == 0   ? calls[1] == want && calls[0] + calls[2] == 0
                                           : calls[2] == want && calls[0] + calls[1] == 0;
    if (!ok)
        h_fail(r, "%s: bulk calls %llu one-pass, %llu staged, %llu CMA: not %s", g_forced->paths,
               (unsigned long long)calls[0], (unsigned long long)calls[1],
               (unsigned long long)calls[2], p);
}

static void run_forced(const struct forced *f, int nranks, bool procs)
{
    g_forced = f;
    h_env_push("ARCOMM_PATHS", f->paths);
    struct h_job job = {.nranks = nranks, .procs = procs, .body = forced_body, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    h_env_pop();
    for (int i = 0; i < nranks; i++)
        if (res[i].errors)
            fail_msg("%d %s ranks, rank %d: %s", nranks, procs ? "process" : "thread", i,
                     res[i].first_error);
}

static void forced_threads(void **st)
{
    (void)st;
    static const struct forced f[] = {
        {"allreduce:0-:flag", "flag", false},
        {"*:0-:flag", "flag", true},
        {"*:0-:one-pass", "one-pass", true},
        {"*:0-:staged", "staged", true},
    };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        for (int n = 2; n <= 3; n++)
            run_forced(&f[i], n, false);
}

static void forced_procs(void **st)
{
    (void)st;
    static const struct forced f[] = {
        {"*:0-:flag", "flag", true},
        {"allreduce:0-:staged", "staged", false},
        {"*:0-:staged", "staged", true},
        {"*:0-:processes:cma", "cma", true},
    };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        run_forced(&f[i], 3, true);
}

/* Each rank sets its own ARCOMM_PATHS (process ranks: each its environment). */
static const char *const *g_each;

static void init_body(struct h_rank *r)
{
    setenv("ARCOMM_PATHS", g_each[r->rank], 1);
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.timeout_ms = 20000;
    r->status = comm_init(&r->comm, &cfg);
    if (r->status == COMM_OK) {
        comm_destroy(r->comm);
        r->comm = NULL;
    } else {
        snprintf(r->first_error, sizeof(r->first_error), "%s", comm_last_error(NULL));
    }
}

static void disagree(void **st)
{
    (void)st;
    static const char *const each[] = {"allreduce:0-64K:flag", "allreduce:0-32K:flag"};
    g_each = each;
    struct h_job job = {
        .nranks = 2, .procs = true, .no_init = true, .body = init_body, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    if (res[1].status != COMM_ERR_MISMATCH || strstr(res[1].first_error, "ARCOMM_PATHS") == NULL)
        fail_msg("rank 1: %s, \"%s\": not a mismatch naming ARCOMM_PATHS",
                 comm_status_string(res[1].status), res[1].first_error);
    if (res[0].status == COMM_OK)
        fail_msg("rank 0 joined a communicator whose ranks disagree on ARCOMM_PATHS");
    /* The same text everywhere joins. */
    static const char *const same[] = {"allreduce:0-64K:flag", "allreduce:0-64K:flag"};
    g_each = same;
    res = h_run(&job);
    for (int i = 0; i < 2; i++)
        if (res[i].status != COMM_OK)
            fail_msg("rank %d: %s: %s", i, comm_status_string(res[i].status), res[i].first_error);
}

static void bad_everywhere(void **st)
{
    (void)st;
    static const char *const each[] = {"allreduce:0-:fast", "allreduce:0-:fast"};
    g_each = each;
    struct h_job job = {
        .nranks = 2, .procs = true, .no_init = true, .body = init_body, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    for (int i = 0; i < 2; i++)
        if (res[i].status != COMM_ERR_INVALID ||
            strstr(res[i].first_error, "ARCOMM_PATHS item 1") == NULL)
            fail_msg("rank %d: %s, \"%s\"", i, comm_status_string(res[i].status),
                     res[i].first_error);
}

int main(void)
{
    unsetenv("ARCOMM_PATHS");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(forced_threads),
        cmocka_unit_test(forced_procs),
        cmocka_unit_test(disagree),
        cmocka_unit_test(bad_everywhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
