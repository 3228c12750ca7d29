/* SPDX-License-Identifier: MIT */
/*
 * Communicators from communicators: comm_split and comm_dup (collective over a parent),
 * and comm_init_all (one thread makes the communicators of n thread ranks).
 *
 * comm_split is two numbered calls on the parent, each a handshake through the parent's
 * arrival words alone, as a barrier is.  Every backend has those words in host memory
 * (CUDA and Hexagon communicators too), while the staging slots belong to the backend
 * (CUDA stages there, Hexagon keeps its buffer registry there), so nothing else of the
 * parent's segment is touched:
 *   1. every rank publishes its (color, key) and reads everyone's; the members of its
 *      group, ordered by (key, parent rank), give its rank and size; the group's id is
 *      derived from the parent's id, this call's number and the color, alike on every
 *      member; then the rank joins the new communicator with comm_init;
 *   2. every rank publishes how its comm_init ended and reads everyone's: when any group
 *      failed, every rank destroys its new communicator and returns the same status.
 * A failure of either handshake breaks the parent on every rank, as any collective's.
 * Between them the join watches the parent (rt_init_split_child): its comm_abort, or a
 * peer of it that failed or died, ends the join at once, and handshake 2 then breaks
 * the parent.  A communicator without the segment (comm_init_mpi's, over several hosts)
 * has its backend carry both handshakes and the join (struct backend_ops.split_*: over
 * MPI, each group's communicator made by comm_init_mpi); the rest is the same.
 */
#include "comm_internal.h"
#include "id.h"
#include "rt_hooks.h"
#include "shm/shm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * What the peers compare besides the collective's kind: a count no barrier (count 0)
 * and no allreduce of these handshakes' shape publishes, one per handshake, so that a
 * peer making another call at this number finds the disagreement on its side too.
 */
#define SPLIT_COUNT_COLORS 2 /* color and key */
#define SPLIT_COUNT_RESULT 1 /* the status of the rank's comm_init */

/* What a peer's arrival at a handshake's call number was, for a mismatch message. */
static void describe(const struct shm_arrival *a, char *buf, size_t len)
{
    bool split = a->count == SPLIT_COUNT_COLORS || a->count == SPLIT_COUNT_RESULT;
    if (a->path == SHM_PATH_BARRIER && split)
        snprintf(buf, len, "comm_split or comm_dup");
    else if (a->path == SHM_PATH_BARRIER)
        snprintf(buf, len, "comm_barrier");
    else
        snprintf(buf, len, "a collective of count %llu dtype %s", (unsigned long long)a->count,
                 a->dtype < RT_DTYPE_COUNT ? rt_dtype_name(a->dtype) : "?");
}

/*
 * coll_meet found a peer making another call: says so in this rank's message
 * in the terms of comm_split (the handshake is barrier-shaped, and the shared message
 * would call it a barrier).
 */
static void mismatch_message(struct comm *c, const struct shm_arrival *mine, const char *fn)
{
    for (int p = 0; p < c->nranks; p++) {
        const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, p);
        if (a->path == mine->path && a->count == mine->count)
            continue;
        char what[96];
        describe(a, what, sizeof(what));
        snprintf(c->errmsg, sizeof(c->errmsg),
                 "rank %d: ranks disagree in call %u: rank %d made %s, rank %d made %s; every "
                 "rank of the communicator must make the same calls in the same order",
                 c->rank, c->seq, c->rank, fn, p, what);
        return;
    }
}

/*
 * One handshake at call c->seq: publishes (a, b) in this rank's arrival word, waits for
 * every peer's, and reads theirs into all_a and all_b (either may be NULL).  The values
 * ride in the word's buffer fields, which a barrier-shaped arrival leaves unused; a peer
 * reuses this word only two calls later, after this rank arrived at the next one.
 */
