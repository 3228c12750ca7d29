/* SPDX-License-Identifier: MIT */
/*
 * Asynchronous host calls (0.4): comm_iallreduce and the other comm_i* calls queue a
 * request on the communicator and return; comm_test, comm_wait and comm_wait_all
 * complete it.  The queue runs in issue order, one call at a time, through the blocking
 * calls' own path (rt_coll_run, rt_barrier_run: the guard, the numbering, the failure
 * publication), either in a progress thread of the communicator (ARCOMM_PROGRESS=thread,
 * the default) or in the caller's comm_test and comm_wait (caller).
 *
 * The progress thread starts at the first comm_i* call, sleeps on a condition variable
 * while the queue is empty, never runs the wait hook (the caller's waits do), and is
 * joined by comm_destroy.  comm_split and comm_dup children start without one.
 */
#include "comm_internal.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * What a queued entry does.  Point-to-point (comm_isend, comm_irecv: RT_ASYNC_P2P over
 * comm_send and comm_recv): the runner runs each unbroken stretch of consecutive p2p
 * entries inside one comm_group_start/comm_group_end (run_next below), as NCCL posts a
 * group: a queued isend followed by an irecv to the same peer, issued so on both ranks,
 * must not deadlock, and run one by one it would (both ranks in the send).
 */
enum rt_async_kind {
    RT_ASYNC_COLL,    /* a collective of collective.c (struct coll_call) */
    RT_ASYNC_BARRIER, /* comm_ibarrier */
    RT_ASYNC_FAIL,    /* a call refused at issue: breaks c in its turn, as the blocking
                       * call would have (the peers learn at once) */
    RT_ASYNC_P2P,     /* comm_isend, comm_irecv */
};

/* The most p2p entries one group of the runner takes (a longer stretch runs as several). */
#define RT_ASYNC_P2P_GROUP 64

/* The arguments a queued call keeps: copied at issue, the buffers only pointed to. */
union rt_async_args {
    struct {
        struct coll_call call;
        bool add; /* comm_iallreduce_add */
    } coll;
    struct {
        comm_status_t status;
        char msg[RT_ERRMSG_BYTES];
    } fail;
    struct {
        bool send;
        void *buf;
        size_t count;
        comm_dtype_t dtype;
        int peer;
    } p2p;
};

struct comm_request;
typedef comm_status_t (*rt_async_fn)(struct comm *c, struct comm_request *r);

/* One queued call: a closure (kind, arguments, function) and its completion. */
struct comm_request {
    enum rt_async_kind kind;
    const char *fn; /* the public entry point, in messages */
    rt_async_fn run;
    union rt_async_args args;
    struct comm *comm;
    struct comm_request *next; /* the queue, in issue order */
    comm_status_t status;      /* once done */
    bool done;                 /* under the queue's lock */
    bool internal;             /* no caller holds it: freed by whoever runs it */
    uint64_t seq;              /* its place in issue order (1, 2, ...) */
};

enum rt_progress { RT_PROGRESS_THREAD, RT_PROGRESS_CALLER };

struct rt_async {
    pthread_mutex_t lock;
    pthread_cond_t work;              /* the progress thread: an entry was queued, or stop */
    pthread_cond_t done;              /* the waiters: an entry completed */
    struct comm_request *head, *tail; /* queued, not started */
    bool running;                     /* an entry is being run */
    unsigned outstanding;             /* the caller's requests not yet freed */
    enum rt_progress mode;
    bool thread_started;
    bool stop; /* rt_async_close: the progress thread ends */
    /* The last entry issued, and the last one of a closed p2p stretch: a stretch of
     * comm_isend/comm_irecv entries runs as one group, so it may start only once this
     * rank's program has ended it (by issuing something else or waiting), never at a
     * moment the timing picks (two ranks cutting the same stretch differently could
     * each sit in a send). */
    uint64_t enq_seq, closed_seq;
    pthread_t thread;
};

/* The communicator whose queue this thread is running (it must not wait for itself). */
static _Thread_local struct comm *running_for;

static comm_status_t run_coll(struct comm *c, struct comm_request *r)
{
    return rt_coll_run(c, &r->args.coll.call, r->args.coll.add, r->fn);
}

static comm_status_t run_barrier(struct comm *c, struct comm_request *r)
{
    return rt_barrier_run(c, r->fn);
}

