/* SPDX-License-Identifier: MIT */
/*
 * The public collective entry points: validate on this rank, number the call, hand it
 * to the backend (collectives/), and break the communicator on every rank when anything fails.  A
 * rank that rejects its arguments still publishes the failure, so that its peers
 * return COMM_ERR_PEER at once instead of waiting for it.
 */
#include "comm_internal.h"

#include <stdint.h>

comm_status_t rt_break(struct comm *c, comm_status_t status)
{
    int expected = 0;
    atomic_compare_exchange_strong(&c->broken, &expected, (int)status);
    c->ops->publish_failure(c, status, c->errmsg, true);
    return status;
}

/*
 * A communicator serves one thread at a time.  A second thread entering while a call
 * runs is refused (its reason goes to comm_last_error(NULL): the running call owns
 * the communicator's message), and the communicator breaks at its next call, on every
 * rank: the two threads' calls could no longer be numbered alike on every rank.  Plain
 * loads and stores, not a read-modify-write: the flag is held for the whole call, so
 * any overlap longer than a store's propagation is seen, at no cost to the fast path.
 */
bool rt_call_enter(struct comm *c, const char *fn)
{
    if (!rt_handle_ok(c, fn))
        return false;
    /* Asynchronous calls still pending run first, in issue order (async.c). */
    if (c->async != NULL)
        rt_async_drain(c);
    if (atomic_load_explicit(&c->entered, memory_order_relaxed) != 0) {
        atomic_store_explicit(&c->misused, 1, memory_order_relaxed);
        rt_init_error(&c->knobs, COMM_ERR_INVALID,
                      "rank %d: %s: another thread is inside a call on this communicator: a "
                      "comm_t serves one thread at a time (give each thread its own "
                      "communicator, or serialise the calls); the communicator is now broken",
                      c->rank, fn);
        return false;
    }
    atomic_store_explicit(&c->entered, 1, memory_order_relaxed);
    return true;
}

comm_status_t rt_call_leave(struct comm *c, comm_status_t st)
{
    atomic_store_explicit(&c->entered, 0, memory_order_release);
    return st;
}

/* A broken communicator answers at once with the status that broke it. */
comm_status_t rt_call_usable(struct comm *c, const char *fn)
{
    int broken = atomic_load(&c->broken);
    if (broken != 0)
        return (comm_status_t)broken;
    /* The collectives' messages predate fn: they say it only where it is given. */
    const char *sep = fn ? ": " : "";
    fn = fn ? fn : "";
    if (atomic_load_explicit(&c->misused, memory_order_relaxed)) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: %s%stwo threads made calls on this communicator at once (call %u): a "
                 "comm_t serves one thread at a time; give each thread its own communicator, "
                 "or serialise the calls",
                 c->rank, fn, sep, c->seq);
        return rt_break(c, COMM_ERR_INVALID);
    }
    if (atomic_load(&c->aborted)) {
        rt_error(c, COMM_ERR_ABORTED, "rank %d: %s%scomm_abort was called on this communicator",
                 c->rank, fn, sep);
        return rt_break(c, COMM_ERR_ABORTED);
    }
    return COMM_OK;
}

static bool overlaps(const void *a, size_t alen, const void *b, size_t blen)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return alen && blen && x < y + blen && y < x + alen;
}

/* What the in-place form of each collective is, for messages. */
static const char *inplace_form(enum coll_kind kind)
{
    switch (kind) {
    case COLL_ALLGATHER:
        return "in place means sendbuf == recvbuf + rank * sendcount";
    case COLL_REDUCE_SCATTER:
        return "in place means recvbuf == sendbuf + rank * recvcount";
    case COLL_ALLTOALL:
        return "alltoall has no in-place form: pass separate buffers";
    default:
        return "in place means sendbuf == recvbuf";
    }
}

/* Is the call the in-place form of its collective on this rank? */
static bool in_place(const struct comm *c, const struct coll_call *call, size_t esize)
{
    uintptr_t s = (uintptr_t)call->send, r = (uintptr_t)call->recv;
    uintptr_t block = (uintptr_t)c->rank * call->count * esize;
    switch (call->kind) {
    case COLL_ALLGATHER:
        return s == r + block;
    case COLL_REDUCE_SCATTER:
        return r == s + block;
    case COLL_ALLTOALL:
        return false;
    default:
        return s == r;
    }
}

