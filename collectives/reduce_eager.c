/* SPDX-License-Identifier: MIT */
/*
 * The eager reduce (ARCOMM_REDUCE_EAGER bytes; off unless set): MPI's semantics for small
 * reduces on the host, the mirror of the eager broadcast (broadcast_eager.c, whose ring
 * machinery it shares).  Every rank but the root writes its call and its input into the
 * next entry of its own eager ring (struct shm_eager) and returns without waiting for
 * anyone.  The root waits for every peer's entry (posting its own call in its entry
 * first when it has to wait: a rank that waits on it in a call of another kind then sees
 * the call and fails with MISMATCH instead of waiting out the timeout), checks every peer's call
 * against its own before writing a byte of recvbuf, reduces in rank order 0..nranks-1
 * (coll_reduce_block, as the flag path: the bits allreduce gives) and completes.
 *
 * A rank but the root runs up to SHM_EAGER_ENTRIES calls ahead of the slowest peer: it
 * reuses an entry once every peer completed the call that last wrote it.  Any call that
 * synchronises after an eager one first waits until every peer completed everything
 * before it (coll_settle).
 *
 * What MPI allows and arcomm's own rule does not: the ranks but the root return COMM_OK
 * before the root checked their call.  A disagreement fails the root with MISMATCH
 * (nothing of recvbuf written), and reaches the others at a later call on the
 * communicator (COMM_ERR_PEER, naming the root and what differed): the first after the
 * failure was published, at the latest the first that waits for the root.
 */
#include "coll.h"

#include <string.h>

_Static_assert(SHM_EAGER_BYTES == 512, "ARCOMM_REDUCE_EAGER's range (knobs.h) ends at the entry");

bool coll_reduce_eager_takes(const struct comm *c, const struct coll_call *call)
{
    size_t max = c->knobs.reduce_eager;
    return max != RT_SIZE_OFF && c->nranks > 1 && call->count > 0 &&
           call->count <= max / rt_dtype_size(call->dtype);
}

static comm_status_t contributor(struct comm *c, const struct coll_call *call, size_t bytes)
{
    comm_status_t st = coll_eager_peers_failed(c);
    if (st != COMM_OK)
        return st;
    struct shm_eager *e = coll_eager_claim(c, "reduce (eager path, the ring is full)", &st);
    if (e == NULL)
        return st;
    coll_eager_post(c, e, call, call->send, bytes);
    /* After the tag: a peer that sees this rank completed the call sees its entry. */
    shm_complete(c);
    return COMM_OK;
}

/* The root's own call in its entry, for a peer that waits on it in a call of another
 * kind (an eager broadcast's non-root): posted only once the root has to wait, since
 * only then can such a peer be waiting on it too. */
static comm_status_t post_own(struct comm *c, const struct coll_call *call)
{
    comm_status_t st;
    struct shm_eager *own = coll_eager_claim(c, "reduce (eager path, the ring is full)", &st);
    if (own == NULL)
        return st;
    coll_eager_post(c, own, call, NULL, 0);
    return COMM_OK;
}

static comm_status_t root_side(struct comm *c, const struct coll_call *call)
{
    struct shm_comm *s = c->shm;
    uint64_t n = s->eager_calls;
    /* The peers' entries are misses: start them all before waiting on the first. */
    for (int p = 0; p < c->nranks; p++)
        if (p != c->rank)
            __builtin_prefetch(shm_eager_at(s, p, n));
    const void *src[RT_MAX_RANKS];
    bool posted = false;
    for (int p = 0; p < c->nranks; p++) {
        if (p == c->rank) {
            src[p] = call->send;
            continue;
        }
        const struct shm_eager *e = shm_eager_at(s, p, n);
        bool other = false;
        comm_status_t st;
        if (atomic_load_explicit(&e->tag, memory_order_acquire) != n + 1) {
            if (!posted) {
                st = post_own(c, call);
                if (st != COMM_OK)
                    return st;
                posted = true;
            }
            st = coll_eager_wait(c, p, "reduce (eager path)", "stage its input", &e, &other);
            if (st != COMM_OK)
                return st;
        }
        if (other)
            return coll_eager_mismatch(c, call, p,
                                       "a call of another kind or size (not an eager reduce)");
        if (!coll_eager_agrees(e, call, c->seq)) {
            char theirs[128];
            coll_eager_describe_entry(theirs, sizeof(theirs), e);
            return coll_eager_mismatch(c, call, p, theirs);
        }
        src[p] = e->data;
    }
    coll_reduce_block(call, call->recv, src, c->nranks, call->count, 0, false);
    /* Release: the peers may reuse their entries once they see this.  Rung: a peer whose
     * ring is full may sleep on it (lax, as the tags). */
    shm_complete(c);
    shm_ring_lax(s);
    return COMM_OK;
}

comm_status_t coll_reduce_eager(struct comm *c, const struct coll_call *call)
{
    comm_status_t st = c->rank == call->root
                           ? root_side(c, call)
                           : contributor(c, call, call->count * rt_dtype_size(call->dtype));
    if (st == COMM_OK) {
        c->shm->eager_calls++;
        c->shm->eager_prev = true;
    }
    return st;
}
