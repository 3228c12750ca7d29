/* SPDX-License-Identifier: MIT */
/*
 * The staged bulk path, for process ranks whose buffers peers cannot reach: a
 * reduce-scatter and an all-gather through the staging slots, in rounds.  In round k
 * every rank owns chunk k of its slice.  Each rank's slot holds one region per rank:
 *
 *   1. stage: copy my input's chunk of every peer's slice into my region for that peer
 *   2. sync
 *   3. reduce my chunk: my own input plus every peer's region for me (rank order), into
 *      my output and into my own region (the result for the peers)
 *   4. sync
 *   5. gather: copy every peer's result region into my output
 *
 * Rounds alternate between the two slots: a slot is written again two phases after it
 * was read, and a phase ends only when every peer has entered the next one.  A rank
 * moves 2x its bytes through memory per round (stage + gather), less than a staged
 * copy of the whole input, and the own slice is never copied at all.
 *
 * The regions for rank p start at p's recvbuf address mod 64 (published in its
 * arrival), so that the reduce of step 3 runs on co-aligned pointers: malloc'd and
 * numpy buffers start 16 bytes past a line, and vector loads and stores on regions
 * aligned otherwise split cache lines (5-9% of the time at 4-64 MiB).
 */
#include "host.h"
#include "reduce.h"

#include <stdlib.h>
#include <string.h>

struct staged {
    struct comm *c;
    const struct coll_call *call;
    bool narrow;
    size_t esize;        /* of the user's dtype */
    size_t res_esize;    /* of a result region: f32 accumulators for f16/bf16 */
    size_t region_bytes; /* a region's room (a multiple of 64) */
    size_t chunk;        /* elements of one region */
    size_t lo[RT_MAX_RANKS], hi[RT_MAX_RANKS];
    size_t shift[RT_MAX_RANKS]; /* bytes: where the regions for rank p start in a region */
};

/* Regions are sized for the wider of an input element and a result element. */
static void *region(const struct staged *st, int owner, uint32_t slot, int p)
{
    return (char *)shm_slot(st->c->shm, owner, slot) + (size_t)p * st->region_bytes + st->shift[p];
}

/* f16/bf16 results travel as their f32 accumulators (after AVG's division), so that
 * every rank adds its own addend and rounds once, and all ranks round the same value
 * the same way.  Other dtypes' results travel as they are, op and division done. */
static bool acc_results(const struct staged *st)
{
    return st->call->dtype == COMM_F16 || st->call->dtype == COMM_BF16;
}

/* Element range of rank p's chunk in round k ([lo, lo) when p's slice is done). */
static void chunk_range(const struct staged *st, int p, size_t k, size_t *lo, size_t *hi)
{
    size_t l = st->lo[p] + k * st->chunk;
    *lo = l < st->hi[p] ? l : st->hi[p];
    *hi = st->hi[p] - *lo < st->chunk ? st->hi[p] : *lo + st->chunk;
}

static void stage_out(const struct staged *st, uint32_t slot, size_t k)
{
    const struct comm *c = st->c;
    for (int p = 0; p < c->nranks; p++) {
        size_t lo, hi;
        chunk_range(st, p, k, &lo, &hi);
        if (p == c->rank || hi == lo)
            continue;
        const char *from = (const char *)st->call->send + lo * st->esize;
        if (st->narrow)
            coll_f32_to_bf16(region(st, c->rank, slot, p), (const float *)from, hi - lo);
        else
            memcpy(region(st, c->rank, slot, p), from, (hi - lo) * st->esize);
    }
}

static void reduce_own(const struct staged *st, uint32_t slot, size_t k)
{
    struct comm *c = st->c;
    const struct coll_call *call = st->call;
    size_t lo, hi;
    chunk_range(st, c->rank, k, &lo, &hi);
    if (hi == lo)
        return;
    const void *src[c->nranks];
    for (int p = 0; p < c->nranks; p++)
        src[p] = region(st, p, slot, c->rank);
    if (st->narrow) {
        /* Own contribution rounded through bf16 like everyone else's wire values. */
        coll_f32_to_bf16(coll_host_of(c)->scratch, (const float *)call->send + lo, hi - lo);
        src[c->rank] = coll_host_of(c)->scratch;
    } else {
        src[c->rank] = (const char *)call->send + lo * st->esize;
    }
    void *dst[2] = {(char *)call->recv + lo * st->esize, region(st, c->rank, slot, c->rank)};
    const void *addend[2] = {call->addend, NULL};
    struct coll_reduce_args args = {
        .dst = dst,
        .ndst = acc_results(st) ? 1 : 2,
        .acc_out = acc_results(st) ? region(st, c->rank, slot, c->rank) : NULL,
        .dst_dtype = call->dtype,
        .src = src,
        .nsrc = c->nranks,
        .src_dtype = st->narrow ? COMM_BF16 : call->dtype,
        .count = hi - lo,
        .op = call->op,
        .avg_n = c->nranks,
        .addend = call->addend ? addend : NULL,
        .addend_count = call->addend_count,
        .offset = lo,
    };
    coll_reduce(&args);
}

