/* SPDX-License-Identifier: MIT */
/*
 * CUDA buffers on a communicator of comm_init_mpi.  The intra-host communicator is a
 * CUDA one (its calls are enqueued on the caller's stream); the inter-host step is
 * staged through pinned host memory, as MPI here is not CUDA-aware:
 *
 *   intra-host step on the stream -> device-to-host copy of this host's part into a
 *   pinned buffer, the host waiting for it (cudaEventQuery, bounded by the deadline,
 *   comm_abort, the failure notices and the watch of its host's ranks: mpi_link_wait_for)
 *   -> the inter-host MPI step on the pinned buffer, nonblocking and polled as on the host
 *   -> host-to-device copy on the stream -> the last intra-host step on the stream.
 *
 * So a call returns once its last step is enqueued, after the inter-host step: unlike a
 * single-host CUDA call, it synchronizes the host with the stream (up to the data the
 * inter-host step needs).  The ranks that take no part in the inter-host step (every
 * rank but the leader in the reductions, broadcast and allgather) return once their
 * intra-host steps are enqueued, as on one host.  f16 and bf16 reduce in f32: the input
 * is widened on the host (pinned memory) and the sum rounded once, by the leader, on
 * the host, as the host path does.  Every call is ordered on the device after the
 * previous call of the communicator (ev_end), whatever stream each used; the pinned
 * buffers are rewritten only once the copies that read them are done (ev_in).
 * comm_allreduce_add: the allreduce's sum comes back to every rank unrounded (in f32 for
 * f16 and bf16), every rank copies it and its own addend to the host, adds them there
 * and rounds once, as the host path does, and copies the result in: every rank waits
 * for its stream.  docs/multihost.md has what this costs.
 */
#include "hier_inter.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#if HIER_CUDA

#include <cuda_runtime_api.h>

enum { PIN_A, PIN_B, PIN_N };                   /* pinned host buffers */
enum { DEV_WIDE, DEV_WORK, DEV_RESULT, DEV_N }; /* device scratch */
/* The leader's reduction crosses in chunks of at least this many bytes, at most
 * HIER_CUDA_CHUNKS of them (its copies overlap the network: leader_chunks). */
#define HIER_CUDA_CHUNK_BYTES (1u << 20)
#define HIER_CUDA_CHUNKS      16
/* Outgrown buffers: a copy or kernel enqueued before may still use them (freed at the
 * end; every buffer at least doubles when it grows, so few ever retire). */
#define HIER_CUDA_RETIRED_MAX 64

struct hier_cuda {
    int device;
    cudaEvent_t ev_out; /* the last copy into a pinned buffer (the host waits for it) */
    cudaEvent_t ev_in;  /* the last copy out of a pinned buffer */
    cudaEvent_t ev_end; /* the end of the last call: the next is ordered after it */
    cudaEvent_t ev_chunk[HIER_CUDA_CHUNKS]; /* the leader's chunks copied out (reductions) */
    bool in_pending, end_pending;
    void *pin[PIN_N];
    size_t pin_bytes[PIN_N];
    void *dev[DEV_N];
    size_t dev_bytes[DEV_N];
    struct {
        void *p;
        bool pinned;
    } retired[HIER_CUDA_RETIRED_MAX];
    int nretired;
};

static struct hier_cuda *cuda_of_h(struct comm *c)
{
    return hier_of(c)->cuda;
}

static comm_status_t cuda_failed(struct comm *c, int device, const char *what, cudaError_t e)
{
    rt_error(c, COMM_ERR_SYSTEM, "rank %d: %s failed on GPU %d: %s", c->rank, what, device,
             cudaGetErrorString(e));
    return COMM_ERR_SYSTEM;
}

