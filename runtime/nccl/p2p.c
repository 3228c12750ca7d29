/* SPDX-License-Identifier: MIT */
/*
 * ncclSend and ncclRecv on arcomm's collectives.  Each pair of ranks of a communicator
 * that exchanges data gets a 2-rank arcomm communicator of its own, made on its first
 * exchange (as NCCL connects a pair lazily): its id derives from the parent's id and
 * the two ranks, so both make it without an exchange.  A send is a broadcast on it
 * rooted at the sender, the receive the same broadcast at the peer; the count and
 * dtype are then agreed as every collective's are (a send and receive that disagree
 * fail with COMM_ERR_MISMATCH on both), and waits, aborts and dead peers behave as
 * arcomm's always do.
 *
 * Calls are kept until the outermost ncclGroupEnd (at once outside a group), then run
 * in a fixed order on each pair, the lower rank's sends first: both ranks enqueue the
 * same broadcasts in the same order whatever order the program called them in.  Each
 * pair's calls go to a stream of its own, forked from and joined back to the callers'
 * streams, so that the pairs of a group progress together (a ring of sends and
 * receives would deadlock on one stream).  A send to oneself within a group is a copy
 * to the matching receive.  ncclGather and ncclScatter are groups of these.
 */
#include "face.h"
#include "rt_hooks.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct p2p_op {
    struct ncclComm *comm;
    bool send;
    void *buf;
    size_t count;
    comm_dtype_t dt;
    int peer;
    cudaStream_t stream;
    const char *fn;
    bool done;
};

static _Thread_local struct p2p_op *ops;
static _Thread_local int nops, cap_ops;

/* The pair (comm, peer) being made in a thread of its own. */
struct pair_job {
    struct ncclComm *comm;
    int peer;
    pthread_t thread;
    comm_t *made;
    comm_status_t st;
    char why[NCCL_FACE_ERRMSG];
};

static void *pair_run(void *arg)
{
    struct pair_job *j = arg;
    struct ncclComm *comm = j->comm;
    comm_id_t parent;
    j->st = rt_hook_comm_id(comm->c, &parent);
    if (j->st != COMM_OK) {
        snprintf(j->why, sizeof(j->why), "the communicator is not alive");
        return NULL;
    }
    int lo = comm->rank < j->peer ? comm->rank : j->peer;
    int hi = comm->rank < j->peer ? j->peer : comm->rank;
    char key[160];
    snprintf(key, sizeof(key), "%s/p2p/%d/%d", parent.str, lo, hi);
    comm_config_t cfg;
    comm_config_init(&cfg);
    nccl_id_derive(key, &cfg.id);
    cfg.nranks = 2;
    cfg.rank = comm->rank == lo ? 0 : 1;
    cfg.device = COMM_DEVICE_CUDA;
    cfg.device_index = comm->device;
    cfg.knob_defaults = NCCL_FACE_KNOB_DEFAULTS;
    (void)cudaSetDevice(comm->device);
    j->st = comm_init(&j->made, &cfg);
    if (j->st != COMM_OK)
        snprintf(j->why, sizeof(j->why), "%s", comm_last_error(NULL));
    return NULL;
}

/* The pair's stream and event, on its communicator's GPU (current). */
static cudaError_t pair_streams(struct nccl_pair *p)
{
    cudaStream_t s;
    cudaEvent_t ev;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        return e;
    e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        (void)cudaStreamDestroy(s);
        return e;
    }
    p->side = s;
    p->done = ev;
    return cudaSuccess;
}

static bool stream_capturing(cudaStream_t s)
{
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &cap) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return cap != cudaStreamCaptureStatusNone;
}

/* Makes every pair the kept calls need and lacks, all at once (one thread may drive both
 * ranks of a pair), each in a thread of its own. */
