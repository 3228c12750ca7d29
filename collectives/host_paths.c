/* SPDX-License-Identifier: MIT */
/*
 * What every host collective's paths share: how a rank publishes its buffers for the
 * one-pass path and how it takes a peer's, and the one driver that picks the path of a
 * call (flag for small messages, then one-pass where every rank reaches every buffer
 * the peers touch, staged otherwise) exactly as allreduce does.
 */
#include "host.h"
#include "reduce.h"

#include <stdlib.h>
#include <string.h>

/* Does [p, p + len) lie in the comm_mem_alloc pools, where peers accept offsets? */
static bool in_pool(const struct shm_comm *s, const void *p, size_t len)
{
    return shm_contains(s, p, len) &&
           shm_pool_range(s, (uint64_t)((const uint8_t *)p - s->base), len);
}

/* Does [p, p + len) lie in this process's shared heap, in a block every peer reaches?
 * Its offset there, tagged, into *v. */
static bool in_heap(const struct comm *c, const void *p, size_t len, uint64_t *v)
{
    const struct shm_comm *s = c->shm;
    uint64_t off;
    if (!s->heap || !shm_heap_share(p, len, &off))
        return false;
    uint64_t bytes = s->heap_bytes[c->rank];
    if (len > bytes || off > bytes - len)
        return false;
    *v = SHM_HEAP_TAG | off;
    return true;
}

/* Raw pointers of every buffer, NULL ones too: the CMA paths read the addresses of
 * the peers' buffers only through the kernel, which checks them against the owner's
 * mappings. */
static uint32_t reach_cma(int n, const void *const *bufs, uint64_t *out)
{
    for (int i = 0; i < n; i++)
        out[i] = (uint64_t)(uintptr_t)bufs[i];
    return SHM_BUF_CMA;
}

uint32_t coll_reach(const struct comm *c, int n, const void *const *bufs, const size_t *lens,
                    bool cma, uint64_t *out)
{
    const struct shm_comm *s = c->shm;
    if (s->same_process) {
        for (int i = 0; i < n; i++)
            out[i] = (uintptr_t)bufs[i];
        return SHM_BUF_SAME_PROC;
    }
    bool touched = false;
    for (int i = 0; i < n; i++) {
        /* A buffer the peers do not touch publishes the pools' first offset, which
         * every peer's check accepts with length 0. */
        touched = touched || lens[i] != 0;
        if (lens[i] == 0) {
            out[i] = (uint64_t)(s->pool - s->base);
            continue;
        }
        if (in_pool(s, bufs[i], lens[i]))
            out[i] = (uint64_t)((const uint8_t *)bufs[i] - s->base);
        else if (!in_heap(c, bufs[i], lens[i], &out[i]))
            return cma ? reach_cma(n, bufs, out) : 0;
    }
    /* A rank whose buffers no peer touches (broadcast's non-roots) suits either path. */
    return SHM_BUF_IN_SEG | (cma && !touched ? SHM_BUF_CMA : 0u);
}

enum shm_bulk coll_bulk_path(struct comm *c, const struct coll_plan *plan, uint32_t mine_flags)
{
    uint32_t all = mine_flags & (SHM_BUF_SAME_PROC | SHM_BUF_IN_SEG | SHM_BUF_CMA);
    for (int p = 0; p < c->nranks; p++)
        all &= shm_arrival_at(c->shm, c->seq, p)->flags;
    /* A row that says staged takes it whatever the buffers allow. */
    enum shm_bulk path = plan->path == COLL_PATH_STAGED                 ? SHM_BULK_STAGED
                         : (all & (SHM_BUF_SAME_PROC | SHM_BUF_IN_SEG)) ? SHM_BULK_DIRECT
                         : (all & SHM_BUF_CMA)                          ? SHM_BULK_CMA
                                                                        : SHM_BULK_STAGED;
    c->shm->bulk_calls[path]++;
    return path;
}

