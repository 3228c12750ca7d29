/* SPDX-License-Identifier: MIT */
/*
 * arbench's output: the header, the nccl-tests style table, CSV, JSON and the
 * gnuplot chart, and the CSV reader through which arbench takes the results of a
 * child sweep (arbench-mpi under mpirun, or arbench ranks under arrun).
 *
 * CSV of one sweep (--csv-stdout, and --csv without --compare), one row per size:
 *   size,count,type,op,nranks,iters,time_us,p90_us,algbw_gbs,busbw_gbs,wrong,
 *   coll,ceiling_gbs,ceiling_frac,mean_us
 * With --compare, --csv writes
 *   size,count,type,op,nranks,arcomm_iters,arcomm_time_us,arcomm_p90_us,
 *   arcomm_algbw_gbs,arcomm_busbw_gbs,arcomm_wrong,peer,peer_iters,peer_time_us,
 *   peer_p90_us,peer_algbw_gbs,peer_busbw_gbs,peer_wrong,ratio,
 *   coll,ceiling_gbs,arcomm_ceiling_frac,peer_ceiling_frac,arcomm_mean_us,peer_mean_us
 * (the columns after wrong / ratio came with the collectives beyond allreduce, the
 * means after them later: the older ones keep their names and places; a peer's CSV
 * without the mean reads as 0 there).  time_us is the median over calls of the
 * slowest rank's time, mean_us the mean of the same series.  size is nccl-tests' size of the
 * collective (bench_sizes: bytes per rank for allreduce, broadcast, reduce); count = size / element
 * size; op is "none" for the collectives that do not reduce; wrong is -1 without
 * --check; ratio = peer_time_us / arcomm_time_us (> 1: arcomm faster); ceiling_gbs is
 * the memcpy ceiling (bench_ceiling; 0 when not measured) and ceiling_frac =
 * bench_min_traffic / time / ceiling_gbs (0 when not measured).  With --coll all the
 * rows of every collective follow one header.  Lines starting with '#' are metadata
 * ("# key: value") and are skipped by CSV readers that honour comments.
 */
#ifndef ARBENCH_BENCH_REPORT_H
#define ARBENCH_BENCH_REPORT_H

#include "bench_common.h"

#include <stdio.h>

#define BENCH_MAX_SIZES 128
#define BENCH_MAX_ROWS  (BENCH_MAX_SIZES * BENCH_NCOLLS)

/* Where and how the numbers were taken. */
struct bench_meta {
    char host[256];
    char cpu[256];
    long nproc;
    char date[64];
    char command[4096];
    char transport[64]; /* comm_transport_name, or the peer's name */
    const char *mode;   /* "threads", "procs" */
};

/* One size of a report: arcomm, and the peer when comparing. */
struct bench_row {
    struct bench_result a;
    struct bench_result p;     /* valid when the report has a peer */
    enum bench_coll_kind coll; /* the collective of this row */
};

struct bench_report {
    const struct bench_opts *opts; /* opts->coll: the table's collective, or "all" */
    struct bench_meta meta;
    const char *name;      /* what is measured: NULL is "arcomm" */
    const char *peer_name; /* NULL: no comparison */
    double ceiling_gbs;    /* the memcpy ceiling (bench_ceiling), 0: not measured */
    size_t ceiling_bytes;  /* its buffer size per rank */
    double floor_us;       /* the exchange floor (arbench's threads), 0: not measured */
    struct bench_row rows[BENCH_MAX_ROWS];
    size_t nrows;
};

/* traffic / time / ceiling of one result (0 without a ceiling). */
double bench_ceiling_frac(const struct bench_report *rep, enum bench_coll_kind coll,
                          const struct bench_result *r);
/* The ceiling line above the table. */
void bench_print_ceiling(FILE *f, const struct bench_report *rep);

void bench_meta_fill(struct bench_meta *m, int argc, char **argv);
void bench_print_header(FILE *f, const struct bench_report *rep);
void bench_print_row(FILE *f, const struct bench_report *rep, const struct bench_row *row);
void bench_print_table(FILE *f, const struct bench_report *rep);

/* One sweep's CSV (rep's rows, rep->opts->coll), with the metadata lines the reader
 * below takes back. */
void bench_csv_sweep(FILE *f, const struct bench_report *rep);
/*
 * Reads what bench_csv_sweep wrote (other lines are ignored).  Returns the number of
 * rows, or -1 when none was found; copies "# transport:" into transport if non-NULL.
 */
int bench_csv_read(FILE *f, struct bench_result *res, size_t max, char *transport,
                   size_t transport_len);

int bench_write_csv(const char *path, const struct bench_report *rep);
int bench_write_json(const char *path, const struct bench_report *rep);
/* Returns 0 also when gnuplot is missing (after saying so): the numbers matter more. */
int bench_plot(const char *path, const struct bench_report *rep);

/* The median over rounds of one size (time, p90), bandwidths from the median time. */
void bench_result_median(const struct bench_result *rounds, int nrounds, enum bench_coll_kind coll,
                         int nranks, struct bench_result *out);

/* "\r"-overwritten progress on stderr, only when stderr is a terminal. */
void bench_progress(const char *what, size_t done, size_t total, size_t bytes);
void bench_progress_end(void);

/* True when prog is an executable file in one of PATH's directories. */
bool bench_in_path(const char *prog);

#endif /* ARBENCH_BENCH_REPORT_H */
