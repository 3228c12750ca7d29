/* SPDX-License-Identifier: MIT */
/*
 * Allreduce conformance on the host: every dtype and op, counts from 0 to past 1 MiB,
 * in place and out of place, buffers offset by one element, outputs poisoned first,
 * float64 references, every rank bit-identical — over 1..8 thread ranks and 2..4
 * process ranks, with malloc'd and comm_mem_alloc buffers, through every path.  AVG
 * of an integer dtype is COMM_ERR_UNSUPPORTED on every rank, touches no buffer, and
 * the calls after it work.
 */
#include "harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

struct sweep {
    bool mem;          /* buffers from comm_mem_alloc */
    bool large_only;   /* only the bulk-path counts */
    bool add;          /* comm_allreduce_add: residual and bias rows */
    bool narrow;       /* f32 travels as bf16 (ARCOMM_BF16_THRESHOLD=0) */
    bool default_flag; /* keep the default flag threshold (else 16K: the large counts
                        * take the bulk path whatever the default is) */
};

static const comm_dtype_t dtypes[] = {COMM_F32, COMM_F16, COMM_BF16, COMM_F64, COMM_I32,
                                      COMM_I64, COMM_I8,  COMM_U8,   COMM_U32, COMM_U64};
#define NDTYPES (sizeof(dtypes) / sizeof(dtypes[0]))
#define NOPS    5 /* SUM, MAX, MIN, PROD, AVG */
static const size_t small_counts[] = {0, 1, 2, 7, 13, 64, 1000, 4099};
static const size_t large_counts[] = {16411, 300007};

static void *buf_alloc(struct h_rank *r, const struct sweep *sw, size_t bytes)
{
    void *p = NULL;
    if (sw->mem) {
        comm_status_t st = comm_mem_alloc(r->comm, bytes, &p);
        if (st != COMM_OK)
            h_fail(r, "comm_mem_alloc(%zu): %s", bytes, comm_last_error(r->comm));
    } else {
        p = malloc(bytes);
    }
    return p;
}

static void buf_free(struct h_rank *r, const struct sweep *sw, void *p)
{
    if (sw->mem)
        comm_mem_free(r->comm, p);
    else
        free(p);
}

/*
 * AVG of an integer dtype: refused with COMM_ERR_UNSUPPORTED and a message that names
 * the rank and the fix, before any byte is written.
 */
static void expect_unsupported(struct h_rank *r, comm_status_t st, const uint8_t *recv,
                               const uint8_t *before, size_t bytes, const char *what)
{
    char rank[32];
    snprintf(rank, sizeof(rank), "rank %d", r->rank);
    const char *msg = comm_last_error(r->comm);
    if (st != COMM_ERR_UNSUPPORTED)
        h_fail(r, "%s returned %s, want COMM_ERR_UNSUPPORTED", what, comm_status_string(st));
    else if (strstr(msg, rank) == NULL || strstr(msg, "COMM_AVG") == NULL ||
             strstr(msg, "COMM_SUM") == NULL)
        h_fail(r, "%s: the message does not name the rank, the op and the fix: %s", what, msg);
    if (bytes && memcmp(recv, before, bytes) != 0)
        h_fail(r, "%s wrote recvbuf though it was refused", what);
}