static ncclResult_t make_pairs(void)
{
    struct pair_job *jobs = calloc((size_t)nops, sizeof(*jobs));
    if (jobs == NULL)
        return nccl_fail(ncclSystemError, "ncclGroupEnd: out of memory");
    int n = 0;
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < nops && r == ncclSuccess; i++) {
        struct p2p_op *o = &ops[i];
        if (o->peer == o->comm->rank || o->comm->pairs[o->peer].c != NULL)
            continue;
        bool dup = false;
        for (int k = 0; k < n && !dup; k++)
            dup = jobs[k].comm == o->comm && jobs[k].peer == o->peer;
        if (dup)
            continue;
        if (stream_capturing(o->stream)) {
            r = nccl_fail(ncclInvalidUsage,
                          "%s: rank %d: the first send or receive between ranks %d and %d is "
                          "being captured into a CUDA graph; make it once before the capture "
                          "(it sets up the pair's communicator, which a capture cannot)",
                          o->fn, o->comm->rank, o->comm->rank, o->peer);
            break;
        }
        jobs[n].comm = o->comm;
        jobs[n].peer = o->peer;
        if (pthread_create(&jobs[n].thread, NULL, pair_run, &jobs[n]) != 0) {
            r = nccl_fail(ncclSystemError, "%s: cannot start a thread", o->fn);
            break;
        }
        n++;
    }
    for (int k = 0; k < n; k++)
        pthread_join(jobs[k].thread, NULL);
    for (int k = 0; k < n; k++) {
        struct pair_job *j = &jobs[k];
        if (j->st != COMM_OK) {
            if (r == ncclSuccess)
                r = nccl_fail(nccl_result(j->st),
                              "rank %d: the communicator of ranks %d and %d for ncclSend/ncclRecv "
                              "could not be made: %s",
                              j->comm->rank, j->comm->rank, j->peer, j->why);
            continue;
        }
        struct nccl_pair *p = &j->comm->pairs[j->peer];
        int prev = 0;
        (void)nccl_current_device(&prev);
        (void)cudaSetDevice(j->comm->device);
        cudaError_t e = pair_streams(p);
        (void)cudaSetDevice(prev);
        if (e != cudaSuccess) {
            (void)comm_destroy(j->made);
            if (r == ncclSuccess)
                r = nccl_fail(ncclUnhandledCudaError, "rank %d: a stream for the pair with %d: %s",
                              j->comm->rank, j->peer, cudaGetErrorString(e));
            continue;
        }
        p->c = j->made;
    }
    free(jobs);
    return r;
}

/* The callers' streams of the kept calls, each with the event the pairs fork from. */
struct fork {
    cudaStream_t stream;
    int device;
    cudaEvent_t ev;
};

static struct fork *fork_of(struct fork *f, int nf, cudaStream_t s, int device)
{
    for (int i = 0; i < nf; i++)
        if (f[i].stream == s && f[i].device == device)
            return &f[i];
    return NULL;
}

/* Sends to oneself within the group: each a copy into the matching receive (in order),
 * on the receive's stream after the send's, which then waits for the copy. */
static ncclResult_t run_self(struct fork *forks, int nf)
{
    for (int i = 0; i < nops; i++) {
        struct p2p_op *s = &ops[i];
        if (!s->send || s->done || s->peer != s->comm->rank)
            continue;
        struct p2p_op *v = NULL;
        for (int k = 0; k < nops && v == NULL; k++)
            if (!ops[k].send && !ops[k].done && ops[k].comm == s->comm &&
                ops[k].peer == s->comm->rank)
                v = &ops[k];
        if (v == NULL || v->count != s->count || v->dt != s->dt)
            return nccl_fail(ncclInvalidUsage,
                             "%s: rank %d sends %zu elements to itself; the group needs one "
                             "ncclRecv from itself of the same count and datatype%s",
                             s->fn, s->comm->rank, s->count, v == NULL ? " (there is none)" : "");
        s->done = v->done = true;
        size_t bytes = s->count * comm_dtype_size(s->dt);
        (void)cudaSetDevice(s->comm->device);
        cudaError_t e =
            cudaStreamWaitEvent(v->stream, fork_of(forks, nf, s->stream, s->comm->device)->ev, 0);
        if (e == cudaSuccess && bytes > 0 && v->buf != s->buf)
            e = cudaMemcpyAsync(v->buf, s->buf, bytes, cudaMemcpyDeviceToDevice, v->stream);
        cudaEvent_t copied;
        if (e == cudaSuccess && v->stream != s->stream &&
            (e = cudaEventCreateWithFlags(&copied, cudaEventDisableTiming)) == cudaSuccess) {
            e = cudaEventRecord(copied, v->stream);
            if (e == cudaSuccess)
                e = cudaStreamWaitEvent(s->stream, copied, 0);
            (void)cudaEventDestroy(copied);
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return nccl_fail(ncclUnhandledCudaError, "%s: rank %d: a copy to itself: %s", s->fn,
                             s->comm->rank, cudaGetErrorString(e));
        }
    }
    for (int i = 0; i < nops; i++)
        if (!ops[i].done && ops[i].peer == ops[i].comm->rank)
            return nccl_fail(ncclInvalidUsage,
                             "%s: rank %d receives from itself with no ncclSend to itself in "
                             "the group",
                             ops[i].fn, ops[i].comm->rank);
    return ncclSuccess;
}

