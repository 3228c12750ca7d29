/* SPDX-License-Identifier: MIT */
/*
 * The default of ARCOMM_NT_THRESHOLD: where streaming stores start to beat cached ones,
 * from what this process really gets of the caches rather than what hwloc reports (a
 * virtual machine may be shown its host's whole L3, shared with other guests).  Measured
 * once per process, at the first communicator (nt_calibrate.c); the rule that turns the
 * timings into a threshold is kept apart so that it can be tested on made-up numbers.
 */
#ifndef ARCOMM_NT_CALIBRATE_H
#define ARCOMM_NT_CALIBRATE_H

#include "topo.h"

#include <stdbool.h>
#include <stddef.h>

/* The footprints the calibration tries (all inputs and outputs of one reduction, the
 * measure ARCOMM_NT_THRESHOLD is compared with): 2 MiB doubling up to 16 MiB.  Fresh
 * pages cost the most (2.4 GB/s to fault in on the development VM, see
 * docs/PERFORMANCE.md, "the streaming-store threshold from a measurement"), so the ladder stops at
 * 16 MiB: about 10 ms once per process. */
#define COLL_NT_LADDER_MIN ((size_t)2 << 20)
#define COLL_NT_LADDER_MAX ((size_t)16 << 20)
#define COLL_NT_LADDER_LEN 4

/* The threshold when streaming did not win up to the ladder's top (and the last-level
 * cache is larger): the process gets at least that much cache, and beyond this the
 * one-pass calls measured on the development VM stream faster (docs/PERFORMANCE.md, "the
 * streaming-store threshold from a measurement"). */
#define COLL_NT_UNCROSSED_CAP ((size_t)64 << 20)

/* One rung of the ladder: the best time of a cached-store and of a streaming-store pass. */
struct coll_nt_sample {
    size_t footprint; /* bytes read and written by one pass (2 sources + 1 destination) */
    double cached_ns; /* best pass with ordinary stores */
    double stream_ns; /* best pass with streaming stores */
};

enum coll_nt_outcome {
    COLL_NT_MEASURED,     /* streaming won from crossover on */
    COLL_NT_NO_CROSSOVER, /* cached stores won (or tied) up to the ladder's top */
    COLL_NT_FAILED,       /* could not measure (why says what failed) */
    COLL_NT_SKIPPED,      /* coll_nt_calibration_skip was called first */
};

/* What the calibration found; one per process, never changed once made. */
struct coll_nt_calibration {
    enum coll_nt_outcome outcome;
    size_t crossover; /* COLL_NT_MEASURED: the smallest footprint where streaming wins */
    struct coll_nt_sample samples[COLL_NT_LADDER_LEN];
    int nsamples;    /* rungs measured */
    double wall_ms;  /* what the calibration cost, allocation and first touch included */
    const char *why; /* COLL_NT_FAILED: what failed; else NULL */
};

/* Streaming must beat cached stores by this fraction to count as a win: the machine's
 * noise between two passes is a few percent. */
#define COLL_NT_WIN_MARGIN 0.10

/*
 * A rung has spilled out of the cache when its cached passes run below this fraction of
 * the fastest cached rate of the rungs up to it: memory-bound (on the development VM one
 * thread runs 90-115 GB/s in cache, 23-38 GB/s from memory).  Alone, a streaming win is
 * no proof: there one thread's streaming passes run as fast as its cached ones while
 * everything fits, and under load a 10-25% "win" at 8 or 16 MiB, cached at 0.5-0.8 of
 * its peak, came and went between runs, while two thread ranks lose 2.5-3x streaming
 * at 16 MiB (docs/PERFORMANCE.md, "the streaming-store threshold from a measurement").
 */
#define COLL_NT_SPILLED 0.4

/*
 * The rule: the smallest footprint that has spilled out of the cache (COLL_NT_SPILLED)
 * where streaming stores win (by COLL_NT_WIN_MARGIN) and, unless it is the last rung,
 * win again at the next footprint (one lucky pass is not a crossover).  Returns 0 when
 * there is no such footprint.  samples in ascending footprint order.
 */
size_t coll_nt_pick(const struct coll_nt_sample *samples, int n);

/* Does streaming win at this rung (the test coll_nt_pick applies)? */
bool coll_nt_stream_wins(const struct coll_nt_sample *s);

/*
 * The calibration, run on the first call in this process and cached (thread-safe:
 * thread ranks of one process share it).  Never fails: a calibration that cannot run
 * says so in outcome and why.
 */
const struct coll_nt_calibration *coll_nt_calibration(void);

/* Makes the calibration (if it has not run yet) record COLL_NT_SKIPPED without measuring:
 * for tools whose output must not depend on the machine's timing. */
void coll_nt_calibration_skip(void);

/*
 * What "auto" resolves to: min(last-level cache, measured crossover); where streaming
 * never won up to the ladder's top, min(last-level cache, COLL_NT_UNCROSSED_CAP); the
 * last-level cache alone when the calibration could not run or was skipped.  The cache
 * is the topology's L3, else L2, else 8 MiB.  *origin (when origin is not NULL)
 * receives a phrase for arinfo: "measured at first use", "last-level cache", ...
 */
size_t coll_nt_auto_threshold(const struct rt_topo_summary *topo,
                              const struct coll_nt_calibration *cal, const char **origin);

#endif /* ARCOMM_NT_CALIBRATE_H */
