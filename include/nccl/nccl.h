/* SPDX-License-Identifier: MIT */
/*
 * nccl.h of libarcomm_nccl: arcomm's NCCL-compatible library (libnccl.so.2, installed in
 * a directory of its own).  Written for arcomm from NCCL's public documentation: the
 * types, values and layouts are those of NCCL 2.19's ABI, so that a program built
 * against NCCL 2.19 or later runs on this library unchanged; the functions are NCCL's
 * host API of 2.19 plus the few later ones this library also defines.  What it serves
 * and what it refuses: docs/nccl.md.
 */
#ifndef ARCOMM_NCCL_H
#define ARCOMM_NCCL_H

#include <limits.h>
#include <stddef.h>

/* As NCCL 2.19's, this header brings the CUDA runtime's and the 16-bit float types'
 * headers (programs rely on them: nccl-tests uses half and __nv_bfloat16 through it; not
 * cuda_fp8.h, which NCCL's header brings from 2.24 on, with the fp8 types this ABI lacks);
 * with ARCOMM_NCCL_NO_CUDA_RUNTIME defined it declares only cudaStream_t (the same
 * type). */
#ifndef ARCOMM_NCCL_NO_CUDA_RUNTIME
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#else
struct CUstream_st;
typedef struct CUstream_st *cudaStream_t;
#endif

#define NCCL_MAJOR  2
#define NCCL_MINOR  19
#define NCCL_PATCH  3
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 21903
#define NCCL_VERSION(X, Y, Z)                                                                      \
    (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))

/* This header is arcomm's: a program may test for it. */
#define ARCOMM_NCCL 1

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm *ncclComm_t; /* opaque */
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR    -1

/* The communicator's configuration (NCCL 2.19's fields; later NCCL versions append
 * fields, and this library reads only these, as far as config->size says they exist). */
typedef struct ncclConfig_v21700 {
    size_t size;          /* sizeof(ncclConfig_t): set by NCCL_CONFIG_INITIALIZER */
    unsigned int magic;   /* 0xcafebeef */
    unsigned int version; /* NCCL_VERSION_CODE of the header the program was built with */
    int blocking;         /* 0: nonblocking communicator (calls may return ncclInProgress) */
    int cgaClusterSize;   /* accepted, unused by arcomm */
    int minCTAs;          /* accepted, unused */
    int maxCTAs;          /* accepted, unused */
    const char *netName;  /* accepted, unused (one host) */
    int splitShare;       /* accepted, unused */
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                    \
    {                                                                                              \
        sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),        \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT                    \
    }

/* Memory for collectives (cudaMalloc on the current device). */
ncclResult_t ncclMemAlloc(void **ptr, size_t size);
ncclResult_t ncclMemFree(void *ptr);

/* NCCL_VERSION_CODE of the API this library serves (2.19.3). */
ncclResult_t ncclGetVersion(int *version);

/* An id for ncclCommInitRank: made by rank 0, passed to the others by the program. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
/* ndev communicators of one process, rank i on devlist[i] (NULL: device i). */
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);

/* Later NCCL (2.23): ranks that all pass the same commIds; arcomm uses the first. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId *commIds, ncclConfig_t *config);

const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);
/* NCCL_DEBUG is read again at the next message. */
void ncclResetDebugInit(void);

/* The communicator's broken status (ncclInProgress while a nonblocking init runs). */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);

/* Buffer registration: accepted, nothing to do on arcomm (a handle is returned). */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle);

typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5, /* the first value of the ops ncclRedOpCreatePreMulSum makes */
    ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclNumTypes = 10
} ncclDataType_t;

typedef enum {
    ncclScalarDevice = 0,        /* read on the device while the collective runs */
    ncclScalarHostImmediate = 1, /* read before ncclRedOpCreatePreMulSum returns */
} ncclScalarResidence_t;

/* A sum of each rank's input multiplied by that rank's scalar first. */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* The collectives: counts are elements per rank; ordered on stream, return once enqueued. */
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
/* Not in NCCL 2.19's header (NCCL 2.28 has it): block p of this rank's sendbuff to rank p. */
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* Point to point: refused (ncclInvalidUsage): arcomm has no point-to-point. */
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);

/* Groups nest; one thread may drive several communicators between them. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#ifdef __cplusplus
}
#endif

#endif /* ARCOMM_NCCL_H */
