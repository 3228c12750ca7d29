/* SPDX-License-Identifier: MIT */
/*
 * What a CUDA communicator makes of the knobs: its defaults for "auto", as numbers.
 * No CUDA header here: built into every library, so that arinfo --config shows the
 * CUDA values also where CUDA is not built.
 */
#include "backend.h"
#include "cuda/layout.h"

/* Copy-engine path from this size, and bf16 on the wire for f32 from this size, unless
 * the knobs say otherwise (measured on 2 x H200, docs/PERFORMANCE.md). */
#define CUDA_DEFAULT_COPY_THRESHOLD (1u << 20)
#define CUDA_DEFAULT_BF16_THRESHOLD (1u << 20)
/* Kernel-path blocks when ARCOMM_CUDA_BLOCKS is 0 (also the most there can be). */
#define CUDA_DEFAULT_BLOCKS CUDA_MAX_BLOCKS

static void cuda_knobs_used(struct rt_knobs *k, const struct rt_topo_summary *topo, int nranks,
                            bool same_process)
{
    (void)topo;
    (void)nranks;
    (void)same_process;
    if (k->cuda.copy_threshold == RT_SIZE_AUTO)
        k->cuda.copy_threshold = CUDA_DEFAULT_COPY_THRESHOLD;
    if (k->bf16_threshold == RT_SIZE_AUTO)
        k->bf16_threshold = CUDA_DEFAULT_BF16_THRESHOLD;
    if (k->wire_threshold == RT_SIZE_AUTO)
        k->wire_threshold = k->bf16_threshold;
    /* ARCOMM_COPY_CHUNK_BYTES "auto" stays auto: the chunk follows each call's size
     * (clamp(bytes/2, 512K, 4M)); the table refuses "off".  ARCOMM_CUDA_STAGING_BYTES is
     * a number already (the table reads "auto" as its default). */
    if (k->cuda.blocks <= 0)
        k->cuda.blocks = CUDA_DEFAULT_BLOCKS;
    if (k->cuda.blocks > CUDA_MAX_BLOCKS)
        k->cuda.blocks = CUDA_MAX_BLOCKS;
}

const struct backend_knobs coll_cuda_knobs = {
    .name = "cuda",
    .reads = RT_KNOB_MASK_SEGMENT | RT_KNOB_BIT(BF16_THRESHOLD) | RT_KNOB_BIT(WIRE) |
             RT_KNOB_BIT(WIRE_THRESHOLD) | RT_KNOB_BIT(PATHS) | RT_KNOB_MASK_CUDA,
    .used = cuda_knobs_used,
};
