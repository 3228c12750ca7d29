/* SPDX-License-Identifier: MIT */
/*
 * comm_send, comm_recv, comm_group_start and comm_group_end: validation on this rank,
 * the calling thread's group (NCCL's semantics: per thread, nesting, the outermost end
 * runs every posted call together), the sends to oneself matched here, and the rest
 * handed to the backend's p2p op (collectives/p2p/).
 *
 * A failure that leaves a pair's channel in an unknown state (a timeout, an abort, a
 * peer that failed or died, an argument a peer waits on in vain) breaks the
 * communicator on every rank, as a collective's does.  A count or dtype mismatch does
 * not: both sides know, the message was consumed, nothing was written.
 */
#include "comm_internal.h"
#include "p2p/p2p.h"
#include "rt_hooks.h"
#include "shm/shm.h"

#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One posted call of the calling thread's group. */
struct posted {
    struct comm *c;
    struct coll_p2p op;
    const char *fn;
};

static _Thread_local int depth;
static _Thread_local struct posted *list;
static _Thread_local size_t nlist, cap;
static _Thread_local comm_status_t post_failure; /* the first post of the group that failed */

static comm_status_t fail(struct comm *c, comm_status_t st)
{
    /* UNSUPPORTED is decided by the backend before anything is exchanged. */
    return st == COMM_ERR_UNSUPPORTED ? st : rt_break(c, st);
}

/* What every rank refuses of a send or receive before anything is exchanged. */
static comm_status_t validate(struct comm *c, const struct coll_p2p *op, const char *fn,
                              bool grouped)
{
    const char *buf_name = op->send ? "sendbuf" : "recvbuf";
    size_t esize = rt_dtype_size(op->dtype);
    if (esize == 0) {
        rt_error(c, COMM_ERR_INVALID, "rank %d: %s: dtype %d is not a comm_dtype_t", c->rank, fn,
                 (int)op->dtype);
        return COMM_ERR_INVALID;
    }
    if (op->count > SIZE_MAX / 2 / esize) {
        rt_error(c, COMM_ERR_INVALID, "rank %d: %s: count %zu is too large", c->rank, fn,
                 op->count);
        return COMM_ERR_INVALID;
    }
    if (op->peer < 0 || op->peer >= c->nranks) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: %s: peer %d is not a rank of this communicator: pass a peer from 0 to "
                 "%d",
                 c->rank, fn, op->peer, c->nranks - 1);
        return COMM_ERR_INVALID;
    }
    if (op->peer == c->rank && !grouped) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: %s: peer %d is this rank: a send to oneself needs its receive in the "
                 "same group (comm_group_start, both calls, comm_group_end)",
                 c->rank, fn, op->peer);
        return COMM_ERR_INVALID;
    }
    if (op->count > 0 && op->buf == NULL) {
        rt_error(c, COMM_ERR_INVALID, "rank %d: %s: %s is NULL with count %zu", c->rank, fn,
                 buf_name, op->count);
        return COMM_ERR_INVALID;
    }
    if (c->device == COMM_DEVICE_HOST && op->stream != NULL) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: %s: stream must be NULL on a host communicator (it is %p)", c->rank, fn,
                 op->stream);
        return COMM_ERR_INVALID;
    }
    if (c->ops->p2p == NULL) {
        rt_error(c, COMM_ERR_UNSUPPORTED,
                 "rank %d: %s: the %s backend (%s buffers) has no sends and receives: exchange "
                 "the data on a host communicator (COMM_DEVICE_HOST), or build the exchange "
                 "from a collective; this communicator stays usable",
                 c->rank, fn, c->ops->name, rt_device_title(c->device));
        return COMM_ERR_UNSUPPORTED;
    }
    return COMM_OK;
}

/* Matches the group's sends to oneself on c (ops[0..n)) with its receives from oneself,
 * in order: copies, or MISMATCH on both; a call left without its partner is INVALID. */
