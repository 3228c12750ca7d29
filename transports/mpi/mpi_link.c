/* SPDX-License-Identifier: MIT */
/*
 * MPI as the link between hosts: datatype and op maps, the bounded wait every
 * inter-host step ends with, the status every step carries, and freeing.
 */
#include "mpi_link.h"

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

MPI_Datatype mpi_link_dtype(comm_dtype_t dtype)
{
    switch (dtype) {
    case COMM_F32:
        return MPI_FLOAT;
    case COMM_F64:
        return MPI_DOUBLE;
    case COMM_I32:
        return MPI_INT32_T;
    case COMM_I64:
        return MPI_INT64_T;
    case COMM_I8:
        return MPI_INT8_T;
    case COMM_U8:
        return MPI_UINT8_T;
    case COMM_U32:
        return MPI_UINT32_T;
    case COMM_U64:
        return MPI_UINT64_T;
    default:
        return MPI_DATATYPE_NULL; /* f16, bf16: the hierarchical paths widen them to f32 */
    }
}

/* inout[i] += in[i] modulo 256: the same bits for MPI_INT8_T and MPI_UINT8_T. */
static void sum8_wrap(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const uint8_t *a = in;
    uint8_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = (uint8_t)(b[i] + a[i]);
}

int mpi_link_ops_create(struct mpi_link *l)
{
    return MPI_Op_create(sum8_wrap, 1, &l->sum8);
}

MPI_Op mpi_link_op(const struct mpi_link *l, comm_op_t op, comm_dtype_t dtype)
{
    if ((op == COMM_SUM || op == COMM_AVG) && (dtype == COMM_I8 || dtype == COMM_U8))
        return l->sum8;
    switch (op) {
    case COMM_MAX:
        return MPI_MAX;
    case COMM_MIN:
        return MPI_MIN;
    case COMM_PROD:
        return MPI_PROD;
    default:
        return MPI_SUM; /* SUM, and AVG's sum */
    }
}

comm_status_t mpi_link_error(struct comm *c, int err, const char *call)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(err, text, &len);
    rt_error(c, COMM_ERR_SYSTEM, "rank %d: %s failed: %s (MPI error %d); check the MPI job",
             c->rank, call, text, err);
    return COMM_ERR_SYSTEM;
}

/* The notices this rank sends: their buffer and requests live until every send is done. */
struct mpi_notice_out {
    int64_t msg[4];
    int n;
    MPI_Request reqs[];
};

int mpi_link_notice_start(struct mpi_link *l)
{
    l->noticed = false;
    return MPI_Irecv(l->notice_in, 4, MPI_INT64_T, MPI_ANY_SOURCE, MPI_LINK_NOTICE_TAG, l->world,
                     &l->notice_req);
}

void mpi_link_notify(struct comm *c, struct mpi_link *l, comm_status_t status)
{
    if (l == NULL || l->world == MPI_COMM_NULL || l->notice_out != NULL || l->noticed)
        return;
    int size = 0;
    MPI_Comm_size(l->world, &size);
    struct mpi_notice_out *o = malloc(sizeof(*o) + (size_t)size * sizeof(MPI_Request));
    if (o == NULL)
        return; /* the peers learn it at their deadline, as without notices */
    o->msg[0] = l->notice_key;
    o->msg[1] = status;
    o->msg[2] = c->rank;
    o->msg[3] = c->seq;
    o->n = 0;
    for (int p = 0; p < size; p++)
        if (p != c->rank && MPI_Isend(o->msg, 4, MPI_INT64_T, p, MPI_LINK_NOTICE_TAG, l->world,
                                      &o->reqs[o->n]) == MPI_SUCCESS)
            o->n++;
    l->notice_out = o;
}

/* Has a notice come?  Then COMM_ERR_PEER naming its sender, in c's message. */
static comm_status_t notice_check(struct comm *c, struct mpi_link *l, const char *what)
{
    while (!l->noticed) {
        int got = 0;
        if (l->notice_req == MPI_REQUEST_NULL ||
            MPI_Test(&l->notice_req, &got, MPI_STATUS_IGNORE) != MPI_SUCCESS || !got)
            return COMM_OK;
        if (l->notice_in[0] == l->notice_key) {
            l->noticed = true;
        } else if (mpi_link_notice_start(l) != MPI_SUCCESS) {
            l->notice_req = MPI_REQUEST_NULL; /* no more notices: deadlines as before */
            return COMM_OK;
        }
    }
    rt_error(c, COMM_ERR_PEER,
             "rank %d: rank %lld failed in its call %lld (%s) and told every rank, while this "
             "rank waited in %s (call %u); see that rank's comm_last_error",
             c->rank, (long long)l->notice_in[2], (long long)l->notice_in[3],
             rt_status_string((comm_status_t)l->notice_in[1]), what, c->seq);
    return COMM_ERR_PEER;
}

/* The requests of mpi_link_wait, as a mpi_link_poll_fn. */
struct testall_arg {
    MPI_Request *reqs;
    int n;
};

