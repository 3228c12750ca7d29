/*
 * Creating, checking and joining the shared segment of a communicator.  Rank 0 creates
 * it exclusively (mode 0600); the others open it, check owner, mode, magic, version and
 * geometry before trusting a byte, then claim their rank.  Once every rank has joined,
 * rank 0 unlinks the name, so a crash afterwards leaves nothing in /dev/shm.
 */
#include "shm.h"
#include "topo.h"
#include "arcomm_build.h"

#include <errno.h>
#include <pthread.h>
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

static void nap(unsigned *us)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)*us * 1000};
    nanosleep(&ts, NULL);
    if (*us < 1000)
        *us *= 2;
}

static bool past(uint64_t deadline)
{
    return rt_passed(deadline, rt_now_ns());
}

/*
 * One mapping per segment per process: thread ranks of one process share it, so they
 * see each other's words at the same addresses (the sanitizers can follow the
 * synchronisation; a transport registers the memory with a driver once), and a
 * process maps each segment once however many of its threads are ranks.
 */
struct shm_mapping {
    char name[SHM_NAME_MAX];
    uint8_t *base;
    size_t size;
    int refs;     /* communicators of this process on this mapping */
    int ext_refs; /* holders of the transport's per-process state (shm_mapping_ext_hold) */
    struct shm_mapping *next;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_mapping *registry;

/*
 * Makes s's fresh mapping the process's mapping of its segment, or, when another
 * thread of this process registered one meanwhile (it mapped the file between our
 * shm_open and here), drops ours and uses that one: one mapping per segment, always.
 */
static void mapping_share(struct shm_comm *s)
{
    struct shm_mapping *fresh = calloc(1, sizeof(*fresh));
    pthread_mutex_lock(&registry_lock);
    struct shm_mapping *m = registry;
    while (m != NULL && strcmp(m->name, s->name) != 0)
        m = m->next;
    if (m != NULL) {
        m->refs++;
        munmap(s->base, s->size);
        s->base = m->base;
        s->size = m->size;
        s->mapping = m;
    } else if (fresh != NULL) {
        snprintf(fresh->name, sizeof(fresh->name), "%s", s->name);
        fresh->base = s->base;
        fresh->size = s->size;
        fresh->refs = 1;
        fresh->next = registry;
        registry = fresh;
        s->mapping = fresh;
        fresh = NULL;
    }
    /* (Without memory for the record the mapping simply stays this rank's own.) */
    pthread_mutex_unlock(&registry_lock);
    free(fresh);
}

static bool mapping_find(struct shm_comm *s)
{
    pthread_mutex_lock(&registry_lock);
    struct shm_mapping *m = registry;
    while (m != NULL && strcmp(m->name, s->name) != 0)
        m = m->next;
    if (m != NULL) {
        m->refs++;
        s->base = m->base;
        s->size = m->size;
        s->mapping = m;
    }
    pthread_mutex_unlock(&registry_lock);
    return m != NULL;
}

static void mapping_release(struct shm_comm *s)
{
    struct shm_mapping *m = s->mapping;
    if (m == NULL) {
        munmap(s->base, s->size);
        return;
    }
    pthread_mutex_lock(&registry_lock);
    bool last = --m->refs == 0;
    if (last) {
        struct shm_mapping **pp = &registry;
        while (*pp != m)
            pp = &(*pp)->next;
        *pp = m->next;
    }
    pthread_mutex_unlock(&registry_lock);
    if (last) {
        munmap(m->base, m->size);
        free(m);
    }
    s->mapping = NULL;
}

comm_status_t shm_mapping_ext_hold(struct comm *c, shm_ext_setup_fn setup)
{
    struct shm_comm *s = c->shm;
    comm_status_t st = COMM_OK;
    pthread_mutex_lock(&registry_lock);
    int *refs = s->mapping ? &s->mapping->ext_refs : &s->ext_refs_private;
    if (*refs == 0)
        st = setup(c, s->base, s->size);
    if (st == COMM_OK)
        ++*refs;
    pthread_mutex_unlock(&registry_lock);
    return st;
}

void shm_mapping_ext_release(struct comm *c, shm_ext_teardown_fn teardown)
{
    struct shm_comm *s = c->shm;
    pthread_mutex_lock(&registry_lock);
    int *refs = s->mapping ? &s->mapping->ext_refs : &s->ext_refs_private;
    if (*refs > 0 && --*refs == 0)
        teardown(s->base, s->size);
    pthread_mutex_unlock(&registry_lock);
}

static comm_status_t create_segment(struct comm *c, struct shm_comm *s, int *fd_out)
{
    uint64_t slot = shm_align_up(c->knobs.shm_slot_bytes, SHM_PAGE);
    uint64_t pool = shm_align_up(c->knobs.mem_pool_bytes, SHM_PAGE);
    struct shm_geometry g = shm_geometry_compute((uint32_t)c->nranks, slot, pool);

    /* tmpfs allocates on first touch: a segment larger than /dev/shm has room for would
     * SIGBUS later, far from the cause.  Staging is touched on every large call, so it
     * must fit; the pool is sparse and is only shrunk, with a warning. */
    struct statvfs vfs;
    if (statvfs("/dev/shm", &vfs) == 0) {
        uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
        if (g.off_pool > avail) {
            rt_error(c, COMM_ERR_NOMEM,
                     "rank 0: /dev/shm has %llu MiB free but %d ranks need %llu MiB of staging;"
                     " lower ARCOMM_SHM_SLOT_BYTES or enlarge /dev/shm",
                     (unsigned long long)(avail >> 20), c->nranks,
                     (unsigned long long)(g.off_pool >> 20));
            return COMM_ERR_NOMEM;
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
            rt_error(c, COMM_ERR_INVALID,
                     "rank 0: /dev/shm%s already exists: another communicator uses id %s "
                     "(make a fresh one with comm_id_new) or a crashed job left it (remove it)",
                     s->name, c->id.str);
        else
            rt_error(c, COMM_ERR_SYSTEM, "rank 0: shm_open(%s) failed: %s", s->name,
                     strerror(errno));
        return errno == EEXIST ? COMM_ERR_INVALID : COMM_ERR_SYSTEM;
    }
    comm_status_t status = COMM_ERR_SYSTEM;
    /* The umask may have cleared bits of 0600 but never added any; make it exact. */
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)g.total_bytes) != 0) {
        rt_error(c, COMM_ERR_SYSTEM, "rank 0: sizing %s to %llu bytes failed: %s", s->name,
                 (unsigned long long)g.total_bytes, strerror(errno));
        goto err_unlink;
    }
    void *base = mmap(NULL, g.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        rt_error(c, COMM_ERR_SYSTEM, "rank 0: mmap of %s (%llu bytes) failed: %s", s->name,
                 (unsigned long long)g.total_bytes, strerror(errno));
        goto err_unlink;
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
    h->off_staging = g.off_staging;
    h->off_pool = g.off_pool;
    snprintf(h->transport, sizeof(h->transport), "%s", c->ops->name);
    /* Arrival seq starts one slot-cycle behind call 0, so "reached" is false for every
     * slot until a rank publishes (ftruncate zeroed everything else). */
    struct shm_arrival *arr = (struct shm_arrival *)((uint8_t *)base + g.off_arrival);
    for (uint32_t i = 0; i < SHM_SLOTS * (uint32_t)c->nranks; i++)
        atomic_store_explicit(&arr[i].seq, (uint32_t)-SHM_SLOTS, memory_order_relaxed);
    atomic_store_explicit(&h->magic, SHM_MAGIC, memory_order_release);
    s->base = base;
    s->size = g.total_bytes;
    mapping_share(s);
    *fd_out = fd;
    return COMM_OK;

err_unlink:
    shm_unlink(s->name);
    close(fd);
    return status;
}

