/* SPDX-License-Identifier: MIT */
/*
 * The DSP-side op as real Hexagon code under qemu-hexagon: 32-bit pointers, Hexagon
 * alignment rules, clang's Hexagon code generation, the scalar sum path (the QEMU in
 * Debian does not decode HVX float).  One thread runs every rank's op in turn, so the
 * peers' fences are pre-set to the values they would hold.  Checked: every output
 * element of every rank, bit for bit against the same-order sum, and exactly against
 * integer-valued data; padding between rows untouched; fence words after each op;
 * peer errors, timeouts and sequence wrap.  With each wire codec: the encodings and
 * outputs against the host's known answers (wire_golden.h), so the DSP code's
 * encode, decode and sum give the host's bytes.
 */
#include "crt.h"
#include "hex_f16.h"
#include "hex_op.h"
#include "hex_params.h"
#include "hex_vsum.h"
#include "hex_wire.h"
#include "wire_golden.h"

#define MAXR       4u
#define BUF_BYTES  24576u
#define VTCM_BYTES (256u * 1024u)

static uint8_t src[MAXR][BUF_BYTES] __attribute__((aligned(128)));
static uint8_t dst[MAXR][BUF_BYTES] __attribute__((aligned(128)));
static uint8_t add[MAXR][BUF_BYTES] __attribute__((aligned(128)));
static uint8_t wbuf[MAXR][4096] __attribute__((aligned(128)));
static struct hex_fence_slot fences[MAXR][HEX_FENCE_SLOTS];
static uint8_t vtcm[VTCM_BYTES] __attribute__((aligned(2048)));
static struct hex_dma_queue dmaq[HEX_MAX_THREADS + 1];
static struct hex_session session;

static uint32_t rng = 0x2545f491u;
static unsigned failures, cases;

static uint32_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

struct tcase {
    uint32_t n, dtype, ne0, ne1, pad; /* pad: extra elements per row (2D only) */
    uint32_t add_mode, threads, vtcm;
    int integer_data; /* small integers: every sum is exact */
};

static float value(const struct tcase *t)
{
    if (t->integer_data)
        return (float)((int32_t)(next_rand() % 33u) - 16);
    /* Random values in [-4, 4) with a full mantissa. */
    return (float)(int32_t)(next_rand() >> 8) * (1.0f / 2097152.0f) - 4.0f;
}

static void store(uint8_t *p, uint32_t dtype, float v)
{
    if (dtype == HEX_F32)
        *(float *)p = v;
    else
        *(uint16_t *)p = hex_f32_to_f16(v);
}

static float load(const uint8_t *p, uint32_t dtype)
{
    return dtype == HEX_F32 ? *(const float *)p : hex_f16_to_f32(*(const uint16_t *)p);
}

static void fail_at(const char *what, const struct tcase *t, uint32_t a, uint32_t b)
{
    failures++;
    crt_puts("FAIL ");
    crt_puts(what);
    crt_puts(" n=");
    crt_put_u32(t->n);
    crt_puts(" dtype=");
    crt_put_u32(t->dtype);
    crt_puts(" ne0=");
    crt_put_u32(t->ne0);
    crt_puts(" ne1=");
    crt_put_u32(t->ne1);
    crt_puts(" add=");
    crt_put_u32(t->add_mode);
    crt_puts(" at ");
    crt_put_u32(a);
    crt_puts(" ");
    crt_put_hex(b);
    crt_puts("\n");
}

