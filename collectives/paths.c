/* SPDX-License-Identifier: MIT */
/*
 * The host backend's path table: its default rows (each with the measurement that set
 * it), the ARCOMM_PATHS rows that override them, the table resolved for a communicator,
 * and the plan of a call: the first row it matches.
 *
 * ARCOMM_PATHS, as UCC's UCC_TL_*_TUNE strings: items separated by ';', each
 *
 *     COLLECTIVES:SIZES[:QUALIFIER...]:PATH
 *
 * COLLECTIVES "*" or names separated by ',' (allreduce, broadcast, reduce, allgather,
 * reduce_scatter, alltoall); SIZES bytes per rank, "LO-HI" inclusive with either side
 * left out ("1M-", "-64K"), or one size; QUALIFIER "n=LO-HI" or "n=N" (rank counts),
 * "threads" or "processes"; PATH flag, one-pass, cma or staged (a device backend's paths
 * on its communicators: paths_device.c).  Its rows come before the defaults: a call takes the
 * first row it matches.
 */
#include "paths.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KB(x) ((uint64_t)(x) << 10)
#define MB(x) ((uint64_t)(x) << 20)
#define BIT   COLL_KIND_BIT

const struct coll_path_row coll_host_path_rows[] = {
    /* Allgather of 1-4 MiB per rank between 2 process ranks: the single copy beat the flag
     * and staged paths on the mean of both states of the 2-core VM, which the other
     * collectives did not (PERFORMANCE.md, "Cross Memory Attach"); before the flag rows. */
    {.colls = BIT(COLL_ALLGATHER),
     .lo = MB(1),
     .hi = MB(4),
     .nmin = 2,
     .nmax = 2,
     .ranks = COLL_RANKS_PROCS,
     .needs = COLL_NEED_CMA | COLL_NEED_CMA_AUTO,
     .path = COLL_PATH_CMA,
     .tune = COLL_TUNE_BULK,
     .why = "PERFORMANCE.md, Cross Memory Attach: allgather 1-4M, 2 process ranks"},
    /* Flag-sized calls from 16 KiB per rank between 2 process ranks where the single copy
     * is fast: flag or CMA as rank 0 measures them (Intel VM, readv at 0.55-0.79 of
     * memcpy; PERFORMANCE.md, "single copy by measurement"). */
    {.colls = BIT(COLL_ALLREDUCE) | BIT(COLL_BROADCAST) | BIT(COLL_REDUCE) | BIT(COLL_ALLGATHER),
     .lo = KB(16),
     .hi = COLL_BOUND_FLAG,
     .staged = true,
     .nmin = 2,
     .nmax = 2,
     .ranks = COLL_RANKS_PROCS,
     .needs = COLL_NEED_CMA | COLL_NEED_CMA_FAST | COLL_NEED_CMA_AUTO,
     .path = COLL_PATH_CMA,
     .tune = COLL_TUNE_CHOICE,
     .why = "PERFORMANCE.md, single copy by measurement: flag or CMA from 16K, rank 0 times"},
    {.colls = BIT(COLL_REDUCE_SCATTER) | BIT(COLL_ALLTOALL),
     .lo = KB(32),
     .hi = COLL_BOUND_FLAG,
     .staged = true,
     .nmin = 2,
     .nmax = 2,
     .ranks = COLL_RANKS_PROCS,
     .needs = COLL_NEED_CMA | COLL_NEED_CMA_FAST | COLL_NEED_CMA_AUTO,
     .path = COLL_PATH_CMA,
     .tune = COLL_TUNE_CHOICE,
     .why = "PERFORMANCE.md, single copy by measurement: flag or CMA from 16K, rank 0 times"},
    /* Thread ranks: the one-pass path reads each peer's input once and is as fast as the
     * flag round trip from about 1 KiB on (2-core VM, PERFORMANCE.md).  The default of
     * ARCOMM_FLAG_THRESHOLD; a value set replaces it. */
    {.colls = COLL_KINDS_HOST,
     .lo = 0,
     .hi = 1024,
     .staged = true,
     .nmin = 1,
     .nmax = INT_MAX,
     .ranks = COLL_RANKS_THREADS,
     .path = COLL_PATH_FLAG,
     .why = "PERFORMANCE.md: thread ranks, one-pass as fast as flag from ~1K"},
    /* Process ranks: one copy in and n reads beat the staged path's three copies up to the
     * slot for 2 ranks; on the flag path each of the n ranks reads all n slots (n^2 x the
     * size of traffic, the staged path's grows with n), so the crossover falls as
     * 2 MiB / n^2: 512 KiB at 2 ranks (2 process ranks, slow state of the VM, 2026-12-01:
     * 1 MiB took 111-151 us on the flag path against 43-124 us; at 512 KiB flag still won,
     * 21-32 us against 26-61), 8 KiB at 16 (16 process ranks on 16 cores, 2026-12-07,
     * PERFORMANCE.md "16 ranks on 16 cores": at 16 KiB staged 12.8 us against flag 45.1,
     * at 64 KiB 30.5 against 168.7, at 4 KiB both 12.6-13.4).  Between 2 and 16 ranks the
     * curve is interpolated, not measured.  The default of ARCOMM_FLAG_THRESHOLD. */
    {.colls = COLL_KINDS_HOST,
     .lo = 0,
     .hi = KB(512),
     .hi_total = MB(2),
     .staged = true,
     .nmin = 1,
     .nmax = INT_MAX,
     .ranks = COLL_RANKS_PROCS,
     .path = COLL_PATH_FLAG,
     .why = "PERFORMANCE.md: process ranks, flag up to min(512K, 2M/n^2)"},
    /* Bulk calls of 2 process ranks where the single copy is fast: staged time / CMA time
     * broadcast 1.02-1.53, alltoall 1.01-1.71, allgather 1.0-1.7 at every size; allreduce
     * 1.08-1.56 up to 16 MiB; reduce and reduce_scatter above 1 up to 8 MiB (Intel VM,
     * four alternated rounds; PERFORMANCE.md, "single copy by measurement"). */
    {.colls = BIT(COLL_ALLREDUCE),
     .lo = KB(512),
     .hi = MB(16),
     .nmin = 2,
     .nmax = 2,
     .ranks = COLL_RANKS_PROCS,
     .needs = COLL_NEED_CMA | COLL_NEED_CMA_FAST | COLL_NEED_CMA_AUTO,
     .path = COLL_PATH_CMA,
     .tune = COLL_TUNE_BULK,
     .why = "PERFORMANCE.md, single copy by measurement: allreduce 512K-16M"},
    {.colls = BIT(COLL_REDUCE) | BIT(COLL_REDUCE_SCATTER),
     .lo = KB(512),
     .hi = MB(8),
     .nmin = 2,
     .nmax = 2,
     .ranks = COLL_RANKS_PROCS,
     .needs = COLL_NEED_CMA | COLL_NEED_CMA_FAST | COLL_NEED_CMA_AUTO,
     .path = COLL_PATH_CMA,
     .tune = COLL_TUNE_BULK,
     .why = "PERFORMANCE.md, single copy by measurement: reduce, reduce_scatter 512K-8M"},
    {.colls = BIT(COLL_BROADCAST) | BIT(COLL_ALLGATHER) | BIT(COLL_ALLTOALL),
     .lo = KB(512),
     .hi = COLL_BOUND_NONE,
     .nmin = 2,
     .nmax = 2,
     .ranks = COLL_RANKS_PROCS,
     .needs = COLL_NEED_CMA | COLL_NEED_CMA_FAST | COLL_NEED_CMA_AUTO,
     .path = COLL_PATH_CMA,
     .tune = COLL_TUNE_BULK,
     .why = "PERFORMANCE.md, single copy by measurement: broadcast, allgather, alltoall 512K-"},
    /* ARCOMM_CMA_THRESHOLD set to a size: every bulk call of process ranks from it offers
     * the single copy, untuned (lo is the knob's value). */
    {.colls = COLL_KINDS_HOST,
     .lo = 0,
     .hi = COLL_BOUND_NONE,
     .nmin = 1,
     .nmax = INT_MAX,
     .ranks = COLL_RANKS_PROCS,
     .needs = COLL_NEED_CMA | COLL_NEED_CMA_SET,
     .path = COLL_PATH_CMA,
     .why = "ARCOMM_CMA_THRESHOLD set: CMA from that size"},
    /* Everything else: one pass where every rank reaches every buffer the peers touch
     * (threads, comm_mem_alloc pools, the shared heap), staged otherwise. */
    {.colls = COLL_KINDS_HOST,
     .lo = 0,
     .hi = COLL_BOUND_NONE,
     .nmin = 1,
     .nmax = INT_MAX,
     .ranks = COLL_RANKS_ANY,
     .path = COLL_PATH_ONEPASS,
     .why = "the bulk path: one-pass where buffers allow, else staged"},
};
const size_t coll_host_path_nrows = sizeof(coll_host_path_rows) / sizeof(coll_host_path_rows[0]);
_Static_assert(sizeof(coll_host_path_rows) / sizeof(coll_host_path_rows[0]) +
                       COLL_PATHS_OVERRIDES_MAX <=
                   COLL_PATHS_MAX,
               "a resolved table holds every default row and every override");

