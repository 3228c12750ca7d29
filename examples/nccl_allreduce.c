/* SPDX-License-Identifier: MIT */
/*
 * nccl_allreduce: a plain NCCL program (nothing of arcomm in it) that runs on arcomm's
 * libnccl.so.2.  One thread drives every GPU: ncclCommInitAll makes a rank per GPU, the
 * ranks' ncclAllReduce calls go into one group, the host waits for the streams and
 * checks every element.  Built against arcomm's nccl.h (or a real NCCL's: the program
 * is the same), it runs on whichever libnccl.so.2 the loader finds first: arcomm's when
 * LD_LIBRARY_PATH names <libdir>/arcomm-nccl.  Without a GPU it says so and exits 77.
 *
 *   cc nccl_allreduce.c $(pkg-config --cflags --libs arcomm-nccl) \
 *      -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart -o nccl_allreduce
 *   LD_LIBRARY_PATH=<libdir>/arcomm-nccl ./nccl_allreduce
 *                            prints "NCCL 21903", then "GPU G (rank R of N): all 65536 sums right"
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#define N        (1 << 16) /* floats a rank */
#define MAX_GPUS 8

/* Says what failed and returns nonzero when r is not ncclSuccess. */
static int nccl_failed(ncclResult_t r, const char *what)
{
    if (r != ncclSuccess)
        fprintf(stderr, "%s: %s (%s)\n", what, ncclGetErrorString(r), ncclGetLastError(NULL));
    return r != ncclSuccess;
}

int main(void)
{
    ncclComm_t comms[MAX_GPUS];
    float *buf[MAX_GPUS], *host = malloc(N * sizeof(float));
    cudaStream_t stream[MAX_GPUS];
    int ngpus = 0, version = 0, failed = 0;

    if (nccl_failed(ncclGetVersion(&version), "ncclGetVersion"))
        return 1;
    printf("NCCL %d\n", version); /* 21903 on arcomm's library (NCCL 2.19.3's API) */
    if (cudaGetDeviceCount(&ngpus) != cudaSuccess || ngpus == 0) {
        printf("no CUDA GPU here: skipped\n");
        return 77;
    }
    if (ngpus > MAX_GPUS)
        ngpus = MAX_GPUS;

    for (int g = 0; g < ngpus; g++) {
        cudaSetDevice(g);
        cudaStreamCreate(&stream[g]);
        cudaMalloc((void **)&buf[g], N * sizeof(float));
        for (int i = 0; i < N; i++)
            host[i] = (float)((g + 1) * (i % 100)); /* rank g's input */
        cudaMemcpy(buf[g], host, N * sizeof(float), cudaMemcpyHostToDevice);
    }
    if (nccl_failed(ncclCommInitAll(comms, ngpus, NULL), "ncclCommInitAll")) /* rank g on GPU g */
        return 1;

    /* One thread, several ranks: their calls in one group, each on its GPU's stream. */
    ncclGroupStart();
    for (int g = 0; g < ngpus; g++)
        failed |=
            nccl_failed(ncclAllReduce(buf[g], buf[g], N, ncclFloat, ncclSum, comms[g], stream[g]),
                        "ncclAllReduce");
    if (nccl_failed(ncclGroupEnd(), "ncclGroupEnd") || failed)
        return 1;
    for (int g = 0; g < ngpus; g++) {
        cudaSetDevice(g);
        cudaStreamSynchronize(stream[g]);
    }

    float ranks_sum = (float)(ngpus * (ngpus + 1) / 2);
    for (int g = 0; g < ngpus; g++) {
        long wrong = 0;
        cudaSetDevice(g);
        cudaMemcpy(host, buf[g], N * sizeof(float), cudaMemcpyDeviceToHost);
        for (int i = 0; i < N; i++)
            wrong += host[i] != ranks_sum * (float)(i % 100);
        if (wrong)
            printf("GPU %d (rank %d of %d): %ld of %d sums WRONG\n", g, g, ngpus, wrong, N);
        else
            printf("GPU %d (rank %d of %d): all %d sums right\n", g, g, ngpus, N);
        failed |= wrong != 0;
        ncclCommDestroy(comms[g]);
        cudaFree(buf[g]);
        cudaStreamDestroy(stream[g]);
    }
    free(host);
    return failed;
}