static void set_args(struct hex_op_args *a, const struct tcase *t, uint32_t r, uint32_t seq)
{
    struct hex_params_in in = {
        .n_ranks = t->n,
        .rank = r,
        .dtype = t->dtype,
        .ne0 = t->ne0,
        .ne1 = t->ne1,
        .layout_2d = t->ne1 > 1 || t->pad != 0 || t->add_mode == HEX_ADD_BCAST,
        .src_stride = (uint64_t)(t->ne0 + t->pad) * (t->dtype == HEX_F32 ? 4 : 2),
        .dst_stride = (uint64_t)(t->ne0 + t->pad) * (t->dtype == HEX_F32 ? 4 : 2),
        .add_stride = (uint64_t)(t->ne0 + t->pad) * (t->dtype == HEX_F32 ? 4 : 2),
        .add_mode = t->add_mode,
        .session_threads = t->threads,
        .vtcm_bytes = t->vtcm,
    };
    hex_memset(a, 0, sizeof(*a));
    if (hex_params_compute(&in, &a->p) != HEX_OK)
        fail_at("params", t, r, 0);
    for (uint32_t k = 0; k < t->n; k++) {
        a->src[k] = src[k];
        a->dst[k] = dst[k];
        a->addend[k] = t->add_mode != HEX_ADD_NONE ? add[k] : 0;
        a->fence[k] = &fences[k][HEX_FENCE_SLOT_CALL];
    }
    a->seq_entry = seq;
    a->seq_exit = hex_seq_next(seq);
    a->timeout_ms = 2000;
}

static void run_case(const struct tcase *t, uint32_t seq_base)
{
    uint32_t es = t->dtype == HEX_F32 ? 4 : 2;
    uint32_t stride = (t->ne0 + t->pad) * es;
    uint32_t row_bytes = t->ne0 * es;
    cases++;
    for (uint32_t k = 0; k < t->n; k++) {
        for (uint32_t i = 0; i < BUF_BYTES; i++) {
            src[k][i] = 0xa5;
            dst[k][i] = 0xff; /* poison: NaN in both dtypes */
        }
        for (uint32_t row = 0; row < t->ne1; row++)
            for (uint32_t i = 0; i < t->ne0; i++) {
                store(src[k] + row * stride + i * es, t->dtype, value(t));
                store(add[k] + row * stride + i * es, t->dtype, value(t));
            }
        hex_memset(fences[k], 0, sizeof(fences[k]));
    }
    uint32_t entry = hex_seq_next(seq_base), exit_seq = hex_seq_next(entry);
    for (uint32_t r = 0; r < t->n; r++) {
        /* Peers that ran already sit at the exit fence; those after r are pre-set. */
        for (uint32_t k = 0; k < t->n; k++)
            if (k != r)
                hex_fence_write(&fences[k][HEX_FENCE_SLOT_CALL], exit_seq, HEX_OK);
        struct hex_op_args a;
        set_args(&a, t, r, entry);
        struct hex_op_result res;
        hex_op_allreduce(&session, &a, &res);
        if (res.status != HEX_OK)
            fail_at("status", t, r, (uint32_t)res.status);
        struct hex_fence_slot *own = &fences[r][HEX_FENCE_SLOT_CALL];
        if (own->seq != exit_seq || own->status != HEX_OK)
            fail_at("fence word", t, r, own->seq);
    }
    /* Every rank's output: the same-order sum with that rank's addend, bit for bit. */
    for (uint32_t j = 0; j < t->n; j++) {
        for (uint32_t row = 0; row < t->ne1; row++) {
            for (uint32_t i = 0; i < t->ne0; i++) {
                uint32_t off = row * stride + i * es;
                float acc = load(src[0] + off, t->dtype);
                if (t->n > 1)
                    acc = acc + load(src[1] + off, t->dtype);
                for (uint32_t k = 2; k < t->n; k++)
                    acc += load(src[k] + off, t->dtype);
                if (t->add_mode == HEX_ADD_RESIDUAL)
                    acc += load(add[j] + off, t->dtype);
                else if (t->add_mode == HEX_ADD_BCAST)
                    acc += load(add[j] + i * es, t->dtype);
                uint32_t want = t->dtype == HEX_F32 ? hex_f32_bits(acc) : hex_f32_to_f16(acc);
                uint32_t got = t->dtype == HEX_F32 ? *(const uint32_t *)(dst[j] + off)
                                                   : *(const uint16_t *)(dst[j] + off);
                if (want != got) {
                    fail_at("value", t, j * 1000000u + row * 1000u + i, got);
                    return;
                }
            }
            /* The padding of a row is nobody's: it stays poisoned. */
            for (uint32_t b = row_bytes; b < stride; b++)
                if (dst[j][row * stride + b] != 0xff) {
                    fail_at("padding written", t, row, b);
                    return;
                }
        }
        for (uint32_t b = t->ne1 * stride; b < BUF_BYTES; b++)
            if (dst[j][b] != 0xff) {
                fail_at("written past the tensor", t, j, b);
                return;
            }
    }
}

