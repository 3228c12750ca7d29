/* SPDX-License-Identifier: MIT */
/*
 * Buffers of the Hexagon transport: allocation (rpcmem, else a dma-heap dma-buf, else
 * a memfd), each mapped with a 4 KiB guard page behind it; the per-rank registry in
 * the segment; and the import of a peer's buffer into this session.
 *
 * How a descriptor crosses processes: the importer takes it from the owner with
 * pidfd_getfd(2) (Linux >= 5.6; works for memfd and dma-buf, needs ptrace access to
 * the owner), else opens /proc/<owner pid>/fd/<n> (memfd only, same uid).  Either way
 * the descriptor is checked against the (st_dev, st_ino) the owner published, mapped,
 * and closed at once: only the owner keeps descriptors, and it closes them in
 * comm_mem_free or comm_destroy.  Nothing is created in the file system.
 */
#include "hexagon.h"
#include "shm/shm.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <linux/dma-heap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define DMA_HEAP_PATH "/dev/dma_heap/system"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

const char *hex_mem_kind_name(enum hex_mem_kind k)
{
    switch (k) {
    case HEX_MEM_RPCMEM:
        return "rpcmem";
    case HEX_MEM_DMAHEAP:
        return "dma-heap";
    case HEX_MEM_MEMFD:
        return "memfd";
    }
    return "?";
}

comm_status_t hex_mem_pick(struct comm *c)
{
    struct hex_comm *hx = hex_of(c);
    const char *want = c->knobs.hex.mem;
    bool heap = access(DMA_HEAP_PATH, R_OK | W_OK) == 0;
    if (strcmp(want, "auto") == 0 || want[0] == '\0') {
        hx->mem_kind = hex_rpcmem_available() ? HEX_MEM_RPCMEM
                       : heap                 ? HEX_MEM_DMAHEAP
                                              : HEX_MEM_MEMFD;
        return COMM_OK;
    }
    if (strcmp(want, "memfd") == 0) {
        hx->mem_kind = HEX_MEM_MEMFD;
        return COMM_OK;
    }
    if (strcmp(want, "dma-heap") == 0 && heap) {
        hx->mem_kind = HEX_MEM_DMAHEAP;
        return COMM_OK;
    }
    if (strcmp(want, "rpcmem") == 0 && hex_rpcmem_available()) {
        hx->mem_kind = HEX_MEM_RPCMEM;
        return COMM_OK;
    }
    rt_error(c, COMM_ERR_INVALID,
             "rank %d: ARCOMM_HEX_MEM=%s is not available here (rpcmem needs libcdsprpc.so, "
             "dma-heap needs %s); use auto or memfd",
             c->rank, want, DMA_HEAP_PATH);
    return COMM_ERR_INVALID;
}

/* Maps fd's first bytes with an inaccessible guard page behind them. */
/*
 * Thread ranks of one process import each other's buffers through the owner's own
 * descriptor: the owner must not close it while a peer maps it (the number could be
 * reused meanwhile).  Closing and importing by descriptor number take this lock.
 */
static pthread_mutex_t fd_lock = PTHREAD_MUTEX_INITIALIZER;

static uint8_t *map_guarded(int fd, size_t bytes)
{
    uint8_t *r = mmap(NULL, bytes + HEX_GUARD_BYTES, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
        return NULL;
    if (mmap(r, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        int e = errno;
        munmap(r, bytes + HEX_GUARD_BYTES);
        errno = e;
        return NULL;
    }
    return r;
}

static int make_fd(struct comm *c, size_t bytes)
{
    struct hex_comm *hx = hex_of(c);
    if (hx->mem_kind == HEX_MEM_DMAHEAP) {
        int heap = open(DMA_HEAP_PATH, O_RDONLY | O_CLOEXEC);
        if (heap < 0)
            return -1;
        struct dma_heap_allocation_data d = {.len = bytes, .fd_flags = O_RDWR | O_CLOEXEC};
        int r = ioctl(heap, DMA_HEAP_IOCTL_ALLOC, &d);
        int e = errno;
        close(heap);
        errno = e;
        return r < 0 ? -1 : (int)d.fd;
    }
    char name[48];
    snprintf(name, sizeof(name), "arcomm-hex-r%d", c->rank);
    int fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)bytes) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

comm_status_t hex_mem_alloc_slot(struct comm *c, size_t bytes, int slot, void **ptr)
{
    struct hex_comm *hx = hex_of(c);
    struct hex_own_buf *b = &hx->own[slot];
    if (bytes > SIZE_MAX - 2 * HEX_PAGE) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: comm_mem_alloc(%zu) is too large", c->rank, bytes);
        return COMM_ERR_NOMEM;
    }
    size_t rounded = (bytes + HEX_PAGE - 1) / HEX_PAGE * HEX_PAGE;
    int fd = -1;
    uint8_t *base = NULL;
    void *rpc = NULL;
    if (hx->mem_kind == HEX_MEM_RPCMEM) {
        rpc = hex_rpcmem_alloc(rounded, &fd);
        base = rpc;
    } else {
        fd = make_fd(c, rounded);
        base = fd < 0 ? NULL : map_guarded(fd, rounded);
    }
    if (base == NULL) {
        rt_error(c, COMM_ERR_NOMEM,
                 "rank %d: allocating %zu bytes of %s for the HTP session "
                 "failed: %s",
                 c->rank, rounded, hex_mem_kind_name(hx->mem_kind), strerror(errno));
        if (fd >= 0 && rpc == NULL)
            close(fd);
        return COMM_ERR_NOMEM;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rt_error(c, COMM_ERR_SYSTEM, "rank %d: fstat of a new %s buffer failed: %s", c->rank,
                 hex_mem_kind_name(hx->mem_kind), strerror(errno));
        if (rpc != NULL) {
            hex_rpcmem_free(rpc, fd, rounded);
        } else {
            munmap(base, rounded + HEX_GUARD_BYTES);
            close(fd);
        }
        return COMM_ERR_SYSTEM;
    }
    b->live = true;
    b->fd = fd;
    b->base = base;
    b->bytes = rounded;
    b->rpc = rpc;
    struct hex_reg_entry *e = &hx->reg[c->rank]->e[slot];
    e->fd = fd;
    e->bytes = rounded;
    e->dev = (uint64_t)st.st_dev;
    e->ino = (uint64_t)st.st_ino;
    atomic_store_explicit(&e->gen, atomic_load(&e->gen) + 1, memory_order_release);
    *ptr = base;
    return COMM_OK;
}

