/* SPDX-License-Identifier: MIT */
/*
 * The inter-host steps of the hierarchical collectives, every wait bounded by the call's
 * deadline.  Allreduce: the hosts' partial results meet in arcomm's own exchange (point
 * to point, combined here in the binomial tree's order), so the bits of a reduction
 * across hosts never depend on the MPI library's choice of algorithm; each rank's status
 * travels beside the first segment of every round.  Broadcast: MPI_Ibcast of segments
 * (a byte copy) with the status exchange beside it.  A rank whose intra-host step failed
 * still makes the step (its data is then meaningless) so that its failure reaches every
 * rank of the step instead of leaving them blocked in MPI.
 */
#include "hier_inter.h"

#include <stdio.h>
#include <stdlib.h>

comm_status_t hier_intra_failed(struct comm *c, comm_status_t st, const char *what)
{
    if (st == COMM_OK)
        return st;
    rt_error(c, st, "rank %d: %s on this host failed: %s", c->rank, what,
             hier_of(c)->iops->last_error(hier_of(c)->intra));
    return st;
}

/* MPI's tags of the exchange's data and status words on an inter-host communicator
 * (nothing else sends point to point there). */
#define HIER_TREE_TAG 0x5472

/* Segments [off, off + n) of buf, HIER_SEGS_IN_FLIGHT at a time: from mc's root to
 * every rank (MPI_Ibcast: a byte copy, so the order of its tree changes no bit). */
static comm_status_t bcast_segments(struct comm *c, const struct hier_inter *s, int root,
                                    uint64_t deadline)
{
    size_t seg = HIER_SEG_BYTES / s->esize ? HIER_SEG_BYTES / s->esize : 1;
    MPI_Request reqs[HIER_SEGS_IN_FLIGHT];
    size_t off = 0;
    while (off < s->n) {
        int nr = 0;
        while (nr < HIER_SEGS_IN_FLIGHT && off < s->n) {
            size_t k = s->n - off < seg ? s->n - off : seg;
            int err = MPI_Ibcast((char *)s->buf + off * s->esize, (int)(k * s->esize), MPI_BYTE,
                                 root, s->mc, &reqs[nr]);
            if (err != MPI_SUCCESS)
                return mpi_link_error(c, err, "MPI_Ibcast");
            nr++;
            off += k;
        }
        comm_status_t st = mpi_link_wait(c, &hier_of(c)->link, reqs, nr, deadline, true, s->what);
        if (st != COMM_OK)
            return st;
    }
    return COMM_OK;
}

/*
 * Round k (1, 2, 4, ... < h) of the exchange for rank me of h: the block of 2k ranks
 * that holds me is a lower half [b, b + k) and an upper half [b + k, min(b + 2k, h)) of
 * u ranks.  Every rank of a half holds that half's partial result; after the round every
 * rank of the block holds lower op upper, combined on each rank in that order from the
 * same operands, so every rank gets the same bits and the order is the binomial tree's
 * ((p0 op p1) op (p2 op p3)) ..., where 3 hosts give (p0 op p1) op p2.  A lower rank
 * takes the upper partial from me + k, or (no such rank, h not a power of two) from rank
 * b + k + (me - b) % u; an upper rank takes the lower partial from me - k, and sends its
 * own to me - k and to the lower ranks without a partner that it serves.  A rank whose
 * block has no upper half (b + k >= h) sits the round out, as the tree's root of that
 * block has no child at distance k.  Every rank ends with the whole result: no broadcast
 * after it.
 */
enum round_mode {
    ROUND_LOWER,  /* combine: this rank's partial is the left operand */
    ROUND_UPPER,  /* combine: the partner's partial is the left operand */
    ROUND_GATHER, /* no combine: the partner's part of the result lands in buf */
};

struct tree_round {
    int from; /* the rank whose partial this rank takes; -1: sits out */
    enum round_mode mode;
    int to0; /* the ranks this rank's partial goes to: to0 + t * stride, t < nto */
    int stride;
    int nto;
    size_t soff, sn; /* the elements of buf sent */
    size_t roff, rn; /* the elements of buf that what comes combines with (or fills) */
    bool status;     /* the status words travel with segment 0 */
    /* Halving's last round: each combined segment goes straight back to the partner,
     * and the partner's comes into [soff, soff + sn) (tag + 2), so that the first
     * gathering round overlaps this one instead of waiting for its end. */
    bool back;
};