/* One kept call as the broadcast of its pair, on the pair's stream. */
static ncclResult_t run_op(struct p2p_op *o, struct nccl_pair *p, struct fork *f)
{
    cudaError_t e = cudaStreamWaitEvent((cudaStream_t)p->side, f->ev, 0);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return nccl_fail(ncclUnhandledCudaError, "%s: rank %d: %s", o->fn, o->comm->rank,
                         cudaGetErrorString(e));
    }
    int me = comm_rank(p->c), root = o->send ? me : 1 - me;
    comm_status_t st =
        comm_broadcast(p->c, o->send ? o->buf : NULL, o->buf, o->count, o->dt, root, p->side);
    if (st != COMM_OK)
        return nccl_fail(nccl_result(st), "%s: rank %d, peer %d: %s", o->fn, o->comm->rank, o->peer,
                         comm_last_error(p->c));
    return ncclSuccess;
}

/* Every kept call of pair (comm, peer) in the order both ranks agree on: the lower
 * rank's sends, then the higher rank's, each direction in the order of the calls. */
static ncclResult_t run_pair(struct ncclComm *comm, int peer, struct fork *forks, int nf)
{
    struct nccl_pair *p = &comm->pairs[peer];
    bool low = comm->rank < peer;
    bool ran = false; /* anything enqueued on the pair's stream */
    ncclResult_t r = ncclSuccess;
    for (int pass = 0; pass < 2 && r == ncclSuccess; pass++) {
        /* pass 0: the lower rank's sends (ours when low), pass 1: the higher rank's. */
        bool sends = (pass == 0) == low;
        for (int i = 0; i < nops && r == ncclSuccess; i++) {
            struct p2p_op *o = &ops[i];
            if (o->done || o->comm != comm || o->peer != peer || o->send != sends)
                continue;
            o->done = true;
            if (o->count > 0) {
                r = run_op(o, p, fork_of(forks, nf, o->stream, comm->device));
                ran = true;
            }
        }
    }
    /* Sends and receives of nothing enqueue nothing, and the callers' streams wait for
     * nothing: an event recorded on the pair's stream then would be work outside a graph
     * capture under way on theirs (nccl-tests' -G starts at 0 bytes). */
    if (!ran)
        return r;
    /* The callers' streams of this pair's calls wait for the pair's stream. */
    cudaError_t e = cudaEventRecord((cudaEvent_t)p->done, (cudaStream_t)p->side);
    for (int i = 0; i < nops && e == cudaSuccess; i++) {
        struct p2p_op *o = &ops[i];
        if (o->comm != comm || o->peer != peer)
            continue;
        bool first = true;
        for (int k = 0; k < i && first; k++)
            first = !(ops[k].comm == comm && ops[k].peer == peer && ops[k].stream == o->stream);
        if (first)
            e = cudaStreamWaitEvent(o->stream, (cudaEvent_t)p->done, 0);
    }
    if (e != cudaSuccess && r == ncclSuccess) {
        (void)cudaGetLastError();
        r = nccl_fail(ncclUnhandledCudaError, "rank %d: joining the pair with %d: %s", comm->rank,
                      peer, cudaGetErrorString(e));
    }
    return r;
}