static void record_init_failure(struct shm_header *h, int rank, comm_status_t status)
{
    int32_t ok = COMM_OK;
    if (atomic_compare_exchange_strong(&h->init_status, &ok, (int32_t)status))
        atomic_store(&h->init_rank, rank);
}

static comm_status_t open_segment(struct comm *c, struct shm_comm *s, uint64_t deadline,
                                  int *fd_out)
{
    unsigned us = 20;
    int fd;
    struct stat st;
    for (;;) {
        if (mapping_find(s)) {
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
        if (past(deadline)) {
            rt_error(c, COMM_ERR_TIMEOUT,
                     "rank %d: rank 0 did not create the communicator's segment (%s) within %ld "
                     "ms; start rank 0 with the same id, or raise ARCOMM_TIMEOUT_MS",
                     c->rank, s->name, c->timeout_ms);
            return COMM_ERR_TIMEOUT;
        }
        nap(&us);
    }

    /* Writable: a rank that finds it cannot join says so in init_status, so the ranks
     * already there fail at once instead of at the timeout. */
    struct shm_header *h =
        mmap(NULL, sizeof(struct shm_header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        rt_error(c, COMM_ERR_SYSTEM, "rank %d: mmap of %s failed: %s", c->rank, s->name,
                 strerror(errno));
        close(fd);
        return COMM_ERR_SYSTEM;
    }
    comm_status_t status = COMM_ERR_INVALID;
    while (atomic_load_explicit(&h->magic, memory_order_acquire) != SHM_MAGIC) {
        if (past(deadline)) {
            rt_error(c, COMM_ERR_TIMEOUT,
                     "rank %d: the segment %s never became valid (bad magic) within %ld ms",
                     c->rank, s->name, c->timeout_ms);
            status = COMM_ERR_TIMEOUT;
            goto err_unmap;
        }
        nap(&us);
    }
    struct shm_geometry g = shm_geometry_compute(h->nranks, h->slot_bytes, h->pool_bytes);
    if (h->version != SHM_VERSION || h->header_bytes != sizeof(*h)) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: segment %s has layout version %u (%u-byte header), this library "
                 "speaks version %u: every rank must run the same arcomm build",
                 c->rank, s->name, h->version, h->header_bytes, SHM_VERSION);
        goto err_unmap;
    }
    if (h->owner_uid != (uint32_t)geteuid() || g.total_bytes != h->total_bytes ||
        g.off_ranks != h->off_ranks || g.off_arrival != h->off_arrival ||
        g.off_staging != h->off_staging || g.off_pool != h->off_pool ||
        h->slot_bytes % SHM_PAGE != 0 || (uint64_t)st.st_size < h->total_bytes) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: segment %s has an inconsistent header (size %llu, file %llu): "
                 "refusing to use it",
                 c->rank, s->name, (unsigned long long)h->total_bytes,
                 (unsigned long long)st.st_size);
        goto err_unmap;
    }
    uint64_t total = h->total_bytes;
    munmap(h, sizeof(*h));
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        rt_error(c, COMM_ERR_SYSTEM, "rank %d: mmap of %s (%llu bytes) failed: %s", c->rank,
                 s->name, (unsigned long long)total, strerror(errno));
        close(fd);
        return COMM_ERR_SYSTEM;
    }
    s->base = base;
    s->size = total;
    mapping_share(s);
    *fd_out = fd;
    return COMM_OK;

