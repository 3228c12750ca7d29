/* SPDX-License-Identifier: MIT */
/*
 * The CUDA transport choice on a GPU machine (exit 77 = skipped without a GPU), with
 * process ranks:
 *   - unforced, a CUDA communicator takes the host-staged "cuda" (cuda-p2p is not yet
 *     verified on two GPUs, so auto never picks it);
 *   - ARCOMM_TRANSPORT=cuda-p2p takes cuda-p2p where the ranks' GPUs reach each other
 *     (always for process ranks sharing one GPU), and refuses it otherwise;
 *   - with two GPUs, peer access forced off: each process sees only its own GPU
 *     (CUDA_VISIBLE_DEVICES), so no rank can map the other's memory: cuda-p2p is refused on
 *     every rank with COMM_ERR_UNSUPPORTED naming the pair, and the host-staged transport
 *     still serves the same ranks.
 * Every communicator that comes up runs one i32 allreduce, checked.
 */
#include "arcomm.h"
#include "cuda_check.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NRANKS 2
#define COUNT  1000

/* A process rank: one line, "up <transport> sum ok|wrong" or "refused <status> <message>". */
static int child_main(int rank, int nranks, const char *id, int device)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = nranks;
    cfg.rank = rank;
    snprintf(cfg.id.str, sizeof(cfg.id.str), "%s", id);
    cfg.device = COMM_DEVICE_CUDA;
    cfg.device_index = device;
    cfg.timeout_ms = 30000;
    comm_t *c = NULL;
    comm_status_t st = comm_init(&c, &cfg);
    if (st != COMM_OK) {
        const char *msg = comm_last_error(NULL);
        printf("refused %s %.400s\n", comm_status_string(st), msg ? msg : "");
        return 0;
    }
    int32_t h[COUNT], *d = NULL;
    for (int i = 0; i < COUNT; i++)
        h[i] = (rank + 1) * 1000 + i;
    cudaStream_t s;
    bool ok = cudaSetDevice(device) == cudaSuccess && cudaStreamCreate(&s) == cudaSuccess &&
              cudaMalloc((void **)&d, sizeof(h)) == cudaSuccess &&
              cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice) == cudaSuccess;
    ok = ok && comm_allreduce(c, d, d, COUNT, COMM_I32, COMM_SUM, s) == COMM_OK &&
         cudaStreamSynchronize(s) == cudaSuccess &&
         cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost) == cudaSuccess;
    int64_t ranks_sum = (int64_t)nranks * (nranks + 1) / 2 * 1000;
    for (int i = 0; ok && i < COUNT; i++)
        ok = h[i] == (int32_t)(ranks_sum + (int64_t)nranks * i);
    printf("up %s sum %s\n", comm_transport_name(c), ok ? "ok" : "wrong");
    comm_destroy(c);
    return 0;
}

/*
 * Runs NRANKS process ranks of self with env before each (rank r's "%d" is r), on device
 * r % ndev (or 0 when split), and checks each one's line starts with want.
 */
static void run_case(const char *self, const char *what, const char *env_fmt, int ndev, bool split,
                     const char *want, const char *also)
{
    int before = g_fail;
    comm_id_t id;
    comm_id_new(&id);
    FILE *out[NRANKS];
    for (int r = 0; r < NRANKS; r++) {
        char env[160], cmd[640];
        snprintf(env, sizeof(env), env_fmt, r);
        snprintf(cmd, sizeof(cmd), "%s %s --child %d %d %s %d", env, self, r, NRANKS, id.str,
                 split ? 0 : r % ndev);
        out[r] = popen(cmd, "r");
        CHECK(out[r] != NULL, "popen: %s", strerror(errno));
    }
    for (int r = 0; r < NRANKS; r++) {
        char line[640] = "";
        if (out[r] == NULL)
            continue;
        if (fgets(line, sizeof(line), out[r]) == NULL)
            line[0] = '\0';
        int st = pclose(out[r]);
        CHECK(st == 0, "%s: process rank %d exited with %d", what, r, st);
        CHECK(strncmp(line, want, strlen(want)) == 0, "%s: rank %d: wanted \"%s...\", got: %s",
              what, r, want, line);
        CHECK(also == NULL || strstr(line, also) != NULL, "%s: rank %d: no \"%s\" in: %s", what, r,
              also, line);
    }
    printf("%s %s\n", g_fail == before ? "ok  " : "FAIL", what);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 6 && strcmp(argv[1], "--child") == 0)
        return child_main(atoi(argv[2]), atoi(argv[3]), argv[4], atoi(argv[5]));
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0");
        return SKIP;
    }
    int access = 1;
    if (ndev >= 2 && cudaDeviceCanAccessPeer(&access, 0, 1) != cudaSuccess)
        access = 0;
    printf("%d CUDA device%s%s\n", ndev, ndev == 1 ? "" : "s",
           ndev >= 2 ? (access ? ", GPU 0 reaches GPU 1" : ", GPU 0 does not reach GPU 1") : "");
    const char *self = argv[0];
    run_case(self, "unforced: the host-staged transport",
             "env -u ARCOMM_TRANSPORT ARCOMM_TEST_R=%d", ndev, false, "up cuda sum ok", NULL);
    if (ndev == 1 || access)
        run_case(self,
                 ndev == 1 ? "forced cuda-p2p, process ranks sharing GPU 0"
                           : "forced cuda-p2p, a GPU each, peer access on",
                 "ARCOMM_TRANSPORT=cuda-p2p ARCOMM_TEST_R=%d", ndev, false, "up cuda-p2p sum ok",
                 NULL);
    else
        run_case(self, "forced cuda-p2p, GPUs without peer access: refused",
                 "ARCOMM_TRANSPORT=cuda-p2p ARCOMM_TEST_R=%d", ndev, false, "refused", "cuda");
    if (ndev >= 2) {
        /* Peer access forced off: a process sees only its own GPU. */
        run_case(self, "forced cuda-p2p, peer access forced off: refused on every rank",
                 "ARCOMM_TRANSPORT=cuda-p2p CUDA_VISIBLE_DEVICES=%d", ndev, true,
                 "refused COMM_ERR_UNSUPPORTED", "cannot access each other");
        run_case(self, "unforced, peer access forced off: the host-staged transport",
                 "env -u ARCOMM_TRANSPORT CUDA_VISIBLE_DEVICES=%d", ndev, true, "up cuda sum ok",
                 NULL);
    }
    printf("%s: %d failure%s\n", g_fail ? "FAIL" : "PASS", g_fail, g_fail == 1 ? "" : "s");
    return g_fail ? 1 : 0;
}
