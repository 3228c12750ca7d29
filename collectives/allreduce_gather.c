/* SPDX-License-Identifier: MIT */
/*
 * The gather path (small messages at many ranks, ARCOMM_SMALL_ALGO): the ranks gather
 * every rank's raw contribution with a dissemination allgather, then each reduces all n
 * of them locally in rank order.  On the flat flag path (allreduce_flag.c) every rank
 * reads every peer's line: n - 1 misses on lines that n - 1 readers share.  Here rank r
 * reads one peer per round, ceil(log2 n) rounds: in round k it copies, from rank
 * r - 2^k, the contributions of the 2^k ranks before that one (fewer in the last round
 * when n is no power of two), which that rank gathered in its earlier rounds.
 *
 * A tree or a recursive exchange of partial sums would change the order of the
 * additions; raw contributions do not: element i is ((x0 + x1) + x2) + ... in the
 * accumulation type, rounded once, as on the flat path, the same bits on every rank
 * (and the same bits as the flat path gives).
 *
 * Where it lives, in this rank's staging slot of the call (slot_bytes each):
 *
 *   0        this rank's own message, where the flat path reads it (or in the arrival
 *            line when it is inline), so that a peer that took the flat path still reads
 *            the right input (it cannot: ARCOMM_SMALL_ALGO differs; see mark below)
 *   base     one line: the round word, (seq << 32) | rounds done, written by the owner
 *   +64      n heads of 16 bytes: each rank's count, dtype, op, kind and flags
 *   heads'   n messages of stride bytes, rank p's at index p
 *
 * Every rank keeps each contribution at its rank's index, so that what a peer reads in
 * round k (the indices r - 2^(k+1) + 1 .. r - 2^k of rank q = r - 2^k) never overlaps
 * what q writes in its own round k (q - 2^(k+1) + 1 .. q - 2^k), modulo n too.
 *
 * Round 0 reads the partner's arrival line (the word every host call publishes, with its
 * count, dtype, op and kind), so a partner in another call or on another path is found
 * there; after the last round every rank holds every rank's head and compares them all
 * with its own, as the flat path compares the arrival words: a mismatch anywhere fails
 * the call on every rank with COMM_ERR_MISMATCH (the message comes from the flat check,
 * coll_wait_arrivals, over the arrival words, which every rank has published by then).
 *
 * Slot reuse: a rank that completed the dissemination has heard, through the rounds,
 * from every rank in this call, so every rank has finished the previous one; the slot
 * used two slot-using calls ago is no longer read by anyone (as for the flat path).
 */
#include "coll.h"
#include "reduce.h"

#include <string.h>

/* Published in the arrival's align field (which the flag path does not use otherwise):
 * this rank took the gather path.  A partner without it took the flat path: the ranks
 * disagree on ARCOMM_SMALL_ALGO or ARCOMM_SMALL_GATHER_MAX. */
#define GATHER_MARK 0x47415448u /* "GATH" */

/* What every rank's contribution carries, for the agreement check. */
struct gather_head {
    uint64_t count;
    uint8_t dtype, op, coll, pad;
    uint32_t flags; /* SHM_BUF_ADD | SHM_BUF_NARROW | SHM_BUF_INLINE */
};
_Static_assert(sizeof(struct gather_head) == 16, "heads are 16 bytes");

/* The layout of one call's gather area in a slot. */
struct gather_layout {
    size_t base;   /* offset of the round word's line */
    size_t heads;  /* offset of head 0 */
    size_t data;   /* offset of message 0 */
    size_t stride; /* bytes between messages */
    size_t end;    /* one past the last byte */
};

static struct gather_layout gather_layout(size_t staged, int nranks)
{
    struct gather_layout l;
    size_t n = (size_t)nranks;
    l.base = (staged + 63) / 64 * 64;
    l.heads = l.base + 64;
    l.data = l.heads + (n * sizeof(struct gather_head) + 63) / 64 * 64;
    l.stride = (staged + 15) / 16 * 16;
    l.end = l.data + n * l.stride;
    return l;
}

bool coll_small_gather(const struct rt_knobs *k, int nranks, size_t slot_bytes, size_t staged)
{
    /*
     * auto: the flat path.  Measured on 16 cores (docs/PERFORMANCE.md, "16 ranks on 16
     * cores", small allreduce against the rank count): the gather path's log2 n dependent
     * rounds lost to the flat path's overlapping reads at 4, 8 and 16 ranks, thread and
     * process ranks, 4 B-1 KiB (2.59 against 0.82 us at 4 B, 16 ranks).  More ranks than
     * that were not measured; ARCOMM_SMALL_ALGO=gather stays for such hosts.
     */
    const char *a = k->small_alg;
    bool gather = a[0] == 'g';
    if (!gather || nranks < 2 || staged == 0 || k->small_gather_max == RT_SIZE_OFF ||
        staged > k->small_gather_max)
        return false;
    return gather_layout(staged, nranks).end <= slot_bytes;
}

