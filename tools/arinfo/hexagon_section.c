/* SPDX-License-Identifier: MIT */
/*
 * The Hexagon section of arinfo: the HTP sessions a Hexagon communicator could use,
 * real DSPs or the host emulation (hexagon/emu).
 *
 * ==== FOR THE HEXAGON TRANSPORT'S OWNER: the spot to fill in ====
 * When the build has the Hexagon transport (ARCOMM_HAVE_HEXAGON == 1 in
 * arcomm_build.h), hexagon_collect() below should ask the transport which sessions it
 * can open and copy them into struct arinfo_hexagon (devices.h): emulated = true under
 * hexagon/emu; for each session its index (the device_index of a Hexagon
 * communicator), the architecture ("v73", or "emu"), the VTCM bytes and the number of
 * HVX threads.  With none, leave nsessions 0 and say why in note.
 * arinfo_hexagon_print() prints it as text and JSON (docs/arinfo-json.md, "hexagon").
 */
#include "arcomm_build.h"
#include "devices.h"
#if ARCOMM_HAVE_HEXAGON
#include "hexagon/hexagon.h"
#endif

#include <stdio.h>
#include <string.h>

/* Fills h; its caller zeroed it. */
static void hexagon_collect(struct arinfo_hexagon *h)
{
#if ARCOMM_HAVE_HEXAGON
    struct hex_info info;
    hex_info_get(&info);
    h->built = true;
    h->emulated = strcmp(info.ops, "host emulation") == 0;
    h->rpcmem = info.rpcmem;
    h->dma_heap = info.dma_heap;
    h->cross_v69 = info.cross_v69;
    h->qemu_v67 = info.qemu_v67;
    h->sdk = info.sdk;
    snprintf(h->vsum, sizeof(h->vsum), "%s", info.vsum ? info.vsum : "");
    /* Sessions are made per communicator (one per rank, device_index = session), so
     * there is no fixed list to show; the knobs size each one. */
    snprintf(h->note, sizeof(h->note),
             "%s: one session per rank, made at comm_init (ARCOMM_HEX_VTCM_BYTES, "
             "ARCOMM_HEX_THREADS size each)",
             h->emulated ? "ops run on the host emulation" : "ops run on the DSP");
#else
    h->built = false;
    snprintf(h->note, sizeof(h->note), "no hexagon transport in this build");
#endif
}

void print_hexagon(struct arinfo *ai)
{
    struct arinfo_hexagon h;
    memset(&h, 0, sizeof(h));
    hexagon_collect(&h);
    arinfo_hexagon_print(ai, &h);
}
