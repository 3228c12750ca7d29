/* SPDX-License-Identifier: MIT */
/*
 * Which NCCL surface libarcomm_nccl offers, in words, for arinfo (tools/arinfo): the API
 * version it serves, what it serves, what it defines only to refuse.  Kept beside the
 * library's sources; docs/nccl.md has the details.
 */
#ifndef ARCOMM_NCCL_SURFACE_H
#define ARCOMM_NCCL_SURFACE_H

/* arinfo names where libnccl.so.2 and nccl.h lie (<libdir>/arcomm-nccl,
 * <includedir>/arcomm-nccl once installed; runtime/nccl and include/nccl in a build). */
#define NCCL_SURFACE_API "NCCL 2.19.3 (ncclGetVersion 21903)"
#define NCCL_SURFACE_SERVED                                                                        \
    "ncclAllReduce ncclBroadcast ncclBcast ncclReduce ncclAllGather ncclReduceScatter "            \
    "ncclAlltoAll, every dtype (no fp8) and op incl. ncclAvg and ncclRedOpCreatePreMulSum; "       \
    "ncclSend ncclRecv (a 2-rank communicator per pair, made on first use), ncclGather "           \
    "ncclScatter (groups of them); "                                                               \
    "ncclGroupStart/End; ncclGetUniqueId ncclCommInitRank[Config|Scalable] ncclCommInitAll "       \
    "ncclCommSplit ncclCommFinalize ncclCommDestroy ncclCommAbort ncclCommGetAsyncError "          \
    "ncclCommCount ncclCommCuDevice ncclCommUserRank ncclCommRegister/Deregister "                 \
    "ncclMemAlloc/Free ncclGetVersion ncclGetErrorString ncclGetLastError; NCCL_COMM_ID, "         \
    "NCCL_DEBUG, NCCL_DEBUG_FILE"
#define NCCL_SURFACE_REFUSED                                                                       \
    "one-sided signals, windows, the device API, "                                                 \
    "revoke/shrink/grow/suspend, ncclGroupSimulateEnd (ncclInvalidUsage, said on stderr)"

#endif /* ARCOMM_NCCL_SURFACE_H */