/* One call: fill, poison, reduce, check, hash. */
static void one(struct h_rank *r, const struct sweep *sw, uint64_t *hashes, size_t *nh,
                comm_dtype_t dt, comm_op_t op, size_t count, bool inplace, size_t off,
                size_t addend_count)
{
    size_t es = comm_dtype_size(dt);
    size_t bytes = (count + off + 1) * es;
    uint8_t *sbuf = buf_alloc(r, sw, bytes), *rbuf = buf_alloc(r, sw, bytes);
    uint8_t *abuf = addend_count ? malloc(addend_count * es) : NULL;
    if (sbuf == NULL || rbuf == NULL)
        return;
    uint64_t seed = 1 + *nh * 31 + count;
    void *send = sbuf + off * es;
    void *recv = inplace ? send : rbuf + off * es;
    h_fill_op(send, count, dt, op, seed, r->rank);
    if (!inplace)
        h_poison(recv, count, dt);
    if (abuf)
        h_fill(abuf, addend_count, dt, seed + 7777, 100 + r->rank);
    uint8_t *before = op == COMM_AVG && h_dtype_is_int(dt) ? malloc(count * es + 1) : NULL;
    if (before)
        memcpy(before, recv, count * es);
    comm_status_t st =
        abuf ? comm_allreduce_add(r->comm, send, recv, abuf, addend_count, count, dt, NULL)
             : comm_allreduce(r->comm, send, recv, count, dt, op, NULL);
    if (before) {
        expect_unsupported(r, st, recv, before, count * es, "allreduce AVG of an integer dtype");
        hashes[(*nh)++] = 0x5eed; /* the same on every rank */
        free(before);
    } else if (st != COMM_OK) {
        h_fail(r, "allreduce(count %zu dtype %d op %d inplace %d off %zu) = %s: %s", count, (int)dt,
               (int)op, inplace, off, comm_status_string(st), comm_last_error(r->comm));
    } else {
        h_check(r, recv, count, dt, op, seed, r->nranks, abuf, addend_count,
                sw->narrow && dt == COMM_F32);
        /* The addend differs per rank: only plain results must agree across ranks. */
        hashes[(*nh)++] = abuf ? 0 : h_hash(recv, count * es);
    }
    free(abuf);
    buf_free(r, sw, sbuf);
    buf_free(r, sw, rbuf);
}

static void sweep_body(struct h_rank *r)
{
    const struct sweep *sw = r->arg;
    uint64_t *hashes = (uint64_t *)r->out;
    size_t nh = 0;
    for (size_t d = 0; d < NDTYPES; d++) {
        comm_dtype_t dt = dtypes[d];
        if (sw->add && h_dtype_is_int(dt) && h_quick())
            continue;
        if (sw->narrow && dt != COMM_F32)
            continue;
        for (int op = 0; op < NOPS; op++) {
            if (sw->add && op != COMM_SUM)
                continue;
            if (!sw->large_only) {
                for (size_t k = 0; k < sizeof(small_counts) / sizeof(small_counts[0]); k++) {
                    for (int v = 0; v < 4; v++) {
                        size_t count = small_counts[k];
                        size_t addend = 0;
                        if (sw->add && count)
                            addend = v & 1 ? count : (count % 2 ? 1 : 2); /* residual / bias */
                        one(r, sw, hashes, &nh, dt, (comm_op_t)op, count, v & 1, (size_t)(v >> 1),
                            addend);
                    }
                }
            }
            for (size_t k = 0; k < sizeof(large_counts) / sizeof(large_counts[0]); k++) {
                /* Fused add: counts with divisors, so bias rows straddle the ranks' slices. */
                size_t count = sw->add ? (k == 0 ? 16400 : 300000) : large_counts[k];
                /* The largest count: every op for f32, and PROD and AVG for bf16 (the
                 * staged path's accumulators over several rounds); else sum.  The
                 * first bulk count: every dtype and op (sanitizer builds: the ops
                 * other than sum for f32, f16 and u8 only). */
                bool big_op =
                    dt == COMM_F32 || (dt == COMM_BF16 && (op == COMM_PROD || op == COMM_AVG));
                if (k == 1 && ((op != COMM_SUM && !big_op) || (dt != COMM_F32 && h_quick())))
                    continue;
                if (k == 0 && op != COMM_SUM && h_quick() && dt != COMM_F32 && dt != COMM_F16 &&
                    dt != COMM_U8)
                    continue;
                bool inplace = (k + (size_t)op) % 2;
                size_t addend = sw->add ? (inplace ? count : (k == 0 ? 1025 : 1000)) : 0;
                one(r, sw, hashes, &nh, dt, (comm_op_t)op, count, inplace, k, addend);
            }
        }
    }
    r->out_len = nh * sizeof(uint64_t);
}