static void gather(const struct staged *st, uint32_t slot, size_t k)
{
    const struct comm *c = st->c;
    const struct coll_call *call = st->call;
    for (int p = 0; p < c->nranks; p++) {
        size_t lo, hi;
        chunk_range(st, p, k, &lo, &hi);
        if (p == c->rank || hi == lo)
            continue;
        void *to = (char *)call->recv + lo * st->esize;
        const void *from = region(st, p, slot, p);
        if (call->addend == NULL && !acc_results(st)) {
            memcpy(to, from, (hi - lo) * st->esize);
            continue;
        }
        void *dst[1] = {to};
        const void *src[1] = {from};
        const void *addend[1] = {call->addend};
        struct coll_reduce_args args = {
            .dst = dst,
            .ndst = 1,
            .dst_dtype = call->dtype,
            .src = src,
            .nsrc = 1,
            .src_dtype = acc_results(st) ? COMM_F32 : call->dtype,
            .count = hi - lo,
            .op = COMM_SUM, /* the op is done: accumulators are only narrowed */
            .addend = call->addend ? addend : NULL,
            .addend_count = call->addend_count,
            .offset = lo,
        };
        coll_reduce(&args);
    }
}

comm_status_t coll_allreduce_staged(struct comm *c, const struct coll_call *call, bool narrow)
{
    struct staged st = {
        .c = c,
        .call = call,
        .narrow = narrow,
        .esize = rt_dtype_size(call->dtype),
    };
    st.res_esize = acc_results(&st) ? sizeof(float) : st.esize;
    /* One region per rank in a slot; 64-byte multiples keep regions on their own lines. */
    st.region_bytes = c->shm->slot_bytes / (size_t)c->nranks / 64 * 64;
    size_t wide = st.esize > st.res_esize ? st.esize : st.res_esize;
    /* Regions at their reader's alignment where they hold the user's elements (not the
     * bf16 wire or f32 accumulators), 64 bytes of a region's room kept for the shift.
     * Slices and chunks start at 64-byte multiples of the buffers (coll_slice, chunk),
     * so one shift per rank serves every round; a peer's word is masked to 0..63. */
    bool co = !narrow && st.esize == st.res_esize && st.region_bytes >= 128;
    st.chunk = (st.region_bytes - (co ? 64 : 0)) / wide;
    for (int p = 0; p < c->nranks && co; p++) {
        size_t a = shm_arrival_at(c->shm, c->seq, p)->align & 63;
        st.shift[p] = a % st.esize == 0 ? a : 0;
    }
    size_t longest = 0;
    for (int p = 0; p < c->nranks; p++) {
        coll_slice(call->count, st.esize, c->nranks, p, &st.lo[p], &st.hi[p]);
        if (st.hi[p] - st.lo[p] > longest)
            longest = st.hi[p] - st.lo[p];
    }
    size_t rounds = (longest + st.chunk - 1) / st.chunk;
    if (narrow && coll_host_of(c)->scratch == NULL) {
        coll_host_of(c)->scratch = malloc(c->shm->slot_bytes);
        if (coll_host_of(c)->scratch == NULL) {
            rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory for a %llu-byte scratch buffer",
                     c->rank, (unsigned long long)c->shm->slot_bytes);
            return COMM_ERR_NOMEM;
        }
    }
    comm_status_t status = COMM_OK;
    for (size_t k = 0; k < rounds && status == COMM_OK; k++) {
        uint32_t slot = coll_next_stage_slot(c);
        stage_out(&st, slot, k);
        shm_progress_publish(c);
        status = shm_progress_wait_all(c, "allreduce (staged path, reduce-scatter)");
        if (status != COMM_OK)
            break;
        reduce_own(&st, slot, k);
        shm_progress_publish(c);
        status = shm_progress_wait_all(c, "allreduce (staged path, all-gather)");
        if (status != COMM_OK)
            break;
        gather(&st, slot, k);
    }
    return status;
}