static comm_status_t testall(struct comm *c, void *arg, bool *done)
{
    struct testall_arg *a = arg;
    int flag = 0;
    int err = MPI_Testall(a->n, a->reqs, &flag, MPI_STATUSES_IGNORE);
    if (err != MPI_SUCCESS)
        return mpi_link_error(c, err, "MPI_Testall");
    *done = flag != 0;
    return COMM_OK;
}

comm_status_t mpi_link_wait(struct comm *c, struct mpi_link *l, MPI_Request *reqs, int n,
                            uint64_t deadline, bool abortable, const char *what)
{
    struct testall_arg a = {reqs, n};
    return mpi_link_wait_for(c, l, testall, &a, deadline, abortable, what);
}

/*
 * A step failed (pst, its message on c): when MPI failed it, most often because a rank
 * died with a transfer to it in flight.  The rank that saw the death (its host's peers,
 * within a liveness period) tells every rank; wait up to 3 periods (never past deadline)
 * for that notice, or for this host's watch to find the dead rank itself, and report
 * that (COMM_ERR_PEER, MPI's error after it) rather than MPI's bare error.
 */
static comm_status_t explain_mpi_failure(struct comm *c, struct mpi_link *l, comm_status_t pst,
                                         uint64_t deadline, const char *what)
{
    if (l == NULL)
        return pst;
    char mpi_said[RT_ERRMSG_BYTES];
    snprintf(mpi_said, sizeof(mpi_said), "%s", c->errmsg);
    uint64_t until = rt_now_ns() + 3 * RT_LIVENESS_PERIOD_NS;
    for (;;) {
        comm_status_t st = notice_check(c, l, what);
        if (st == COMM_OK && l->watch != NULL)
            st = l->watch(c, l->watch_arg);
        if (st != COMM_OK) {
            size_t n = strlen(c->errmsg);
            snprintf(c->errmsg + n, sizeof(c->errmsg) - n, " (MPI also failed: %s)", mpi_said);
            return st;
        }
        uint64_t now = rt_now_ns();
        if (rt_passed(until, now) || rt_passed(deadline, now))
            break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    snprintf(c->errmsg, sizeof(c->errmsg), "%s", mpi_said);
    return pst;
}

static comm_status_t wait_for(struct comm *c, struct mpi_link *l, mpi_link_poll_fn poll, void *arg,
                              uint64_t deadline, bool abortable, const char *what);

comm_status_t mpi_link_wait_for(struct comm *c, struct mpi_link *l, mpi_link_poll_fn poll,
                                void *arg, uint64_t deadline, bool abortable, const char *what)
{
    comm_status_t st = wait_for(c, l, poll, arg, deadline, abortable, what);
    /* Given up: what it waited for stays MPI's, and so do l's communicators. */
    if (st != COMM_OK && l != NULL)
        l->abandoned = true;
    return st;
}

static comm_status_t wait_for(struct comm *c, struct mpi_link *l, mpi_link_poll_fn poll, void *arg,
                              uint64_t deadline, bool abortable, const char *what)
{
    uint64_t start = 0, now = 0, next_watch = 0, next_hook = RT_NEVER;
    for (unsigned polls = 0;; polls++) {
        bool done = false;
        comm_status_t pst = poll(c, arg, &done);
        if (pst == COMM_ERR_SYSTEM)
            return explain_mpi_failure(c, l, pst, deadline, what);
        if (pst != COMM_OK)
            return pst;
        if (done)
            return COMM_OK;
        if (abortable && rt_abort_requested(c)) {
            rt_error(c, COMM_ERR_ABORTED, "rank %d: %s on this communicator during %s (call %u)",
                     c->rank, rt_abort_cause(c), what, c->seq);
            return COMM_ERR_ABORTED;
        }
        /* A clock reading costs more than a poll: read it (and look for a failure
         * notice) every 64 polls. */
        if ((polls & 63) != 63)
            continue;
        /* Notices only once the wait lasted 20 ms: a step that completes by itself
         * is not abandoned (its peers need this rank's part of it). */
        if (l != NULL && now - start > 20000000ull) {
            comm_status_t st = notice_check(c, l, what);
            if (st != COMM_OK)
                return st;
        }
        now = rt_now_ns();
        if (start == 0) {
            start = now;
            next_watch = now + RT_LIVENESS_PERIOD_NS;
            next_hook = abortable ? rt_wait_hook_first(c, now) : RT_NEVER;
        }
        if (rt_wait_hook_run(c, now, &next_hook)) {
            rt_error(c, COMM_ERR_ABORTED, "rank %d: %s during %s (call %u)", c->rank,
                     rt_abort_cause(c), what, c->seq);
            return COMM_ERR_ABORTED;
        }
        if (l != NULL && l->watch != NULL && now >= next_watch) {
            next_watch = now + RT_LIVENESS_PERIOD_NS;
            comm_status_t st = l->watch(c, l->watch_arg);
            if (st != COMM_OK)
                return st;
        }
        if (rt_passed(deadline, now)) {
            rt_error(c, COMM_ERR_TIMEOUT,
                     "rank %d: timed out after %ld ms in %s (call %u): a rank of another host "
                     "did not arrive (it may not have made this call, or it is stuck or dead); "
                     "every rank must make the same calls in the same order, or raise "
                     "ARCOMM_TIMEOUT_MS",
                     c->rank, c->timeout_ms, what, c->seq);
            return COMM_ERR_TIMEOUT;
        }
        /* MPI's nonblocking collectives progress only inside MPI calls: keep polling,
         * yielding the core (oversubscribed hosts need the peers to run), and sleep
         * only once a wait has lasted long enough to be a late peer, not a transfer. */
        if (now - start > 20000000ull) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        } else {
            sched_yield();
        }
    }
}

