/* SPDX-License-Identifier: MIT */
/*
 * Sends and receives between the ranks of a host communicator, through the segment's
 * point-to-point channels (transports/shm/layout.h says their shape).
 *
 * A send takes the next message number of its pair and says where its bytes are: in
 * the channel's first line beside the message's description up to SHM_P2P_INLINE bytes,
 * in the channel's eager room when they fit (copied there), else where the receiver can
 * read them in place (a pointer between thread ranks, an offset into the comm_mem_alloc
 * pools or the sender's shared heap, a pointer read with process_vm_readv), else in
 * chunks through the sender's stage, two at a time.  The receiver checks the count and
 * dtype against its own before it writes a byte (COMM_ERR_MISMATCH on both sides, the
 * message consumed, the communicator usable), copies once, and answers with its
 * verdict.  A send completes on that answer, so a send never outlives its bytes.
 *
 * All calls of a group advance together, none ever blocking another, so that a pair
 * sending to each other or a ring of sends cannot deadlock; calls between one pair go
 * in the order the program made them.  Everything a peer wrote in a channel is checked
 * before use (kind, lengths, offsets, chunk numbers).
 */
#include "p2p.h"

#include "shm/shm.h"
#include "topo.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum p2p_state {
    P2P_NEW = 0,              /* not yet started: an earlier call to its peer goes first */
    P2P_POSTED = 1,           /* send: posted, waiting for the receiver's verdict */
    P2P_STAGING = 2,          /* staged: chunks still to move */
    P2P_DONE = COLL_P2P_DONE, /* finished (the runtime matches self-sends itself) */
};

/* What one run over a group's calls keeps: the stage has one user at a time. */
struct p2p_run {
    struct coll_p2p *ops;
    size_t n;
    long stage_user; /* index of the send using this rank's stage, or -1 */
    bool polling;    /* p2p_poll: no wait of shm_wait's watches the peers */
    unsigned polls;
    uint64_t next_liveness;
};

static const char *verb(const struct coll_p2p *op)
{
    return op->send ? "comm_send to" : "comm_recv from";
}

/* Is an earlier call of the group, in the same direction with the same peer, unfinished? */
static bool behind_earlier(const struct p2p_run *r, size_t i)
{
    const struct coll_p2p *op = &r->ops[i];
    for (size_t j = 0; j < i; j++) {
        const struct coll_p2p *o = &r->ops[j];
        if (o->state != P2P_DONE && o->send == op->send && o->peer == op->peer)
            return true;
    }
    return false;
}

/* The peer's channel copy was not what any rank writes: the segment is corrupt. */
static int corrupt(struct comm *c, const struct coll_p2p *op, const char *what, uint64_t v)
{
    rt_error(c, COMM_ERR_PEER,
             "rank %d: %s rank %d: rank %d's channel holds %s %llu, which no rank writes: the "
             "segment is corrupted (a stray write by another process of this user?); restart "
             "the job",
             c->rank, verb(op), op->peer, op->peer, what, (unsigned long long)v);
    return COMM_ERR_PEER;
}

/* ---- sends ---- */

static enum shm_p2p_kind send_kind(struct comm *c, const struct coll_p2p *op, size_t bytes,
                                   uint64_t *addr)
{
    struct shm_comm *s = c->shm;
    if (bytes <= s->p2p_eager)
        return SHM_P2P_EAGER;
    bool cma = s->cma && c->knobs.cma_threshold != RT_SIZE_OFF;
    const void *buf = op->buf;
    uint32_t flags = coll_reach(c, 1, &buf, &bytes, cma, addr);
    if (flags & SHM_BUF_SAME_PROC)
        return SHM_P2P_RAW;
    if (flags & SHM_BUF_IN_SEG)
        return SHM_P2P_OFFSET;
    if (flags & SHM_BUF_CMA)
        return SHM_P2P_CMA;
    return SHM_P2P_STAGED;
}

