/* SPDX-License-Identifier: MIT */
/*
 * The lifetime of a communicator's state: looked up by each intercepted call (held by a
 * reference for the call's duration), killed by MPI_Comm_free (the attribute's delete
 * callback) or MPI_Finalize, released by whoever drops the last reference, and the
 * report of what was served.
 *
 * MPI_Comm_free marks a communicator for deallocation and lets pending operations
 * complete normally; a program that frees or finalizes while another thread is inside a
 * served call on it is erroneous, and must get an error, never memory corruption.  So a
 * killed state is released only when no call holds it any more: after a free the call
 * in flight completes (or fails) as it would have, and the last reference destroys the
 * arcomm communicator; MPI_Finalize aborts the arcomm call in flight so that it returns
 * at once, waits for it to let go, and that call then touches MPI no more.
 *
 * A state's memory is never freed while the library runs, only reused for another
 * communicator: a thread whose cached lookup is stale takes a reference on it, finds it
 * dead or of another incarnation, and lets go, all on memory that is still a state.
 */
#include "pmpi.h"

#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* pmpi_comm.life: flags in the low bits, the references above them. */
#define LIFE_DEAD  1u /* freed or finalized: no new call takes it */
#define LIFE_GONE  2u /* its resources were released (once) */
#define LIFE_FINAL 4u /* killed by MPI_Finalize: no MPI call on its behalf any more */
#define LIFE_REF   8u

/* How long MPI_Finalize waits for a served call it aborted to let go of its state. */
#define FINALIZE_WAIT_NS 10000000000ull

static atomic_bool finalizing;

/* The live states (finalize kills what is left), the released ones kept for reuse, and
 * the counts of those already released. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pmpi_comm *live, *pool;
static uint64_t total_served[PMPI_CALL_COUNT];
static uint64_t total_handed[PMPI_CALL_COUNT];
static _Atomic uint64_t stateless_handed[PMPI_CALL_COUNT];

/*
 * Each thread remembers the last communicator it looked up, so that a program calling
 * on one communicator skips MPI's attribute lookup.  The incarnation tells a state reused
 * for another communicator (whose MPI handle may be the same: MPI reuses them) from the
 * one remembered.
 */
static _Thread_local PMPI_TLS struct {
    MPI_Comm comm;
    struct pmpi_comm *pc;
    uint64_t incarnation;
} last;

bool pmpi_finalizing(void)
{
    return atomic_load_explicit(&finalizing, memory_order_acquire);
}

struct pmpi_comm *pmpi_state_alloc(void)
{
    pthread_mutex_lock(&live_lock);
    struct pmpi_comm *pc = pool;
    if (pc != NULL)
        pool = pc->next;
    pthread_mutex_unlock(&live_lock);
    if (pc == NULL) {
        pc = calloc(1, sizeof(*pc));
        if (pc != NULL)
            atomic_init(&pc->life, LIFE_DEAD | LIFE_GONE);
        return pc;
    }
    /* Everything but the two words stale lookups may still touch. */
    size_t keep = offsetof(struct pmpi_comm, mpi);
    memset((char *)pc + keep, 0, sizeof(*pc) - keep);
    return pc;
}

void pmpi_state_discard(struct pmpi_comm *pc)
{
    pthread_mutex_lock(&live_lock);
    pc->next = pool;
    pool = pc;
    pthread_mutex_unlock(&live_lock);
}

void pmpi_state_publish(struct pmpi_comm *pc)
{
    /* A new incarnation before the state comes alive: a stale lookup that sees it alive
     * sees the new number too (the release below, its read-modify-write). */
    atomic_fetch_add_explicit(&pc->incarnation, 1, memory_order_relaxed);
    pthread_mutex_lock(&live_lock);
    pc->prev = NULL;
    pc->next = live;
    if (live != NULL)
        live->prev = pc;
    live = pc;
    pthread_mutex_unlock(&live_lock);
    /* Alive, with the creating call's reference. */
    atomic_fetch_and_explicit(&pc->life, ~(uint64_t)(LIFE_DEAD | LIFE_GONE | LIFE_FINAL),
                              memory_order_release);
    atomic_fetch_add(&pc->life, LIFE_REF);
}

