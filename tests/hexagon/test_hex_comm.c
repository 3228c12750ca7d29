/* SPDX-License-Identifier: MIT */
/*
 * comm_allreduce and comm_allreduce_add on Hexagon communicators (emulated HTP
 * sessions): 2, 3 and 4 ranks as threads and as processes; f32 and f16; 1D, residual
 * and row-broadcast add; sizes that are not multiples of 128 and smaller than the rank
 * count; a VTCM that forces the block to shrink; fence sequences across 2^32.  Every
 * output element is checked against a float64 reference and, bit for bit, against the
 * same-order f32 sum (the emulation sums in IEEE f32); outputs are poisoned first;
 * plain sums must be bit-identical on every rank.
 */
#include "hex_test_util.h"
#include "comm_base.h"
#include "hexagon/hex_params.h"
#include "hexagon/hexagon.h"
#include "reduce.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

struct spec {
    comm_dtype_t dtype;
    size_t count;
    size_t addend_count; /* 0: plain allreduce */
    bool same_addend;    /* every rank adds the same addend (bit-identity then holds) */
    bool in_place;
    int calls;
    uint32_t results_crc[HT_MAX_RANKS]; /* per rank, last call: for bit-identity */
};

static uint64_t seed_of(int rank, int call, int what)
{
    return (uint64_t)rank * 1000003u + (uint64_t)call * 7919u + (uint64_t)what * 104729u + 17;
}

static uint32_t crc(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

/* Checks out (rank r's result) element by element; returns a message or NULL. */
static const char *check(const struct spec *s, int nranks, int r, int call, const void *out,
                         char *buf, size_t len)
{
    size_t es = comm_dtype_size(s->dtype);
    void *in = malloc(s->count * es * (size_t)nranks);
    void *add = s->addend_count ? malloc(s->addend_count * es) : NULL;
    for (int p = 0; p < nranks; p++)
        ht_fill((uint8_t *)in + (size_t)p * s->count * es, s->count, s->dtype, seed_of(p, call, 0));
    if (add)
        ht_fill(add, s->addend_count, s->dtype, seed_of(s->same_addend ? 0 : r, call, 1));
    const char *err = NULL;
    for (size_t i = 0; i < s->count && err == NULL; i++) {
        double ref = 0;
        float acc = 0;
        for (int p = 0; p < nranks; p++) {
            float v = (float)ht_get((uint8_t *)in + (size_t)p * s->count * es, i, s->dtype);
            ref += v;
            acc = p == 0 ? v : acc + v;
        }
        if (add) {
            float a = (float)ht_get(add, i % s->addend_count, s->dtype);
            ref += a;
            acc += a;
        }
        double got = ht_get(out, i, s->dtype);
        uint32_t want_bits = s->dtype == COMM_F32 ? 0 : coll_f32_to_f16(acc);
        bool same = s->dtype == COMM_F32 ? memcmp(&acc, (const float *)out + i, 4) == 0
                                         : ((const uint16_t *)out)[i] == want_bits;
        if (isnan(got) || fabs(got - ref) > ht_tol(s->dtype, nranks + 1) || !same) {
            snprintf(buf, len,
                     "rank %d call %d element %zu of %zu: got %.9g, float64 %.9g, same-order "
                     "f32 %.9g",
                     r, call, i, s->count, got, ref, (double)acc);
            err = buf;
        }
    }
    free(in);
    free(add);
    return err;
}

static void body(struct ht_rank *r)
{
    struct spec *s = r->user;
    size_t es = comm_dtype_size(s->dtype);
    size_t bytes = s->count * es;
    void *send = NULL, *recv = NULL, *add = NULL;
    comm_status_t st = comm_mem_alloc(r->comm, bytes, &send);
    if (st == COMM_OK && !s->in_place)
        st = comm_mem_alloc(r->comm, bytes, &recv);
    if (st == COMM_OK && s->addend_count)
        st = comm_mem_alloc(r->comm, s->addend_count * es, &add);
    if (s->in_place)
        recv = send;
    for (int call = 0; st == COMM_OK && call < s->calls; call++) {
        ht_fill(send, s->count, s->dtype, seed_of(r->rank, call, 0));
        if (!s->in_place)
            memset(recv, 0xff, bytes); /* NaN in f32 and f16 */
        if (add) {
            ht_fill(add, s->addend_count, s->dtype, seed_of(s->same_addend ? 0 : r->rank, call, 1));
            st = comm_allreduce_add(r->comm, send, recv, add, s->addend_count, s->count, s->dtype,
                                    NULL);
        } else {
            st = comm_allreduce(r->comm, send, recv, s->count, s->dtype, COMM_SUM, NULL);
        }
        if (st != COMM_OK) {
            snprintf(r->msg, sizeof(r->msg), "%s", comm_last_error(r->comm));
            break;
        }
        const char *err = check(s, r->nranks, r->rank, call, recv, r->msg, sizeof(r->msg));
        if (err != NULL) {
            st = COMM_ERR_INVALID;
            break;
        }
        s->results_crc[r->rank] = crc(recv, bytes);
    }
    r->status = st;
}

static void run(int nranks, struct spec *s)
{
    struct ht_rank out[HT_MAX_RANKS];
    ht_run_threads(nranks, body, s, out);
    for (int r = 0; r < nranks; r++)
        if (out[r].status != COMM_OK)
            fail_msg("%d ranks, %s count %zu addend %zu%s: rank %d: %s: %s", nranks,
                     s->dtype == COMM_F32 ? "f32" : "f16", s->count, s->addend_count,
                     s->in_place ? " in place" : "", r, comm_status_string(out[r].status),
                     out[r].msg);
    if (s->addend_count == 0 || s->same_addend)
        for (int r = 1; r < nranks; r++)
            assert_int_equal(s->results_crc[r], s->results_crc[0]);
}

static void test_sizes(void **state)
{
    (void)state;
    static const size_t counts[] = {1, 2, 3, 127, 129, 1000, 4097, 70001};
    for (int n = 2; n <= 4; n++)
        for (int d = 0; d < 2; d++)
            for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
                struct spec s = {.dtype = d ? COMM_F16 : COMM_F32,
                                 .count = counts[i],
                                 .in_place = (i + (size_t)n) % 2 == 0,
                                 .calls = 2};
                run(n, &s);
            }
}

