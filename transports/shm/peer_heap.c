/* SPDX-License-Identifier: MIT */
/*
 * The shared heaps of process ranks (heap_abi.h): a process that runs with
 * libarcomm_heap.so preloaded serves its large allocations from one memfd mapping, and
 * publishes the memfd's number and size at join (struct shm_rank line 0).  Each peer
 * process maps that memfd through /proc/<pid>/fd/<fd> (the kernel checks the same
 * permission as for process_vm_readv), so that a buffer the application allocated
 * with plain malloc is reachable at base + offset in every rank, as comm_mem_alloc's
 * buffers are: the one-pass path of thread ranks, for process ranks.
 *
 * One mapping per peer process in this process, shared by every communicator and
 * thread rank that needs it, reference-counted, unmapped with its last communicator.
 * Nothing a peer publishes is trusted: the descriptor must name a memfd made by the
 * heap ("/memfd:arcomm-heap"), of exactly the published size, at most SHM_HEAP_MAX.
 */
#include "heap/heap_abi.h"
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The preload library's entries, NULL without it (heap_abi.h). */
extern int arcomm_heap_region(struct arcomm_heap_info *info) __attribute__((weak));
extern int arcomm_heap_share(const void *p, uint64_t len, uint64_t *offset) __attribute__((weak));

/* What a heap's memfd is called in /proc/<pid>/fd (the heap's memfd_create name). */
#define HEAP_LINK_PREFIX "/memfd:arcomm-heap"

struct peer_heap {
    int32_t pid;
    uint64_t start_time; /* with pid: the process (pids are reused) */
    uint8_t *base;
    uint64_t bytes;
    int refs;
    struct peer_heap *next;
};

static pthread_mutex_t heaps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct peer_heap *heaps;

bool shm_heap_own(struct shm_heap_own *own)
{
    struct arcomm_heap_info info;
    if (arcomm_heap_region == NULL || arcomm_heap_region(&info) != 1 || info.bytes == 0 ||
        info.bytes > SHM_HEAP_MAX || info.fd < 0)
        return false;
    own->base = info.base;
    own->bytes = info.bytes;
    own->min_bytes = info.min_bytes;
    own->fd = info.fd;
    return true;
}

/*
 * The heap decides whether a buffer is shared: not every address inside its mapping is
 * (a block that was live at a fork is private to the parent since), and asking marks the
 * block as one peers use, which a later fork keeps shared.
 */
bool shm_heap_share(const void *p, size_t len, uint64_t *offset)
{
    return arcomm_heap_share != NULL && arcomm_heap_share(p, len, offset) == 1;
}

/* Maps rank r's heap (another process's); NULL, with why, when it cannot. */
static uint8_t *map_peer(const struct shm_rank *r, char *why, size_t len)
{
    char path[64], link[128];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)r->pid, (int)r->heap_fd);
    ssize_t n = readlink(path, link, sizeof(link) - 1);
    if (n < 0) {
        snprintf(why, len, "readlink %s: %s", path, strerror(errno));
        return NULL;
    }
    link[n] = '\0';
    if (strncmp(link, HEAP_LINK_PREFIX, strlen(HEAP_LINK_PREFIX)) != 0) {
        snprintf(why, len, "%s is %s, not the heap's memfd", path, link);
        return NULL;
    }
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, len, "open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    uint8_t *base = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != r->heap_bytes) {
        snprintf(why, len, "%s is not a file of the published %llu bytes", path,
                 (unsigned long long)r->heap_bytes);
    } else {
        base = mmap(NULL, r->heap_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        if (base == MAP_FAILED) {
            snprintf(why, len, "mmap of %llu bytes of %s: %s", (unsigned long long)r->heap_bytes,
                     path, strerror(errno));
            base = NULL;
        }
    }
    close(fd);
    return base;
}

/* With heaps_lock held: a reference to rank r's heap, mapped now if no communicator of
 * this process has it yet. */
