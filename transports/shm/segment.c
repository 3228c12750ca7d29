/* SPDX-License-Identifier: MIT */
/*
 * Creating, checking and joining the shared segment of a communicator.  Rank 0 creates
 * it exclusively (mode 0600); the others open it, check owner, mode, magic, version and
 * geometry before trusting a byte, then claim their rank.  Once every rank has joined,
 * rank 0 unlinks the name, so a crash afterwards leaves nothing in /dev/shm.
 *
 * Every init failure a rank can attribute to the communicator reaches the other ranks
 * through the header (or a one-page stub under the same name), and the name goes once
 * they know: rendezvous.c says how and who removes it.
 */
#include "shm.h"
#include "cma_calibrate.h"
#include "mapping.h"
#include "rendezvous.h"
#include "topo.h"
#include "arcomm_build.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#if ARCOMM_HAVE_NUMA
#include <numa.h>
#include <numaif.h>
#endif

void shm_segment_name(const comm_id_t *id, char *name, size_t len)
{
    /* The id is validated before this ("arc1-" + 32 hex digits). */
    const char *hex = strchr(id->str, '-');
    snprintf(name, len, "/arcomm-%s", hex ? hex + 1 : id->str);
}

/*
 * Rank 0 found the name taken: a stub carrying a peer's failure, another rank 0 of this
 * communicator that is creating or has created it, or a segment a crashed job left.
 */
static comm_status_t create_found_existing(struct comm *c, struct shm_comm *s, uint64_t deadline)
{
    /* The other maker (or the stub's writer) is at most a few system calls from done:
     * what is still unfinished after the linger never will be. */
    uint64_t soon = shm_init_linger(deadline);
    int fd = shm_open(s->name, O_RDWR | O_CLOEXEC, 0);
    struct stat st;
    unsigned us = 20;
    while (fd >= 0 && fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 0077) == 0 &&
           (size_t)st.st_size < sizeof(struct shm_header) && !shm_past(soon))
        shm_nap(&us);
    size_t len = 0;
    struct shm_header *h = NULL;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 0077) == 0 &&
        (size_t)st.st_size >= sizeof(struct shm_header))
        h = shm_front_map(fd, (size_t)st.st_size, &len);
    if (fd >= 0)
        close(fd);
    if (h == NULL || !shm_wait_magic(h, soon) || h->version != SHM_VERSION ||
        h->header_bytes != sizeof(*h)) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank 0: /dev/shm%s already exists and is not a communicator this rank can "
                 "join: another job uses id %s (make a fresh one with comm_id_new) or a crashed "
                 "job left it (remove it)",
                 s->name, c->id.str);
        if (h != NULL)
            munmap(h, len);
        return COMM_ERR_INVALID;
    }
    const struct shm_rank *ranks = shm_front_ranks(h, len);
    comm_status_t status;
    bool reporter = false;
    /* The other rank 0 claims its record right after making the segment. */
    while (!h->stub && ranks != NULL && atomic_load(&ranks[0].claimed) != 2 &&
           atomic_load(&h->init_status) == COMM_OK && !shm_past(soon))
        shm_nap(&us);
    status = shm_init_failure_learn(c, h);
    if (status == COMM_OK) {
        int32_t pid = ranks != NULL && atomic_load(&ranks[0].claimed) == 2 ? ranks[0].pid : 0;
        if (pid != 0 && rt_proc_alive(pid, ranks[0].start_time)) {
            rt_error(c, COMM_ERR_INVALID,
                     "rank 0: two ranks claim rank 0 of communicator %s (the other is pid %d): "
                     "give every rank its own number in 0..%d",
                     c->id.str, (int)pid, c->nranks - 1);
            status = COMM_ERR_INVALID;
            reporter = shm_init_failure_record(h, 0, status, c->errmsg);
        } else {
            rt_error(c, COMM_ERR_INVALID,
                     "rank 0: /dev/shm%s already exists: its rank 0 (pid %d) is gone, a crashed "
                     "job with id %s left it: remove it, or make a fresh id with comm_id_new",
                     s->name, (int)pid, c->id.str);
            munmap(h, len);
            return COMM_ERR_INVALID;
        }
    }
    /* A rank 0 that learned of a peer's failure is done as rank 0; a second rank 0 counts
     * under no number (the first has the segment mapped and learns through it). */
    shm_init_leave(h, ranks, s->name, reporter ? -1 : 0, reporter, shm_init_linger(deadline));
    munmap(h, len);
    return status;
}

