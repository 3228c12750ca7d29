/* SPDX-License-Identifier: MIT */
/*
 * What a served call does about its peers beyond arcomm's own waits: it drives MPI's
 * progress engine while it waits, and it finds out when one call was split between
 * arcomm and MPI.
 *
 * Progress.  MPI requires that a process blocked in an MPI call keeps its other
 * operations progressing: a rank waiting in a served MPI_Barrier may be the one that must
 * forward a pending MPI_Ibcast, or push the fragments of a pending MPI_Isend its peer
 * waits to receive before it comes to the barrier.  arcomm's wait hook
 * (comm_set_wait_hook) runs wait_hook from the waiting thread once a call has waited
 * ARCOMM_PMPI_PROGRESS_US (100 us by default), then about as often, never in a call whose
 * peers are all there: it
 * makes PMPI_PROGRESS_PASSES passes of MPI_Iprobe on MPI_COMM_SELF, which matches nothing
 * and runs Open MPI's opal_progress (0.05 us when there is nothing to move; legal at every
 * thread level, being in the thread of the program's own MPI call).
 *
 * Splits.  Every rank of a correct program decides alike whether arcomm serves a call
 * (calls.c, moves.c read only what MPI requires to be alike).  An erroneous program can
 * still put its ranks on both sides of one call (counts on both sides of a size line, a
 * root out of range on one rank): the served ranks wait in arcomm for ranks that are in
 * MPI's call, or left it already.  The ledger tells them: a line per rank in shared memory
 * (made with the communicator, comms.c), where each intercepted call stores how many
 * calls the rank entered and the last one it served, one store to its own line.  The rule
 * is MPI's own outcome: a call that any rank handed to MPI goes to MPI on every rank, and
 * from then on so does every call on that communicator.
 *  - A served rank whose call waits (the hook) or fails (pmpi_joins) looks: a peer that
 *    entered this call without serving it, or a split published for it, stops arcomm's
 *    call (the hook's nonzero return breaks it on every rank) and the rank joins MPI's
 *    call, which then does what MPI alone does (MPI_ERR_TRUNCATE, say).
 *  - A rank may leave a handed call before its peers entered it (an MPI_Reduce at a
 *    non-root returns once its data is sent, a call MPI rejects returns at once): its next
 *    served call would meet in arcomm a peer still waiting in the call this rank handed,
 *    as if they were one.  So before that served call (pmpi_serve) it waits until every
 *    peer decided the calls it handed since its last served one, and finds the split if a
 *    peer served one of them (0.1-0.2 us, only after such handed calls).
 *  - arcomm's eager broadcast root never waits: so no broadcast is eager where any size
 *    goes to MPI (settings.c), and a root that is served eagerly has peers that are too.
 */
#include "pmpi.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* One rank's line of the ledger: written by that rank only. */
struct pmpi_line {
    _Atomic uint64_t entered; /* intercepted calls this rank entered (decided) */
    _Atomic uint64_t served;  /* 1 + the index of the last of them arcomm served; 0: none */
    _Atomic uint64_t split;   /* 1 + the call from which this communicator is MPI's, as this
                               * rank found; 0: none */
    int32_t pid;              /* for the liveness of the peers pmpi_serve waits for */
    uint8_t pad[64 - 3 * sizeof(uint64_t) - sizeof(int32_t)];
} __attribute__((aligned(64)));
_Static_assert(sizeof(struct pmpi_line) == 64, "one cache line per rank");

/* ---- progress ---- */

static void progress(const struct pmpi_comm *pc)
{
    /* After MPI_Finalize began in another thread (an erroneous program), no MPI. */
    if (pmpi_comm_final(pc))
        return;
    int flag;
    for (int i = 0; i < PMPI_PROGRESS_PASSES; i++)
        PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
}

/* ---- the ledger ---- */

static size_t ledger_bytes(int nranks)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return ((size_t)nranks * sizeof(struct pmpi_line) + page - 1) / page * page;
}