void *coll_peer_ptr(struct comm *c, int p, const struct shm_arrival *a, uint64_t v, uint64_t len,
                    const char *what)
{
    struct shm_comm *s = c->shm;
    if (c->shm->same_process && (a->flags & SHM_BUF_SAME_PROC) && !(a->flags & SHM_BUF_IN_SEG))
        return (void *)(uintptr_t)v;
    if (!c->shm->same_process && (a->flags & SHM_BUF_IN_SEG) && !(a->flags & SHM_BUF_SAME_PROC)) {
        if ((v & SHM_HEAP_TAG) != 0 && s->heap) {
            /* An offset into rank p's shared heap, which this rank mapped at join. */
            uint64_t off = v & ~SHM_HEAP_TAG, bytes = s->heap_bytes[p];
            if (off <= bytes && len <= bytes - off)
                return s->heap_base[p] + off;
            rt_error(c, COMM_ERR_PEER,
                     "rank %d: peer rank %d published %s at offset %llu (%llu bytes) of its "
                     "shared heap, which has %llu bytes, in call %u: the segment is corrupted "
                     "(a stray write by another process of this user?); restart the job",
                     c->rank, p, what, (unsigned long long)off, (unsigned long long)len,
                     (unsigned long long)bytes, c->seq);
            return NULL;
        }
        if (shm_pool_range(s, v, len))
            return s->base + v;
        rt_error(c, COMM_ERR_PEER,
                 "rank %d: peer rank %d published %s at offset %llu (%llu bytes) outside the "
                 "segment's buffer pools (bytes %llu to %llu) in call %u: the segment is "
                 "corrupted (a stray write by another process of this user?); restart the job",
                 c->rank, p, what, (unsigned long long)v, (unsigned long long)len,
                 (unsigned long long)(s->pool - s->base), (unsigned long long)s->size, c->seq);
        return NULL;
    }
    rt_error(c, COMM_ERR_PEER,
             "rank %d: peer rank %d published buffer flags 0x%x in call %u, which no rank of "
             "this communicator publishes (%s): the segment is corrupted (a stray write by "
             "another process of this user?); restart the job",
             c->rank, p, a->flags, c->seq,
             c->shm->same_process ? "every rank is a thread of this process"
                                  : "not every rank is a thread of this process");
    return NULL;
}

void coll_reduce_block(const struct coll_call *call, void *dst, const void *const *src, int n,
                       size_t count, size_t offset, bool nt)
{
    void *dsts[1] = {dst};
    struct coll_reduce_args args = {
        .dst = dsts,
        .ndst = 1,
        .dst_dtype = call->dtype,
        .src = src,
        .nsrc = n,
        .src_dtype = call->dtype,
        .count = count,
        .op = call->op,
        .offset = offset,
        .nt_store = nt,
        .avg_n = n,
    };
    coll_reduce(&args);
}

comm_status_t coll_sync(struct comm *c, const char *what)
{
    shm_progress_publish(c);
    return shm_progress_wait_all(c, what);
}

void coll_pipe_begin(struct coll_pipe *pp, struct comm *c, int root, size_t count, size_t esize,
                     size_t chunk_bytes)
{
    size_t slot = (size_t)c->shm->slot_bytes;
    size_t want = slot < chunk_bytes ? slot : chunk_bytes;
    pp->c = c;
    pp->root = root;
    pp->chunk = want / 64 * 64 / esize;
    pp->place_bytes = (pp->chunk * esize + 63) / 64 * 64;
    pp->per_slot = slot / pp->place_bytes;
    pp->places = pp->per_slot * SHM_SLOTS;
    pp->rounds = (count + pp->chunk - 1) / pp->chunk;
    pp->base = c->shm->steps;
}

void *coll_pipe_place(const struct coll_pipe *pp, int p, size_t k)
{
    size_t place = k % pp->places;
    return (char *)shm_slot(pp->c->shm, p, (uint32_t)(place / pp->per_slot)) +
           place % pp->per_slot * pp->place_bytes;
}

comm_status_t coll_pipe_wait(const struct coll_pipe *pp, bool root_side, uint64_t steps,
                             const char *what)
{
    return shm_progress_wait_side(pp->c, pp->root, root_side, pp->base + steps, what);
}

static comm_status_t run_flag(struct comm *c, const struct coll_call *call,
                              const struct coll_host_algo *algo)
{
    size_t staged =
        coll_host_flag_bytes(call->kind, call->count * rt_dtype_size(call->dtype), c->nranks);
    bool inline_msg = coll_flag_inline(staged);
    uint32_t slot = inline_msg ? COLL_SLOT_INLINE : call->count ? coll_next_stage_slot(c) : 0;
    struct shm_arrival mine = coll_arrival_of(call, SHM_PATH_FLAG);
    mine.flags = inline_msg ? SHM_BUF_INLINE : 0u;
    /* An inline message is staged here and written to the line with the word. */
    if (call->count)
        algo->flag_stage(c, call, inline_msg ? mine.data : coll_flag_data(c, c->rank, slot));
    comm_status_t st = coll_meet(c, &mine, algo->flag_what);
    if (st != COMM_OK || call->count == 0)
        return st;
    algo->flag_finish(c, call, slot);
    return COMM_OK;
}

