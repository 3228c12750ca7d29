/* SPDX-License-Identifier: MIT */
/*
 * The single-copy calibration: process_vm_readv of this process's own memory against
 * memcpy of the same pieces.  Reading oneself takes the kernel's path for a peer (the
 * pages are looked up and pinned one by one, then copied) without needing one, so each
 * process measures alone; the ranks of a communicator agree on the answer at join
 * (segment.c: fast only if every rank found it fast).
 */
#include "cma_calibrate.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

bool shm_cma_is_fast(const struct shm_cma_calibration *cal)
{
    return shm_cma_ratio(cal) >= SHM_CMA_FAST_RATIO;
}

double shm_cma_ratio(const struct shm_cma_calibration *cal)
{
    if (cal->outcome != SHM_CMA_MEASURED || cal->readv_ns <= 0 || cal->memcpy_ns <= 0)
        return 0;
    return cal->memcpy_ns / cal->readv_ns; /* same bytes: rate over rate */
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static struct shm_cma_calibration calibration;
static _Atomic bool skip_requested;
static pthread_once_t calibration_once = PTHREAD_ONCE_INIT;

/* One pass of readv over every piece; < 0 when the kernel refused one. */
static double readv_pass(unsigned char *dst, const unsigned char *src, pid_t self)
{
    double t0 = now_ns();
    for (size_t off = 0; off < SHM_CMA_CAL_BYTES; off += SHM_CMA_CAL_PIECE) {
        struct iovec local = {.iov_base = dst + off, .iov_len = SHM_CMA_CAL_PIECE};
        struct iovec remote = {.iov_base = (void *)(src + off), .iov_len = SHM_CMA_CAL_PIECE};
        if (process_vm_readv(self, &local, 1, &remote, 1, 0) != (ssize_t)SHM_CMA_CAL_PIECE)
            return -1;
    }
    return now_ns() - t0;
}

static double memcpy_pass(unsigned char *dst, const unsigned char *src)
{
    double t0 = now_ns();
    for (size_t off = 0; off < SHM_CMA_CAL_BYTES; off += SHM_CMA_CAL_PIECE)
        memcpy(dst + off, src + off, SHM_CMA_CAL_PIECE);
    /* Keep the copies: the compiler must not drop stores nobody reads. */
    __asm__ volatile("" : : "r"(dst) : "memory");
    return now_ns() - t0;
}

static void calibrate(void)
{
    struct shm_cma_calibration *cal = &calibration;
    double t0 = now_ns();
    if (skip_requested) {
        cal->outcome = SHM_CMA_SKIPPED;
        return;
    }
    size_t len = 2 * SHM_CMA_CAL_BYTES;
    unsigned char *map =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        cal->outcome = SHM_CMA_FAILED;
        cal->why = "no memory for the scratch buffers";
        return;
    }
    /* 4 KiB pages, as most callers' buffers are (no MADV_HUGEPAGE: see nt_calibrate.c). */
    unsigned char *src = map, *dst = map + SHM_CMA_CAL_BYTES;
    memset(src, 0x5a, SHM_CMA_CAL_BYTES);
    memset(dst, 0xa5, SHM_CMA_CAL_BYTES);
    pid_t self = getpid();
    cal->outcome = SHM_CMA_MEASURED;
    for (int r = 0; r < 3; r++) {
        double rv = readv_pass(dst, src, self);
        if (rv < 0) {
            cal->outcome = SHM_CMA_FAILED;
            cal->why = "process_vm_readv of this process failed";
            break;
        }
        double mc = memcpy_pass(dst, src);
        cal->readv_ns = r == 0 || rv < cal->readv_ns ? rv : cal->readv_ns;
        cal->memcpy_ns = r == 0 || mc < cal->memcpy_ns ? mc : cal->memcpy_ns;
    }
    munmap(map, len);
    cal->wall_ms = (now_ns() - t0) / 1e6;
}

const struct shm_cma_calibration *shm_cma_calibration(void)
{
    pthread_once(&calibration_once, calibrate);
    return &calibration;
}

bool shm_cma_fast_here(const struct rt_knobs *k)
{
    if (k->cma_fast >= 0)
        return k->cma_fast == 1;
    return shm_cma_is_fast(shm_cma_calibration());
}

void shm_cma_calibration_skip(void)
{
    skip_requested = true;
}
