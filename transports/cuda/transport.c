/* SPDX-License-Identifier: MIT */
/*
 * The CUDA transport's ops table: pick the GPU, join the shm segment with staging
 * sized for CUDA, register it as mapped portable pinned memory (in every process, so
 * thread ranks and process ranks work alike), agree on the geometry, make the
 * non-blocking streams and device buffers of the copy-engine path; and the failure
 * hooks that reach the kernels through mapped memory.
 */
#include "cuda_comm.h"
#include "shm/shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* How long teardown waits for the streams of a failed communicator to drain. */
#define CUDA_DRAIN_BROKEN_NS 5000000000ull

bool cuda_probe(const struct transport_probe *p, char *why, size_t len)
{
    if (p->device != COMM_DEVICE_CUDA) {
        snprintf(why, len, "cuda serves CUDA device buffers only");
        return false;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        /* Without libcuda (no driver, no GPU) the runtime says "driver version is
         * insufficient", which sends people updating a driver they do not have. */
        bool none = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || n == 0;
        snprintf(why, len, "%s (cudaGetDeviceCount: %s)",
                 none ? "no GPU or no driver" : "the CUDA runtime cannot list GPUs",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        (void)cudaGetLastError();
        return false;
    }
    return true;
}

comm_status_t cuda_device_enter(struct comm *c, int *prev)
{
    struct cuda_comm *x = cuda_of(c);
    cudaError_t e = cudaGetDevice(prev);
    if (e == cudaSuccess && *prev != x->device)
        e = cudaSetDevice(x->device);
    if (e != cudaSuccess) {
        rt_error(c, COMM_ERR_SYSTEM, "rank %d: cudaSetDevice(%d) failed: %s", c->rank, x->device,
                 cudaGetErrorString(e));
        return COMM_ERR_SYSTEM;
    }
    return COMM_OK;
}

void cuda_device_leave(int prev)
{
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != prev)
        cudaSetDevice(prev);
}

/* cuStreamWriteValue32, reached through the runtime (no link with libcuda): the fence
 * that makes a copy engine's writes to the staging visible before a kernel publishes
 * them (cuda_copy_step). */
static comm_status_t resolve_stream_ops(struct comm *c, struct cuda_comm *x)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || fn == NULL) {
        rt_error(c, COMM_ERR_UNSUPPORTED,
                 "rank %d: the CUDA driver has no cuStreamWriteValue32 (%s): the copy-engine path "
                 "needs stream memory operations",
                 c->rank, cudaGetErrorString(e));
        return COMM_ERR_UNSUPPORTED;
    }
    x->write_value = (cuda_write_value_fn)fn;
    return COMM_OK;
}