static comm_status_t run_bulk(struct comm *c, const struct coll_call *call,
                              const struct coll_host_algo *algo, const struct coll_plan *plan)
{
    size_t esize = rt_dtype_size(call->dtype), send_elems, recv_elems;
    coll_call_shape(call, c->rank, c->nranks, &send_elems, &recv_elems);
    const void *bufs[2] = {call->send, call->recv};
    size_t lens[2] = {algo->expose_send ? send_elems * esize : 0,
                      algo->expose_recv ? recv_elems * esize : 0};
    uint64_t out[2] = {0};
    struct shm_arrival mine = coll_arrival_of(call, SHM_PATH_BULK);
    size_t bytes = call->count * esize;
    mine.flags = coll_reach(c, 2, bufs, lens, plan->offer_cma, out);
    /* With SHM_BUF_CMA alone both are raw pointers, exposed or not: the CMA paths read
     * the peers' other buffer too (allgather pulls each peer's sendbuf). */
    mine.send = out[0];
    mine.recv = out[1];
    comm_status_t st = coll_meet(c, &mine, algo->bulk_what);
    if (st != COMM_OK || call->count == 0)
        return st;
    enum shm_bulk path = coll_bulk_path(c, plan, mine.flags);
    if (path == SHM_BULK_DIRECT)
        return algo->direct(c, call);
    bool cma = path == SHM_BULK_CMA;
    st = cma ? algo->cma(c, call) : algo->staged(c, call);
    if (st == COMM_OK)
        coll_host_cma_done(c, &plan->pick, cma, bytes);
    return st;
}

/* The tuner of the CMA windows: a cell per collective and size class (bytes per rank:
 * below 1 MiB, then by powers of two up to 64 MiB and beyond). */
#define CMA_TUNE_CLASSES 8
struct cma_tune {
    struct coll_tune_cell cell[COLL_KIND_END][CMA_TUNE_CLASSES];
    /* Rank 0's times of the lagged choices (coll_choice_done): [0] flag, [1] CMA. */
    struct coll_tune_cell choice[SHM_CHOICES];
};
_Static_assert((COLL_ALLTOALL - COLL_ALLREDUCE + 1) * COLL_CHOICE_CLASSES <= SHM_CHOICES,
               "a choice word per kind and class");

static struct cma_tune *tune_of(struct comm *c)
{
    struct coll_host *h = coll_host_of(c);
    if (h->cma_tune == NULL)
        h->cma_tune = calloc(1, sizeof(struct cma_tune));
    return h->cma_tune;
}

uint32_t coll_next_stage_slot(struct comm *c)
{
    return coll_host_of(c)->stage_slot++;
}

_Static_assert(COLL_TUNE_SAMPLES == 3, "coll_tune_record takes the median of 3");

void coll_tune_record(struct coll_tune_cell *t, int path, uint64_t ns, size_t bytes_per_rank)
{
    if (t->last == path + 1) {
        double *r = t->sample[path];
        r[t->next[path]] = (double)ns / (double)bytes_per_rank;
        t->next[path] = (uint8_t)((t->next[path] + 1) % COLL_TUNE_SAMPLES);
        if (t->nsamples[path] < COLL_TUNE_SAMPLES)
            t->nsamples[path]++;
        double lo = r[0] < r[1] ? r[0] : r[1], hi = r[0] < r[1] ? r[1] : r[0];
        t->ns_per_byte[path] = t->nsamples[path] == 1   ? r[0]
                               : t->nsamples[path] == 2 ? lo
                               : r[2] < lo              ? lo
                               : r[2] > hi              ? hi
                                                        : r[2];
    }
    t->last = (int8_t)(path + 1);
}

void coll_host_plan(struct comm *c, const struct coll_call *call, bool narrow,
                    struct coll_plan *plan)
{
    struct coll_plan_ask ask = {
        .kind = call->kind,
        .bytes = call->count * rt_dtype_size(call->dtype),
        .plain = !narrow && call->addend == NULL,
    };
    coll_paths_plan(c, &coll_host_of(c)->table, &ask, plan);
}

void coll_host_plan_done(struct comm *c, const struct coll_plan *plan, const struct coll_call *call)
{
    coll_choice_done(c, &plan->ch, call->count * rt_dtype_size(call->dtype));
}