bool pmpi_ledger_create(int nranks, char *name, size_t len)
{
    uint64_t r[2] = {0, 0};
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        name[0] = '\0';
        return false;
    }
    snprintf(name, len, "/arcomm-pmpi-%d-%016" PRIx64 "%016" PRIx64, (int)getpid(), r[0], r[1]);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        name[0] = '\0'; /* nothing of ours to remove */
        return false;
    }
    size_t bytes = ledger_bytes(nranks);
    bool ok = fchmod(fd, 0600) == 0 && ftruncate(fd, (off_t)bytes) == 0 &&
              posix_fallocate(fd, 0, (off_t)bytes) == 0;
    close(fd);
    if (!ok) {
        shm_unlink(name);
        name[0] = '\0';
    }
    return ok;
}

bool pmpi_ledger_open(struct pmpi_comm *pc, const char *name)
{
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
        return false;
    size_t bytes = ledger_bytes(pc->size);
    struct stat st;
    void *p = MAP_FAILED;
    /* Ours alone: this user's, mode 600, as large as the ranks need. */
    if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 0077) == 0 &&
        (size_t)st.st_size >= bytes)
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return false;
    pc->ledger = p;
    pc->ledger[pc->rank].pid = (int32_t)getpid();
    return true;
}

void pmpi_ledger_close(struct pmpi_comm *pc)
{
    if (pc->ledger != NULL)
        munmap(pc->ledger, ledger_bytes(pc->size));
    pc->ledger = NULL;
}

/* Call i is MPI's by the ledger: a peer entered it without serving it (it handed it), or
 * a peer found the communicator MPI's from call i or earlier. */
static bool split_at(const struct pmpi_comm *pc, uint64_t i)
{
    for (int p = 0; p < pc->size; p++) {
        const struct pmpi_line *l = &pc->ledger[p];
        if (p == pc->rank)
            continue;
        /* served is stored before entered (release): a rank seen to have entered call
         * i shows whether it served it. */
        uint64_t entered = atomic_load_explicit(&l->entered, memory_order_acquire);
        uint64_t served = atomic_load_explicit(&l->served, memory_order_relaxed);
        uint64_t split = atomic_load_explicit(&l->split, memory_order_acquire);
        if ((entered > i && served <= i) || (split != 0 && split - 1 <= i))
            return true;
    }
    return false;
}

/* The communicator is MPI's from call i on (this rank found a split at i). */
static void mark_split(struct pmpi_comm *pc, uint64_t i)
{
    pc->split = true;
    atomic_store(&pc->ledger[pc->rank].split, i + 1);
}

static void publish(struct pmpi_comm *pc, bool served)
{
    struct pmpi_line *me = &pc->ledger[pc->rank];
    uint64_t n = ++pc->calls;
    if (served)
        atomic_store_explicit(&me->served, n, memory_order_relaxed);
    atomic_store_explicit(&me->entered, n, memory_order_release);
}

void pmpi_ledger_handed(struct pmpi_comm *pc, bool run_ahead)
{
    if (pc->ledger == NULL)
        return;
    if (run_ahead && pc->unverified == 0)
        pc->unverified = pc->calls + 1;
    publish(pc, false);
}

/* verify's waits: how long it yields before it sleeps between turns (as arcomm's waits'
 * ARCOMM_YIELD_NS), and how often it checks that the peers it waits for are alive. */