int hier_cuda_devices(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

static void destroy_events(struct hier_cuda *x)
{
    if (x->ev_out != NULL)
        cudaEventDestroy(x->ev_out);
    if (x->ev_in != NULL)
        cudaEventDestroy(x->ev_in);
    if (x->ev_end != NULL)
        cudaEventDestroy(x->ev_end);
    for (int k = 0; k < HIER_CUDA_CHUNKS; k++)
        if (x->ev_chunk[k] != NULL)
            cudaEventDestroy(x->ev_chunk[k]);
}

comm_status_t hier_cuda_open(struct comm *tc, struct hier_comm *h, int device)
{
    struct hier_cuda *x = calloc(1, sizeof(*x));
    if (x == NULL) {
        rt_error(tc, COMM_ERR_NOMEM, "comm_init_mpi: rank %d: out of memory", tc->rank);
        return COMM_ERR_NOMEM;
    }
    x->device = device;
    int prev = 0;
    (void)cudaGetDevice(&prev);
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&x->ev_out, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&x->ev_in, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&x->ev_end, cudaEventDisableTiming);
    for (int k = 0; k < HIER_CUDA_CHUNKS && e == cudaSuccess; k++)
        e = cudaEventCreateWithFlags(&x->ev_chunk[k], cudaEventDisableTiming);
    (void)cudaSetDevice(prev);
    if (e != cudaSuccess) {
        destroy_events(x);
        free(x);
        return cuda_failed(tc, device, "comm_init_mpi: the staging events (cudaEventCreate)", e);
    }
    h->cuda = x;
    return COMM_OK;
}

static void free_buffer(void *p, bool pinned)
{
    if (p == NULL)
        return;
    if (pinned)
        cudaFreeHost(p);
    else
        cudaFree(p);
}

/* Has ev completed (or failed: nothing more will come of it) within ns? */
static bool event_done_within(cudaEvent_t ev, uint64_t ns)
{
    uint64_t end = rt_now_ns() + ns;
    for (;;) {
        cudaError_t e = cudaEventQuery(ev);
        if (e != cudaErrorNotReady)
            return true;
        if (rt_passed(end, rt_now_ns()))
            return false;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

/* How long comm_destroy waits for the staging copies of a failed call (the kernels they
 * follow end at the failure, or the intra-host communicator's teardown gave up on them). */
#define HIER_CUDA_DRAIN_NS 2000000000ull

void hier_cuda_close(struct comm *c, struct hier_comm *h)
{
    struct hier_cuda *x = h->cuda;
    if (x == NULL)
        return;
    h->cuda = NULL;
    int prev = 0;
    (void)cudaGetDevice(&prev);
    (void)cudaSetDevice(x->device);
    /* The copies of a call that failed may still be queued: bounded, and when they never
     * end the buffers stay (a GPU must not copy into freed memory) until the process
     * exits, as the CUDA transport keeps its staging then. */
    bool idle = event_done_within(x->ev_out, HIER_CUDA_DRAIN_NS) &&
                event_done_within(x->ev_in, HIER_CUDA_DRAIN_NS) &&
                event_done_within(x->ev_end, HIER_CUDA_DRAIN_NS);
    for (int k = 0; k < HIER_CUDA_CHUNKS && idle; k++)
        idle = event_done_within(x->ev_chunk[k], HIER_CUDA_DRAIN_NS);
    /* A broken communicator's MPI requests may have been given up on, and MPI may still
     * write the pinned buffers they point at (a rank that comes later): they stay too. */
    if (atomic_load(&c->broken) != 0) {
        (void)cudaSetDevice(prev);
        return;
    }
    if (!idle) {
        rt_log(c, RT_LOG_WARN,
               "rank %d: GPU %d still has staging copies of comm_init_mpi's communicator "
               "queued; their buffers stay until the process exits",
               c->rank, x->device);
        (void)cudaGetLastError();
        (void)cudaSetDevice(prev);
        return;
    }
    for (int i = 0; i < PIN_N; i++)
        free_buffer(x->pin[i], true);
    for (int i = 0; i < DEV_N; i++)
        free_buffer(x->dev[i], false);
    for (int i = 0; i < x->nretired; i++)
        free_buffer(x->retired[i].p, x->retired[i].pinned);
    destroy_events(x);
    (void)cudaGetLastError();
    (void)cudaSetDevice(prev);
    free(x);
}

/* Buffer i (pinned host memory, or device memory) of at least bytes; NULL and an
 * error on c when it cannot be had. */
static void *buffer(struct comm *c, bool pinned, int i, size_t bytes)
{
    struct hier_cuda *x = cuda_of_h(c);
    void **slot = pinned ? &x->pin[i] : &x->dev[i];
    size_t *have = pinned ? &x->pin_bytes[i] : &x->dev_bytes[i];
    if (bytes <= *have)
        return *slot;
    if (*slot != NULL && x->nretired == HIER_CUDA_RETIRED_MAX) {
        rt_error(c, COMM_ERR_NOMEM,
                 "rank %d: the CUDA staging buffers grew %d times: out of room to keep the "
                 "outgrown ones; make the largest call first",
                 c->rank, HIER_CUDA_RETIRED_MAX);
        return NULL;
    }
    size_t want = bytes < 2 * *have ? 2 * *have : bytes;
    void *p = NULL;
    cudaError_t e = pinned ? cudaHostAlloc(&p, want, cudaHostAllocPortable) : cudaMalloc(&p, want);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        rt_error(c, COMM_ERR_NOMEM,
                 "rank %d: out of %s memory for %zu bytes of staging (GPU %d): %s", c->rank,
                 pinned ? "pinned host" : "device", want, x->device, cudaGetErrorString(e));
        return NULL;
    }
    if (*slot != NULL) {
        x->retired[x->nretired].p = *slot;
        x->retired[x->nretired].pinned = pinned;
        x->nretired++;
    }
    *slot = p;
    *have = want;
    return p;
}

static void *pinned(struct comm *c, int i, size_t bytes)
{
    return buffer(c, true, i, bytes);
}

static void *device_buf(struct comm *c, int i, size_t bytes)
{
    return buffer(c, false, i, bytes);
}

/* An event, as the bounded wait polls it. */
static comm_status_t event_poll(struct comm *c, void *arg, bool *done)
{
    cudaEvent_t ev = arg;
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) {
        *done = true;
        return COMM_OK;
    }
    if (e == cudaErrorNotReady)
        return COMM_OK;
    return cuda_failed(c, cuda_of_h(c)->device, "cudaEventQuery (the staging copy)", e);
}