/* Every rank writes what it computed; all must match rank 0's. */
static comm_status_t agree_on_geometry(struct comm *c, struct cuda_comm *x)
{
    struct cuda_geom_line mine = {
        .magic = CUDA_GEOM_MAGIC,
        .region_bytes = x->g.region_bytes,
        .chunk_max = x->g.chunk_max,
        .copy_threshold = x->k.copy_threshold,
        .bf16_threshold = x->k.bf16_threshold,
        .chunk_knob = x->k.chunk_knob,
        .blocks = x->k.blocks,
        .cslots = x->g.cslots,
    };
    cuda_ctrl_of(x, c->rank)->geom = mine;
    cuda_ctrl_of(x, c->rank)->device.value = (uint32_t)x->device;
    shm_progress_publish(c);
    comm_status_t st = shm_progress_wait_all(c, "cuda setup (geometry)");
    if (st != COMM_OK)
        return st;
    for (int p = 0; p < c->nranks; p++) {
        const struct cuda_geom_line *g = &cuda_ctrl_of(x, p)->geom;
        if (memcmp(g, &mine, sizeof(mine)) == 0)
            continue;
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: rank %d's CUDA settings differ from this rank's (copy threshold %llu "
                 "vs %llu, bf16 threshold %llu vs %llu, chunk %llu vs %llu, staging %llu vs "
                 "%llu bytes, blocks %u vs %u): set the same ARCOMM_COPY_THRESHOLD, "
                 "ARCOMM_BF16_THRESHOLD, ARCOMM_COPY_CHUNK_BYTES, ARCOMM_CUDA_STAGING_BYTES and "
                 "ARCOMM_CUDA_BLOCKS on every rank",
                 c->rank, p, (unsigned long long)g->copy_threshold,
                 (unsigned long long)mine.copy_threshold, (unsigned long long)g->bf16_threshold,
                 (unsigned long long)mine.bf16_threshold, (unsigned long long)g->chunk_knob,
                 (unsigned long long)mine.chunk_knob, (unsigned long long)g->region_bytes,
                 (unsigned long long)mine.region_bytes, g->blocks, mine.blocks);
        return COMM_ERR_INVALID;
    }
    /* Two thread ranks on one GPU: each one's waiting kernels can sit in front of the
     * other's work on a hardware queue the driver gave both streams, and both stop
     * until the timeout (seen on 2 x H200 with 3 ranks on 2 GPUs).  Every rank finds the
     * same first pair, so all of them fail alike. */
    for (int p = 0; p < c->nranks; p++) {
        for (int q = p + 1; q < c->nranks; q++) {
            if (c->shm->ranks[p].pid != c->shm->ranks[q].pid ||
                cuda_ctrl_of(x, p)->device.value != cuda_ctrl_of(x, q)->device.value)
                continue;
            rt_error(c, COMM_ERR_INVALID,
                     "rank %d: ranks %d and %d are threads of one process (pid %d) on the same "
                     "GPU %u: a CUDA communicator needs a GPU of its own for each thread rank; "
                     "give each rank its own device_index, or run ranks that share a GPU as "
                     "processes",
                     c->rank, p, q, (int)c->shm->ranks[p].pid, cuda_ctrl_of(x, p)->device.value);
            return COMM_ERR_INVALID;
        }
    }
    return COMM_OK;
}

static comm_status_t cuda_fail_system(struct comm *c, const char *what, cudaError_t e)
{
    rt_error(c, COMM_ERR_SYSTEM, "rank %d: %s failed on GPU %d: %s", c->rank, what,
             cuda_of(c)->device, cudaGetErrorString(e));
    (void)cudaGetLastError();
    return COMM_ERR_SYSTEM;
}

static comm_status_t make_device_state(struct comm *c, struct cuda_comm *x)
{
    cudaError_t e;
    if ((e = cudaStreamCreateWithFlags(&x->sd, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&x->sh, cudaStreamNonBlocking)) != cudaSuccess)
        return cuda_fail_system(c, "cudaStreamCreateWithFlags", e);
    if ((e = cudaEventCreateWithFlags(&x->ev_start, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&x->ev_done, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&x->ev_cap, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&x->ev_staged, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&x->ev_fetched, cudaEventDisableTiming)) != cudaSuccess)
        return cuda_fail_system(c, "cudaEventCreateWithFlags", e);
    x->tslots = CUDA_TSLOTS_MAX;
    for (uint32_t i = 0; i < x->tslots; i++)
        if ((e = cudaEventCreateWithFlags(&x->ev_added[i], cudaEventDisableTiming)) != cudaSuccess)
            return cuda_fail_system(c, "cudaEventCreateWithFlags", e);
    size_t peers = c->nranks > 1 ? (size_t)c->nranks - 1 : 1;
    size_t tmp_bytes = peers * x->tslots * x->g.chunk_max;
    if ((e = cudaMalloc((void **)&x->tmp, tmp_bytes)) != cudaSuccess)
        return cuda_fail_system(c, "cudaMalloc of the copy-path ring", e);
    /* The call counters start where the communicator's calls do, alike on every rank. */
    struct cuda_dcount start = {.seq = c->seq};
    if ((e = cudaMalloc((void **)&x->dcount, sizeof(start))) != cudaSuccess ||
        (e = cudaMemcpy(x->dcount, &start, sizeof(start), cudaMemcpyHostToDevice)) != cudaSuccess)
        return cuda_fail_system(c, "the call counters (cudaMalloc, cudaMemcpy)", e);
    struct cuda_count_line *m = &cuda_ctrl_of(x, c->rank)->count;
    __atomic_store_n(&m->cchunk, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&m->seq, c->seq, __ATOMIC_RELAXED);
    return COMM_OK;
}

