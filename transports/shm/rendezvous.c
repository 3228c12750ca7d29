/* SPDX-License-Identifier: MIT */
/*
 * A failed rendezvous: how an init failure reaches every rank of a communicator, and
 * who removes what it leaves in /dev/shm.
 *
 * Every init failure a rank can attribute to a communicator (its id is valid) goes
 * into the segment's header: init_status/init_rank/init_msg, first
 * writer wins and becomes the reporter.  Where there is no segment yet (rank 0 failed
 * before making it, or another rank failed first) the failing rank makes a stub under
 * the same name: one page, the header alone, stub = 1, with the failure already in it.
 * Whoever opens the name (rank 0 creating it finds it exists, a joiner) reads the
 * failure and leaves at once.  Every rank that leaves a failed rendezvous sets its bit
 * in init_done.  Removing the name: the rank that completes the set (every rank done,
 * or claimed and dead) unlinks it; the reporter stays until then (while ranks keep
 * coming, SHM_LINGER_NS at most, SHM_LINGER_IDLE_NS after the last one, never past its
 * own timeout) and unlinks it on its way out, so a rank that never comes cannot keep
 * the name alive.  A rank that comes after that finds no name and times out as if rank
 * 0 had never started; a job cleaner that removes "arcomm-<hex>*" catches a stub whose
 * reporter was killed while it waited.
 */
#include "rendezvous.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* How long a reporter waits for the other ranks to learn of its failure: while ranks
 * keep coming, up to SHM_LINGER_NS in all, but no more than SHM_LINGER_IDLE_NS after
 * the last one came (a rank that never comes must not hold its error back long). */
#define SHM_LINGER_NS      5000000000ull
#define SHM_LINGER_IDLE_NS 500000000ull

/* The front of a segment that failure handling reads: the header and the rank records
 * (for 256 ranks), or less when the file is smaller (a stub). */
#define SHM_FRONT_BYTES                                                                            \
    ((sizeof(struct shm_header) + 256 * sizeof(struct shm_rank) + SHM_PAGE - 1) / SHM_PAGE *       \
     SHM_PAGE)

/* Records the failure; true for the first writer (the reporter). */
bool shm_init_failure_record(struct shm_header *h, int rank, comm_status_t status, const char *msg)
{
    int32_t ok = COMM_OK;
    if (!atomic_compare_exchange_strong(&h->init_status, &ok, (int32_t)status))
        return false;
    atomic_store(&h->init_rank, rank);
    snprintf(h->init_msg, sizeof(h->init_msg), "%.*s", (int)sizeof(h->init_msg) - 1, msg);
    atomic_store_explicit(&h->init_published, 1, memory_order_release);
    return true;
}

/* The failure recorded in h, once its writer finished writing it. */
static bool read_init_failure(struct shm_header *h, comm_status_t *status, int *rank, char *msg,
                              size_t len)
{
    if (atomic_load(&h->init_status) == COMM_OK ||
        atomic_load_explicit(&h->init_published, memory_order_acquire) == 0)
        return false;
    *status = (comm_status_t)atomic_load(&h->init_status);
    *rank = atomic_load(&h->init_rank);
    snprintf(msg, len, "%.*s", (int)sizeof(h->init_msg) - 1, h->init_msg);
    return true;
}

static uint32_t failure_nranks(const struct shm_header *h)
{
    return h->nranks < 1                          ? 1
           : h->nranks > 64 * SHM_INIT_DONE_WORDS ? 64 * SHM_INIT_DONE_WORDS
                                                  : h->nranks;
}

static void mark_done(struct shm_header *h, int rank)
{
    if (rank >= 0 && rank < 64 * SHM_INIT_DONE_WORDS)
        atomic_fetch_or(&h->init_done[rank / 64], 1ull << (rank % 64));
}

/* How many ranks have left the failed rendezvous, or died after claiming their place
 * (ranks: the rank records, NULL for a stub)?  All of them: failure_nranks(h). */
static uint32_t count_done(struct shm_header *h, const struct shm_rank *ranks)
{
    uint32_t n = failure_nranks(h), done = 0;
    for (uint32_t r = 0; r < n; r++) {
        if (atomic_load(&h->init_done[r / 64]) & (1ull << (r % 64)))
            done++;
        else if (ranks != NULL &&
                 atomic_load_explicit(&ranks[r].claimed, memory_order_acquire) == 2 &&
                 !rt_proc_alive(ranks[r].pid, ranks[r].start_time))
            done++;
    }
    return done;
}

/*
 * This rank leaves a failed rendezvous: it marks itself done; the rank that completes
 * the set removes the name; the reporter waits for that (the others are polling the
 * header and learn within a millisecond or so), until linger at most, then removes it
 * itself so that no rank that never comes keeps it alive.
 */
void shm_init_leave(struct shm_header *h, const struct shm_rank *ranks, const char *name, int rank,
                    bool reporter, uint64_t linger)
{
    mark_done(h, rank);
    unsigned us = 20;
    uint32_t n = failure_nranks(h), done = count_done(h, ranks), seen = done;
    uint64_t idle = rt_deadline_in(SHM_LINGER_IDLE_NS);
    while (reporter && done < n && !shm_past(linger) && !shm_past(idle)) {
        shm_nap(&us);
        done = count_done(h, ranks);
        if (done > seen) {
            seen = done;
            idle = rt_deadline_in(SHM_LINGER_IDLE_NS);
        }
    }
    if (done == n || reporter)
        shm_unlink(name);
}