static void tree_round_plan(int me, int h, int k, size_t n, struct tree_round *r)
{
    int b = me & ~(2 * k - 1), u = h - (b + k) < k ? h - (b + k) : k;
    *r = (struct tree_round){.from = -1, .stride = u, .sn = n, .rn = n, .status = true};
    if (u <= 0)
        return;
    r->mode = me < b + k ? ROUND_LOWER : ROUND_UPPER;
    if (r->mode == ROUND_LOWER) {
        r->from = me + k < h ? me + k : b + k + (me - b) % u;
        r->to0 = me + k;
        r->nto = me + k < h;
        return;
    }
    /* me - k, then the lower ranks l with l + k >= h (l - b >= u) that take their upper
     * partial from me: (l - b) % u == me - b - k. */
    r->from = r->to0 = me - k;
    r->nto = (b + k - (me - k) + u - 1) / u;
}

/* Posts segment i of a round (seg elements a segment): the receive (into slot, or into
 * buf when gathering) and the sends of buf, each where the round has elements left
 * (segment 0 always: it carries the status words, w[0] out, w[1] in, and may be empty). */
/* Where segment i (seg elements a segment, n of them) lies: its bytes in buf (full
 * width), or in the encoded partial enc (s->wire: whole blocks, seg a multiple of
 * WIRE_BLOCK_ELEMS). */
static size_t seg_bytes(const struct hier_inter *s, size_t n)
{
    return s->wire != NULL ? wire_bytes(s->wire, COMM_F32, n) : n * s->esize;
}

static comm_status_t post_segment(struct comm *c, const struct hier_inter *s,
                                  const struct tree_round *r, size_t i, size_t seg, char *slot,
                                  const char *enc, struct mpi_status_word *w, MPI_Request *reqs,
                                  int *nreq)
{
    int nr = 0, err = MPI_SUCCESS;
    const char *call = "MPI_Irecv";
    if (i == 0 && r->status)
        err = MPI_Irecv(&w[1], 2, MPI_INT64_T, r->from, HIER_TREE_TAG + 1, s->mc, &reqs[nr++]);
    if (err == MPI_SUCCESS && (i == 0 || i * seg < r->rn)) {
        size_t n = r->rn - i * seg < seg ? r->rn - i * seg : seg;
        char *dst =
            r->mode == ROUND_GATHER ? (char *)s->buf + (r->roff + i * seg) * s->esize : slot;
        size_t bytes = r->mode == ROUND_GATHER ? n * s->esize : seg_bytes(s, n);
        err = MPI_Irecv(dst, (int)bytes, MPI_BYTE, r->from, HIER_TREE_TAG, s->mc, &reqs[nr++]);
    }
    bool data = i == 0 || i * seg < r->sn;
    size_t n = data ? (r->sn - i * seg < seg ? r->sn - i * seg : seg) : 0;
    for (int t = 0; t < r->nto && err == MPI_SUCCESS; t++) {
        call = "MPI_Isend";
        int to = r->to0 + t * r->stride;
        if (i == 0 && r->status)
            err = MPI_Isend(&w[0], 2, MPI_INT64_T, to, HIER_TREE_TAG + 1, s->mc, &reqs[nr++]);
        if (err == MPI_SUCCESS && data && enc != NULL)
            err = MPI_Isend(enc + seg_bytes(s, i * seg), (int)seg_bytes(s, n), MPI_BYTE, to,
                            HIER_TREE_TAG, s->mc, &reqs[nr++]);
        else if (err == MPI_SUCCESS && data)
            err = MPI_Isend((char *)s->buf + (r->soff + i * seg) * s->esize, (int)(n * s->esize),
                            MPI_BYTE, to, HIER_TREE_TAG, s->mc, &reqs[nr++]);
    }
    *nreq = nr;
    return err == MPI_SUCCESS ? COMM_OK : mpi_link_error(c, err, call);
}

/* Halving's last round, segment i combined (n elements at roff + i * seg): it goes back
 * to the partner, and the partner's segment i comes into the part this rank sent. */