/* Errors: a peer's status, a timeout, both seen at the entry fence, nothing written. */
static void run_errors(void)
{
    struct tcase t = {
        .n = 3, .dtype = HEX_F32, .ne0 = 300, .ne1 = 1, .threads = 2, .vtcm = VTCM_BYTES};
    for (uint32_t k = 0; k < t.n; k++) {
        hex_memset(fences[k], 0, sizeof(fences[k]));
        hex_memset(dst[k], 0xff, BUF_BYTES);
    }
    struct hex_op_args a;
    struct hex_op_result res;

    cases++;
    hex_fence_write(&fences[1][0], 7, HEX_OK);
    hex_fence_write(&fences[2][0], 5, HEX_ERR_INTERNAL); /* rank 2's session failed */
    set_args(&a, &t, 0, 7);
    hex_op_allreduce(&session, &a, &res);
    if (res.status != HEX_ERR_PEER || res.peer != 2 || res.peer_status != HEX_ERR_INTERNAL ||
        res.stage != 0)
        fail_at("peer error", &t, (uint32_t)res.peer, (uint32_t)res.status);
    if (fences[0][0].status != HEX_ERR_PEER || fences[0][0].seq != 7)
        fail_at("peer error fence", &t, fences[0][0].seq, (uint32_t)fences[0][0].status);
    if (dst[0][0] != 0xff || dst[1][0] != 0xff)
        fail_at("written after peer error", &t, 0, dst[0][0]);

    cases++;
    hex_memset(fences, 0, sizeof(fences));
    hex_fence_write(&fences[1][0], 7, HEX_OK);
    hex_fence_write(&fences[2][0], 6, HEX_OK); /* one call behind: never arrives */
    set_args(&a, &t, 0, 7);
    a.timeout_ms = 30;
    uint64_t t0 = hex_now_us();
    hex_op_allreduce(&session, &a, &res);
    uint64_t took = hex_now_us() - t0;
    if (res.status != HEX_ERR_TIMEOUT || res.peer != 2 || fences[0][0].status != HEX_ERR_TIMEOUT)
        fail_at("timeout", &t, (uint32_t)res.peer, (uint32_t)res.status);
    if (took < 30000 || took > 2000000)
        fail_at("timeout duration (us)", &t, 0, (uint32_t)took);

    /* A session already in error fails its next op at once, with its own status. */
    cases++;
    set_args(&a, &t, 0, 9);
    hex_op_allreduce(&session, &a, &res);
    if (res.status != HEX_ERR_TIMEOUT || res.peer != 0)
        fail_at("sticky status", &t, (uint32_t)res.peer, (uint32_t)res.status);

    /* Wrap: entry 0xffffffff, exit skips 0 to 1; a peer at 0xfffffffe has not arrived. */
    cases++;
    hex_memset(fences, 0, sizeof(fences));
    hex_fence_write(&fences[1][0], 1, HEX_OK);
    hex_fence_write(&fences[2][0], 0xfffffffeu, HEX_OK);
    set_args(&a, &t, 0, 0xffffffffu);
    if (a.seq_exit != 1)
        fail_at("seq skips 0", &t, 0, a.seq_exit);
    a.timeout_ms = 20;
    hex_op_allreduce(&session, &a, &res);
    if (res.status != HEX_ERR_TIMEOUT || res.peer != 2)
        fail_at("wrap: behind", &t, (uint32_t)res.peer, (uint32_t)res.status);
    hex_memset(fences, 0, sizeof(fences));
    hex_fence_write(&fences[1][0], 1, HEX_OK);
    hex_fence_write(&fences[2][0], 1, HEX_OK);
    hex_op_allreduce(&session, &a, &res);
    if (res.status != HEX_OK || fences[0][0].seq != 1)
        fail_at("wrap: across", &t, fences[0][0].seq, (uint32_t)res.status);
}

