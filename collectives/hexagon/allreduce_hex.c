/* SPDX-License-Identifier: MIT */
/*
 * Allreduce on Hexagon communicators: validate (f32/f16 SUM on comm_mem_alloc
 * buffers), compute this session's parameters, agree with the peers through the
 * segment's arrival words (count, dtype, addend, and where each rank's buffers are:
 * registry entry + offset), map the peers' buffers into this session, and run
 * op_allreduce(_add) in the session.  The DSP-side fences then order the sessions.
 */
#include "hexagon_coll.h"
#include "backend.h"
#include "paths_device.h"
#include "hex_params.h"
#include "hex_wire.h"
#include "hexagon/hexagon.h"
#include "wire.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* A buffer reference in an arrival word: registry entry and offset. */
#define REF_SLOT_SHIFT  48
#define REF_OFFSET_MASK ((1ull << REF_SLOT_SHIFT) - 1)

static uint64_t make_ref(int slot, uint64_t offset)
{
    return ((uint64_t)slot << REF_SLOT_SHIFT) | offset;
}

static comm_status_t own_ref(struct comm *c, const char *what, const void *p, size_t bytes,
                             uint64_t *ref)
{
    uint64_t off;
    int slot = hex_mem_lookup(c, p, bytes, &off);
    if (slot < 0) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: %s %p (%zu bytes) is not inside a buffer from comm_mem_alloc on this "
                 "communicator: Hexagon sessions reach only such buffers",
                 c->rank, what, p, bytes);
        return COMM_ERR_INVALID;
    }
    *ref = make_ref(slot, off);
    return COMM_OK;
}

/* Maps a peer's reference into this session: the pointer, checked against the size. */
static comm_status_t resolve(struct comm *c, int peer, uint64_t ref, size_t bytes, uint8_t **out)
{
    int slot = (int)(ref >> REF_SLOT_SHIFT);
    uint64_t off = ref & REF_OFFSET_MASK;
    if (slot <= 0 || slot >= (int)HEX_REG_SLOTS) {
        rt_error(c, COMM_ERR_INVALID, "rank %d: rank %d sent a bad buffer reference %llx", c->rank,
                 peer, (unsigned long long)ref);
        return COMM_ERR_INVALID;
    }
    struct hex_import *m;
    comm_status_t st = hex_mem_import(c, peer, slot, &m);
    if (st != COMM_OK)
        return st;
    if (off > m->bytes || bytes > m->bytes - off) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: rank %d's buffer (%zu bytes) is smaller than offset %llu + %zu", c->rank,
                 peer, m->bytes, (unsigned long long)off, bytes);
        return COMM_ERR_INVALID;
    }
    *out = m->base + off;
    return COMM_OK;
}

/*
 * A peer that failed right after the handshake may free its buffers (comm_destroy)
 * while this rank maps them: its failure, not the missing buffer, is the cause.
 */
static comm_status_t peer_or(struct comm *c, comm_status_t st)
{
    comm_status_t peer = shm_check_peers(c);
    return peer != COMM_OK ? peer : st;
}

static const char *stage_name(uint32_t stage)
{
    return stage == 0 ? "entry fence" : stage == 1 ? "reduction" : "exit fence";
}