static const char *const path_names[] = {
    [COLL_PATH_NONE] = "none",        [COLL_PATH_FLAG] = "flag",
    [COLL_PATH_ONEPASS] = "one-pass", [COLL_PATH_CMA] = "cma",
    [COLL_PATH_STAGED] = "staged",    [COLL_PATH_LOCAL] = "local",
    [COLL_PATH_KERNEL] = "kernel",    [COLL_PATH_COPY] = "copy",
    [COLL_PATH_ONESHOT] = "one-shot", [COLL_PATH_TWOSHOT] = "two-shot",
    [COLL_PATH_DIRECT] = "direct",    [COLL_PATH_SESSION] = "session",
};
_Static_assert(sizeof(path_names) / sizeof(path_names[0]) == COLL_PATH_END, "a name per path");

/* The set each path belongs to; "local" is in none: ARCOMM_PATHS never names it. */
#define SET_BIT(s) (1u << (s))
static const uint32_t path_sets[] = {
    [COLL_PATH_NONE] = 0,
    [COLL_PATH_FLAG] = SET_BIT(COLL_PATHS_HOST),
    [COLL_PATH_ONEPASS] = SET_BIT(COLL_PATHS_HOST),
    [COLL_PATH_CMA] = SET_BIT(COLL_PATHS_HOST),
    [COLL_PATH_STAGED] = SET_BIT(COLL_PATHS_HOST),
    [COLL_PATH_LOCAL] = 0,
    [COLL_PATH_KERNEL] = SET_BIT(COLL_PATHS_CUDA),
    [COLL_PATH_COPY] = SET_BIT(COLL_PATHS_CUDA),
    [COLL_PATH_ONESHOT] = SET_BIT(COLL_PATHS_CUDA_P2P),
    [COLL_PATH_TWOSHOT] = SET_BIT(COLL_PATHS_CUDA_P2P),
    [COLL_PATH_DIRECT] = SET_BIT(COLL_PATHS_CUDA_P2P),
    [COLL_PATH_SESSION] = SET_BIT(COLL_PATHS_HEXAGON),
};
_Static_assert(sizeof(path_sets) / sizeof(path_sets[0]) == COLL_PATH_END, "a set per path");

