/* SPDX-License-Identifier: MIT */
/* nccl_procs, the NCCL API as multi-process programs use it (nccl_procs.c): its parts. */
#ifndef ARCOMM_TEST_NCCL_PROCS_H
#define ARCOMM_TEST_NCCL_PROCS_H

#include "nccl_harness.h"

#include <stddef.h>

/* nccl_procs_p2p.c: the send/receive cases of rank among n on comm and st; the number of
 * wrong results, the first described in why. */
size_t p2p_cases(int rank, int n, ncclComm_t comm, cudaStream_t st, char *why, size_t len);

#endif /* ARCOMM_TEST_NCCL_PROCS_H */