static ncclResult_t run_all(void)
{
    ncclResult_t r = make_pairs();
    if (r != ncclSuccess)
        return r;
    struct fork *forks = calloc((size_t)nops, sizeof(*forks));
    if (forks == NULL)
        return nccl_fail(ncclSystemError, "ncclGroupEnd: out of memory");
    int nf = 0, prev = 0;
    (void)nccl_current_device(&prev);
    /* Every caller's stream is forked from before any pair's stream joins one of them:
     * no pair waits for another's calls. */
    for (int i = 0; i < nops && r == ncclSuccess; i++) {
        struct p2p_op *o = &ops[i];
        if (fork_of(forks, nf, o->stream, o->comm->device) != NULL)
            continue;
        struct fork *f = &forks[nf];
        f->stream = o->stream;
        f->device = o->comm->device;
        cudaError_t e = cudaSetDevice(f->device);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&f->ev, cudaEventDisableTiming);
        if (e == cudaSuccess) {
            nf++;
            e = cudaEventRecord(f->ev, f->stream);
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            r = nccl_fail(ncclUnhandledCudaError, "%s: rank %d: on its stream: %s", o->fn,
                          o->comm->rank, cudaGetErrorString(e));
        }
    }
    if (r == ncclSuccess)
        r = run_self(forks, nf);
    for (int i = 0; i < nops && r == ncclSuccess; i++) {
        struct p2p_op *o = &ops[i];
        if (o->done)
            continue;
        (void)cudaSetDevice(o->comm->device);
        r = run_pair(o->comm, o->peer, forks, nf);
    }
    for (int i = 0; i < nf; i++) {
        (void)cudaSetDevice(forks[i].device);
        (void)cudaEventDestroy(forks[i].ev);
    }
    (void)cudaSetDevice(prev);
    free(forks);
    return r;
}

ncclResult_t nccl_p2p_flush(void)
{
    if (nops == 0)
        return ncclSuccess;
    ncclResult_t r = run_all();
    nops = 0;
    free(ops);
    ops = NULL;
    cap_ops = 0;
    return r;
}

static ncclResult_t keep(struct ncclComm *comm, bool send, const void *buf, size_t count,
                         ncclDataType_t datatype, int peer, cudaStream_t stream, const char *fn)
{
    ncclResult_t r = nccl_comm_enter(comm, fn);
    comm_dtype_t dt = COMM_U8;
    if (r == ncclSuccess)
        r = nccl_map_dtype(datatype, false, &dt, fn);
    if (r == ncclSuccess && (peer < 0 || peer >= comm->nranks))
        r = nccl_fail(ncclInvalidArgument, "%s: rank %d: peer %d is out of range 0..%d", fn,
                      comm->rank, peer, comm->nranks - 1);
    if (r == ncclSuccess && buf == NULL && count > 0)
        r = nccl_fail(ncclInvalidArgument, "%s: rank %d: the buffer is NULL for %zu elements", fn,
                      comm->rank, count);
    if (r == ncclSuccess && comm->pairs == NULL) {
        comm->pairs = calloc((size_t)comm->nranks, sizeof(*comm->pairs));
        if (comm->pairs == NULL)
            r = nccl_fail(ncclSystemError, "%s: out of memory", fn);
    }
    if (r == ncclSuccess && nops == cap_ops) {
        int ncap = cap_ops ? 2 * cap_ops : 16;
        struct p2p_op *n = realloc(ops, (size_t)ncap * sizeof(*n));
        if (n == NULL)
            r = nccl_fail(ncclSystemError, "%s: out of memory", fn);
        else {
            ops = n;
            cap_ops = ncap;
        }
    }
    if (r != ncclSuccess)
        return nccl_group_result(r);
    ops[nops++] = (struct p2p_op){.comm = comm,
                                  .send = send,
                                  .buf = (void *)buf,
                                  .count = count,
                                  .dt = dt,
                                  .peer = peer,
                                  .stream = stream,
                                  .fn = fn};
    return nccl_in_group() ? ncclSuccess : nccl_p2p_flush();
}

NCCL_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                               int peer, ncclComm_t comm, cudaStream_t stream)
{
    return keep(comm, true, sendbuff, count, datatype, peer, stream, "ncclSend");
}
NCCL_ALIAS(ncclSend);

NCCL_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                               ncclComm_t comm, cudaStream_t stream)
{
    return keep(comm, false, recvbuff, count, datatype, peer, stream, "ncclRecv");
}
NCCL_ALIAS(ncclRecv);

/* ncclGather and ncclScatter (NCCL 2.28's, beyond 2.19's nccl.h): declared here. */
NCCL_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                 ncclDataType_t datatype, int root, ncclComm_t comm,
                                 cudaStream_t stream);
NCCL_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream);

/*
 * A gather is a group of sends to the root and the root's receives from every rank
 * (rank p's count elements at p * count of its recvbuff); a scatter the other way.  The
 * root's own block is a copy within the group, or nothing in place (gather: sendbuff at
 * root * count of recvbuff; scatter: recvbuff at root * count of sendbuff).  Inside a
 * program's group the sends and receives join it; otherwise the group is this call's.
 */