/* The refused call's turn: the communicator breaks on every rank with its status. */
static comm_status_t run_fail(struct comm *c, struct comm_request *r)
{
    if (!rt_call_enter(c, r->fn))
        return COMM_ERR_INVALID;
    if (atomic_load(&c->broken) == 0) {
        rt_error(c, r->args.fail.status, "%s", r->args.fail.msg);
        rt_break(c, r->args.fail.status);
    }
    return rt_call_leave(c, r->args.fail.status);
}

/* Marks r done (under a->lock); an internal entry is freed here. */
static void complete(struct rt_async *a, struct comm_request *r, comm_status_t st)
{
    r->status = st;
    r->done = true;
    if (r->internal)
        free(r);
    pthread_cond_broadcast(&a->done);
}

/* May the head of the queue run now?  A p2p entry only once its stretch is closed. */
static bool runnable(const struct rt_async *a)
{
    return a->head != NULL && (a->head->kind != RT_ASYNC_P2P || a->head->seq <= a->closed_seq);
}

/* The caller waits or tests: the p2p stretch issued so far is complete (under a->lock). */
static void close_stretch(struct rt_async *a)
{
    if (a->closed_seq == a->enq_seq)
        return;
    a->closed_seq = a->enq_seq;
    if (a->mode == RT_PROGRESS_THREAD)
        pthread_cond_signal(&a->work);
}

/* Runs the stretch of p2p entries at the head of the queue as one group (called and
 * returns under a->lock): each entry's status is its post's failure, else the group's. */
static void run_p2p_group(struct comm *c, struct rt_async *a)
{
    struct comm_request *g[RT_ASYNC_P2P_GROUP];
    comm_status_t posted[RT_ASYNC_P2P_GROUP];
    size_t n = 0;
    while (n < RT_ASYNC_P2P_GROUP && a->head != NULL && a->head->kind == RT_ASYNC_P2P &&
           a->head->seq <= a->closed_seq) {
        g[n++] = a->head;
        a->head = a->head->next;
    }
    if (a->head == NULL)
        a->tail = NULL;
    a->running = true;
    pthread_mutex_unlock(&a->lock);
    struct comm *outer = running_for;
    running_for = c;
    comm_group_start();
    for (size_t i = 0; i < n; i++) {
        const struct comm_request *r = g[i];
        posted[i] = r->args.p2p.send ? comm_send(c, r->args.p2p.buf, r->args.p2p.count,
                                                 r->args.p2p.dtype, r->args.p2p.peer, NULL)
                                     : comm_recv(c, r->args.p2p.buf, r->args.p2p.count,
                                                 r->args.p2p.dtype, r->args.p2p.peer, NULL);
    }
    comm_status_t st = comm_group_end();
    running_for = outer;
    pthread_mutex_lock(&a->lock);
    a->running = false;
    for (size_t i = 0; i < n; i++)
        complete(a, g[i], posted[i] != COMM_OK ? posted[i] : st);
}

/* Runs the head of the queue in this thread (called and returns under a->lock). */
static void run_next(struct comm *c, struct rt_async *a)
{
    if (a->head->kind == RT_ASYNC_P2P) {
        run_p2p_group(c, a);
        return;
    }
    struct comm_request *r = a->head;
    a->head = r->next;
    if (a->head == NULL)
        a->tail = NULL;
    a->running = true;
    pthread_mutex_unlock(&a->lock);
    struct comm *outer = running_for;
    running_for = c;
    comm_status_t st = r->run(c, r);
    running_for = outer;
    pthread_mutex_lock(&a->lock);
    a->running = false;
    complete(a, r, st);
}