static const char *const set_names[] = {
    [COLL_PATHS_HOST] = "host (shm)",
    [COLL_PATHS_CUDA] = "cuda",
    [COLL_PATHS_CUDA_P2P] = "cuda-p2p",
    [COLL_PATHS_HEXAGON] = "hexagon",
};
static const char *const set_paths[] = {
    [COLL_PATHS_HOST] = "flag, one-pass, cma or staged",
    [COLL_PATHS_CUDA] = "kernel or copy",
    [COLL_PATHS_CUDA_P2P] = "one-shot, two-shot or direct",
    [COLL_PATHS_HEXAGON] = "session",
};
_Static_assert(sizeof(set_names) / sizeof(set_names[0]) == COLL_PATHS_SET_END &&
                   sizeof(set_paths) / sizeof(set_paths[0]) == COLL_PATHS_SET_END,
               "a name and the paths of every set");

const char *coll_path_name(enum coll_path p)
{
    return p < COLL_PATH_END ? path_names[p] : "?";
}

bool coll_path_in_set(enum coll_path p, enum coll_paths_set set)
{
    return p < COLL_PATH_END && set < COLL_PATHS_SET_END && (path_sets[p] & SET_BIT(set)) != 0;
}

const char *coll_paths_set_name(enum coll_paths_set set)
{
    return set < COLL_PATHS_SET_END ? set_names[set] : "?";
}

const char *coll_paths_set_paths(enum coll_paths_set set)
{
    return set < COLL_PATHS_SET_END ? set_paths[set] : "?";
}

const char *coll_ranks_name(enum coll_ranks r)
{
    return r == COLL_RANKS_THREADS ? "threads" : r == COLL_RANKS_PROCS ? "processes" : "any";
}