static comm_status_t match_self(struct comm *c, struct coll_p2p *ops, size_t n)
{
    comm_status_t first = COMM_OK;
    size_t si = 0, ri = 0;
    for (;;) {
        while (si < n && !(ops[si].peer == c->rank && ops[si].send))
            si++;
        while (ri < n && !(ops[ri].peer == c->rank && !ops[ri].send))
            ri++;
        if (si == n && ri == n)
            return first;
        if (si == n || ri == n) {
            struct coll_p2p *op = &ops[si < n ? si : ri];
            rt_error(c, COMM_ERR_INVALID,
                     "rank %d: %s to itself (%zu x %s) has no matching %s in the group: make a "
                     "send to oneself and its receive in the same group, in pairs",
                     c->rank, op->send ? "comm_send" : "comm_recv", op->count,
                     rt_dtype_name(op->dtype), op->send ? "comm_recv" : "comm_send");
            return COMM_ERR_INVALID;
        }
        struct coll_p2p *s = &ops[si], *r = &ops[ri];
        if (s->count != r->count || s->dtype != r->dtype) {
            rt_error(c, COMM_ERR_MISMATCH,
                     "rank %d: comm_send to itself has %zu x %s, its comm_recv expects %zu x %s; "
                     "nothing was written: make the counts and dtypes agree",
                     c->rank, s->count, rt_dtype_name(s->dtype), r->count, rt_dtype_name(r->dtype));
            s->status = r->status = COMM_ERR_MISMATCH;
            if (first == COMM_OK)
                first = COMM_ERR_MISMATCH;
        } else if (s->count > 0 && c->ops->p2p_self != NULL) {
            comm_status_t st = c->ops->p2p_self(c, s, r);
            if (st != COMM_OK)
                return st;
        } else if (s->count > 0) {
            memmove(r->buf, s->buf, s->count * rt_dtype_size(s->dtype));
        }
        s->state = r->state = COLL_P2P_DONE;
        si++;
        ri++;
    }
}

/* Runs the calls ops[0..n) of one communicator: self-sends, then the backend's. */
static comm_status_t run_one(struct comm *c, struct coll_p2p *ops, size_t n)
{
    comm_status_t self = match_self(c, ops, n);
    if (self != COMM_OK && self != COMM_ERR_MISMATCH)
        return self;
    comm_status_t st = c->ops->p2p(c, ops, n);
    return st != COMM_OK ? st : self;
}

/* Several communicators driven by this thread: every one advances in turn, none waits.
 * Bounded by each one's timeout, ended by each one's comm_abort. */
static void run_many(struct comm **cs, size_t ncs, struct coll_p2p **ops, size_t *n,
                     comm_status_t *st)
{
    uint64_t start = rt_now_ns();
    bool *done = calloc(ncs, sizeof(*done));
    size_t left = ncs;
    for (size_t k = 0; k < ncs; k++) {
        if (st[k] == COMM_OK || st[k] == COMM_ERR_MISMATCH) {
            comm_status_t self = match_self(cs[k], ops[k], n[k]);
            if (self == COMM_OK || self == COMM_ERR_MISMATCH) {
                if (self != COMM_OK)
                    st[k] = self;
                continue;
            }
            st[k] = self;
        }
        if (done)
            done[k] = true;
        left--;
    }
    if (done == NULL) {
        /* No memory to track them: each in turn (correct unless they depend on each
         * other, as a ring through this thread's communicators would). */
        for (size_t k = 0; k < ncs; k++)
            if (st[k] == COMM_OK || st[k] == COMM_ERR_MISMATCH) {
                comm_status_t r = cs[k]->ops->p2p(cs[k], ops[k], n[k]);
                st[k] = r != COMM_OK ? r : st[k];
            }
        return;
    }
    unsigned idle = 0;
    while (left > 0) {
        bool moved = false;
        uint64_t now = rt_now_ns();
        for (size_t k = 0; k < ncs; k++) {
            if (done[k])
                continue;
            struct comm *c = cs[k];
            int r = c->ops->p2p_poll(c, ops[k], n[k]);
            if (r == 0 && rt_abort_requested(c)) {
                rt_error(c, COMM_ERR_ABORTED,
                         "rank %d: %s while rank %d waited in a group of sends and receives",
                         c->rank, rt_abort_cause(c), c->rank);
                r = COMM_ERR_ABORTED;
            }
            if (r == 0 && rt_passed(rt_deadline_after(start, rt_ms_to_ns(c->timeout_ms)), now)) {
                rt_error(c, COMM_ERR_TIMEOUT,
                         "rank %d: timed out after %ld ms in a group of sends and receives over "
                         "%zu communicators: a peer did not make the matching calls; check that "
                         "every send has its receive, or raise ARCOMM_TIMEOUT_MS",
                         c->rank, c->timeout_ms, ncs);
                r = COMM_ERR_TIMEOUT;
            }
            if (r == 0)
                continue;
            if (r < 0 && (st[k] == COMM_OK || r != COMM_ERR_MISMATCH))
                st[k] = (comm_status_t)r;
            done[k] = true;
            moved = true;
            left--;
        }
        if (moved)
            idle = 0;
        else if (++idle > 64)
            sched_yield();
    }
    free(done);
}