#define VERIFY_YIELD_NS    1000000u
#define VERIFY_LIVENESS_NS 100000000u

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Before served call j, after calls from u on that this rank handed and may have left
 * before its peers entered them: waits until every peer decided them (or served one: a
 * split, whose call is returned, else UINT64_MAX).  The wait is one arcomm's call j would
 * make anyway (every peer must reach call j), and drives MPI's progress as arcomm's does;
 * a dead peer ends it (arcomm's call then says so), so does the user's ARCOMM_TIMEOUT_MS.
 */
static uint64_t verify(struct pmpi_comm *pc, uint64_t u, uint64_t j)
{
    uint64_t start = 0, next_live = 0, next_progress = 0, found = UINT64_MAX;
    for (unsigned spins = 0;; spins++) {
        bool all = true;
        for (int p = 0; p < pc->size; p++) {
            const struct pmpi_line *l = &pc->ledger[p];
            if (p == pc->rank)
                continue;
            uint64_t entered = atomic_load_explicit(&l->entered, memory_order_acquire);
            uint64_t served = atomic_load_explicit(&l->served, memory_order_relaxed);
            uint64_t split = atomic_load_explicit(&l->split, memory_order_acquire);
            if (served > u && served <= j && served - 1 < found)
                found = served - 1; /* p served call served - 1, which this rank handed */
            if (split != 0 && split - 1 <= j && split - 1 < found)
                found = split - 1;
            all = all && entered >= j;
        }
        if (found != UINT64_MAX || all)
            return found;
        /* As arcomm's waits: yield (a peer about to come is seen at once), and read the
         * clock only every 64 turns; after VERIFY_YIELD_NS, sleep between the turns. */
        sched_yield();
        if (spins % 64 != 63)
            continue;
        uint64_t now = now_ns(), period = (uint64_t)pmpi_settings.progress_us * 1000u;
        if (start == 0)
            start = now, next_live = now + VERIFY_LIVENESS_NS, next_progress = now + period;
        if (pmpi_settings.timeout_ms >= 0 &&
            now - start > (uint64_t)pmpi_settings.timeout_ms * 1000000u)
            return UINT64_MAX;
        if (now >= next_live) {
            next_live = now + VERIFY_LIVENESS_NS;
            for (int p = 0; p < pc->size; p++)
                if (p != pc->rank && atomic_load(&pc->ledger[p].entered) < j &&
                    kill(pc->ledger[p].pid, 0) != 0 && errno == ESRCH)
                    return UINT64_MAX;
        }
        if (now >= next_progress) {
            next_progress = now + period;
            progress(pc);
        }
        if (now - start > VERIFY_YIELD_NS) {
            struct timespec ts = {.tv_sec = (time_t)(period / 1000000000u),
                                  .tv_nsec = (long)(period % 1000000000u)};
            nanosleep(&ts, NULL);
        }
    }
}

bool pmpi_ledger_serve(struct pmpi_comm *pc)
{
    if (pc->ledger == NULL)
        return true;
    uint64_t j = pc->calls;
    if (pc->unverified != 0) {
        uint64_t k = verify(pc, pc->unverified - 1, j);
        pc->unverified = 0;
        if (k != UINT64_MAX) {
            pmpi_log(PMPI_LOG_WARN,
                     "rank %d: call %" PRIu64 " on this communicator was handed to MPI here "
                     "and served by arcomm on another rank (an erroneous program: ranks that "
                     "disagree on a call's count, root, datatype or op): every call on it "
                     "goes to MPI from that one on",
                     pc->rank, k);
            mark_split(pc, k);
            publish(pc, false);
            return false;
        }
    }
    pc->current = j;
    publish(pc, true);
    return true;
}

bool pmpi_ledger_joins(struct pmpi_comm *pc)
{
    if (pc->ledger == NULL || (!pc->split && !split_at(pc, pc->current)))
        return false;
    if (!pc->split) {
        pmpi_log(PMPI_LOG_WARN,
                 "rank %d: call %" PRIu64 " on this communicator was served by arcomm here and "
                 "handed to MPI on another rank (an erroneous program: ranks that disagree on "
                 "a call's count, root, datatype or op): it joins MPI's call, and every call "
                 "on this communicator goes to MPI from now on",
                 pc->rank, pc->current);
        mark_split(pc, pc->current);
    }
    return true;
}

static int wait_hook(comm_t *arc, void *arg)
{
    (void)arc;
    struct pmpi_comm *pc = arg;
    progress(pc);
    /* A peer handed this call to MPI: stop arcomm's call (pmpi_joins then joins MPI's). */
    if (pc->ledger != NULL && split_at(pc, pc->current)) {
        pmpi_ledger_joins(pc);
        return 1;
    }
    return 0;
}

comm_status_t pmpi_waits_init(struct pmpi_comm *pc, comm_t *arc)
{
    return comm_set_wait_hook(arc, wait_hook, pc, pmpi_settings.progress_us);
}