/* The host waits for ev, bounded; then, when the intra-host communicator says a rank of
 * this host failed meanwhile (its kernels then gave up, the data is not the sum),
 * COMM_ERR_PEER. */
static comm_status_t wait_event(struct comm *c, cudaEvent_t ev, uint64_t deadline, const char *what)
{
    struct hier_comm *h = hier_of(c);
    comm_status_t st = mpi_link_wait_for(c, &h->link, event_poll, ev, deadline, true, what);
    if (st != COMM_OK)
        return st;
    comm_status_t in = h->iops->state(h->intra);
    if (in != COMM_OK) {
        rt_error(c, COMM_ERR_PEER,
                 "rank %d: a rank of this host failed during the GPU steps before %s (call %u: "
                 "%s); see that rank's comm_last_error",
                 c->rank, what, c->seq, rt_status_string(in));
        return COMM_ERR_PEER;
    }
    return COMM_OK;
}

/* bytes of device memory at src -> pinned dst, on stream, waited for (bounded). */
static comm_status_t stage_out(struct comm *c, void *dst, const void *src, size_t bytes,
                               cudaStream_t stream, uint64_t deadline, const char *what)
{
    struct hier_cuda *x = cuda_of_h(c);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(x->ev_out, stream);
    if (e != cudaSuccess)
        return cuda_failed(c, x->device, "cudaMemcpyAsync (device to pinned host)", e);
    return wait_event(c, x->ev_out, deadline, what);
}

/* bytes of pinned src -> device dst, enqueued on stream (not waited for). */
static comm_status_t stage_in(struct comm *c, void *dst, const void *src, size_t bytes,
                              cudaStream_t stream)
{
    struct hier_cuda *x = cuda_of_h(c);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(x->ev_in, stream);
    if (e != cudaSuccess)
        return cuda_failed(c, x->device, "cudaMemcpyAsync (pinned host to device)", e);
    x->in_pending = true;
    return COMM_OK;
}

static comm_status_t copy_d2d(struct comm *c, void *dst, const void *src, size_t bytes,
                              cudaStream_t stream)
{
    if (bytes == 0 || dst == src)
        return COMM_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
    return e != cudaSuccess
               ? cuda_failed(c, cuda_of_h(c)->device, "cudaMemcpyAsync (device to device)", e)
               : COMM_OK;
}

