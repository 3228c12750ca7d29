/* SPDX-License-Identifier: MIT */
/*
 * arbench's output formats; see bench_report.h for the CSV columns and the JSON
 * schema in bench_write_json.
 */
#include "bench_report.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *const ratio_doc =
    "ratio = peer time / arcomm time (medians): > 1 means arcomm is faster";

void bench_meta_fill(struct bench_meta *m, int argc, char **argv)
{
    char host[256] = "?";

    memset(m, 0, sizeof(*m));
    if (gethostname(host, sizeof(host) - 1))
        strcpy(host, "?");
    snprintf(m->host, sizeof(m->host), "%s", host);
    strcpy(m->cpu, "?");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof(line), f)) {
            char *colon = strchr(line, ':');
            if (strncmp(line, "model name", 10) == 0 && colon) {
                colon += 1 + (colon[1] == ' ');
                colon[strcspn(colon, "\n")] = '\0';
                snprintf(m->cpu, sizeof(m->cpu), "%s", colon);
                break;
            }
        }
        fclose(f);
    }
    m->nproc = sysconf(_SC_NPROCESSORS_ONLN);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(m->date, sizeof(m->date), "%Y-%m-%d %H:%M:%S %z", &tm);
    size_t used = 0;
    for (int i = 0; i < argc && used < sizeof(m->command); i++) {
        bool quote = argv[i][0] == '\0' || strpbrk(argv[i], " \t\"'") != NULL;
        used += (size_t)snprintf(m->command + used, sizeof(m->command) - used,
                                 quote ? "%s'%s'" : "%s%s", i ? " " : "", argv[i]);
    }
    strcpy(m->transport, "?");
}

static bool has_peer(const struct bench_report *rep)
{
    return rep->peer_name != NULL;
}

/* The op column: the collectives that do not reduce have none (as nccl-tests says). */
static const char *op_of(const struct bench_opts *o, enum bench_coll_kind coll)
{
    return bench_coll_reduces(coll) ? bench_op_name(o->op) : "none";
}

static const char *busbw_def(enum bench_coll_kind coll)
{
    switch (coll) {
    case BENCH_ALLREDUCE:
        return "algbw * 2(n-1)/n, 0 when n = 1";
    case BENCH_BROADCAST:
    case BENCH_REDUCE:
        return "algbw * 1";
    case BENCH_COLL_ALL:
        return "algbw * 2(n-1)/n (allreduce), (n-1)/n (reduce_scatter, allgather, alltoall), "
               "1 (broadcast, reduce)";
    default:
        return "algbw * (n-1)/n, 0 when n = 1";
    }
}

static const char *size_def(enum bench_coll_kind coll)
{
    switch (coll) {
    case BENCH_ALLGATHER:
        return "the receive buffer, n * sendcount * element size";
    case BENCH_REDUCE_SCATTER:
        return "the send buffer, n * recvcount * element size";
    case BENCH_ALLTOALL:
        return "each rank's send buffer, n * count * element size";
    case BENCH_COLL_ALL:
        return "nccl-tests' size of each collective";
    default:
        return "count * element size, per rank";
    }
}

static const char *traffic_def(enum bench_coll_kind coll, bool inplace)
{
    switch (coll) {
    case BENCH_ALLREDUCE:
        return "2 n size";
    case BENCH_ALLTOALL:
        return "2 n size";
    case BENCH_BROADCAST:
    case BENCH_ALLGATHER:
        return inplace ? "n size" : "(n + 1) size";
    case BENCH_REDUCE:
    case BENCH_REDUCE_SCATTER:
        return "(n + 1) size";
    default:
        return "see arbench --help";
    }
}

double bench_ceiling_frac(const struct bench_report *rep, enum bench_coll_kind coll,
                          const struct bench_result *r)
{
    if (!(rep->ceiling_gbs > 0) || !(r->time_us > 0))
        return 0.0;
    double traffic = bench_min_traffic(coll, rep->opts->nranks, rep->opts->inplace, r->bytes);
    return traffic / r->time_us * 1e-3 / rep->ceiling_gbs;
}