/*
 * Rank 0 failed with the segment file made but not valid: the file becomes a stub that
 * carries the failure (the message is already in c->errmsg), or goes.
 */
static comm_status_t create_failed(struct comm *c, struct shm_comm *s, int fd, comm_status_t status,
                                   uint64_t deadline)
{
    if (shm_stub_write(fd, c->nranks, 0, status, c->errmsg) && c->nranks > 1)
        shm_stub_linger(fd, s->name, 0, shm_init_linger(deadline));
    else
        shm_unlink(s->name);
    close(fd);
    return status;
}

/* Rank 0 failed before making the file: a stub under the name carries the failure. */
static comm_status_t create_refused(struct comm *c, comm_status_t status)
{
    shm_init_failure_publish(&c->id, c->nranks, 0, c->timeout_ms, status, c->errmsg);
    return status;
}

/* The knobs as the segment has them: the backend's staging slot in place of the knob
 * (the CUDA backend derives its slot from its own knobs). */
static struct rt_knobs agreed_knobs(const struct comm *c, const struct shm_comm *s)
{
    struct rt_knobs k = c->knobs;
    k.shm_slot_bytes = s->want.slot_bytes;
    return k;
}

static comm_status_t create_segment(struct comm *c, struct shm_comm *s, uint64_t deadline,
                                    int *fd_out)
{
    uint64_t slot = shm_align_up(s->want.slot_bytes, SHM_PAGE);
    size_t pool_knob = s->want.pool_bytes;
    /* "auto" is the table's default already (rt_knobs_load). */
    uint64_t pool = pool_knob == RT_SIZE_OFF ? 0 : shm_align_up(pool_knob, SHM_PAGE);
    struct shm_geometry g = shm_geometry_compute((uint32_t)c->nranks, slot, pool);
    if (!g.ok) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank 0: a segment of %d ranks with %llu-byte staging slots and %llu-byte "
                 "arenas does not fit 64 bits; lower ARCOMM_SHM_SLOT_BYTES or "
                 "ARCOMM_MEM_POOL_BYTES",
                 c->nranks, (unsigned long long)slot, (unsigned long long)pool);
        return create_refused(c, COMM_ERR_INVALID);
    }

    /* tmpfs allocates on first touch: a segment larger than /dev/shm has room for would
     * SIGBUS later, far from the cause.  Staging is touched on every large call, so it
     * must fit (and is reserved below); the pool is sparse and is only shrunk, with a
     * warning (comm_mem_alloc reserves a block's pages when it hands the block out). */
    struct statvfs vfs;
    if (statvfs("/dev/shm", &vfs) == 0) {
        uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
        if (g.off_pool > avail) {
            rt_error(c, COMM_ERR_NOMEM,
                     "rank 0: /dev/shm has %llu MiB free but %d ranks need %llu MiB of staging;"
                     " lower ARCOMM_SHM_SLOT_BYTES or enlarge /dev/shm",
                     (unsigned long long)(avail >> 20), c->nranks,
                     (unsigned long long)(g.off_pool >> 20));
            return create_refused(c, COMM_ERR_NOMEM);
        }
        if (g.total_bytes > avail) {
            uint64_t fit = (avail - g.off_pool) / (uint64_t)c->nranks / SHM_PAGE * SHM_PAGE;
            rt_log(c, RT_LOG_WARN,
                   "rank 0: /dev/shm has %llu MiB free; comm_mem_alloc arenas shrink from %llu "
                   "to %llu KiB per rank (ARCOMM_MEM_POOL_BYTES)",
                   (unsigned long long)(avail >> 20), (unsigned long long)(pool >> 10),
                   (unsigned long long)(fit >> 10));
            pool = fit;
            g = shm_geometry_compute((uint32_t)c->nranks, slot, pool);
        }
    }

    int fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST)
            return create_found_existing(c, s, deadline);
        rt_error(c, COMM_ERR_SYSTEM, "rank 0: shm_open(%s) failed: %s", s->name, strerror(errno));
        return create_refused(c, COMM_ERR_SYSTEM);
    }
    /* The umask may have cleared bits of 0600 but never added any; make it exact. */
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)g.total_bytes) != 0) {
        rt_error(c, COMM_ERR_SYSTEM, "rank 0: sizing %s to %llu bytes failed: %s", s->name,
                 (unsigned long long)g.total_bytes, strerror(errno));
        return create_failed(c, s, fd, COMM_ERR_SYSTEM, deadline);
    }
    /* Reserve every page but the arenas' now, so that no later call can fault on a full
     * /dev/shm (tmpfs would SIGBUS where the pages are first touched). */
    int err = posix_fallocate(fd, 0, (off_t)g.off_pool);
    if (err != 0) {
        comm_status_t st = err == ENOSPC || err == ENOMEM ? COMM_ERR_NOMEM : COMM_ERR_SYSTEM;
        rt_error(c, st,
                 "rank 0: reserving %llu MiB of staging for %d ranks in /dev/shm failed: %s; "
                 "lower ARCOMM_SHM_SLOT_BYTES or enlarge /dev/shm",
                 (unsigned long long)(g.off_pool >> 20), c->nranks, strerror(err));
        return create_failed(c, s, fd, st, deadline);
    }
    void *base = mmap(NULL, g.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        comm_status_t st = errno == ENOMEM ? COMM_ERR_NOMEM : COMM_ERR_SYSTEM;
        rt_error(c, st,
                 "rank 0: mmap of %s (%llu MiB) failed: %s; lower ARCOMM_SHM_SLOT_BYTES or "
                 "ARCOMM_MEM_POOL_BYTES, or raise the address-space limit (ulimit -v)",
                 s->name, (unsigned long long)(g.total_bytes >> 20), strerror(errno));
        return create_failed(c, s, fd, st, deadline);
    }
    struct shm_header *h = base;
    h->version = SHM_VERSION;
    h->nranks = (uint32_t)c->nranks;
    h->total_bytes = g.total_bytes;
    h->slot_bytes = slot;
    h->pool_bytes = pool;
    h->owner_uid = (uint32_t)geteuid();
    h->header_bytes = sizeof(*h);
    h->off_ranks = g.off_ranks;
    h->off_arrival = g.off_arrival;
    h->off_eager = g.off_eager;
    h->off_p2p = g.off_p2p;
    h->off_staging = g.off_staging;
    h->off_pool = g.off_pool;
    snprintf(h->transport, sizeof(h->transport), "%s", c->backend_name);
    /* The knobs every rank must share, as rank 0 has them (check_joinable compares). */
    struct rt_knobs agreed = agreed_knobs(c, s);
    for (size_t i = 0; i < rt_knob_count && h->agree_count < SHM_AGREE_MAX; i++)
        if (rt_knob_table[i].flags & RT_KNOB_AGREE)
            h->agree[h->agree_count++] = rt_knob_value(&agreed, i);
    /* Arrival seq starts one slot-cycle behind call 0, so "reached" is false for every
     * slot until a rank publishes (ftruncate zeroed everything else). */
    struct shm_arrival *arr = (struct shm_arrival *)((uint8_t *)base + g.off_arrival);
    for (uint32_t i = 0; i < SHM_SLOTS * (uint32_t)c->nranks; i++)
        atomic_store_explicit(&arr[i].seq, (uint32_t)-SHM_SLOTS, memory_order_relaxed);
    atomic_store_explicit(&h->magic, SHM_MAGIC, memory_order_release);
    s->base = base;
    s->size = g.total_bytes;
    *fd_out = fd;
    return COMM_OK;
}