/* --- ARCOMM_PATHS --- */

#define PATHS_FORMS                                                                                \
    "COLLECTIVES:SIZES[:n=LO-HI][:threads|processes]:PATH, items separated by ';' (COLLECTIVES "   \
    "'*' or names joined by ','; SIZES such as 0-64K, 1M- or 4K; PATH flag, one-pass, cma or "     \
    "staged), e.g. allreduce:0-64K:flag;broadcast:1M-:cma"

struct parse_ctx {
    char *err;
    size_t errlen;
    int item;
    const char *text;        /* the item, for messages */
    enum coll_paths_set set; /* the backend whose paths an item may name */
};

static comm_status_t bad(struct parse_ctx *p, const char *what, const char *tok, const char *fix)
{
    snprintf(p->err, p->errlen, "ARCOMM_PATHS item %d \"%s\": %s \"%s\": %s", p->item, p->text,
             what, tok, fix);
    return COMM_ERR_INVALID;
}

static bool parse_bytes(const char *s, uint64_t *out)
{
    size_t v;
    if (*s == '\0' || !isdigit((unsigned char)*s) || !rt_parse_size(s, &v) || v >= RT_SIZE_AUTO)
        return false;
    *out = v;
    return true;
}

/* Strips blanks at both ends, in place. */
static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

static comm_status_t parse_colls(struct parse_ctx *p, char *tok, uint32_t *out)
{
    if (strcmp(tok, "*") == 0) {
        *out = COLL_KINDS_HOST;
        return COMM_OK;
    }
    uint32_t m = 0;
    for (char *save = NULL, *name = strtok_r(tok, ",", &save); name != NULL;
         name = strtok_r(NULL, ",", &save)) {
        name = trim(name);
        int k = COLL_ALLREDUCE;
        for (; k <= COLL_ALLTOALL; k++)
            if (strcmp(name, coll_kind_name((enum coll_kind)k)) == 0)
                break;
        if (k > COLL_ALLTOALL)
            return bad(p, "unknown collective", name,
                       "use *, or allreduce, broadcast, reduce, allgather, reduce_scatter, "
                       "alltoall joined by ','");
        m |= BIT(k);
    }
    if (m == 0)
        return bad(p, "no collective in", tok, "name one, or * for every collective");
    *out = m;
    return COMM_OK;
}

/* "LO-HI", "LO-", "-HI" or "N" into [lo, hi]. */
static bool parse_range(const char *tok, uint64_t *lo, uint64_t *hi,
                        bool (*num)(const char *, uint64_t *), uint64_t none)
{
    const char *dash = strchr(tok, '-');
    char a[64], b[64];
    if (strlen(tok) >= sizeof(a))
        return false;
    if (dash == NULL) {
        if (!num(tok, lo))
            return false;
        *hi = *lo;
        return true;
    }
    snprintf(a, sizeof(a), "%.*s", (int)(dash - tok), tok);
    snprintf(b, sizeof(b), "%s", dash + 1);
    *lo = 0;
    *hi = none;
    if (a[0] != '\0' && !num(a, lo))
        return false;
    if (b[0] != '\0' && !num(b, hi))
        return false;
    return *lo <= *hi;
}

static bool parse_count(const char *s, uint64_t *out)
{
    char *end;
    if (!isdigit((unsigned char)*s))
        return false;
    unsigned long v = strtoul(s, &end, 10);
    if (*end != '\0' || v < 1 || v > (unsigned long)RT_MAX_RANKS)
        return false;
    *out = v;
    return true;
}

