/* SPDX-License-Identifier: MIT */
/*
 * The eager broadcast (ARCOMM_BCAST_EAGER bytes; off unless set, libarcomm_pmpi sets it):
 * MPI's semantics for small broadcasts on the host.  The root writes its call and its
 * message into the next entry of its own eager ring (struct shm_eager) and returns
 * without waiting for anyone; every other rank waits for that entry, checks the root's
 * call against its own before writing a byte of its buffer, copies and completes.
 *
 * A root runs up to SHM_EAGER_ENTRIES calls ahead: it reuses an entry once every peer
 * completed the call that last wrote it, which it reads from the peers' completed words
 * only when what it saw last says otherwise (a miss every few calls, not every call).
 * Any other call after an eager one first waits until every peer completed everything
 * before it (coll_settle): the arrival words and the staging slots are then as free as
 * after any call that synchronises.
 *
 * What MPI allows and arcomm's own rule does not: the root returns COMM_OK before the
 * others checked the call.  A disagreement fails the other ranks with MISMATCH, and
 * reaches the root at a later call on the communicator (COMM_ERR_PEER, naming the rank
 * that found it and what differed): the first after the failure was published (every
 * publication rings the doorbell, which the root looks at in each call), at the latest
 * the first that waits for that rank.  A rank that makes a call of another kind where
 * the root made an eager broadcast, or the other way round, sees the other's word and
 * fails with MISMATCH too.
 *
 * The ring machinery here (claiming an entry, posting it, waiting for a peer's, the
 * mismatch) is also the eager reduce's (reduce_eager.c): the rings, the call count and
 * the settling are the eager calls', whichever collective they are.
 */
#include "coll.h"

#include <string.h>

_Static_assert(SHM_EAGER_BYTES == 512, "ARCOMM_BCAST_EAGER's range (knobs.h) ends at the entry");

bool coll_bcast_eager_takes(const struct comm *c, const struct coll_call *call)
{
    size_t max = c->knobs.bcast_eager;
    return max != RT_SIZE_OFF && c->nranks > 1 && call->count > 0 &&
           call->count <= max / rt_dtype_size(call->dtype);
}

/* Every peer completed call upto (*arg).  A peer that failed instead fails the wait, a
 * MISMATCH too (which the wait's own check leaves to the handshake that finds it): the
 * peer found it in an eager broadcast this rank returned from. */
static int peers_completed(struct comm *c, void *arg)
{
    uint32_t upto = *(const uint32_t *)arg;
    for (int p = 0; p < c->nranks; p++) {
        if (p == c->rank || shm_peer_completed(c->shm, p, upto))
            continue;
        int32_t st = shm_peer_status(c, p);
        return st != COMM_OK ? shm_peer_failed(c, p, st) : 0;
    }
    return 1;
}

static bool peer_not_completed(struct comm *c, void *arg, int p)
{
    return !shm_peer_completed(c->shm, p, *(const uint32_t *)arg);
}

static comm_status_t wait_completed(struct comm *c, uint32_t upto, const char *what)
{
    return shm_wait_for(c, peers_completed, peer_not_completed, &upto, what,
                        "complete the eager call");
}

comm_status_t coll_settle_wait(struct comm *c)
{
    comm_status_t st = wait_completed(c, c->seq - 1, "the eager calls before this call");
    if (st == COMM_OK)
        c->shm->eager_prev = false;
    return st;
}

/*
 * Has every peer completed call?  From what this rank saw last when that says so (valid
 * while within 2^30 calls of now), else from the peers' words, remembering the least.
 */
static bool seen_completed(struct comm *c, uint32_t call)
{
    struct shm_comm *s = c->shm;
    if (c->seq - s->eager_done < (1u << 30) && shm_seq_reached(s->eager_done, call + 1))
        return true;
    uint32_t least = c->seq + 1;
    for (int p = 0; p < c->nranks; p++) {
        if (p == c->rank)
            continue;
        uint32_t v = atomic_load_explicit(&s->ranks[p].completed, memory_order_acquire);
        if ((int32_t)(v - least) < 0)
            least = v;
    }
    s->eager_done = least;
    return shm_seq_reached(least, call + 1);
}

/* A failure a peer published since the root last looked (publishing rings the bell). */
comm_status_t coll_eager_peers_failed(struct comm *c)
{
    struct shm_comm *s = c->shm;
    uint32_t bell = atomic_load_explicit(&s->hdr->bell, memory_order_acquire);
    if (bell == s->eager_bell)
        return COMM_OK;
    for (int p = 0; p < c->nranks; p++) {
        int32_t st = p == c->rank ? COMM_OK : shm_peer_status(c, p);
        /* A MISMATCH too: the peer found it in an eager call this rank returned from. */
        if (st != COMM_OK)
            return shm_peer_failed(c, p, st);
    }
    s->eager_bell = bell;
    return COMM_OK;
}

