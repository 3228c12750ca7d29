/* SPDX-License-Identifier: MIT */
/*
 * The knob table: every ARCOMM_* setting, declared once (name, type, default, doc),
 * parsed into a communicator at comm_init.  Nothing else in arcomm calls getenv.
 */
#ifndef ARCOMM_RT_KNOBS_H
#define ARCOMM_RT_KNOBS_H

#include "arcomm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A size knob set to "off": the feature it gates never applies. */
#define RT_SIZE_OFF SIZE_MAX
/* A size knob left at "auto": the transport picks (a measured default). */
#define RT_SIZE_AUTO (SIZE_MAX - 1)

enum rt_log_level {
    RT_LOG_NONE = 0,
    RT_LOG_ERROR,
    RT_LOG_WARN,
    RT_LOG_INFO,
    RT_LOG_DEBUG,
    RT_LOG_TRACE,
};

enum rt_knob_type {
    RT_KNOB_INT,    /* long, decimal */
    RT_KNOB_SIZE,   /* size_t bytes, K/M/G suffixes (powers of two), "off", "auto" */
    RT_KNOB_BOOL,   /* 0/1, yes/no, on/off, true/false */
    RT_KNOB_STRING, /* up to RT_KNOB_STR_MAX - 1 bytes */
    RT_KNOB_LOGLEVEL,
};

enum rt_knob_source {
    RT_SRC_DEFAULT = 0,
    RT_SRC_ENV,    /* the ARCOMM_* environment variable */
    RT_SRC_CONFIG, /* a field of comm_config_t */
};

#define RT_KNOB_STR_MAX 256

/* Parsed values; one per communicator. */
struct rt_knobs {
    int log_level;                   /* enum rt_log_level */
    char log_file[RT_KNOB_STR_MAX];  /* "" = stderr; %h host, %p pid */
    long timeout_ms;                 /* < 0 = never */
    char transport[RT_KNOB_STR_MAX]; /* "" = automatic */
    size_t flag_threshold;           /* host: largest message on the flag path */
    size_t bf16_threshold;           /* f32 narrowed to bf16 on the wire at or above */
    size_t shm_slot_bytes;           /* staging slot per rank (two per rank) */
    size_t mem_pool_bytes;           /* comm_mem_alloc arena per rank */
    size_t nt_threshold;             /* bulk outputs at or above: streaming stores */
    long spin_ns;                    /* busy-poll this long before yielding */
    long yield_ns;                   /* then sched_yield this long before sleeping */
    bool numa;                       /* bind staging memory to the writer's node */
    size_t copy_threshold;           /* cuda: copy-engine path at or above */
    size_t copy_chunk_bytes;         /* cuda: copy-engine chunk, auto = clamp(n/2,..) */
    size_t cuda_staging_bytes;       /* cuda: copy-path pinned staging per rank */
    long cuda_blocks;                /* cuda: kernel-path blocks at most (0 = auto) */
    long hex_threads;                /* hexagon: HVX worker threads per session */
    size_t hex_vtcm_bytes;           /* hexagon: VTCM per session */
    long hex_fence_timeout_ms;       /* hexagon: fence wait (< 0: the comm's timeout) */
    char hex_mem[RT_KNOB_STR_MAX];   /* hexagon: auto, rpcmem, dma-heap or memfd */
    long hex_seq_start;              /* hexagon: first fence sequence (tests: wrap) */
    enum rt_knob_source source[32];  /* where each knob's value came from, by index */
};

/* Knob flags. */
#define RT_KNOB_AGREE                                                                              \
    0x1u /* changes what goes into shared memory or how it is read:                                \
          * every rank of a communicator must have rank 0's value                                  \
          * (compared at join, COMM_ERR_MISMATCH otherwise) */

struct rt_knob_desc {
    const char *name; /* ARCOMM_... */
    enum rt_knob_type type;
    const char *def; /* default, as text */
    const char *doc; /* one line */
    size_t offset;   /* of the value in struct rt_knobs */
    unsigned flags;  /* RT_KNOB_* */
};

extern const struct rt_knob_desc rt_knob_table[];
extern const size_t rt_knob_count;

/*
 * Fills *k from the defaults and the environment.  On a malformed value returns
 * COMM_ERR_INVALID and writes what was wrong (the variable, its value, the accepted
 * forms) into err.
 */
comm_status_t rt_knobs_load(struct rt_knobs *k, char *err, size_t errlen);

/*
 * Checks the values that parse but cannot work for a communicator of nranks ranks (a
 * staging slot too small to hold a line per rank, "off" where nothing can be off).
 * Returns COMM_ERR_INVALID with the knob, its value and the valid range in err.
 */
comm_status_t rt_knobs_check(const struct rt_knobs *k, int nranks, char *err, size_t errlen);

/* The smallest staging slot: one page, and a cache line per rank for 8-byte elements. */
size_t rt_knob_min_slot_bytes(int nranks);

/* The value of knob i as a number, for knobs whose type is INT, SIZE or BOOL. */
uint64_t rt_knob_value(const struct rt_knobs *k, size_t i);
/* Sets knob i (INT, SIZE or BOOL) from rt_knob_value's number. */
void rt_knob_set_value(struct rt_knobs *k, size_t i, uint64_t v);

/* The value of knob i as text ("64K", "off", "warn", ...). */
void rt_knob_format(const struct rt_knobs *k, size_t i, char *buf, size_t len);

/* The index of a knob by name, or -1. */
int rt_knob_find(const char *name);

const char *rt_knob_source_name(enum rt_knob_source src);

/* Parses "64K", "1M", "off", "auto", "123". Returns false when malformed. */
bool rt_parse_size(const char *text, size_t *out);

#endif /* ARCOMM_RT_KNOBS_H */