/* Turns the op's result into a status and a message naming the session and the fix. */
static comm_status_t report(struct comm *c, const struct hex_op_args *a,
                            const struct hex_op_result *r)
{
    struct hex_comm *hx = hex_of(c);
    const char *stage = stage_name(r->stage);
    switch (r->status) {
    case HEX_OK:
        return COMM_OK;
    case HEX_ERR_TIMEOUT:
        rt_error(c, COMM_ERR_TIMEOUT,
                 "rank %d: the HTP session of rank %d did not reach the %s (sequence %u) "
                 "within %ld ms; a session is stalled or a rank stopped calling: check that "
                 "every rank makes the same calls, or raise ARCOMM_HEX_FENCE_TIMEOUT_MS / "
                 "ARCOMM_TIMEOUT_MS",
                 c->rank, r->peer, stage, r->stage == 0 ? a->seq_entry : a->seq_exit,
                 hx->fence_timeout_ms);
        return COMM_ERR_TIMEOUT;
    case HEX_ERR_PEER:
        if (hx->last_peer_dead) {
            int p = hx->last_peer_dead - 1;
            rt_error(c, COMM_ERR_PEER,
                     "rank %d: peer rank %d (pid %d) exited while this rank's HTP session "
                     "waited at the %s; the job cannot continue",
                     c->rank, p, (int)shm_peer_pid(c, p), stage);
        } else {
            int p = r->peer >= 0 && r->peer < c->nranks ? r->peer : 0;
            int32_t pst = shm_peer_status(c, p);
            if (pst != COMM_OK && p != c->rank) /* the root cause, passed on whole */
                return shm_peer_failed(c, p, pst);
            bool has_msg = pst != COMM_OK;
            rt_error(c, COMM_ERR_PEER,
                     "rank %d: the HTP session of rank %d failed with %s (seen at the %s): %.*s",
                     c->rank, r->peer, rt_status_string((comm_status_t)r->peer_status), stage,
                     SHM_ERRMSG_BYTES,
                     has_msg ? shm_peer_errmsg(c, p) : "(its session status; no message yet)");
        }
        return COMM_ERR_PEER;
    case HEX_ERR_ABORTED:
        rt_error(c, COMM_ERR_ABORTED, "rank %d: %s while the HTP session waited at the %s", c->rank,
                 rt_abort_cause(c), stage);
        return COMM_ERR_ABORTED;
    default:
        if (r->peer == c->rank) {
            rt_error(c, (comm_status_t)r->status,
                     "rank %d: this rank's HTP session is in error (%s) since an earlier "
                     "failure; make a new communicator",
                     c->rank, rt_status_string((comm_status_t)r->status));
            return (comm_status_t)r->status;
        }
        rt_error(c, COMM_ERR_SYSTEM,
                 "rank %d: op_allreduce failed in the %s with DSP status %d (%s): an arcomm "
                 "bug, please report it",
                 c->rank, stage, (int)r->status, rt_status_string((comm_status_t)r->status));
        return COMM_ERR_SYSTEM;
    }
}

static comm_status_t params_for(struct comm *c, const struct coll_call *call,
                                struct hex_op_params *p)
{
    struct hex_comm *hx = hex_of(c);
    struct hex_params_in in = {
        .n_ranks = (uint32_t)c->nranks,
        .rank = (uint32_t)c->rank,
        .dtype = call->dtype == COMM_F32 ? HEX_F32 : HEX_F16,
        .ne0 = call->count,
        .ne1 = 1,
        .session_threads = hx->threads,
        .vtcm_bytes = hx->vtcm_bytes,
    };
    if (call->addend != NULL) {
        if (call->addend_count == call->count) {
            in.add_mode = HEX_ADD_RESIDUAL;
        } else {
            /* A bias row: the tensor is rows of addend_count, sliced by rows. */
            in.add_mode = HEX_ADD_BCAST;
            in.layout_2d = 1;
            in.ne0 = call->addend_count;
            in.ne1 = call->count / call->addend_count;
        }
    }
    int32_t st = hex_params_compute(&in, p);
    if (st == HEX_ERR_NOMEM) {
        rt_error(c, COMM_ERR_NOMEM,
                 "rank %d: the session's VTCM (%u bytes, ARCOMM_HEX_VTCM_BYTES) cannot hold "
                 "this call's buffers even with 128-element blocks (%u threads x %u ranks "
                 "need %u bytes); raise ARCOMM_HEX_VTCM_BYTES or lower ARCOMM_HEX_THREADS",
                 c->rank, hx->vtcm_bytes, p->n_threads, c->nranks, p->vtcm_bytes);
        return COMM_ERR_NOMEM;
    }
    if (st != HEX_OK) {
        rt_error(c, COMM_ERR_UNSUPPORTED,
                 "rank %d: count %zu of %s does not fit the DSP's 32-bit buffers (at most "
                 "4 GiB per tensor)",
                 c->rank, call->count, rt_dtype_name(call->dtype));
        return COMM_ERR_UNSUPPORTED;
    }
    return COMM_OK;
}

static comm_status_t hex_validate(struct comm *c, const struct coll_call *call, const char *fn)
{
    (void)fn;
    if ((call->dtype != COMM_F32 && call->dtype != COMM_F16) || call->op != COMM_SUM) {
        /* Decided by the arguments alone, so every rank answers alike, untouched. */
        rt_error(c, COMM_ERR_UNSUPPORTED,
                 "rank %d: Hexagon sessions reduce f32 and f16 with COMM_SUM only, not %s %s",
                 c->rank, rt_dtype_name(call->dtype), rt_op_name(call->op));
        return COMM_ERR_UNSUPPORTED;
    }
    if (call->stream != NULL) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: stream must be NULL on a Hexagon communicator (calls block)", c->rank);
        return COMM_ERR_INVALID;
    }
    return COMM_OK;
}

