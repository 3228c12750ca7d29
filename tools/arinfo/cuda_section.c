/* SPDX-License-Identifier: MIT */
/*
 * The CUDA section of arinfo: CUDA devices (matched to hwloc's PCI objects by bus id in
 * the transport's cuda_topo_list), their memory and compute capability, and the
 * peer-access matrix with the kind of link.
 */
#include "arcomm_build.h"
#include "devices.h"
#include "nccl/surface.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if ARCOMM_HAVE_CUDA
#include "cuda/cuda_comm.h"
#include "cuda/p2p_layout.h"

#include <cuda_runtime_api.h>

/* Peer access, and whether it is NVLink: native atomics between two GPUs exist only
 * over NVLink (PCIe peers have access but no native atomics). */
static enum arinfo_link link_of(int i, int j)
{
    int access = 0, atomics = 0;
    if (cudaDeviceCanAccessPeer(&access, i, j) != cudaSuccess || !access) {
        (void)cudaGetLastError();
        return ARINFO_LINK_NONE;
    }
    if (cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, i, j) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        atomics = 0;
    }
    return atomics ? ARINFO_LINK_NVLINK : ARINFO_LINK_PCIE;
}
#endif

/* Fills c; its caller zeroed it. */
static void cuda_collect(struct arinfo_cuda *c)
{
#if ARCOMM_HAVE_CUDA
    c->built = true;
    struct cuda_gpu_info *g = calloc(ARINFO_CUDA_MAX, sizeof(*g));
    int n = g ? cuda_topo_list(g, ARINFO_CUDA_MAX) : -1;
    if (n <= 0) {
        int count = 0;
        cudaError_t e = cudaGetDeviceCount(&count);
        snprintf(c->note, sizeof(c->note), "cudaGetDeviceCount: %s",
                 e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
        (void)cudaGetLastError();
        free(g);
        return;
    }
    c->ndevices = n;
    for (int i = 0; i < n; i++) {
        struct arinfo_cuda_device *d = &c->dev[i];
        d->ordinal = g[i].ordinal;
        snprintf(d->name, sizeof(d->name), "%s", g[i].name);
        /* hwloc spells bus ids in lower case. */
        for (size_t k = 0; k < sizeof(d->bus_id) - 1 && g[i].busid[k]; k++)
            d->bus_id[k] = (char)tolower((unsigned char)g[i].busid[k]);
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) {
            d->memory_bytes = prop.totalGlobalMem;
            d->cc_major = prop.major;
            d->cc_minor = prop.minor;
        }
        (void)cudaGetLastError();
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            c->link[i][j] = i == j ? ARINFO_LINK_NONE : link_of(i, j);
    free(g);
#else
    c->built = false;
    snprintf(c->note, sizeof(c->note), "this build has no CUDA transport");
#endif
}

void print_cuda(struct arinfo *ai)
{
    /* About 4 KiB of link matrix: on the heap, not the stack. */
    struct arinfo_cuda *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        fprintf(stderr, "arinfo: out of memory for the CUDA section\n");
        exit(1);
    }
    cuda_collect(c);
    arinfo_cuda_print(ai, c);
#if ARCOMM_HAVE_CUDA
    /* The transport choice of a CUDA communicator, in the text only (the peer matrix above
     * is what it rests on). */
    if (!ai->json && c->ndevices > 0) {
        int n = c->ndevices < CUDA_MAX_RANKS ? c->ndevices : CUDA_MAX_RANKS;
        uint8_t access[CUDA_MAX_RANKS * CUDA_MAX_RANKS];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                access[i * n + j] = i == j || c->link[i][j] != ARINFO_LINK_NONE;
        bool reach = cuda_p2p_host_reach(n, access);
        fprintf(ai->out,
                "  transport: %s (cuda-p2p%s%s; ARCOMM_TRANSPORT=cuda-p2p or cuda forces "
                "either)\n",
                cuda_transport_auto(reach, CUDA_P2P_VERIFIED),
                reach ? ": every GPU reaches every other" : ": some GPUs do not reach each other",
                CUDA_P2P_VERIFIED ? "" : ", but not yet verified on two GPUs");
    }
#endif
    free(c);
    /* NCCL programs on arcomm (runtime/nccl), in the text only. */
    if (!ai->json) {
#if ARCOMM_HAVE_NCCL
#ifndef ARINFO_NCCL_LIB_BUILT
#define ARINFO_NCCL_LIB_BUILT NULL
#define ARINFO_NCCL_INC_BUILT NULL
#endif
        char lib[4096], inc[4096];
        bool lib_found = arinfo_find_path(ARINFO_NCCL_LIB, ARINFO_NCCL_LIB_BUILT, lib, sizeof(lib));
        bool inc_found = arinfo_find_path(ARINFO_NCCL_INC, ARINFO_NCCL_INC_BUILT, inc, sizeof(inc));
        fprintf(ai->out, "  NCCL programs: libarcomm_nccl built, " NCCL_SURFACE_API "\n");
        fprintf(ai->out, "    library: %s%s\n", lib, lib_found ? "" : " (not installed yet)");
        fprintf(ai->out, "    header: %s%s\n", inc, inc_found ? "" : " (not installed yet)");
        fprintf(ai->out,
                "    serves: " NCCL_SURFACE_SERVED "\n    refuses: " NCCL_SURFACE_REFUSED "\n");
#else
        fprintf(ai->out, "  NCCL programs: libarcomm_nccl not built (it needs the CUDA build)\n");
#endif
    }
}