static comm_status_t post_back(struct comm *c, const struct hier_inter *s,
                               const struct tree_round *r, size_t i, size_t seg, size_t n,
                               MPI_Request *reqs, int *nreq)
{
    int err = MPI_SUCCESS;
    if (i == 0 || i * seg < r->sn) {
        size_t k = r->sn - i * seg < seg ? r->sn - i * seg : seg;
        err = MPI_Irecv((char *)s->buf + (r->soff + i * seg) * s->esize, (int)(k * s->esize),
                        MPI_BYTE, r->from, HIER_TREE_TAG + 2, s->mc, &reqs[(*nreq)++]);
        if (err != MPI_SUCCESS)
            return mpi_link_error(c, err, "MPI_Irecv");
    }
    if (i == 0 || i * seg < r->rn) {
        err = MPI_Isend((char *)s->buf + (r->roff + i * seg) * s->esize, (int)(n * s->esize),
                        MPI_BYTE, r->to0, HIER_TREE_TAG + 2, s->mc, &reqs[(*nreq)++]);
        if (err != MPI_SUCCESS)
            return mpi_link_error(c, err, "MPI_Isend");
    }
    return COMM_OK;
}

/* Elementwise MAX of two status words, as the status exchange's MPI_MAX. */
static void status_max(struct mpi_status_word *acc, const struct mpi_status_word *in)
{
    if (in->neg_status > acc->neg_status)
        acc->neg_status = in->neg_status;
    if (in->rank > acc->rank)
        acc->rank = in->rank;
}

/*
 * One round: the segments of buf go to r->to while the partner's arrive in tmp
 * (HIER_SEGS_IN_FLIGHT slots), each combined as soon as its receive and this rank's sends
 * of it are done (the combine overwrites what was sent), while the next ones travel.
 * The status words travel with segment 0 and are waited for with it.
 */
/* The codec's buffer of a step (s->wire): this rank's encoded partial. */
struct wire_bufs {
    char *enc;
};

/* Encodes segment i of this rank's partial (seg elements a segment, of r->sn at
 * r->soff) into its place in enc, just before the segment is sent. */
static void encode_segment(const struct hier_inter *s, const struct tree_round *r, size_t i,
                           size_t seg, char *enc)
{
    if (i * seg >= r->sn)
        return;
    size_t n = r->sn - i * seg < seg ? r->sn - i * seg : seg;
    const float *mine = (const float *)(void *)((char *)s->buf + (r->soff + i * seg) * s->esize);
    wire_encode(s->wire, COMM_F32, mine, n, enc + seg_bytes(s, i * seg));
}

