/* SPDX-License-Identifier: MIT */
/*
 * The CUDA peer-to-peer transport's setup (p2p_layout.h says what lies where): every
 * rank allocates its device region, exports a CUDA IPC handle of it and publishes
 * handle, pointer, process and PCI bus id in its control page; then every rank says
 * which ranks' GPUs it reaches (cudaDeviceCanAccessPeer, or the same GPU) and all of them
 * decide alike with cuda_p2p_decide; then each maps the peers' regions: the pointer
 * itself for a thread of its own process (with peer access enabled when the GPUs
 * differ), cudaIpcOpenMemHandle for another process (also on the same GPU).
 *
 * Written without a GPU on 2026-12-01; verified on one GPU (process ranks sharing an H200 under
 * CUDA IPC, 2026-12-01 and -02: tools/gpu-check.sh p2p); not yet on two GPUs.
 */
#include "p2p.h"
#include "shm/shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

bool cuda_p2p_probe(const struct transport_probe *p, char *why, size_t len)
{
    if (!cuda_probe(p, why, len))
        return false;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
        (void)cudaGetLastError();
        snprintf(why, len, "no GPU");
        return false;
    }
    uint8_t access[CUDA_MAX_RANKS * CUDA_MAX_RANKS];
    int m = n < CUDA_MAX_RANKS ? n : CUDA_MAX_RANKS;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < m; j++) {
            int a = i == j;
            if (i != j && cudaDeviceCanAccessPeer(&a, i, j) != cudaSuccess) {
                (void)cudaGetLastError();
                a = 0;
            }
            access[i * m + j] = (uint8_t)(a != 0);
            if (!a) {
                snprintf(why, len,
                         "GPU %d cannot access GPU %d's memory (cudaDeviceCanAccessPeer): use the "
                         "host-staged transport (ARCOMM_TRANSPORT=cuda or unset)",
                         i, j);
                return false;
            }
        }
    }
    return cuda_p2p_host_reach(m, access);
}

static comm_status_t p2p_fail(struct comm *c, const char *what, cudaError_t e)
{
    rt_error(c, COMM_ERR_SYSTEM, "rank %d: cuda-p2p: %s failed on GPU %d: %s", c->rank, what,
             cuda_of(c)->device, cudaGetErrorString(e));
    (void)cudaGetLastError();
    return COMM_ERR_SYSTEM;
}

/* Which ranks' GPUs this rank's GPU reaches (bit q), from their published bus ids. */
static uint32_t reach_mask(struct comm *c, struct cuda_comm *x)
{
    const struct cuda_p2p_line *me = cuda_p2p_line_of(x, c->rank);
    uint32_t mask = 0;
    for (int q = 0; q < c->nranks; q++) {
        const struct cuda_p2p_line *l = cuda_p2p_line_of(x, q);
        if (q == c->rank || strncmp(l->busid, me->busid, CUDA_P2P_BUSID) == 0) {
            mask |= 1u << q;
            continue;
        }
        int dq = -1, a = 0;
        char bus[CUDA_P2P_BUSID];
        memcpy(bus, l->busid, sizeof(bus));
        bus[sizeof(bus) - 1] = '\0';
        if (cudaDeviceGetByPCIBusId(&dq, bus) != cudaSuccess ||
            cudaDeviceCanAccessPeer(&a, x->device, dq) != cudaSuccess) {
            (void)cudaGetLastError();
            a = 0; /* a GPU this process does not see is not reachable from it */
        }
        if (a)
            mask |= 1u << q;
    }
    return mask;
}

/* Every rank computes the same verdict from the same lines. */
static comm_status_t decide(struct comm *c, struct cuda_comm *x)
{
    int32_t pid[CUDA_MAX_RANKS], gpu[CUDA_MAX_RANKS];
    uint32_t reach[CUDA_MAX_RANKS];
    for (int r = 0; r < c->nranks; r++) {
        const struct cuda_p2p_line *l = cuda_p2p_line_of(x, r);
        pid[r] = l->pid;
        reach[r] = __atomic_load_n(&l->mask, __ATOMIC_ACQUIRE);
        gpu[r] = r;
        for (int q = 0; q < r; q++) {
            if (strncmp(cuda_p2p_line_of(x, q)->busid, l->busid, CUDA_P2P_BUSID) == 0) {
                gpu[r] = gpu[q];
                break;
            }
        }
    }
    int a = -1, b = -1;
    enum cuda_p2p_verdict v = cuda_p2p_decide(c->nranks, pid, gpu, reach, &a, &b);
    switch (v) {
    case CUDA_P2P_YES:
        return COMM_OK;
    case CUDA_P2P_NO_PEER_ACCESS:
        rt_error(c, COMM_ERR_UNSUPPORTED,
                 "rank %d: cuda-p2p: rank %d's GPU (%.32s) and rank %d's GPU (%.32s) cannot "
                 "access each other's memory (cudaDeviceCanAccessPeer, or a GPU one process does "
                 "not see): use the host-staged transport (unset ARCOMM_TRANSPORT, or set it to "
                 "cuda)",
                 c->rank, a, cuda_p2p_line_of(x, a)->busid, b, cuda_p2p_line_of(x, b)->busid);
        return COMM_ERR_UNSUPPORTED;
    case CUDA_P2P_SAME_THREAD_GPU:
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: cuda-p2p: ranks %d and %d are threads of one process on one GPU: give "
                 "each thread rank its own GPU, or run ranks that share a GPU as processes",
                 c->rank, a, b);
        return COMM_ERR_INVALID;
    case CUDA_P2P_TOO_MANY:
    default:
        rt_error(c, COMM_ERR_UNSUPPORTED, "rank %d: cuda-p2p joins at most %d GPUs", c->rank,
                 CUDA_MAX_RANKS);
        return COMM_ERR_UNSUPPORTED;
    }
}