uint64_t shm_init_linger(uint64_t deadline)
{
    uint64_t l = rt_deadline_in(SHM_LINGER_NS);
    return l < deadline ? l : deadline;
}

/* Maps the front of an open segment file (header and rank records, as far as the file
 * goes); NULL when it cannot. */
struct shm_header *shm_front_map(int fd, size_t file_bytes, size_t *len)
{
    *len = file_bytes < SHM_FRONT_BYTES ? file_bytes : SHM_FRONT_BYTES;
    void *p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* The rank records of a mapped front, when it holds them all. */
const struct shm_rank *shm_front_ranks(const struct shm_header *h, size_t len)
{
    if (h->stub || h->off_ranks < sizeof(*h) ||
        h->off_ranks + (uint64_t)failure_nranks(h) * sizeof(struct shm_rank) > len)
        return NULL;
    return (const struct shm_rank *)((const uint8_t *)h + h->off_ranks);
}

/* The error a rank reports when it learns of the failure another rank recorded. */
comm_status_t shm_init_failure_learn(struct comm *c, struct shm_header *h)
{
    comm_status_t st;
    int who;
    char msg[SHM_INIT_MSG_BYTES];
    if (!read_init_failure(h, &st, &who, msg, sizeof(msg)))
        return COMM_OK;
    comm_status_t mine = st == COMM_ERR_MISMATCH ? COMM_ERR_MISMATCH : COMM_ERR_PEER;
    rt_error(c, mine, "rank %d: rank %d could not join communicator %s (%s): %s", c->rank, who,
             c->id.str, rt_status_string(st), msg);
    return mine;
}

/* Waits (until deadline) for a segment file's magic; false on timeout. */
bool shm_wait_magic(struct shm_header *h, uint64_t deadline)
{
    unsigned us = 20;
    while (atomic_load_explicit(&h->magic, memory_order_acquire) != SHM_MAGIC) {
        if (shm_past(deadline))
            return false;
        shm_nap(&us);
    }
    return true;
}

/*
 * Makes fd (just created, exclusively ours) a failure stub: one page, the header with
 * the failure in it.  False when even that cannot be done (the caller unlinks).
 */
bool shm_stub_write(int fd, int nranks, int rank, comm_status_t status, const char *msg)
{
    /* Reserve the page first: a full /dev/shm must fail here, not SIGBUS below. */
    if (ftruncate(fd, SHM_PAGE) != 0 || posix_fallocate(fd, 0, SHM_PAGE) != 0)
        return false;
    struct shm_header *h = mmap(NULL, SHM_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED)
        return false;
    memset(h, 0, sizeof(*h));
    h->version = SHM_VERSION;
    h->nranks = (uint32_t)nranks;
    h->total_bytes = SHM_PAGE;
    h->owner_uid = (uint32_t)geteuid();
    h->header_bytes = sizeof(*h);
    h->stub = 1;
    shm_init_failure_record(h, rank, status, msg);
    atomic_store_explicit(&h->magic, SHM_MAGIC, memory_order_release);
    munmap(h, SHM_PAGE);
    return true;
}

/* Stays in a stub this rank made until the others learned, then removes it. */
void shm_stub_linger(int fd, const char *name, int rank, uint64_t linger)
{
    struct shm_header *h = mmap(NULL, SHM_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        shm_unlink(name);
        return;
    }
    shm_init_leave(h, NULL, name, rank, true, linger);
    munmap(h, SHM_PAGE);
}

/*
 * Records a failure in the segment file that exists under name (a real segment or a
 * stub): waits for its magic until deadline, checks that it is ours, then records and
 * leaves.  Returns false when the file is not one this rank can write a failure to.
 */
static bool publish_into_existing(const char *name, int rank, comm_status_t status, const char *msg,
                                  uint64_t deadline)
{
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct stat st;
    unsigned us = 20;
    for (;;) {
        if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 0077) != 0) {
            close(fd);
            return false;
        }
        if ((size_t)st.st_size >= sizeof(struct shm_header))
            break;
        if (shm_past(deadline)) {
            close(fd);
            return false;
        }
        shm_nap(&us);
    }
    size_t len;
    struct shm_header *h = shm_front_map(fd, (size_t)st.st_size, &len);
    close(fd);
    if (h == NULL)
        return false;
    bool ok =
        shm_wait_magic(h, deadline) && h->version == SHM_VERSION && h->header_bytes == sizeof(*h);
    if (ok) {
        bool reporter = shm_init_failure_record(h, rank, status, msg);
        shm_init_leave(h, shm_front_ranks(h, len), name, rank, reporter, shm_init_linger(deadline));
    }
    munmap(h, len);
    return ok;
}

void shm_init_failure_publish(const comm_id_t *id, int nranks, int rank, long timeout_ms,
                              comm_status_t status, const char *msg)
{
    if (nranks <= 1)
        return; /* nobody to tell */
    char name[SHM_NAME_MAX];
    shm_segment_name(id, name, sizeof(name));
    uint64_t deadline = shm_init_linger(rt_deadline_in(rt_ms_to_ns(timeout_ms)));
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) {
        if (fchmod(fd, 0600) == 0 && shm_stub_write(fd, nranks, rank, status, msg))
            shm_stub_linger(fd, name, rank, deadline);
        else
            shm_unlink(name);
        close(fd);
        return;
    }
    if (errno == EEXIST)
        publish_into_existing(name, rank, status, msg, deadline);
}
