/* SPDX-License-Identifier: MIT */
/*
 * The wire codecs on Hexagon communicators (emulated HTP sessions): ARCOMM_WIRE=bf16
 * (f32), int8 and fp8 (f32 and f16), comm_allreduce and comm_allreduce_add (residual
 * and row-broadcast bias), 2 to 4 thread ranks and 2 and 4 process ranks, counts 1, 63,
 * 64, 65, 3001 and 70001 (larger than a reduction tile on every rank) on one
 * communicator each, so the staging buffers grow and are reused.
 *
 * Every element of every rank's output is checked bit for bit against the contract:
 * the rank-order f32 sum of each rank's input encoded and decoded on the host
 * (wire_encode / wire_decode, which suite wire checks against a model of its own), the
 * rank's addend last, rounded once to the dtype.  An infinite element in rank 1's input
 * must make that element NaN (int8, fp8) and nothing else.  The codec must change
 * something (the result differs from the full-width sum somewhere), and must not by
 * default (the threshold is off unless set).  Ranks disagreeing on ARCOMM_WIRE fail
 * comm_init with COMM_ERR_MISMATCH.  And the known answers the qemu driver checks the
 * DSP code against (hexagon/qemu/wire_golden.h) are the host's.
 */
#include "hex_test_util.h"
#include "hexagon/hex_wire.h"
#include "hexagon/qemu/wire_golden.h"
#include "reduce.h"
#include "wire.h"

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

enum add_kind { ADD_NONE, ADD_RESIDUAL, ADD_BIAS };

static const size_t counts[] = {1, 63, 64, 65, 3001, 70001};
#define N_COUNTS (sizeof(counts) / sizeof(counts[0]))
/* Bias rows: (row length, rows). */
static const size_t bias_shapes[][2] = {{100, 37}, {1, 9}, {129, 65}, {64, 1100}};
#define N_BIAS (sizeof(bias_shapes) / sizeof(bias_shapes[0]))

struct spec {
    int codec; /* enum wire_codec */
    comm_dtype_t dtype;
    enum add_kind add;
    bool expect_full_width; /* the threshold is off: the plain same-order sum */
};

static uint64_t seed_of(int rank, size_t shape, int what)
{
    return (uint64_t)rank * 1000003u + (uint64_t)shape * 7919u + (uint64_t)what * 104729u + 5;
}

static size_t n_shapes(const struct spec *s)
{
    return s->add == ADD_BIAS ? N_BIAS : N_COUNTS;
}

static void shape_of(const struct spec *s, size_t k, size_t *count, size_t *addend_count)
{
    if (s->add == ADD_BIAS) {
        *count = bias_shapes[k][0] * bias_shapes[k][1];
        *addend_count = bias_shapes[k][0];
    } else {
        *count = counts[k];
        *addend_count = s->add == ADD_RESIDUAL ? counts[k] : 0;
    }
}

static float get_f(comm_dtype_t dtype, const void *buf, size_t i)
{
    return (float)ht_get(buf, i, dtype);
}

static void put_f(comm_dtype_t dtype, void *buf, size_t i, float v)
{
    if (dtype == COMM_F32)
        ((float *)buf)[i] = v;
    else
        ((uint16_t *)buf)[i] = coll_f32_to_f16(v);
}

/* Rank p's input of shape k: values in [-2, 2), outliers 100x in some blocks, and one
 * infinity in rank 1's (from 65 elements on). */
static void fill_input(const struct spec *s, int p, size_t k, size_t count, void *buf)
{
    ht_fill(buf, count, s->dtype, seed_of(p, k, 0));
    for (size_t i = 3; i < count; i += 97)
        put_f(s->dtype, buf, i, get_f(s->dtype, buf, i) * 100.0f);
    if (p == 1 && count >= 65)
        put_f(s->dtype, buf, 40, INFINITY);
}

static void fill_addend(const struct spec *s, int r, size_t k, size_t n, void *buf)
{
    ht_fill(buf, n, s->dtype, seed_of(r, k, 1));
}

static uint16_t out_bits16(const void *out, size_t i)
{
    return ((const uint16_t *)out)[i];
}

