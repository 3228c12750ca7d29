/* SPDX-License-Identifier: MIT */
/*
 * comm_send and comm_recv of device buffers: two process ranks sharing GPU 0 (the
 * minimum every CUDA machine has), on the transport named by P2P_CUDA_TRANSPORT (cuda
 * by default; cuda-p2p too where it serves them).  Ping-pong over sizes from 0 to
 * 17 MiB, every byte checked; a group where both ranks send and receive at once; a
 * count mismatch (COMM_ERR_MISMATCH on both, the receive buffer untouched, still
 * usable); a send to oneself in a group.  Exit 77 (skipped) without a GPU.
 */
#include <arcomm.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MOST (17u << 20)

static int failures;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        failures++;                                                                                \
    } while (0)

/* Byte i of rank r's message with seed s. */
static uint8_t pattern(size_t i, int r, unsigned s)
{
    uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)r << 40) ^ ((uint64_t)s << 20);
    x ^= x >> 29;
    return (uint8_t)(x * 0xbf58476d1ce4e5b9ull >> 56);
}

static void fill(uint8_t *h, size_t n, int r, unsigned s)
{
    for (size_t i = 0; i < n; i++)
        h[i] = pattern(i, r, s);
}

static size_t wrong(const uint8_t *h, size_t n, int r, unsigned s)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += h[i] != pattern(i, r, s);
    return bad;
}

static int rank_main(int rank, const comm_id_t *id, const char *transport)
{
    int ngpu = 0;
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 1) {
        if (rank == 0)
            printf("no CUDA GPU: skipped\n");
        return 77;
    }
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = 2;
    cfg.rank = rank;
    cfg.id = *id;
    cfg.device = COMM_DEVICE_CUDA;
    cfg.device_index = 0;
    cfg.transport = transport;
    cfg.timeout_ms = 60000;
    comm_t *comm;
    comm_status_t st = comm_init(&comm, &cfg);
    if (st != COMM_OK) {
        fprintf(stderr, "rank %d: comm_init: %s\n", rank, comm_last_error(NULL));
        return st == COMM_ERR_UNSUPPORTED ? 77 : 1;
    }
    int peer = 1 - rank;
    uint8_t *h = malloc(MOST), *d_send = NULL, *d_recv = NULL;
    cudaStream_t s;
    if (h == NULL || cudaSetDevice(0) != cudaSuccess ||
        cudaMalloc((void **)&d_send, MOST) != cudaSuccess ||
        cudaMalloc((void **)&d_recv, MOST) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess) {
        fprintf(stderr, "rank %d: setup failed\n", rank);
        return 1;
    }
    size_t sizes[] = {0, 1, 8191, 8192, 8193, 1u << 20, MOST};
    for (unsigned k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        fill(h, n, rank, k);
        cudaMemcpy(d_send, h, n, cudaMemcpyHostToDevice);
        cudaMemset(d_recv, 0xee, n);
        if (rank == 0) {
            st = comm_send(comm, d_send, n, COMM_U8, peer, s);
            if (st == COMM_OK)
                st = comm_recv(comm, d_recv, n, COMM_U8, peer, s);
        } else {
            st = comm_recv(comm, d_recv, n, COMM_U8, peer, s);
            if (st == COMM_OK)
                st = comm_send(comm, d_send, n, COMM_U8, peer, s);
        }
        cudaStreamSynchronize(s);
        cudaMemcpy(h, d_recv, n, cudaMemcpyDeviceToHost);
        if (st != COMM_OK)
            FAIL("rank %d: %zu bytes: %s", rank, n, comm_last_error(comm));
        else if (wrong(h, n, peer, k))
            FAIL("rank %d: %zu bytes: %zu wrong", rank, n, wrong(h, n, peer, k));
    }
    /* Both send and receive at once, in a group. */
    fill(h, 4u << 20, rank, 50);
    cudaMemcpy(d_send, h, 4u << 20, cudaMemcpyHostToDevice);
    comm_group_start();
    comm_send(comm, d_send, 1u << 20, COMM_F32, peer, s);
    comm_recv(comm, d_recv, 1u << 20, COMM_F32, peer, s);
    st = comm_group_end();
    cudaMemcpy(h, d_recv, 4u << 20, cudaMemcpyDeviceToHost);
    if (st != COMM_OK || wrong(h, 4u << 20, peer, 50))
        FAIL("rank %d: group exchange: %s", rank, comm_last_error(comm));
    /* A count mismatch: both see it, nothing written, still usable. */
    cudaMemset(d_recv, 0xee, 4096);
    st = rank == 0 ? comm_send(comm, d_send, 1000, COMM_F32, peer, s)
                   : comm_recv(comm, d_recv, 1001, COMM_F32, peer, s);
    cudaMemcpy(h, d_recv, 4096, cudaMemcpyDeviceToHost);
    if (st != COMM_ERR_MISMATCH)
        FAIL("rank %d: mismatch: %s", rank, comm_status_string(st));
    for (int i = 0; rank == 1 && i < 4096; i++)
        if (h[i] != 0xee) {
            FAIL("rank 1: the mismatched receive wrote its buffer");
            break;
        }
    /* A send to oneself, in a group. */
    fill(h, 4096, rank, 60);
    cudaMemcpy(d_send, h, 4096, cudaMemcpyHostToDevice);
    comm_group_start();
    comm_send(comm, d_send, 4096, COMM_U8, rank, s);
    comm_recv(comm, d_recv, 4096, COMM_U8, rank, s);
    st = comm_group_end();
    cudaMemcpy(h, d_recv, 4096, cudaMemcpyDeviceToHost);
    if (st != COMM_OK || wrong(h, 4096, rank, 60))
        FAIL("rank %d: send to itself: %s", rank, comm_last_error(comm));
    comm_destroy(comm);
    cudaFree(d_send);
    cudaFree(d_recv);
    free(h);
    return failures ? 1 : 0;
}

int main(void)
{
    /* No CUDA call here: a process that forks after initialising CUDA leaves its
     * children without it.  Each rank looks for the GPU itself. */
    const char *transport = getenv("P2P_CUDA_TRANSPORT");
    comm_id_t id;
    if (comm_id_new(&id) != COMM_OK)
        return 1;
    pid_t pid[2];
    fflush(NULL);
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        if (pid[r] == 0)
            _exit(rank_main(r, &id, transport ? transport : "cuda"));
    }
    int rc = 0;
    for (int r = 0; r < 2; r++) {
        int ws;
        waitpid(pid[r], &ws, 0);
        int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
        if (code == 77 && rc == 0)
            rc = 77;
        else if (code != 0 && code != 77)
            rc = 1;
    }
    if (rc != 77)
        printf("%s\n", rc == 0 ? "device sends and receives right" : "FAILED");
    return rc;
}