/* One wire_golden.h case: every rank's op in turn, the peers' staging pre-encoded. */
static void run_wire_case(const struct wg_case *c, uint32_t seq_base)
{
    uint32_t es = c->dtype == HEX_F32 ? 4 : 2;
    int bias = c->add_mode == HEX_ADD_BCAST;
    struct tcase t = {.n = WG_RANKS,
                      .dtype = c->dtype,
                      .ne0 = bias ? WG_BIAS_NE0 : WG_COUNT,
                      .ne1 = bias ? WG_COUNT / WG_BIAS_NE0 : 1,
                      .add_mode = c->add_mode,
                      .threads = 2,
                      .vtcm = VTCM_BYTES};
    uint32_t blocks = (WG_COUNT + HEX_WIRE_BLOCK - 1) / HEX_WIRE_BLOCK;
    uint32_t wb = (uint32_t)hex_wire_bytes(c->codec, WG_COUNT);
    cases++;
    for (uint32_t k = 0; k < WG_RANKS; k++) {
        hex_memset(dst[k], 0xff, BUF_BYTES);
        for (uint32_t i = 0; i < WG_COUNT; i++) {
            store(src[k] + i * es, c->dtype, wg_input(k, i));
            store(add[k] + i * es, c->dtype, wg_addend(k, i % t.ne0));
        }
        hex_memset(wbuf[k], 0xa5, sizeof(wbuf[k]));
        hex_wire_encode(c->codec, c->dtype, src[k], WG_COUNT, 0, blocks, wbuf[k]);
        hex_memset(fences[k], 0, sizeof(fences[k]));
    }
    uint32_t entry = hex_seq_next(seq_base), exit_seq = hex_seq_next(entry);
    for (uint32_t r = 0; r < WG_RANKS; r++) {
        for (uint32_t k = 0; k < WG_RANKS; k++)
            if (k != r)
                hex_fence_write(&fences[k][HEX_FENCE_SLOT_CALL], exit_seq, HEX_OK);
        struct hex_op_args a;
        set_args(&a, &t, r, entry);
        a.p.codec = c->codec;
        for (uint32_t k = 0; k < WG_RANKS; k++)
            a.wire[k] = wbuf[k];
        struct hex_op_result res;
        hex_op_allreduce(&session, &a, &res);
        if (res.status != HEX_OK)
            fail_at("wire status", &t, r, (uint32_t)res.status);
    }
    uint32_t eh = WG_HASH_START, oh = WG_HASH_START;
    for (uint32_t k = 0; k < WG_RANKS; k++)
        eh = wg_hash(eh, wbuf[k], wb);
    for (uint32_t j = 0; j < WG_RANKS; j++)
        for (uint32_t i = 0; i < WG_COUNT; i++)
            oh = wg_hash_out(oh, c->dtype, dst[j], i);
    if (eh != c->enc_hash)
        fail_at("wire encoding", &t, c->codec, eh);
    if (oh != c->out_hash)
        fail_at("wire output", &t, c->codec, oh);
}