comm_status_t coll_host_run(struct comm *c, const struct coll_call *call,
                            const struct coll_host_algo *algo)
{
    comm_status_t st = coll_settle(c);
    if (st != COMM_OK)
        return st;
    struct coll_plan plan;
    coll_host_plan(c, call, false, &plan);
    st = plan.path == COLL_PATH_FLAG ? run_flag(c, call, algo) : run_bulk(c, call, algo, &plan);
    /* A rank that completed this call never fails a peer's. */
    if (st == COMM_OK) {
        coll_host_plan_done(c, &plan, call);
        shm_complete(c);
    }
    return st;
}

uint64_t coll_choice_pack(uint32_t from, bool old, bool now)
{
    return (uint64_t)from << 32 | (uint64_t)old << 1 | (uint64_t)now;
}

bool coll_choice_at(uint64_t word, uint32_t seq)
{
    uint32_t from = (uint32_t)(word >> 32);
    return (int32_t)(seq - from) >= 0 ? (word & 1u) != 0 : (word & 2u) != 0;
}

bool coll_choice_take(struct comm *c, enum coll_kind kind, size_t bytes_per_rank,
                      struct coll_choice *ch)
{
    struct shm_comm *s = c->shm;
    if (!s->cma_fast || c->knobs.cma_threshold != RT_SIZE_AUTO || kind < COLL_ALLREDUCE ||
        kind > COLL_ALLTOALL || bytes_per_rank < COLL_CHOICE_MIN)
        return false;
    if (c->rank == 0 && tune_of(c) == NULL)
        return false; /* rank 0 cannot keep times: no word ever changes, so every rank
                       * reads the flag path too */
    int k = 0;
    for (size_t v = bytes_per_rank / COLL_CHOICE_MIN; v > 1 && k < COLL_CHOICE_CLASSES - 1; v >>= 1)
        k++;
    ch->index = (unsigned)(kind - COLL_ALLREDUCE) * COLL_CHOICE_CLASSES + (unsigned)k;
    ch->seq = c->seq;
    ch->active = true;
    uint64_t w = atomic_load_explicit(&s->hdr->choice[ch->index], memory_order_acquire);
    ch->cma = coll_choice_at(w, c->seq);
    if (c->rank == 0)
        ch->t0 = rt_now_ns();
    return ch->cma;
}

void coll_choice_done(struct comm *c, const struct coll_choice *ch, size_t bytes_per_rank)
{
    if (!ch->active || c->rank != 0 || bytes_per_rank == 0)
        return;
    struct shm_comm *s = c->shm;
    struct cma_tune *tu = tune_of(c);
    struct coll_tune_cell *t = &tu->choice[ch->index];
    coll_tune_record(t, ch->cma ? 1 : 0, rt_now_ns() - ch->t0, bytes_per_rank);
    /* The bulk tuner's schedule, two calls late: the choice for the class's call n + 2
     * is its rule's for call n. */
    bool want = coll_cma_tune_offer(t->calls++, t->ns_per_byte[0], t->ns_per_byte[1]);
    _Atomic uint64_t *word = &s->hdr->choice[ch->index];
    uint64_t w = atomic_load_explicit(word, memory_order_relaxed); /* rank 0's own */
    if (coll_choice_at(w, ch->seq + 2) != want)
        atomic_store_explicit(word,
                              coll_choice_pack(ch->seq + 2, coll_choice_at(w, ch->seq + 1), want),
                              memory_order_release);
}

static int tune_class(size_t bytes_per_rank)
{
    int k = 0;
    for (size_t v = bytes_per_rank >> 20; v > 0 && k < CMA_TUNE_CLASSES - 1; v >>= 1)
        k++;
    return k;
}

bool coll_cma_tune_exploring(uint64_t n)
{
    if (n < COLL_CMA_EXPLORE)
        return false;
    if (n >= COLL_CMA_EXPLORE_MAX)
        return n % COLL_CMA_EXPLORE_MAX < COLL_CMA_BURST;
    uint64_t p = COLL_CMA_EXPLORE; /* the largest power of two <= n */
    while (p * 2 <= n)
        p *= 2;
    return n - p < COLL_CMA_BURST;
}

bool coll_cma_tune_offer(uint64_t n, double staged_ns, double cma_ns)
{
    bool best = cma_ns <= staged_ns;
    if (n < 2 * COLL_CMA_BURST)
        return n < COLL_CMA_BURST; /* a burst on each path */
    return coll_cma_tune_exploring(n) ? !best : best;
}