static comm_status_t handshake(struct comm *c, uint64_t count, int64_t a, int64_t b, const char *fn,
                               const char *what, int64_t *all_a, int64_t *all_b)
{
    if (c->ops->split_handshake != NULL)
        return c->ops->split_handshake(c, count, a, b, all_a, all_b, what);
    comm_status_t st = coll_settle(c);
    if (st != COMM_OK)
        return st;
    struct shm_arrival mine = {
        .count = count,
        .path = SHM_PATH_BARRIER,
        .coll = COLL_SPLIT,
        .send = (uint64_t)a,
        .recv = (uint64_t)b,
    };
    st = coll_meet(c, &mine, what);
    if (st == COMM_ERR_MISMATCH)
        mismatch_message(c, &mine, fn);
    if (st != COMM_OK)
        return st;
    for (int p = 0; p < c->nranks; p++) {
        const struct shm_arrival *pa = shm_arrival_at(c->shm, c->seq, p);
        if (all_a != NULL)
            all_a[p] = (int64_t)pa->send;
        if (all_b != NULL)
            all_b[p] = (int64_t)pa->recv;
    }
    shm_complete(c);
    return COMM_OK;
}

/* splitmix64's finaliser: every input bit reaches every output bit. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/*
 * The id of the group of color made by the parent's call number call: 128 bits hashed
 * from the parent's id, the call number and the color (two FNV-1a lanes, finalised), in
 * the format of comm_id_new.  Every member computes the same; groups of one call differ
 * by color, and successive splits by call number.  It is as hard to guess as the
 * parent's id, which came from the OS random source.
 */
static void child_id(const comm_id_t *parent, uint32_t call, int color, comm_id_t *out)
{
    uint8_t tail[8];
    for (int i = 0; i < 4; i++) {
        tail[i] = (uint8_t)(call >> (8 * i));
        tail[4 + i] = (uint8_t)((uint32_t)color >> (8 * i));
    }
    uint64_t h[2] = {0xcbf29ce484222325ull, 0x6c62272e07bb0142ull};
    size_t n = strnlen(parent->str, COMM_ID_BYTES);
    for (int lane = 0; lane < 2; lane++) {
        for (size_t i = 0; i < n; i++)
            h[lane] = (h[lane] ^ (uint8_t)parent->str[i]) * 0x100000001b3ull;
        for (size_t i = 0; i < sizeof(tail); i++)
            h[lane] = (h[lane] ^ tail[i]) * 0x100000001b3ull;
        h[lane] = mix64(h[lane] ^ (lane ? 0x73706c6974303031ull : 0x73706c6974303030ull));
    }
    comm_id_t id;
    memset(&id, 0, sizeof(id));
    snprintf(id.str, sizeof(id.str), "arc1-%016llx%016llx", (unsigned long long)h[0],
             (unsigned long long)h[1]);
    *out = id;
}

/* Does (key a, rank ra) come before (key b, rank rb)? */
static bool before(int64_t a, int ra, int64_t b, int rb)
{
    return a < b || (a == b && ra < rb);
}

struct split_group {
    int color;
    int rank;   /* this rank's place in the group */
    int nranks; /* the group's size */
};

/* The group of parent rank r, out of every rank's color and key. */
static struct split_group group_of(int r, int nranks, const int64_t *colors, const int64_t *keys)
{
    struct split_group g = {.color = (int)colors[r], .rank = 0, .nranks = 0};
    for (int p = 0; p < nranks; p++) {
        if (colors[p] != colors[r])
            continue;
        g.nranks++;
        if (before(keys[p], p, keys[r], r))
            g.rank++;
    }
    return g;
}

/* Joins this rank's group: the parent's device, device, transport choice, timeout and
 * knob defaults; the split's abort word (c->init_abort, may be NULL) stops the join as
 * comm_init's abort_flag does, and so do the parent's comm_abort and a failed or dead
 * peer of the parent (rt_init_split_child).  A backend with its own join does it all. */
static comm_status_t child_init(struct comm *c, uint32_t call, const struct split_group *g, int key,
                                struct comm **out)
{
    if (c->ops->split_join != NULL)
        return c->ops->split_join(c, g->color, key, out);
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.abort_flag = c->init_abort;
    cfg.nranks = g->nranks;
    cfg.rank = g->rank;
    child_id(&c->id, call, g->color, &cfg.id);
    cfg.device = c->device;
    /* After setup it is the device the parent uses (CUDA resolves "-1" to an ordinal). */
    cfg.device_index = c->device_index;
    /* A transport named by the config or ARCOMM_TRANSPORT; automatic stays automatic. */
    cfg.transport = c->knobs.transport[0] != '\0' ? c->knobs.transport : NULL;
    cfg.timeout_ms = c->timeout_ms < 0 ? -1 : (int)c->timeout_ms;
    cfg.knob_defaults = c->knob_defaults[0] != '\0' ? c->knob_defaults : NULL;
    return rt_init_split_child(out, &cfg, c);
}