/*
 * The leader's part of a reduction: this host's result (n elements of wd at work, device;
 * st: how the intra-host step went) copied to the host, allreduced among the leaders,
 * rounded into dt (AVG divided by div) and copied to dst, pipelined in chunks: every
 * chunk's copy out is queued at once (an event each), and chunk k crosses the network
 * as soon as its copy is done, then goes back on the stream while chunk k + 1 crosses.
 * Every chunk's step carries this rank's status, so a failure ends every leader's loop
 * at the same chunk.
 */
static comm_status_t leader_chunks(struct comm *c, size_t n, comm_dtype_t wd, comm_op_t wop,
                                   const struct wire_row *wire, const void *work, void *pw,
                                   comm_status_t st, uint64_t deadline, comm_dtype_t dt, int div,
                                   char *out, void *dst, cudaStream_t stream)
{
    struct hier_comm *h = hier_of(c);
    struct hier_cuda *x = h->cuda;
    size_t wes = rt_dtype_size(wd), es = rt_dtype_size(dt);
    size_t per = HIER_CUDA_CHUNK_BYTES / wes;
    if (per * HIER_CUDA_CHUNKS < n)
        per = (n + HIER_CUDA_CHUNKS - 1) / HIER_CUDA_CHUNKS;
    /* Chunks of whole codec blocks: a block codec's blocks then start where the host
     * buffers' scheme starts them, at multiples of WIRE_BLOCK_ELEMS from element 0. */
    per = (per + WIRE_BLOCK_ELEMS - 1) / WIRE_BLOCK_ELEMS * WIRE_BLOCK_ELEMS;
    size_t chunks = (n + per - 1) / per;
    for (size_t k = 0; k < chunks && st == COMM_OK; k++) {
        size_t off = k * per, len = n - off < per ? n - off : per;
        cudaError_t e = cudaMemcpyAsync((char *)pw + off * wes, (const char *)work + off * wes,
                                        len * wes, cudaMemcpyDeviceToHost, stream);
        if (e == cudaSuccess)
            e = cudaEventRecord(x->ev_chunk[k], stream);
        if (e != cudaSuccess)
            st = cuda_failed(c, x->device, "cudaMemcpyAsync (device to pinned host)", e);
    }
    for (size_t k = 0; k < chunks; k++) {
        size_t off = k * per, len = n - off < per ? n - off : per;
        if (st == COMM_OK)
            st = wait_event(c, x->ev_chunk[k], deadline,
                            "the copy of this host's reduction to the host");
        if (h->nhosts > 1) {
            struct hier_inter s = {
                .kind = HIER_INTER_ALLREDUCE,
                .mc = h->link.slice,
                .buf = (char *)pw + off * wes,
                .n = len,
                .esize = wes,
                .dtype = wd,
                .op = wop,
                .what = "the allreduce among the hosts' leaders",
                .wire = wire,
            };
            st = hier_inter_segments(c, &s, st, deadline);
        }
        if (st != COMM_OK)
            return st;
        hier_narrow((char *)pw + off * wes, dt, out + off * es, len, div);
        st = stage_in(c, (char *)dst + off * es, out + off * es, len * es, stream);
    }
    return st;
}

/*
 * The reduction over every rank of n elements of call's dtype at call->send (device),
 * with call's op, in dst (device, n elements of odt: the call's dtype, or its work dtype
 * for a sum left unrounded) on every rank, on the stream: reduce to the leader (in the
 * work dtype), the leader stages it out, allreduces it among the leaders, rounds it into
 * odt (f16, bf16; AVG divides) and stages it into its dst, then broadcasts it within
 * the host.
 */