static void test_residual(void **state)
{
    (void)state;
    static const size_t counts[] = {3, 300, 5000, 33333};
    for (int n = 2; n <= 4; n++)
        for (int d = 0; d < 2; d++)
            for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
                struct spec s = {.dtype = d ? COMM_F16 : COMM_F32,
                                 .count = counts[i],
                                 .addend_count = counts[i],
                                 .same_addend = i % 2 == 0,
                                 .in_place = i == 1,
                                 .calls = 2};
                run(n, &s);
            }
}

static void test_bias(void **state)
{
    (void)state;
    /* (row length, rows): fewer rows than ranks, odd lengths, one column, long rows. */
    static const size_t shapes[][2] = {{100, 37}, {1, 9}, {7, 3}, {129, 2}, {3000, 11}, {64, 256}};
    for (int n = 2; n <= 4; n++)
        for (int d = 0; d < 2; d++)
            for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
                struct spec s = {.dtype = d ? COMM_F16 : COMM_F32,
                                 .count = shapes[i][0] * shapes[i][1],
                                 .addend_count = shapes[i][0],
                                 .same_addend = i % 2 == 1,
                                 .in_place = i == 2,
                                 .calls = 2};
                run(n, &s);
            }
}

static void test_vtcm_shrink(void **state)
{
    (void)state;
    /* What the host computes: the block shrinks below what 8 MiB would give. */
    struct hex_params_in in = {.n_ranks = 3,
                               .rank = 0,
                               .dtype = HEX_F32,
                               .ne0 = 600000,
                               .ne1 = 1,
                               .session_threads = 4,
                               .vtcm_bytes = 8u << 20};
    struct hex_op_params big, small;
    assert_int_equal(hex_params_compute(&in, &big), HEX_OK);
    in.vtcm_bytes = 48 * 1024;
    assert_int_equal(hex_params_compute(&in, &small), HEX_OK);
    assert_true(small.block_elems < big.block_elems);
    assert_true(small.block_elems >= 128 && small.block_elems % 128 == 0);
    assert_true(small.vtcm_bytes <= 48 * 1024);
    /* And the results through the API with such a VTCM (1D, residual and bias). */
    ht_env_set("ARCOMM_HEX_VTCM_BYTES", "48K");
    struct spec s1 = {.dtype = COMM_F32, .count = 600000, .calls = 1};
    run(3, &s1);
    struct spec s2 = {.dtype = COMM_F16, .count = 200000, .addend_count = 200000, .calls = 1};
    run(3, &s2);
    struct spec s3 = {.dtype = COMM_F32, .count = 1000 * 100, .addend_count = 1000, .calls = 1};
    run(2, &s3);
    ht_env_restore();
}