/*
 * After handshake 2: the failure every rank reports, alike on every rank.  The lowest
 * parent rank whose comm_init failed on its own, not by seeing a peer of its group
 * fail (COMM_ERR_PEER), is the root cause; else the lowest failing rank.  -1: none.
 */
static int first_failure(int nranks, int64_t *results)
{
    int first = -1;
    for (int p = 0; p < nranks; p++) {
        if (results[p] == COMM_OK)
            continue;
        /* Only statuses come from the peers; anything else is a corrupted word. */
        if (results[p] > 0 || results[p] < COMM_ERR_ABORTED)
            results[p] = COMM_ERR_PEER;
        if (results[p] != COMM_ERR_PEER)
            return p;
        if (first < 0)
            first = p;
    }
    return first;
}

static comm_status_t split_run(struct comm *c, int color, int key, comm_t **newcomm, const char *fn)
{
    comm_status_t st = rt_call_usable(c, fn);
    if (st != COMM_OK)
        return st;
    if (c->shm == NULL && c->ops->split_handshake == NULL) {
        /* A communicator without a segment and without handshakes of its backend's has
         * nothing to split through; every rank of it answers alike. */
        rt_error(c, COMM_ERR_UNSUPPORTED,
                 "rank %d: %s: the %s communicator has no shared segment to split through "
                 "and its transport no split of its own: make the new communicator with "
                 "comm_init; this communicator stays usable",
                 c->rank, fn, c->ops->name);
        return COMM_ERR_UNSUPPORTED;
    }
    if (newcomm == NULL) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: %s: newcomm is NULL; pass the address of a comm_t * to receive the "
                 "new communicator (the call is collective: the peers now fail too)",
                 c->rank, fn);
        return rt_break(c, COMM_ERR_INVALID);
    }

    int64_t colors[RT_MAX_RANKS], keys[RT_MAX_RANKS], results[RT_MAX_RANKS];
    uint32_t call = c->seq;
    char what[64];
    snprintf(what, sizeof(what), "%s (colors and keys)", fn);
    st = handshake(c, SPLIT_COUNT_COLORS, color < 0 ? COMM_SPLIT_NONE : color, key, fn, what,
                   colors, keys);
    if (st != COMM_OK)
        return rt_break(c, st);
    c->seq++;

    struct comm *child = NULL;
    struct split_group g = group_of(c->rank, c->nranks, colors, keys);
    comm_status_t mine = COMM_OK;
    char cause[RT_ERRMSG_BYTES] = "";
    /* A backend's join is collective over every rank (MPI_Comm_split). */
    if (color >= 0 || c->ops->split_join != NULL) {
        rt_init_error_clear();
        mine = child_init(c, call, &g, key, &child);
        if (mine != COMM_OK)
            snprintf(cause, sizeof(cause), "%s", comm_last_error(NULL));
    }
    /* Told to stop while joining: the parent breaks, as in either handshake's wait. */
    if (rt_abort_requested(c)) {
        rt_error(c, COMM_ERR_ABORTED, "rank %d: %s: %s while rank %d joined its new communicator",
                 c->rank, fn, rt_abort_cause(c), c->rank);
        comm_destroy(child);
        return rt_break(c, COMM_ERR_ABORTED);
    }

    snprintf(what, sizeof(what), "%s (joining the new communicators)", fn);
    st = handshake(c, SPLIT_COUNT_RESULT, mine, 0, fn, what, results, NULL);
    if (st != COMM_OK) {
        comm_destroy(child);
        return rt_break(c, st);
    }
    c->seq++;

    int f = first_failure(c->nranks, results);
    if (f < 0) {
        *newcomm = child;
        return COMM_OK;
    }
    /* The parent stays usable: both handshakes completed on every rank. */
    comm_destroy(child);
    comm_status_t status = (comm_status_t)results[f];
    struct split_group fg = group_of(f, c->nranks, colors, keys);
    /* This rank's own failure, unless it only saw the one named here. */
    bool own = mine != COMM_OK && mine != COMM_ERR_PEER;
    if (f == c->rank)
        rt_error(c, status,
                 "rank %d: %s: joining the new communicator of color %d (as its rank %d of %d) "
                 "failed: %s; every rank's new communicator was destroyed",
                 c->rank, fn, fg.color, fg.rank, fg.nranks, cause);
    else
        rt_error(c, status,
                 "rank %d: %s: rank %d failed to join the new communicator of color %d (as its "
                 "rank %d of %d) with %s; every rank's new communicator was destroyed: rank %d's "
                 "comm_last_error says why%s%s",
                 c->rank, fn, f, fg.color, fg.rank, fg.nranks, rt_status_string(status), f,
                 own ? "; this rank's own failure: " : "", own ? cause : "");
    return status;
}