static void *progress_main(void *arg)
{
    struct comm *c = arg;
    struct rt_async *a = c->async;
    rt_wait_hook_off = true;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        while (!runnable(a) && !a->stop)
            pthread_cond_wait(&a->work, &a->lock);
        if (!runnable(a))
            break;
        run_next(c, a);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

/* Is ops one of this library's own backends (not one that a layered library such as
 * libarcomm_mpi forced, whose calls may reach MPI and must stay in the caller's thread)? */
static bool builtin_backend(const struct backend_ops *ops)
{
    for (size_t i = 0; i < rt_backend_count; i++)
        if (rt_backends[i] == ops)
            return true;
    return false;
}

/* The queue of c, made (and its progress thread started) at the first comm_i* call. */
static comm_status_t async_start(struct comm *c, const char *fn)
{
    enum rt_progress mode;
    if (strcmp(c->knobs.progress, "thread") == 0) {
        mode = RT_PROGRESS_THREAD;
    } else if (strcmp(c->knobs.progress, "caller") == 0) {
        mode = RT_PROGRESS_CALLER;
    } else {
        rt_init_error(&c->knobs, COMM_ERR_INVALID,
                      "rank %d: %s: ARCOMM_PROGRESS=\"%.32s\" is neither thread nor caller",
                      c->rank, fn, c->knobs.progress);
        return COMM_ERR_INVALID;
    }
    if (!builtin_backend(c->ops))
        mode = RT_PROGRESS_CALLER;
    struct rt_async *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        rt_init_error(&c->knobs, COMM_ERR_NOMEM, "rank %d: %s: out of memory", c->rank, fn);
        return COMM_ERR_NOMEM;
    }
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->work, NULL);
    /* The waiters' sleeps are measured on the clock of the deadlines, which a change of
     * the wall clock does not move. */
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&a->done, &attr);
    pthread_condattr_destroy(&attr);
    a->mode = mode;
    c->async = a;
    if (mode != RT_PROGRESS_THREAD)
        return COMM_OK;
    /* Signals go to the caller's threads, never to this one (a Ctrl-C handler must run
     * where the program expects it). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&a->thread, NULL, progress_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0) {
        rt_init_error(&c->knobs, COMM_ERR_SYSTEM,
                      "rank %d: %s: cannot start the progress thread: %s; set "
                      "ARCOMM_PROGRESS=caller to run the calls in comm_wait instead",
                      c->rank, fn, strerror(err));
        c->async = NULL;
        pthread_cond_destroy(&a->done);
        pthread_cond_destroy(&a->work);
        pthread_mutex_destroy(&a->lock);
        free(a);
        return COMM_ERR_SYSTEM;
    }
    a->thread_started = true;
    return COMM_OK;
}

/* Puts r at the tail of c's queue. */
static void enqueue(struct rt_async *a, struct comm_request *r)
{
    pthread_mutex_lock(&a->lock);
    r->next = NULL;
    if (a->tail != NULL)
        a->tail->next = r;
    else
        a->head = r;
    a->tail = r;
    r->seq = ++a->enq_seq;
    if (r->kind != RT_ASYNC_P2P)
        a->closed_seq = r->seq;
    a->outstanding += !r->internal;
    if (a->mode == RT_PROGRESS_THREAD)
        pthread_cond_signal(&a->work);
    pthread_mutex_unlock(&a->lock);
}

/* The checks of every comm_i* call before its own: handle, req, device, the queue.  Its
 * refusals go to comm_last_error(NULL): comm's own message may be in use by a call
 * running in the progress thread. */
static comm_status_t issue_begin(struct comm *c, comm_request_t **req, const char *fn)
{
    if (!rt_handle_ok(c, fn))
        return COMM_ERR_INVALID;
    if (req == NULL) {
        rt_init_error(&c->knobs, COMM_ERR_INVALID, "rank %d: %s: req is NULL", c->rank, fn);
        return COMM_ERR_INVALID;
    }
    if (c->device != COMM_DEVICE_HOST) {
        rt_init_error(&c->knobs, COMM_ERR_UNSUPPORTED,
                      "rank %d: %s: asynchronous calls serve host communicators only, not %s "
                      "buffers: CUDA calls are already asynchronous on their stream (use "
                      "the blocking call with a stream)",
                      c->rank, fn, rt_device_title(c->device));
        return COMM_ERR_UNSUPPORTED;
    }
    return c->async != NULL ? COMM_OK : async_start(c, fn);
}

/* Queues a refused call's failure, so that the peers learn of it in its turn. */
static void issue_failure(struct comm *c, comm_status_t st, const char *fn, const char *msg)
{
    struct comm_request *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return; /* the peers then learn at their timeout */
    r->kind = RT_ASYNC_FAIL;
    r->fn = fn;
    r->run = run_fail;
    r->comm = c;
    r->internal = true;
    r->args.fail.status = st;
    snprintf(r->args.fail.msg, sizeof(r->args.fail.msg), "%s", msg);
    enqueue(c->async, r);
}