static comm_status_t reduce_to(struct comm *c, const struct coll_call *call, size_t n, void *dst,
                               comm_dtype_t odt, uint64_t deadline)
{
    struct hier_comm *h = hier_of(c);
    cudaStream_t stream = call->stream;
    comm_dtype_t dt = call->dtype, wd = hier_work_dtype(dt);
    comm_op_t wop = call->op == COMM_AVG ? COMM_SUM : call->op;
    int div = call->op == COMM_AVG ? c->nranks : 1;
    size_t es = rt_dtype_size(dt), wes = rt_dtype_size(wd);
    bool half = wd != dt, leader = h->local == 0;
    const void *dsend = call->send;
    comm_status_t st;
    if (half) {
        void *in = pinned(c, PIN_A, n * es), *wide = pinned(c, PIN_B, n * wes);
        void *d = device_buf(c, DEV_WIDE, n * wes);
        if (in == NULL || wide == NULL || d == NULL)
            return COMM_ERR_NOMEM;
        st = stage_out(c, in, call->send, n * es, stream, deadline,
                       "the copy of the f16/bf16 input to the host (widening)");
        if (st != COMM_OK)
            return st;
        hier_widen(in, dt, wide, n);
        st = stage_in(c, d, wide, n * wes, stream);
        if (st != COMM_OK)
            return st;
        dsend = d;
    }
    void *work = NULL, *pw = NULL;
    if (leader) {
        work = device_buf(c, DEV_WORK, n * wes);
        pw = pinned(c, PIN_B, n * wes);
        if (work == NULL || pw == NULL)
            return COMM_ERR_NOMEM;
    }
    st = h->iops->reduce(h->intra, dsend, work, n, wd, wop, 0, stream);
    st = hier_intra_failed(c, st, "the reduce to the leader");
    if (leader) {
        /* Rounded into dt: PIN_A (for half it held n elements of dt already, the input's
         * copy, done with); left in wd: in place. */
        char *out = odt != wd ? pinned(c, PIN_A, n * es) : pw;
        if (out == NULL)
            return COMM_ERR_NOMEM;
        st =
            leader_chunks(c, n, wd, wop, h->nhosts > 1 ? hier_inter_wire(c, dt, call->op, n) : NULL,
                          work, pw, st, deadline, odt, div, out, dst, stream);
    }
    if (st != COMM_OK)
        return st;
    st = h->iops->broadcast(h->intra, leader ? dst : NULL, dst, n, odt, 0, stream);
    return hier_intra_failed(c, st, "the broadcast from the leader");
}

static comm_status_t cuda_allreduce(struct comm *c, const struct coll_call *call, uint64_t deadline)
{
    return reduce_to(c, call, call->count, call->recv, call->dtype, deadline);
}

/* The sum unrounded on every rank's GPU, then on the host: plus this rank's addend,
 * rounded once, copied into recv. */
static comm_status_t cuda_allreduce_add(struct comm *c, const struct coll_call *call,
                                        uint64_t deadline)
{
    cudaStream_t stream = call->stream;
    comm_dtype_t dt = call->dtype, wd = hier_work_dtype(dt);
    size_t n = call->count, na = call->addend_count;
    size_t es = rt_dtype_size(dt), wes = rt_dtype_size(wd);
    void *wide = device_buf(c, DEV_RESULT, n * wes);
    if (wide == NULL)
        return COMM_ERR_NOMEM;
    comm_status_t st = reduce_to(c, call, n, wide, wd, deadline);
    if (st != COMM_OK)
        return st;
    /* The copies that read these pinned buffers earlier in the call are ahead of the
     * copies out below on the stream, which the host waits for before writing them. */
    void *sum = pinned(c, PIN_B, n * wes), *out = pinned(c, PIN_A, (n > na ? n : na) * es);
    if (sum == NULL || out == NULL)
        return COMM_ERR_NOMEM;
    st = stage_out(c, out, call->addend, na * es, stream, deadline,
                   "the copy of the addend to the host");
    if (st == COMM_OK)
        st = stage_out(c, sum, wide, n * wes, stream, deadline, "the copy of the sum to the host");
    if (st != COMM_OK)
        return st;
    hier_add(sum, dt, out, na, n);
    hier_narrow(sum, dt, out, n, 1);
    return stage_in(c, call->recv, out, n * es, stream);
}

static comm_status_t cuda_reduce(struct comm *c, const struct coll_call *call, uint64_t deadline)
{
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    void *dst = c->rank == call->root ? call->recv : device_buf(c, DEV_RESULT, bytes);
    if (dst == NULL)
        return COMM_ERR_NOMEM;
    return reduce_to(c, call, call->count, dst, call->dtype, deadline);
}

