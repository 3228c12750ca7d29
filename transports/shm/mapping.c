/* SPDX-License-Identifier: MIT */
/*
 * The process-wide registry of segment mappings (mapping.h): one mapping per segment per
 * process, shared by the thread ranks and communicators on it, reference-counted, with
 * the page reservation of comm_mem_alloc and the transports' per-process state on it.
 */
#include "mapping.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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
    int fd;       /* kept to reserve comm_mem_alloc pages (shm_segment_reserve) */
    int refs;     /* communicators of this process on this mapping */
    int ext_refs; /* holders of the transport's per-process state (shm_mapping_ext_hold) */
    struct shm_mapping *next;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_mapping *registry;

/* With registry_lock held: when the process has a mapping of s's segment, s takes a
 * reference to it (base, size, record) and the answer is true. */
static bool take_registered(struct shm_comm *s)
{
    struct shm_mapping *m = registry;
    while (m != NULL && strcmp(m->name, s->name) != 0)
        m = m->next;
    if (m == NULL)
        return false;
    m->refs++;
    s->base = m->base;
    s->size = m->size;
    s->mapping = m;
    return true;
}

/*
 * Makes s's fresh mapping the process's mapping of its segment, or, when another
 * thread of this process registered one meanwhile (it mapped the file between our
 * shm_open and here), drops ours and uses that one: one mapping per segment, always.
 */
void shm_mapping_share(struct shm_comm *s, int fd)
{
    struct shm_mapping *fresh = calloc(1, sizeof(*fresh));
    uint8_t *own = s->base;
    size_t own_size = s->size;
    pthread_mutex_lock(&registry_lock);
    if (take_registered(s)) {
        munmap(own, own_size);
    } else if (fresh != NULL) {
        snprintf(fresh->name, sizeof(fresh->name), "%s", s->name);
        fresh->base = s->base;
        fresh->size = s->size;
        fresh->fd = fd;
        fresh->refs = 1;
        fresh->next = registry;
        registry = fresh;
        s->mapping = fresh;
        fresh = NULL;
        fd = -1;
    }
    /* (Without memory for the record the mapping simply stays this rank's own, and its
     * arena pages are reserved with MADV_POPULATE_WRITE instead of through the fd.) */
    pthread_mutex_unlock(&registry_lock);
    free(fresh);
    if (fd >= 0)
        close(fd);
}

bool shm_mapping_find(struct shm_comm *s)
{
    pthread_mutex_lock(&registry_lock);
    bool found = take_registered(s);
    pthread_mutex_unlock(&registry_lock);
    return found;
}

void shm_mapping_release(struct shm_comm *s)
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
        if (m->fd >= 0)
            close(m->fd);
        free(m);
    }
    s->mapping = NULL;
}

int shm_segment_reserve(struct comm *c, void *p, size_t len)
{
    struct shm_comm *s = c->shm;
    uint64_t off = (uint64_t)((uint8_t *)p - s->base);
    uint64_t start = off / SHM_PAGE * SHM_PAGE;
    uint64_t end = shm_align_up(off + len, SHM_PAGE);
    if (end > s->size)
        end = s->size;
    /* The fd of the mapping record when there is one (thread ranks share it), else the
     * page tables: either fails where touching the pages later would SIGBUS. */
    int fd = s->mapping ? s->mapping->fd : -1;
    if (fd >= 0)
        return posix_fallocate(fd, (off_t)start, (off_t)(end - start));
#ifdef MADV_POPULATE_WRITE
    if (madvise(s->base + start, end - start, MADV_POPULATE_WRITE) != 0)
        return errno == EFAULT ? ENOSPC : errno;
    return 0;
#else
    return ENOTSUP;
#endif
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
