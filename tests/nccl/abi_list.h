/* SPDX-License-Identifier: MIT */
/*
 * The numbers of NCCL's ABI that NCCL 2.19 and every later NCCL share: enum values,
 * sizes, ncclConfig_t's first fields, NCCL_CONFIG_INITIALIZER's values for them.  Each
 * translation unit that includes this after some nccl.h defines abi_numbers_<suffix>(),
 * which fills out[] in this order: arcomm's header and a real NCCL's must agree.
 */
#include <stddef.h>

/* clang-format off */
#define ABI_DEFINE(suffix)                                  \
    int abi_numbers_##suffix(long long *out, int max);      \
    int abi_numbers_##suffix(long long *out, int max)       \
    {                                                       \
        ncclConfig_t init = NCCL_CONFIG_INITIALIZER;        \
        int n = 0;                                          \
        (void)max;                                          \
        out[n++] = (long long)(sizeof(ncclUniqueId));                    \
        out[n++] = (long long)(NCCL_UNIQUE_ID_BYTES);                    \
        out[n++] = (long long)(ncclSuccess);                             \
        out[n++] = (long long)(ncclUnhandledCudaError);                  \
        out[n++] = (long long)(ncclSystemError);                         \
        out[n++] = (long long)(ncclInternalError);                       \
        out[n++] = (long long)(ncclInvalidArgument);                     \
        out[n++] = (long long)(ncclInvalidUsage);                        \
        out[n++] = (long long)(ncclRemoteError);                         \
        out[n++] = (long long)(ncclInProgress);                          \
        out[n++] = (long long)(ncclNumResults);                          \
        out[n++] = (long long)(ncclInt8);                                \
        out[n++] = (long long)(ncclChar);                                \
        out[n++] = (long long)(ncclUint8);                               \
        out[n++] = (long long)(ncclInt32);                               \
        out[n++] = (long long)(ncclInt);                                 \
        out[n++] = (long long)(ncclUint32);                              \
        out[n++] = (long long)(ncclInt64);                               \
        out[n++] = (long long)(ncclUint64);                              \
        out[n++] = (long long)(ncclFloat16);                             \
        out[n++] = (long long)(ncclHalf);                                \
        out[n++] = (long long)(ncclFloat32);                             \
        out[n++] = (long long)(ncclFloat);                               \
        out[n++] = (long long)(ncclFloat64);                             \
        out[n++] = (long long)(ncclDouble);                              \
        out[n++] = (long long)(ncclBfloat16);                            \
        out[n++] = (long long)(ncclSum);                                 \
        out[n++] = (long long)(ncclProd);                                \
        out[n++] = (long long)(ncclMax);                                 \
        out[n++] = (long long)(ncclMin);                                 \
        out[n++] = (long long)(ncclAvg);                                 \
        out[n++] = (long long)(ncclNumOps);                              \
        out[n++] = (long long)(ncclMaxRedOp);                            \
        out[n++] = (long long)(sizeof(ncclRedOp_t));                     \
        out[n++] = (long long)(sizeof(ncclDataType_t));                  \
        out[n++] = (long long)(sizeof(ncclResult_t));                    \
        out[n++] = (long long)(ncclScalarDevice);                        \
        out[n++] = (long long)(ncclScalarHostImmediate);                 \
        out[n++] = (long long)(NCCL_CONFIG_UNDEF_INT);                   \
        out[n++] = (long long)(NCCL_SPLIT_NOCOLOR);                      \
        out[n++] = (long long)(offsetof(ncclConfig_t, size));            \
        out[n++] = (long long)(offsetof(ncclConfig_t, magic));           \
        out[n++] = (long long)(offsetof(ncclConfig_t, version));         \
        out[n++] = (long long)(offsetof(ncclConfig_t, blocking));        \
        out[n++] = (long long)(offsetof(ncclConfig_t, cgaClusterSize));  \
        out[n++] = (long long)(offsetof(ncclConfig_t, minCTAs));         \
        out[n++] = (long long)(offsetof(ncclConfig_t, maxCTAs));         \
        out[n++] = (long long)(offsetof(ncclConfig_t, netName));         \
        out[n++] = (long long)(offsetof(ncclConfig_t, splitShare));      \
        out[n++] = (long long)(init.magic);                              \
        out[n++] = (long long)(init.blocking);                           \
        out[n++] = (long long)(init.cgaClusterSize);                     \
        out[n++] = (long long)(init.minCTAs);                            \
        out[n++] = (long long)(init.maxCTAs);                            \
        out[n++] = (long long)(init.netName == NULL);                    \
        out[n++] = (long long)(init.splitShare);                         \
        out[n++] = (long long)(NCCL_VERSION(2, 19, 3));                  \
        out[n++] = (long long)(NCCL_VERSION(2, 8, 4));                   \
        return n;                                                        \
    }
/* clang-format on */