/*
 * The split with an abort word (rt_hook_split; NULL for comm_split and comm_dup): the
 * parent's waits of both handshakes poll it, and so does the new communicator's
 * comm_init.  Its first sight counts as comm_abort of the parent, which then breaks on
 * every rank as in any collective: the peers return at once instead of after the
 * timeout, and the parent is to be destroyed.
 */
static comm_status_t split_entered(struct comm *c, int color, int key,
                                   const volatile int *abort_flag, comm_t **newcomm, const char *fn)
{
    c->init_abort = abort_flag;
    c->init_abort_what = "the split's abort word was set (ncclCommAbort of the communicator "
                         "being split off, or rt_hook_split's caller)";
    comm_status_t st = split_run(c, color, key, newcomm, fn);
    c->init_abort = NULL;
    return st;
}

ARCOMM_API comm_status_t comm_split(comm_t *comm, int color, int key, comm_t **newcomm)
{
    return rt_hook_split(comm, color, key, NULL, newcomm);
}

ARCOMM_API comm_status_t comm_dup(comm_t *comm, comm_t **newcomm)
{
    if (!rt_call_enter(comm, "comm_dup"))
        return COMM_ERR_INVALID;
    return rt_call_leave(comm, split_entered(comm, 0, comm->rank, NULL, newcomm, "comm_dup"));
}

ARCOMM_HOOK comm_status_t rt_hook_split(comm_t *comm, int color, int key,
                                        const volatile int *abort_flag, comm_t **newcomm)
{
    if (!rt_call_enter(comm, "comm_split"))
        return COMM_ERR_INVALID;
    return rt_call_leave(comm, split_entered(comm, color, key, abort_flag, newcomm, "comm_split"));
}

/* ---- comm_init_all ---- */

/* The go signal: no rank starts comm_init until every thread exists, so a thread that
 * cannot be started leaves no rank waiting for it. */
struct init_all_start {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int state; /* 0: wait, 1: go, -1: give up */
};

struct init_all_rank {
    comm_config_t cfg;
    struct init_all_start *start;
    comm_t *comm;
    comm_status_t status;
    char msg[RT_ERRMSG_BYTES]; /* comm_last_error(NULL) of its thread, on failure */
};

static void init_all_rank_run(struct init_all_rank *r)
{
    r->status = comm_init(&r->comm, &r->cfg);
    if (r->status != COMM_OK)
        snprintf(r->msg, sizeof(r->msg), "%s", comm_last_error(NULL));
}

static void *init_all_thread(void *arg)
{
    struct init_all_rank *r = arg;
    struct init_all_start *s = r->start;
    pthread_mutex_lock(&s->lock);
    while (s->state == 0)
        pthread_cond_wait(&s->cond, &s->lock);
    int state = s->state;
    pthread_mutex_unlock(&s->lock);
    if (state > 0)
        init_all_rank_run(r);
    return NULL;
}