void bench_print_ceiling(FILE *f, const struct bench_report *rep)
{
    if (rep->ceiling_gbs > 0)
        fprintf(f,
                "# ceiling: memcpy %.2f GB/s (%d ranks copying at once, one thread each, %zu B "
                "each, %s as the ranks; read + write counted; median of 5 batches)\n",
                rep->ceiling_gbs, rep->opts->nranks, rep->ceiling_bytes,
                rep->opts->no_bind ? "unbound" : "pinned");
    else
        fprintf(f, "# ceiling: not measured (%s)\n",
                rep->opts->device != COMM_DEVICE_HOST ? "device buffers"
                                                      : "a child sweep: its launcher measures it");
    if (rep->floor_us > 0)
        fprintf(f,
                "# floor: %.3f us per round (%d threads %s as the ranks, each publishing a "
                "round number on its own cache line and waiting for all the others': the "
                "least a call every rank must enter and agree on can take; median of 41 "
                "batches)\n",
                rep->floor_us, rep->opts->nranks, rep->opts->no_bind ? "unbound" : "pinned");
}

void bench_print_header(FILE *f, const struct bench_report *rep)
{
    const struct bench_opts *o = rep->opts;
    const struct bench_meta *m = &rep->meta;

    fprintf(f, "# arbench: %s benchmark of arcomm\n", bench_coll_name(o->coll));
    fprintf(f, "# host: %s  cpu: %s  nproc: %ld\n", m->host, m->cpu, m->nproc);
    fprintf(f, "# date: %s\n", m->date);
    fprintf(f, "# command: %s\n", m->command);
    fprintf(f, "# arcomm %d.%d  transport: %s  ranks: %d (%s)  device: %s\n", ARCOMM_VERSION_MAJOR,
            ARCOMM_VERSION_MINOR, m->transport, o->nranks, m->mode, bench_device_name(o->device));
    fprintf(f, "# coll: %s  dtype: %s  op: %s  %s  check: %s  iters: ", bench_coll_name(o->coll),
            bench_dtype_name(o->dtype), op_of(o, o->coll), o->inplace ? "in-place" : "out-of-place",
            o->check ? "yes" : "no");
    if (o->iters > 0)
        fprintf(f, "%d", o->iters);
    else
        fprintf(f, "auto (~0.2 s per size, 20..10000)");
    if (o->warmup >= 0)
        fprintf(f, "  warmup: %d", o->warmup);
    else
        fprintf(f, "  warmup: 10%% of iters, >= 5");
    fprintf(f, "  rounds: %d%s  binding: %s  buffers: %s\n", o->rounds,
            o->rounds > 1 ? " (median reported)" : "", o->no_bind ? "none" : "one core per rank",
            o->mem_alloc     ? "comm_mem_alloc"
            : o->shared_heap ? "private (posix_memalign) in the shared heap (libarcomm_heap.so)"
                             : "private (posix_memalign)");
    fprintf(f,
            "# time: each call timed on every rank (CLOCK_MONOTONIC), %s; per call the "
            "slowest rank; median and p90 over calls\n",
            o->fresh ? "each after the rank wrote its input and read its output (--fresh, untimed)"
                     : "back to back");
    fprintf(f, "# size: %s; algbw = size / time; busbw = %s (nccl-tests)\n", size_def(o->coll),
            busbw_def(o->coll));
    bench_print_ceiling(f, rep);
    if (rep->ceiling_gbs > 0)
        fprintf(f,
                "# ceil = least memory traffic / time / ceiling; traffic = %s (every input "
                "byte read once, every output byte written once; arbench --help)\n",
                traffic_def(o->coll, o->inplace));
    if (o->coll == BENCH_BROADCAST || o->coll == BENCH_REDUCE)
        fprintf(f, "# root: %d\n", BENCH_ROOT);
    if (o->check)
        fprintf(f, "# #wrong: elements outside tolerance of a float64 reference, summed over "
                   "ranks, +1 if ranks differ bitwise\n");
    if (has_peer(rep))
        fprintf(f, "# peer: %s  %s\n", rep->peer_name, ratio_doc);
    fprintf(f, "#\n");
    fprintf(f, "# %10s %12s %6s %6s  %10s %10s %8s %8s %5s %7s", "size", "count", "type", "redop",
            "time(us)", "p90(us)", "algbw", "busbw", "ceil", "#wrong");
    if (has_peer(rep))
        fprintf(f, " | %10s %10s %8s %8s %5s %7s | %6s", "time(us)", "p90(us)", "algbw", "busbw",
                "ceil", "#wrong", "ratio");
    fprintf(f, "\n# %10s %12s %6s %6s  %10s %10s %8s %8s %5s %7s", "(B)", "(elems)", "", "",
            rep->name ? rep->name : "arcomm", "", "(GB/s)", "(GB/s)", "", "");
    if (has_peer(rep))
        fprintf(f, " | %10s %10s %8s %8s %5s %7s | %6s", rep->peer_name, "", "(GB/s)", "(GB/s)", "",
                "", "");
    fprintf(f, "\n");
}

