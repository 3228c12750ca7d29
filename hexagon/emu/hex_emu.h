/* SPDX-License-Identifier: MIT */
/*
 * The host emulation of an HTP session: what the Hexagon transport creates per rank.
 * A pool of pthread workers stands in for the HVX threads, an aligned host buffer for
 * VTCM, the DMA queues are the emulated FIFO ones (dma_queue.c).
 */
#ifndef ARCOMM_HEX_EMU_H
#define ARCOMM_HEX_EMU_H

#include "hex_platform.h"

#define HEX_EMU_VTCM_DEFAULT (8u << 20)

/* Makes a session with n_threads workers and vtcm_bytes of VTCM; 0 or an errno. */
int hex_emu_session_create(uint32_t n_threads, uint32_t vtcm_bytes, struct hex_session **out);
void hex_emu_session_destroy(struct hex_session *s);

#endif /* ARCOMM_HEX_EMU_H */
