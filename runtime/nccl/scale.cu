/* SPDX-License-Identifier: MIT */
/*
 * The premultiplied sum's one kernel: each rank's input times its scalar, rounded once
 * to the dtype, into the scratch buffer that the SUM then reads.  f16 and bf16 multiply
 * in f32, other types in themselves (integers wrap, as NCCL's do).  And ncclAvg's of
 * integers: the sum divided by the ranks in place, in 64-bit arithmetic (signed types
 * truncate toward zero, as NCCL's division does).
 */
#include "arcomm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

template <typename T> struct mul_of {
    typedef T type;
};
template <> struct mul_of<__half> {
    typedef float type;
};
template <> struct mul_of<__nv_bfloat16> {
    typedef float type;
};

template <typename T> __device__ __forceinline__ typename mul_of<T>::type widen(T x)
{
    return x;
}
template <> __device__ __forceinline__ float widen<__half>(__half x)
{
    return __half2float(x);
}
template <> __device__ __forceinline__ float widen<__nv_bfloat16>(__nv_bfloat16 x)
{
    return __bfloat162float(x);
}

template <typename T> __device__ __forceinline__ T narrow(typename mul_of<T>::type x)
{
    return x;
}
template <> __device__ __forceinline__ __half narrow<__half>(float x)
{
    return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

/* The scalar is *dev (read once per thread) when dev is not NULL, else host. */
template <typename T>
__global__ void scale_kernel(T *dst, const T *src, uint64_t n, const T *dev, T host)
{
    typename mul_of<T>::type s = widen<T>(dev != nullptr ? *dev : host);
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = narrow<T>(widen<T>(src[i]) * s);
}

template <typename T>
static int launch(void *dst, const void *src, size_t n, const void *dev, uint64_t host_bits,
                  cudaStream_t stream)
{
    T host;
    memcpy((void *)&host, &host_bits, sizeof(T));
    uint64_t blocks = (n + 255) / 256;
    if (blocks > 1024)
        blocks = 1024;
    scale_kernel<T>
        <<<(unsigned)blocks, 256, 0, stream>>>((T *)dst, (const T *)src, n, (const T *)dev, host);
    return (int)cudaGetLastError();
}

extern "C" int nccl_scale_launch(void *dst, const void *src, size_t count, comm_dtype_t dtype,
                                 const void *dev_scalar, uint64_t host_bits, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (count == 0)
        return 0;
    switch (dtype) {
    case COMM_F32:
        return launch<float>(dst, src, count, dev_scalar, host_bits, s);
    case COMM_F16:
        return launch<__half>(dst, src, count, dev_scalar, host_bits, s);
    case COMM_BF16:
        return launch<__nv_bfloat16>(dst, src, count, dev_scalar, host_bits, s);
    case COMM_F64:
        return launch<double>(dst, src, count, dev_scalar, host_bits, s);
    case COMM_I32:
        return launch<int32_t>(dst, src, count, dev_scalar, host_bits, s);
    case COMM_I64:
        return launch<int64_t>(dst, src, count, dev_scalar, host_bits, s);
    case COMM_I8:
        return launch<int8_t>(dst, src, count, dev_scalar, host_bits, s);
    case COMM_U8:
        return launch<uint8_t>(dst, src, count, dev_scalar, host_bits, s);
    case COMM_U32:
        return launch<uint32_t>(dst, src, count, dev_scalar, host_bits, s);
    case COMM_U64:
        return launch<uint64_t>(dst, src, count, dev_scalar, host_bits, s);
    }
    return (int)cudaErrorInvalidValue;
}

/* W: int64_t for signed T, uint64_t for unsigned (the quotient fits T again). */
template <typename T, typename W> __global__ void divide_kernel(T *buf, uint64_t n, W d)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        buf[i] = (T)((W)buf[i] / d);
}

template <typename T, typename W>
static int divide(void *buf, size_t n, int ranks, cudaStream_t stream)
{
    uint64_t blocks = (n + 255) / 256;
    if (blocks > 1024)
        blocks = 1024;
    divide_kernel<T, W><<<(unsigned)blocks, 256, 0, stream>>>((T *)buf, n, (W)ranks);
    return (int)cudaGetLastError();
}

extern "C" int nccl_divide_launch(void *buf, size_t count, comm_dtype_t dtype, int n, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (count == 0 || n == 1)
        return 0;
    switch (dtype) {
    case COMM_I8:
        return divide<int8_t, int64_t>(buf, count, n, s);
    case COMM_I32:
        return divide<int32_t, int64_t>(buf, count, n, s);
    case COMM_I64:
        return divide<int64_t, int64_t>(buf, count, n, s);
    case COMM_U8:
        return divide<uint8_t, uint64_t>(buf, count, n, s);
    case COMM_U32:
        return divide<uint32_t, uint64_t>(buf, count, n, s);
    case COMM_U64:
        return divide<uint64_t, uint64_t>(buf, count, n, s);
    default:
        return (int)cudaErrorInvalidValue;
    }
}