static comm_status_t parse_item(struct parse_ctx *p, char *item, struct coll_path_row *r)
{
    char *field[8];
    int nf = 0;
    for (char *s = item;; s++) {
        char *colon = strchr(s, ':');
        if (nf == 8)
            return bad(p, "too many fields in", item, PATHS_FORMS);
        if (colon != NULL)
            *colon = '\0';
        field[nf++] = trim(s);
        if (colon == NULL)
            break;
        s = colon;
    }
    if (nf < 3)
        return bad(p, "too few fields in", p->text,
                   "an item is COLLECTIVES:SIZES:PATH at least, e.g. allreduce:0-64K:flag");
    memset(r, 0, sizeof(*r));
    r->item = p->item;
    r->nmin = 1;
    r->nmax = INT_MAX;
    comm_status_t st = parse_colls(p, field[0], &r->colls);
    if (st != COMM_OK)
        return st;
    if (!parse_range(field[1], &r->lo, &r->hi, parse_bytes, COLL_BOUND_NONE))
        return bad(p, "bad sizes", field[1],
                   "give bytes per rank as LO-HI, LO-, -HI or one size (0-64K, 1M-, 4096), LO "
                   "at most HI");
    for (int i = 2; i < nf - 1; i++) {
        const char *q = field[i];
        if (strcmp(q, "threads") == 0) {
            r->ranks = COLL_RANKS_THREADS;
        } else if (strcmp(q, "processes") == 0) {
            r->ranks = COLL_RANKS_PROCS;
        } else if (strncmp(q, "n=", 2) == 0) {
            uint64_t lo, hi;
            if (!parse_range(q + 2, &lo, &hi, parse_count, RT_MAX_RANKS))
                return bad(p, "bad rank counts", q, "give n=LO-HI, n=LO- or n=N, from 1 up");
            r->nmin = (int)lo;
            r->nmax = hi >= RT_MAX_RANKS ? INT_MAX : (int)hi;
        } else {
            return bad(p, "unknown qualifier", q, "use n=LO-HI, threads or processes");
        }
    }
    const char *path = field[nf - 1];
    for (int k = COLL_PATH_FLAG; k < COLL_PATH_END; k++)
        if (strcmp(path, path_names[k]) == 0)
            r->path = (enum coll_path)k;
    uint32_t sets = path_sets[r->path];
    char fix[96];
    snprintf(fix, sizeof(fix), "end the item with %s", set_paths[p->set]);
    if (r->path == COLL_PATH_NONE || sets == 0)
        return bad(p, "unknown path", path, fix);
    if (!(sets & SET_BIT(p->set))) {
        int other = COLL_PATHS_HOST;
        while (!(sets & SET_BIT(other)))
            other++;
        snprintf(p->err, p->errlen,
                 "ARCOMM_PATHS item %d \"%s\": \"%s\" is a path of the %s backend, not of this "
                 "%s communicator: %s (ARCOMM_PATHS applies to every communicator of the "
                 "process)",
                 p->item, p->text, path, set_names[other], set_names[p->set], fix);
        return COMM_ERR_INVALID;
    }
    if (r->path == COLL_PATH_CMA) {
        r->needs = COLL_NEED_CMA;
        if (r->ranks == COLL_RANKS_THREADS)
            return bad(p, "thread ranks have no path", path,
                       "the single copy is for process ranks: drop threads, or pick another path");
    }
    return COMM_OK;
}

comm_status_t coll_paths_parse(const char *text, struct coll_paths_overrides *out, char *err,
                               size_t errlen)
{
    return coll_paths_parse_for(COLL_PATHS_HOST, text, out, err, errlen);
}

comm_status_t coll_paths_parse_for(enum coll_paths_set set, const char *text,
                                   struct coll_paths_overrides *out, char *err, size_t errlen)
{
    out->n = 0;
    if (text == NULL || text[0] == '\0')
        return COMM_OK;
    char buf[RT_KNOB_STR_MAX];
    if (strlen(text) >= sizeof(buf)) {
        snprintf(err, errlen, "ARCOMM_PATHS is %zu characters long: at most %zu", strlen(text),
                 sizeof(buf) - 1);
        return COMM_ERR_INVALID;
    }
    snprintf(buf, sizeof(buf), "%s", text);
    struct parse_ctx p = {.err = err, .errlen = errlen, .set = set};
    int item = 0;
    /* Items are numbered as written, empty ones too (strtok would skip them). */
    for (char *next = buf, *it; next != NULL;) {
        char copy[RT_KNOB_STR_MAX];
        it = next;
        next = strchr(it, ';');
        if (next != NULL)
            *next++ = '\0';
        it = trim(it);
        item++;
        if (*it == '\0')
            continue;
        snprintf(copy, sizeof(copy), "%s", it);
        p.item = item;
        p.text = copy;
        if (out->n == COLL_PATHS_OVERRIDES_MAX) {
            snprintf(err, errlen, "ARCOMM_PATHS has more than %d items: merge some",
                     COLL_PATHS_OVERRIDES_MAX);
            return COMM_ERR_INVALID;
        }
        comm_status_t st = parse_item(&p, it, &out->row[out->n]);
        if (st != COMM_OK)
            return st;
        out->n++;
    }
    return COMM_OK;
}