static void body_too_small(struct ht_rank *r)
{
    void *buf;
    r->status = comm_mem_alloc(r->comm, 4096 * 4, &buf);
    if (r->status == COMM_OK)
        r->status = comm_allreduce(r->comm, buf, buf, 4096, COMM_F32, COMM_SUM, NULL);
    snprintf(r->msg, sizeof(r->msg), "%s", comm_last_error(r->comm));
}

static void test_vtcm_too_small(void **state)
{
    (void)state;
    /* 4 ranks: (4 + 1) buffers of two 128-element f32 halves are 5 KiB; 4 KiB fails. */
    ht_env_set("ARCOMM_HEX_VTCM_BYTES", "4K");
    struct ht_rank out[4];
    ht_run_threads(4, body_too_small, NULL, out);
    ht_env_restore();
    for (int r = 0; r < 4; r++) {
        assert_int_equal(out[r].status, COMM_ERR_NOMEM);
        assert_non_null(strstr(out[r].msg, "ARCOMM_HEX_VTCM_BYTES"));
    }
}

struct wrap_arg {
    uint32_t seq_before[HT_MAX_RANKS], seq_after[HT_MAX_RANKS];
    struct spec s;
};

static void body_wrap(struct ht_rank *r)
{
    struct wrap_arg *w = r->user;
    w->seq_before[r->rank] = hex_of(r->comm)->seq_last;
    struct ht_rank inner = *r;
    inner.user = &w->s;
    body(&inner);
    r->status = inner.status;
    memcpy(r->msg, inner.msg, sizeof(r->msg));
    w->seq_after[r->rank] = hex_of(r->comm)->seq_last;
}

static void test_seq_wrap(void **state)
{
    (void)state;
    ht_env_set("ARCOMM_HEX_SEQ_START", "4294967287"); /* 2^32 - 9 */
    struct wrap_arg w = {.s = {.dtype = COMM_F32, .count = 1000, .calls = 8}};
    struct ht_rank out[3];
    ht_run_threads(3, body_wrap, &w, out);
    ht_env_restore();
    for (int r = 0; r < 3; r++) {
        assert_int_equal(out[r].status, COMM_OK);
        assert_int_equal(w.seq_before[r], 4294967287u);
        /* 8 calls, 2 fences each, 0 skipped: 2^32 - 9 + 16 + 1 wraps to 8. */
        assert_int_equal(w.seq_after[r], 8u);
    }
}

static void body_unsupported(struct ht_rank *r)
{
    void *buf;
    r->status = comm_mem_alloc(r->comm, 1024, &buf);
    if (r->status != COMM_OK)
        return;
    comm_status_t a = comm_allreduce(r->comm, buf, buf, 16, COMM_F64, COMM_SUM, NULL);
    r->status = a;
    snprintf(r->msg, sizeof(r->msg), "%s", comm_last_error(r->comm));
}

static void body_unsupported_op(struct ht_rank *r)
{
    void *buf;
    r->status = comm_mem_alloc(r->comm, 1024, &buf);
    if (r->status == COMM_OK)
        r->status = comm_allreduce(r->comm, buf, buf, 16, COMM_F32, COMM_MAX, NULL);
}

static void test_unsupported(void **state)
{
    (void)state;
    struct ht_rank out[3];
    ht_run_threads(3, body_unsupported, NULL, out);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(out[r].status, COMM_ERR_UNSUPPORTED);
        assert_non_null(strstr(out[r].msg, "f64"));
    }
    ht_run_threads(2, body_unsupported_op, NULL, out);
    for (int r = 0; r < 2; r++)
        assert_int_equal(out[r].status, COMM_ERR_UNSUPPORTED);
}

static void body_not_mem_alloc(struct ht_rank *r)
{
    float host[256];
    void *buf;
    r->status = comm_mem_alloc(r->comm, sizeof(host), &buf);
    if (r->status != COMM_OK)
        return;
    for (int i = 0; i < 256; i++)
        host[i] = 1.0f;
    void *use = r->rank == 1 ? (void *)host : buf;
    r->status = comm_allreduce(r->comm, use, use, 256, COMM_F32, COMM_SUM, NULL);
    snprintf(r->msg, sizeof(r->msg), "%s", comm_last_error(r->comm));
}