comm_status_t hex_mem_alloc(struct comm *c, size_t bytes, void **ptr)
{
    struct hex_comm *hx = hex_of(c);
    for (int slot = 1; slot < (int)HEX_WIRE_SLOT; slot++)
        if (!hx->own[slot].live)
            return hex_mem_alloc_slot(c, bytes, slot, ptr);
    rt_error(c, COMM_ERR_NOMEM,
             "rank %d: comm_mem_alloc: all %u Hexagon buffers of this rank are in use; free "
             "some, or allocate fewer larger buffers and use offsets",
             c->rank, HEX_WIRE_SLOT - 1);
    return COMM_ERR_NOMEM;
}

static void release(struct comm *c, int slot);

comm_status_t hex_wire_scratch(struct comm *c, size_t bytes)
{
    struct hex_comm *hx = hex_of(c);
    struct hex_own_buf *b = &hx->own[HEX_WIRE_SLOT];
    if (b->live && b->bytes >= bytes)
        return COMM_OK;
    /* Grown, not kept in step with each call: peers re-import it when its generation
     * changes (hex_mem_import). */
    release(c, HEX_WIRE_SLOT);
    void *p;
    return hex_mem_alloc_slot(c, bytes, HEX_WIRE_SLOT, &p);
}

static void release(struct comm *c, int slot)
{
    struct hex_comm *hx = hex_of(c);
    struct hex_own_buf *b = &hx->own[slot];
    if (!b->live)
        return;
    if (hx->reg[c->rank] != NULL) {
        /* Dead first: an importer that read the old generation rechecks it. */
        struct hex_reg_entry *e = &hx->reg[c->rank]->e[slot];
        atomic_store_explicit(&e->gen, atomic_load(&e->gen) + 1, memory_order_release);
    }
    pthread_mutex_lock(&fd_lock);
    if (b->rpc != NULL) {
        hex_rpcmem_free(b->rpc, b->fd, b->bytes); /* fastrpc_munmap, then free */
    } else {
        munmap(b->base, b->bytes + HEX_GUARD_BYTES);
        close(b->fd);
    }
    pthread_mutex_unlock(&fd_lock);
    memset(b, 0, sizeof(*b));
    b->fd = -1;
}

comm_status_t hex_mem_free(struct comm *c, void *ptr)
{
    struct hex_comm *hx = hex_of(c);
    for (int slot = 1; slot < (int)HEX_WIRE_SLOT; slot++) {
        if (hx->own[slot].live && hx->own[slot].base == ptr) {
            release(c, slot);
            return COMM_OK;
        }
    }
    rt_error(c, COMM_ERR_INVALID,
             "rank %d: comm_mem_free(%p): not a live buffer from comm_mem_alloc on this rank's "
             "Hexagon communicator (freed twice, or from another communicator?)",
             c->rank, ptr);
    return COMM_ERR_INVALID;
}

void hex_mem_release_all(struct comm *c)
{
    struct hex_comm *hx = hex_of(c);
    if (hx->imports != NULL) {
        for (size_t i = 0; i < (size_t)c->nranks * HEX_REG_SLOTS; i++) {
            struct hex_import *m = &hx->imports[i];
            if (m->gen != 0 && (int)(i / HEX_REG_SLOTS) != c->rank)
                munmap(m->base, m->bytes + HEX_GUARD_BYTES);
        }
        free(hx->imports);
        hx->imports = NULL;
    }
    for (int slot = 0; slot < (int)HEX_REG_SLOTS; slot++)
        release(c, slot);
}

