/* SPDX-License-Identifier: MIT */
/* The ABI numbers (abi_list.h) as a real NCCL's nccl.h has them (built where one is). */
#include <nccl.h>

#include "abi_list.h"

ABI_DEFINE(real)