/* Releases what the state holds: once, by the last reference of a dead state. */
static void release(struct pmpi_comm *pc)
{
    uint64_t v = atomic_load(&pc->life);
    do {
        if ((v & (LIFE_DEAD | LIFE_GONE)) != LIFE_DEAD || v >= LIFE_REF)
            return;
    } while (!atomic_compare_exchange_weak(&pc->life, &v, v | LIFE_GONE));
    if (pc->arc != NULL) {
        comm_status_t st = comm_destroy(pc->arc);
        if (st != COMM_OK)
            pmpi_log(PMPI_LOG_WARN, "rank %d: comm_destroy: %s (%s)", pc->rank,
                     comm_last_error(NULL), comm_status_string(st));
        pc->arc = NULL;
    }
    pmpi_ledger_close(pc);
    free(pc->scratch[0]);
    free(pc->scratch[1]);
    pc->scratch[0] = pc->scratch[1] = NULL;
    pthread_mutex_lock(&live_lock);
    for (int i = 0; i < PMPI_CALL_COUNT; i++) {
        total_served[i] += pc->served[i];
        total_handed[i] += pc->handed[i];
    }
    pc->next = pool;
    pool = pc;
    pthread_mutex_unlock(&live_lock);
}

void pmpi_comm_put(struct pmpi_comm *pc)
{
    if (pc == NULL)
        return;
    uint64_t v = atomic_fetch_sub(&pc->life, LIFE_REF) - LIFE_REF;
    if ((v & (LIFE_DEAD | LIFE_GONE)) == LIFE_DEAD && v < LIFE_REF)
        release(pc);
}

/* A reference on pc if it is alive and still the incarnation the caller knew. */
static bool take(struct pmpi_comm *pc, uint64_t incarnation)
{
    uint64_t v = atomic_fetch_add(&pc->life, LIFE_REF);
    if (!(v & LIFE_DEAD) &&
        atomic_load_explicit(&pc->incarnation, memory_order_relaxed) == incarnation)
        return true;
    pmpi_comm_put(pc);
    return false;
}

struct pmpi_comm *pmpi_comm_get(MPI_Comm comm)
{
    pmpi_settings_load();
    if (pmpi_settings.off || pmpi_comm_inside_init() || comm == MPI_COMM_NULL ||
        atomic_load_explicit(&finalizing, memory_order_relaxed))
        return NULL;
    if (last.comm == comm && last.pc != NULL && take(last.pc, last.incarnation))
        return last.pc;
    struct pmpi_comm *pc = pmpi_comm_lookup(comm);
    if (pc != NULL) {
        last.comm = comm;
        last.pc = pc;
        last.incarnation = atomic_load_explicit(&pc->incarnation, memory_order_relaxed);
    }
    return pc;
}

bool pmpi_comm_take(struct pmpi_comm *pc)
{
    return take(pc, atomic_load_explicit(&pc->incarnation, memory_order_relaxed));
}

bool pmpi_comm_mpi_ok(const struct pmpi_comm *pc)
{
    return !(atomic_load(&pc->life) & LIFE_DEAD);
}

bool pmpi_comm_final(const struct pmpi_comm *pc)
{
    return (atomic_load(&pc->life) & LIFE_FINAL) != 0;
}

/* Killed by MPI_Comm_free (the attribute's delete callback) or MPI_Finalize: a call that
 * holds it goes on (MPI_Finalize aborts it), the last reference releases it. */
void pmpi_state_kill(struct pmpi_comm *pc)
{
    bool final = pmpi_finalizing();
    atomic_fetch_add(&pc->life, LIFE_REF); /* held while this runs */
    uint64_t v = atomic_fetch_or(&pc->life, LIFE_DEAD | (final ? LIFE_FINAL : 0u));
    if (!(v & LIFE_DEAD)) {
        pthread_mutex_lock(&live_lock);
        if (pc->prev != NULL)
            pc->prev->next = pc->next;
        else if (live == pc)
            live = pc->next;
        if (pc->next != NULL)
            pc->next->prev = pc->prev;
        pc->prev = pc->next = NULL;
        pthread_mutex_unlock(&live_lock);
    }
    pmpi_comm_put(pc);
}