static comm_status_t cuda_reduce_scatter(struct comm *c, const struct coll_call *call,
                                         uint64_t deadline)
{
    size_t n = (size_t)c->nranks * call->count, es = rt_dtype_size(call->dtype);
    char *all = device_buf(c, DEV_RESULT, n * es);
    if (all == NULL)
        return COMM_ERR_NOMEM;
    comm_status_t st = reduce_to(c, call, n, all, call->dtype, deadline);
    if (st != COMM_OK)
        return st;
    return copy_d2d(c, call->recv, all + (size_t)c->rank * call->count * es, call->count * es,
                    call->stream);
}

/* Within the root's host, among the leaders (staged), within every other host. */
static comm_status_t cuda_broadcast(struct comm *c, const struct coll_call *call, uint64_t deadline)
{
    struct hier_comm *h = hier_of(c);
    cudaStream_t stream = call->stream;
    size_t es = rt_dtype_size(call->dtype), bytes = call->count * es;
    int root_host = h->host_of[call->root];
    bool on_root_host = h->host == root_host, leader = h->local == 0;
    comm_status_t st = COMM_OK;
    if (on_root_host) {
        const void *send = c->rank == call->root ? call->send : NULL;
        st = h->iops->broadcast(h->intra, send, call->recv, call->count, call->dtype,
                                h->local_of[call->root], stream);
        st = hier_intra_failed(c, st, "the broadcast within the root's host");
    }
    if (leader && h->nhosts > 1) {
        void *p = pinned(c, PIN_A, bytes);
        if (p == NULL)
            return COMM_ERR_NOMEM;
        if (on_root_host && st == COMM_OK)
            st = stage_out(c, p, call->recv, bytes, stream, deadline,
                           "the copy of the root's data to the host");
        struct hier_inter s = {
            .kind = HIER_INTER_BCAST,
            .mc = h->link.slice,
            .buf = p,
            .n = call->count,
            .esize = es,
            .root = root_host,
            .what = "the broadcast among the hosts' leaders",
        };
        st = hier_inter_segments(c, &s, st, deadline);
        if (!on_root_host && st == COMM_OK)
            st = stage_in(c, call->recv, p, bytes, stream);
    }
    if (st != COMM_OK || h->nhosts == 1)
        return st;
    if (on_root_host) {
        /* Has every host got it?  The leader breaks this host's communicator if not. */
        st = h->iops->barrier(h->intra);
        return hier_intra_failed(c, st, "the barrier after the broadcast");
    }
    st = h->iops->broadcast(h->intra, leader ? call->recv : NULL, call->recv, call->count,
                            call->dtype, 0, stream);
    return hier_intra_failed(c, st, "the broadcast from the leader");
}

/* Within the host (device), among the leaders (staged, MPI_Iallgatherv), the leader puts
 * the blocks in rank order on the host and stages them in, within the host (device). */
static comm_status_t cuda_allgather(struct comm *c, const struct coll_call *call, uint64_t deadline)
{
    struct hier_comm *h = hier_of(c);
    cudaStream_t stream = call->stream;
    size_t b = call->count * rt_dtype_size(call->dtype), L = (size_t)h->nlocal;
    size_t P = (size_t)c->nranks;
    bool leader = h->local == 0;
    void *mine = device_buf(c, DEV_WORK, L * b), *pm = NULL, *pa = NULL;
    if (mine == NULL)
        return COMM_ERR_NOMEM;
    if (leader) {
        pm = pinned(c, PIN_A, P * b);
        pa = pinned(c, PIN_B, P * b);
        if (pm == NULL || pa == NULL)
            return COMM_ERR_NOMEM;
    }
    comm_status_t st =
        h->iops->allgather(h->intra, call->send, mine, call->count, call->dtype, stream);
    st = hier_intra_failed(c, st, "the allgather within the host");
    if (leader) {
        if (st == COMM_OK)
            st = stage_out(c, pm, mine, L * b, stream, deadline,
                           "the copy of this host's blocks to the host");
        if (h->nhosts > 1) {
            int counts[RT_MAX_RANKS], displs[RT_MAX_RANKS];
            for (int k = 0; k < h->nhosts; k++) {
                counts[k] = (int)((size_t)h->host_size[k] * b);
                displs[k] = (int)((size_t)h->host_off[k] * b);
            }
            MPI_Request req;
            int err = MPI_Iallgatherv(pm, (int)(L * b), MPI_BYTE, pa, counts, displs, MPI_BYTE,
                                      h->link.slice, &req);
            st = hier_inter_one(c, h->link.slice, &req, err, "MPI_Iallgatherv", st, deadline,
                                "the allgather among the hosts' leaders");
        } else if (st == COMM_OK) {
            memcpy(pa, pm, L * b);
        }
        if (st == COMM_OK) {
            /* pa is in host order: host_off of the rank's host, then its local index. */
            for (int w = 0; w < c->nranks; w++)
                memcpy((char *)pm + (size_t)w * b,
                       (char *)pa +
                           ((size_t)h->host_off[h->host_of[w]] + (size_t)h->local_of[w]) * b,
                       b);
            st = stage_in(c, call->recv, pm, P * b, stream);
        }
    }
    if (st != COMM_OK)
        return st;
    st = h->iops->broadcast(h->intra, leader ? call->recv : NULL, call->recv, P * call->count,
                            call->dtype, 0, stream);
    return hier_intra_failed(c, st, "the broadcast from the leader");
}