/* The buffers of a call with count > 0, as far as this rank uses them (coll_call_shape):
 * none NULL, and no overlap but the collective's in-place form. */
static comm_status_t validate_buffers(const struct comm *c, const struct coll_call *call, bool add,
                                      const char *fn, size_t esize, char *msg, size_t len)
{
    size_t send_elems, recv_elems;
    coll_call_shape(call, c->rank, c->nranks, &send_elems, &recv_elems);
    size_t send_bytes = send_elems * esize, recv_bytes = recv_elems * esize;
    if ((send_elems && call->send == NULL) || (recv_elems && call->recv == NULL) ||
        (add && call->addend == NULL)) {
        snprintf(msg, len, "rank %d: %s: %s is NULL with count %zu", c->rank, fn,
                 send_elems && call->send == NULL   ? "sendbuf"
                 : recv_elems && call->recv == NULL ? "recvbuf"
                                                    : "addend",
                 call->count);
        return COMM_ERR_INVALID;
    }
    if (overlaps(call->send, send_bytes, call->recv, recv_bytes) && !in_place(c, call, esize)) {
        snprintf(msg, len,
                 "rank %d: %s: sendbuf %p (%zu bytes) and recvbuf %p (%zu bytes) overlap other "
                 "than in place (%s)",
                 c->rank, fn, call->send, send_bytes, call->recv, recv_bytes,
                 inplace_form(call->kind));
        return COMM_ERR_INVALID;
    }
    if (add && overlaps(call->addend, call->addend_count * esize, call->recv, recv_bytes)) {
        snprintf(msg, len,
                 "rank %d: %s: addend %p overlaps recvbuf %p: peers write recvbuf while the "
                 "addend is read; pass a separate addend",
                 c->rank, fn, call->addend, call->recv);
        return COMM_ERR_INVALID;
    }
    return COMM_OK;
}

/* What every backend refuses of a call.  Reads c's rank and size only and writes its
 * reason into msg, not into c: the asynchronous calls check their arguments at issue,
 * while a progress thread may be running an earlier call on c (async.c). */
comm_status_t rt_coll_check(const struct comm *c, const struct coll_call *call, bool add,
                            const char *fn, char *msg, size_t len)
{
    size_t esize = rt_dtype_size(call->dtype);
    if (esize == 0) {
        snprintf(msg, len, "rank %d: %s: dtype %d is not a comm_dtype_t", c->rank, fn,
                 (int)call->dtype);
        return COMM_ERR_INVALID;
    }
    if ((unsigned)call->op >= RT_OP_COUNT) {
        snprintf(msg, len, "rank %d: %s: op %d is not a comm_op_t", c->rank, fn, (int)call->op);
        return COMM_ERR_INVALID;
    }
    if (call->op == COMM_AVG && !rt_dtype_is_float(call->dtype)) {
        /* Every rank making this call refuses it alike, before anything is exchanged. */
        snprintf(msg, len,
                 "rank %d: %s: COMM_AVG is defined for float dtypes only, not %s (an integer "
                 "average would have to round); use COMM_SUM and divide by the number of ranks",
                 c->rank, fn, rt_dtype_name(call->dtype));
        return COMM_ERR_UNSUPPORTED;
    }
    if (call->count > SIZE_MAX / 2 / esize) {
        snprintf(msg, len, "rank %d: %s: count %zu is too large", c->rank, fn, call->count);
        return COMM_ERR_INVALID;
    }
    if (add) {
        bool bad_count =
            call->count > 0 && (call->addend_count == 0 || call->addend_count > call->count ||
                                call->count % call->addend_count != 0);
        if (bad_count) {
            snprintf(msg, len,
                     "rank %d: %s: addend_count %zu must equal count %zu (residual) or divide it "
                     "(a bias row)",
                     c->rank, fn, call->addend_count, call->count);
            return COMM_ERR_INVALID;
        }
    }
    if (coll_kind_rooted(call->kind) && (call->root < 0 || call->root >= c->nranks)) {
        snprintf(msg, len,
                 "rank %d: %s: root %d is not a rank of this communicator: pass a root from 0 to "
                 "%d, the same on every rank",
                 c->rank, fn, call->root, c->nranks - 1);
        return COMM_ERR_INVALID;
    }
    if (coll_kind_blocks(call->kind) && call->count > SIZE_MAX / 2 / esize / (size_t)c->nranks) {
        snprintf(msg, len,
                 "rank %d: %s: count %zu is too large: %d blocks of %zu-byte elements do not fit "
                 "in memory",
                 c->rank, fn, call->count, c->nranks, esize);
        return COMM_ERR_INVALID;
    }
    if (call->count == 0)
        return COMM_OK;
    return validate_buffers(c, call, add, fn, esize, msg, len);
}