/* Moves the chunks the receiver has room for into the stage. */
static void send_fill(struct comm *c, struct coll_p2p *op, struct shm_p2p_chan *ch, size_t bytes)
{
    struct shm_comm *s = c->shm;
    uint64_t chunks = (bytes + s->p2p_chunk - 1) / s->p2p_chunk;
    uint64_t first = ch->first;
    uint64_t drained = atomic_load_explicit(&ch->drained, memory_order_acquire);
    bool moved = false;
    while (op->chunk < chunks && first + op->chunk < drained + 2) {
        uint64_t off = op->chunk * s->p2p_chunk;
        uint64_t len = bytes - off < s->p2p_chunk ? bytes - off : s->p2p_chunk;
        memcpy(shm_p2p_stage_chunk(s, c->rank, first + op->chunk), (const uint8_t *)op->buf + off,
               len);
        op->chunk++;
        atomic_store_explicit(&ch->filled, first + op->chunk, memory_order_release);
        moved = true;
    }
    if (moved)
        shm_ring(s);
    if (op->chunk == chunks)
        op->state = P2P_POSTED;
}

static int send_step(struct comm *c, struct p2p_run *r, size_t i)
{
    struct coll_p2p *op = &r->ops[i];
    struct shm_comm *s = c->shm;
    struct shm_p2p_chan *ch = shm_p2p_chan_at(s, op->peer, c->rank);
    size_t bytes = op->count * rt_dtype_size(op->dtype);

    if (op->state == P2P_NEW) {
        if (behind_earlier(r, i))
            return 0;
        uint64_t posted = atomic_load_explicit(&ch->posted, memory_order_relaxed);
        /* The previous message of the pair is finished (a send completes on its verdict,
         * so this holds but after a failed group). */
        if (atomic_load_explicit(&ch->taken, memory_order_acquire) != posted)
            return 0;
        uint64_t addr = 0;
        enum shm_p2p_kind kind = send_kind(c, op, bytes, &addr);
        if (kind == SHM_P2P_STAGED) {
            if (r->stage_user >= 0)
                return 0; /* another send of the group has the stage */
            r->stage_user = (long)i;
            ch->first = atomic_load_explicit(&ch->filled, memory_order_relaxed);
            ch->chunk = s->p2p_chunk;
            op->chunk = 0;
        } else if (kind == SHM_P2P_EAGER && bytes > 0) {
            memcpy(bytes <= SHM_P2P_INLINE ? ch->inline_bytes : shm_p2p_eager_room(ch), op->buf,
                   bytes);
        }
        ch->count = op->count;
        ch->dtype = (uint8_t)op->dtype;
        ch->kind = (uint8_t)kind;
        if (kind != SHM_P2P_EAGER)
            ch->addr = addr; /* an eager message's bytes may lie where addr does */
        op->msg = posted + 1;
        atomic_store_explicit(&ch->posted, op->msg, memory_order_release);
        shm_ring(s);
        op->state = kind == SHM_P2P_STAGED ? P2P_STAGING : P2P_POSTED;
    }
    if (op->state == P2P_STAGING)
        send_fill(c, op, ch, bytes);
    /* A staged send's receiver may answer (a mismatch) before every chunk moved. */
    uint64_t taken = atomic_load_explicit(&ch->taken, memory_order_acquire);
    if (taken != op->msg)
        return taken == op->msg - 1 ? 0 : corrupt(c, op, "message count", taken);
    if (r->stage_user == (long)i)
        r->stage_user = -1;
    op->state = P2P_DONE;
    if (ch->verdict == COMM_OK) {
        op->status = COMM_OK;
        return 1;
    }
    if (ch->verdict != COMM_ERR_MISMATCH)
        return corrupt(c, op, "verdict", (uint64_t)(uint32_t)ch->verdict);
    comm_dtype_t want = (comm_dtype_t)ch->want_dtype;
    rt_error(c, COMM_ERR_MISMATCH,
             "rank %d: comm_send to rank %d: rank %d's comm_recv expects %llu x %s, this send "
             "has %zu x %s; nothing was delivered (message %llu of the pair): make the counts "
             "and dtypes of each send and its receive agree",
             c->rank, op->peer, op->peer, (unsigned long long)ch->want_count,
             rt_dtype_size(want) ? rt_dtype_name(want) : "?", op->count, rt_dtype_name(op->dtype),
             (unsigned long long)op->msg);
    op->status = COMM_ERR_MISMATCH;
    return 1;
}