struct shm_eager *coll_eager_claim(struct comm *c, const char *what, comm_status_t *status)
{
    struct shm_comm *s = c->shm;
    uint64_t n = s->eager_calls;
    struct shm_eager *e = shm_eager_at(s, c->rank, n);
    /* This rank alone writes its ring: what it reads of the entry is its own. */
    if (atomic_load_explicit(&e->tag, memory_order_relaxed) != 0 && !seen_completed(c, e->seq)) {
        /* Full: wait until half the ring is free too (the entry half a ring on, when this
         * rank used it later than this one), so that the peers' completed words are read
         * once every half ring, not in every call (a miss a call on either side, root and
         * peer in lockstep: 0.20 us a call against 0.06-0.08 on the 2-core VM). */
        const struct shm_eager *half = shm_eager_at(s, c->rank, n + SHM_EAGER_ENTRIES / 2);
        uint32_t upto = e->seq;
        if (atomic_load_explicit(&half->tag, memory_order_relaxed) != 0 &&
            (int32_t)(half->seq - upto) > 0)
            upto = half->seq;
        comm_status_t st = wait_completed(c, upto, what);
        if (st != COMM_OK) {
            *status = st;
            return NULL;
        }
        s->eager_done = upto + 1;
    }
    return e;
}

void coll_eager_post(struct comm *c, struct shm_eager *e, const struct coll_call *call,
                     const void *data, size_t bytes)
{
    e->count = call->count;
    e->seq = c->seq;
    e->root = call->root;
    e->dtype = (uint8_t)call->dtype;
    e->coll = (uint8_t)call->kind;
    e->op = call->kind == COLL_REDUCE ? (uint8_t)call->op : 0;
    if (bytes)
        memcpy(e->data, data, bytes);
    /* Release: the entry before the tag.  No fence before looking for sleepers (a fifth
     * of the call's time here): a peer that fell asleep just then sleeps on for at most
     * COLL_EAGER_WAKE_NS. */
    atomic_store_explicit(&e->tag, c->shm->eager_calls + 1, memory_order_release);
    shm_ring_lax(c->shm);
    shm_note_cpu(c);
}

static comm_status_t root_side(struct comm *c, const struct coll_call *call, size_t bytes)
{
    comm_status_t st = coll_eager_peers_failed(c);
    if (st != COMM_OK)
        return st;
    struct shm_eager *e = coll_eager_claim(c, "broadcast (eager path, the ring is full)", &st);
    if (e == NULL)
        return st;
    coll_eager_post(c, e, call, call->send, bytes);
    /* After the tag: a peer that sees this rank completed the call sees its entry. */
    shm_complete(c);
    if (call->recv != call->send)
        memcpy(call->recv, call->send, bytes);
    return COMM_OK;
}

struct entry_wait {
    const struct shm_eager *e;
    uint64_t tag;
    int root;
    unsigned polls;
    bool other; /* the root made another call here */
};

/* Polls of the entry alone between looks at the root's other words: a waiter polling the
 * root's arrival and completed words in every poll takes them from the root's cache just
 * before the root writes them (two misses a call for the root). */
#define ENTRY_POLLS 64u

static int entry_ready(struct comm *c, void *arg)
{
    struct entry_wait *w = arg;
    if (atomic_load_explicit(&w->e->tag, memory_order_acquire) == w->tag)
        return 1;
    if (w->polls++ % ENTRY_POLLS != ENTRY_POLLS - 1)
        return 0;
    /* The root arrived for a call that synchronises (or published a failure there)... */
    const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, w->root);
    if (shm_seq_reached(atomic_load_explicit(&a->seq, memory_order_acquire), c->seq)) {
        int32_t st = atomic_load_explicit(&a->status, memory_order_relaxed);
        if (st != COMM_OK && st != COMM_ERR_MISMATCH)
            return shm_peer_failed(c, w->root, st);
        w->other = true;
        return 1;
    }
    /* ... or completed this call without writing the entry: it was no root of it. */
    if (shm_peer_completed(c->shm, w->root, c->seq) &&
        atomic_load_explicit(&w->e->tag, memory_order_acquire) != w->tag) {
        w->other = true;
        return 1;
    }
    return 0;
}

static bool entry_behind(struct comm *c, void *arg, int p)
{
    (void)c;
    const struct entry_wait *w = arg;
    return p == w->root && atomic_load_explicit(&w->e->tag, memory_order_acquire) != w->tag;
}