int hex_mem_lookup(const struct comm *c, const void *p, size_t len, uint64_t *offset)
{
    const struct hex_comm *hx = hex_of(c);
    const uint8_t *q = p;
    for (int slot = 1; slot < (int)HEX_WIRE_SLOT; slot++) {
        const struct hex_own_buf *b = &hx->own[slot];
        if (b->live && q >= b->base && (size_t)(q - b->base) <= b->bytes &&
            len <= b->bytes - (size_t)(q - b->base)) {
            *offset = (uint64_t)(q - b->base);
            return slot;
        }
    }
    return -1;
}

/* A descriptor for the owner's fd in this process; *owned says whether to close it. */
static int take_fd(struct comm *c, int peer, int their_fd, bool *owned, char *how, size_t len)
{
    pid_t pid = c->shm->ranks[peer].pid;
    *owned = false;
    if (pid == getpid()) {
        snprintf(how, len, "the same process");
        return their_fd; /* held by the owner, who is inside this call */
    }
    *owned = true;
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd >= 0) {
        int fd = (int)syscall(SYS_pidfd_getfd, pidfd, their_fd, 0);
        int e = errno;
        close(pidfd);
        if (fd >= 0)
            return fd;
        errno = e;
    }
    int e1 = errno;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, their_fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        snprintf(how, len, "pidfd_getfd: %s; open %s: %s", strerror(e1), path, strerror(errno));
    return fd;
}

comm_status_t hex_mem_import(struct comm *c, int peer, int slot, struct hex_import **out)
{
    struct hex_comm *hx = hex_of(c);
    struct hex_import *m = &hx->imports[(size_t)peer * HEX_REG_SLOTS + (size_t)slot];
    struct hex_reg_entry *e = &hx->reg[peer]->e[slot];
    uint32_t gen = atomic_load_explicit(&e->gen, memory_order_acquire);
    if ((gen & 1u) == 0) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: rank %d's Hexagon buffer %d is not allocated (freed while in use?)",
                 c->rank, peer, slot);
        return COMM_ERR_INVALID;
    }
    if (m->gen == gen) {
        *out = m;
        return COMM_OK;
    }
    if (peer == c->rank) {
        m->gen = gen;
        m->base = hx->own[slot].base;
        m->bytes = hx->own[slot].bytes;
        *out = m;
        return COMM_OK;
    }
    if (m->gen != 0) {
        munmap(m->base, m->bytes + HEX_GUARD_BYTES);
        m->gen = 0;
    }
    uint64_t bytes = e->bytes, dev = e->dev, ino = e->ino;
    char how[256] = "";
    bool owned;
    pthread_mutex_lock(&fd_lock);
    int fd = take_fd(c, peer, e->fd, &owned, how, sizeof(how));
    if (fd < 0) {
        pthread_mutex_unlock(&fd_lock);
        rt_error(c, COMM_ERR_SYSTEM,
                 "rank %d: cannot take rank %d's buffer descriptor (%s); process ranks need "
                 "ptrace access to each other (same user, no seccomp filter on pidfd_getfd) "
                 "or memfd buffers (ARCOMM_HEX_MEM=memfd)",
                 c->rank, peer, how);
        return COMM_ERR_SYSTEM;
    }
    comm_status_t status = COMM_ERR_SYSTEM;
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_dev != dev || (uint64_t)st.st_ino != ino) {
        rt_error(c, COMM_ERR_SYSTEM,
                 "rank %d: descriptor %d of rank %d is not the buffer rank %d published (it "
                 "was closed and reused?)",
                 c->rank, (int)e->fd, peer, peer);
        goto err_close;
    }
    uint8_t *base = map_guarded(fd, bytes);
    if (base == NULL) {
        rt_error(c, COMM_ERR_SYSTEM, "rank %d: mapping %llu bytes of rank %d's buffer failed: %s",
                 c->rank, (unsigned long long)bytes, peer, strerror(errno));
        goto err_close;
    }
    if (atomic_load_explicit(&e->gen, memory_order_acquire) != gen) {
        munmap(base, bytes + HEX_GUARD_BYTES);
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: rank %d freed its Hexagon buffer %d while this rank mapped it", c->rank,
                 peer, slot);
        status = COMM_ERR_INVALID;
        goto err_close;
    }
    if (owned)
        close(fd);
    pthread_mutex_unlock(&fd_lock);
    m->gen = gen;
    m->base = base;
    m->bytes = bytes;
    *out = m;
    return COMM_OK;

err_close:
    if (owned)
        close(fd);
    pthread_mutex_unlock(&fd_lock);
    return status;
}