static ncclResult_t rooted(struct ncclComm *comm, bool gather, const void *sendbuff, void *recvbuff,
                           size_t count, ncclDataType_t datatype, int root, cudaStream_t stream,
                           const char *fn)
{
    ncclResult_t r = nccl_comm_ready(comm, fn);
    comm_dtype_t dt = COMM_U8;
    if (r == ncclSuccess)
        r = nccl_map_dtype(datatype, false, &dt, fn);
    if (r != ncclSuccess)
        return nccl_group_result(r);
    size_t bytes = count * comm_dtype_size(dt), all = 0;
    bool is_root = comm->rank == root;
    /* The buffer of n blocks (the root's) and the buffer of one (every rank's). */
    const char *many = gather ? recvbuff : sendbuff, *one = gather ? sendbuff : recvbuff;
    if (root < 0 || root >= comm->nranks)
        r = nccl_fail(ncclInvalidArgument, "%s: rank %d: root %d is out of range 0..%d", fn,
                      comm->rank, root, comm->nranks - 1);
    else if (__builtin_mul_overflow(bytes, (size_t)comm->nranks, &all) ||
             bytes / comm_dtype_size(dt) != count)
        r = nccl_fail(ncclInvalidArgument, "%s: rank %d: %zu elements per rank overflow", fn,
                      comm->rank, count);
    else if (count > 0 && (one == NULL || (is_root && many == NULL)))
        r = nccl_fail(ncclInvalidArgument, "%s: rank %d: %s is NULL for %zu elements", fn,
                      comm->rank,
                      one == NULL ? (gather ? "sendbuff" : "recvbuff")
                                  : (gather ? "the root's recvbuff" : "the root's sendbuff"),
                      count);
    if (r != ncclSuccess || count == 0)
        return nccl_group_result(r);
    bool in_place = is_root && one == many + (size_t)root * bytes;
    ncclResult_t e = ncclGroupStart();
    if (e == ncclSuccess && !in_place)
        e = keep(comm, gather, (void *)one, count, datatype, root, stream, fn);
    for (int p = 0; p < comm->nranks && e == ncclSuccess && is_root; p++)
        if (p != root || !in_place)
            e = keep(comm, !gather, (void *)(many + (size_t)p * bytes), count, datatype, p, stream,
                     fn);
    ncclResult_t end = ncclGroupEnd();
    return e != ncclSuccess ? e : end;
}

NCCL_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                 ncclDataType_t datatype, int root, ncclComm_t comm,
                                 cudaStream_t stream)
{
    return rooted(comm, true, sendbuff, recvbuff, count, datatype, root, stream, "ncclGather");
}
NCCL_ALIAS(ncclGather);

NCCL_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream)
{
    return rooted(comm, false, sendbuff, recvbuff, count, datatype, root, stream, "ncclScatter");
}
NCCL_ALIAS(ncclScatter);

void nccl_p2p_abort(struct ncclComm *comm)
{
    for (int q = 0; comm->pairs != NULL && q < comm->nranks; q++)
        if (comm->pairs[q].c != NULL)
            (void)comm_abort(comm->pairs[q].c);
}

comm_status_t nccl_p2p_state(const struct ncclComm *comm)
{
    for (int q = 0; comm->pairs != NULL && q < comm->nranks; q++) {
        if (comm->pairs[q].c == NULL)
            continue;
        comm_status_t st = rt_hook_comm_state(comm->pairs[q].c);
        if (st != COMM_OK)
            return st;
    }
    return COMM_OK;
}

void nccl_p2p_free(struct ncclComm *comm)
{
    if (comm->pairs == NULL)
        return;
    int prev = 0;
    (void)nccl_current_device(&prev);
    (void)cudaSetDevice(comm->device);
    for (int q = 0; q < comm->nranks; q++) {
        struct nccl_pair *p = &comm->pairs[q];
        if (p->c == NULL)
            continue;
        (void)comm_destroy(p->c);
        (void)cudaStreamDestroy((cudaStream_t)p->side);
        (void)cudaEventDestroy((cudaEvent_t)p->done);
    }
    (void)cudaSetDevice(prev);
    free(comm->pairs);
    comm->pairs = NULL;
}
