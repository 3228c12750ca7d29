/* SPDX-License-Identifier: MIT */
/*
 * What the CUDA and Hexagon sections print, in a form that belongs to arinfo: the
 * transports fill it (cuda_section.c, hexagon_section.c) from their own query
 * functions, and the printers here never change when those functions do.  The
 * printers are tested with made-up devices (tests/arinfo/test_sections.c).
 */
#ifndef ARINFO_DEVICES_H
#define ARINFO_DEVICES_H

#include "arinfo.h"

#include <stdbool.h>

#define ARINFO_CUDA_MAX 32
#define ARINFO_HEX_MAX  16

enum arinfo_link {
    ARINFO_LINK_NONE = 0, /* no peer access */
    ARINFO_LINK_PCIE,     /* peer access over PCIe (P2P through the root complex or a switch) */
    ARINFO_LINK_NVLINK,   /* peer access over NVLink / NVSwitch */
};

struct arinfo_cuda_device {
    int ordinal;     /* CUDA device ordinal */
    char name[128];  /* cudaDeviceProp.name */
    char bus_id[32]; /* "0000:17:00.0", lower case, as hwloc spells it */
    unsigned long long memory_bytes;
    int cc_major, cc_minor; /* compute capability */
};

struct arinfo_cuda {
    bool built;     /* ARCOMM_HAVE_CUDA */
    char note[160]; /* why there are no devices; "" when there are */
    int ndevices;
    struct arinfo_cuda_device dev[ARINFO_CUDA_MAX];
    /* [i][j]: can device i read and write device j's memory, and over what. */
    enum arinfo_link link[ARINFO_CUDA_MAX][ARINFO_CUDA_MAX];
};

struct arinfo_hex_session {
    int index;     /* HTP session (device_index of a Hexagon comm) */
    char arch[16]; /* "v73"; "emu" under the host emulation */
    unsigned long long vtcm_bytes;
    int hvx_threads;
};

struct arinfo_hexagon {
    bool built;    /* ARCOMM_HAVE_HEXAGON */
    bool emulated; /* sessions run on hexagon/emu, not a DSP */
    /* What the build and the machine have (with built). */
    bool rpcmem;    /* libcdsprpc.so loads: buffers are real rpcmem */
    bool dma_heap;  /* /dev/dma_heap/system is usable */
    bool cross_v69; /* the DSP sources were cross-compiled for v69 (HVX float) */
    bool qemu_v67;  /* the v67 driver runs under qemu-hexagon in the tests */
    bool sdk;       /* built with a Hexagon SDK */
    char vsum[24];  /* the sum implementation the sessions run */
    char note[160]; /* why there are no sessions; "" when there are */
    int nsessions;
    struct arinfo_hex_session s[ARINFO_HEX_MAX];
};

/* Print a filled struct as the "cuda" / "hexagon" section, text or JSON. */
void arinfo_cuda_print(struct arinfo *ai, const struct arinfo_cuda *c);
void arinfo_hexagon_print(struct arinfo *ai, const struct arinfo_hexagon *h);

#endif /* ARINFO_DEVICES_H */
