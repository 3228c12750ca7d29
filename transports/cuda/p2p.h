/* SPDX-License-Identifier: MIT */
/*
 * The CUDA peer-to-peer transport ("cuda-p2p", p2p_layout.h): a host-staged CUDA
 * communicator (cuda_comm.h) plus every rank's device region, mapped into every peer.
 * Built wherever CUDA is; verified on one GPU (process ranks sharing it), not yet on
 * two: only ARCOMM_TRANSPORT=cuda-p2p selects it (CUDA_P2P_VERIFIED in p2p_layout.h).
 */
#ifndef ARCOMM_CUDA_P2P_H
#define ARCOMM_CUDA_P2P_H

#include "cuda/cuda_comm.h"
#include "cuda/p2p_layout.h"

#include <stdbool.h>
#include <stdint.h>

/* This rank's peer-to-peer state (cuda_comm.p2p). */
struct cuda_p2p {
    void *mine;                    /* device: this rank's region (cudaMalloc) */
    uint8_t *peer[CUDA_MAX_RANKS]; /* every rank's region as this GPU addresses it */
    bool opened[CUDA_MAX_RANKS];   /* from cudaIpcOpenMemHandle: closed at release */
    struct cuda_p2p_geom g;        /* of every region (the same on every rank) */
    uint64_t bytes;                /* of each region (g.bytes) */
    uint64_t area_bytes;           /* of an LL area (g.ll_area) */
};

/* Probe: a GPU is present and all visible GPUs reach each other (or there is one). */
bool cuda_p2p_probe(const struct transport_probe *p, char *why, size_t len);
/* After cuda_setup: the device region, its handle, the peers' regions mapped; every rank
 * decides alike (cuda_p2p_decide) and refuses with COMM_ERR_UNSUPPORTED where some pair
 * of GPUs cannot reach each other.  On failure the caller tears the communicator down. */
comm_status_t cuda_p2p_setup(struct comm *c);

static inline struct cuda_p2p *cuda_p2p_of(const struct comm *c)
{
    return cuda_of(c)->p2p;
}

static inline struct cuda_p2p_line *cuda_p2p_line_of(const struct cuda_comm *x, int rank)
{
    return (struct cuda_p2p_line *)((uint8_t *)cuda_ctrl_of(x, rank) + CUDA_P2P_CTRL_OFF);
}

#endif /* ARCOMM_CUDA_P2P_H */
