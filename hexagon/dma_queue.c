/* SPDX-License-Identifier: MIT */
/*
 * The emulated DMA queue (see hex_dma.h): copies run in FIFO order when a descriptor
 * is popped or flushed.  Plain C: it runs on the host and as real Hexagon code under
 * qemu, where no DMA engine is modelled.
 */
#include "hex_dma.h"
#include "hex_platform.h"

#if !defined(HEX_DMA_UDMA)

bool hex_dma_init(struct hex_dma_queue *q, uint32_t capacity)
{
    uint32_t cap = 2;
    while (cap < capacity)
        cap <<= 1;
    if (cap > HEX_DMA_MAX_CAPACITY)
        return false;
    hex_memset(q, 0, sizeof(*q));
    q->capacity = cap;
    q->mask = cap - 1;
    return true;
}

bool hex_dma_push(struct hex_dma_queue *q, void *dst, const void *src, uint32_t dst_stride,
                  uint32_t src_stride, uint32_t width, uint32_t nrows)
{
    /* One descriptor stays free, so that full and empty differ (as in ggml-hexagon). */
    if (((q->push_idx + 1) & q->mask) == (q->pop_idx & q->mask))
        return false;
    struct hex_dma_desc *d = &q->desc[q->push_idx & q->mask];
    d->p.dst = dst;
    d->p.src = src;
    d->width = width;
    d->nrows = nrows;
    d->dst_stride = dst_stride;
    d->src_stride = src_stride;
    d->done = nrows == 0; /* a placeholder is complete when pushed */
    q->push_idx = (q->push_idx + 1) & q->mask;
    return true;
}

static void execute(struct hex_dma_queue *q, struct hex_dma_desc *d)
{
    uint8_t *dst = d->p.dst;
    const uint8_t *src = d->p.src;
    for (uint32_t r = 0; r < d->nrows; r++)
        hex_memcpy(dst + (uint64_t)r * d->dst_stride, src + (uint64_t)r * d->src_stride, d->width);
    q->bytes += (uint64_t)d->width * d->nrows;
    d->done = 1;
}

/* The engine: runs descriptors in order up to and including index upto. */
static void run_until(struct hex_dma_queue *q, uint32_t upto)
{
    while (q->exec_idx != ((upto + 1) & q->mask)) {
        struct hex_dma_desc *d = &q->desc[q->exec_idx];
        if (!d->done)
            execute(q, d);
        q->exec_idx = (q->exec_idx + 1) & q->mask;
    }
}

struct hex_dma_ptr hex_dma_pop(struct hex_dma_queue *q)
{
    struct hex_dma_ptr none = {0, 0};
    if (q->pop_idx == q->push_idx)
        return none;
    run_until(q, q->pop_idx);
    struct hex_dma_ptr p = q->desc[q->pop_idx].p;
    q->pop_idx = (q->pop_idx + 1) & q->mask;
    return p;
}

void hex_dma_flush(struct hex_dma_queue *q)
{
    while (q->pop_idx != q->push_idx)
        (void)hex_dma_pop(q);
}

#endif