/* ---- receives ---- */

static void recv_finish(struct comm *c, struct coll_p2p *op, struct shm_p2p_chan *ch,
                        int32_t verdict)
{
    ch->verdict = verdict;
    atomic_store_explicit(&ch->taken, op->msg, memory_order_release);
    shm_ring(c->shm);
    op->state = P2P_DONE;
}

/* Copies the chunks the sender has staged. */
static int recv_drain(struct comm *c, struct coll_p2p *op, struct shm_p2p_chan *ch, size_t bytes)
{
    struct shm_comm *s = c->shm;
    uint64_t chunks = (bytes + ch->chunk - 1) / ch->chunk;
    uint64_t filled = atomic_load_explicit(&ch->filled, memory_order_acquire);
    uint64_t first = ch->first;
    if (filled - first > chunks)
        return corrupt(c, op, "staged chunk count", filled - first);
    bool moved = false;
    while (op->chunk < chunks && first + op->chunk < filled) {
        uint64_t off = op->chunk * ch->chunk;
        uint64_t len = bytes - off < ch->chunk ? bytes - off : ch->chunk;
        memcpy((uint8_t *)op->buf + off, shm_p2p_stage_chunk(s, op->peer, first + op->chunk), len);
        op->chunk++;
        atomic_store_explicit(&ch->drained, first + op->chunk, memory_order_release);
        moved = true;
    }
    if (moved)
        shm_ring(s);
    if (op->chunk < chunks)
        return 0;
    s->p2p_recvs[SHM_P2P_STAGED]++;
    recv_finish(c, op, ch, COMM_OK);
    return 1;
}

