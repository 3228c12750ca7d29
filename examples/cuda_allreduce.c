/* SPDX-License-Identifier: MIT */
/*
 * cuda_allreduce: one thread drives every GPU of the machine, one rank a GPU, as an
 * NCCL program would (ncclCommInitAll).  comm_init_all makes the ranks' communicators
 * at once; each rank's comm_allreduce is enqueued on its GPU's stream and returns at
 * once, the host waits for the streams, then checks every element.  Device buffers
 * (cudaMalloc) go to arcomm directly.  One GPU is a communicator of one rank: valid,
 * and the sum is that rank's own input.  Without a GPU it says so and exits 77.
 *
 *   cc cuda_allreduce.c $(pkg-config --cflags --libs arcomm) \
 *      -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart -o cuda_allreduce
 *   ./cuda_allreduce         prints "GPU G (rank R of N): all 65536 sums right"
 */
#include <arcomm.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

/* Floats a rank: 256 KiB.  From 1 MiB (ARCOMM_BF16_THRESHOLD) f32 sums travel as bf16
 * by default, which would round these inputs: set ARCOMM_BF16_THRESHOLD=off for exact
 * f32 at every size. */
#define N        (1 << 16)
#define MAX_GPUS 8 /* the most GPUs one CUDA communicator takes */

int main(void)
{
    comm_t *comms[MAX_GPUS];
    float *buf[MAX_GPUS], *host = malloc(N * sizeof(float));
    cudaStream_t stream[MAX_GPUS];
    comm_config_t cfg;
    int ngpus = 0, failed = 0;

    if (cudaGetDeviceCount(&ngpus) != cudaSuccess || ngpus == 0) {
        printf("no CUDA GPU here: skipped\n");
        return 77;
    }
    if (ngpus > MAX_GPUS)
        ngpus = MAX_GPUS;

    /* Rank g's input on GPU g: (g + 1) * (i % 100) at element i. */
    for (int g = 0; g < ngpus; g++) {
        cudaSetDevice(g);
        cudaStreamCreate(&stream[g]);
        cudaMalloc((void **)&buf[g], N * sizeof(float));
        for (int i = 0; i < N; i++)
            host[i] = (float)((g + 1) * (i % 100));
        cudaMemcpy(buf[g], host, N * sizeof(float), cudaMemcpyHostToDevice);
    }

    comm_config_init(&cfg);
    cfg.device = COMM_DEVICE_CUDA;
    if (comm_init_all(comms, ngpus, NULL, &cfg) != COMM_OK) { /* rank g on GPU g */
        fprintf(stderr, "comm_init_all: %s\n", comm_last_error(NULL));
        return 1;
    }
    /* Enqueue every rank's call (in place), then wait for all of them. */
    for (int g = 0; g < ngpus; g++) {
        cudaSetDevice(g);
        if (comm_allreduce(comms[g], buf[g], buf[g], N, COMM_F32, COMM_SUM, stream[g]) != COMM_OK) {
            fprintf(stderr, "rank %d: %s\n", g, comm_last_error(comms[g]));
            return 1;
        }
    }
    for (int g = 0; g < ngpus; g++) {
        cudaSetDevice(g);
        cudaStreamSynchronize(stream[g]);
    }

    /* Every GPU holds (1 + 2 + ... + ngpus) * (i % 100): small integers, exact in f32. */
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
        comm_destroy(comms[g]);
        cudaFree(buf[g]);
        cudaStreamDestroy(stream[g]);
    }
    free(host);
    return failed;
}