/* Runs the posted calls list[0..n): each communicator entered once, its calls together. */
static comm_status_t run_posted(struct posted *p, size_t n)
{
    /* The distinct communicators, in the order of their first call. */
    struct comm **cs = malloc(n * sizeof(*cs));
    struct coll_p2p **ops = malloc(n * sizeof(*ops));
    size_t *nops = calloc(n, sizeof(*nops));
    comm_status_t *st = malloc(n * sizeof(*st));
    bool *entered = calloc(n, sizeof(*entered));
    struct coll_p2p *all = malloc(n * sizeof(*all));
    comm_status_t result = COMM_OK;
    if (!cs || !ops || !nops || !st || !entered || !all) {
        result = COMM_ERR_NOMEM;
        goto out;
    }
    size_t ncs = 0, used = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < ncs && cs[k] != p[i].c)
            k++;
        if (k == ncs)
            cs[ncs++] = p[i].c;
    }
    for (size_t k = 0; k < ncs; k++) {
        ops[k] = all + used;
        for (size_t i = 0; i < n; i++)
            if (p[i].c == cs[k])
                ops[k][nops[k]++] = p[i].op;
        used += nops[k];
        st[k] = COMM_ERR_INVALID;
        if (!rt_call_enter(cs[k], "comm_group_end"))
            continue;
        entered[k] = true;
        st[k] = rt_call_usable(cs[k], "comm_group_end");
    }
    if (ncs == 1 && st[0] == COMM_OK)
        st[0] = run_one(cs[0], ops[0], nops[0]);
    else if (ncs > 1)
        run_many(cs, ncs, ops, nops, st);
    for (size_t k = 0; k < ncs; k++) {
        if (!entered[k])
            continue;
        if (cs[k]->ops->p2p_end != NULL)
            cs[k]->ops->p2p_end(cs[k], ops[k], nops[k]);
        if (st[k] != COMM_OK && st[k] != COMM_ERR_MISMATCH && !atomic_load(&cs[k]->broken))
            fail(cs[k], st[k]);
        rt_call_leave(cs[k], st[k]);
    }
    for (size_t k = 0; k < ncs && result == COMM_OK; k++)
        result = st[k];
out:
    free(cs);
    free(ops);
    free(nops);
    free(st);
    free(entered);
    free(all);
    return result;
}