static int recv_step(struct comm *c, struct p2p_run *r, size_t i)
{
    struct coll_p2p *op = &r->ops[i];
    struct shm_comm *s = c->shm;
    struct shm_p2p_chan *ch = shm_p2p_chan_at(s, c->rank, op->peer);
    size_t bytes = op->count * rt_dtype_size(op->dtype);
    if (op->state == P2P_STAGING)
        return recv_drain(c, op, ch, bytes);
    if (behind_earlier(r, i))
        return 0;
    uint64_t taken = atomic_load_explicit(&ch->taken, memory_order_relaxed);
    uint64_t posted = atomic_load_explicit(&ch->posted, memory_order_acquire);
    if (posted == taken)
        return 0;
    if (posted != taken + 1)
        return corrupt(c, op, "message count", posted);
    op->msg = posted;
    uint64_t count = ch->count;
    comm_dtype_t dtype = (comm_dtype_t)ch->dtype;
    if (count != op->count || dtype != op->dtype) {
        ch->want_count = op->count;
        ch->want_dtype = (uint8_t)op->dtype;
        rt_error(c, COMM_ERR_MISMATCH,
                 "rank %d: comm_recv from rank %d: rank %d sent %llu x %s, this receive expects "
                 "%zu x %s; nothing was written to the buffer (message %llu of the pair): make "
                 "the counts and dtypes of each send and its receive agree",
                 c->rank, op->peer, op->peer, (unsigned long long)count,
                 rt_dtype_size(dtype) ? rt_dtype_name(dtype) : "?", op->count,
                 rt_dtype_name(op->dtype), (unsigned long long)op->msg);
        op->status = COMM_ERR_MISMATCH;
        recv_finish(c, op, ch, COMM_ERR_MISMATCH);
        return 1;
    }
    enum shm_p2p_kind kind = (enum shm_p2p_kind)ch->kind;
    switch (kind) {
    case SHM_P2P_EAGER:
        if (bytes > s->p2p_eager)
            return corrupt(c, op, "eager bytes", bytes);
        if (bytes > 0)
            memcpy(op->buf, bytes <= SHM_P2P_INLINE ? ch->inline_bytes : shm_p2p_eager_room(ch),
                   bytes);
        break;
    case SHM_P2P_RAW:
    case SHM_P2P_OFFSET: {
        /* coll_peer_ptr checks an offset against the pools and the heaps, and takes a
         * pointer only between thread ranks. */
        struct shm_arrival a = {.flags = kind == SHM_P2P_RAW ? SHM_BUF_SAME_PROC : SHM_BUF_IN_SEG};
        const void *src = coll_peer_ptr(c, op->peer, &a, ch->addr, bytes, "a send buffer");
        if (src == NULL)
            return COMM_ERR_PEER;
        memcpy(op->buf, src, bytes);
        break;
    }
    case SHM_P2P_CMA: {
        if (!s->cma)
            return corrupt(c, op, "kind", kind);
        comm_status_t st = shm_cma_read(c, op->peer, op->buf, ch->addr, bytes, "comm_recv");
        if (st != COMM_OK)
            return st;
        break;
    }
    case SHM_P2P_STAGED:
        /* The chunks of a staged message refused for a mismatch were never drained:
         * this one starts at the sender's count. */
        if (ch->chunk == 0 || ch->chunk > s->p2p_chunk ||
            ch->first < atomic_load_explicit(&ch->drained, memory_order_relaxed))
            return corrupt(c, op, "stage chunk", ch->chunk);
        atomic_store_explicit(&ch->drained, ch->first, memory_order_release);
        op->chunk = 0;
        op->state = P2P_STAGING;
        return recv_drain(c, op, ch, bytes);
    default:
        return corrupt(c, op, "kind", kind);
    }
    s->p2p_recvs[kind]++;
    op->status = COMM_OK;
    recv_finish(c, op, ch, COMM_OK);
    return 1;
}

/* ---- the group ---- */

/* A peer of an unfinished call that failed or died (every few polls; the wait's own
 * checks skip peers that completed the current collective, which says nothing here). */
static int watch_peers(struct comm *c, struct p2p_run *r)
{
    if ((++r->polls & 63) != 0)
        return 0;
    struct shm_comm *s = c->shm;
    bool live = false;
    uint64_t now = 0;
    if (!s->same_process && (r->polls & 1023) == 0) {
        now = rt_now_ns();
        live = now >= r->next_liveness;
        if (live)
            r->next_liveness = now + RT_LIVENESS_PERIOD_NS;
    }
    for (size_t i = 0; i < r->n; i++) {
        const struct coll_p2p *op = &r->ops[i];
        if (op->state == P2P_DONE || op->peer == c->rank)
            continue;
        int32_t st = shm_peer_status(c, op->peer);
        if (st != COMM_OK)
            return shm_peer_failed(c, op->peer, st);
        const struct shm_rank *pr = &s->ranks[op->peer];
        if (live && pr->pid != getpid() && !rt_proc_alive(pr->pid, pr->start_time)) {
            st = shm_peer_status(c, op->peer);
            if (st != COMM_OK)
                return shm_peer_failed(c, op->peer, st);
            rt_error(c, COMM_ERR_PEER,
                     "rank %d: rank %d (pid %d) exited or was killed while rank %d waited in "
                     "%s rank %d (%zu x %s); the job cannot continue: see rank %d's own output "
                     "for why and restart the job",
                     c->rank, op->peer, (int)pr->pid, c->rank, verb(op), op->peer, op->count,
                     rt_dtype_name(op->dtype), op->peer);
            return COMM_ERR_PEER;
        }
    }
    return 0;
}