static void print_cols(FILE *f, const struct bench_report *rep, const struct bench_row *row,
                       const struct bench_result *r)
{
    char wrong[32], ceil[16];
    if (r->wrong < 0)
        strcpy(wrong, "N/A");
    else
        snprintf(wrong, sizeof(wrong), "%lld", (long long)r->wrong);
    if (rep->ceiling_gbs > 0)
        snprintf(ceil, sizeof(ceil), "%.2f", bench_ceiling_frac(rep, row->coll, r));
    else
        strcpy(ceil, "-");
    fprintf(f, "%10.2f %10.2f %8.3f %8.3f %5s %7s", r->time_us, r->p90_us, r->algbw, r->busbw, ceil,
            wrong);
}

void bench_print_row(FILE *f, const struct bench_report *rep, const struct bench_row *row)
{
    const struct bench_opts *o = rep->opts;

    fprintf(f, "  %10zu %12zu %6s %6s  ", row->a.bytes, row->a.count, bench_dtype_name(o->dtype),
            op_of(o, row->coll));
    print_cols(f, rep, row, &row->a);
    if (has_peer(rep)) {
        fprintf(f, " | ");
        print_cols(f, rep, row, &row->p);
        fprintf(f, " | %6.2f", row->a.time_us > 0 ? row->p.time_us / row->a.time_us : 0.0);
    }
    fprintf(f, "\n");
    fflush(f);
}

void bench_print_table(FILE *f, const struct bench_report *rep)
{
    bench_print_header(f, rep);
    for (size_t i = 0; i < rep->nrows; i++)
        bench_print_row(f, rep, &rep->rows[i]);
}

/* ---- CSV ---- */

static const char *const sweep_cols =
    "size,count,type,op,nranks,iters,time_us,p90_us,algbw_gbs,busbw_gbs,wrong";
static const char *const sweep_cols_new = ",coll,ceiling_gbs,ceiling_frac,mean_us";

static void csv_result(FILE *f, const struct bench_result *r)
{
    fprintf(f, "%d,%.4f,%.4f,%.6f,%.6f,%lld", r->iters, r->time_us, r->p90_us, r->algbw, r->busbw,
            (long long)r->wrong);
}