static comm_status_t issue_coll(struct comm *c, const struct coll_call *call, bool add,
                                const char *fn, comm_request_t **req)
{
    comm_status_t st = issue_begin(c, req, fn);
    if (st != COMM_OK)
        return st;
    char msg[RT_ERRMSG_BYTES];
    st = rt_coll_check(c, call, add, fn, msg, sizeof(msg));
    if (st != COMM_OK) {
        rt_init_error(&c->knobs, st, "%s", msg);
        /* UNSUPPORTED is refused alike by every rank and leaves c usable, as the
         * blocking call does; anything else breaks c on every rank in its turn. */
        if (st != COMM_ERR_UNSUPPORTED)
            issue_failure(c, st, fn, msg);
        return st;
    }
    struct comm_request *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        rt_init_error(&c->knobs, COMM_ERR_NOMEM, "rank %d: %s: out of memory", c->rank, fn);
        return COMM_ERR_NOMEM;
    }
    r->kind = RT_ASYNC_COLL;
    r->fn = fn;
    r->run = run_coll;
    r->comm = c;
    r->args.coll.call = *call;
    r->args.coll.add = add;
    enqueue(c->async, r);
    *req = r;
    return COMM_OK;
}

/* Runs the wait hook of c's owner from the caller's thread, once due: a nonzero return
 * aborts c, which ends every pending request with COMM_ERR_ABORTED. */
static void wait_hook_turn(struct comm *c, uint64_t *next)
{
    const struct comm *o = c->hook_owner != NULL ? c->hook_owner : c;
    if (o->wait_hook == NULL)
        return;
    uint64_t now = rt_now_ns();
    if (*next == 0)
        *next = now + o->wait_hook_period_ns;
    if (now < *next)
        return;
    int r = o->wait_hook((comm_t *)o, o->wait_hook_arg);
    *next = rt_now_ns() + o->wait_hook_period_ns;
    if (r != 0) {
        rt_log(c, RT_LOG_INFO, "rank %d: the wait hook returned %d in comm_wait: aborting", c->rank,
               r);
        comm_abort(c);
    }
}

/* How long the caller sleeps between looks at its hook (and at nothing else: the
 * progress thread's broadcast wakes it when an entry completes). */
static uint64_t hook_slice_ns(const struct comm *c)
{
    const struct comm *o = c->hook_owner != NULL ? c->hook_owner : c;
    return o->wait_hook != NULL ? o->wait_hook_period_ns : 1000000000ull;
}

/*
 * Until until() holds (under a->lock, which this holds on entry and exit): the progress
 * thread runs the queue while this thread sleeps and runs the wait hook; with caller
 * progress this thread runs the queue's head itself.  Bounded: every queued call is
 * bounded by the communicator's timeout, and once one fails the rest answer at once.
 */
static void wait_until(struct comm *c, struct rt_async *a,
                       bool (*until)(struct rt_async *a, void *arg), void *arg)
{
    uint64_t next_hook = 0;
    close_stretch(a);
    while (!until(a, arg)) {
        if (a->mode == RT_PROGRESS_CALLER && a->head != NULL) {
            run_next(c, a);
            continue;
        }
        uint64_t slice = hook_slice_ns(c);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t t = (uint64_t)ts.tv_nsec + slice;
        ts.tv_sec += (time_t)(t / 1000000000u);
        ts.tv_nsec = (long)(t % 1000000000u);
        pthread_cond_timedwait(&a->done, &a->lock, &ts);
        if (until(a, arg))
            break;
        pthread_mutex_unlock(&a->lock);
        wait_hook_turn(c, &next_hook);
        pthread_mutex_lock(&a->lock);
    }
}

static bool idle(struct rt_async *a, void *arg)
{
    (void)arg;
    return a->head == NULL && !a->running;
}

static bool req_done(struct rt_async *a, void *arg)
{
    (void)a;
    return ((struct comm_request *)arg)->done;
}

void rt_async_drain(struct comm *c)
{
    struct rt_async *a = c->async;
    if (running_for == c)
        return;
    pthread_mutex_lock(&a->lock);
    wait_until(c, a, idle, NULL);
    pthread_mutex_unlock(&a->lock);
}

unsigned rt_async_outstanding(struct comm *c)
{
    struct rt_async *a = c->async;
    if (a == NULL)
        return 0;
    pthread_mutex_lock(&a->lock);
    unsigned n = a->outstanding;
    pthread_mutex_unlock(&a->lock);
    return n;
}

void rt_async_close(struct comm *c)
{
    struct rt_async *a = c->async;
    if (a->thread_started) {
        pthread_mutex_lock(&a->lock);
        a->stop = true;
        pthread_cond_signal(&a->work);
        pthread_mutex_unlock(&a->lock);
        pthread_join(a->thread, NULL);
    }
    pthread_cond_destroy(&a->done);
    pthread_cond_destroy(&a->work);
    pthread_mutex_destroy(&a->lock);
    free(a);
    c->async = NULL;
}