/* One public collective entry point. */
struct coll_entry {
    const char *fn; /* its name, in messages */
    bool add;       /* comm_allreduce_add */
};

/* What every backend refuses, then what this one does. */
static comm_status_t validate(struct comm *c, const struct coll_call *call,
                              const struct coll_entry *e)
{
    char msg[RT_ERRMSG_BYTES];
    comm_status_t st = rt_coll_check(c, call, e->add, e->fn, msg, sizeof(msg));
    if (st != COMM_OK) {
        rt_error(c, st, "%s", msg);
        return st;
    }
    return c->ops->validate(c, call, e->fn);
}

typedef comm_status_t (*coll_fn)(struct comm *c, const struct coll_call *call);

/* The backend's entry for the call's collective; NULL when it does not have it. */
static coll_fn backend_entry(const struct backend_ops *ops, const struct coll_call *call, bool add)
{
    switch (call->kind) {
    case COLL_ALLREDUCE:
        return add ? ops->allreduce_add : ops->allreduce;
    case COLL_BROADCAST:
        return ops->broadcast;
    case COLL_REDUCE:
        return ops->reduce;
    case COLL_ALLGATHER:
        return ops->allgather;
    case COLL_REDUCE_SCATTER:
        return ops->reduce_scatter;
    case COLL_ALLTOALL:
        return ops->alltoall;
    default:
        return NULL;
    }
}

static comm_status_t run_entered(struct comm *c, const struct coll_call *call,
                                 const struct coll_entry *e)
{
    comm_status_t st = rt_call_usable(c, NULL);
    if (st != COMM_OK)
        return st;
    coll_fn fn = backend_entry(c->ops, call, e->add);
    if (fn == NULL) {
        /* Decided by the backend alone, before the arguments: every rank answers alike. */
        rt_error(c, COMM_ERR_UNSUPPORTED,
                 "rank %d: %s: the %s backend (%s buffers) has no %s: make this collective on a "
                 "host communicator (COMM_DEVICE_HOST) with the data in host memory, or build "
                 "it from comm_allreduce; this communicator stays usable",
                 c->rank, e->fn, c->ops->name, rt_device_title(c->device),
                 coll_kind_name(call->kind));
        return COMM_ERR_UNSUPPORTED;
    }
    st = validate(c, call, e);
    if (st == COMM_OK)
        st = fn(c, call);
    /* UNSUPPORTED is decided by the device before anything is exchanged, the same on
     * every rank making the same call: the communicator stays usable and the call
     * does not count. */
    if (st == COMM_ERR_UNSUPPORTED)
        return st;
    if (st != COMM_OK)
        return rt_break(c, st);
    c->seq++;
    return COMM_OK;
}

/* The one path of every collective but the barrier. */
static comm_status_t run(struct comm *c, const struct coll_call *call, const struct coll_entry *e)
{
    if (!rt_call_enter(c, e->fn))
        return COMM_ERR_INVALID;
    return rt_call_leave(c, run_entered(c, call, e));
}

comm_status_t rt_coll_run(struct comm *c, const struct coll_call *call, bool add, const char *fn)
{
    const struct coll_entry e = {.fn = fn, .add = add};
    return run(c, call, &e);
}

static const struct coll_entry e_allreduce = {.fn = "comm_allreduce"};
static const struct coll_entry e_allreduce_add = {.fn = "comm_allreduce_add", .add = true};
static const struct coll_entry e_broadcast = {.fn = "comm_broadcast"};
static const struct coll_entry e_reduce = {.fn = "comm_reduce"};
static const struct coll_entry e_allgather = {.fn = "comm_allgather"};
static const struct coll_entry e_reduce_scatter = {.fn = "comm_reduce_scatter"};
static const struct coll_entry e_alltoall = {.fn = "comm_alltoall"};