/* Maps every peer's region into this rank's GPU. */
static comm_status_t map_peers(struct comm *c, struct cuda_comm *x, struct cuda_p2p *p)
{
    int32_t mypid = (int32_t)getpid();
    for (int q = 0; q < c->nranks; q++) {
        const struct cuda_p2p_line *l = cuda_p2p_line_of(x, q);
        if (q == c->rank) {
            p->peer[q] = p->mine;
            continue;
        }
        if (l->bytes != p->bytes) {
            rt_error(c, COMM_ERR_INVALID,
                     "rank %d: cuda-p2p: rank %d's device region has %llu bytes, this rank's "
                     "%llu: every rank must run the same arcomm",
                     c->rank, q, (unsigned long long)l->bytes, (unsigned long long)p->bytes);
            return COMM_ERR_INVALID;
        }
        if (l->pid == mypid) {
            /* A thread of this process: its pointer is valid here (unified addressing);
             * its GPU differs (decide refused one GPU for two thread ranks). */
            int dq = -1;
            char bus[CUDA_P2P_BUSID];
            memcpy(bus, l->busid, sizeof(bus));
            bus[sizeof(bus) - 1] = '\0';
            cudaError_t e = cudaDeviceGetByPCIBusId(&dq, bus);
            if (e == cudaSuccess && dq != x->device) {
                e = cudaDeviceEnablePeerAccess(dq, 0);
                if (e == cudaErrorPeerAccessAlreadyEnabled)
                    e = cudaSuccess;
            }
            if (e != cudaSuccess)
                return p2p_fail(c, "cudaDeviceEnablePeerAccess", e);
            (void)cudaGetLastError();
            p->peer[q] = (uint8_t *)(uintptr_t)l->dptr;
            continue;
        }
        cudaIpcMemHandle_t h;
        memcpy(&h, l->ipc, sizeof(h));
        void *ptr = NULL;
        cudaError_t e = cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess)
            return p2p_fail(c, "cudaIpcOpenMemHandle of a peer's region", e);
        p->peer[q] = ptr;
        p->opened[q] = true;
    }
    return COMM_OK;
}