/* The request *req names, or NULL (the reason in comm_last_error(NULL)). */
static struct comm_request *request_of(comm_request_t **req, const char *fn)
{
    if (req == NULL || *req == NULL) {
        rt_init_error(NULL, COMM_ERR_INVALID, "%s: %s is NULL", fn, req == NULL ? "req" : "*req");
        return NULL;
    }
    return *req;
}

/* Frees a done request (under a->lock) and returns its status. */
static comm_status_t release(struct rt_async *a, comm_request_t **req)
{
    struct comm_request *r = *req;
    comm_status_t st = r->status;
    a->outstanding--;
    free(r);
    *req = NULL;
    return st;
}

ARCOMM_API comm_status_t comm_test(comm_request_t **req, int *done)
{
    struct comm_request *r = request_of(req, "comm_test");
    if (r == NULL)
        return COMM_ERR_INVALID;
    if (done == NULL) {
        rt_init_error(NULL, COMM_ERR_INVALID, "comm_test: done is NULL");
        return COMM_ERR_INVALID;
    }
    struct rt_async *a = r->comm->async;
    pthread_mutex_lock(&a->lock);
    close_stretch(a);
    /* Caller progress: the calls up to this one run now (each waits for its peers). */
    if (a->mode == RT_PROGRESS_CALLER)
        wait_until(r->comm, a, req_done, r);
    comm_status_t st = COMM_OK;
    *done = r->done;
    if (r->done)
        st = release(a, req);
    pthread_mutex_unlock(&a->lock);
    return st;
}

ARCOMM_API comm_status_t comm_wait(comm_request_t **req)
{
    struct comm_request *r = request_of(req, "comm_wait");
    if (r == NULL)
        return COMM_ERR_INVALID;
    struct rt_async *a = r->comm->async;
    pthread_mutex_lock(&a->lock);
    wait_until(r->comm, a, req_done, r);
    comm_status_t st = release(a, req);
    pthread_mutex_unlock(&a->lock);
    return st;
}

ARCOMM_API comm_status_t comm_wait_all(int n, comm_request_t **reqs)
{
    if (n < 0 || (n > 0 && reqs == NULL)) {
        rt_init_error(NULL, COMM_ERR_INVALID, "comm_wait_all: %s",
                      n < 0 ? "n is negative" : "reqs is NULL");
        return COMM_ERR_INVALID;
    }
    comm_status_t first = COMM_OK;
    for (int i = 0; i < n; i++) {
        if (reqs[i] == NULL)
            continue; /* completed already, as MPI's null request */
        comm_status_t st = comm_wait(&reqs[i]);
        if (first == COMM_OK)
            first = st;
    }
    return first;
}

ARCOMM_API comm_status_t comm_iallreduce(comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, comm_dtype_t dtype, comm_op_t op,
                                         comm_request_t **req)
{
    struct coll_call call = {
        .kind = COLL_ALLREDUCE,
        .send = sendbuf,
        .recv = recvbuf,
        .count = count,
        .dtype = dtype,
        .op = op,
    };
    return issue_coll(comm, &call, false, "comm_iallreduce", req);
}

ARCOMM_API comm_status_t comm_iallreduce_add(comm_t *comm, const void *sendbuf, void *recvbuf,
                                             const void *addend, size_t addend_count, size_t count,
                                             comm_dtype_t dtype, comm_request_t **req)
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
    };
    return issue_coll(comm, &call, true, "comm_iallreduce_add", req);
}

ARCOMM_API comm_status_t comm_ibroadcast(comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, comm_dtype_t dtype, int root,
                                         comm_request_t **req)
{
    struct coll_call call = {
        .kind = COLL_BROADCAST,
        .root = root,
        .send = sendbuf,
        .recv = recvbuf,
        .count = count,
        .dtype = dtype,
        .op = COMM_SUM,
    };
    return issue_coll(comm, &call, false, "comm_ibroadcast", req);
}

ARCOMM_API comm_status_t comm_ireduce(comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t count, comm_dtype_t dtype, comm_op_t op, int root,
                                      comm_request_t **req)
{
    struct coll_call call = {
        .kind = COLL_REDUCE,
        .root = root,
        .send = sendbuf,
        .recv = recvbuf,
        .count = count,
        .dtype = dtype,
        .op = op,
    };
    return issue_coll(comm, &call, false, "comm_ireduce", req);
}