/*
 * What the sessions carry in a codec (hex_wire.h): sums, of f32 (bf16) and of f32 and
 * f16 (int8, fp8; wire_applies narrows bf16 to f32).  The DSP's scalar form decodes
 * what wire.c encodes, bit for bit.
 */
static const struct wire_carry hex_wire_carry = {
    .ops = {[WIRE_BF16] = WIRE_OPS_SUM, [WIRE_INT8] = WIRE_OPS_SUM, [WIRE_FP8] = WIRE_OPS_SUM},
};

_Static_assert((int)HEX_WIRE_BF16 == (int)WIRE_BF16 && (int)HEX_WIRE_INT8 == (int)WIRE_INT8 &&
                   (int)HEX_WIRE_FP8 == (int)WIRE_FP8,
               "the DSP's codec numbers are enum wire_codec's");

comm_status_t coll_hexagon_allreduce(struct comm *c, const struct coll_call *call)
{
    struct hex_comm *hx = hex_of(c);
    if (call->count == 0)
        return COMM_OK;
    size_t esize = rt_dtype_size(call->dtype);
    size_t bytes = call->count * esize;
    size_t add_bytes = call->addend ? call->addend_count * esize : 0;

    struct hex_op_args a;
    memset(&a, 0, sizeof(a));
    comm_status_t st = params_for(c, call, &a.p);
    if (st != COMM_OK)
        return st;
    /* The codec: from knobs every rank agreed on at join and the call's count, dtype and
     * op, which the handshake compares: every rank picks the same. */
    enum wire_codec codec = wire_pick(c->knobs.wire, c->knobs.wire_threshold, &hex_wire_carry,
                                      call->dtype, call->op, bytes);
    size_t wbytes = 0;
    if (codec != WIRE_NONE) {
        const struct wire_row *row = wire_row(codec);
        wbytes = wire_bytes(row, call->dtype, call->count);
        /* The DSP's layout is the host's (hex_wire.h against wire.h). */
        if (!hex_wire_applies((uint32_t)codec, a.p.dtype) ||
            hex_wire_bytes((uint32_t)codec, call->count) != wbytes) {
            rt_error(c, COMM_ERR_SYSTEM,
                     "rank %d: the DSP's layout of codec %s disagrees with the host's: an "
                     "arcomm bug, please report it",
                     c->rank, wire_name(codec));
            return COMM_ERR_SYSTEM;
        }
        st = hex_wire_scratch(c, wbytes);
        if (st != COMM_OK)
            return st;
        a.p.codec = (uint32_t)codec;
    }
    struct shm_arrival mine = {
        .count = call->count,
        .dtype = (uint8_t)call->dtype,
        .op = (uint8_t)call->op,
        .path = SHM_PATH_BULK,
        .coll = COLL_ALLREDUCE,
        .flags = SHM_BUF_IN_SEG | (call->addend ? SHM_BUF_ADD : 0u),
        .addend_count = call->addend ? call->addend_count : 0,
    };
    st = own_ref(c, "sendbuf", call->send, bytes, &mine.send);
    if (st == COMM_OK)
        st = own_ref(c, "recvbuf", call->recv, bytes, &mine.recv);
    if (st == COMM_OK && call->addend)
        st = own_ref(c, "addend", call->addend, add_bytes, &mine.addend);
    if (st != COMM_OK)
        return st;

    st = coll_meet(c, &mine, "hexagon allreduce handshake");
    if (st != COMM_OK)
        return st;
    for (int p = 0; p < c->nranks; p++) {
        const struct shm_arrival *pa = shm_arrival_at(c->shm, c->seq, p);
        uint8_t *src, *dst;
        st = resolve(c, p, pa->send, bytes, &src);
        if (st == COMM_OK)
            st = resolve(c, p, pa->recv, bytes, &dst);
        if (st != COMM_OK)
            return peer_or(c, st);
        a.src[p] = src;
        a.dst[p] = dst;
        if (codec != WIRE_NONE) {
            /* Rank p's staging buffer: its registry's wire entry, from offset 0. */
            uint8_t *w;
            st = resolve(c, p, make_ref((int)HEX_WIRE_SLOT, 0), wbytes, &w);
            if (st != COMM_OK)
                return peer_or(c, st);
            a.wire[p] = w;
        }
        a.fence[p] = hx->fence[p];
        if (call->addend != NULL) {
            /* Rank p's output gets rank p's addend: this session reads them all. */
            uint8_t *add;
            st = resolve(c, p, pa->addend, add_bytes, &add);
            if (st != COMM_OK)
                return peer_or(c, st);
            a.addend[p] = add;
        }
    }
    a.seq_entry = hex_seq_next(hx->seq_last);
    a.seq_exit = hex_seq_next(a.seq_entry);
    hx->seq_last = a.seq_exit;
    /* The DSP's encoding: 0 = never; longer limits saturate rather than wrap. */
    a.timeout_ms = hx->fence_timeout_ms < 0             ? 0
                   : hx->fence_timeout_ms == 0          ? 1
                   : hx->fence_timeout_ms >= UINT32_MAX ? UINT32_MAX
                                                        : (uint32_t)hx->fence_timeout_ms;
    if (hx->debug_stall_ms != 0) {
        struct timespec ts = {.tv_sec = hx->debug_stall_ms / 1000,
                              .tv_nsec = (long)(hx->debug_stall_ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
        hx->debug_stall_ms = 0;
    }
    struct hex_op_result r;
    hx->next_hook = rt_wait_hook_first(c, rt_now_ns());
    hex_op_allreduce(hx->session, &a, &r);
    rt_log(c, RT_LOG_TRACE,
           "rank %d: op_allreduce%s count %zu %s, wire %s: rows %u..%u cols %u..%u, %u threads, "
           "block %u, %llu DMA bytes, status %d",
           c->rank, call->addend ? "_add" : "", call->count, rt_dtype_name(call->dtype),
           wire_name(codec), a.p.row_lo, a.p.row_hi, a.p.col_lo, a.p.col_hi, a.p.n_threads,
           a.p.block_elems, (unsigned long long)r.dma_bytes, (int)r.status);
    return report(c, &a, &r);
}

static comm_status_t hex_allreduce(struct comm *c, const struct coll_call *call)
{
    comm_status_t st = coll_hexagon_allreduce(c, call);
    /* A rank that completed this call never fails a peer's. */
    if (st == COMM_OK)
        shm_complete(c);
    return st;
}

/* ARCOMM_PATHS first: the sessions have one path (paths_device.c's Hexagon table), and an
 * item naming another backend's path fails here, before the segment (the string is
 * agreed: every rank fails alike).  Then the knobs as coll_hexagon_knobs resolves them
 * (arinfo's formula too), against this communicator's timeout (the config's, when it set
 * one), then the transport. */
static comm_status_t hex_backend_setup(struct comm *c)
{
    struct coll_paths_overrides ov;
    char why[320];
    comm_status_t st =
        coll_device_paths_parse(COLL_PATHS_HEXAGON, c->knobs.paths, &ov, why, sizeof(why));
    if (st != COMM_OK) {
        rt_error(c, st, "rank %d: %s", c->rank, why);
        return st;
    }
    struct rt_knobs k = c->knobs;
    k.timeout_ms = c->timeout_ms;
    coll_hexagon_knobs.used(&k, c->topo, c->nranks, false);
    c->knobs.hex.fence_timeout_ms = k.hex.fence_timeout_ms;
    c->knobs.bf16_threshold = k.bf16_threshold;
    c->knobs.wire_threshold = k.wire_threshold;
    return hex_setup(c);
}

/* The Hexagon backend (its table here, beside its allreduce). */
const struct backend_ops coll_hexagon_backend = {
    .name = "hexagon",
    .device = COMM_DEVICE_HEXAGON,
    .knobs = &coll_hexagon_knobs,
    .probe = hex_probe,
    .setup = hex_backend_setup,
    .teardown = hex_teardown,
    .resolve_knobs = NULL, /* resolved before setup (above), taken into struct hex_comm */
    .validate = hex_validate,
    .allreduce = hex_allreduce,
    .allreduce_add = hex_allreduce,
    .barrier = coll_host_barrier,
    /* No broadcast, reduce, allgather, reduce_scatter or alltoall on the sessions yet:
     * those entries stay NULL, and the runtime answers COMM_ERR_UNSUPPORTED. */
    .publish_failure = hex_publish_failure,
    .wake = shm_wake,
    .mem_alloc = hex_mem_alloc,
    .mem_free = hex_mem_free,
};
