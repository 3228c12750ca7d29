/* SPDX-License-Identifier: MIT */
/*
 * The CUDA transport's ops table, for runtime/transport.c (no CUDA header needed).
 */
#ifndef ARCOMM_CUDA_OPS_H
#define ARCOMM_CUDA_OPS_H

#include "transport.h"

extern const struct transport_ops cuda_transport_ops;

#endif /* ARCOMM_CUDA_OPS_H */