ARCOMM_API comm_status_t comm_iallgather(comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t sendcount, comm_dtype_t dtype, comm_request_t **req)
{
    struct coll_call call = {
        .kind = COLL_ALLGATHER,
        .send = sendbuf,
        .recv = recvbuf,
        .count = sendcount,
        .dtype = dtype,
        .op = COMM_SUM,
    };
    return issue_coll(comm, &call, false, "comm_iallgather", req);
}

ARCOMM_API comm_status_t comm_ireduce_scatter(comm_t *comm, const void *sendbuf, void *recvbuf,
                                              size_t recvcount, comm_dtype_t dtype, comm_op_t op,
                                              comm_request_t **req)
{
    struct coll_call call = {
        .kind = COLL_REDUCE_SCATTER,
        .send = sendbuf,
        .recv = recvbuf,
        .count = recvcount,
        .dtype = dtype,
        .op = op,
    };
    return issue_coll(comm, &call, false, "comm_ireduce_scatter", req);
}

ARCOMM_API comm_status_t comm_ialltoall(comm_t *comm, const void *sendbuf, void *recvbuf,
                                        size_t count, comm_dtype_t dtype, comm_request_t **req)
{
    struct coll_call call = {
        .kind = COLL_ALLTOALL,
        .send = sendbuf,
        .recv = recvbuf,
        .count = count,
        .dtype = dtype,
        .op = COMM_SUM,
    };
    return issue_coll(comm, &call, false, "comm_ialltoall", req);
}

ARCOMM_API comm_status_t comm_ibarrier(comm_t *comm, comm_request_t **req)
{
    comm_status_t st = issue_begin(comm, req, "comm_ibarrier");
    if (st != COMM_OK)
        return st;
    struct comm_request *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        rt_init_error(&comm->knobs, COMM_ERR_NOMEM, "rank %d: comm_ibarrier: out of memory",
                      comm->rank);
        return COMM_ERR_NOMEM;
    }
    r->kind = RT_ASYNC_BARRIER;
    r->fn = "comm_ibarrier";
    r->run = run_barrier;
    r->comm = comm;
    enqueue(comm->async, r);
    *req = r;
    return COMM_OK;
}

/* comm_isend and comm_irecv: the local checks at issue (comm_send's others in its turn). */
static comm_status_t issue_p2p(struct comm *c, bool send, void *buf, size_t count,
                               comm_dtype_t dtype, int peer, comm_request_t **req, const char *fn)
{
    comm_status_t st = issue_begin(c, req, fn);
    if (st != COMM_OK)
        return st;
    const char *bad = peer < 0 || peer >= c->nranks ? "peer is out of range"
                      : comm_dtype_size(dtype) == 0 ? "dtype is not a comm_dtype_t"
                      : buf == NULL && count > 0    ? "buf is NULL with count > 0"
                                                    : NULL;
    if (bad != NULL) {
        rt_init_error(&c->knobs, COMM_ERR_INVALID,
                      "rank %d: %s: %s (peer %d of %d ranks, count %zu); the call was not "
                      "queued",
                      c->rank, fn, bad, peer, c->nranks, count);
        return COMM_ERR_INVALID;
    }
    struct comm_request *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        rt_init_error(&c->knobs, COMM_ERR_NOMEM, "rank %d: %s: out of memory", c->rank, fn);
        return COMM_ERR_NOMEM;
    }
    r->kind = RT_ASYNC_P2P;
    r->fn = fn;
    r->comm = c;
    r->args.p2p.send = send;
    r->args.p2p.buf = buf;
    r->args.p2p.count = count;
    r->args.p2p.dtype = dtype;
    r->args.p2p.peer = peer;
    enqueue(c->async, r);
    *req = r;
    return COMM_OK;
}

ARCOMM_API comm_status_t comm_isend(comm_t *comm, const void *buf, size_t count, comm_dtype_t dtype,
                                    int peer, comm_request_t **req)
{
    return issue_p2p(comm, true, (void *)(uintptr_t)buf, count, dtype, peer, req, "comm_isend");
}

ARCOMM_API comm_status_t comm_irecv(comm_t *comm, void *buf, size_t count, comm_dtype_t dtype,
                                    int peer, comm_request_t **req)
{
    return issue_p2p(comm, false, buf, count, dtype, peer, req, "comm_irecv");
}
