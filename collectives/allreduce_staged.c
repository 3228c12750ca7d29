/* SPDX-License-Identifier: MIT */
/*
 * The staged bulk path, for process ranks whose buffers peers cannot reach: a
 * reduce-scatter and an all-gather through the staging slots, in rounds.  Round k takes
 * chunk k of the message (ARCOMM_STAGED_CHUNK_BYTES per rank, sized from the caches:
 * coll_staged_chunk_bytes) and every rank owns its slice of that chunk, so that a
 * round reads and writes one contiguous stretch of each buffer and the slots of all
 * ranks in a round stay in the caches.  Each rank's slot holds one region per rank:
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
    bool aligned;               /* slices start at 64-byte multiples of the buffers */
    size_t esize;               /* of the user's dtype */
    size_t res_esize;           /* of a result region: f32 accumulators for f16/bf16 */
    size_t region_bytes;        /* a region's room (a multiple of 64) */
    size_t max_slice;           /* elements a region holds */
    size_t chunk;               /* elements of the message per round */
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

/* Element range of rank p's slice of round k's chunk ([lo, lo) when it is empty): the
 * chunk cut in n slices of ceil(len / n) elements, rounded up to whole lines where the
 * regions allow. */
static void chunk_range(const struct staged *st, int p, size_t k, size_t *lo, size_t *hi)
{
    size_t count = st->call->count, base = k * st->chunk;
    size_t len = count - base < st->chunk ? count - base : st->chunk;
    size_t n = (size_t)st->c->nranks;
    size_t s = (len + n - 1) / n;
    size_t align = 64 / st->esize;
    if (st->aligned)
        s = (s + align - 1) / align * align;
    if (s > st->max_slice)
        s = st->max_slice;
    size_t l = (size_t)p * s, h = l + s;
    *lo = base + (l < len ? l : len);
    *hi = base + (h < len ? h : len);
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

size_t coll_staged_chunk_bytes(const struct rt_knobs *k, const struct rt_topo_summary *topo,
                               int nranks, size_t slot_bytes)
{
    size_t n = nranks > 0 ? (size_t)nranks : 1;
    /* What the slots hold: a region of slot / n per rank. */
    size_t most = slot_bytes / n / 64 * 64 * n;
    if (k->staged_chunk_bytes != RT_SIZE_AUTO && k->staged_chunk_bytes != RT_SIZE_OFF)
        return k->staged_chunk_bytes < most ? k->staged_chunk_bytes : most;
    if (topo == NULL || topo->l2_bytes == 0 || topo->l3_bytes == 0)
        return most; /* the slots' whole room, as before the caches were known */
    /*
     * A round's chunk C (bytes per rank): every rank stages C (n - 1) / n bytes into its
     * slot and gathers as much out of the peers', and the round before still sits in the
     * other slot: about 2 n C bytes of slots in flight across the ranks, which should
     * keep to a quarter of the last-level cache shared with the inputs and outputs
     * streaming past (C <= L3 / 4n); and each rank's own stretch of input, output and
     * slot should fit its L2 (C <= L2).  At 2 ranks on the development VM (L2 1-2 MiB,
     * L3 32 MiB or more) this is the slots' room, today's measured geometry; at 16
     * ranks of a 16-core Xeon (L3 32-60 MiB) 512 KiB-1 MiB, where the slots' room,
     * 1 MiB per round, put 32 MiB of slots in flight.  Not below 64 KiB: the two
     * synchronisations of a round cost a few microseconds at 16 ranks.
     */
    size_t c = topo->l3_bytes / (4 * n);
    if (c > topo->l2_bytes)
        c = topo->l2_bytes;
    if (c < (64u << 10))
        c = 64u << 10;
    return c < most ? c : most;
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
     * Chunks and slices start at 64-byte multiples of the buffers (chunk_range), so one
     * shift per rank serves every round; a peer's word is masked to 0..63. */
    bool co = !narrow && st.esize == st.res_esize && st.region_bytes >= 128;
    size_t align = 64 / st.esize;
    st.max_slice = (st.region_bytes - (co ? 64 : 0)) / wide;
    st.aligned = st.max_slice >= align;
    if (st.aligned)
        st.max_slice = st.max_slice / align * align;
    co = co && st.aligned;
    for (int p = 0; p < c->nranks && co; p++) {
        size_t a = shm_arrival_at(c->shm, c->seq, p)->align & 63;
        st.shift[p] = a % st.esize == 0 ? a : 0;
    }
    /* A round's chunk: ARCOMM_STAGED_CHUNK_BYTES (resolved for this host and rank count),
     * at most what the regions hold, whole lines. */
    size_t n = (size_t)c->nranks;
    size_t want = coll_staged_chunk_bytes(&c->knobs, c->topo, c->nranks, c->shm->slot_bytes);
    st.chunk = want / st.esize;
    if (st.chunk > n * st.max_slice)
        st.chunk = n * st.max_slice;
    if (st.aligned)
        st.chunk = st.chunk < align ? align : st.chunk / align * align;
    if (st.chunk == 0)
        st.chunk = 1;
    size_t rounds = (call->count + st.chunk - 1) / st.chunk;
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
