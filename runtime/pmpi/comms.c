/* SPDX-License-Identifier: MIT */
/*
 * One arcomm communicator per MPI communicator: an attribute of it (a keyval of this
 * library), made at the first intercepted call on it; the attribute's delete callback,
 * which MPI runs at MPI_Comm_free, kills it, and MPI_Finalize kills what is left,
 * MPI_COMM_WORLD's and MPI_COMM_SELF's included, before MPI goes (life.c says when a
 * killed state is released).  And the ends of a served call (pmpi_done).
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
#include <sys/mman.h>

static pthread_once_t keyval_once = PTHREAD_ONCE_INIT;
static int keyval = MPI_KEYVAL_INVALID;

static int attr_delete(MPI_Comm comm, int kv, void *value, void *extra)
{
    (void)comm;
    (void)kv;
    (void)extra;
    pmpi_state_kill(value);
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

bool pmpi_comm_inside_init(void)
{
    return inside_init > 0;
}

/* Whether every rank joined (st: this rank's comm_init or comm_init_mpi, arc its
 * communicator): kept in pc when all did, else destroyed and failed says why. */
static bool comm_keep(struct pmpi_comm *pc, comm_t *arc, comm_status_t st, const char *failed,
                      const char **why)
{
    /* Its waits must drive MPI's progress (waits.c): a communicator that could not is
     * MPI's. */
    if (st == COMM_OK)
        st = pmpi_waits_init(pc, arc);
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
    /* Rank 0 makes the id and, with more than one rank, the ledger of the calls
     * (waits.c), whose name the others open. */
    struct {
        int ok;
        comm_id_t id;
        char ledger[64];
    } msg = {0};
    if (pc->rank == 0) {
        comm_status_t st = comm_id_new(&msg.id);
        msg.ok = st == COMM_OK;
        if (!msg.ok)
            pmpi_log(PMPI_LOG_WARN, "rank 0: comm_id_new: %s (%s)", comm_last_error(NULL),
                     comm_status_string(st));
        if (msg.ok && pc->size > 1 &&
            !pmpi_ledger_create(pc->size, msg.ledger, sizeof(msg.ledger))) {
            pmpi_log(PMPI_LOG_WARN, "rank 0: no shared memory for the ledger of calls: %m");
            msg.ok = 0;
        }
    }
    if (PMPI_Bcast(&msg, (int)sizeof(msg), MPI_BYTE, 0, pc->mpi) != MPI_SUCCESS || !msg.ok) {
        if (pc->rank == 0 && msg.ledger[0] != '\0')
            shm_unlink(msg.ledger);
        *why = "no arcomm id or ledger could be made";
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
    if (st == COMM_OK && pc->size > 1 && !pmpi_ledger_open(pc, msg.ledger)) {
        pmpi_log(PMPI_LOG_WARN, "rank %d: cannot open the ledger of calls %s: %m", pc->rank,
                 msg.ledger);
        comm_destroy(arc);
        arc = NULL;
        st = COMM_ERR_SYSTEM;
    }
    bool kept = comm_keep(pc, arc, st, "comm_init failed (logged by the rank it failed on)", why);
    /* Every rank has opened it (or failed): the name goes, nothing is left behind. */
    if (pc->rank == 0 && pc->size > 1)
        shm_unlink(msg.ledger);
    if (!kept)
        pmpi_ledger_close(pc);
    return kept;
}

/* The state of comm, made by its first intercepted call (collective over comm), with
 * that call's reference.  NULL when it cannot be kept (out of memory, no attribute). */
static struct pmpi_comm *comm_state_new(MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_state_alloc();
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
        pmpi_state_discard(pc);
        return NULL;
    }
    pmpi_state_publish(pc);

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

struct pmpi_comm *pmpi_comm_lookup(MPI_Comm comm)
{
    pthread_once(&keyval_once, keyval_create);
    if (keyval == MPI_KEYVAL_INVALID)
        return NULL;
    void *value = NULL;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, keyval, &value, &found) != MPI_SUCCESS)
        return NULL; /* not a communicator: PMPI reports it */
    if (!found)
        return comm_state_new(comm);
    /* Dead: MPI_Comm_free runs on it in another thread (an erroneous program); the call
     * goes to PMPI, which reports it. */
    return pmpi_comm_take(value) ? value : NULL;
}

void pmpi_comm_detach(struct pmpi_comm *pc)
{
    /* The delete callback kills it; without the attribute, kill it here. */
    if (keyval == MPI_KEYVAL_INVALID || PMPI_Comm_delete_attr(pc->mpi, keyval) != MPI_SUCCESS)
        pmpi_state_kill(pc);
}

void pmpi_comm_finalize(void)
{
    if (keyval != MPI_KEYVAL_INVALID)
        PMPI_Comm_free_keyval(&keyval);
}

void pmpi_hand(struct pmpi_comm *pc, enum pmpi_call call, bool run_ahead)
{
    pmpi_handed(pc, call);
    if (pc != NULL)
        pmpi_ledger_handed(pc, run_ahead);
    pmpi_comm_put(pc);
}

bool pmpi_serve(struct pmpi_comm *pc, enum pmpi_call call)
{
    if (pmpi_ledger_serve(pc))
        return true;
    pmpi_handed(pc, call);
    pmpi_comm_put(pc);
    return false;
}

bool pmpi_joins(struct pmpi_comm *pc, enum pmpi_call call, comm_status_t st)
{
    /* Not after MPI_Comm_free or MPI_Finalize in another thread: MPI knows it no more. */
    if (st == COMM_OK || !pmpi_comm_mpi_ok(pc) || !pmpi_ledger_joins(pc))
        return false;
    pmpi_handed(pc, call);
    pmpi_comm_put(pc);
    return true;
}

/* Calls comm's error handler with rc, where MPI still knows comm: not after MPI_Comm_free
 * or MPI_Finalize ran in another thread during the call (an erroneous program). */
static int call_errhandler(struct pmpi_comm *pc, int rc)
{
    if (pmpi_comm_mpi_ok(pc))
        PMPI_Comm_call_errhandler(pc->mpi, rc);
    return rc;
}

int pmpi_done(struct pmpi_comm *pc, enum pmpi_call call, comm_status_t st)
{
    if (st == COMM_OK) {
        pc->served[call]++;
        return MPI_SUCCESS;
    }
    if (pmpi_comm_final(pc))
        pmpi_log(PMPI_LOG_ERROR,
                 "rank %d: %s: MPI_Finalize ran in another thread while this call waited for its "
                 "peers (an erroneous program: finalize once every call returned); the call fails",
                 pc->rank, pmpi_call_name(call));
    else
        pmpi_log(PMPI_LOG_ERROR, "rank %d: %s on arcomm: %s (%s)", pc->rank, pmpi_call_name(call),
                 comm_last_error(pc->arc), comm_status_string(st));
    return call_errhandler(pc, MPI_ERR_OTHER);
}

int pmpi_local_fail(struct pmpi_comm *pc, enum pmpi_call call, int rc, const char *what)
{
    /* The peers are in arcomm's call already, or will be: they must not wait for this
     * rank, which will not come.  Aborting breaks the communicator on every rank (its
     * peers' call fails with COMM_ERR_PEER), as any failure of a served call does. */
    comm_abort(pc->arc);
    pmpi_log(PMPI_LOG_ERROR, "rank %d: %s: %s", pc->rank, pmpi_call_name(call), what);
    return call_errhandler(pc, rc);
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
