/* SPDX-License-Identifier: MIT */
/*
 * One arcomm communicator per MPI communicator: an attribute of it (a keyval of this
 * library), made at the first intercepted call on it and destroyed by the attribute's
 * delete callback, which MPI runs at MPI_Comm_free; MPI_Finalize (calls.c) destroys what
 * is left, MPI_COMM_WORLD's and MPI_COMM_SELF's included, before MPI goes.
 *
 * Making one is collective over the MPI communicator: MPI has every rank call the
 * collectives of a communicator in the same order, so every rank makes its first
 * intercepted call on it at the same point and reaches the same decision (served, or
 * handed on, as pmpi_comm_servable and comm_init say on all ranks).
 */
#include "pmpi.h"

#if PMPI_HAVE_INIT_MPI
#include <arcomm_mpi.h>
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t keyval_once = PTHREAD_ONCE_INIT;
static int keyval = MPI_KEYVAL_INVALID;
static atomic_bool finalized;

/* The live states (finalize destroys them) and the counts of those already destroyed. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pmpi_comm *live;
static uint64_t total_served[PMPI_CALL_COUNT];
static uint64_t total_handed[PMPI_CALL_COUNT];
static _Atomic uint64_t stateless_handed[PMPI_CALL_COUNT];

/*
 * Each thread remembers the last communicator it looked up, so that a program calling
 * on one communicator skips MPI's attribute lookup.  A destroyed state bumps the
 * generation: a freed MPI_Comm whose handle MPI reuses is never mistaken for the old.
 */
static _Atomic uint64_t generation;
static _Thread_local PMPI_TLS struct {
    MPI_Comm comm;
    struct pmpi_comm *pc;
    uint64_t gen;
} last;

static void comm_state_free(struct pmpi_comm *pc)
{
    pthread_mutex_lock(&live_lock);
    if (pc->prev != NULL)
        pc->prev->next = pc->next;
    else
        live = pc->next;
    if (pc->next != NULL)
        pc->next->prev = pc->prev;
    for (int i = 0; i < PMPI_CALL_COUNT; i++) {
        total_served[i] += pc->served[i];
        total_handed[i] += pc->handed[i];
    }
    pthread_mutex_unlock(&live_lock);
    atomic_fetch_add_explicit(&generation, 1, memory_order_release);
    if (pc->arc != NULL) {
        comm_status_t st = comm_destroy(pc->arc);
        if (st != COMM_OK)
            pmpi_log(PMPI_LOG_WARN, "rank %d: comm_destroy: %s (%s)", pc->rank,
                     comm_last_error(NULL), comm_status_string(st));
    }
    free(pc->scratch[0]);
    free(pc->scratch[1]);
    free(pc);
}

static int attr_delete(MPI_Comm comm, int kv, void *value, void *extra)
{
    (void)comm;
    (void)kv;
    (void)extra;
    comm_state_free(value);
    return MPI_SUCCESS;
}

static void keyval_create(void)
{
    /* MPI_Comm_dup does not copy it: a duplicate gets its own arcomm communicator. */
    if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, attr_delete, &keyval, NULL) != MPI_SUCCESS) {
        keyval = MPI_KEYVAL_INVALID;
        pmpi_log(PMPI_LOG_WARN, "MPI_Comm_create_keyval failed: every call goes to MPI");
    }
}

/*
 * The one decision of which MPI communicators arcomm serves, and how: those whose ranks
 * are all on this host (MPI_COMM_TYPE_SHARED spans the whole communicator) through
 * comm_init, the others through comm_init_mpi (an arcomm communicator per host, MPI
 * between them) where libarcomm_mpi was built.  Collective over comm; the answer is
 * the same on every rank.  *multi says which.
 */
static bool pmpi_comm_servable(MPI_Comm comm, int size, bool *multi, const char **why)
{
    MPI_Comm node;
    int node_size = 0;
    *multi = false;
    if (size == 1)
        return true;
    if (PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) {
        *why = "MPI_Comm_split_type failed";
        return false;
    }
    PMPI_Comm_size(node, &node_size);
    PMPI_Comm_free(&node);
    if (node_size == size)
        return true;
#if PMPI_HAVE_INIT_MPI
    *multi = true;
    return true;
#else
    *why = "its ranks are on more than one host (this build has no libarcomm_mpi)";
    return false;
#endif
}