static comm_status_t open_segment(struct comm *c, struct shm_comm *s, uint64_t deadline,
                                  int *fd_out)
{
    unsigned us = 20;
    int fd;
    struct stat st;
    uint64_t next_liveness = rt_now_ns() + RT_LIVENESS_PERIOD_NS;
    for (;;) {
        if (shm_mapping_find(s)) {
            *fd_out = -1;
            return COMM_OK; /* a rank of this process made it: checked already */
        }
        fd = shm_open(s->name, O_RDWR | O_CLOEXEC, 0);
        if (fd >= 0) {
            if (fstat(fd, &st) != 0) {
                rt_error(c, COMM_ERR_SYSTEM, "rank %d: fstat of %s failed: %s", c->rank, s->name,
                         strerror(errno));
                close(fd);
                return COMM_ERR_SYSTEM;
            }
            if (st.st_uid != geteuid() || (st.st_mode & 0077) != 0) {
                rt_error(c, COMM_ERR_INVALID,
                         "rank %d: /dev/shm%s belongs to uid %u with mode %03o, not to uid %u "
                         "with mode 600: refusing to trust it (is the id shared with another "
                         "user's job?)",
                         c->rank, s->name, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777),
                         (unsigned)geteuid());
                close(fd);
                return COMM_ERR_INVALID;
            }
            if ((size_t)st.st_size >= sizeof(struct shm_header))
                break;
            close(fd); /* rank 0 has not sized it yet */
        } else if (errno != ENOENT) {
            rt_error(c, COMM_ERR_SYSTEM, "rank %d: shm_open(%s) failed: %s", c->rank, s->name,
                     strerror(errno));
            return COMM_ERR_SYSTEM;
        }
        if (rt_abort_requested(c)) {
            rt_error(c, COMM_ERR_ABORTED,
                     "rank %d: %s while rank %d waited for rank 0 to create communicator %s",
                     c->rank, rt_abort_cause(c), c->rank, c->id.str);
            /* Ranks still to come (rank 0 too) learn it from a stub (rendezvous.c). */
            shm_init_failure_publish(&c->id, c->nranks, c->rank, c->timeout_ms, COMM_ERR_ABORTED,
                                     c->errmsg);
            return COMM_ERR_ABORTED;
        }
        /* A split whose rank 0 failed or died before it made the segment: the same. */
        if (c->parent != NULL && rt_now_ns() >= next_liveness) {
            next_liveness = rt_now_ns() + RT_LIVENESS_PERIOD_NS;
            comm_status_t pst = shm_parent_check(c);
            if (pst != COMM_OK) {
                shm_init_failure_publish(&c->id, c->nranks, c->rank, c->timeout_ms, pst, c->errmsg);
                return pst;
            }
        }
        if (shm_past(deadline)) {
            rt_error(c, COMM_ERR_TIMEOUT,
                     "rank %d: rank 0 did not create the communicator's segment (%s) within %ld "
                     "ms; start rank 0 with the same id, or raise ARCOMM_TIMEOUT_MS",
                     c->rank, s->name, c->timeout_ms);
            return COMM_ERR_TIMEOUT;
        }
        shm_nap(&us);
    }

    /* Writable: a rank that finds it cannot join says so in init_status, so the ranks
     * already there fail at once instead of at the timeout. */
    size_t front;
    struct shm_header *h = shm_front_map(fd, (size_t)st.st_size, &front);
    if (h == NULL) {
        rt_error(c, COMM_ERR_SYSTEM, "rank %d: mmap of %s failed: %s", c->rank, s->name,
                 strerror(errno));
        close(fd);
        return COMM_ERR_SYSTEM;
    }
    comm_status_t status = COMM_ERR_INVALID;
    if (!shm_wait_magic(h, deadline)) {
        rt_error(c, COMM_ERR_TIMEOUT,
                 "rank %d: the segment %s never became valid (bad magic) within %ld ms: rank 0 "
                 "stopped while making it; it is removed, start the job again",
                 c->rank, s->name, c->timeout_ms);
        /* Nobody can ever join it: the name must not outlive this job. */
        shm_unlink(s->name);
        status = COMM_ERR_TIMEOUT;
        goto err_unmap;
    }
    if (h->version != SHM_VERSION || h->header_bytes != sizeof(*h)) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: segment %s has layout version %u (%u-byte header), this library "
                 "speaks version %u: every rank must run the same arcomm build",
                 c->rank, s->name, h->version, h->header_bytes, SHM_VERSION);
        goto err_unmap;
    }
    /* A stub, or a segment whose rendezvous failed already: learn why and leave. */
    if (h->stub || atomic_load(&h->init_status) != COMM_OK) {
        unsigned wait_us = 20;
        uint64_t soon = shm_init_linger(deadline);
        while ((status = shm_init_failure_learn(c, h)) == COMM_OK && !shm_past(soon))
            shm_nap(&wait_us); /* the writer is between init_status and init_msg */
        if (status == COMM_OK) {
            rt_error(c, COMM_ERR_PEER, "rank %d: a rank gave up joining communicator %s", c->rank,
                     c->id.str);
            status = COMM_ERR_PEER;
        }
        shm_init_leave(h, shm_front_ranks(h, front), s->name, c->rank, false, 0);
        goto err_unmap;
    }
    struct shm_geometry g = shm_geometry_compute(h->nranks, h->slot_bytes, h->pool_bytes);
    if (!g.ok || h->owner_uid != (uint32_t)geteuid() || g.total_bytes != h->total_bytes ||
        g.off_ranks != h->off_ranks || g.off_arrival != h->off_arrival ||
        g.off_eager != h->off_eager || g.off_staging != h->off_staging || g.off_p2p != h->off_p2p ||
        g.off_pool != h->off_pool || h->slot_bytes % SHM_PAGE != 0 ||
        (uint64_t)st.st_size < h->total_bytes) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: segment %s has an inconsistent header (size %llu, file %llu): "
                 "refusing to use it",
                 c->rank, s->name, (unsigned long long)h->total_bytes,
                 (unsigned long long)st.st_size);
        goto err_unmap;
    }
    uint64_t total = h->total_bytes;
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        comm_status_t st_map = errno == ENOMEM ? COMM_ERR_NOMEM : COMM_ERR_SYSTEM;
        rt_error(c, st_map,
                 "rank %d: mmap of %s (%llu MiB) failed: %s; raise the address-space limit "
                 "(ulimit -v) or lower ARCOMM_SHM_SLOT_BYTES / ARCOMM_MEM_POOL_BYTES",
                 c->rank, s->name, (unsigned long long)(total >> 20), strerror(errno));
        /* The others are waiting for this rank: tell them. */
        bool reporter = shm_init_failure_record(h, c->rank, st_map, c->errmsg);
        shm_init_leave(h, shm_front_ranks(h, front), s->name, c->rank, reporter,
                       shm_init_linger(deadline));
        munmap(h, front);
        close(fd);
        return st_map;
    }
    munmap(h, front);
    s->base = base;
    s->size = total;
    *fd_out = fd;
    return COMM_OK;