struct coll_cma_pick coll_cma_tune_pick(struct comm *c, enum coll_kind kind, size_t bytes_per_rank)
{
    struct coll_cma_pick p = {.offer = true};
    struct cma_tune *tu = tune_of(c);
    if (tu == NULL)
        return p; /* no memory for the tuner: the rows as they are */
    struct coll_tune_cell *t = &tu->cell[kind][tune_class(bytes_per_rank)];
    /* Every rank sees the same calls, so the same numbering: the exploring calls are
     * the same calls on every rank (coll_cma_tune_offer). */
    uint64_t n = t->calls++;
    p.offer = coll_cma_tune_offer(n, t->ns_per_byte[0], t->ns_per_byte[1]);
    p.cell = t;
    p.t0 = rt_now_ns();
    return p;
}

void coll_host_cma_done(struct comm *c, const struct coll_cma_pick *p, bool cma,
                        size_t bytes_per_rank)
{
    (void)c;
    if (p->cell == NULL || bytes_per_rank == 0)
        return;
    coll_tune_record(p->cell, cma ? 1 : 0, rt_now_ns() - p->t0, bytes_per_rank);
}

/* Bytes of one peer's chunk in a CMA reduction: a round's chunks (every peer's and
 * the result) stay in L2 while they are reduced and written out. */
#define CMA_CHUNK_BYTES (128u << 10)

/* Does a default CMA row of exactly these needs take a call of kind moving bytes_per_rank
 * between nranks process ranks (the windows as coll.h's callers ask for them)? */
static bool cma_row(uint32_t needs, enum coll_kind kind, int nranks, size_t bytes_per_rank)
{
    for (size_t i = 0; i < coll_host_path_nrows; i++) {
        const struct coll_path_row *r = &coll_host_path_rows[i];
        if (r->path != COLL_PATH_CMA || r->needs != needs || r->tune != COLL_TUNE_BULK ||
            !(r->colls & COLL_KIND_BIT(kind)) || nranks < r->nmin || nranks > r->nmax)
            continue;
        if (bytes_per_rank >= r->lo && bytes_per_rank <= r->hi)
            return true;
    }
    return false;
}

bool coll_host_cma_auto(enum coll_kind kind, int nranks, size_t bytes_per_rank)
{
    return cma_row(COLL_NEED_CMA | COLL_NEED_CMA_AUTO, kind, nranks, bytes_per_rank);
}

bool coll_host_cma_fast_window(enum coll_kind kind, int nranks, size_t bytes_per_rank)
{
    return cma_row(COLL_NEED_CMA | COLL_NEED_CMA_FAST | COLL_NEED_CMA_AUTO, kind, nranks,
                   bytes_per_rank);
}

comm_status_t coll_cma_reduce(struct comm *c, const struct coll_call *call, const uint64_t *in,
                              const void *own, size_t count, void *dst, const uint64_t *out,
                              const char *what)
{
    int n = c->nranks;
    size_t esize = rt_dtype_size(call->dtype);
    size_t chunk = CMA_CHUNK_BYTES / esize;
    struct coll_host *h = coll_host_of(c);
    if (h->cma_scratch == NULL) {
        h->cma_scratch = malloc((size_t)n * CMA_CHUNK_BYTES);
        if (h->cma_scratch == NULL) {
            rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory for a %zu-byte scratch buffer",
                     c->rank, (size_t)n * CMA_CHUNK_BYTES);
            return COMM_ERR_NOMEM;
        }
    }
    /* Peer p's chunk lands at p's place in the scratch; the last place (this rank's
     * own is read in place) takes the result when dst is NULL. */
    char *scratch = h->cma_scratch;
    char *result = scratch + (size_t)c->rank * CMA_CHUNK_BYTES;
    for (size_t lo = 0; lo < count; lo += chunk) {
        size_t len = count - lo < chunk ? count - lo : chunk;
        const void *src[RT_MAX_RANKS];
        for (int p = 0; p < n; p++) {
            if (p == c->rank) {
                src[p] = (const char *)own + lo * esize;
                continue;
            }
            char *to = scratch + (size_t)p * CMA_CHUNK_BYTES;
            comm_status_t st = shm_cma_read(c, p, to, in[p] + lo * esize, len * esize, what);
            if (st != COMM_OK)
                return st;
            src[p] = to;
        }
        void *to = dst != NULL ? (char *)dst + lo * esize : result;
        coll_reduce_block(call, to, src, n, len, 0, false);
        for (int p = 0; p < n; p++) {
            if (p == c->rank || out == NULL || out[p] == 0)
                continue;
            comm_status_t st = shm_cma_write(c, p, to, out[p] + lo * esize, len * esize, what);
            if (st != COMM_OK)
                return st;
        }
    }
    return COMM_OK;
}