static comm_status_t post(comm_t *comm, bool send, void *buf, size_t count, comm_dtype_t dtype,
                          int peer, void *stream, const char *fn)
{
    struct comm *c = comm;
    struct coll_p2p op = {
        .send = send,
        .buf = buf,
        .count = count,
        .dtype = dtype,
        .peer = peer,
        .stream = stream,
    };
    if (depth == 0) {
        if (!rt_call_enter(c, fn))
            return COMM_ERR_INVALID;
        comm_status_t st = rt_call_usable(c, fn);
        if (st == COMM_OK)
            st = validate(c, &op, fn, false);
        if (st != COMM_OK) {
            if (st != COMM_ERR_UNSUPPORTED && !atomic_load(&c->broken))
                fail(c, st);
            return rt_call_leave(c, st);
        }
        st = c->ops->p2p(c, &op, 1);
        if (c->ops->p2p_end != NULL)
            c->ops->p2p_end(c, &op, 1);
        if (st != COMM_OK && st != COMM_ERR_MISMATCH)
            fail(c, st);
        return rt_call_leave(c, st);
    }
    /* In a group: checked now (the handle, the arguments), run at the outermost end. */
    comm_status_t st = COMM_OK;
    if (!rt_call_enter(c, fn)) {
        st = COMM_ERR_INVALID;
    } else {
        st = rt_call_usable(c, fn);
        if (st == COMM_OK)
            st = validate(c, &op, fn, true);
        if (st != COMM_OK && st != COMM_ERR_UNSUPPORTED && !atomic_load(&c->broken))
            fail(c, st);
        rt_call_leave(c, st);
    }
    if (st == COMM_OK && nlist == cap) {
        size_t ncap = cap ? 2 * cap : 16;
        struct posted *n = realloc(list, ncap * sizeof(*n));
        if (n == NULL) {
            rt_error(c, COMM_ERR_NOMEM, "rank %d: %s: no memory to post the call in its group",
                     c->rank, fn);
            st = COMM_ERR_NOMEM;
        } else {
            list = n;
            cap = ncap;
        }
    }
    if (st != COMM_OK) {
        if (post_failure == COMM_OK)
            post_failure = st;
        return st;
    }
    list[nlist++] = (struct posted){.c = c, .op = op, .fn = fn};
    return COMM_OK;
}

ARCOMM_API comm_status_t comm_send(comm_t *comm, const void *buf, size_t count, comm_dtype_t dtype,
                                   int peer, void *stream)
{
    return post(comm, true, (void *)(uintptr_t)buf, count, dtype, peer, stream, "comm_send");
}

ARCOMM_API comm_status_t comm_recv(comm_t *comm, void *buf, size_t count, comm_dtype_t dtype,
                                   int peer, void *stream)
{
    return post(comm, false, buf, count, dtype, peer, stream, "comm_recv");
}

ARCOMM_API comm_status_t comm_group_start(void)
{
    depth++;
    return COMM_OK;
}

ARCOMM_API comm_status_t comm_group_end(void)
{
    if (depth == 0) {
        rt_init_error_quiet("comm_group_end: no comm_group_start to end in this thread");
        return COMM_ERR_INVALID;
    }
    if (--depth > 0)
        return COMM_OK;
    comm_status_t st = nlist > 0 ? run_posted(list, nlist) : COMM_OK;
    if (post_failure != COMM_OK)
        st = post_failure;
    post_failure = COMM_OK;
    nlist = 0;
    free(list);
    list = NULL;
    cap = 0;
    return st;
}

ARCOMM_HOOK comm_status_t rt_hook_p2p_info(const comm_t *comm, uint64_t *eager_bytes,
                                           uint64_t *chunk_bytes, uint64_t recvs[6])
{
    if (!rt_handle_ok(comm, "rt_hook_p2p_info") || comm->shm == NULL)
        return COMM_ERR_INVALID;
    if (eager_bytes)
        *eager_bytes = comm->shm->p2p_eager;
    if (chunk_bytes)
        *chunk_bytes = comm->shm->p2p_chunk;
    if (recvs)
        memcpy(recvs, comm->shm->p2p_recvs, sizeof(comm->shm->p2p_recvs));
    return COMM_OK;
}
