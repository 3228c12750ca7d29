/* SPDX-License-Identifier: MIT */
/*
 * A DMA queue with the semantics of the Hexagon user DMA as ggml-hexagon drives it:
 * descriptors are pushed at the tail and complete in order; pop waits for the oldest
 * one and returns its (dst, src); flush waits for all.  A push moves nrows rows of
 * width bytes, with separate source and destination strides (a 1D copy is one row);
 * a push with nrows == 0 is a placeholder that completes at once, which keeps the pop
 * schedule of a pipeline regular.  Pushing into a full queue fails (false).
 *
 * dma_queue.c implements it for the host emulation and for Hexagon cores run under
 * qemu: the copies happen in queue order when their descriptor is popped or flushed,
 * so code that reads a destination before popping it sees stale data, as on the DSP.
 * dma_udma.c (HEX_DMA_UDMA, the DSP build) chains real type-1 descriptors.
 */
#ifndef ARCOMM_HEX_DMA_H
#define ARCOMM_HEX_DMA_H

#include <stdbool.h>
#include <stdint.h>

struct hex_dma_ptr {
    void *dst;
    const void *src;
};

#define HEX_DMA_MAX_CAPACITY 256u

struct hex_dma_desc {
    struct hex_dma_ptr p;
    uint32_t width;      /* bytes per row */
    uint32_t nrows;      /* 0 = placeholder */
    uint32_t dst_stride; /* bytes between destination rows */
    uint32_t src_stride; /* bytes between source rows */
    uint32_t done;       /* the copy has happened */
};

struct hex_dma_queue {
    uint32_t capacity; /* a power of two, at most HEX_DMA_MAX_CAPACITY */
    uint32_t mask;
    uint32_t push_idx; /* next free descriptor */
    uint32_t pop_idx;  /* oldest descriptor not yet popped */
    uint32_t exec_idx; /* oldest descriptor not yet executed (emulation) */
    uint64_t bytes;    /* bytes moved, for statistics */
    struct hex_dma_desc desc[HEX_DMA_MAX_CAPACITY];
};

/* capacity is rounded up to a power of two; false when above the maximum. */
bool hex_dma_init(struct hex_dma_queue *q, uint32_t capacity);

/* Descriptors pushed and not yet popped. */
static inline uint32_t hex_dma_depth(const struct hex_dma_queue *q)
{
    return (q->push_idx - q->pop_idx) & q->mask;
}

bool hex_dma_push(struct hex_dma_queue *q, void *dst, const void *src, uint32_t dst_stride,
                  uint32_t src_stride, uint32_t width, uint32_t nrows);

static inline bool hex_dma_push_1d(struct hex_dma_queue *q, void *dst, const void *src,
                                   uint32_t bytes)
{
    return hex_dma_push(q, dst, src, bytes, bytes, bytes, 1);
}

/* A placeholder: completes at once, popped like any other descriptor. */
static inline bool hex_dma_push_placeholder(struct hex_dma_queue *q)
{
    return hex_dma_push(q, 0, 0, 0, 0, 0, 0);
}

/* Waits for the oldest descriptor; {NULL, NULL} when the queue is empty. */
struct hex_dma_ptr hex_dma_pop(struct hex_dma_queue *q);

/* Waits for every pushed descriptor and empties the queue. */
void hex_dma_flush(struct hex_dma_queue *q);

#endif /* ARCOMM_HEX_DMA_H */
