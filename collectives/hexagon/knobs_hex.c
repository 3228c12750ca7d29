/* SPDX-License-Identifier: MIT */
/*
 * What a Hexagon communicator makes of the knobs.  Built into every library, so that
 * arinfo --config shows the Hexagon values also where Hexagon is not built.
 */
#include "backend.h"

/* The fence wait is bounded by the communicator's timeout, whatever the knob says. */
static void hex_knobs_used(struct rt_knobs *k, const struct rt_topo_summary *topo, int nranks,
                           bool same_process)
{
    (void)topo;
    (void)nranks;
    (void)same_process;
    /* Sessions share memory: keep every bit unless asked (ARCOMM_WIRE_THRESHOLD or
     * ARCOMM_BF16_THRESHOLD set to a size). */
    if (k->bf16_threshold == RT_SIZE_AUTO)
        k->bf16_threshold = RT_SIZE_OFF;
    if (k->wire_threshold == RT_SIZE_AUTO)
        k->wire_threshold = k->bf16_threshold;
    long t = k->hex.fence_timeout_ms;
    if (t < 0 || (k->timeout_ms >= 0 && t > k->timeout_ms))
        k->hex.fence_timeout_ms = k->timeout_ms;
    /* ARCOMM_HEX_MEM "auto" is decided at setup by what the device offers (rpcmem,
     * dma-heap, memfd); the threads and the VTCM are used as set (the table bounds them). */
}

const struct backend_knobs coll_hexagon_knobs = {
    .name = "hexagon",
    /* Reads ARCOMM_WIRE, ARCOMM_WIRE_THRESHOLD and ARCOMM_BF16_THRESHOLD too (resolved
     * above, to shm's values); not listed, so arinfo --config keeps one column for them. */
    .reads = RT_KNOB_MASK_SEGMENT | RT_KNOB_BIT(PATHS) | RT_KNOB_MASK_HEX,
    .used = hex_knobs_used,
};