static void free_device_state(struct cuda_comm *x)
{
    if (x->narrow)
        cudaFree(x->narrow); /* from cudaMallocAsync: cudaFree waits for the device */
    if (x->tmp)
        cudaFree(x->tmp);
    if (x->dcount)
        cudaFree(x->dcount);
    for (int i = 0; i < x->nretired; i++)
        cudaFree(x->retired[i]);
    x->nretired = 0;
    x->dcount = NULL;
    if (x->ev_cap)
        cudaEventDestroy(x->ev_cap);
    x->ev_cap = NULL;
    for (uint32_t i = 0; i < CUDA_TSLOTS_MAX; i++)
        if (x->ev_added[i])
            cudaEventDestroy(x->ev_added[i]);
    if (x->ev_fetched)
        cudaEventDestroy(x->ev_fetched);
    if (x->ev_staged)
        cudaEventDestroy(x->ev_staged);
    if (x->ev_done)
        cudaEventDestroy(x->ev_done);
    if (x->ev_start)
        cudaEventDestroy(x->ev_start);
    if (x->sh)
        cudaStreamDestroy(x->sh);
    if (x->sd)
        cudaStreamDestroy(x->sd);
    x->narrow = NULL;
    for (uint32_t i = 0; i < CUDA_TSLOTS_MAX; i++)
        x->ev_added[i] = NULL;
    x->ev_staged = x->ev_fetched = NULL;
    x->tmp = NULL;
    x->ev_done = x->ev_start = NULL;
    x->sh = x->sd = NULL;
}

/* The whole shared segment, mapped (device pointers) and portable (every GPU's
 * context) pinned memory: staging and arrival words alike. */
static comm_status_t register_mapping(struct comm *c, void *base, size_t size)
{
    cudaError_t e = cudaHostRegister(base, size, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess)
        return cuda_fail_system(c, "cudaHostRegister of the shared segment", e);
    return COMM_OK;
}

static void unregister_mapping(void *base, size_t size)
{
    (void)size;
    cudaHostUnregister(base);
}