err_unmap:
    munmap(h, front);
    close(fd);
    return status;
}

/* Knob i of rank 0 (from the header) against this rank's: COMM_OK when equal. */
static comm_status_t check_knob(struct comm *c, const struct rt_knobs *k,
                                const struct shm_header *h, size_t i, uint32_t j)
{
    uint64_t mine = rt_knob_value(k, i);
    if (j >= h->agree_count || h->agree[j] == mine)
        return COMM_OK;
    struct rt_knobs theirs = *k;
    char a[32], b[32];
    rt_knob_set_value(&theirs, i, h->agree[j]);
    rt_knob_format(k, i, a, sizeof(a));
    rt_knob_format(&theirs, i, b, sizeof(b));
    rt_error(c, COMM_ERR_MISMATCH,
             "rank %d: %s is %s on this rank but %s on rank 0: it decides what goes into shared "
             "memory and how it is read, so every rank must have the same value (set it alike "
             "in every rank's environment, or leave it unset everywhere)",
             c->rank, rt_knob_table[i].name, a, b);
    return COMM_ERR_MISMATCH;
}

/* Every RT_KNOB_AGREE knob against rank 0's.  The staging slot goes last: the CUDA
 * backend derives it from its own knobs, which name the real difference. */
static comm_status_t check_knobs(struct comm *c, const struct shm_comm *s,
                                 const struct shm_header *h)
{
    struct rt_knobs agreed = agreed_knobs(c, s);
    uint32_t j = 0, slot_j = 0;
    for (size_t i = 0; i < rt_knob_count; i++) {
        if (!(rt_knob_table[i].flags & RT_KNOB_AGREE))
            continue;
        if (i == RT_KNOB_SHM_SLOT_BYTES) {
            slot_j = j++;
            continue;
        }
        comm_status_t st = check_knob(c, &agreed, h, i, j++);
        if (st != COMM_OK)
            return st;
    }
    return check_knob(c, &agreed, h, RT_KNOB_SHM_SLOT_BYTES, slot_j);
}