static comm_status_t tree_round_run(struct comm *c, const struct hier_inter *s,
                                    const struct tree_round *r, size_t seg, char *tmp,
                                    size_t slot_bytes, const struct wire_bufs *wb,
                                    struct mpi_status_word *w, comm_op_t op, uint64_t deadline)
{
    /* With a codec (exchange rounds only: soff = roff = 0, sn = rn = n) each segment of
     * this rank's partial is encoded just before it is sent, so encoding overlaps the
     * segments already travelling, and this rank's own operand is the decoded value of
     * the bytes it sent: the partner decodes the same bytes, so both combine the same
     * operands in the same order, decoded and summed in one pass as each segment of the
     * partner's arrives. */
    char *enc = s->wire != NULL && r->mode != ROUND_GATHER ? wb->enc : NULL;
    /* Per segment in flight: a receive and the sends, twice with segment 0's words. */
    size_t per = 2 * (1 + (size_t)r->nto);
    MPI_Request *reqs = malloc(HIER_SEGS_IN_FLIGHT * per * sizeof(*reqs));
    if (reqs == NULL) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory for %s", c->rank, s->what);
        return COMM_ERR_NOMEM;
    }
    int nreq[HIER_SEGS_IN_FLIGHT];
    size_t most = r->sn > r->rn ? r->sn : r->rn, nseg = most ? (most + seg - 1) / seg : 1;
    size_t posted = 0;
    int nback = 0;
    MPI_Request *back = r->back ? malloc(2 * nseg * sizeof(*back)) : NULL;
    if (r->back && back == NULL) {
        free(reqs);
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory for %s", c->rank, s->what);
        return COMM_ERR_NOMEM;
    }
    comm_status_t st = COMM_OK;
    for (size_t i = 0; i < nseg && st == COMM_OK; i++) {
        while (posted < nseg && posted < i + HIER_SEGS_IN_FLIGHT && st == COMM_OK) {
            int q = (int)(posted % HIER_SEGS_IN_FLIGHT);
            if (enc != NULL)
                encode_segment(s, r, posted, seg, enc);
            st = post_segment(c, s, r, posted, seg, tmp + (size_t)q * slot_bytes, enc, w,
                              reqs + q * per, &nreq[q]);
            posted++;
        }
        if (st != COMM_OK)
            break;
        int q = (int)(i % HIER_SEGS_IN_FLIGHT);
        st = mpi_link_wait(c, &hier_of(c)->link, reqs + q * per, nreq[q], deadline, true, s->what);
        if (st != COMM_OK)
            break;
        if (i == 0 && r->status)
            status_max(&w[0], &w[1]);
        size_t n = r->rn > i * seg ? (r->rn - i * seg < seg ? r->rn - i * seg : seg) : 0;
        if (r->mode != ROUND_GATHER && n > 0) {
            char *mine = (char *)s->buf + (r->roff + i * seg) * s->esize;
            char *theirs = tmp + (size_t)q * slot_bytes;
            const char *own = enc != NULL ? enc + seg_bytes(s, i * seg) : NULL;
            if (enc != NULL && r->mode == ROUND_LOWER)
                wire_decode_sum(s->wire, COMM_F32, own, theirs, n, (float *)(void *)mine);
            else if (enc != NULL)
                wire_decode_sum(s->wire, COMM_F32, theirs, own, n, (float *)(void *)mine);
            else if (r->mode == ROUND_LOWER)
                hier_of(c)->iops->combine(mine, mine, theirs, n, s->dtype, op);
            else
                hier_of(c)->iops->combine(mine, theirs, mine, n, s->dtype, op);
        }
        if (r->back)
            st = post_back(c, s, r, i, seg, n, back, &nback);
    }
    if (st == COMM_OK && r->back)
        st = mpi_link_wait(c, &hier_of(c)->link, back, nback, deadline, true, s->what);
    free(back);
    free(reqs); /* MPI keeps no pointer to the arrays: requests are handles */
    return st;
}

/* Large messages over a power of two of hosts: recursive halving, then doubling.  Not
 * with a codec: halving would send the result back encoded a second time, and its
 * halves' edges would cut the codec's blocks where the exchange's do not. */
static bool halving(const struct hier_inter *s, int h)
{
    return h > 1 && (h & (h - 1)) == 0 && s->n * s->esize >= HIER_HALVING_BYTES && s->wire == NULL;
}

/*
 * The same order as tree_round_plan's exchange for h a power of two, with each rank
 * combining only its share: round k = 1, 2, ..., h / 2 halves this rank's region of the
 * vector, keeping the half its side of the pair owns (lower rank: the first) and sending
 * the other, then combines lower op upper on what it kept; after the last round it
 * holds 1/h of the result (every element combined as ((p0 op p1) op (p2 op p3)) ...),
 * and rounds k = h / 2, ..., 1 swap the kept parts back (a byte copy) until every rank
 * has all of it.  Each rank sends and combines about (h - 1) / h of the vector instead
 * of log2 h times all of it.  The status words travel in the halving rounds.
 */