static void csv_sweep_rows(FILE *f, const struct bench_report *rep)
{
    const struct bench_opts *o = rep->opts;
    for (size_t i = 0; i < rep->nrows; i++) {
        const struct bench_row *row = &rep->rows[i];
        fprintf(f, "%zu,%zu,%s,%s,%d,", row->a.bytes, row->a.count, bench_dtype_name(o->dtype),
                op_of(o, row->coll), o->nranks);
        csv_result(f, &row->a);
        fprintf(f, ",%s,%.4f,%.6g,%.4f\n", bench_coll_name(row->coll), rep->ceiling_gbs,
                bench_ceiling_frac(rep, row->coll, &row->a), row->a.mean_us);
    }
}

void bench_csv_sweep(FILE *f, const struct bench_report *rep)
{
    const struct bench_meta *m = &rep->meta;
    fprintf(f, "# transport: %s\n# host: %s\n# date: %s\n%s%s\n", m->transport, m->host, m->date,
            sweep_cols, sweep_cols_new);
    csv_sweep_rows(f, rep);
    fflush(f);
}

int bench_csv_read(FILE *f, struct bench_result *res, size_t max, char *transport,
                   size_t transport_len)
{
    char line[1024];
    size_t n = 0;
    bool header = false;

    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "# transport: ", 13) == 0 && transport) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(transport, transport_len, "%s", line + 13);
            continue;
        }
        if (strncmp(line, sweep_cols, strlen(sweep_cols)) == 0) {
            header = true;
            continue;
        }
        if (!header || n >= max)
            continue;
        struct bench_result *r = &res[n];
        char type[16], op[16];
        int nranks;
        long long wrong;
        /* Anything else on stdout (a library's chatter) simply does not parse. */
        char coll[32];
        double ceiling, frac;
        int got =
            sscanf(line, "%zu,%zu,%15[^,],%15[^,],%d,%d,%lf,%lf,%lf,%lf,%lld,%31[^,],%lf,%lf,%lf",
                   &r->bytes, &r->count, type, op, &nranks, &r->iters, &r->time_us, &r->p90_us,
                   &r->algbw, &r->busbw, &wrong, coll, &ceiling, &frac, &r->mean_us);
        if (got >= 11) {
            if (got < 15)
                r->mean_us = 0; /* an older writer's row */
            r->wrong = wrong;
            n++;
        }
    }
    return n ? (int)n : -1;
}

int bench_write_csv(const char *path, const struct bench_report *rep)
{
    const struct bench_opts *o = rep->opts;
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return -1;
    }
    if (!has_peer(rep)) {
        bench_csv_sweep(f, rep);
    } else {
        fprintf(f, "# transport: %s\n# host: %s\n# date: %s\n# %s\n", rep->meta.transport,
                rep->meta.host, rep->meta.date, ratio_doc);
        fprintf(f, "size,count,type,op,nranks,arcomm_iters,arcomm_time_us,arcomm_p90_us,"
                   "arcomm_algbw_gbs,arcomm_busbw_gbs,arcomm_wrong,peer,peer_iters,"
                   "peer_time_us,peer_p90_us,peer_algbw_gbs,peer_busbw_gbs,peer_wrong,ratio,"
                   "coll,ceiling_gbs,arcomm_ceiling_frac,peer_ceiling_frac,arcomm_mean_us,"
                   "peer_mean_us\n");
        for (size_t i = 0; i < rep->nrows; i++) {
            const struct bench_row *row = &rep->rows[i];
            fprintf(f, "%zu,%zu,%s,%s,%d,", row->a.bytes, row->a.count, bench_dtype_name(o->dtype),
                    op_of(o, row->coll), o->nranks);
            csv_result(f, &row->a);
            fprintf(f, ",%s,", rep->peer_name);
            csv_result(f, &row->p);
            fprintf(f, ",%.4f,%s,%.4f,%.6g,%.6g,%.4f,%.4f\n",
                    row->a.time_us > 0 ? row->p.time_us / row->a.time_us : 0.0,
                    bench_coll_name(row->coll), rep->ceiling_gbs,
                    bench_ceiling_frac(rep, row->coll, &row->a),
                    bench_ceiling_frac(rep, row->coll, &row->p), row->a.mean_us, row->p.mean_us);
        }
    }
    if (fclose(f)) {
        perror(path);
        return -1;
    }
    return 0;
}