static void check_f16(void)
{
    /* Round trips of every f16 value, and a few rounding cases. */
    cases++;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0)
            continue; /* NaN payloads come back quiet */
        if (hex_f32_to_f16(hex_f16_to_f32((uint16_t)h)) != h)
            fail_at("f16 round trip", &(struct tcase){0}, h, 0);
    }
    if (hex_f32_to_f16(hex_bits_f32(0x3f801000u)) != 0x3c00u || /* tie to even, down */
        hex_f32_to_f16(hex_bits_f32(0x3f803000u)) != 0x3c02u || /* tie to even, up */
        hex_f32_to_f16(65520.0f) != 0x7c00u || hex_f32_to_f16(hex_bits_f32(0x33000000u)) != 0)
        fail_at("f16 rounding", &(struct tcase){0}, 0, 0);
}

int main(void)
{
    session.vtcm = vtcm;
    session.vtcm_bytes = VTCM_BYTES;
    session.n_threads = HEX_MAX_THREADS;
    session.dma = dmaq;
    for (uint32_t i = 0; i <= HEX_MAX_THREADS; i++)
        hex_dma_init(&dmaq[i], 128);
    crt_puts("hexagon op_allreduce under qemu: sums ");
    crt_puts(hex_vsum_impl());
    crt_puts(", pointers ");
    crt_put_u32((uint32_t)sizeof(void *) * 8);
    crt_puts(" bits\n");

    check_f16();
    static const uint32_t sizes[] = {1, 3, 127, 128, 129, 515, 1000, 3000};
    for (uint32_t n = 2; n <= MAXR; n++)
        for (uint32_t d = 0; d < 2; d++)
            for (uint32_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
                for (uint32_t m = 0; m < 2; m++) {
                    struct tcase t = {.n = n,
                                      .dtype = d,
                                      .ne0 = sizes[s],
                                      .ne1 = 1,
                                      .add_mode = m ? HEX_ADD_RESIDUAL : HEX_ADD_NONE,
                                      .threads = 1 + s % 4,
                                      .vtcm = VTCM_BYTES,
                                      .integer_data = (int)(s & 1)};
                    run_case(&t, n * 100 + s);
                }
    /* 2D: padded rows, row-broadcast bias, rows longer than a block (small VTCM). */
    struct tcase t2[] = {
        {.n = 2,
         .dtype = HEX_F32,
         .ne0 = 40,
         .ne1 = 13,
         .pad = 8,
         .threads = 3,
         .vtcm = VTCM_BYTES},
        {.n = 3,
         .dtype = HEX_F16,
         .ne0 = 33,
         .ne1 = 20,
         .pad = 31,
         .add_mode = HEX_ADD_RESIDUAL,
         .threads = 2,
         .vtcm = VTCM_BYTES},
        {.n = 4,
         .dtype = HEX_F32,
         .ne0 = 64,
         .ne1 = 17,
         .add_mode = HEX_ADD_BCAST,
         .threads = 4,
         .vtcm = VTCM_BYTES},
        {.n = 3,
         .dtype = HEX_F16,
         .ne0 = 100,
         .ne1 = 7,
         .pad = 4,
         .add_mode = HEX_ADD_BCAST,
         .threads = 2,
         .vtcm = VTCM_BYTES,
         .integer_data = 1},
        {.n = 2,
         .dtype = HEX_F32,
         .ne0 = 1000,
         .ne1 = 3,
         .pad = 24,
         .threads = 2,
         .vtcm = 12 * 1024},
        {.n = 4,
         .dtype = HEX_F16,
         .ne0 = 2000,
         .ne1 = 1,
         .add_mode = HEX_ADD_RESIDUAL,
         .threads = 2,
         .vtcm = 24 * 1024},
    };
    for (uint32_t i = 0; i < sizeof(t2) / sizeof(t2[0]); i++)
        run_case(&t2[i], 0xfffffff0u + i); /* fences near the wrap too */
    run_errors();
    for (uint32_t i = 0; i < WG_N_CASES; i++)
        run_wire_case(&wg_cases[i], 500 + i);

    crt_put_u32(cases);
    crt_puts(" cases, ");
    crt_put_u32(failures);
    crt_puts(" failures\n");
    return failures == 0 ? 0 : 1;
}