comm_status_t cuda_setup(struct comm *c, const struct cuda_knobs *k)
{
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        rt_error(c, COMM_ERR_UNSUPPORTED, "rank %d: no CUDA device (cudaGetDeviceCount: %s)",
                 c->rank, cudaGetErrorString(e));
        return COMM_ERR_UNSUPPORTED;
    }
    if (c->nranks > CUDA_MAX_RANKS) {
        rt_error(c, COMM_ERR_UNSUPPORTED,
                 "rank %d: the CUDA transport joins at most %d GPUs, this communicator has %d "
                 "ranks: split it (a communicator per group of at most %d GPUs)",
                 c->rank, CUDA_MAX_RANKS, c->nranks, CUDA_MAX_RANKS);
        return COMM_ERR_UNSUPPORTED;
    }
    int dev = c->device_index >= 0 ? c->device_index : c->local_rank % ndev;
    if (dev >= ndev) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: device_index %d, but this process sees %d CUDA device%s "
                 "(CUDA_VISIBLE_DEVICES?)",
                 c->rank, dev, ndev, ndev == 1 ? "" : "s");
        return COMM_ERR_INVALID;
    }
    struct cuda_comm *x = calloc(1, sizeof(*x));
    if (x == NULL) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory", c->rank);
        return COMM_ERR_NOMEM;
    }
    x->device = dev;
    c->device_index = dev;
    c->xport = x;
    x->k = *k;
    x->g = cuda_geometry_compute(
        x->k.staging_bytes, x->k.chunk_knob > CUDA_CHUNK_MAX ? x->k.chunk_knob : CUDA_CHUNK_MAX);

    int prev = 0;
    comm_status_t st = cuda_device_enter(c, &prev);
    if (st != COMM_OK)
        goto err_free;
    st = resolve_stream_ops(c, x);
    if (st != COMM_OK)
        goto err_leave;

    /* The shm staging slots carry the CUDA regions: two slots of a rank are its region.
     * The comm_mem_alloc arena is not used by CUDA communicators.  The knobs stay as
     * they were set: these are the CUDA backend's sizes, not ARCOMM_SHM_SLOT_BYTES. */
    struct shm_sizes sizes = {.slot_bytes = (size_t)(x->g.region_bytes / 2), .pool_bytes = 0};
    st = shm_segment_join(c, &sizes);
    if (st != COMM_OK)
        goto err_leave;
    x->regions = c->shm->staging;
    size_t bytes = (size_t)(x->g.region_bytes * (uint64_t)c->nranks);
    /* Copy engines and PCIe loads through 4 KiB pages ran at ~3 GB/s on the lent H200
     * VM; ask for huge pages where the kernel backs shared memory with them. */
    madvise(x->regions, bytes, MADV_HUGEPAGE);
    /* Thread ranks of one process share one mapping (segment.c): it is registered with
     * the driver once, by the first of them, and unregistered by the last. */
    st = shm_mapping_ext_hold(c, register_mapping);
    if (st != COMM_OK)
        goto err_detach;
    x->registered_bytes = bytes;
    void *dptr = NULL;
    e = cudaHostGetDevicePointer(&dptr, x->regions, 0);
    if (e != cudaSuccess) {
        st = cuda_fail_system(c, "cudaHostGetDevicePointer", e);
        goto err_unregister;
    }
    x->dregions = dptr;
    st = make_device_state(c, x);
    if (st != COMM_OK)
        goto err_device;
    st = agree_on_geometry(c, x);
    if (st != COMM_OK)
        goto err_device;
    rt_log(c, RT_LOG_INFO,
           "rank %d: GPU %d, %u KiB pinned staging per rank (%u copy slots of %llu KiB), copy "
           "path from %llu bytes, bf16 wire from %llu bytes",
           c->rank, dev, (unsigned)(x->g.region_bytes >> 10), x->g.cslots,
           (unsigned long long)(x->g.chunk_max >> 10), (unsigned long long)x->k.copy_threshold,
           (unsigned long long)x->k.bf16_threshold);
    cuda_device_leave(prev);
    return COMM_OK;

err_device:
    free_device_state(x);
err_unregister:
    shm_mapping_ext_release(c, unregister_mapping);
    x->registered_bytes = 0;
err_detach:
    /* The peers wait in setup too: tell them now rather than at their timeout (every
     * failure after the segment was joined, whatever its label). */
    shm_setup_failed(c, st);
    shm_segment_detach(c);
err_leave:
    cuda_device_leave(prev);
err_free:
    free(x);
    c->xport = NULL;
    return st;
}

/* Is everything this rank enqueued done?  Never blocks. */
static bool streams_idle(struct cuda_comm *x)
{
    bool idle = cudaStreamQuery(x->sd) != cudaErrorNotReady &&
                cudaStreamQuery(x->sh) != cudaErrorNotReady &&
                (!x->have_last || cudaEventQuery(x->ev_done) != cudaErrorNotReady);
    (void)cudaGetLastError();
    return idle;
}

/* Waits (bounded) for this rank's enqueued work; false when it did not finish. */
static bool drain(struct cuda_comm *x, uint64_t limit_ns)
{
    uint64_t end = rt_deadline_in(limit_ns);
    while (!streams_idle(x)) {
        if (rt_passed(end, rt_now_ns()))
            return false;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 200000};
        nanosleep(&ts, NULL);
    }
    return true;
}

static uint64_t drain_limit(const struct comm *c)
{
    if (atomic_load(&c->broken) != 0)
        return CUDA_DRAIN_BROKEN_NS;
    uint64_t t = rt_ms_to_ns(c->timeout_ms);
    return t >= RT_NEVER - 1000000000u ? RT_NEVER : t + 1000000000u;
}