/* Flat, as on the host: every rank stages its send buffer out, one MPI_Ialltoall over
 * every rank, stages the result in. */
static comm_status_t cuda_alltoall(struct comm *c, const struct coll_call *call, uint64_t deadline)
{
    struct hier_comm *h = hier_of(c);
    size_t b = call->count * rt_dtype_size(call->dtype), bytes = (size_t)c->nranks * b;
    void *ps = pinned(c, PIN_A, bytes), *pr = pinned(c, PIN_B, bytes);
    if (ps == NULL || pr == NULL)
        return COMM_ERR_NOMEM;
    comm_status_t st = stage_out(c, ps, call->send, bytes, call->stream, deadline,
                                 "the copy of the send buffer to the host");
    if (st != COMM_OK)
        return st;
    MPI_Request req;
    int err = MPI_Ialltoall(ps, (int)b, MPI_BYTE, pr, (int)b, MPI_BYTE, h->link.world, &req);
    st = hier_inter_one(c, h->link.world, &req, err, "MPI_Ialltoall", COMM_OK, deadline,
                        "the alltoall over every rank");
    if (st != COMM_OK)
        return st;
    return stage_in(c, call->recv, pr, bytes, call->stream);
}

typedef comm_status_t (*cuda_algo)(struct comm *c, const struct coll_call *call, uint64_t deadline);

/*
 * Every CUDA call: the descriptor exchange (mismatches and earlier failures, before any
 * byte is written), then on this rank's GPU: ordered after the previous call, the
 * pinned buffers free (the host waits, bounded, for the last copy out of them), the
 * algorithm, the call's end recorded.
 */
static comm_status_t run_call(struct comm *c, const struct coll_call *call, cuda_algo algo)
{
    struct hier_cuda *x = cuda_of_h(c);
    uint64_t deadline = rt_comm_deadline(c);
    comm_status_t st = hier_begin(c, call, deadline);
    if (st != COMM_OK || call->count == 0)
        return st;
    int prev = 0;
    (void)cudaGetDevice(&prev);
    cudaError_t e = cudaSetDevice(x->device);
    if (e != cudaSuccess)
        return cuda_failed(c, x->device, "cudaSetDevice", e);
    cudaStream_t stream = call->stream;
    if (x->end_pending) {
        e = cudaStreamWaitEvent(stream, x->ev_end, 0);
        if (e != cudaSuccess)
            st = cuda_failed(c, x->device, "cudaStreamWaitEvent (after the last call)", e);
    }
    if (st == COMM_OK && x->in_pending) {
        st = wait_event(c, x->ev_in, deadline, "the last call's copy out of pinned memory");
        x->in_pending = st != COMM_OK;
    }
    if (st == COMM_OK)
        st = algo(c, call, deadline);
    if (st == COMM_OK) {
        e = cudaEventRecord(x->ev_end, stream);
        if (e != cudaSuccess)
            st = cuda_failed(c, x->device, "cudaEventRecord (the call's end)", e);
        x->end_pending = e == cudaSuccess;
    }
    (void)cudaSetDevice(prev);
    return st;
}

static comm_status_t hc_allreduce(struct comm *c, const struct coll_call *call)
{
    return run_call(c, call, cuda_allreduce);
}