/* --- a communicator's table --- */

/* Can row r apply to the communicator cfg describes?  Makes its bounds concrete. */
static bool resolve_row(const struct coll_paths_config *cfg, struct coll_path_row *r)
{
    const struct rt_knobs *k = cfg->k;
    int n = cfg->nranks;
    if (n < r->nmin || n > r->nmax)
        return false;
    if ((r->ranks == COLL_RANKS_THREADS && !cfg->threads) ||
        (r->ranks == COLL_RANKS_PROCS && cfg->threads))
        return false;
    if ((r->needs & COLL_NEED_CMA) && (!cfg->cma || k->cma_threshold == RT_SIZE_OFF))
        return false;
    if ((r->needs & COLL_NEED_CMA_FAST) && !cfg->cma_fast)
        return false;
    if ((r->needs & COLL_NEED_CMA_AUTO) && k->cma_threshold != RT_SIZE_AUTO)
        return false;
    if (r->needs & COLL_NEED_CMA_SET) {
        if (k->cma_threshold == RT_SIZE_AUTO || k->cma_threshold == RT_SIZE_OFF)
            return false;
        r->lo = k->cma_threshold;
    }
    /* A default flag row is ARCOMM_FLAG_THRESHOLD's default: the knob, resolved, is its
     * bound (coll_host_resolve_knobs reads the row for "auto"). */
    bool flag_bound = r->hi == COLL_BOUND_FLAG || (r->item == 0 && r->path == COLL_PATH_FLAG);
    if (flag_bound) {
        if (k->flag_threshold == RT_SIZE_OFF)
            return false;
        r->hi = k->flag_threshold;
        r->hi_total = 0;
    }
    if (r->hi_total != 0) {
        uint64_t t = r->hi_total / ((uint64_t)n * (uint64_t)n);
        r->hi = t < r->hi ? t : r->hi;
        r->hi_total = 0;
    }
    return r->lo <= r->hi;
}

void coll_paths_resolve(const struct coll_paths_config *cfg, const struct coll_paths_overrides *ov,
                        struct coll_paths *out)
{
    out->nrows = 0;
    out->nranks = cfg->nranks;
    out->slot = (cfg->k->shm_slot_bytes + 4095) / 4096 * 4096;
    for (int i = 0; ov != NULL && i < ov->n; i++) {
        struct coll_path_row r = ov->row[i];
        if (resolve_row(cfg, &r))
            out->row[out->nrows++] = r;
    }
    for (size_t i = 0; i < coll_host_path_nrows; i++) {
        struct coll_path_row r = coll_host_path_rows[i];
        if (resolve_row(cfg, &r))
            out->row[out->nrows++] = r;
    }
}

void coll_paths_plan(struct comm *c, const struct coll_paths *t, const struct coll_plan_ask *ask,
                     struct coll_plan *plan)
{
    uint64_t staged = coll_host_flag_bytes(ask->kind, ask->bytes, t->nranks);
    memset(plan, 0, sizeof(*plan));
    plan->row = -1;
    plan->path = COLL_PATH_ONEPASS;
    for (int i = 0; i < t->nrows; i++) {
        const struct coll_path_row *r = &t->row[i];
        uint64_t v = r->staged ? staged : ask->bytes;
        if (!(r->colls & BIT(ask->kind)) || v < r->lo || v > r->hi)
            continue;
        if (r->path == COLL_PATH_FLAG && staged > t->slot)
            continue; /* the flag path stages the whole message in one slot */
        if (r->path == COLL_PATH_CMA) {
            if (!ask->plain)
                continue;
            if (r->tune == COLL_TUNE_CHOICE) {
                /* Rank 0's choice for this call: the row applies only where it says CMA;
                 * either way rank 0 times the call (coll_choice_done). */
                if (c == NULL || plan->ch.active)
                    continue;
                if (!coll_choice_take(c, ask->kind, (size_t)ask->bytes, &plan->ch))
                    continue;
                plan->offer_cma = true;
            } else if (r->tune == COLL_TUNE_BULK && c != NULL) {
                plan->pick = coll_cma_tune_pick(c, ask->kind, (size_t)ask->bytes);
                plan->offer_cma = plan->pick.offer;
            } else {
                plan->offer_cma = true;
            }
        }
        plan->path = r->path;
        plan->row = i;
        return;
    }
}