static uint8_t *hold_peer(const struct shm_rank *r, char *why, size_t len)
{
    struct peer_heap *h = heaps;
    while (h != NULL && !(h->pid == r->pid && h->start_time == r->start_time))
        h = h->next;
    if (h != NULL) {
        if (h->bytes != r->heap_bytes) {
            snprintf(why, len, "its heap's size changed (%llu, mapped %llu)",
                     (unsigned long long)r->heap_bytes, (unsigned long long)h->bytes);
            return NULL;
        }
        h->refs++;
        return h->base;
    }
    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        snprintf(why, len, "out of memory");
        return NULL;
    }
    h->base = map_peer(r, why, len);
    if (h->base == NULL) {
        free(h);
        return NULL;
    }
    h->pid = r->pid;
    h->start_time = r->start_time;
    h->bytes = r->heap_bytes;
    h->refs = 1;
    h->next = heaps;
    heaps = h;
    return h->base;
}

/* With heaps_lock held: drops a reference taken by hold_peer. */
static void drop_peer(const uint8_t *base)
{
    for (struct peer_heap **pp = &heaps; *pp != NULL; pp = &(*pp)->next) {
        struct peer_heap *h = *pp;
        if (h->base != base)
            continue;
        if (--h->refs == 0) {
            munmap(h->base, h->bytes);
            *pp = h->next;
            free(h);
        }
        return;
    }
}

bool shm_heap_map_peers(struct comm *c, struct shm_comm *s, const struct shm_heap_own *own)
{
    s->heap_base = calloc(s->nranks, sizeof(*s->heap_base));
    s->heap_bytes = calloc(s->nranks, sizeof(*s->heap_bytes));
    if (s->heap_base == NULL || s->heap_bytes == NULL) {
        shm_heap_unmap_peers(c, s);
        return false;
    }
    const struct shm_rank *me = &s->ranks[c->rank];
    bool ok = true;
    pthread_mutex_lock(&heaps_lock);
    for (uint32_t p = 0; p < s->nranks && ok; p++) {
        const struct shm_rank *r = &s->ranks[p];
        char why[256] = "";
        if (r->heap_bytes == 0 || r->heap_bytes > SHM_HEAP_MAX || r->heap_fd < 0) {
            rt_log(c, RT_LOG_INFO,
                   "rank %d: rank %u (pid %d) has no shared heap (libarcomm_heap.so not "
                   "preloaded there): process ranks stage malloc'd buffers",
                   c->rank, p, (int)r->pid);
            ok = false;
            break;
        }
        s->heap_min = r->heap_min > s->heap_min ? r->heap_min : s->heap_min;
        if (r->pid == me->pid) {
            /* A thread rank of this process: its heap is ours. */
            s->heap_base[p] = own->base;
            s->heap_bytes[p] = own->bytes;
        } else if ((s->heap_base[p] = hold_peer(r, why, sizeof(why))) != NULL) {
            s->heap_bytes[p] = r->heap_bytes;
        } else {
            rt_log(c, RT_LOG_INFO,
                   "rank %d: cannot map the shared heap of rank %u (pid %d): %s; process "
                   "ranks stage malloc'd buffers (the same permission as process_vm_readv "
                   "is needed: same user, ptrace_scope)",
                   c->rank, p, (int)r->pid, why);
            ok = false;
        }
    }
    pthread_mutex_unlock(&heaps_lock);
    if (!ok)
        shm_heap_unmap_peers(c, s);
    return ok;
}

void shm_heap_unmap_peers(const struct comm *c, struct shm_comm *s)
{
    if (s->heap_base != NULL) {
        /* This process's own heap (every rank of it has heap_base[c->rank]) is not held. */
        const uint8_t *own = s->heap_base[c->rank];
        pthread_mutex_lock(&heaps_lock);
        for (uint32_t p = 0; p < s->nranks; p++) {
            if (s->heap_base[p] != NULL && s->heap_base[p] != own)
                drop_peer(s->heap_base[p]);
        }
        pthread_mutex_unlock(&heaps_lock);
    }
    free(s->heap_base);
    free(s->heap_bytes);
    s->heap_base = NULL;
    s->heap_bytes = NULL;
}