static comm_status_t halving_allreduce(struct comm *c, const struct hier_inter *s, int me, int h,
                                       size_t seg, char *tmp, size_t slot_bytes,
                                       struct mpi_status_word *w, comm_op_t op, uint64_t deadline)
{
    size_t lo = 0, hi = s->n, mids[32];
    int rounds = 0;
    comm_status_t st = COMM_OK;
    for (int k = 1; k < h && st == COMM_OK; k <<= 1, rounds++) {
        size_t mid = lo + (hi - lo) / 2;
        bool lower = (me & k) == 0;
        struct tree_round r = {
            .from = me ^ k,
            .mode = lower ? ROUND_LOWER : ROUND_UPPER,
            .to0 = me ^ k,
            .nto = 1,
            .soff = lower ? mid : lo,
            .sn = lower ? hi - mid : mid - lo,
            .roff = lower ? lo : mid,
            .rn = lower ? mid - lo : hi - mid,
            .status = true,
            .back = 2 * k == h,
        };
        mids[rounds] = lower ? hi : lo; /* the other end of the parent region */
        st = tree_round_run(c, s, &r, seg, tmp, slot_bytes, NULL, w, op, deadline);
        if (lower)
            hi = mid;
        else
            lo = mid;
    }
    /* The last halving round sent its result back: the region of the round before. */
    if (((me & (h / 2)) == 0))
        hi = mids[--rounds];
    else
        lo = mids[--rounds];
    for (int k = h / 4; k >= 1 && st == COMM_OK; k >>= 1) {
        bool lower = (me & k) == 0;
        size_t other = mids[--rounds]; /* the partner's part: [hi, other) or [other, lo) */
        struct tree_round r = {
            .from = me ^ k,
            .mode = ROUND_GATHER,
            .to0 = me ^ k,
            .nto = 1,
            .soff = lo,
            .sn = hi - lo,
            .roff = lower ? hi : other,
            .rn = lower ? other - hi : lo - other,
        };
        st = tree_round_run(c, s, &r, seg, tmp, slot_bytes, NULL, w, op, deadline);
        if (lower)
            hi = other;
        else
            lo = other;
    }
    return st;
}

/*
 * The elements of a segment of a step of n f32 elements that travels in the codec wire:
 * HIER_SEG_BYTES of encoded bytes, whole blocks (a multiple of WIRE_BLOCK_ELEMS for every
 * codec), or the whole message.  As many bytes travel at once as at full width: with
 * segments of HIER_SEG_BYTES of f32, int8's four in flight would be 272 KiB, which a
 * 10 Gbit/s link drains in 0.2 ms, less than a time slice of a rank that shares its core.
 */
static size_t wire_seg_elems(const struct wire_row *wire, size_t n)
{
    size_t seg = wire->block_bytes != 0 ? HIER_SEG_BYTES / wire->block_bytes * wire->block_elems
                                        : HIER_SEG_BYTES / wire->elem_bytes;
    seg -= seg % WIRE_BLOCK_ELEMS;
    return seg < n ? seg : n;
}

/*
 * The hosts' partial results combined in arcomm's order, never the MPI library's (whose
 * allreduce picks its own algorithm: another one, or another collective component,
 * would change the bits): the exchange of tree_round_plan, point to point, in the work
 * dtype with the host reduction's own arithmetic (iops->combine: the same NaN and
 * wrap-around rules as on one host).  Every rank ends with the result, and with the
 * worst status of every rank (w[0]), carried beside the data.  tmp holds
 * HIER_SEGS_IN_FLIGHT segments of a partner's data; on a failed wait the receives into
 * it may still be under way, so it is left to MPI (mpi_ctl_done), as are the words.
 */