void pmpi_handed(struct pmpi_comm *pc, enum pmpi_call call)
{
    if (pc != NULL)
        pc->handed[call]++;
    else if (!pmpi_settings.off && !pmpi_comm_inside_init()) /* comm_init_mpi's own calls */
        atomic_fetch_add_explicit(&stateless_handed[call], 1, memory_order_relaxed);
}

static void report(void)
{
    int rank = -1;
    char served[512], handed[512];
    uint64_t ns = 0, nh = 0;
    size_t os = 0, oh = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    pthread_mutex_lock(&live_lock);
    for (int i = 0; i < PMPI_CALL_COUNT; i++) {
        uint64_t h = total_handed[i] + atomic_load(&stateless_handed[i]);
        os += (size_t)snprintf(served + os, sizeof(served) - os, " %s=%llu", pmpi_call_name(i),
                               (unsigned long long)total_served[i]);
        oh += (size_t)snprintf(handed + oh, sizeof(handed) - oh, " %s=%llu", pmpi_call_name(i),
                               (unsigned long long)h);
        ns += total_served[i];
        nh += h;
    }
    pthread_mutex_unlock(&live_lock);
    pmpi_log(PMPI_LOG_INFO, "rank %d: report: served by arcomm%s total=%llu", rank, served,
             (unsigned long long)ns);
    pmpi_log(PMPI_LOG_INFO, "rank %d: report: handed to MPI%s total=%llu", rank, handed,
             (unsigned long long)nh);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void pmpi_finalize(void)
{
    pmpi_settings_load();
    if (pmpi_settings.off || atomic_exchange(&finalizing, true))
        return;
    /* Kill every state (deleting its attribute runs the delete callback, which kills it;
     * MPI would otherwise run it later, on a state that may be another's by then).  Those
     * a served call of another thread still holds are aborted: wait for them to let go,
     * so that every arcomm communicator is destroyed before MPI goes (comm_init_mpi's
     * must be). */
    struct pmpi_comm **held = NULL;
    int nheld = 0;
    for (;;) {
        pthread_mutex_lock(&live_lock);
        struct pmpi_comm *pc = live;
        uint64_t incarnation = pc != NULL ? atomic_load(&pc->incarnation) : 0;
        pthread_mutex_unlock(&live_lock);
        if (pc == NULL)
            break;
        if (!take(pc, incarnation)) {
            sched_yield(); /* being killed by another thread: it leaves the list */
            continue;
        }
        pmpi_comm_detach(pc);
        struct pmpi_comm **more = NULL;
        if (atomic_load(&pc->life) / LIFE_REF > 1 &&
            (more = realloc(held, (size_t)(nheld + 1) * sizeof(*held))) != NULL) {
            /* Keep the reference (pc->arc stays valid) while its call is aborted. */
            held = more;
            held[nheld++] = pc;
            if (pc->arc != NULL)
                comm_abort(pc->arc);
        } else {
            pmpi_comm_put(pc);
        }
    }
    uint64_t deadline = now_ns() + FINALIZE_WAIT_NS;
    for (int i = 0; i < nheld; i++) {
        while (atomic_load(&held[i]->life) / LIFE_REF > 1 && now_ns() < deadline)
            sched_yield();
        if (atomic_load(&held[i]->life) / LIFE_REF > 1)
            pmpi_log(PMPI_LOG_WARN,
                     "rank %d: MPI_Finalize: a served call still runs in another thread after "
                     "its abort (an erroneous program: finalize once every call returned); its "
                     "arcomm communicator is destroyed when that call returns",
                     held[i]->rank);
        pmpi_comm_put(held[i]);
    }
    free(held);
    if (pmpi_settings.log_level >= PMPI_LOG_INFO)
        report();
    pmpi_comm_finalize();
    pmpi_types_finalize();
}