static void test_not_mem_alloc(void **state)
{
    (void)state;
    struct ht_rank out[3];
    ht_run_threads(3, body_not_mem_alloc, NULL, out);
    assert_int_equal(out[1].status, COMM_ERR_INVALID);
    assert_non_null(strstr(out[1].msg, "comm_mem_alloc"));
    assert_int_equal(out[0].status, COMM_ERR_PEER);
    assert_int_equal(out[2].status, COMM_ERR_PEER);
}

static void body_mismatch(struct ht_rank *r)
{
    void *buf;
    r->status = comm_mem_alloc(r->comm, 4096, &buf);
    if (r->status == COMM_OK)
        r->status =
            comm_allreduce(r->comm, buf, buf, r->rank == 0 ? 512 : 256, COMM_F32, COMM_SUM, NULL);
}

static void test_mismatch(void **state)
{
    (void)state;
    struct ht_rank out[2];
    ht_run_threads(2, body_mismatch, NULL, out);
    assert_int_equal(out[0].status, COMM_ERR_MISMATCH);
    assert_int_equal(out[1].status, COMM_ERR_MISMATCH);
}

static void body_nothing(struct ht_rank *r)
{
    void *a, *b;
    r->status = comm_mem_alloc(r->comm, 1 << 20, &a);
    if (r->status == COMM_OK)
        r->status = comm_mem_alloc(r->comm, 5000, &b);
    if (r->status == COMM_OK)
        r->status = comm_allreduce(r->comm, a, a, 1000, COMM_F16, COMM_SUM, NULL);
    if (r->status == COMM_OK)
        r->status = comm_mem_free(r->comm, b);
}

static void test_no_leaks(void **state)
{
    (void)state;
    int before = ht_count_fds();
    struct ht_rank out[4];
    ht_run_threads(4, body_nothing, NULL, out);
    for (int r = 0; r < 4; r++)
        assert_int_equal(out[r].status, COMM_OK);
    assert_int_equal(ht_count_fds(), before);
}

/* Process ranks: buffers and fences cross processes by descriptor. */
static int process_rank(int rank, int nranks, const comm_id_t *id)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = nranks;
    cfg.rank = rank;
    cfg.id = *id;
    cfg.device = COMM_DEVICE_HEXAGON;
    cfg.timeout_ms = 20000;
    comm_t *c;
    int fds = ht_count_fds();
    if (comm_init(&c, &cfg) != COMM_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, comm_last_error(NULL));
        return 2;
    }
    struct spec specs[] = {
        {.dtype = COMM_F32, .count = 10007, .calls = 2},
        {.dtype = COMM_F16, .count = 3000, .addend_count = 3000, .calls = 2},
        {.dtype = COMM_F32, .count = 64 * 50, .addend_count = 64, .in_place = true, .calls = 1},
    };
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        struct ht_rank r = {.rank = rank, .nranks = nranks, .comm = c, .user = &specs[i]};
        body(&r);
        if (r.status != COMM_OK) {
            fprintf(stderr, "rank %d: spec %zu: %s: %s\n", rank, i, comm_status_string(r.status),
                    r.msg);
            return 3;
        }
    }
    comm_destroy(c);
    if (ht_count_fds() != fds) {
        fprintf(stderr, "rank %d: %d descriptors before, %d after comm_destroy\n", rank, fds,
                ht_count_fds());
        return 4;
    }
    return 0;
}

static void test_processes(void **state)
{
    (void)state;
    for (int n = 2; n <= 4; n += 2) {
        comm_id_t id;
        assert_int_equal(comm_id_new(&id), COMM_OK);
        pid_t pids[HT_MAX_RANKS];
        for (int r = 0; r < n; r++) {
            pids[r] = fork();
            assert_true(pids[r] >= 0);
            if (pids[r] == 0)
                _exit(process_rank(r, n, &id));
        }
        for (int r = 0; r < n; r++) {
            int ws;
            assert_int_equal(waitpid(pids[r], &ws, 0), pids[r]);
            if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
                fail_msg("%d process ranks: rank %d exited with status %d", n, r,
                         WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),          cmocka_unit_test(test_residual),
        cmocka_unit_test(test_bias),           cmocka_unit_test(test_vtcm_shrink),
        cmocka_unit_test(test_vtcm_too_small), cmocka_unit_test(test_seq_wrap),
        cmocka_unit_test(test_unsupported),    cmocka_unit_test(test_not_mem_alloc),
        cmocka_unit_test(test_mismatch),       cmocka_unit_test(test_no_leaks),
        cmocka_unit_test(test_processes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
