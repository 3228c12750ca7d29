/* SPDX-License-Identifier: MIT */
/*
 * The session's workers, one after the other in the caller: the freestanding builds
 * (qemu-hexagon runs one thread; the SDK build until a qurt worker pool exists).  The
 * tiles and DMA queues are the same as with real threads, only not concurrent.
 */
#include "hex_platform.h"

void hex_session_run(struct hex_session *s, hex_job_fn fn, void *data, uint32_t n)
{
    (void)s;
    for (uint32_t i = 0; i < n; i++)
        fn(data, n, i);
}