struct gather_wait {
    const struct shm_arrival *mine;
    uint32_t seq;
    int partner;
    uint32_t rounds;  /* the partner's rounds done that this rank waits for */
    const char *slot; /* the partner's slot */
    size_t base;      /* offset of its round word */
    bool fallback;    /* the partner found a mismatch: check every arrival */
    bool foreign;     /* the partner took the flat path */
};

static bool arrival_agrees(const struct shm_arrival *a, const struct shm_arrival *mine)
{
    return a->count == mine->count && a->dtype == mine->dtype && a->op == mine->op &&
           a->path == mine->path && a->coll == mine->coll && a->root == mine->root &&
           (a->flags & (SHM_BUF_ADD | SHM_BUF_INLINE)) ==
               (mine->flags & (SHM_BUF_ADD | SHM_BUF_INLINE)) &&
           (!(mine->flags & SHM_BUF_ADD) || a->addend_count == mine->addend_count);
}

static int gather_ready(struct comm *c, void *arg)
{
    struct gather_wait *w = arg;
    const struct shm_arrival *a = shm_arrival_at(c->shm, w->seq, w->partner);
    if (w->rounds > 0) {
        const _Atomic uint64_t *word = (const _Atomic uint64_t *)(w->slot + w->base);
        uint64_t v = atomic_load_explicit(word, memory_order_acquire);
        if ((uint32_t)(v >> 32) == w->seq && (uint32_t)v >= w->rounds)
            return 1;
    } else if (shm_seq_reached(atomic_load_explicit(&a->seq, memory_order_acquire), w->seq)) {
        int32_t st = atomic_load_explicit(&a->status, memory_order_relaxed);
        if (st != COMM_OK && st != COMM_ERR_MISMATCH)
            return shm_peer_failed(c, w->partner, st);
        if (!arrival_agrees(a, w->mine)) {
            w->fallback = true;
            return 1;
        }
        if (a->align != GATHER_MARK) {
            w->foreign = true;
            return 1;
        }
        return 1;
    }
    /* A partner that found a mismatch stops there: find it too, from the arrivals. */
    if (shm_peer_status(c, w->partner) == COMM_ERR_MISMATCH) {
        w->fallback = true;
        return 1;
    }
    return 0;
}

static bool gather_behind(struct comm *c, void *arg, int p)
{
    (void)c;
    const struct gather_wait *w = arg;
    return p == w->partner; /* the one peer this rank waits for */
}

/* Copies heads and messages of the m ranks ending at index last (mod n) from the
 * partner's area (src) into this rank's (dst). */
static void copy_span(char *dst, const char *src, const struct gather_layout *l, int n, int last,
                      int m)
{
    int first = ((last - m + 1) % n + n) % n;
    while (m > 0) {
        int len = first + m <= n ? m : n - first;
        memcpy(dst + l->heads + (size_t)first * sizeof(struct gather_head),
               src + l->heads + (size_t)first * sizeof(struct gather_head),
               (size_t)len * sizeof(struct gather_head));
        memcpy(dst + l->data + (size_t)first * l->stride, src + l->data + (size_t)first * l->stride,
               (size_t)len * l->stride);
        m -= len;
        first = 0;
    }
}

static void publish_rounds(struct comm *c, char *mine, const struct gather_layout *l,
                           uint32_t rounds)
{
    _Atomic uint64_t *word = (_Atomic uint64_t *)(mine + l->base);
    atomic_exchange(word, (uint64_t)c->seq << 32 | rounds);
    shm_ring_after_rmw(c->shm);
}

/* Some rank's head differs from this rank's: the arrival words say how, on every rank. */
static comm_status_t gather_mismatch(struct comm *c, const char *what)
{
    comm_status_t st = coll_wait_arrivals(c, what);
    if (st != COMM_OK)
        return st;
    rt_error(c, COMM_ERR_MISMATCH,
             "rank %d: ranks disagree in call %u on the gather path (%s): check that every rank "
             "makes the same calls with the same count, dtype and op",
             c->rank, c->seq, what);
    return COMM_ERR_MISMATCH;
}

static comm_status_t gather_foreign(struct comm *c, int partner)
{
    rt_error(c, COMM_ERR_MISMATCH,
             "rank %d: rank %d took the flat flag path in call %u where this rank took the "
             "gather path: set the same ARCOMM_SMALL_ALGO and ARCOMM_SMALL_GATHER_MAX on every "
             "rank",
             c->rank, partner, c->seq);
    return COMM_ERR_MISMATCH;
}