void cuda_teardown(struct comm *c)
{
    struct cuda_comm *x = cuda_of(c);
    if (x == NULL) {
        shm_segment_detach(c);
        return;
    }
    int prev = 0;
    if (cuda_device_enter(c, &prev) == COMM_OK) {
        bool idle = drain(x, drain_limit(c));
        if (!idle) {
            /* A peer that never came leaves our stream waits blocked: let them go. */
            cuda_release_waits(c);
            idle = drain(x, CUDA_DRAIN_BROKEN_NS);
        }
        if (!idle) {
            /* Unmapping memory a GPU still waits on would fault the GPU; keep it. */
            rt_log(c, RT_LOG_WARN,
                   "rank %d: GPU %d still has arcomm work queued after the timeout; its pinned "
                   "staging stays mapped until the process exits",
                   c->rank, x->device);
            x->leaked = true;
        } else {
            cuda_p2p_release(c);
            free_device_state(x);
            if (x->registered_bytes)
                shm_mapping_ext_release(c, unregister_mapping);
        }
        (void)cudaGetLastError();
        cuda_device_leave(prev);
    }
    if (!x->leaked)
        shm_segment_detach(c);
    free(x);
    c->xport = NULL;
}

void cuda_release_waits(struct comm *c)
{
    struct cuda_comm *x = cuda_of(c);
    if (x == NULL || x->regions == NULL)
        return;
    /* Every counter is at most a few calls from this rank's own chunk count (as its
     * kernels last mirrored it: a call's chunks are taken before they are waited for). */
    uint32_t v =
        __atomic_load_n(&cuda_ctrl_of(x, c->rank)->count.cchunk, __ATOMIC_ACQUIRE) + CUDA_RELEASE;
    for (int p = 0; p < c->nranks; p++) {
        struct cuda_ctrl *ctl = cuda_ctrl_of(x, p);
        __atomic_store_n(&ctl->ready.value, v, __ATOMIC_RELEASE);
        __atomic_store_n(&ctl->h2d.value, v, __ATOMIC_RELEASE);
    }
}

void cuda_publish_failure(struct comm *c, comm_status_t status, const char *msg, bool in_call)
{
    struct shm_comm *s = c->shm;
    struct cuda_comm *x = cuda_of(c);
    if (s == NULL)
        return;
    bool leaving = in_call && atomic_load(&c->broken) == 0;
    if (leaving && x != NULL) {
        /* comm_destroy: let this rank's last calls finish before the peers hear that it
         * left, or their kernels would stop in a call this rank completed. */
        int prev = 0;
        if (cuda_device_enter(c, &prev) == COMM_OK) {
            drain(x, drain_limit(c));
            cuda_device_leave(prev);
        }
    }
    /* The host side as every segment transport does it (sticky status, arrival word,
     * doorbell), then the line the GPU kernels poll. */
    shm_publish_failure(c, status, msg, in_call);
    if (x != NULL && x->regions != NULL) {
        /* The kernels poll this line: every rank's spin ends. */
        struct cuda_fail_line *h = &cuda_ctrl_of(x, c->rank)->hfail;
        h->stage = CUDA_STAGE_NONE;
        h->peer = -1;
        /* The call it concerns: the host's count, unless calls were recorded into CUDA
         * graphs (the kernels number every call, and the host does not see replays): then,
         * and when leaving after the drain, the count this rank's GPU mirrors. */
        uint32_t dev = __atomic_load_n(&cuda_ctrl_of(x, c->rank)->count.seq, __ATOMIC_ACQUIRE);
        h->seq = !in_call ? UINT32_MAX : leaving || x->graphs ? dev : c->seq;
        __atomic_store_n(&h->status, (int32_t)status, __ATOMIC_RELEASE);
        if (!leaving)
            cuda_release_waits(c);
    }
}

comm_status_t cuda_mem_alloc(struct comm *c, size_t bytes, void **ptr)
{
    (void)bytes;
    (void)ptr;
    rt_error(c, COMM_ERR_UNSUPPORTED,
             "rank %d: comm_mem_alloc serves host and Hexagon communicators; allocate CUDA "
             "buffers with cudaMalloc on GPU %d",
             c->rank, c->device_index);
    return COMM_ERR_UNSUPPORTED;
}

comm_status_t cuda_mem_free(struct comm *c, void *ptr)
{
    (void)ptr;
    rt_error(c, COMM_ERR_INVALID, "rank %d: comm_mem_free: CUDA communicators allocate nothing",
             c->rank);
    return COMM_ERR_INVALID;
}