/* Checks rank r's output of shape k; a message in buf, or NULL. */
static const char *check(const struct spec *s, int nranks, int r, size_t k, const void *out,
                         char *buf, size_t len)
{
    size_t count, ac;
    shape_of(s, k, &count, &ac);
    size_t es = comm_dtype_size(s->dtype);
    const struct wire_row *row = wire_row(s->codec);
    void *in = malloc(count * es);
    void *enc = malloc(wire_bytes(row, s->dtype, count) + 1);
    float *dec = calloc(count * (size_t)nranks, sizeof(float)); /* read even at full width */
    float *full = malloc(count * sizeof(float));
    void *add = ac ? malloc(ac * es) : NULL;
    for (int p = 0; p < nranks; p++) {
        fill_input(s, p, k, count, in);
        if (!s->expect_full_width) { /* (bf16 has no encoding of f16) */
            wire_encode(row, s->dtype, in, count, enc);
            wire_decode(row, s->dtype, enc, count, dec + (size_t)p * count);
        }
        for (size_t i = 0; i < count; i++) {
            float v = get_f(s->dtype, in, i);
            full[i] = p == 0 ? v : full[i] + v;
        }
    }
    if (add)
        fill_addend(s, r, k, ac, add);
    const char *err = NULL;
    bool narrowed = false;
    for (size_t i = 0; i < count && err == NULL; i++) {
        float acc = dec[i];
        for (int p = 1; p < nranks; p++)
            acc = acc + dec[(size_t)p * count + i];
        float fw = full[i];
        if (add) {
            acc = acc + get_f(s->dtype, add, i % ac);
            fw = fw + get_f(s->dtype, add, i % ac);
        }
        if (s->expect_full_width)
            acc = fw;
        bool same;
        if (s->dtype == COMM_F32) {
            float got = ((const float *)out)[i];
            same = isnan(acc) ? isnan(got) : memcmp(&got, &acc, 4) == 0;
            narrowed |= memcmp(&acc, &fw, 4) != 0;
        } else {
            uint16_t want = coll_f32_to_f16(acc), got = out_bits16(out, i);
            bool want_nan = (want & 0x7c00u) == 0x7c00u && (want & 0x3ffu) != 0;
            bool got_nan = (got & 0x7c00u) == 0x7c00u && (got & 0x3ffu) != 0;
            same = want_nan ? got_nan : got == want;
            narrowed |= want != coll_f32_to_f16(fw);
        }
        if (!same)
            snprintf(buf, len,
                     "%s %s count %zu addend %zu: rank %d element %zu: got %.9g, want %.9g",
                     wire_name(s->codec), s->dtype == COMM_F32 ? "f32" : "f16", count, ac, r, i,
                     (double)get_f(s->dtype, out, i), (double)acc);
        err = same ? NULL : buf;
    }
    /* A codec that never engaged would pass the bit checks above vacuously. */
    if (err == NULL && !s->expect_full_width && count >= 63 && !narrowed) {
        snprintf(buf, len, "%s %s count %zu: the result is the full-width sum everywhere",
                 wire_name(s->codec), s->dtype == COMM_F32 ? "f32" : "f16", count);
        err = buf;
    }
    if (err == NULL && s->expect_full_width && count >= 63 && narrowed)
        err = "internal: a full-width check that differs from itself";
    free(in);
    free(enc);
    free(dec);
    free(full);
    free(add);
    return err;
}