comm_status_t cuda_p2p_setup(struct comm *c)
{
    _Static_assert(sizeof(cudaIpcMemHandle_t) == CUDA_P2P_IPC_BYTES, "the handle's line");
    struct cuda_comm *x = cuda_of(c);
    struct cuda_p2p *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory", c->rank);
        return COMM_ERR_NOMEM;
    }
    x->p2p = p;
    p->g = cuda_p2p_geom_compute(c->nranks);
    p->area_bytes = p->g.ll_area;
    p->bytes = p->g.bytes;
    int prev = 0;
    comm_status_t st = cuda_device_enter(c, &prev);
    if (st != COMM_OK)
        return st;
    cudaError_t e;
    cudaIpcMemHandle_t h;
    struct cuda_p2p_line *me = cuda_p2p_line_of(x, c->rank);
    /* Zeroed before anyone can see it: no stale LL flag matches a round's. */
    if ((e = cudaMalloc(&p->mine, p->bytes)) != cudaSuccess ||
        (e = cudaMemset(p->mine, 0, p->bytes)) != cudaSuccess ||
        (e = cudaDeviceSynchronize()) != cudaSuccess) {
        st = p2p_fail(c, "the device region (cudaMalloc, cudaMemset)", e);
        goto out;
    }
    if ((e = cudaIpcGetMemHandle(&h, p->mine)) != cudaSuccess) {
        st = p2p_fail(c, "cudaIpcGetMemHandle", e);
        goto out;
    }
    memset(me, 0, sizeof(*me));
    me->bytes = p->bytes;
    me->dptr = (uint64_t)(uintptr_t)p->mine;
    me->pid = (int32_t)getpid();
    me->device = x->device;
    memcpy(me->ipc, &h, sizeof(h));
    if ((e = cudaDeviceGetPCIBusId(me->busid, CUDA_P2P_BUSID, x->device)) != cudaSuccess) {
        st = p2p_fail(c, "cudaDeviceGetPCIBusId", e);
        goto out;
    }
    __atomic_store_n(&me->magic, CUDA_P2P_MAGIC, __ATOMIC_RELEASE);
    shm_progress_publish(c);
    st = shm_progress_wait_all(c, "cuda-p2p setup (device regions)");
    if (st != COMM_OK)
        goto out;
    for (int q = 0; q < c->nranks; q++) {
        if (__atomic_load_n(&cuda_p2p_line_of(x, q)->magic, __ATOMIC_ACQUIRE) != CUDA_P2P_MAGIC) {
            rt_error(c, COMM_ERR_INVALID,
                     "rank %d: rank %d joined without cuda-p2p: set the same ARCOMM_TRANSPORT "
                     "on every rank",
                     c->rank, q);
            st = COMM_ERR_INVALID;
            goto out;
        }
    }
    __atomic_store_n(&me->mask, reach_mask(c, x), __ATOMIC_RELEASE);
    __atomic_store_n(&me->mask_done, 1u, __ATOMIC_RELEASE);
    shm_progress_publish(c);
    st = shm_progress_wait_all(c, "cuda-p2p setup (peer access)");
    if (st != COMM_OK)
        goto out;
    st = decide(c, x);
    if (st != COMM_OK)
        goto out;
    st = map_peers(c, x, p);
    if (st != COMM_OK)
        goto out;
    /* Every rank mapped every region before any pushes into one: a rank that failed to
     * map tells the others here (shm_setup_failed), and all of them fail alike. */
    shm_progress_publish(c);
    st = shm_progress_wait_all(c, "cuda-p2p setup (regions mapped)");
    if (st != COMM_OK)
        goto out;
    rt_log(c, RT_LOG_INFO,
           "rank %d: cuda-p2p on GPU %d (%s): %llu MiB device region mapped into %d peers", c->rank,
           x->device, me->busid, (unsigned long long)(p->bytes >> 20), c->nranks - 1);
out:
    cuda_device_leave(prev);
    return st;
}

/* How long a healthy rank's teardown waits for its peers to close before it keeps its
 * region rather than free memory a peer's kernels might still push into. */
#define CUDA_P2P_CLOSE_NS 10000000000ull

/* Have all peers of other processes said that their GPUs are done with this rank's
 * region (bounded)? */
static bool peers_closed(struct comm *c, struct cuda_comm *x)
{
    uint64_t limit = rt_ms_to_ns(c->timeout_ms);
    if (limit > CUDA_P2P_CLOSE_NS)
        limit = CUDA_P2P_CLOSE_NS;
    uint64_t end = rt_deadline_in(limit);
    int32_t mypid = (int32_t)getpid();
    for (int q = 0; q < c->nranks; q++) {
        const struct cuda_p2p_line *l = cuda_p2p_line_of(x, q);
        /* Thread ranks of this process may be destroyed one after another by one thread:
         * none of them can wait for the next.  Their last calls are done (this rank's
         * drained calls read every push of theirs), and a thread rank cannot be in a later
         * call while this one is torn down in a correct program. */
        if (l->pid == mypid)
            continue;
        while (__atomic_load_n(&l->closed, __ATOMIC_ACQUIRE) == 0) {
            if (rt_passed(end, rt_now_ns()))
                return false;
            struct timespec ts = {.tv_sec = 0, .tv_nsec = 500000};
            nanosleep(&ts, NULL);
        }
    }
    return true;
}

void cuda_p2p_release(struct comm *c)
{
    struct cuda_comm *x = cuda_of(c);
    struct cuda_p2p *p = x->p2p;
    if (p == NULL)
        return;
    /* This rank's streams are idle (cuda_teardown drained them): its GPU will not write
     * into a peer's region again. */
    for (int q = 0; q < CUDA_MAX_RANKS; q++)
        if (p->opened[q])
            cudaIpcCloseMemHandle(p->peer[q]);
    if (x->regions != NULL)
        __atomic_store_n(&cuda_p2p_line_of(x, c->rank)->closed, 1u, __ATOMIC_RELEASE);
    /* A peer's kernels push into this region before they wait: a peer that has not closed
     * (one call ahead, or failed and released rather than finished) may still write here.
     * Keep the region then, until the process exits, rather than let those writes land in
     * memory reused for something else. */
    bool broken = atomic_load(&c->broken) != 0;
    bool safe = !broken && x->regions != NULL && peers_closed(c, x);
    if (p->mine != NULL && safe)
        cudaFree(p->mine);
    else if (p->mine != NULL)
        rt_log(c, RT_LOG_WARN,
               "rank %d: cuda-p2p: %s; GPU %d keeps this rank's %llu MiB device region until "
               "the process exits",
               c->rank, broken ? "the communicator failed" : "a peer did not close in time",
               x->device, (unsigned long long)(p->bytes >> 20));
    (void)cudaGetLastError();
    free(p);
    x->p2p = NULL;
}