/* ---- JSON ---- */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void json_result(FILE *f, const struct bench_report *rep, const struct bench_row *row,
                        const struct bench_result *r)
{
    fprintf(f,
            "{\"iters\": %d, \"time_us\": %.4f, \"p90_us\": %.4f, \"mean_us\": %.4f, "
            "\"algbw_gbs\": %.6f, \"busbw_gbs\": %.6f, \"wrong\": ",
            r->iters, r->time_us, r->p90_us, r->mean_us, r->algbw, r->busbw);
    if (r->wrong < 0)
        fprintf(f, "null");
    else
        fprintf(f, "%lld", (long long)r->wrong);
    if (rep->ceiling_gbs > 0)
        fprintf(f, ", \"ceiling_frac\": %.6g}", bench_ceiling_frac(rep, row->coll, r));
    else
        fprintf(f, ", \"ceiling_frac\": null}");
}

/*
 * Schema: { "tool": "arbench", "machine": {"host", "cpu", "nproc"}, "date", "command",
 *   "arcomm_version", "transport", "mode", "nranks", "device", "dtype", "op", "inplace",
 *   "buffers": "private" | "comm_mem_alloc" | "shared-heap",
 *   "fresh": true | false (--fresh: inputs written and outputs read between calls),
 *   "check", "rounds", "time_stat", "busbw_def", "peer": null | "mpi" | "nccl",
 *   "ratio_def", "coll": "allreduce" | ... | "all", "size_def", "root",
 *   "ceiling_gbs": number | null, "floor_us": number | null, "floor_def", "ceiling_bytes",
 *   "ceiling_def", "traffic_def",
 *   "rows": [ { "size", "count", "coll", "op", "arcomm": {iters, time_us, p90_us, mean_us,
 *   algbw_gbs, busbw_gbs, wrong (null without --check), ceiling_frac (null without a
 *   ceiling)}, "peer": {...} | null, "ratio": number | null } ] }
 * "op" of a row is "none" for the collectives that do not reduce.
 */
