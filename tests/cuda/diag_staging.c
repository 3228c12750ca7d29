/* SPDX-License-Identifier: MIT */
/*
 * diag_staging: D2H and H2D copy-engine bandwidth of GPU 0 into the kinds of pinned host
 * memory the CUDA transport could stage through (cudaHostAlloc; malloc, anonymous
 * mmap, /dev/shm mmap, each registered, with and without MADV_HUGEPAGE).  Prints GB/s.
 */
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define BYTES (64u << 20)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void measure(const char *name, void *host, void *dev, cudaStream_t s)
{
    double bw[2];
    for (int dir = 0; dir < 2; dir++) {
        for (int rep = 0; rep < 2; rep++) {
            cudaStreamSynchronize(s);
            double t0 = now();
            for (int i = 0; i < 4; i++)
                cudaMemcpyAsync(dir ? dev : host, dir ? host : dev, BYTES,
                                dir ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s);
            cudaStreamSynchronize(s);
            bw[dir] = 4.0 * BYTES / (now() - t0) * 1e-9;
        }
    }
    printf("%-34s D2H %6.1f GB/s  H2D %6.1f GB/s  (%s)\n", name, bw[0], bw[1],
           cudaGetErrorString(cudaGetLastError()));
}

static void *shm_map(int huge)
{
    char name[64];
    snprintf(name, sizeof(name), "/arcomm-diag-%d-%d", (int)getpid(), huge);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    shm_unlink(name);
    if (fd < 0 || ftruncate(fd, BYTES) != 0)
        return NULL;
    void *p = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return NULL;
    if (huge)
        madvise(p, BYTES, MADV_HUGEPAGE);
    return p;
}

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    cudaSetDevice(0);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    void *dev;
    cudaMalloc(&dev, BYTES);
    void *h;
    cudaHostAlloc(&h, BYTES, cudaHostAllocPortable | cudaHostAllocMapped);
    measure("cudaHostAlloc", h, dev, s);
    cudaFreeHost(h);
    for (int huge = 0; huge < 2; huge++) {
        void *a = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (huge)
            madvise(a, BYTES, MADV_HUGEPAGE);
        memset(a, 1, BYTES);
        cudaHostRegister(a, BYTES, cudaHostRegisterMapped | cudaHostRegisterPortable);
        measure(huge ? "anon mmap + THP + register" : "anon mmap + register", a, dev, s);
        cudaHostUnregister(a);
        munmap(a, BYTES);
        void *m = shm_map(huge);
        if (m == NULL)
            continue;
        cudaHostRegister(m, BYTES, cudaHostRegisterMapped | cudaHostRegisterPortable);
        measure(huge ? "/dev/shm + MADV_HUGEPAGE + register" : "/dev/shm + register", m, dev, s);
        cudaHostUnregister(m);
        munmap(m, BYTES);
    }
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
    char line[256] = "?";
    if (f && fgets(line, sizeof(line), f))
        printf("shmem_enabled: %s", line);
    if (f)
        fclose(f);
    return 0;
}