err_unmap:
    munmap(h, sizeof(*h));
    close(fd);
    return status;
}

/*
 * What a joining rank must agree on with rank 0; checked on every path in (also when a
 * thread of this process already mapped the segment).  A rank that cannot join says so
 * in init_status, so the ranks already there fail at once instead of at the timeout.
 */
static comm_status_t check_joinable(struct comm *c, struct shm_header *h)
{
    if (h->nranks != (uint32_t)c->nranks) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: rank 0 created the communicator for %u ranks, this rank was given "
                 "nranks %d: every rank must pass the same nranks",
                 c->rank, h->nranks, c->nranks);
        record_init_failure(h, c->rank, COMM_ERR_INVALID);
        return COMM_ERR_INVALID;
    }
    if (strncmp(h->transport, c->ops->name, sizeof(h->transport)) != 0) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: rank 0 uses transport \"%.16s\", this rank picked \"%s\": set the "
                 "same ARCOMM_TRANSPORT / config transport on every rank",
                 c->rank, h->transport, c->ops->name);
        record_init_failure(h, c->rank, COMM_ERR_INVALID);
        return COMM_ERR_INVALID;
    }
    return COMM_OK;
}

/* Binds this rank's staging slots to its NUMA node before anyone touches them. */
static int bind_staging(struct comm *c, struct shm_comm *s)
{
    int node = rt_topo_current_numa_node();
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

/* A rank of another process that claimed its place and is gone, or -1. */
static int dead_member(const struct comm *c, const struct shm_comm *s)
{
    pid_t self = getpid();
    for (int r = 0; r < c->nranks; r++) {
        const struct shm_rank *m = &s->ranks[r];
        /* claimed == 2 once the member published its pid (release). */
        if (r == c->rank || atomic_load_explicit(&m->claimed, memory_order_acquire) != 2 ||
            m->pid == self)
            continue;
        if (!rt_proc_alive(m->pid, m->start_time))
            return r;
    }
    return -1;
}

comm_status_t shm_segment_create_or_attach(struct comm *c)
{
    struct shm_comm *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory", c->rank);
        return COMM_ERR_NOMEM;
    }
    shm_segment_name(&c->id, s->name, sizeof(s->name));
    uint64_t deadline = rt_comm_deadline(c);
    int fd = -1;
    comm_status_t status =
        c->rank == 0 ? create_segment(c, s, &fd) : open_segment(c, s, deadline, &fd);
    if (status != COMM_OK)
        goto err_free;
    if (fd >= 0)
        close(fd); /* the mapping keeps the segment; no fd outlives comm_init */

    struct shm_header *h = (struct shm_header *)s->base;
    s->hdr = h;
    s->nranks = (uint32_t)c->nranks; /* geometry is never re-read from the header */
    s->ranks = (struct shm_rank *)(s->base + h->off_ranks);
    s->arrival = (struct shm_arrival *)(s->base + h->off_arrival);
    s->staging = s->base + h->off_staging;
    s->slot_bytes = h->slot_bytes;
    s->pool = s->base + h->off_pool;
    s->pool_bytes = h->pool_bytes;
    c->shm = s;

    if (c->rank != 0) {
        status = check_joinable(c, h);
        if (status != COMM_OK)
            goto err_unmap;
    }

    struct shm_rank *me = &s->ranks[c->rank];
    uint32_t unclaimed = 0;
    if (!atomic_compare_exchange_strong(&me->claimed, &unclaimed, 1)) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: another rank already joined communicator %s as rank %d: every rank "
                 "needs its own number in 0..%d",
                 c->rank, c->id.str, c->rank, c->nranks - 1);
        status = COMM_ERR_INVALID;
        goto err_unmap;
    }
    me->pid = (int32_t)getpid();
    me->start_time = rt_proc_start_time(getpid());
    me->numa_node = bind_staging(c, s);
    atomic_store(&me->cpu, -1);
    atomic_store_explicit(&me->claimed, 2, memory_order_release); /* identity published */
    atomic_fetch_add(&h->attached, 1);

    unsigned us = 20;
    uint64_t next_liveness = rt_now_ns() + 100000000u;
    for (;;) {
        int32_t failed = atomic_load(&h->init_status);
        if (failed != COMM_OK) {
            int who = atomic_load(&h->init_rank);
            rt_error(c, COMM_ERR_PEER,
                     "rank %d: rank %d gave up joining communicator %s (%s); see its error",
                     c->rank, who, c->id.str, comm_status_string((comm_status_t)failed));
            status = COMM_ERR_PEER;
            goto err_leave;
        }
        if (atomic_load(&h->attached) == (uint32_t)c->nranks)
            break;
        /* A rank that joined and then died will never be followed by the rest in time:
         * say so now rather than at the timeout. */
        if (rt_now_ns() >= next_liveness) {
            next_liveness = rt_now_ns() + 100000000u;
            int dead = dead_member(c, s);
            if (dead >= 0) {
                rt_error(c, COMM_ERR_PEER,
                         "rank %d: rank %d (pid %d) joined communicator %s and then exited "
                         "before every rank had joined",
                         c->rank, dead, (int)s->ranks[dead].pid, c->id.str);
                status = COMM_ERR_PEER;
                goto err_leave;
            }
        }
        if (past(deadline)) {
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
            record_init_failure(h, c->rank, COMM_ERR_TIMEOUT);
            status = COMM_ERR_TIMEOUT;
            goto err_leave;
        }
        nap(&us);
    }
    if (c->rank == 0) {
        shm_unlink(s->name);
        s->unlinked = true;
    }
    /* Thread ranks of one process can read each other's buffers directly. */
    c->same_process = true;
    for (int r = 0; r < c->nranks; r++)
        c->same_process = c->same_process && s->ranks[r].pid == me->pid;
    return COMM_OK;

err_leave:
    record_init_failure(h, c->rank, status);
err_unmap:
    if (c->rank == 0 || status == COMM_ERR_TIMEOUT) {
        /* Nobody may join a communicator that failed; the name must not outlive it. */
        shm_unlink(s->name);
        s->unlinked = true;
    }
    mapping_release(s);
    c->shm = NULL;
err_free:
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
    mapping_release(s);
    free(s);
    c->shm = NULL;
}