void coll_eager_describe(char *buf, size_t len, unsigned kind, uint64_t count, unsigned dtype,
                         unsigned op, int root)
{
    const char *dt = dtype < RT_DTYPE_COUNT ? rt_dtype_name((comm_dtype_t)dtype) : "?";
    if (kind == COLL_REDUCE)
        snprintf(buf, len, "reduce count %llu dtype %s op %s root %d", (unsigned long long)count,
                 dt, op < RT_OP_COUNT ? rt_op_name((comm_op_t)op) : "?", root);
    else
        snprintf(buf, len, "%s count %llu dtype %s root %d",
                 kind == COLL_BROADCAST ? "broadcast" : "call of another kind",
                 (unsigned long long)count, dt, root);
}

void coll_eager_describe_entry(char *buf, size_t len, const struct shm_eager *e)
{
    coll_eager_describe(buf, len, e->coll, e->count, e->dtype, e->op, (int)e->root);
}

static void describe_call(char *buf, size_t len, const struct coll_call *call)
{
    coll_eager_describe(buf, len, call->kind, call->count, call->dtype, call->op, call->root);
}

/*
 * This rank found that peer p's call differs: it publishes its own call in its arrival
 * word, so that a peer in a call that synchronises finds the mismatch too (once every
 * peer completed the call that used the slot before, which may still read that word:
 * the rule of shm_publish_failure), and fails.
 */
comm_status_t coll_eager_mismatch(struct comm *c, const struct coll_call *call, int p,
                                  const char *theirs)
{
    char mine[128];
    describe_call(mine, sizeof(mine), call);
    comm_status_t st = wait_completed(c, c->seq - SHM_SLOTS, "an eager call (mismatch)");
    if (st != COMM_OK)
        return st;
    struct shm_arrival me = coll_arrival_of(call, SHM_PATH_FLAG);
    coll_arrive(c, &me);
    bool bcast = call->kind == COLL_BROADCAST;
    rt_error(c, COMM_ERR_MISMATCH,
             "rank %d: collective call %u mismatch: this rank called %s (eager: up to %zu "
             "bytes, %s), %srank %d made %s: every rank must make the same calls in the same "
             "order",
             c->rank, c->seq, mine, bcast ? c->knobs.bcast_eager : c->knobs.reduce_eager,
             bcast ? "ARCOMM_BCAST_EAGER" : "ARCOMM_REDUCE_EAGER", bcast ? "root " : "", p, theirs);
    return COMM_ERR_MISMATCH;
}

bool coll_eager_agrees(const struct shm_eager *e, const struct coll_call *call, uint32_t seq)
{
    return e->seq == seq && e->coll == (uint8_t)call->kind && e->count == call->count &&
           e->dtype == (uint8_t)call->dtype && e->root == call->root &&
           (call->kind != COLL_REDUCE || e->op == (uint8_t)call->op);
}

comm_status_t coll_eager_wait(struct comm *c, int p, const char *what, const char *missing,
                              const struct shm_eager **entry, bool *other)
{
    struct shm_comm *s = c->shm;
    uint64_t n = s->eager_calls;
    struct entry_wait w = {.e = shm_eager_at(s, p, n), .tag = n + 1, .root = p};
    comm_status_t st = shm_wait_for(c, entry_ready, entry_behind, &w, what, missing);
    if (st == COMM_OK) {
        *entry = w.e;
        *other = w.other;
    }
    return st;
}

static comm_status_t peer_side(struct comm *c, const struct coll_call *call, size_t bytes)
{
    const struct shm_eager *e;
    bool other;
    comm_status_t st =
        coll_eager_wait(c, call->root, "broadcast (eager path)", "stage the message", &e, &other);
    if (st != COMM_OK)
        return st;
    if (other)
        return coll_eager_mismatch(c, call, call->root,
                                   "a call of another kind or size (not an eager broadcast)");
    if (!coll_eager_agrees(e, call, c->seq)) {
        char theirs[128];
        coll_eager_describe_entry(theirs, sizeof(theirs), e);
        return coll_eager_mismatch(c, call, call->root, theirs);
    }
    /* bytes is this rank's own size, checked against the entry's room (the knob's range). */
    memcpy(call->recv, e->data, bytes);
    /* Release: the root may reuse the entry once it sees this.  Rung: a root whose ring
     * is full may sleep on it (lax, as the root's tag). */
    shm_complete(c);
    shm_ring_lax(c->shm);
    return COMM_OK;
}

comm_status_t coll_bcast_eager(struct comm *c, const struct coll_call *call)
{
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    comm_status_t st =
        c->rank == call->root ? root_side(c, call, bytes) : peer_side(c, call, bytes);
    if (st == COMM_OK) {
        c->shm->eager_calls++;
        c->shm->eager_prev = true;
    }
    return st;
}
