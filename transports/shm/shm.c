/* SPDX-License-Identifier: MIT */
/*
 * The shm transport's lifecycle: ranks of one host (threads or processes) that share
 * the communicator's segment.  The host backend (collectives/backend_host.c) is built
 * on it and on the primitives in shm.h; every other backend embeds the segment too.
 */
#include "shm.h"

#include <stdio.h>
#include <string.h>

bool shm_probe(const struct transport_probe *p, char *why, size_t len)
{
    if (p->device != COMM_DEVICE_HOST) {
        snprintf(why, len, "shm serves host buffers only");
        return false;
    }
    return true;
}

/*
 * May this rank write its arrival slot of call c->seq?  Only once every peer completed
 * the call that used the slot before (SHM_SLOTS calls back).  A call that synchronises
 * is only entered after that, but a failure may be published where no arrival would be:
 * after eager broadcasts, which run ahead of the peers, or in comm_destroy after them.
 * A peer still finishing that earlier call would take the failure for its own, in a call
 * this rank completed.  The sticky status word tells every waiter anyway; the slot only
 * tells one waiting for this rank's arrival sooner.
 */
static bool slot_free(const struct comm *c)
{
    /* The first calls: completed words start at 0, which has reached any seq before. */
    for (int p = 0; p < c->nranks; p++)
        if (p != c->rank && !shm_peer_completed(c->shm, p, c->seq - SHM_SLOTS))
            return false;
    return true;
}

void shm_publish_failure(struct comm *c, comm_status_t status, const char *msg, bool in_call)
{
    struct shm_comm *s = c->shm;
    if (s == NULL)
        return;
    struct shm_rank *me = &s->ranks[c->rank];
    if (!atomic_exchange(&c->published, 1)) {
        /* A rank that fails because of a peer passes the root cause on instead of
         * wrapping it: every rank's message then starts with the rank that really
         * failed, and carries what that rank said, whole. */
        if (status == COMM_ERR_PEER && s->root_rank1 != 0) {
            snprintf(me->errmsg, sizeof(me->errmsg), "%s", s->root_msg);
            me->root_rank1 = s->root_rank1;
            me->root_status = s->root_status;
            me->root_kind = s->root_kind;
        } else {
            snprintf(me->errmsg, sizeof(me->errmsg), "%s", msg);
            me->root_rank1 = 0;
        }
        /* comm_abort's thread must not read c->seq: the owner may be updating it. */
        me->failed_seq = in_call ? c->seq : UINT32_MAX;
        atomic_store_explicit(&me->status, (int32_t)status, memory_order_release);
    }
    if (in_call && slot_free(c)) {
        /* Peers waiting for this rank's arrival in this call see the failure at once. */
        struct shm_arrival *a = shm_arrival_at(s, c->seq, c->rank);
        atomic_store_explicit(&a->status, (int32_t)status, memory_order_relaxed);
        atomic_store_explicit(&a->seq, c->seq, memory_order_release);
    }
    shm_ring_all(s);
}

void shm_setup_failed(struct comm *c, comm_status_t status)
{
    struct shm_comm *s = c->shm;
    if (s == NULL)
        return;
    struct shm_rank *me = &s->ranks[c->rank];
    snprintf(me->errmsg, sizeof(me->errmsg), "%.*s", (int)sizeof(me->errmsg) - 1, c->errmsg);
    atomic_store_explicit(&me->status, (int32_t)status, memory_order_release);
    shm_ring_all(s);
}

void shm_wake(struct comm *c)
{
    if (c->shm != NULL)
        shm_ring_all(c->shm);
}
