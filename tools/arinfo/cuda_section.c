/*
 * The CUDA section of arinfo: CUDA devices, their NUMA locality, and the peer-access
 * matrix with the kind of link.
 *
 * ==== FOR THE CUDA TRANSPORT'S OWNER: the spot to fill in ====
 * When the build has the CUDA transport (ARCOMM_HAVE_CUDA == 1 in arcomm_build.h),
 * cuda_collect() below should call
 *
 *     int cuda_topo_query(struct cuda_topo *out);    (transports/cuda/cuda_topo.h)
 *
 * and copy what it found into struct arinfo_cuda (devices.h): for each device its
 * ordinal, name, PCI bus id as "dddd:bb:dd.f" in lower case (cudaDeviceGetPCIBusId
 * gives upper case: lower it, so that arinfo_pci_numa() finds the device in hwloc),
 * memory and compute capability; and link[i][j] = ARINFO_LINK_NVLINK when i and j
 * have peer access over NVLink (cudaDevP2PAttrAccessSupported plus NVML's
 * nvmlDeviceGetNvLinkRemotePciInfo, or cudaDevP2PAttrNativeAtomicSupported as the
 * usual hint), ARINFO_LINK_PCIE when they have peer access otherwise, else
 * ARINFO_LINK_NONE.  With no device, leave ndevices 0 and say why in note (e.g. "no
 * CUDA device found: cudaGetDeviceCount: no CUDA-capable device is detected").
 * arinfo_cuda_print() does the rest, as text and JSON, and the JSON schema
 * (docs/arinfo-json.md, "cuda") already describes those fields.
 */
#include "arcomm_build.h"
#include "devices.h"

#include <stdlib.h>
#include <string.h>

#if ARCOMM_HAVE_CUDA
/* TODO(cuda): #include "cuda/cuda_topo.h" once transports/cuda/cuda_topo.h exists. */
#endif

/* Fills c; its caller zeroed it. */
static void cuda_collect(struct arinfo_cuda *c)
{
#if ARCOMM_HAVE_CUDA
    c->built = true;
    /* TODO(cuda): replace with cuda_topo_query() and the copy described above. */
    snprintf(c->note, sizeof(c->note),
             "this build has the CUDA transport, but arinfo cannot query it yet");
#else
    c->built = false;
    snprintf(c->note, sizeof(c->note), "this build has no CUDA transport");
#endif
}

void print_cuda(struct arinfo *ai)
{
    /* About 4 KiB of link matrix: on the heap, not the stack. */
    struct arinfo_cuda *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        fprintf(stderr, "arinfo: out of memory for the CUDA section\n");
        exit(1);
    }
    cuda_collect(c);
    arinfo_cuda_print(ai, c);
    free(c);
}