/* Inside comm_init_mpi: its own blocking MPI calls (the host's id, MPI_Bcast) go
 * straight to PMPI, never to a state of their own. */
static _Thread_local PMPI_TLS int inside_init;

/* Whether every rank joined (st: this rank's comm_init or comm_init_mpi, arc its
 * communicator): kept in pc when all did, else destroyed and failed says why. */
static bool comm_keep(struct pmpi_comm *pc, comm_t *arc, comm_status_t st, const char *failed,
                      const char **why)
{
    if (st != COMM_OK)
        pmpi_log(PMPI_LOG_WARN, "rank %d: the communicator stays with MPI: %s (%s)", pc->rank,
                 comm_last_error(NULL), comm_status_string(st));
    int ok = st == COMM_OK, all_ok = 0;
    if (PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, pc->mpi) != MPI_SUCCESS)
        all_ok = 0;
    if (!all_ok) {
        comm_destroy(arc);
        *why = failed;
        return false;
    }
    pc->arc = arc;
    return true;
}

/* comm_init_mpi over comm's ranks, agreed on by all of them (as comm_join). */
static bool comm_join_hosts(struct pmpi_comm *pc, const char **why)
{
#if PMPI_HAVE_INIT_MPI
    comm_t *arc = NULL;
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.knob_defaults = PMPI_KNOB_DEFAULTS;
    inside_init++;
    comm_status_t st = comm_init_mpi(&arc, pc->mpi, &cfg);
    inside_init--;
    return comm_keep(pc, arc, st, "comm_init_mpi failed (logged by the rank it failed on)", why);
#else
    (void)pc;
    *why = "no libarcomm_mpi";
    return false;
#endif
}

/* comm_init over comm's ranks, agreed on by all of them; false (nothing kept) when any
 * rank failed. */
static bool comm_join(struct pmpi_comm *pc, const char **why)
{
    struct {
        int ok;
        comm_id_t id;
    } msg = {0};
    if (pc->rank == 0) {
        comm_status_t st = comm_id_new(&msg.id);
        msg.ok = st == COMM_OK;
        if (!msg.ok)
            pmpi_log(PMPI_LOG_WARN, "rank 0: comm_id_new: %s (%s)", comm_last_error(NULL),
                     comm_status_string(st));
    }
    if (PMPI_Bcast(&msg, (int)sizeof(msg), MPI_BYTE, 0, pc->mpi) != MPI_SUCCESS || !msg.ok) {
        *why = "no arcomm id could be made";
        return false;
    }
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = pc->size;
    cfg.rank = pc->rank;
    cfg.id = msg.id;
    cfg.knob_defaults = PMPI_KNOB_DEFAULTS;
    comm_t *arc = NULL;
    comm_status_t st = comm_init(&arc, &cfg);
    return comm_keep(pc, arc, st, "comm_init failed (logged by the rank it failed on)", why);
}

static struct pmpi_comm *comm_state_new(MPI_Comm comm)
{
    struct pmpi_comm *pc = calloc(1, sizeof(*pc));
    if (pc == NULL)
        return NULL;
    pc->mpi = comm;
    PMPI_Comm_rank(comm, &pc->rank);
    PMPI_Comm_size(comm, &pc->size);
    int inter = 0;
    bool multi = false;
    const char *why = NULL;
    PMPI_Comm_test_inter(comm, &inter);
    if (inter)
        why = "it is an inter-communicator";
    else if (pmpi_comm_servable(comm, pc->size, &multi, &why))
        multi ? comm_join_hosts(pc, &why) : comm_join(pc, &why);
    if (PMPI_Comm_set_attr(comm, keyval, pc) != MPI_SUCCESS) {
        comm_destroy(pc->arc);
        free(pc);
        return NULL;
    }
    pthread_mutex_lock(&live_lock);
    pc->next = live;
    if (live != NULL)
        live->prev = pc;
    live = pc;
    pthread_mutex_unlock(&live_lock);