static comm_status_t hc_allreduce_add(struct comm *c, const struct coll_call *call)
{
    return run_call(c, call, cuda_allreduce_add);
}

static comm_status_t hc_reduce(struct comm *c, const struct coll_call *call)
{
    return run_call(c, call, cuda_reduce);
}

static comm_status_t hc_reduce_scatter(struct comm *c, const struct coll_call *call)
{
    return run_call(c, call, cuda_reduce_scatter);
}

static comm_status_t hc_broadcast(struct comm *c, const struct coll_call *call)
{
    return run_call(c, call, cuda_broadcast);
}

static comm_status_t hc_allgather(struct comm *c, const struct coll_call *call)
{
    return run_call(c, call, cuda_allgather);
}

static comm_status_t hc_alltoall(struct comm *c, const struct coll_call *call)
{
    return run_call(c, call, cuda_alltoall);
}

/* Any stream; not one being captured into a graph (the host waits for the inter-host
 * step: a capture would never run it).  INVALID, not UNSUPPORTED: a rank may capture
 * where its peers do not, so its failure must reach them (it is published). */
static comm_status_t hc_validate(struct comm *c, const struct coll_call *call, const char *fn)
{
    if (call->count > 0) {
        enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
        cudaError_t e = cudaStreamIsCapturing((cudaStream_t)call->stream, &cap);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            rt_error(c, COMM_ERR_INVALID,
                     "rank %d: %s: stream %p is not a CUDA stream of GPU %d (%s)", c->rank, fn,
                     call->stream, cuda_of_h(c)->device, cudaGetErrorString(e));
            return COMM_ERR_INVALID;
        }
        if (cap != cudaStreamCaptureStatusNone) {
            rt_error(c, COMM_ERR_INVALID,
                     "rank %d: %s: stream %p is being captured into a CUDA graph: a "
                     "communicator of comm_init_mpi waits on the host for its inter-host step, "
                     "which a graph cannot hold; call it outside the capture",
                     c->rank, fn, call->stream);
            return COMM_ERR_INVALID;
        }
    }
    return hier_check_counts(c, call, fn);
}

/* As a CUDA communicator of one host: its buffers are the caller's cudaMalloc. */
static comm_status_t hc_mem_alloc(struct comm *c, size_t bytes, void **ptr)
{
    (void)bytes;
    (void)ptr;
    rt_error(c, COMM_ERR_UNSUPPORTED,
             "rank %d: comm_mem_alloc serves host and Hexagon communicators; allocate CUDA "
             "buffers with cudaMalloc on GPU %d",
             c->rank, cuda_of_h(c)->device);
    return COMM_ERR_UNSUPPORTED;
}

static comm_status_t hc_mem_free(struct comm *c, void *ptr)
{
    (void)ptr;
    rt_error(c, COMM_ERR_INVALID, "rank %d: comm_mem_free: CUDA communicators allocate nothing",
             c->rank);
    return COMM_ERR_INVALID;
}

void hier_cuda_adapt(struct backend_ops *ops)
{
    ops->device = COMM_DEVICE_CUDA;
    ops->validate = hc_validate;
    ops->allreduce = hc_allreduce;
    ops->allreduce_add = hc_allreduce_add;
    ops->broadcast = hc_broadcast;
    ops->reduce = hc_reduce;
    ops->allgather = hc_allgather;
    ops->reduce_scatter = hc_reduce_scatter;
    ops->alltoall = hc_alltoall;
    ops->mem_alloc = hc_mem_alloc;
    ops->mem_free = hc_mem_free;
}

#else /* !HIER_CUDA: comm_init_mpi refuses CUDA before any of these is called. */

int hier_cuda_devices(void)
{
    return 0;
}

comm_status_t hier_cuda_open(struct comm *tc, struct hier_comm *h, int device)
{
    (void)h;
    rt_error(tc, COMM_ERR_UNSUPPORTED, "comm_init_mpi: rank %d: GPU %d: built without CUDA",
             tc->rank, device);
    return COMM_ERR_UNSUPPORTED;
}

void hier_cuda_close(struct comm *c, struct hier_comm *h)
{
    (void)c;
    (void)h;
}

void hier_cuda_adapt(struct backend_ops *ops)
{
    (void)ops;
}

#endif
