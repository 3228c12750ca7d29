/* SPDX-License-Identifier: MIT */
/* The ABI numbers (abi_list.h) as arcomm's nccl.h has them. */
#include "nccl.h"

#include "abi_list.h"

ABI_DEFINE(ours)