static uint32_t crc(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

struct run_state {
    struct spec s;
    uint32_t crc[HT_MAX_RANKS][N_COUNTS > N_BIAS ? N_COUNTS : N_BIAS];
};

static comm_status_t body_on(comm_t *comm, int rank, int nranks, struct run_state *rs, char *msg,
                             size_t len)
{
    const struct spec *s = &rs->s;
    size_t es = comm_dtype_size(s->dtype);
    for (size_t k = 0; k < n_shapes(s); k++) {
        size_t count, ac;
        shape_of(s, k, &count, &ac);
        void *send = NULL, *recv = NULL, *add = NULL;
        comm_status_t st = comm_mem_alloc(comm, count * es, &send);
        if (st == COMM_OK)
            st = comm_mem_alloc(comm, count * es, &recv);
        if (st == COMM_OK && ac)
            st = comm_mem_alloc(comm, ac * es, &add);
        if (st != COMM_OK) {
            snprintf(msg, len, "comm_mem_alloc: %s", comm_last_error(comm));
            return st;
        }
        fill_input(s, rank, k, count, send);
        memset(recv, 0xff, count * es); /* NaN: an element not written shows */
        if (add) {
            fill_addend(s, rank, k, ac, add);
            st = comm_allreduce_add(comm, send, recv, add, ac, count, s->dtype, NULL);
        } else {
            st = comm_allreduce(comm, send, recv, count, s->dtype, COMM_SUM, NULL);
        }
        if (st != COMM_OK) {
            snprintf(msg, len, "count %zu: %s", count, comm_last_error(comm));
            return st;
        }
        if (check(s, nranks, rank, k, recv, msg, len) != NULL)
            return COMM_ERR_INVALID;
        rs->crc[rank][k] = crc(recv, count * es);
        comm_mem_free(comm, send);
        comm_mem_free(comm, recv);
        if (add)
            comm_mem_free(comm, add);
    }
    return COMM_OK;
}

static void body(struct ht_rank *r)
{
    r->status = body_on(r->comm, r->rank, r->nranks, r->user, r->msg, sizeof(r->msg));
}

static void set_wire(int codec, const char *threshold)
{
    ht_env_set("ARCOMM_WIRE", wire_name(codec));
    if (threshold != NULL)
        ht_env_set("ARCOMM_WIRE_THRESHOLD", threshold);
}

static void run_threads(int nranks, const struct spec *s)
{
    struct run_state rs = {.s = *s};
    struct ht_rank out[HT_MAX_RANKS];
    ht_run_threads(nranks, body, &rs, out);
    for (int r = 0; r < nranks; r++)
        if (out[r].status != COMM_OK)
            fail_msg("%d thread ranks, %s %s add %d: rank %d: %s: %s", nranks, wire_name(s->codec),
                     s->dtype == COMM_F32 ? "f32" : "f16", (int)s->add, r,
                     comm_status_string(out[r].status), out[r].msg);
    /* Without an addend (each rank adds its own otherwise), every rank the same bits. */
    for (int r = 1; s->add == ADD_NONE && r < nranks; r++)
        for (size_t k = 0; k < n_shapes(s); k++)
            assert_int_equal(rs.crc[r][k], rs.crc[0][k]);
}

static void test_threads(void **state)
{
    (void)state;
    for (int codec = WIRE_BF16; codec < WIRE_COUNT; codec++)
        for (int d = 0; d < 2; d++) {
            if (codec == WIRE_BF16 && d == 1)
                continue; /* bf16 carries f32 only */
            set_wire(codec, "1");
            for (int n = 2; n <= 4; n++)
                for (int add = ADD_NONE; add <= ADD_BIAS; add++) {
                    struct spec s = {.codec = codec,
                                     .dtype = d ? COMM_F16 : COMM_F32,
                                     .add = (enum add_kind)add};
                    run_threads(n, &s);
                }
            ht_env_restore();
        }
}

/* ARCOMM_WIRE alone changes nothing on Hexagon: the threshold's auto is off. */
static void test_default_off(void **state)
{
    (void)state;
    set_wire(WIRE_INT8, NULL);
    struct spec s = {.codec = WIRE_INT8, .dtype = COMM_F32, .expect_full_width = true};
    run_threads(3, &s);
    ht_env_restore();
    /* A threshold above the message: full width too; the bias's f16 at 3 ranks. */
    set_wire(WIRE_FP8, "1G");
    struct spec s2 = {
        .codec = WIRE_FP8, .dtype = COMM_F16, .add = ADD_BIAS, .expect_full_width = true};
    run_threads(3, &s2);
    ht_env_restore();
    /* bf16 carries f32 only: f16 sums stay full width at any size. */
    set_wire(WIRE_BF16, "1");
    struct spec s3 = {
        .codec = WIRE_BF16, .dtype = COMM_F16, .add = ADD_RESIDUAL, .expect_full_width = true};
    run_threads(2, &s3);
    ht_env_restore();
}

/* Process ranks: the staging buffers cross processes by descriptor. */
static int process_rank(int rank, int nranks, const comm_id_t *id, const char *wire)
{
    setenv("ARCOMM_WIRE", wire, 1);
    setenv("ARCOMM_WIRE_THRESHOLD", "1", 1);
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = nranks;
    cfg.rank = rank;
    cfg.id = *id;
    cfg.device = COMM_DEVICE_HEXAGON;
    cfg.timeout_ms = 20000;
    comm_t *c;
    comm_status_t st = comm_init(&c, &cfg);
    if (st == COMM_ERR_MISMATCH)
        return 10;
    if (st != COMM_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, comm_last_error(NULL));
        return 2;
    }
    static const struct spec specs[] = {
        {.codec = WIRE_INT8, .dtype = COMM_F16, .add = ADD_RESIDUAL},
        {.codec = WIRE_FP8, .dtype = COMM_F32, .add = ADD_BIAS},
        {.codec = WIRE_BF16, .dtype = COMM_F32, .add = ADD_NONE},
    };
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        if (wire_parse(wire) != specs[i].codec)
            continue;
        struct run_state *rs = calloc(1, sizeof(*rs));
        rs->s = specs[i];
        char msg[512] = "";
        st = body_on(c, rank, nranks, rs, msg, sizeof(msg));
        free(rs);
        if (st != COMM_OK) {
            fprintf(stderr, "rank %d: %s: %s\n", rank, comm_status_string(st), msg);
            return 3;
        }
    }
    comm_destroy(c);
    return 0;
}

/* Forks nranks process ranks, rank r with ARCOMM_WIRE wires[r]; their exit codes. */
static void run_processes(int nranks, const char *const *wires, int *codes)
{
    comm_id_t id;
    assert_int_equal(comm_id_new(&id), COMM_OK);
    pid_t pids[HT_MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0)
            _exit(process_rank(r, nranks, &id, wires[r]));
    }
    for (int r = 0; r < nranks; r++) {
        int ws;
        assert_int_equal(waitpid(pids[r], &ws, 0), pids[r]);
        codes[r] = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    }
}

