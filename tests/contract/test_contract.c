/* SPDX-License-Identifier: MIT */
/*
 * The reproducibility contract on the host (docs/api.md, "Reproducible results"): the
 * same seeded inputs through every host path (knobs forcing the flag path, the bulk
 * paths, small staging slots and so many chunks, streaming stores, the single copy
 * (CMA) of process ranks, comm_mem_alloc buffers and so the one-pass path, the bf16
 * wire), on thread ranks and process ranks, for allreduce, allreduce_add, reduce at
 * every root and reduce_scatter, every element compared bit for bit with the rank-order
 * reference of contract_ref.c (itself checked against float64), and every rank's
 * outputs against every other's.
 */
#include "contract_ref.h"
#include "harness.h"
#include "rt_hooks.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

struct ccase {
    comm_dtype_t dtype;
    comm_op_t op;
    bool big; /* also at the largest counts */
};

static const struct ccase cases[] = {
    {COMM_F32, COMM_SUM, true},   {COMM_F32, COMM_AVG, false},  {COMM_F32, COMM_PROD, false},
    {COMM_F32, COMM_MAX, false},  {COMM_F32, COMM_MIN, false},  {COMM_F16, COMM_SUM, false},
    {COMM_F16, COMM_AVG, false},  {COMM_F16, COMM_PROD, false}, {COMM_BF16, COMM_SUM, true},
    {COMM_BF16, COMM_AVG, false}, {COMM_F64, COMM_SUM, false},  {COMM_F64, COMM_PROD, false},
    {COMM_I32, COMM_SUM, false},  {COMM_I32, COMM_PROD, false}, {COMM_I32, COMM_MAX, false},
    {COMM_U8, COMM_SUM, false},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* Counts: around the flag path's sizes, past a staging slot, many slots; the largest
 * only for the cases marked big, and not under ARCOMM_TEST_QUICK. */
static const size_t counts[] = {1, 7, 1000, 4099, 65537, 300007, 2097169};
#define NCOUNTS   (sizeof(counts) / sizeof(counts[0]))
#define BIG_COUNT 2097169

/* A path forced by knobs (and buffers from comm_mem_alloc). */
struct config {
    const char *name;
    const char *knobs[3][2]; /* name, value; NULL ends */
    bool mem;                /* comm_mem_alloc buffers (process ranks: the one-pass path) */
    bool narrow;             /* the bf16 wire: f32 allreduce inputs rounded to bf16 */
    bool big;                /* the largest count too (the paths that cut it in chunks) */
};

static const struct config configs[] = {
    {"default", {{NULL, NULL}}, false, false, true},
    {"no-flag", {{"ARCOMM_FLAG_THRESHOLD", "0"}, {NULL, NULL}}, false, false, false},
    {"all-flag", {{"ARCOMM_FLAG_THRESHOLD", "1M"}, {NULL, NULL}}, false, false, false},
    {"small-slots",
     {{"ARCOMM_FLAG_THRESHOLD", "0"}, {"ARCOMM_SHM_SLOT_BYTES", "4K"}, {NULL, NULL}},
     false,
     false,
     true},
    {"streaming",
     {{"ARCOMM_FLAG_THRESHOLD", "0"}, {"ARCOMM_NT_THRESHOLD", "0"}, {NULL, NULL}},
     false,
     false,
     false},
    {"cma",
     {{"ARCOMM_FLAG_THRESHOLD", "0"}, {"ARCOMM_CMA_THRESHOLD", "0"}, {NULL, NULL}},
     false,
     false,
     true},
    {"no-cma", {{"ARCOMM_CMA_THRESHOLD", "off"}, {NULL, NULL}}, false, false, false},
    {"mem", {{"ARCOMM_FLAG_THRESHOLD", "0"}, {NULL, NULL}}, true, false, true},
    {"bf16", {{"ARCOMM_BF16_THRESHOLD", "0"}, {NULL, NULL}}, false, true, false},
};

/* The references of one run, computed once by the parent (the ranks, threads or forked
 * children, read them): refs[case][count] of counts[count] elements. */
struct run {
    const struct config *cfg;
    int nranks;
    uint64_t seed;
    void *refs[NCASES][NCOUNTS];
    void *narrow_refs[NCASES][NCOUNTS]; /* f32 allreduce with the bf16 wire */
};

static bool count_used(const struct config *cfg, const struct ccase *cs, size_t k)
{
    if (counts[k] == BIG_COUNT)
        return cfg->big && cs->big && !h_quick();
    return true;
}

static uint64_t case_seed(const struct run *run, size_t c, size_t k)
{
    return run->seed + c * 131 + k * 7;
}

static void *alloc(struct h_rank *r, bool mem, size_t bytes)
{
    void *p = NULL;
    if (mem) {
        if (comm_mem_alloc(r->comm, bytes ? bytes : 1, &p) != COMM_OK)
            h_fail(r, "comm_mem_alloc(%zu): %s", bytes, comm_last_error(r->comm));
        return p;
    }
    p = malloc(bytes ? bytes : 1);
    if (p == NULL)
        h_fail(r, "malloc(%zu) failed", bytes);
    return p;
}

static void release(struct h_rank *r, bool mem, void *p)
{
    if (p == NULL)
        return;
    if (mem)
        comm_mem_free(r->comm, p);
    else
        free(p);
}

/* got against want, bit for bit; a failure names the call. */
static void compare(struct h_rank *r, const char *what, const struct ccase *cs, size_t count,
                    const void *got, const void *want, size_t n)
{
    char why[160];
    size_t j = cref_first_diff(got, want, n, cs->dtype, why, sizeof(why));
    if (j < n)
        h_fail(r, "rank %d of %d: %s %s %s count %zu: %s", r->rank, r->nranks, what,
               cref_dtype_name(cs->dtype), cref_op_name(cs->op), count, why);
}

static bool ok(struct h_rank *r, comm_status_t st, const char *what, const struct ccase *cs,
               size_t count)
{
    if (st != COMM_OK)
        h_fail(r, "rank %d: %s %s %s count %zu: %s: %s", r->rank, what, cref_dtype_name(cs->dtype),
               cref_op_name(cs->op), count, comm_status_string(st), comm_last_error(r->comm));
    return st == COMM_OK;
}

static void body(struct h_rank *r)
{
    const struct run *run = r->arg;
    const struct config *cfg = run->cfg;
    int n = r->nranks;
    uint64_t *hashes = (uint64_t *)r->out;
    size_t nh = 0;
    struct cref_layout lay = {.nranks = n, .per_host = 0};
    for (size_t c = 0; c < NCASES; c++) {
        const struct ccase *cs = &cases[c];
        size_t es = comm_dtype_size(cs->dtype);
        for (size_t k = 0; k < NCOUNTS; k++) {
            if (!count_used(cfg, cs, k))
                continue;
            size_t count = counts[k];
            uint64_t seed = case_seed(run, c, k);
            bool narrow = cfg->narrow && cs->dtype == COMM_F32;
            const void *ref = run->refs[c][k];
            void *send = alloc(r, cfg->mem, count * es), *recv = alloc(r, cfg->mem, count * es);
            if (send == NULL || recv == NULL)
                return;
            cref_fill(send, count, cs->dtype, cs->op, seed, r->rank);

            /* allreduce (with the bf16 wire: the reference of the narrowed inputs) */
            memset(recv, 0xff, count * es);
            if (ok(r, comm_allreduce(r->comm, send, recv, count, cs->dtype, cs->op, NULL),
                   "allreduce", cs, count))
                compare(r, "allreduce", cs, count, recv, narrow ? run->narrow_refs[c][k] : ref,
                        count);
            hashes[nh++] = h_hash(recv, count * es);

            /* reduce: every root at the small counts, one (moving with the case) else */
            for (int root = 0; root < n; root++) {
                if (count > 4099 && root != (int)((c + k) % (size_t)n))
                    continue;
                memset(recv, 0xff, count * es);
                if (ok(r,
                       comm_reduce(r->comm, send, r->rank == root ? recv : NULL, count, cs->dtype,
                                   cs->op, root, NULL),
                       "reduce", cs, count) &&
                    r->rank == root)
                    compare(r, "reduce", cs, count, recv, ref, count);
            }

            /* reduce_scatter: block r of the first n * (count / n) elements */
            size_t rc = count / (size_t)n;
            if (rc > 0) {
                memset(recv, 0xff, rc * es);
                if (ok(r, comm_reduce_scatter(r->comm, send, recv, rc, cs->dtype, cs->op, NULL),
                       "reduce_scatter", cs, count))
                    compare(r, "reduce_scatter", cs, count, recv,
                            (const char *)ref + (size_t)r->rank * rc * es, rc);
            }

            /* allreduce_add of a residual (this rank's own) to the sum, up to 65537 */
            if (cs->op == COMM_SUM && count <= 65537 && cs->dtype != COMM_U8) {
                void *add = malloc(count * es), *want = malloc(count * es);
                if (add == NULL || want == NULL) {
                    h_fail(r, "out of memory");
                    return;
                }
                cref_fill(add, count, cs->dtype, COMM_SUM, seed + 99, 100 + r->rank);
                cref_reduce(&lay, cs->dtype, cs->op, seed, count, 0, count,
                            cfg->narrow && cs->dtype == COMM_F32, add, count, want);
                memset(recv, 0xff, count * es);
                if (ok(r,
                       comm_allreduce_add(r->comm, send, recv, add, count, count, cs->dtype, NULL),
                       "allreduce_add", cs, count))
                    compare(r, "allreduce_add", cs, count, recv, want, count);
                free(add);
                free(want);
            }
            release(r, cfg->mem, send);
            release(r, cfg->mem, recv);
        }
    }
    r->out_len = nh * sizeof(uint64_t);
    /* The bulk calls took the paths the knobs force (rt_hook_bulk_calls: one-pass,
     * staged, CMA). */
    uint64_t calls[3];
    if (rt_hook_bulk_calls(r->comm, calls) != COMM_OK) {
        h_fail(r, "rt_hook_bulk_calls failed");
        return;
    }
    const char *name = cfg->name;
    bool bulk_only = strcmp(name, "no-flag") == 0 || strcmp(name, "small-slots") == 0 ||
                     strcmp(name, "streaming") == 0;
    bool want = !r->procs                     ? calls[0] > 0 && calls[1] == 0 && calls[2] == 0
                : cfg->mem                    ? calls[0] > 0
                : strcmp(name, "cma") == 0    ? calls[2] > 0
                : strcmp(name, "no-cma") == 0 ? calls[1] > 0 && calls[2] == 0
                : bulk_only                   ? calls[1] + calls[2] > 0
                                              : true;
    if (!want)
        h_fail(r,
               "%s, %s ranks: bulk calls %llu one-pass, %llu staged, %llu CMA: not the paths "
               "the knobs force",
               name, r->procs ? "process" : "thread", (unsigned long long)calls[0],
               (unsigned long long)calls[1], (unsigned long long)calls[2]);
}

static void run_config(const struct config *cfg, int nranks, bool procs)
{
    struct run *run = calloc(1, sizeof(*run));
    assert_non_null(run);
    run->cfg = cfg;
    run->nranks = nranks;
    run->seed = 0xc0de + (uint64_t)nranks * 1000 + (uint64_t)(cfg - configs) * 100000;
    struct cref_layout lay = {.nranks = nranks, .per_host = 0};
    for (size_t c = 0; c < NCASES; c++) {
        for (size_t k = 0; k < NCOUNTS; k++) {
            if (!count_used(cfg, &cases[c], k))
                continue;
            size_t count = counts[k], es = comm_dtype_size(cases[c].dtype);
            uint64_t seed = case_seed(run, c, k);
            run->refs[c][k] = malloc(count * es);
            assert_non_null(run->refs[c][k]);
            cref_reduce(&lay, cases[c].dtype, cases[c].op, seed, count, 0, count, false, NULL, 0,
                        run->refs[c][k]);
            char why[200];
            /* The reference itself against float64, at the counts that are cheap to check. */
            if (count <= 65537 &&
                cref_check_f64(&lay, cases[c].dtype, cases[c].op, seed, count, 0, count, false,
                               run->refs[c][k], why, sizeof(why)) != 0)
                fail_msg("the reference of %s %s is off float64: %s",
                         cref_dtype_name(cases[c].dtype), cref_op_name(cases[c].op), why);
            if (cfg->narrow && cases[c].dtype == COMM_F32) {
                void **nr = &run->narrow_refs[c][k];
                *nr = malloc(count * 4);
                assert_non_null(*nr);
                cref_reduce(&lay, COMM_F32, cases[c].op, seed, count, 0, count, true, NULL, 0, *nr);
                if (count <= 65537 && cref_check_f64(&lay, COMM_F32, cases[c].op, seed, count, 0,
                                                     count, true, *nr, why, sizeof(why)) != 0)
                    fail_msg("the bf16-wire reference is off float64: %s", why);
            }
        }
    }
    for (size_t i = 0; i < 3 && cfg->knobs[i][0] != NULL; i++)
        h_env_push(cfg->knobs[i][0], cfg->knobs[i][1]);
    struct h_job job = {
        .nranks = nranks, .procs = procs, .body = body, .arg = run, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    h_env_pop();
    for (int r = 0; r < nranks; r++) {
        if (res[r].errors)
            fail_msg("%s, %d %s ranks: %ld errors; first: %s", cfg->name, nranks,
                     procs ? "process" : "thread", res[r].errors, res[r].first_error);
    }
    /* Every rank's allreduce outputs the same bits (reduce_scatter's blocks are checked
     * against the reference above; their hashes differ by rank). */
    assert_true(res[0].out_len > 0);
    for (int r = 1; r < nranks; r++) {
        assert_int_equal(res[r].out_len, res[0].out_len);
        if (memcmp(res[r].out, res[0].out, res[0].out_len) != 0)
            fail_msg("%s: rank %d's allreduce results differ from rank 0's", cfg->name, r);
    }
    for (size_t c = 0; c < NCASES; c++) {
        for (size_t k = 0; k < NCOUNTS; k++) {
            free(run->refs[c][k]);
            free(run->narrow_refs[c][k]);
        }
    }
    free(run);
    assert_int_equal(h_shm_leftovers(), 0);
}

static const struct config *g_cfg;

#define RANKS_TEST(name, n, procs)                                                                 \
    static void name(void **state)                                                                 \
    {                                                                                              \
        (void)state;                                                                               \
        run_config(g_cfg, n, procs);                                                               \
    }
RANKS_TEST(threads_2, 2, false)
RANKS_TEST(threads_3, 3, false)
RANKS_TEST(threads_5, 5, false)
RANKS_TEST(threads_8, 8, false)
RANKS_TEST(procs_2, 2, true)
RANKS_TEST(procs_3, 3, true)
RANKS_TEST(procs_4, 4, true)

/* test_contract CONFIG: one of configs[] by name (a meson test each). */
int main(int argc, char **argv)
{
    for (size_t i = 0; argc > 1 && i < sizeof(configs) / sizeof(configs[0]); i++) {
        if (strcmp(argv[1], configs[i].name) == 0)
            g_cfg = &configs[i];
    }
    if (g_cfg == NULL) {
        fprintf(stderr,
                "usage: %s CONFIG (default, no-flag, all-flag, small-slots, streaming, "
                "cma, no-cma, mem, bf16)\n",
                argv[0]);
        return 2;
    }
    /* The process-only paths (CMA, the one-pass path of comm_mem_alloc buffers) on process
     * ranks only; thread ranks take the one-pass path with any buffer. */
    bool procs_only =
        strcmp(g_cfg->name, "cma") == 0 || strcmp(g_cfg->name, "no-cma") == 0 || g_cfg->mem;
    const struct CMUnitTest all[] = {
        cmocka_unit_test(threads_2), cmocka_unit_test(threads_3), cmocka_unit_test(threads_5),
        cmocka_unit_test(threads_8), cmocka_unit_test(procs_2),   cmocka_unit_test(procs_3),
        cmocka_unit_test(procs_4),
    };
    size_t first = procs_only ? 4 : 0, n = sizeof(all) / sizeof(all[0]) - first;
    return _cmocka_run_group_tests(g_cfg->name, all + first, n, NULL, NULL);
}