int bench_write_json(const char *path, const struct bench_report *rep)
{
    const struct bench_opts *o = rep->opts;
    const struct bench_meta *m = &rep->meta;
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return -1;
    }
    fprintf(f, "{\n  \"tool\": \"arbench\",\n  \"machine\": {\"host\": ");
    json_str(f, m->host);
    fprintf(f, ", \"cpu\": ");
    json_str(f, m->cpu);
    fprintf(f, ", \"nproc\": %ld},\n  \"date\": ", m->nproc);
    json_str(f, m->date);
    fprintf(f, ",\n  \"command\": ");
    json_str(f, m->command);
    fprintf(f, ",\n  \"arcomm_version\": \"%d.%d\",\n  \"transport\": ", ARCOMM_VERSION_MAJOR,
            ARCOMM_VERSION_MINOR);
    json_str(f, m->transport);
    fprintf(f, ",\n  \"mode\": \"%s\",\n  \"nranks\": %d,\n  \"device\": \"%s\",\n", m->mode,
            o->nranks, bench_device_name(o->device));
    fprintf(f, "  \"dtype\": \"%s\",\n  \"op\": \"%s\",\n  \"inplace\": %s,\n  \"check\": %s,\n",
            bench_dtype_name(o->dtype), bench_op_name(o->op), o->inplace ? "true" : "false",
            o->check ? "true" : "false");
    fprintf(f, "  \"buffers\": \"%s\",\n",
            o->mem_alloc     ? "comm_mem_alloc"
            : o->shared_heap ? "shared-heap"
                             : "private");
    fprintf(f, "  \"fresh\": %s,\n", o->fresh ? "true" : "false");
    fprintf(f,
            "  \"rounds\": %d,\n  \"time_stat\": \"per call the slowest rank; median and "
            "p90 over calls; median over rounds\",\n",
            o->rounds);
    fprintf(f, "  \"busbw_def\": \"%s\",\n  \"peer\": ", busbw_def(o->coll));
    if (has_peer(rep))
        fprintf(f, "\"%s\",\n  \"ratio_def\": \"%s\",\n", rep->peer_name, ratio_doc);
    else
        fprintf(f, "null,\n  \"ratio_def\": null,\n");
    fprintf(f, "  \"coll\": \"%s\",\n  \"size_def\": \"%s\",\n  \"root\": %d,\n",
            bench_coll_name(o->coll), size_def(o->coll), BENCH_ROOT);
    if (rep->ceiling_gbs > 0)
        fprintf(f, "  \"ceiling_gbs\": %.6f,\n", rep->ceiling_gbs);
    else
        fprintf(f, "  \"ceiling_gbs\": null,\n");
    if (rep->floor_us > 0)
        fprintf(f, "  \"floor_us\": %.6f,\n", rep->floor_us);
    else
        fprintf(f, "  \"floor_us\": null,\n");
    fprintf(f, "  \"floor_def\": \"threads pinned as the ranks: every one publishes a round "
               "number on its own cache line and waits for all the others'; microseconds per "
               "round, median of 41 batches\",\n");
    fprintf(f,
            "  \"ceiling_bytes\": %zu,\n  \"ceiling_def\": \"memcpy with one thread per rank, "
            "all at once, each its own buffers; read + write bytes / time, summed over ranks; "
            "median of 5 batches\",\n",
            rep->ceiling_bytes);
    fprintf(f, "  \"traffic_def\": \"ceiling_frac = least traffic / time / ceiling_gbs; "
               "traffic over all ranks (S = size, n = ranks, in place in brackets): allreduce "
               "2nS, broadcast (n+1)S [nS], reduce (n+1)S, allgather (n+1)S [nS], "
               "reduce_scatter (n+1)S, alltoall 2nS\",\n");
    fprintf(f, "  \"rows\": [");
    for (size_t i = 0; i < rep->nrows; i++) {
        const struct bench_row *row = &rep->rows[i];
        fprintf(f,
                "%s\n    {\"size\": %zu, \"count\": %zu, \"coll\": \"%s\", \"op\": \"%s\", "
                "\"arcomm\": ",
                i ? "," : "", row->a.bytes, row->a.count, bench_coll_name(row->coll),
                op_of(o, row->coll));
        json_result(f, rep, row, &row->a);
        fprintf(f, ", \"peer\": ");
        if (has_peer(rep)) {
            json_result(f, rep, row, &row->p);
            fprintf(f, ", \"ratio\": %.4f}",
                    row->a.time_us > 0 ? row->p.time_us / row->a.time_us : 0.0);
        } else {
            fprintf(f, "null, \"ratio\": null}");
        }
    }
    fprintf(f, "\n  ]\n}\n");
    if (fclose(f)) {
        perror(path);
        return -1;
    }
    return 0;
}

/* ---- gnuplot ---- */

bool bench_in_path(const char *prog)
{
    const char *path = getenv("PATH");
    char buf[4096];
    while (path && *path) {
        size_t len = strcspn(path, ":");
        snprintf(buf, sizeof(buf), "%.*s/%s", (int)len, len ? path : ".", prog);
        if (access(buf, X_OK) == 0)
            return true;
        path += len + (path[len] == ':');
    }
    return false;
}