static comm_status_t tree_allreduce(struct comm *c, const struct hier_inter *s, comm_status_t mine,
                                    uint64_t deadline)
{
    int me = 0, h = 1;
    MPI_Comm_rank(s->mc, &me);
    MPI_Comm_size(s->mc, &h);
    size_t seg =
        s->wire != NULL ? wire_seg_elems(s->wire, s->n) : hier_inter_seg_elems(s->n, s->esize);
    comm_op_t op = s->op == COMM_AVG ? COMM_SUM : s->op; /* AVG divides after the step */
    size_t nslots =
        (s->n + seg - 1) / seg < HIER_SEGS_IN_FLIGHT ? (s->n + seg - 1) / seg : HIER_SEGS_IN_FLIGHT;
    /* A slot holds a segment as it travels (encoded, with a codec). */
    size_t slot_bytes = s->wire != NULL ? wire_bytes(s->wire, COMM_F32, seg) : seg * s->esize;
    struct mpi_status_word *w = mpi_ctl_new(2 * sizeof(*w));
    char *tmp = h > 1 ? mpi_ctl_new((nslots ? nslots : 1) * slot_bytes) : NULL;
    struct wire_bufs wb = {0};
    if (s->wire != NULL && h > 1)
        wb.enc = mpi_ctl_new(wire_bytes(s->wire, COMM_F32, s->n));
    if (w == NULL || (h > 1 && tmp == NULL) || (s->wire != NULL && h > 1 && wb.enc == NULL)) {
        mpi_ctl_done(w, true);
        mpi_ctl_done(tmp, true);
        mpi_ctl_done(wb.enc, true);
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory for %s", c->rank, s->what);
        return COMM_ERR_NOMEM;
    }
    w[0].neg_status = -(int64_t)mine;
    w[0].rank = mine == COMM_OK ? -1 : c->rank;
    comm_status_t st = COMM_OK;
    if (halving(s, h))
        st = halving_allreduce(c, s, me, h, seg, tmp, slot_bytes, w, op, deadline);
    for (int k = 1; k < h && st == COMM_OK && !halving(s, h); k <<= 1) {
        struct tree_round r;
        tree_round_plan(me, h, k, s->n, &r);
        if (r.from >= 0)
            st = tree_round_run(c, s, &r, seg, tmp, slot_bytes, &wb, w, op, deadline);
    }
    bool completed = st == COMM_OK; /* else requests may be under way: left to MPI */
    if (completed)
        st = mpi_link_status_check(c, mine, &w[0], s->what);
    mpi_ctl_done(tmp, completed);
    mpi_ctl_done(wb.enc, completed); /* sends from it may be under way */
    mpi_ctl_done(w, completed);
    return st;
}

size_t hier_inter_seg_elems(size_t n, size_t esize)
{
    size_t seg = HIER_SEG_BYTES / esize;
    return seg == 0 ? 1 : seg > n ? n : seg;
}

comm_status_t hier_inter_segments(struct comm *c, const struct hier_inter *s, comm_status_t mine,
                                  uint64_t deadline)
{
    if (s->kind == HIER_INTER_ALLREDUCE)
        return tree_allreduce(c, s, mine, deadline);
    struct mpi_status_word *w = mpi_ctl_new(2 * sizeof(*w));
    if (w == NULL) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory for %s", c->rank, s->what);
        return COMM_ERR_NOMEM;
    }
    MPI_Request req;
    int err = mpi_link_status_start(s->mc, c->rank, mine, &w[0], &w[1], &req);
    if (err != MPI_SUCCESS) {
        mpi_ctl_done(w, true);
        return mpi_link_error(c, err, "MPI_Iallreduce (status)");
    }
    comm_status_t st = bcast_segments(c, s, s->root, deadline);
    if (st == COMM_OK)
        st = mpi_link_wait(c, &hier_of(c)->link, &req, 1, deadline, true, s->what);
    if (st != COMM_OK) {
        mpi_ctl_done(w, false); /* the status request may be under way */
        return st;
    }
    st = mpi_link_status_check(c, mine, &w[1], s->what);
    mpi_ctl_done(w, true);
    return st;
}

comm_status_t hier_inter_one(struct comm *c, MPI_Comm mc, MPI_Request *data, int err,
                             const char *call, comm_status_t mine, uint64_t deadline,
                             const char *what)
{
    if (err != MPI_SUCCESS)
        return mpi_link_error(c, err, call);
    struct mpi_status_word *w = mpi_ctl_new(2 * sizeof(*w));
    if (w == NULL) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory for %s", c->rank, what);
        return COMM_ERR_NOMEM; /* the data request is left to MPI, as on any failure */
    }
    MPI_Request reqs[2] = {*data, MPI_REQUEST_NULL};
    err = mpi_link_status_start(mc, c->rank, mine, &w[0], &w[1], &reqs[1]);
    if (err != MPI_SUCCESS) {
        mpi_ctl_done(w, true);
        return mpi_link_error(c, err, "MPI_Iallreduce (status)");
    }
    comm_status_t st = mpi_link_wait(c, &hier_of(c)->link, reqs, 2, deadline, true, what);
    bool completed = st == COMM_OK;
    if (completed)
        st = mpi_link_status_check(c, mine, &w[1], what);
    mpi_ctl_done(w, completed);
    return st;
}