static void test_processes(void **state)
{
    (void)state;
    static const char *const names[] = {"int8", "fp8", "bf16"};
    for (int n = 2; n <= 4; n += 2)
        for (size_t c = 0; c < 3; c++) {
            const char *wires[HT_MAX_RANKS] = {names[c], names[c], names[c], names[c]};
            int codes[HT_MAX_RANKS];
            run_processes(n, wires, codes);
            for (int r = 0; r < n; r++)
                if (codes[r] != 0)
                    fail_msg("%d process ranks, %s: rank %d exited with %d", n, names[c], r,
                             codes[r]);
        }
}

static void test_mismatch(void **state)
{
    (void)state;
    const char *wires[HT_MAX_RANKS] = {"int8", "fp8", "int8"};
    int codes[HT_MAX_RANKS];
    run_processes(3, wires, codes);
    for (int r = 0; r < 3; r++)
        if (codes[r] != 10)
            fail_msg("ARCOMM_WIRE int8/fp8/int8: rank %d exited with %d, not a mismatch", r,
                     codes[r]);
}

/* The known answers the qemu driver checks the DSP code against (wire_golden.h): here
 * from the host's wire_encode / wire_decode and the contract's sum. */
static void golden(const struct wg_case *c, uint32_t *enc_hash, uint32_t *out_hash)
{
    comm_dtype_t dt = c->dtype == HEX_F16 ? COMM_F16 : COMM_F32;
    size_t es = comm_dtype_size(dt);
    const struct wire_row *row = wire_row((int)c->codec);
    size_t wb = wire_bytes(row, dt, WG_COUNT);
    uint8_t *in = malloc(WG_COUNT * es), *enc = malloc(wb), *out = malloc(WG_COUNT * es);
    float *dec = malloc(sizeof(float) * WG_COUNT * WG_RANKS);
    uint32_t ne0 = c->add_mode == HEX_ADD_BCAST ? WG_BIAS_NE0 : WG_COUNT;
    *enc_hash = WG_HASH_START;
    for (uint32_t r = 0; r < WG_RANKS; r++) {
        for (uint32_t i = 0; i < WG_COUNT; i++)
            put_f(dt, in, i, wg_input(r, i));
        wire_encode(row, dt, in, WG_COUNT, enc);
        *enc_hash = wg_hash(*enc_hash, enc, (uint32_t)wb);
        wire_decode(row, dt, enc, WG_COUNT, dec + (size_t)r * WG_COUNT);
    }
    *out_hash = WG_HASH_START;
    for (uint32_t j = 0; j < WG_RANKS; j++) {
        for (uint32_t i = 0; i < WG_COUNT; i++) {
            float acc = dec[i];
            for (uint32_t k = 1; k < WG_RANKS; k++)
                acc = acc + dec[(size_t)k * WG_COUNT + i];
            if (c->add_mode != HEX_ADD_NONE) {
                float a = wg_addend(j, i % ne0);
                acc = acc + (dt == COMM_F16 ? hex_f16_to_f32(hex_f32_to_f16(a)) : a);
            }
            if (dt == COMM_F16)
                ((uint16_t *)out)[i] = hex_f32_to_f16(acc);
            else
                ((float *)out)[i] = acc;
            *out_hash = wg_hash_out(*out_hash, c->dtype, out, i);
        }
    }
    free(in);
    free(enc);
    free(out);
    free(dec);
}

static void test_golden(void **state)
{
    (void)state;
    char all[2048] = "";
    bool ok = true;
    for (size_t k = 0; k < WG_N_CASES; k++) {
        uint32_t eh, oh;
        golden(&wg_cases[k], &eh, &oh);
        ok &= eh == wg_cases[k].enc_hash && oh == wg_cases[k].out_hash;
        char line[96];
        snprintf(line, sizeof(line), "    {%u, %u, %u, 0x%08xu, 0x%08xu},\n", wg_cases[k].codec,
                 wg_cases[k].dtype, wg_cases[k].add_mode, eh, oh);
        strncat(all, line, sizeof(all) - strlen(all) - 1);
    }
    if (!ok)
        fail_msg("wire_golden.h's hashes are not the host's; the host computes:\n%s", all);
}

/* A failed test leaves its knobs set: put them back before the next. */
static int restore_env(void **state)
{
    (void)state;
    ht_env_restore();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),
        cmocka_unit_test_teardown(test_threads, restore_env),
        cmocka_unit_test_teardown(test_default_off, restore_env),
        cmocka_unit_test(test_processes),
        cmocka_unit_test(test_mismatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
