/* SPDX-License-Identifier: MIT */
/*
 * arinfo: what arcomm sees on this host (topology, accelerators, transports, paths,
 * knobs), as text or JSON.  One struct carries the options and what was loaded; each
 * section prints itself in both forms.
 */
#ifndef ARINFO_H
#define ARINFO_H

#include "json.h"
#include "knobs.h"

#include <hwloc.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The JSON schema this build writes; bumped only when a key changes meaning or goes. */
#define ARINFO_SCHEMA "arcomm.arinfo/1"

#define ARINFO_MAX_SIZES 64

enum arinfo_section {
    ARINFO_SEC_HOST = 1u << 0,
    ARINFO_SEC_TOPOLOGY = 1u << 1,
    ARINFO_SEC_PCI = 1u << 2,
    ARINFO_SEC_CUDA = 1u << 3,
    ARINFO_SEC_HEXAGON = 1u << 4,
    ARINFO_SEC_TRANSPORTS = 1u << 5,
    ARINFO_SEC_PATHS = 1u << 6,
    ARINFO_SEC_CONFIG = 1u << 7,
    ARINFO_SEC_PLAN = 1u << 8, /* --plan COLL SIZE only */
};

struct arinfo {
    /* Options. */
    bool json;
    unsigned sections; /* enum arinfo_section bits to print */
    int nranks;        /* local ranks of the communicator asked about */
    size_t sizes[ARINFO_MAX_SIZES];
    size_t nsizes;
    const char *topology_file; /* --topology, else NULL */
    const char *plan_coll;     /* --plan COLL SIZE, else NULL */
    size_t plan_bytes;
    const char *device; /* --device: "cuda", "cuda-p2p" or "hexagon"; NULL: host */
    int device_ranks;   /* its comm_paths_ranks_t (COMM_PATHS_CUDA, ...) */

    /* What was loaded. */
    hwloc_topology_t topo;    /* with PCI and OS devices; apart from the runtime's */
    struct rt_knobs knobs;    /* from the defaults and the environment */
    struct rt_knobs resolved; /* knobs after coll_host_resolve_knobs(nranks) */
    /* The knobs as a communicator of each backend uses them (coll_knob_views' order). */
    struct rt_knobs used[3];
    char **unknown_env; /* ARCOMM_* names set but not knobs, sorted */
    size_t unknown_count;
    size_t unknown_cap;

    FILE *out;         /* in text mode a buffer, wrapped to width at the end */
    int width;         /* columns of the text */
    bool text_started; /* a line was printed: titles then start with a blank */
    struct json js;    /* the writer, when json */
};

/* format.c: formatting shared by the sections. */

/* Bytes for people: "32 KiB", "1.5 MiB", "64 GiB". */
void arinfo_fmt_bytes(unsigned long long bytes, char *buf, size_t len);
/* Bytes as a knob would spell them: "4", "64K", "16M"; exact, else plain bytes. */
void arinfo_fmt_size(size_t bytes, char *buf, size_t len);
/* A section title in text mode. */
void arinfo_title(struct arinfo *ai, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints s in text mode with control characters shown as '?': one line stays one line. */
void arinfo_put_clean(FILE *f, const char *s);

/* The narrowest the text is wrapped to. */
#define ARINFO_MIN_WIDTH 40
/* The width the text is wrapped to: COLUMNS when set, else the terminal's on standard
 * output, else 80. */
int arinfo_width(void);
/* Writes text (lines ending in '\n') to out with every line longer than width broken at
 * blanks, its continuation lines indented under its last column or past its indent.  A
 * word longer than the width stays whole. */
void arinfo_wrap_write(FILE *out, const char *text, size_t len, int width);

/* install_paths.c */
/*
 * The path of a file of this build: installed (relative to the prefix, as
 * "lib/x86_64-linux-gnu/arcomm-nccl/libnccl.so.2") beside this arinfo's own prefix, else
 * built (an absolute path in the build tree, or NULL) when it exists, else the configured
 * prefix's, with false returned (the file is nowhere).
 */
bool arinfo_find_path(const char *installed, const char *built, char *out, size_t len);

/* topo_print.c */
int arinfo_topo_load(struct arinfo *ai);
void print_host(struct arinfo *ai);
void print_topology(struct arinfo *ai);
void print_pci(struct arinfo *ai);
/*
 * The NUMA nodes (a nodeset of os indexes) a PCI device, named by its bus id
 * "dddd:bb:dd.f", is local to; NULL when hwloc does not know the device or its
 * locality.  The CUDA section matches CUDA ordinals to PCI devices this way.
 */
hwloc_const_bitmap_t arinfo_pci_numa(struct arinfo *ai, const char *busid);
/*
 * What lies between two PCI devices named by bus id, in nvidia-smi topo -m's words: PIX,
 * PXB, PHB, NODE or SYS; NULL when hwloc does not know either.
 */
const char *arinfo_pci_link(struct arinfo *ai, const char *busid_a, const char *busid_b);

/* config_print.c */
/* Loads and resolves the knobs; exits 2 with rt_knobs_load's message when malformed. */
void arinfo_knobs_load(struct arinfo *ai);
void arinfo_warn_unknown_env(struct arinfo *ai);
void print_transports(struct arinfo *ai);
void print_paths(struct arinfo *ai);
void print_config(struct arinfo *ai);

/* plan_print.c: the path table and plans, through comm_paths_query (arcomm_paths.h). */
struct comm_paths_plan;
/* The plan of coll moving bytes per rank between ai->nranks thread or process ranks with
 * private or shared buffers; true when it is a bulk path (not flag).  Exits 2 with the
 * library's message when the environment's ARCOMM_PATHS is malformed. */
bool arinfo_plan(const struct arinfo *ai, const char *coll, size_t bytes, bool threads, bool shared,
                 struct comm_paths_plan *plan);
void print_path_table(struct arinfo *ai);
void print_plan(struct arinfo *ai);
/* --device: the device backend's table for --paths (each collective's path per size,
 * then the rows) and --plan. */
void print_device_paths(struct arinfo *ai);
void print_device_plan(struct arinfo *ai);

/* cuda_section.c, hexagon_section.c: filled in by the transports' owners. */
void print_cuda(struct arinfo *ai);
void print_hexagon(struct arinfo *ai);

#endif /* ARINFO_H */