/*
 * What a joining rank must agree on with rank 0; checked on every path in (also when a
 * thread of this process already mapped the segment), before this rank writes a byte.
 * The caller records a failure in init_status, so the ranks already there fail at once
 * instead of at the timeout.
 */
static comm_status_t check_joinable(struct comm *c, struct shm_header *h)
{
    if (h->nranks != (uint32_t)c->nranks) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: rank 0 created the communicator for %u ranks, this rank was given "
                 "nranks %d: every rank must pass the same nranks",
                 c->rank, h->nranks, c->nranks);
        return COMM_ERR_INVALID;
    }
    if (strncmp(h->transport, c->backend_name, sizeof(h->transport)) != 0) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: rank 0 uses transport \"%.16s\", this rank picked \"%s\": set the "
                 "same ARCOMM_TRANSPORT / config transport on every rank",
                 c->rank, h->transport, c->backend_name);
        return COMM_ERR_INVALID;
    }
    return check_knobs(c, c->shm, h);
}

/* Binds this rank's staging slots to its NUMA node before anyone touches them. */
static int bind_staging(struct comm *c, struct shm_comm *s)
{
    int node = c->numa_node;
#if ARCOMM_HAVE_NUMA
    if (c->knobs.numa && node >= 0 && numa_available() >= 0 && numa_max_node() > 0) {
        void *mine = shm_slot(s, c->rank, 0);
        unsigned long mask[16] = {0};
        if ((size_t)node < sizeof(mask) * 8) {
            mask[node / (8 * sizeof(long))] |= 1ul << (node % (8 * sizeof(long)));
            if (mbind(mine, SHM_SLOTS * s->slot_bytes, MPOL_PREFERRED, mask, sizeof(mask) * 8, 0) !=
                0)
                rt_log(c, RT_LOG_INFO, "rank %d: mbind of staging to node %d failed: %s", c->rank,
                       node, strerror(errno));
        }
    }
#else
    (void)c;
    (void)s;
#endif
    return node;
}

