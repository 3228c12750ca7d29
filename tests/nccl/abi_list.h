/* SPDX-License-Identifier: MIT */
/*
 * The numbers of NCCL's ABI that NCCL 2.19 and every later NCCL share: enum values,
 * sizes, ncclConfig_t's first fields, NCCL_CONFIG_INITIALIZER's values for them.  Each
 * translation unit that includes this after some nccl.h gets abi_numbers_<suffix>()
 * filling out[] in this order: arcomm's header and a real NCCL's must agree.
 */
#include <stddef.h>

#define ABI_LIST(X)                                                                                \
    X(sizeof(ncclUniqueId))                                                                        \
    X(NCCL_UNIQUE_ID_BYTES) X(ncclSuccess) X(ncclUnhandledCudaError) X(ncclSystemError)            \
        X(ncclInternalError) X(ncclInvalidArgument) X(ncclInvalidUsage) X(ncclRemoteError) X(      \
            ncclInProgress) X(ncclNumResults) X(ncclInt8) X(ncclChar) X(ncclUint8) X(ncclInt32)    \
            X(ncclInt) X(ncclUint32) X(ncclInt64) X(ncclUint64) X(ncclFloat16) X(ncclHalf) X(      \
                ncclFloat32) X(ncclFloat) X(ncclFloat64) X(ncclDouble) X(ncclBfloat16) X(ncclSum)  \
                X(ncclProd) X(ncclMax) X(ncclMin) X(ncclAvg) X(ncclNumOps) X(ncclMaxRedOp)         \
                    X(sizeof(ncclRedOp_t)) X(sizeof(ncclDataType_t)) X(sizeof(ncclResult_t))       \
                        X(ncclScalarDevice) X(ncclScalarHostImmediate) X(NCCL_CONFIG_UNDEF_INT)    \
                            X(NCCL_SPLIT_NOCOLOR) X(offsetof(ncclConfig_t, size)) X(               \
                                offsetof(ncclConfig_t, magic)) X(offsetof(ncclConfig_t, version))  \
                                X(offsetof(ncclConfig_t, blocking))                                \
                                    X(offsetof(ncclConfig_t, cgaClusterSize)) X(offsetof(          \
                                        ncclConfig_t, minCTAs)) X(offsetof(ncclConfig_t, maxCTAs)) \
                                        X(offsetof(ncclConfig_t, netName))                         \
                                            X(offsetof(ncclConfig_t, splitShare)) X(init.magic)    \
                                                X(init.blocking) X(init.cgaClusterSize)            \
                                                    X(init.minCTAs) X(init.maxCTAs)                \
                                                        X(init.netName == NULL) X(init.splitShare) \
                                                            X(NCCL_VERSION(2, 19, 3))              \
                                                                X(NCCL_VERSION(2, 8, 4))

#define ABI_STORE(v) out[n++] = (long long)(v);
#define ABI_DEFINE(suffix)                                                                         \
    int abi_numbers_##suffix(long long *out, int max);                                             \
    int abi_numbers_##suffix(long long *out, int max)                                              \
    {                                                                                              \
        ncclConfig_t init = NCCL_CONFIG_INITIALIZER;                                               \
        int n = 0;                                                                                 \
        (void)max;                                                                                 \
        ABI_LIST(ABI_STORE)                                                                        \
        return n;                                                                                  \
    }