void mpi_link_ignore_sigpipe(const struct comm *c)
{
    struct sigaction now;
    if (sigaction(SIGPIPE, NULL, &now) != 0 || (now.sa_flags & SA_SIGINFO) ||
        now.sa_handler != SIG_DFL)
        return;
    struct sigaction ign;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    if (sigaction(SIGPIPE, &ign, NULL) == 0)
        rt_log(c, RT_LOG_INFO,
               "rank %d: SIGPIPE is ignored from now on in this process (it was at its default, "
               "which ends the process): a write by MPI to the socket of a peer that died then "
               "fails as an error that this rank reports, instead of ending it; a program that "
               "wants SIGPIPE sets its handler after comm_init_mpi",
               c->rank);
}

void *mpi_ctl_new(size_t bytes)
{
    return calloc(1, bytes);
}

void mpi_ctl_done(void *p, bool completed)
{
    if (completed)
        free(p);
}

int mpi_link_status_start(MPI_Comm mc, int rank, comm_status_t mine, struct mpi_status_word *in,
                          struct mpi_status_word *out, MPI_Request *req)
{
    in->neg_status = -(int64_t)mine;
    in->rank = mine == COMM_OK ? -1 : rank;
    return MPI_Iallreduce(in, out, 2, MPI_INT64_T, MPI_MAX, mc, req);
}

comm_status_t mpi_link_status_check(struct comm *c, comm_status_t st,
                                    const struct mpi_status_word *out, const char *what)
{
    if (st != COMM_OK)
        return st;
    if (out->neg_status == 0)
        return COMM_OK;
    comm_status_t theirs = (comm_status_t)(-out->neg_status);
    rt_error(c, COMM_ERR_PEER,
             "rank %d: rank %lld failed in %s of call %u (%s); see that rank's comm_last_error",
             c->rank, (long long)out->rank, what, c->seq, rt_status_string(theirs));
    return COMM_ERR_PEER;
}

void mpi_link_free(struct mpi_link *l)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    /* A link whose failure went out as notices (sent, or one came) keeps its MPI
     * communicators until MPI_Finalize.  Every failing rank sends one to every other,
     * and a notice still on its way when a peer frees world would arrive after it:
     * Open MPI gives the next communicator that context id, takes the notice for that
     * one's traffic (its per-peer message order) and stalls it until the timeout.  So
     * does one whose setup gave up on a request (l->abandoned): Open MPI 4.1 progresses a
     * nonblocking collective of a freed communicator when the peers' parts come, and
     * crashed there (a rank of comm_init_mpi coming about a timeout late). */
    bool keep = l->notice_out != NULL || l->noticed || l->abandoned;
    if (!finalized && l->world != MPI_COMM_NULL && l->notice_req != MPI_REQUEST_NULL) {
        MPI_Cancel(&l->notice_req);
        MPI_Wait(&l->notice_req, MPI_STATUS_IGNORE);
    }
    l->notice_req = MPI_REQUEST_NULL;
    if (l->notice_out != NULL) {
        int done = finalized;
        if (!finalized)
            MPI_Testall(l->notice_out->n, l->notice_out->reqs, &done, MPI_STATUSES_IGNORE);
        if (done) {
            free(l->notice_out);
        } else {
            /* A peer gone or not receiving: MPI completes the sends on its own; their
             * few bytes stay allocated, as the buffer must outlive them. */
            for (int i = 0; i < l->notice_out->n; i++)
                if (l->notice_out->reqs[i] != MPI_REQUEST_NULL)
                    MPI_Request_free(&l->notice_out->reqs[i]);
        }
        l->notice_out = NULL;
    }
    MPI_Comm *all[] = {&l->slice, &l->host, &l->world};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (*all[i] != MPI_COMM_NULL && !finalized && !keep)
            MPI_Comm_free(all[i]);
        *all[i] = MPI_COMM_NULL;
    }
    if (l->sum8 != MPI_OP_NULL && !finalized)
        MPI_Op_free(&l->sum8);
    l->sum8 = MPI_OP_NULL;
}