/* A gnuplot single-quoted string: a quote is written twice. */
static void gp_str(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

int bench_plot(const char *path, const struct bench_report *rep)
{
    const struct bench_opts *o = rep->opts;
    if (!bench_in_path("gnuplot")) {
        fprintf(stderr,
                "arbench: gnuplot not found in PATH, not writing the plot %s "
                "(install gnuplot-nox)\n",
                path);
        return 0;
    }
    /* gnuplot writes the PNG to its stdout when it cannot open the file: never to ours. */
    FILE *gp = popen("gnuplot >/dev/null", "w");
    if (!gp) {
        perror("arbench: gnuplot");
        return -1;
    }
    fprintf(gp, "set terminal pngcairo size 1000,600 noenhanced\nset output ");
    gp_str(gp, path);
    fprintf(gp, "\nset title '%s %s %s, %d ranks (%s), %s: %s'\n", bench_coll_name(o->coll),
            bench_dtype_name(o->dtype), bench_op_name(o->op), o->nranks, rep->meta.mode,
            rep->meta.host, o->inplace ? "in-place" : "out-of-place");
    fprintf(gp, "set logscale x 2\nset format x '%%.0b%%BB'\nset xlabel 'size (nccl-tests)'\n"
                "set ylabel 'busbw (GB/s), median time'\nset grid\nset key top left\n");
    /* One data block per collective in the report (several with --coll all). */
    bool seen[BENCH_NCOLLS] = {false};
    int nblocks = 0;
    enum bench_coll_kind order[BENCH_NCOLLS];
    for (size_t i = 0; i < rep->nrows; i++) {
        enum bench_coll_kind c = rep->rows[i].coll;
        if ((unsigned)c < BENCH_NCOLLS && !seen[c]) {
            seen[c] = true;
            order[nblocks++] = c;
        }
    }
    for (int b = 0; b < nblocks; b++) {
        fprintf(gp, "$d%d << EOD\n", b);
        for (size_t i = 0; i < rep->nrows; i++)
            if (rep->rows[i].coll == order[b])
                fprintf(gp, "%zu %.6f %.6f\n", rep->rows[i].a.bytes, rep->rows[i].a.busbw,
                        has_peer(rep) ? rep->rows[i].p.busbw : 0.0);
        fprintf(gp, "EOD\n");
    }
    fprintf(gp, "plot ");
    for (int b = 0; b < nblocks; b++) {
        const char *cn = bench_coll_name(order[b]);
        fprintf(gp, "%s$d%d using 1:2 with linespoints lw 2 title 'arcomm %s (%s)'", b ? ", " : "",
                b, cn, rep->meta.transport);
        if (has_peer(rep))
            fprintf(gp, ", $d%d using 1:3 with linespoints lw 2 dt 2 title '%s %s'", b,
                    rep->peer_name, cn);
    }
    fprintf(gp, "\n");
    int st = pclose(gp);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "arbench: gnuplot failed writing %s\n", path);
        return -1;
    }
    return 0;
}

/* ---- rounds, progress ---- */

void bench_result_median(const struct bench_result *rounds, int nrounds, enum bench_coll_kind coll,
                         int nranks, struct bench_result *out)
{
    double t[100], p[100], m[100];
    *out = rounds[0];
    for (int i = 0; i < nrounds; i++) {
        t[i] = rounds[i].time_us;
        p[i] = rounds[i].p90_us;
        m[i] = rounds[i].mean_us;
        if (rounds[i].wrong > out->wrong)
            out->wrong = rounds[i].wrong;
    }
    out->time_us = bench_median(t, (size_t)nrounds);
    out->p90_us = bench_median(p, (size_t)nrounds);
    out->mean_us = bench_median(m, (size_t)nrounds);
    out->algbw = out->time_us > 0 ? (double)out->bytes / out->time_us * 1e-3 : 0.0;
    out->busbw = bench_busbw(out->algbw, coll, nranks);
}

void bench_progress(const char *what, size_t done, size_t total, size_t bytes)
{
    if (!isatty(STDERR_FILENO))
        return;
    fprintf(stderr, "\r\033[K%s: size %zu B (%zu/%zu)", what, bytes, done + 1, total);
    fflush(stderr);
}

void bench_progress_end(void)
{
    if (isatty(STDERR_FILENO))
        fprintf(stderr, "\r\033[K");
}
