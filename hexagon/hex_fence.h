/* SPDX-License-Identifier: MIT */
/*
 * Fences between HTP sessions.  Every session owns one 64 KiB fence buffer, cut into
 * 128-byte slots (one HVX vector, one L2 line on the DSP), cloned into every peer
 * session: a session writes only its own buffer and reads the peers'.
 *
 *   slot 0   HEX_FENCE_SLOT_CALL: the call fence, (seq, status) of the latest fence
 *            this session passed (entry or exit of the current call)
 *   slot 1   HEX_FENCE_SLOT_ID: who owns the buffer, written once at setup
 *   2..511   reserved (zero)
 *
 * A writer stores status, then seq (release); a reader loads seq (acquire), then
 * status.  status is sticky: once a session failed, every later fence of every peer
 * fails too.  Sequence numbers skip 0 (a zero word means "never written") and are
 * compared wrap-aware: a reached b when (int32_t)(a - b) >= 0.
 */
#ifndef ARCOMM_HEX_FENCE_H
#define ARCOMM_HEX_FENCE_H

#include "hex_status.h"

#include <stdatomic.h>
#include <stdint.h>

#define HEX_FENCE_BYTES      65536u
#define HEX_FENCE_SLOT_BYTES 128u
#define HEX_FENCE_SLOTS      (HEX_FENCE_BYTES / HEX_FENCE_SLOT_BYTES)
#define HEX_FENCE_SLOT_CALL  0u
#define HEX_FENCE_SLOT_ID    1u
#define HEX_FENCE_MAGIC      0x48584631u /* "HXF1" */

struct hex_fence_slot {
    /* One 128-byte line; the owning session is its only writer. */
    _Atomic uint32_t seq;   /* the last fence this session reached (0 = none yet) */
    _Atomic int32_t status; /* HEX_OK, or the error this session hit (sticky) */
    uint32_t magic;         /* slot 1: HEX_FENCE_MAGIC once the owner set it up */
    uint32_t rank;          /* slot 1: the owner's rank */
    uint32_t nranks;        /* slot 1: ranks of the communicator */
    uint32_t ready;         /* slot 1: the owner has mapped every peer's fence buffer */
    uint32_t pad[26];
} __attribute__((aligned(HEX_FENCE_SLOT_BYTES)));

_Static_assert(sizeof(struct hex_fence_slot) == HEX_FENCE_SLOT_BYTES, "a slot is one line");

/* Wrap-aware: has sequence a reached b? */
static inline int hex_seq_reached(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) >= 0;
}

/* The next sequence number after s, skipping 0. */
static inline uint32_t hex_seq_next(uint32_t s)
{
    return s + 1 == 0 ? 1 : s + 1;
}

/* Sets the sticky error status without moving seq (peers check status first); the
 * first error wins, so peers report the cause rather than its echoes. */
static inline void hex_fence_fail(struct hex_fence_slot *own, int32_t status)
{
    int32_t ok = HEX_OK;
    atomic_compare_exchange_strong_explicit(&own->status, &ok, status, memory_order_release,
                                            memory_order_relaxed);
}

/* Publishes (seq, status) in the owner's slot: status first, seq last (release).  An
 * OK status never clears an earlier error. */
static inline void hex_fence_write(struct hex_fence_slot *own, uint32_t seq, int32_t status)
{
    if (status != HEX_OK)
        hex_fence_fail(own, status);
    atomic_store_explicit(&own->seq, seq, memory_order_release);
}

#endif /* ARCOMM_HEX_FENCE_H */
