/* SPDX-License-Identifier: MIT */
/*
 * Host emulation of an HTP session: pthread workers for the HVX threads (started once
 * per session, woken per op), VTCM as a 2 KiB-aligned host buffer, one emulated DMA
 * queue per worker, CLOCK_MONOTONIC for fence timeouts.
 */
#include "hex_emu.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VTCM_ALIGN   2048u
#define DMA_CAPACITY 128u

struct emu_pool {
    pthread_mutex_t lock;
    pthread_cond_t go;   /* a new job, or stop */
    pthread_cond_t done; /* the last worker finished the job */
    uint64_t generation; /* bumped per job */
    hex_job_fn fn;
    void *data;
    uint32_t n;         /* jobs of the current op (<= workers) */
    uint32_t remaining; /* workers still running it */
    int stop;
    uint32_t n_workers;
    pthread_t *threads;
    struct worker_arg *args;
};

struct worker_arg {
    struct emu_pool *pool;
    uint32_t index;
};

static void *worker_main(void *arg)
{
    struct worker_arg *w = arg;
    struct emu_pool *p = w->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->go, &p->lock);
        if (p->stop)
            break;
        seen = p->generation;
        if (w->index >= p->n)
            continue;
        hex_job_fn fn = p->fn;
        void *data = p->data;
        uint32_t n = p->n;
        pthread_mutex_unlock(&p->lock);
        fn(data, n, w->index);
        pthread_mutex_lock(&p->lock);
        if (--p->remaining == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

void hex_session_run(struct hex_session *s, hex_job_fn fn, void *data, uint32_t n)
{
    struct emu_pool *p = s->pool;
    if (n == 0)
        return;
    if (n == 1 || p == NULL) {
        /* One job runs in the caller, as the DSP's main thread would. */
        for (uint32_t i = 0; i < n; i++)
            fn(data, n, i);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->data = data;
    p->n = n;
    p->remaining = n;
    p->generation++;
    pthread_cond_broadcast(&p->go);
    while (p->remaining != 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

uint64_t hex_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void hex_relax(uint32_t iter)
{
    /* Sessions are threads sharing few host cores: spin briefly, then give the core to
     * the session being waited for, then sleep. */
    if (iter < 256)
        return;
    if (iter < 4096) {
        sched_yield();
        return;
    }
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 50000};
    nanosleep(&ts, NULL);
}

static void pool_stop(struct emu_pool *p, uint32_t started)
{
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->lock);
    for (uint32_t i = 0; i < started; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    free(p->threads);
    free(p->args);
    free(p);
}

static int pool_start(uint32_t n, struct emu_pool **out)
{
    struct emu_pool *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return ENOMEM;
    p->threads = calloc(n, sizeof(*p->threads));
    p->args = calloc(n, sizeof(*p->args));
    if (p->threads == NULL || p->args == NULL) {
        free(p->threads);
        free(p->args);
        free(p);
        return ENOMEM;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    p->n_workers = n;
    for (uint32_t i = 0; i < n; i++) {
        p->args[i].pool = p;
        p->args[i].index = i;
        int err = pthread_create(&p->threads[i], NULL, worker_main, &p->args[i]);
        if (err != 0) {
            pool_stop(p, i);
            return err;
        }
    }
    *out = p;
    return 0;
}

int hex_emu_session_create(uint32_t n_threads, uint32_t vtcm_bytes, struct hex_session **out)
{
    if (n_threads == 0 || n_threads > HEX_MAX_THREADS || vtcm_bytes == 0)
        return EINVAL;
    struct hex_session *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return ENOMEM;
    int err = ENOMEM;
    size_t vbytes = (vtcm_bytes + VTCM_ALIGN - 1) / VTCM_ALIGN * VTCM_ALIGN;
    s->vtcm = aligned_alloc(VTCM_ALIGN, vbytes);
    s->dma = calloc(n_threads + 1, sizeof(*s->dma));
    if (s->vtcm == NULL || s->dma == NULL)
        goto err_free;
    /* Stale VTCM is a real DSP's state too; a pattern makes reading it before a DMA
     * completes produce visibly wrong sums in tests instead of zeros. */
    memset(s->vtcm, 0x7b, vbytes);
    s->vtcm_bytes = vtcm_bytes;
    s->n_threads = n_threads;
    for (uint32_t i = 0; i <= n_threads; i++)
        hex_dma_init(&s->dma[i], DMA_CAPACITY);
    if (n_threads > 1) {
        struct emu_pool *p;
        err = pool_start(n_threads, &p);
        if (err != 0)
            goto err_free;
        s->pool = p;
    }
    *out = s;
    return 0;

err_free:
    free(s->dma);
    free(s->vtcm);
    free(s);
    return err;
}

void hex_emu_session_destroy(struct hex_session *s)
{
    if (s == NULL)
        return;
    if (s->pool != NULL) {
        struct emu_pool *p = s->pool;
        pool_stop(p, p->n_workers);
    }
    free(s->dma);
    free(s->vtcm);
    free(s);
}
