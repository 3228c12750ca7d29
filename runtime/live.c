/* SPDX-License-Identifier: MIT */
/*
 * The communicators alive in this process.  comm_abort may run in any thread while
 * another tears the communicator down: it finds the handle here and does its work
 * under the registry lock, and comm_destroy takes the handle out under the same lock
 * before it frees anything, so an abort either completes first or finds nothing.
 * Lookups compare pointers only: a dead handle is never dereferenced.
 */
#include "comm_internal.h"

#include <pthread.h>

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct comm *live_head;

void rt_live_add(struct comm *c)
{
    pthread_mutex_lock(&live_lock);
    c->live_next = live_head;
    live_head = c;
    pthread_mutex_unlock(&live_lock);
}

/* The link pointing at c, or NULL when c is not alive.  Called under live_lock. */
static struct comm **live_find(const struct comm *c)
{
    for (struct comm **pp = &live_head; *pp != NULL; pp = &(*pp)->live_next)
        if (*pp == c)
            return pp;
    return NULL;
}

enum rt_live_status rt_live_remove(struct comm *c)
{
    pthread_mutex_lock(&live_lock);
    struct comm **pp = live_find(c);
    enum rt_live_status st = RT_LIVE_GONE;
    if (pp != NULL && atomic_load_explicit(&c->entered, memory_order_relaxed) != 0) {
        st = RT_LIVE_BUSY;
    } else if (pp != NULL) {
        *pp = c->live_next;
        st = RT_LIVE_OK;
    }
    pthread_mutex_unlock(&live_lock);
    return st;
}

bool rt_live_run(struct comm *c, void (*fn)(struct comm *c))
{
    pthread_mutex_lock(&live_lock);
    bool alive = live_find(c) != NULL;
    if (alive)
        fn(c);
    pthread_mutex_unlock(&live_lock);
    return alive;
}
