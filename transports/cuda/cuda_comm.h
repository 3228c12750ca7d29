/* SPDX-License-Identifier: MIT */
/*
 * The CUDA transport: GPUs of one host (thread or process ranks) that meet in mapped,
 * portable pinned host memory (the communicator's shm segment, registered with CUDA),
 * over PCIe, with or without NVLink between them.  The collectives built on it are in
 * collectives/cuda/.
 */
#ifndef ARCOMM_CUDA_COMM_H
#define ARCOMM_CUDA_COMM_H

#include "comm_base.h"
#include "cuda/layout.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* cuStreamWriteValue32, reached through the runtime (no link with libcuda). */
typedef CUresult (*cuda_write_value_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

/* Device ring of fetched chunks per peer (copy path). */
#define CUDA_TSLOTS_MAX 4
/* Narrow buffers a capture may outgrow (each at least twice the last). */
#define CUDA_RETIRED_MAX 40

/* The knobs as the CUDA paths use them, "auto" resolved by the CUDA backend
 * (collectives/cuda/backend.c) before setup. */
struct cuda_knobs {
    uint64_t copy_threshold; /* bytes at or above: copy-engine path (UINT64_MAX = never) */
    uint64_t bf16_threshold; /* f32 bytes at or above: bf16 wire (UINT64_MAX = never) */
    uint32_t wire;           /* enum wire_codec, ARCOMM_WIRE */
    uint64_t wire_threshold; /* bytes at or above: that codec (UINT64_MAX = never) */
    uint64_t chunk_knob;     /* copy chunk bytes, 0 = clamp(n/2, 512K, 4M) */
    uint64_t staging_bytes;  /* copy-path staging per rank */
    uint32_t blocks;         /* kernel-path blocks at most */
};

/* This rank's CUDA state (c->xport). */
struct cuda_comm {
    int device; /* CUDA ordinal */
    struct cuda_knobs k;
    struct cuda_geometry g;
    uint8_t *regions;        /* rank 0's region as mapped here; rank r's follows */
    uint8_t *dregions;       /* the same, as this GPU addresses it */
    size_t registered_bytes; /* registered with cudaHostRegister, 0 = not */
    bool leaked;             /* streams never drained: mapping kept on purpose */

    cudaStream_t sd;                       /* copy path: D2H (and narrowing) */
    cudaStream_t sh;                       /* copy path: H2D */
    cudaEvent_t ev_start;                  /* caller stream -> sd */
    cudaEvent_t ev_staged;                 /* sd -> caller stream: a chunk's D2H is done */
    cudaEvent_t ev_fetched;                /* sh -> caller stream: a chunk's H2D copies are done */
    cudaEvent_t ev_added[CUDA_TSLOTS_MAX]; /* caller stream -> sh: ring slot summed */
    cudaEvent_t ev_done;                   /* end of the last call (in a graph: each replay's) */
    cudaEvent_t ev_cap;                    /* end of the last call inside the running capture */
    void *last_stream;                     /* stream of the last call (calls are serialized) */
    bool have_last;
    unsigned long long last_capture; /* capture id of the last call, 0 = eager */
    unsigned long long cur_capture;  /* capture id of the running call, 0 = eager */
    bool graphs;                     /* a call was recorded into a graph */

    uint8_t *tmp; /* device: [nranks - 1][tslots][chunk_max] fetched chunks */
    uint32_t tslots;
    uint16_t *narrow; /* device: this rank's input as encoded on the wire (bf16, int8, fp8) */
    size_t narrow_bytes;
    /* Narrow buffers outgrown inside a capture (a graph may still use them): freed at
     * teardown. */
    void *retired[CUDA_RETIRED_MAX];
    int nretired;

    /* device: the call counters (layout.h).  The kernels number the calls, so that graph
     * replays and eager calls interleave; the host keeps no count. */
    struct cuda_dcount *dcount;
    /* The same chunk count as the host keeps it, and the running call's first chunk:
     * right until a call is recorded into a graph (then only the device knows). */
    uint32_t host_cchunk, call_base;

    cuda_write_value_fn write_value;

    /* cuda-p2p only (p2p.h): the device regions mapped from every peer; NULL on the
     * host-staged transport. */
    struct cuda_p2p *p2p;

    /* The path table (collectives/cuda/paths_cuda.c), resolved at setup; the backend
     * frees it. */
    struct coll_paths *paths;
};

/* The transport's lifecycle, for the CUDA backend (collectives/cuda/backend.c). */
bool cuda_probe(const struct transport_probe *p, char *why, size_t len);
comm_status_t cuda_setup(struct comm *c, const struct cuda_knobs *k);
void cuda_teardown(struct comm *c);
void cuda_publish_failure(struct comm *c, comm_status_t status, const char *msg, bool in_call);
comm_status_t cuda_mem_alloc(struct comm *c, size_t bytes, void **ptr);
comm_status_t cuda_mem_free(struct comm *c, void *ptr);

static inline struct cuda_comm *cuda_of(const struct comm *c)
{
    return (struct cuda_comm *)c->xport;
}

static inline struct cuda_ctrl *cuda_ctrl_of(const struct cuda_comm *x, int rank)
{
    return (struct cuda_ctrl *)(x->regions + cuda_region_off(&x->g, rank));
}

/* The device address of a host address inside the regions. */
static inline CUdeviceptr cuda_dev_addr(const struct cuda_comm *x, const void *host)
{
    return (CUdeviceptr)(uintptr_t)(x->dregions + ((const uint8_t *)host - x->regions));
}

/*
 * Makes c's device current in this thread, remembering the caller's (restored by
 * cuda_device_leave): one thread may drive several GPUs in turn.
 */
comm_status_t cuda_device_enter(struct comm *c, int *prev);
void cuda_device_leave(int prev);

/* Writes release values into every copy-path counter so no stream wait stays blocked. */
void cuda_release_waits(struct comm *c);

/* p2p.c: unmaps and frees the peer-to-peer regions (x->p2p), once this rank's streams
 * are idle (cuda_teardown calls it); keeps them when the communicator is broken (a peer
 * may still write into this rank's region). */
void cuda_p2p_release(struct comm *c);

/* topo.c: the PCI bus id of a CUDA ordinal and what hwloc knows of it. */
struct cuda_gpu_info {
    int ordinal;
    char busid[32]; /* "0000:19:00.0" */
    char name[128];
    int numa_node;    /* hwloc: NUMA node near the GPU, -1 unknown */
    bool hwloc_found; /* hwloc lists a PCI device with that bus id */
    unsigned vendor, device_id, pci_class;
};

/* Fills info for every CUDA device (at most max); returns how many, -1 without CUDA. */
int cuda_topo_list(struct cuda_gpu_info *info, int max);

#endif /* ARCOMM_CUDA_COMM_H */