/* One pass: 1 when every call is done, 0 when some waits, < 0 a failure that ends the
 * group (a peer that failed, died or wrote nonsense). */
static int run_pass(struct comm *c, struct p2p_run *r)
{
    bool all = true;
    for (size_t i = 0; i < r->n; i++) {
        struct coll_p2p *op = &r->ops[i];
        if (op->state == P2P_DONE)
            continue;
        int st = op->send ? send_step(c, r, i) : recv_step(c, r, i);
        if (st < 0)
            return st;
        all = all && op->state == P2P_DONE;
    }
    if (all)
        return 1;
    return r->polling ? watch_peers(c, r) : 0;
}

static int ready(struct comm *c, void *arg)
{
    return run_pass(c, arg);
}

/* The wait watches the peers of unfinished calls alone: a rank that left the
 * communicator after its own calls broke nothing of these. */
static bool watched(struct comm *c, void *arg, int p)
{
    const struct p2p_run *r = arg;
    (void)c;
    for (size_t i = 0; i < r->n; i++)
        if (r->ops[i].state != P2P_DONE && r->ops[i].peer == p)
            return true;
    return false;
}

static comm_status_t first_failure(const struct coll_p2p *ops, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ops[i].state == P2P_DONE && ops[i].status != COMM_OK)
            return ops[i].status;
    return COMM_OK;
}

/* What the wait names in a failure: the first unfinished call (shm_describe_fn). */
static void describe(struct comm *c, void *arg, char *what, size_t len, char *missing, size_t mlen)
{
    const struct p2p_run *r = arg;
    const struct coll_p2p *ops = r->ops;
    size_t n = r->n;
    for (size_t i = 0; i < n; i++) {
        if (ops[i].state == P2P_DONE)
            continue;
        snprintf(what, len, "%s rank %d (%zu x %s%s)", verb(&ops[i]), ops[i].peer, ops[i].count,
                 rt_dtype_name(ops[i].dtype), n > 1 ? ", in a group" : "");
        snprintf(missing, mlen, "make the matching %s rank %d",
                 ops[i].send ? "comm_recv from" : "comm_send to", c->rank);
        return;
    }
    snprintf(what, len, "a group of sends and receives");
    snprintf(missing, mlen, "make the matching calls");
}

static int find_stage_user(struct comm *c, const struct coll_p2p *ops, size_t n)
{
    (void)c;
    for (size_t i = 0; i < n; i++)
        if (ops[i].send && ops[i].state == P2P_STAGING)
            return (int)i;
    for (size_t i = 0; i < n; i++)
        if (ops[i].send && ops[i].state == P2P_POSTED && ops[i].chunk > 0)
            return (int)i;
    return -1;
}

comm_status_t coll_host_p2p(struct comm *c, struct coll_p2p *ops, size_t n)
{
    /* No clock read per call: the first liveness look comes after 1024 polls, then one
     * each period. */
    struct p2p_run r = {.ops = ops, .n = n, .stage_user = -1, .next_liveness = 0};
    int st = run_pass(c, &r);
    if (st == 0)
        st = (int)shm_wait_watch(c, ready, watched, &r, describe);
    if (st < 0)
        return (comm_status_t)st;
    return first_failure(ops, n);
}

int coll_host_p2p_poll(struct comm *c, struct coll_p2p *ops, size_t n)
{
    /* The stage's user is found again from the calls' states: polls keep no state. */
    struct p2p_run r = {.ops = ops,
                        .n = n,
                        .stage_user = find_stage_user(c, ops, n),
                        .polls = 63,
                        .next_liveness = 0};
    int st = run_pass(c, &r);
    if (st < 0)
        return st;
    if (st == 0)
        return 0;
    comm_status_t f = first_failure(ops, n);
    return f != COMM_OK ? (int)f : 1;
}