static void init_all_signal(struct init_all_start *s, int state)
{
    pthread_mutex_lock(&s->lock);
    s->state = state;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/* The config every rank starts from: cfg's fields (as far as its size goes), else the
 * defaults. */
static comm_status_t init_all_config(const comm_config_t *cfg, comm_config_t *out)
{
    comm_config_init(out);
    if (cfg == NULL)
        return COMM_OK;
    size_t need = offsetof(comm_config_t, timeout_ms) + sizeof(cfg->timeout_ms);
    if (cfg->size < need) {
        rt_init_error(NULL, COMM_ERR_INVALID,
                      "comm_init_all: cfg->size is %zu: fill the config with comm_config_init "
                      "first (or pass NULL for the host defaults)",
                      cfg->size);
        return COMM_ERR_INVALID;
    }
    memcpy(out, cfg, cfg->size < sizeof(*out) ? cfg->size : sizeof(*out));
    out->size = sizeof(*out);
    return COMM_OK;
}

ARCOMM_API comm_status_t comm_init_all(comm_t **comms, int n, const int *devices,
                                       const comm_config_t *cfg)
{
    rt_init_error_clear();
    if (comms == NULL || n < 1 || n > RT_MAX_RANKS) {
        if (comms == NULL)
            rt_init_error(NULL, COMM_ERR_INVALID,
                          "comm_init_all: comms is NULL; pass an array of n comm_t * to receive "
                          "the communicators");
        else
            rt_init_error(NULL, COMM_ERR_INVALID,
                          "comm_init_all: n is %d; pass the number of ranks, 1..%d", n,
                          RT_MAX_RANKS);
        return COMM_ERR_INVALID;
    }
    comm_config_t base;
    comm_status_t st = init_all_config(cfg, &base);
    if (st != COMM_OK)
        return st;
    st = comm_id_new(&base.id);
    if (st != COMM_OK)
        return st;
    base.nranks = n;

    struct init_all_rank *ranks = calloc((size_t)n, sizeof(*ranks));
    pthread_t *threads = calloc((size_t)n, sizeof(*threads));
    if (ranks == NULL || threads == NULL) {
        free(ranks);
        free(threads);
        rt_init_error(NULL, COMM_ERR_NOMEM, "comm_init_all: out of memory for %d ranks", n);
        return COMM_ERR_NOMEM;
    }
    struct init_all_start start = {
        .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .state = 0};
    for (int i = 0; i < n; i++) {
        ranks[i].cfg = base;
        ranks[i].cfg.rank = i;
        ranks[i].cfg.device_index = devices != NULL ? devices[i] : i;
        ranks[i].start = &start;
    }

    /* Rank 0 runs in this thread, ranks 1..n-1 in helpers. */
    int started = 1;
    for (; started < n; started++) {
        int err = pthread_create(&threads[started], NULL, init_all_thread, &ranks[started]);
        if (err != 0) {
            init_all_signal(&start, -1);
            for (int i = 1; i < started; i++)
                pthread_join(threads[i], NULL);
            rt_init_error(NULL, COMM_ERR_SYSTEM,
                          "comm_init_all: starting the thread of rank %d of %d failed: %s; no "
                          "communicator was made (lower n, or raise the thread limit)",
                          started, n, strerror(err));
            st = COMM_ERR_SYSTEM;
            goto out_free;
        }
    }
    init_all_signal(&start, 1);
    init_all_rank_run(&ranks[0]);
    for (int i = 1; i < n; i++)
        pthread_join(threads[i], NULL);

    /* The root cause: the first rank that failed on its own rather than by seeing a
     * peer fail; else the first that failed. */
    int f = -1;
    for (int i = 0; i < n; i++) {
        if (ranks[i].status == COMM_OK)
            continue;
        if (f < 0 || (ranks[f].status == COMM_ERR_PEER && ranks[i].status != COMM_ERR_PEER))
            f = i;
    }
    if (f < 0) {
        for (int i = 0; i < n; i++)
            comms[i] = ranks[i].comm;
        st = COMM_OK;
        goto out_free;
    }
    for (int i = 0; i < n; i++)
        if (ranks[i].status == COMM_OK)
            comm_destroy(ranks[i].comm);
    st = ranks[f].status;
    rt_init_error_quiet("comm_init_all: %s", ranks[f].msg);

out_free:
    pthread_mutex_destroy(&start.lock);
    pthread_cond_destroy(&start.cond);
    free(threads);
    free(ranks);
    return st;
}
