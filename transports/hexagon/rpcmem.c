/* SPDX-License-Identifier: MIT */
/*
 * rpcmem through libcdsprpc.so, loaded at run time: on a Snapdragon with the FastRPC
 * driver, buffers are ION/dma-buf memory the DSP can map (rpcmem_alloc2 on the system
 * heap, rpcmem_to_fd, fastrpc_mmap into the CDSP session; fastrpc_munmap before the
 * buffer is freed).  The names and values are those of Qualcomm's public rpcmem.h and
 * remote.h.  No such device exists where arcomm is developed: this path is untested.
 */
#include "hexagon.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#define RPCMEM_HEAP_ID_SYSTEM 25
#define RPCMEM_DEFAULT_FLAGS  1
#define CDSP_DOMAIN_ID        3
#define FASTRPC_MAP_FD        2 /* enum fastrpc_map_flags: STATIC, RESERVED, FD, ... */

struct rpc_lib {
    void *handle;
    void (*init)(void);
    void *(*alloc2)(int heapid, uint32_t flags, size_t size);
    void (*free)(void *p);
    int (*to_fd)(void *p);
    int (*mmap)(int domain, int fd, void *addr, int offset, size_t length, int flags);
    int (*munmap)(int domain, int fd, void *addr, size_t length);
};

static struct rpc_lib lib;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
    void *h = dlopen("libcdsprpc.so", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return;
    /* dlsym returns void *; POSIX guarantees the round trip to a function pointer. */
    *(void **)&lib.init = dlsym(h, "rpcmem_init");
    *(void **)&lib.alloc2 = dlsym(h, "rpcmem_alloc2");
    *(void **)&lib.free = dlsym(h, "rpcmem_free");
    *(void **)&lib.to_fd = dlsym(h, "rpcmem_to_fd");
    *(void **)&lib.mmap = dlsym(h, "fastrpc_mmap");
    *(void **)&lib.munmap = dlsym(h, "fastrpc_munmap");
    if (lib.alloc2 == NULL || lib.free == NULL || lib.to_fd == NULL || lib.mmap == NULL ||
        lib.munmap == NULL) {
        dlclose(h);
        return;
    }
    if (lib.init != NULL)
        lib.init();
    lib.handle = h;
}

bool hex_rpcmem_available(void)
{
    pthread_once(&once, load);
    return lib.handle != NULL;
}

void *hex_rpcmem_alloc(size_t bytes, int *fd)
{
    if (!hex_rpcmem_available())
        return NULL;
    void *p = lib.alloc2(RPCMEM_HEAP_ID_SYSTEM, RPCMEM_DEFAULT_FLAGS, bytes);
    if (p == NULL)
        return NULL;
    int f = lib.to_fd(p);
    if (f < 0 || lib.mmap(CDSP_DOMAIN_ID, f, p, 0, bytes, FASTRPC_MAP_FD) != 0) {
        lib.free(p);
        return NULL;
    }
    *fd = f;
    return p;
}

void hex_rpcmem_free(void *p, int fd, size_t bytes)
{
    if (p == NULL || !hex_rpcmem_available())
        return;
    lib.munmap(CDSP_DOMAIN_ID, fd, p, bytes);
    lib.free(p);
}