comm_status_t shm_segment_create_or_attach(struct comm *c)
{
    struct shm_sizes sizes = {.slot_bytes = c->knobs.shm_slot_bytes,
                              .pool_bytes = c->knobs.mem_pool_bytes};
    return shm_segment_join(c, &sizes);
}

/* Are all ranks threads of this process (their pids, published before they joined)?
 * Then no call takes CMA, and the single copy need not be measured. */
static bool all_in_this_process(const struct comm *c, const struct shm_comm *s)
{
    for (int r = 0; r < c->nranks; r++)
        if (s->ranks[r].pid != s->ranks[c->rank].pid)
            return false;
    return true;
}

comm_status_t shm_segment_join(struct comm *c, const struct shm_sizes *sizes)
{
    struct shm_comm *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory", c->rank);
        shm_init_failure_publish(&c->id, c->nranks, c->rank, c->timeout_ms, COMM_ERR_NOMEM,
                                 c->errmsg);
        atomic_store(&c->published, 1);
        return COMM_ERR_NOMEM;
    }
    /* Spinning only pays when every rank has a core; oversubscribed, yield early so the
     * peer we wait for gets the CPU. */
    bool oversubscribed = c->nranks > c->topo->pus;
    s->spin_ns = rt_knobs_spin_ns(&c->knobs, oversubscribed);
    /* An unpinned rank may share its CPU with the peer it waits for (the scheduler does
     * that under load): it then checks, and yields rather than spins. */
    cpu_set_t mask;
    s->same_cpu_check =
        c->nranks > 1 && sched_getaffinity(0, sizeof(mask), &mask) == 0 && CPU_COUNT(&mask) > 1;
    s->want = *sizes;
    shm_segment_name(&c->id, s->name, sizeof(s->name));
    uint64_t deadline = rt_comm_deadline(c);
    int fd = -1;
    /* Both publish their own failures (the functions above say how). */
    comm_status_t status =
        c->rank == 0 ? create_segment(c, s, deadline, &fd) : open_segment(c, s, deadline, &fd);
    if (status != COMM_OK)
        goto err_free;
    if (fd >= 0)
        shm_mapping_share(s, fd); /* keeps fd for shm_segment_reserve, or closes it */

    struct shm_header *h = (struct shm_header *)s->base;
    s->hdr = h;
    s->nranks = (uint32_t)c->nranks; /* geometry is never re-read from the header */
    s->ranks = (struct shm_rank *)(s->base + h->off_ranks);
    s->arrival = (struct shm_arrival *)(s->base + h->off_arrival);
    s->eager = (struct shm_eager *)(s->base + h->off_eager);
    s->staging = s->base + h->off_staging;
    s->slot_bytes = h->slot_bytes;
    s->pool = s->base + h->off_pool;
    s->pool_bytes = h->pool_bytes;
    s->p2p_chan = s->base + h->off_p2p;
    s->p2p_stage = s->p2p_chan + shm_p2p_stage_offset(s->nranks);
    s->p2p_stride = shm_p2p_chan_stride(s->nranks);
    s->p2p_eager = shm_p2p_eager_bytes(s->nranks);
    s->p2p_chunk = shm_p2p_chunk_bytes(s->nranks);
    c->shm = s;
    bool reporter = false;
    uint64_t linger = shm_init_linger(deadline);

    if (c->rank != 0) {
        if (atomic_load(&h->init_status) != COMM_OK) {
            status = shm_init_failure_learn(c, h);
            if (status != COMM_OK)
                goto err_leave; /* another rank's failure */
        }
        status = check_joinable(c, h);
        if (status != COMM_OK) {
            reporter = shm_init_failure_record(h, c->rank, status, c->errmsg);
            goto err_leave;
        }
    }

    struct shm_rank *me = &s->ranks[c->rank];
    uint32_t unclaimed = 0;
    if (!atomic_compare_exchange_strong(&me->claimed, &unclaimed, 1)) {
        /* The other claimant publishes its pid before claimed = 2 (release); until then
         * the field is being written and is not read. */
        char other[48] = "the other is still joining";
        if (unclaimed == 2)
            snprintf(other, sizeof other, "the other is pid %d", (int)me->pid);
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: two ranks claim rank %d of communicator %s (%s): "
                 "every rank needs its own number in 0..%d",
                 c->rank, c->rank, c->id.str, other, c->nranks - 1);
        status = COMM_ERR_INVALID;
        /* Not this rank's record: it leaves under no rank number. */
        reporter = shm_init_failure_record(h, c->rank, status, c->errmsg);
        shm_init_leave(h, s->ranks, s->name, -1, reporter, linger);
        s->unlinked = true;
        goto err_unmap;
    }
    me->pid = (int32_t)getpid();
    me->start_time = rt_proc_start_time(getpid());
    me->numa_node = bind_staging(c, s);
    me->cma_word = shm_cma_word();
    /* The host backend's process ranks reach buffers in each other's shared heaps. */
    struct shm_heap_own own;
    bool want_heap = strcmp(c->backend_name, "shm") == 0 && shm_heap_own(&own);
    me->heap_bytes = want_heap ? own.bytes : 0;
    me->heap_fd = want_heap ? own.fd : -1;
    me->heap_min = want_heap ? own.min_bytes : 0;
    atomic_store(&me->cpu, -1);
    atomic_store_explicit(&me->claimed, 2, memory_order_release); /* identity published */
    atomic_fetch_add(&h->attached, 1);

    unsigned us = 20;
    bool probed = false;
    uint64_t next_liveness = rt_now_ns() + RT_LIVENESS_PERIOD_NS;
    for (;;) {
        if (atomic_load(&h->init_status) != COMM_OK) {
            status = shm_init_failure_learn(c, h);
            if (status != COMM_OK)
                goto err_leave;
        }
        /* Once every rank joined, every rank probes every peer for CMA and counts
         * itself in cma_probed: the communicator's choice is made when all have.  Two
         * process ranks with ARCOMM_CMA_THRESHOLD=auto also say whether they found the
         * single copy fast (measured once per process, about 10 ms; cma_calibrate.h):
         * the wider windows are the communicator's only if all did. */
        if (atomic_load(&h->attached) == (uint32_t)c->nranks) {
            if (!probed) {
                if (c->knobs.cma_threshold == RT_SIZE_OFF || !shm_cma_probe(c, s))
                    atomic_fetch_or(&h->cma_off, 1u);
                else if (c->knobs.cma_threshold == RT_SIZE_AUTO &&
                         (c->nranks != 2 || all_in_this_process(c, s) ||
                          !shm_cma_fast_here(&c->knobs)))
                    atomic_fetch_or(&h->cma_slow, 1u);
                /* Every rank's line 0 is written (it attached after it): map their heaps. */
                if (!want_heap || all_in_this_process(c, s) || !shm_heap_map_peers(c, s, &own))
                    atomic_fetch_or(&h->heap_off, 1u);
                atomic_fetch_add(&h->cma_probed, 1);
                probed = true;
            }
            if (atomic_load(&h->cma_probed) == (uint32_t)c->nranks)
                break;
        }
        if (rt_abort_requested(c)) {
            rt_error(c, COMM_ERR_ABORTED,
                     "rank %d: %s while rank %d waited for the others to join communicator %s "
                     "(%u of %d joined)",
                     c->rank, rt_abort_cause(c), c->rank, c->id.str, atomic_load(&h->attached),
                     c->nranks);
            status = COMM_ERR_ABORTED;
            reporter = shm_init_failure_record(h, c->rank, status, c->errmsg);
            goto err_leave;
        }
        /* A rank that joined and then died will never be followed by the rest in time:
         * say so now rather than at the timeout. */
        if (rt_now_ns() >= next_liveness) {
            next_liveness = rt_now_ns() + RT_LIVENESS_PERIOD_NS;
            int dead = shm_dead_peer(c, SHM_PEERS_CLAIMED);
            if (dead >= 0) {
                rt_error(c, COMM_ERR_PEER,
                         "rank %d: rank %d (pid %d) joined communicator %s and then exited "
                         "before every rank had joined",
                         c->rank, dead, (int)s->ranks[dead].pid, c->id.str);
                status = COMM_ERR_PEER;
                reporter = shm_init_failure_record(h, c->rank, status, c->errmsg);
                goto err_leave;
            }
            /* A split's peer that failed or died before it came here never will. */
            status = shm_parent_check(c);
            if (status != COMM_OK) {
                reporter = shm_init_failure_record(h, c->rank, status, c->errmsg);
                goto err_leave;
            }
        }
        if (shm_past(deadline)) {
            char missing[128] = "";
            size_t used = 0;
            for (int r = 0; r < c->nranks && used + 8 < sizeof(missing); r++)
                if (!atomic_load(&s->ranks[r].claimed))
                    used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%d",
                                             used ? "," : "", r);
            rt_error(c, COMM_ERR_TIMEOUT,
                     "rank %d: only %u of %d ranks joined communicator %s within %ld ms "
                     "(missing: %s); start every rank, or raise ARCOMM_TIMEOUT_MS",
                     c->rank, atomic_load(&h->attached), c->nranks, c->id.str, c->timeout_ms,
                     missing);
            status = COMM_ERR_TIMEOUT;
            reporter = shm_init_failure_record(h, c->rank, status, c->errmsg);
            goto err_leave;
        }
        shm_nap(&us);
    }
    if (c->rank == 0) {
        shm_unlink(s->name);
        s->unlinked = true;
    }
    /* Thread ranks of one process can read each other's buffers directly. */
    c->shm->same_process = true;
    for (int r = 0; r < c->nranks; r++)
        c->shm->same_process = c->shm->same_process && s->ranks[r].pid == me->pid;
    /* Every rank read the same word after every rank's last write to it. */
    c->shm->cma = !c->shm->same_process && atomic_load(&h->cma_off) == 0;
    c->shm->cma_fast = c->shm->cma && atomic_load(&h->cma_slow) == 0;
    c->shm->heap = !c->shm->same_process && atomic_load(&h->heap_off) == 0;
    if (!c->shm->heap)
        shm_heap_unmap_peers(c, s);
    else
        rt_log(c, RT_LOG_INFO,
               "rank %d: every rank of communicator %s has a shared heap: malloc'd buffers "
               "from ARCOMM_HEAP_MIN bytes take the one-pass path",
               c->rank, c->id.str);
    return COMM_OK;

err_leave:
    /* Nobody may join a communicator that failed; the name goes once every rank knows
     * (the top of the file says who removes it). */
    shm_init_leave(h, s->ranks, s->name, c->rank, reporter, linger);
    s->unlinked = true;
err_unmap:
    shm_heap_unmap_peers(c, s);
    shm_mapping_release(s);
    c->shm = NULL;
err_free:
    /* Every way out above told the peers (or had nobody it could tell): comm_init must
     * not publish this failure again. */
    atomic_store(&c->published, 1);
    free(s);
    return status;
}

void shm_segment_detach(struct comm *c)
{
    struct shm_comm *s = c->shm;
    if (s == NULL)
        return;
    shm_pool_release(c);
    if (!s->unlinked && c->rank == 0)
        shm_unlink(s->name);
    shm_heap_unmap_peers(c, s);
    shm_mapping_release(s);
    free(s);
    c->shm = NULL;
}