ARCOMM_API comm_status_t comm_allreduce(comm_t *comm, const void *sendbuf, void *recvbuf,
                                        size_t count, comm_dtype_t dtype, comm_op_t op,
                                        void *stream)
{
    struct coll_call call = {
        .kind = COLL_ALLREDUCE,
        .send = sendbuf,
        .recv = recvbuf,
        .count = count,
        .dtype = dtype,
        .op = op,
        .stream = stream,
    };
    return run(comm, &call, &e_allreduce);
}

ARCOMM_API comm_status_t comm_allreduce_add(comm_t *comm, const void *sendbuf, void *recvbuf,
                                            const void *addend, size_t addend_count, size_t count,
                                            comm_dtype_t dtype, void *stream)
{
    struct coll_call call = {
        .kind = COLL_ALLREDUCE,
        .send = sendbuf,
        .recv = recvbuf,
        .addend = addend,
        .addend_count = addend_count,
        .count = count,
        .dtype = dtype,
        .op = COMM_SUM,
        .stream = stream,
    };
    return run(comm, &call, &e_allreduce_add);
}

ARCOMM_API comm_status_t comm_broadcast(comm_t *comm, const void *sendbuf, void *recvbuf,
                                        size_t count, comm_dtype_t dtype, int root, void *stream)
{
    struct coll_call call = {
        .kind = COLL_BROADCAST,
        .root = root,
        .send = sendbuf,
        .recv = recvbuf,
        .count = count,
        .dtype = dtype,
        .op = COMM_SUM, /* no op: the one every rank publishes alike */
        .stream = stream,
    };
    return run(comm, &call, &e_broadcast);
}

ARCOMM_API comm_status_t comm_reduce(comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                                     comm_dtype_t dtype, comm_op_t op, int root, void *stream)
{
    struct coll_call call = {
        .kind = COLL_REDUCE,
        .root = root,
        .send = sendbuf,
        .recv = recvbuf,
        .count = count,
        .dtype = dtype,
        .op = op,
        .stream = stream,
    };
    return run(comm, &call, &e_reduce);
}

ARCOMM_API comm_status_t comm_allgather(comm_t *comm, const void *sendbuf, void *recvbuf,
                                        size_t sendcount, comm_dtype_t dtype, void *stream)
{
    struct coll_call call = {
        .kind = COLL_ALLGATHER,
        .send = sendbuf,
        .recv = recvbuf,
        .count = sendcount,
        .dtype = dtype,
        .op = COMM_SUM,
        .stream = stream,
    };
    return run(comm, &call, &e_allgather);
}

ARCOMM_API comm_status_t comm_reduce_scatter(comm_t *comm, const void *sendbuf, void *recvbuf,
                                             size_t recvcount, comm_dtype_t dtype, comm_op_t op,
                                             void *stream)
{
    struct coll_call call = {
        .kind = COLL_REDUCE_SCATTER,
        .send = sendbuf,
        .recv = recvbuf,
        .count = recvcount,
        .dtype = dtype,
        .op = op,
        .stream = stream,
    };
    return run(comm, &call, &e_reduce_scatter);
}

ARCOMM_API comm_status_t comm_alltoall(comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t count, comm_dtype_t dtype, void *stream)
{
    struct coll_call call = {
        .kind = COLL_ALLTOALL,
        .send = sendbuf,
        .recv = recvbuf,
        .count = count,
        .dtype = dtype,
        .op = COMM_SUM,
        .stream = stream,
    };
    return run(comm, &call, &e_alltoall);
}

static comm_status_t barrier_entered(struct comm *c)
{
    comm_status_t st = rt_call_usable(c, NULL);
    if (st != COMM_OK)
        return st;
    st = c->ops->barrier(c);
    if (st != COMM_OK)
        return rt_break(c, st);
    c->seq++;
    return COMM_OK;
}

comm_status_t rt_barrier_run(struct comm *c, const char *fn)
{
    if (!rt_call_enter(c, fn))
        return COMM_ERR_INVALID;
    return rt_call_leave(c, barrier_entered(c));
}

ARCOMM_API comm_status_t comm_barrier(comm_t *comm)
{
    if (!rt_call_enter(comm, "comm_barrier"))
        return COMM_ERR_INVALID;
    return rt_call_leave(comm, barrier_entered(comm));
}
