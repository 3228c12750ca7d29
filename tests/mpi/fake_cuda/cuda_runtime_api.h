/* SPDX-License-Identifier: MIT */
/*
 * A stand-in for the CUDA runtime, for the GPU-less test of comm_init_mpi's CUDA path
 * (test_mpi_cuda_fake): "device" memory is host memory, copies are memcpy done at once,
 * events are always complete, one device, no streams (NULL), a capture is a flag.  It
 * lets the staging and the algorithms of collectives/hier/hier_cuda.c (sizes, offsets,
 * leaders, permutations, conversions, the order of steps, the failures) run under
 * mpirun on any machine, over a host intra-host communicator (runtime/mpi/init_mpi.c
 * built with HIER_FAKE_CUDA).  What it cannot show: anything of real CUDA (streams,
 * asynchrony, kernels): test_mpi_cuda on a GPU does.
 */
#ifndef ARCOMM_FAKE_CUDA_RUNTIME_API_H
#define ARCOMM_FAKE_CUDA_RUNTIME_API_H

#include <stdlib.h>
#include <string.h>

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorNotReady = 600,
} cudaError_t;
typedef struct fake_cuda_stream *cudaStream_t;
typedef struct fake_cuda_event *cudaEvent_t;
typedef struct fake_cuda_graph *cudaGraph_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost,
    cudaMemcpyHostToDevice,
    cudaMemcpyDeviceToHost,
    cudaMemcpyDeviceToDevice,
};
enum cudaStreamCaptureStatus { cudaStreamCaptureStatusNone, cudaStreamCaptureStatusActive };
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal, cudaStreamCaptureModeRelaxed };
#define cudaEventDisableTiming 0x02
#define cudaHostAllocPortable  0x01
#define cudaStreamNonBlocking  0x01

static inline const char *cudaGetErrorString(cudaError_t e)
{
    return e == cudaSuccess ? "no error" : "fake CUDA error";
}
static inline cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}
static inline cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}
static inline cudaError_t cudaGetDevice(int *d)
{
    *d = 0;
    return cudaSuccess;
}
static inline cudaError_t cudaSetDevice(int d)
{
    return d == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
static inline cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = malloc(bytes ? bytes : 1);
    return *p != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
    (void)flags;
    return cudaMalloc(p, bytes);
}
static inline cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}
static inline cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k)
{
    (void)k;
    if (n > 0)
        memmove(d, s, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
                                          cudaStream_t st)
{
    (void)st;
    return cudaMemcpy(d, s, n, k);
}
static inline cudaError_t cudaMemset(void *p, int v, size_t n)
{
    memset(p, v, n);
    return cudaSuccess;
}
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = (cudaEvent_t)malloc(1);
    return *e != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    (void)e;
    (void)s;
    return cudaSuccess;
}
static inline cudaError_t cudaEventQuery(cudaEvent_t e)
{
    (void)e;
    return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    (void)e;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)s;
    (void)e;
    (void)flags;
    return cudaSuccess;
}
/* No streams: a host intra-host communicator takes NULL only. */
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = NULL;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}
/* The capture is the test's: it tells the library through this hook (fake_cuda.c). */
void fake_cuda_set_capturing(int on);
int fake_cuda_get_capturing(void);
static inline cudaError_t cudaDeviceSynchronize(void)
{
    return cudaSuccess; /* every copy here is done when it returns */
}

static inline cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *c)
{
    (void)s;
    *c = fake_cuda_get_capturing() ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m)
{
    (void)s;
    (void)m;
    fake_cuda_set_capturing(1);
    return cudaSuccess;
}
static inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    (void)s;
    fake_cuda_set_capturing(0);
    *g = NULL;
    return cudaSuccess;
}
static inline cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    (void)g;
    return cudaSuccess;
}

#endif /* ARCOMM_FAKE_CUDA_RUNTIME_API_H */
