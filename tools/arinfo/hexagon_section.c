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

#include <string.h>

/* Fills h; its caller zeroed it. */
static void hexagon_collect(struct arinfo_hexagon *h)
{
#if ARCOMM_HAVE_HEXAGON
    h->built = true;
    /* TODO(hexagon): ask the transport for its sessions (see above). */
    snprintf(h->note, sizeof(h->note),
             "this build has the Hexagon transport, but arinfo cannot query it yet");
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