static comm_status_t allreduce_gather(struct comm *c, const struct coll_call *call, bool narrow)
{
    static const char what[] = "allreduce (gather path)";
    int n = c->nranks, r = c->rank;
    size_t esize = rt_dtype_size(narrow ? COMM_BF16 : call->dtype);
    size_t staged = call->count * esize;
    bool inline_msg = !narrow && call->addend == NULL && coll_flag_inline(staged);
    uint32_t slot = coll_next_stage_slot(c);
    struct gather_layout l = gather_layout(staged, n);
    char *area = shm_slot(c->shm, r, slot);

    struct shm_arrival arrival = coll_arrival_of(call, SHM_PATH_FLAG);
    arrival.flags = (narrow ? SHM_BUF_NARROW : 0u) | (call->addend ? SHM_BUF_ADD : 0u) |
                    (inline_msg ? SHM_BUF_INLINE : 0u);
    arrival.align = GATHER_MARK;
    if (call->addend)
        arrival.addend_count = call->addend_count;
    /* The own contribution at its index, and where a flat peer would read it. */
    char *own = area + l.data + (size_t)r * l.stride;
    if (narrow)
        coll_f32_to_bf16((uint16_t *)own, call->send, call->count);
    else
        memcpy(own, call->send, staged);
    memcpy(inline_msg ? (void *)arrival.data : (void *)area, own, staged);
    struct gather_head head = {
        .count = arrival.count,
        .dtype = arrival.dtype,
        .op = arrival.op,
        .coll = arrival.coll,
        .flags = arrival.flags,
    };
    memcpy(area + l.heads + (size_t)r * sizeof(head), &head, sizeof(head));
    /* The arrival is round 0's word: the own contribution is in place before it. */
    coll_arrive(c, &arrival);

    const struct shm_arrival *mine = shm_arrival_at(c->shm, c->seq, r);
    uint32_t rounds = 0;
    for (int have = 1; have < n; rounds++) {
        int q = ((r - have) % n + n) % n;
        int m = have < n - have ? have : n - have;
        struct gather_wait w = {
            .mine = mine,
            .seq = c->seq,
            .partner = q,
            .rounds = rounds,
            .slot = shm_slot(c->shm, q, slot),
            .base = l.base,
        };
        comm_status_t st = shm_wait_for(c, gather_ready, gather_behind, &w, what, "arrive");
        if (st != COMM_OK)
            return st;
        if (w.fallback)
            return gather_mismatch(c, what);
        if (w.foreign)
            return gather_foreign(c, q);
        if (rounds == 0) {
            /* The partner's own message is where the flat path reads it, its head in
             * its arrival line (checked above). */
            const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, q);
            const void *from = a->flags & SHM_BUF_INLINE ? (const void *)a->data : w.slot;
            memcpy(area + l.data + (size_t)q * l.stride, from, staged);
            struct gather_head h = {
                .count = a->count,
                .dtype = a->dtype,
                .op = a->op,
                .coll = a->coll,
                .flags = a->flags & (SHM_BUF_ADD | SHM_BUF_NARROW | SHM_BUF_INLINE),
            };
            memcpy(area + l.heads + (size_t)q * sizeof(h), &h, sizeof(h));
        } else {
            copy_span(area, w.slot, &l, n, q, m);
        }
        have += m;
        /* The last round's count is read by no one. */
        if (have < n)
            publish_rounds(c, area, &l, rounds + 1);
    }

    /* Every rank's head against this rank's: the flat path's agreement check. */
    for (int p = 0; p < n; p++) {
        const struct gather_head *h =
            (const struct gather_head *)(area + l.heads + (size_t)p * sizeof(head));
        if (h->count != head.count || h->dtype != head.dtype || h->op != head.op ||
            h->coll != head.coll || h->flags != head.flags)
            return gather_mismatch(c, what);
    }
    if (call->addend) {
        /* addend_count is checked where an addend is: on the arrival words. */
        for (int p = 0; p < n; p++)
            if (shm_arrival_at(c->shm, c->seq, p)->addend_count != call->addend_count)
                return gather_mismatch(c, what);
    }

    const void *src[n];
    for (int p = 0; p < n; p++)
        src[p] = p == r && !narrow ? call->send : area + l.data + (size_t)p * l.stride;
    void *dst[1] = {call->recv};
    const void *addend[1] = {call->addend};
    struct coll_reduce_args args = {
        .dst = dst,
        .ndst = 1,
        .dst_dtype = call->dtype,
        .src = src,
        .nsrc = n,
        .src_dtype = narrow ? COMM_BF16 : call->dtype,
        .count = call->count,
        .op = call->op,
        .avg_n = n,
        .addend = call->addend ? addend : NULL,
        .addend_count = call->addend_count,
    };
    coll_reduce(&args);
    return COMM_OK;
}

comm_status_t coll_allreduce_small(struct comm *c, const struct coll_call *call, bool narrow)
{
    size_t esize = rt_dtype_size(narrow ? COMM_BF16 : call->dtype);
    if (coll_small_gather(&c->knobs, c->nranks, c->shm->slot_bytes, call->count * esize))
        return allreduce_gather(c, call, narrow);
    return coll_allreduce_flag(c, call, narrow);
}