static void run_sweep(int nranks, bool procs, struct sweep sw)
{
    if (sw.narrow)
        h_env_push("ARCOMM_BF16_THRESHOLD", "0");
    if (!sw.default_flag)
        h_env_push("ARCOMM_FLAG_THRESHOLD", "16K");
    struct h_job job = {
        .nranks = nranks, .procs = procs, .body = sweep_body, .arg = &sw, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    h_env_pop();
    for (int r = 0; r < nranks; r++) {
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    }
    for (int r = 1; r < nranks; r++) {
        assert_int_equal(res[r].out_len, res[0].out_len);
        if (memcmp(res[r].out, res[0].out, res[0].out_len) != 0)
            fail_msg("rank %d's results differ from rank 0's (not bit-identical)", r);
    }
    assert_true(res[0].out_len > 0);
    assert_int_equal(h_shm_leftovers(), 0);
}

static void threads_1(void **s)
{
    (void)s;
    run_sweep(1, false, (struct sweep){0});
}
static void threads_2(void **s)
{
    (void)s;
    run_sweep(2, false, (struct sweep){0});
}
static void threads_3(void **s)
{
    (void)s;
    run_sweep(3, false, (struct sweep){0});
}
static void threads_4(void **s)
{
    (void)s;
    run_sweep(4, false, (struct sweep){0});
}
static void threads_8(void **s)
{
    (void)s;
    run_sweep(8, false, (struct sweep){0});
}
static void procs_2(void **s)
{
    (void)s;
    run_sweep(2, true, (struct sweep){0});
}
static void procs_default_2(void **s)
{
    (void)s;
    run_sweep(2, true, (struct sweep){.default_flag = true});
}
static void threads_default_3(void **s)
{
    (void)s;
    run_sweep(3, false, (struct sweep){.default_flag = true});
}
static void procs_3(void **s)
{
    (void)s;
    run_sweep(3, true, (struct sweep){0});
}
static void procs_4(void **s)
{
    (void)s;
    run_sweep(4, true, (struct sweep){.large_only = h_quick()});
}
static void procs_mem_2(void **s)
{
    (void)s;
    run_sweep(2, true, (struct sweep){.mem = true});
}
static void procs_mem_3(void **s)
{
    (void)s;
    run_sweep(3, true, (struct sweep){.mem = true, .large_only = true});
}
static void threads_mem_2(void **s)
{
    (void)s;
    run_sweep(2, false, (struct sweep){.mem = true, .large_only = true});
}
static void threads_add_3(void **s)
{
    (void)s;
    run_sweep(3, false, (struct sweep){.add = true});
}
static void procs_add_2(void **s)
{
    (void)s;
    run_sweep(2, true, (struct sweep){.add = true});
}
static void procs_mem_add_2(void **s)
{
    (void)s;
    run_sweep(2, true, (struct sweep){.add = true, .mem = true, .large_only = true});
}
static void threads_narrow_2(void **s)
{
    (void)s;
    run_sweep(2, false, (struct sweep){.narrow = true});
}
static void procs_narrow_3(void **s)
{
    (void)s;
    run_sweep(3, true, (struct sweep){.narrow = true});
}

/* Small staging slots: the staged path runs many rounds, the flag path stays small. */
static void procs_small_slots_3(void **s)
{
    (void)s;
    h_env_push("ARCOMM_SHM_SLOT_BYTES", "8K");
    h_env_push("ARCOMM_FLAG_THRESHOLD", "1K");
    struct sweep sw = {.large_only = false};
    struct h_job job = {
        .nranks = 3, .procs = true, .body = sweep_body, .arg = &sw, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    h_env_pop();
    for (int r = 0; r < 3; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    for (int r = 1; r < 3; r++)
        assert_memory_equal(res[r].out, res[0].out, res[0].out_len);
    assert_int_equal(h_shm_leftovers(), 0);
}

/*
 * AVG of every integer dtype, NULL buffers with count 0 and real ones, in place too:
 * COMM_ERR_UNSUPPORTED on every rank, then float AVG and integer SUM calls on the same
 * communicator give checked results (the refused calls did not count).
 */
static void avg_int_body(struct h_rank *r)
{
    static const comm_dtype_t ints[] = {COMM_I8, COMM_U8, COMM_I32, COMM_U32, COMM_I64, COMM_U64};
    enum { N = 3000 };
    uint8_t *buf = malloc(N * 8), *out = malloc(N * 8), *before = malloc(N * 8);
    for (size_t d = 0; d < sizeof(ints) / sizeof(ints[0]); d++) {
        comm_dtype_t dt = ints[d];
        size_t bytes = N * comm_dtype_size(dt);
        comm_status_t st = comm_allreduce(r->comm, NULL, NULL, 0, dt, COMM_AVG, NULL);
        expect_unsupported(r, st, NULL, NULL, 0, "AVG with count 0");
        h_fill(buf, N, dt, 5 + d, r->rank);
        h_poison(out, N, dt);
        memcpy(before, out, bytes);
        st = comm_allreduce(r->comm, buf, out, N, dt, COMM_AVG, NULL);
        expect_unsupported(r, st, out, before, bytes, "AVG out of place");
        memcpy(before, buf, bytes);
        st = comm_allreduce(r->comm, buf, buf, N, dt, COMM_AVG, NULL);
        expect_unsupported(r, st, buf, before, bytes, "AVG in place");
        st = comm_allreduce(r->comm, buf, out, N, dt, COMM_SUM, NULL);
        if (st != COMM_OK)
            h_fail(r, "SUM after the refused AVG: %s: %s", comm_status_string(st),
                   comm_last_error(r->comm));
        else
            h_check(r, out, N, dt, COMM_SUM, 5 + d, r->nranks, NULL, 0, false);
    }
    h_fill(buf, N, COMM_F32, 99, r->rank);
    comm_status_t st = comm_allreduce(r->comm, buf, out, N, COMM_F32, COMM_AVG, NULL);
    if (st != COMM_OK)
        h_fail(r, "f32 AVG after the refused ones: %s", comm_status_string(st));
    else
        h_check(r, out, N, COMM_F32, COMM_AVG, 99, r->nranks, NULL, 0, false);
    memcpy(r->out, out, N * 4);
    r->out_len = N * 4;
    free(buf);
    free(out);
    free(before);
}

static void run_avg_int(int nranks, bool procs)
{
    struct h_job job = {.nranks = nranks, .procs = procs, .body = avg_int_body, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    for (int r = 0; r < nranks; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    for (int r = 1; r < nranks; r++)
        assert_memory_equal(res[r].out, res[0].out, res[0].out_len);
    assert_int_equal(h_shm_leftovers(), 0);
}

static void threads_avg_int_3(void **s)
{
    (void)s;
    run_avg_int(3, false);
}

static void procs_avg_int_2(void **s)
{
    (void)s;
    run_avg_int(2, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(threads_1),
        cmocka_unit_test(threads_2),
        cmocka_unit_test(threads_3),
        cmocka_unit_test(threads_4),
        cmocka_unit_test(threads_8),
        cmocka_unit_test(procs_2),
        cmocka_unit_test(procs_3),
        cmocka_unit_test(procs_4),
        cmocka_unit_test(procs_mem_2),
        cmocka_unit_test(procs_mem_3),
        cmocka_unit_test(threads_mem_2),
        cmocka_unit_test(threads_add_3),
        cmocka_unit_test(procs_add_2),
        cmocka_unit_test(procs_mem_add_2),
        cmocka_unit_test(threads_narrow_2),
        cmocka_unit_test(procs_narrow_3),
        cmocka_unit_test(procs_small_slots_3),
        cmocka_unit_test(procs_default_2),
        cmocka_unit_test(threads_default_3),
        cmocka_unit_test(threads_avg_int_3),
        cmocka_unit_test(procs_avg_int_2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
