/* SPDX-License-Identifier: MIT */
/*
 * The collectives at many ranks: 3, 4, 5, 8 and 16 ranks, thread ranks or process ranks
 * (the argument), oversubscribed on a small host, so every wait must yield.  For each
 * rank count, once with the small allreduce's gather path forced
 * (ARCOMM_SMALL_ALGO=gather) and once with the flat flag path:
 *
 *   allreduce, reduce, reduce_scatter: every element bit for bit against the rank-order
 *   reference (tests/contract/contract_ref.c, itself checked against float64 here);
 *   allgather, broadcast, alltoall: every element against the senders' data;
 *   every output poisoned first; every rank's allreduce outputs hashed and compared bit
 *   for bit, and the gather run's hashes equal to the flat run's.
 *
 * Counts: the gather path's (up to ARCOMM_SMALL_GATHER_MAX=1K), past it on the flag
 * path, and bulk counts over several staged rounds (small slots).  A call whose ranks
 * disagree fails with COMM_ERR_MISMATCH on every rank on the gather path too, and a
 * rank whose ARCOMM_SMALL_ALGO differs is found, not read wrong.
 */
#include "contract_ref.h"
#include "harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

struct scase {
    comm_dtype_t dtype;
    comm_op_t op;
};

static const struct scase cases[] = {
    {COMM_F32, COMM_SUM},  {COMM_F32, COMM_AVG}, {COMM_F16, COMM_SUM}, {COMM_BF16, COMM_SUM},
    {COMM_F64, COMM_PROD}, {COMM_I32, COMM_SUM}, {COMM_U8, COMM_MAX},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* 1-64: the gather path (bytes <= 1K for every dtype); 300: past it for 4-8 byte types,
 * on the flag path; 4099 and 40009: the bulk paths, several rounds of 16K slots. */
static const size_t counts[] = {1, 3, 8, 64, 300, 4099, 40009};
#define NCOUNTS   (sizeof(counts) / sizeof(counts[0]))
#define MAX_RANKS 16

struct run {
    int nranks;
    void *refs[NCASES][NCOUNTS]; /* the rank-order reference of each case and count */
};

static uint64_t seed_of(size_t c, size_t k, int n)
{
    return 0x5ca1e + (uint64_t)n * 7919 + c * 131 + k * 17;
}

/* Bulk counts for the first case only, and not for every collective: they are the
 * slow ones on 2 cores. */
static bool count_used(size_t c, size_t k)
{
    return counts[k] < 4000 || c == 0;
}

static void compare(struct h_rank *r, const char *what, const struct scase *cs, size_t count,
                    const void *got, const void *want, size_t n)
{
    char why[160];
    size_t i = cref_first_diff(got, want, n, cs->dtype, why, sizeof(why));
    if (i < n)
        h_fail(r,
               "rank %d of %d: %s %s %s count %zu: element %zu differs from the rank-order "
               "reference: %s",
               r->rank, r->nranks, what, cref_dtype_name(cs->dtype), cref_op_name(cs->op), count, i,
               why);
}

static bool ok(struct h_rank *r, comm_status_t st, const char *what, size_t count)
{
    if (st != COMM_OK)
        h_fail(r, "rank %d of %d: %s count %zu: %s: %s", r->rank, r->nranks, what, count,
               comm_status_string(st), comm_last_error(r->comm));
    return st == COMM_OK;
}

/* Does buf hold elements [first, first + n) of cref_fill(total, ..., rank)? */
static bool holds(const void *buf, size_t first, size_t n, size_t total, const struct scase *cs,
                  uint64_t seed, int rank)
{
    size_t es = comm_dtype_size(cs->dtype);
    void *want = malloc(total * es);
    cref_fill(want, total, cs->dtype, cs->op, seed, rank);
    bool same = memcmp(buf, (char *)want + first * es, n * es) == 0;
    free(want);
    return same;
}

static void body(struct h_rank *r)
{
    const struct run *run = r->arg;
    int n = r->nranks, me = r->rank;
    uint64_t *hashes = (uint64_t *)r->out;
    size_t nh = 0;
    for (size_t c = 0; c < NCASES; c++) {
        const struct scase *cs = &cases[c];
        size_t es = comm_dtype_size(cs->dtype);
        for (size_t k = 0; k < NCOUNTS; k++) {
            if (!count_used(c, k))
                continue;
            size_t count = counts[k];
            uint64_t seed = seed_of(c, k, n);
            const void *ref = run->refs[c][k];
            size_t all = (size_t)n * count;
            uint8_t *send = malloc(all * es), *recv = malloc(all * es);
            cref_fill(send, count, cs->dtype, cs->op, seed, me);

            memset(recv, 0xff, count * es);
            if (ok(r, comm_allreduce(r->comm, send, recv, count, cs->dtype, cs->op, NULL),
                   "allreduce", count))
                compare(r, "allreduce", cs, count, recv, ref, count);
            hashes[nh++] = h_hash(recv, count * es);

            int root = (int)((c + k) % (size_t)n);
            memset(recv, 0xff, count * es);
            if (ok(r,
                   comm_reduce(r->comm, send, me == root ? recv : NULL, count, cs->dtype, cs->op,
                               root, NULL),
                   "reduce", count) &&
                me == root)
                compare(r, "reduce", cs, count, recv, ref, count);

            size_t rc = count / (size_t)n;
            if (rc > 0) {
                memset(recv, 0xff, rc * es);
                if (ok(r, comm_reduce_scatter(r->comm, send, recv, rc, cs->dtype, cs->op, NULL),
                       "reduce_scatter", count))
                    compare(r, "reduce_scatter", cs, count, recv,
                            (const char *)ref + (size_t)me * rc * es, rc);
            }

            if (cs->op == COMM_SUM && count < 4000) {
                memset(recv, 0xff, all * es);
                if (ok(r, comm_allgather(r->comm, send, recv, count, cs->dtype, NULL), "allgather",
                       count))
                    for (int p = 0; p < n; p++)
                        if (!holds(recv + (size_t)p * count * es, 0, count, count, cs, seed, p))
                            h_fail(r, "rank %d of %d: allgather count %zu: block %d is wrong", me,
                                   n, count, p);
                memset(recv, 0xff, count * es);
                if (ok(r,
                       comm_broadcast(r->comm, me == root ? send : NULL, recv, count, cs->dtype,
                                      root, NULL),
                       "broadcast", count) &&
                    !holds(recv, 0, count, count, cs, seed, root))
                    h_fail(r, "rank %d of %d: broadcast count %zu from %d is wrong", me, n, count,
                           root);
                cref_fill(send, all, cs->dtype, cs->op, seed, me);
                memset(recv, 0xff, all * es);
                if (ok(r, comm_alltoall(r->comm, send, recv, count, cs->dtype, NULL), "alltoall",
                       count))
                    for (int p = 0; p < n; p++)
                        if (!holds(recv + (size_t)p * count * es, (size_t)me * count, count, all,
                                   cs, seed, p))
                            h_fail(r, "rank %d of %d: alltoall count %zu: block %d is wrong", me, n,
                                   count, p);
            }
            free(send);
            free(recv);
        }
    }
    r->out_len = nh * sizeof(uint64_t);
}

/* The references, computed once by the parent (the ranks inherit them), and each
 * checked against float64. */
static void make_refs(struct run *run)
{
    struct cref_layout lay = {.nranks = run->nranks, .per_host = 0};
    for (size_t c = 0; c < NCASES; c++) {
        for (size_t k = 0; k < NCOUNTS; k++) {
            run->refs[c][k] = NULL;
            if (!count_used(c, k))
                continue;
            const struct scase *cs = &cases[c];
            size_t count = counts[k];
            uint64_t seed = seed_of(c, k, run->nranks);
            void *ref = malloc(count * comm_dtype_size(cs->dtype));
            cref_reduce(&lay, cs->dtype, cs->op, seed, count, 0, count, false, NULL, 0, ref);
            char why[256];
            long bad = cref_check_f64(&lay, cs->dtype, cs->op, seed, count, 0, count, false, ref,
                                      why, sizeof(why));
            if (bad != 0)
                fail_msg("the reference of %s %s count %zu: %ld elements off float64: %s",
                         cref_dtype_name(cs->dtype), cref_op_name(cs->op), count, bad, why);
            run->refs[c][k] = ref;
        }
    }
}

static void free_refs(struct run *run)
{
    for (size_t c = 0; c < NCASES; c++)
        for (size_t k = 0; k < NCOUNTS; k++)
            free(run->refs[c][k]);
}

static bool procs_mode;

/* One job at nranks with ARCOMM_SMALL_ALGO=algo; returns rank 0's hashes (malloc'd). */
static uint64_t *run_one(struct run *run, const char *algo, size_t *len)
{
    h_env_push("ARCOMM_SMALL_ALGO", algo);
    h_env_push("ARCOMM_SMALL_GATHER_MAX", "1K");
    h_env_push("ARCOMM_FLAG_THRESHOLD", "4K");
    h_env_push("ARCOMM_SHM_SLOT_BYTES", "16K");
    struct h_job job = {
        .nranks = run->nranks, .procs = procs_mode, .body = body, .arg = run, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    h_env_pop();
    h_env_pop();
    h_env_pop();
    h_env_pop();
    for (int r = 0; r < run->nranks; r++)
        if (res[r].errors)
            fail_msg("%s, %d %s ranks: %ld errors; first: %s", algo, run->nranks,
                     procs_mode ? "process" : "thread", res[r].errors, res[r].first_error);
    for (int r = 1; r < run->nranks; r++) {
        assert_int_equal(res[r].out_len, res[0].out_len);
        if (memcmp(res[r].out, res[0].out, res[0].out_len) != 0)
            fail_msg("%s, %d ranks: rank %d's outputs differ from rank 0's", algo, run->nranks, r);
    }
    assert_true(res[0].out_len > 0);
    uint64_t *h = malloc(res[0].out_len);
    memcpy(h, res[0].out, res[0].out_len);
    *len = res[0].out_len;
    return h;
}

static void at_ranks(int nranks)
{
    struct run run = {.nranks = nranks};
    make_refs(&run);
    size_t lg, lf;
    uint64_t *g = run_one(&run, "gather", &lg);
    uint64_t *f = run_one(&run, "flat", &lf);
    assert_int_equal(lg, lf);
    if (memcmp(g, f, lg) != 0)
        fail_msg("%d ranks: the gather path's outputs differ from the flat path's", nranks);
    free(g);
    free(f);
    free_refs(&run);
    assert_int_equal(h_shm_leftovers(), 0);
}

static void ranks_3(void **s)
{
    (void)s;
    at_ranks(3);
}
static void ranks_4(void **s)
{
    (void)s;
    at_ranks(4);
}
static void ranks_5(void **s)
{
    (void)s;
    at_ranks(5);
}
static void ranks_8(void **s)
{
    (void)s;
    at_ranks(8);
}
static void ranks_16(void **s)
{
    (void)s;
    at_ranks(16);
}

/* Rank 3 calls a count the others do not: every rank fails with COMM_ERR_MISMATCH, and
 * the next call (the same everywhere) is not reached broken by a hang. */
static void mismatch_body(struct h_rank *r)
{
    float in[4] = {1, 2, 3, 4}, out[4];
    size_t count = r->rank == 3 ? 2 : 1;
    comm_status_t st = comm_allreduce(r->comm, in, out, count, COMM_F32, COMM_SUM, NULL);
    if (st != COMM_ERR_MISMATCH)
        h_fail(r,
               "rank %d: a count mismatch on the gather path returned %s, not "
               "COMM_ERR_MISMATCH: %s",
               r->rank, comm_status_string(st), comm_last_error(r->comm));
}

/* Rank 2 takes the flat path, the others the gather path: the gather ranks find it
 * (COMM_ERR_MISMATCH naming the knob, or the peer failure it caused), none returns a
 * wrong sum. */
static void disagree_body(struct h_rank *r)
{
    if (r->rank == 2)
        setenv("ARCOMM_SMALL_ALGO", "flat", 1);
    if (!h_comm_init(r, 10000))
        return;
    float in[3] = {1.0f + (float)r->rank, 2, 3}, out[3] = {0, 0, 0};
    comm_status_t st = comm_allreduce(r->comm, in, out, 3, COMM_F32, COMM_SUM, NULL);
    float want = 0;
    for (int p = 0; p < r->nranks; p++)
        want += 1.0f + (float)p;
    if (st == COMM_OK && out[0] != want)
        h_fail(r, "rank %d: %g, not %g, with ARCOMM_SMALL_ALGO differing", r->rank, out[0], want);
    if (r->rank == 3 &&
        (st != COMM_ERR_MISMATCH || strstr(comm_last_error(r->comm), "ARCOMM_SMALL_ALGO") == NULL))
        h_fail(r, "rank 3 (after the flat rank 2): %s: %s", comm_status_string(st),
               comm_last_error(r->comm));
    if (r->rank != 2 && st == COMM_OK)
        h_fail(r, "rank %d on the gather path completed with a flat peer", r->rank);
    comm_destroy(r->comm);
    r->comm = NULL;
}

static void run_errors(h_body_fn fn, bool no_init)
{
    h_env_push("ARCOMM_SMALL_ALGO", "gather");
    h_env_push("ARCOMM_LOG_LEVEL", "none");
    struct h_job job = {.nranks = 5,
                        .procs = no_init || procs_mode,
                        .no_init = no_init,
                        .timeout_ms = 10000,
                        .body = fn,
                        .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    h_env_pop();
    h_env_pop();
    for (int r = 0; r < 5; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    assert_int_equal(h_shm_leftovers(), 0);
}

static void mismatch_5(void **s)
{
    (void)s;
    run_errors(mismatch_body, false);
}

static void disagree_5(void **s)
{
    (void)s;
    run_errors(disagree_body, true);
}

int main(int argc, char **argv)
{
    procs_mode = argc > 1 && strcmp(argv[1], "procs") == 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ranks_3),    cmocka_unit_test(ranks_4),  cmocka_unit_test(ranks_5),
        cmocka_unit_test(ranks_8),    cmocka_unit_test(ranks_16), cmocka_unit_test(mismatch_5),
        cmocka_unit_test(disagree_5),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
