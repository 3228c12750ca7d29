/* SPDX-License-Identifier: MIT */
/*
 * What the DSP sources need from where they run, and the session they run in.  Three
 * builds provide it:
 *   host emulation   emu/session_emu.c: pthread workers stand in for HVX threads,
 *                    VTCM is an aligned host buffer, time is CLOCK_MONOTONIC
 *   freestanding     session_seq.c: workers run one after the other (qemu-hexagon,
 *                    and the SDK build until a qurt worker pool is written)
 * Nothing here is host-only: the header compiles for --target=hexagon -ffreestanding.
 */
#ifndef ARCOMM_HEX_PLATFORM_H
#define ARCOMM_HEX_PLATFORM_H

#include "hex_dma.h"

#include <stddef.h>
#include <stdint.h>

/* Freestanding builds link their own memcpy/memset (qemu/crt.c, or the SDK's libc). */
#define hex_memcpy(d, s, n) __builtin_memcpy((d), (s), (n))
#define hex_memset(d, c, n) __builtin_memset((d), (c), (n))

#define HEX_MAX_THREADS 8u

/* A session's worker body: job i of n. */
typedef void (*hex_job_fn)(void *data, uint32_t n, uint32_t i);

/* Called while a fence waits: HEX_OK to go on, else the status to give up with. */
typedef int32_t (*hex_poll_fn)(void *ctx);

/*
 * One HTP session as the DSP code sees it.  Filled by whoever made the session (the
 * host transport in the emulation, the test driver under qemu).
 */
struct hex_session {
    uint8_t *vtcm; /* 128-byte aligned (2 KiB on the DSP) */
    uint32_t vtcm_bytes;
    uint32_t n_threads;        /* worker threads, at most HEX_MAX_THREADS */
    struct hex_dma_queue *dma; /* [n_threads + 1]: one per worker, the last for the caller */
    hex_poll_fn poll;          /* NULL on the DSP */
    void *poll_ctx;
    void *pool; /* the platform's worker pool */
};

/* Runs fn(data, n, i) for i in [0, n) on the session's workers; returns when all ran. */
void hex_session_run(struct hex_session *s, hex_job_fn fn, void *data, uint32_t n);

/* Microseconds from an arbitrary origin. */
uint64_t hex_now_us(void);

/* Backs off while polling a fence: iter counts the polls of this wait. */
void hex_relax(uint32_t iter);

#endif /* ARCOMM_HEX_PLATFORM_H */
