/* SPDX-License-Identifier: MIT */
/*
 * The streaming-store calibration.  A one-pass reduction of a large message reads
 * every rank's input and writes the output; once all of that no longer fits in the
 * cache this process really gets, an ordinary store first reads the destination line
 * and later writes it back (three memory transfers per output line), a streaming store
 * writes it once.  Below that point the ordinary store wins, the output staying in
 * cache.  Where the point lies is measured here rather than taken from hwloc: a
 * virtual machine can be shown its host's whole L3 (300 MiB, shared with other guests),
 * and then streaming never starts where it would pay.
 *
 * The measurement: the reduction kernel the collectives use (f32 sum of two sources
 * into one destination, with and without nt_store) over footprints of 2, 4, 8 and
 * 16 MiB in one scratch mapping; per footprint a warm-up pass, then two cached and two
 * streaming passes alternated, the best of each kept.  Where streaming never wins up
 * to 16 MiB, the process has at least that much cache and the threshold is capped
 * (coll_nt_auto_threshold), not measured further: faulting in fresh pages for 64 MiB
 * would cost 30 ms on a VM.
 */
#include "nt_calibrate.h"
#include "reduce.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

bool coll_nt_stream_wins(const struct coll_nt_sample *s)
{
    return s->stream_ns > 0 && s->stream_ns * (1.0 + COLL_NT_WIN_MARGIN) < s->cached_ns;
}

/* Bytes per ns (GB/s) of a rung's cached passes. */
static double cached_rate(const struct coll_nt_sample *s)
{
    return s->cached_ns > 0 ? (double)s->footprint / s->cached_ns : 0;
}

size_t coll_nt_pick(const struct coll_nt_sample *samples, int n)
{
    double peak = 0;
    for (int i = 0; i < n; i++) {
        double rate = cached_rate(&samples[i]);
        peak = rate > peak ? rate : peak;
        bool spilled = rate < COLL_NT_SPILLED * peak;
        bool confirmed = i + 1 == n || coll_nt_stream_wins(&samples[i + 1]);
        if (spilled && coll_nt_stream_wins(&samples[i]) && confirmed)
            return samples[i].footprint;
    }
    return 0;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One pass: dst = a + b over count floats; returns its time in ns. */
static double pass(float *dst, const float *a, const float *b, size_t count, bool nt)
{
    void *dsts[1] = {dst};
    const void *srcs[2] = {a, b};
    struct coll_reduce_args args = {
        .dst = dsts,
        .ndst = 1,
        .dst_dtype = COMM_F32,
        .src = srcs,
        .nsrc = 2,
        .src_dtype = COMM_F32,
        .count = count,
        .op = COMM_SUM,
        .nt_store = nt,
    };
    double t0 = now_ns();
    coll_reduce(&args);
    return now_ns() - t0;
}

static struct coll_nt_calibration calibration;
static _Atomic bool skip_requested;
static pthread_once_t calibration_once = PTHREAD_ONCE_INIT;

static void calibrate(void)
{
    struct coll_nt_calibration *cal = &calibration;
    double t0 = now_ns();
    if (skip_requested) {
        cal->outcome = COLL_NT_SKIPPED;
        return;
    }
    /* Three arrays (a, b, dst) of a third of the largest footprint each. */
    size_t third = (COLL_NT_LADDER_MAX / 3) & ~(size_t)4095;
    size_t len = 3 * third;
    unsigned char *map =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        cal->outcome = COLL_NT_FAILED;
        cal->why = "no memory for the scratch buffers";
        return;
    }
    /* No MADV_HUGEPAGE: with THP defrag "madvise" the first touch may compact memory
     * in the fault (150 ms seen on the development VM), where 4 KiB pages cost 6 ms. */
    float *a = (float *)map, *b = (float *)(map + third), *dst = (float *)(map + 2 * third);
    size_t touched = 0; /* bytes of a and b written so far (untouched pages read as zero
                         * from one shared page: always in cache, so no measure) */
    int n = 0;
    for (size_t fp = COLL_NT_LADDER_MIN; fp <= COLL_NT_LADDER_MAX && n < COLL_NT_LADDER_LEN;
         fp *= 2) {
        size_t bytes = (fp / 3) & ~(size_t)63;
        if (bytes > third)
            bytes = third;
        if (bytes > touched) {
            memset((unsigned char *)a + touched, 0x3c, bytes - touched);
            memset((unsigned char *)b + touched, 0x3d, bytes - touched);
            touched = bytes;
        }
        size_t count = bytes / sizeof(float);
        struct coll_nt_sample *s = &cal->samples[n++];
        s->footprint = fp;
        (void)pass(dst, a, b, count, false);
        s->cached_ns = s->stream_ns = 0;
        for (int r = 0; r < 2; r++) {
            double c = pass(dst, a, b, count, false);
            double t = pass(dst, a, b, count, true);
            s->cached_ns = r == 0 || c < s->cached_ns ? c : s->cached_ns;
            s->stream_ns = r == 0 || t < s->stream_ns ? t : s->stream_ns;
        }
    }
    munmap(map, len);
    cal->nsamples = n;
    cal->crossover = coll_nt_pick(cal->samples, n);
    cal->outcome = cal->crossover ? COLL_NT_MEASURED : COLL_NT_NO_CROSSOVER;
    cal->wall_ms = (now_ns() - t0) / 1e6;
}

const struct coll_nt_calibration *coll_nt_calibration(void)
{
    pthread_once(&calibration_once, calibrate);
    return &calibration;
}

void coll_nt_calibration_skip(void)
{
    skip_requested = true;
}

size_t coll_nt_auto_threshold(const struct rt_topo_summary *topo,
                              const struct coll_nt_calibration *cal, const char **origin)
{
    size_t llc = topo->l3_bytes ? topo->l3_bytes : topo->l2_bytes ? topo->l2_bytes : 8u << 20;
    const char *why = "last-level cache";
    size_t v = llc;
    switch (cal->outcome) {
    case COLL_NT_MEASURED:
        if (cal->crossover < llc) {
            v = cal->crossover;
            why = "measured at first use";
        } else {
            why = "last-level cache, below the crossover measured at first use";
        }
        break;
    case COLL_NT_NO_CROSSOVER:
        if (COLL_NT_UNCROSSED_CAP < llc) {
            v = COLL_NT_UNCROSSED_CAP;
            why = "no crossover up to 16M measured at first use; capped at 64M";
        } else {
            why = "last-level cache; no crossover up to 16M measured at first use";
        }
        break;
    case COLL_NT_FAILED:
        why = "last-level cache; the calibration could not run";
        break;
    case COLL_NT_SKIPPED:
        why = "last-level cache; not measured";
        break;
    }
    if (origin)
        *origin = why;
    return v;
}