    if (pc->rank == 0 && pmpi_settings.log_level >= PMPI_LOG_INFO) {
        char name[MPI_MAX_OBJECT_NAME] = "";
        int len = 0;
        PMPI_Comm_get_name(comm, name, &len);
        if (pc->arc != NULL)
            pmpi_log(PMPI_LOG_INFO,
                     "communicator \"%s\" (%d ranks): MPI_Allreduce, MPI_Reduce, MPI_Bcast, "
                     "MPI_Allgather, MPI_Reduce_scatter_block, MPI_Alltoall and MPI_Barrier "
                     "served by arcomm (%s) for the datatypes and ops of docs/pmpi.md",
                     name, pc->size, comm_transport_name(pc->arc));
        else
            pmpi_log(PMPI_LOG_INFO, "communicator \"%s\" (%d ranks): handed to MPI: %s", name,
                     pc->size, why != NULL ? why : "?");
    }
    return pc;
}

struct pmpi_comm *pmpi_comm_get(MPI_Comm comm)
{
    pmpi_settings_load();
    if (pmpi_settings.off || inside_init > 0 || comm == MPI_COMM_NULL ||
        atomic_load_explicit(&finalized, memory_order_relaxed))
        return NULL;
    if (last.comm == comm && last.pc != NULL &&
        last.gen == atomic_load_explicit(&generation, memory_order_acquire))
        return last.pc;
    pthread_once(&keyval_once, keyval_create);
    if (keyval == MPI_KEYVAL_INVALID)
        return NULL;
    uint64_t gen = atomic_load_explicit(&generation, memory_order_acquire);
    void *value = NULL;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, keyval, &value, &found) != MPI_SUCCESS)
        return NULL; /* not a communicator: PMPI reports it */
    struct pmpi_comm *pc = found ? value : comm_state_new(comm);
    if (pc != NULL) {
        last.comm = comm;
        last.pc = pc;
        last.gen = gen;
    }
    return pc;
}

void pmpi_handed(struct pmpi_comm *pc, enum pmpi_call call)
{
    if (pc != NULL)
        pc->handed[call]++;
    else if (!pmpi_settings.off && inside_init == 0) /* comm_init_mpi's own calls are not counted */
        atomic_fetch_add_explicit(&stateless_handed[call], 1, memory_order_relaxed);
}

int pmpi_served(struct pmpi_comm *pc, enum pmpi_call call, comm_status_t st)
{
    if (st == COMM_OK) {
        pc->served[call]++;
        return MPI_SUCCESS;
    }
    pmpi_log(PMPI_LOG_ERROR, "rank %d: %s on arcomm: %s (%s)", pc->rank, pmpi_call_name(call),
             comm_last_error(pc->arc), comm_status_string(st));
    PMPI_Comm_call_errhandler(pc->mpi, MPI_ERR_OTHER);
    return MPI_ERR_OTHER;
}

int pmpi_local_fail(struct pmpi_comm *pc, enum pmpi_call call, int rc, const char *what)
{
    /* The peers are in arcomm's call already, or will be: they must not wait for this
     * rank, which will not come.  Aborting breaks the communicator on every rank (its
     * peers' call fails with COMM_ERR_PEER), as any failure of a served call does. */
    comm_abort(pc->arc);
    pmpi_log(PMPI_LOG_ERROR, "rank %d: %s: %s", pc->rank, pmpi_call_name(call), what);
    PMPI_Comm_call_errhandler(pc->mpi, rc);
    return rc;
}

void *pmpi_scratch(struct pmpi_comm *pc, int i, size_t bytes)
{
    if (bytes > pc->scratch_cap[i]) {
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes) != 0)
            return NULL;
        free(pc->scratch[i]);
        pc->scratch[i] = p;
        pc->scratch_cap[i] = bytes;
    }
    return pc->scratch[i];
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

void pmpi_finalize(void)
{
    pmpi_settings_load();
    if (pmpi_settings.off || atomic_exchange(&finalized, true))
        return;
    /* Deleting the attribute runs attr_delete, which unlinks the state. */
    for (;;) {
        pthread_mutex_lock(&live_lock);
        struct pmpi_comm *pc = live;
        pthread_mutex_unlock(&live_lock);
        if (pc == NULL)
            break;
        if (PMPI_Comm_delete_attr(pc->mpi, keyval) != MPI_SUCCESS)
            comm_state_free(pc);
    }
    if (pmpi_settings.log_level >= PMPI_LOG_INFO)
        report();
    if (keyval != MPI_KEYVAL_INVALID)
        PMPI_Comm_free_keyval(&keyval);
    pmpi_types_finalize();
}
