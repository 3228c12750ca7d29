/* SPDX-License-Identifier: MIT */
/*
 * Point-to-point between the ranks of a communicator: the backends' p2p ops
 * (backend.h says what they promise).
 */
#ifndef ARCOMM_COLL_P2P_H
#define ARCOMM_COLL_P2P_H

#include "backend.h"
#include "coll.h"

#include <stddef.h>

/* p2p_host.c: host buffers, through the segment's channels. */
comm_status_t coll_host_p2p(struct comm *c, struct coll_p2p *ops, size_t n);
int coll_host_p2p_poll(struct comm *c, struct coll_p2p *ops, size_t n);

/* p2p_cuda.c (CUDA builds): device buffers, staged through host copies. */
comm_status_t coll_cuda_p2p(struct comm *c, struct coll_p2p *ops, size_t n);
int coll_cuda_p2p_poll(struct comm *c, struct coll_p2p *ops, size_t n);
void coll_cuda_p2p_end(struct comm *c, struct coll_p2p *ops, size_t n);
comm_status_t coll_cuda_p2p_self(struct comm *c, const struct coll_p2p *send,
                                 struct coll_p2p *recv);

#endif /* ARCOMM_COLL_P2P_H */
