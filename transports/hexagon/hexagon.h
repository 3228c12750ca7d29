/* SPDX-License-Identifier: MIT */
/*
 * The Hexagon transport: one emulated (or, with libcdsprpc, rpcmem-backed) HTP session
 * per rank, buffers shared between sessions by file descriptor, fences in a 64 KiB
 * buffer per session cloned into every peer.  The communicator's shm segment serves
 * the rendezvous, the per-call handshake and each rank's buffer registry.
 *
 * Buffer registry: rank r's lives in its first staging slot of the segment (the
 * Hexagon transport stages nothing).  Entry 0 is the rank's fence buffer; the others
 * are its comm_mem_alloc buffers.  Peers import an entry by taking the owner's fd
 * (pidfd_getfd(2), else /proc/<pid>/fd/<n>; the same fd in one process), check its
 * identity (st_dev, st_ino) and map it at their own address: pointers never cross
 * sessions, a call passes (entry, offset).
 */
#ifndef ARCOMM_HEX_TRANSPORT_H
#define ARCOMM_HEX_TRANSPORT_H

#include "comm_base.h"
#include "hex_op.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HEX_REG_SLOTS 128u
/* The registry entry of a rank's wire staging buffer (hex_wire_scratch): not a
 * comm_mem_alloc slot; peers find it there, at offset 0. */
#define HEX_WIRE_SLOT   (HEX_REG_SLOTS - 1u)
#define HEX_PAGE        4096u
#define HEX_GUARD_BYTES 4096u

/* One registry entry (32 bytes); only the owning rank writes it. */
struct hex_reg_entry {
    _Atomic uint32_t gen; /* odd: live; bumped at allocation and at free */
    int32_t fd;           /* the owner's descriptor of the buffer */
    uint64_t bytes;       /* size (a multiple of 4 KiB, guard page not included) */
    uint64_t dev;         /* st_dev of the file behind fd */
    uint64_t ino;         /* st_ino of it: an importer checks both */
};

struct hex_registry {
    struct hex_reg_entry e[HEX_REG_SLOTS];
};

_Static_assert(sizeof(struct hex_reg_entry) == 32, "a registry entry is 32 bytes");

enum hex_mem_kind { HEX_MEM_MEMFD = 0, HEX_MEM_DMAHEAP = 1, HEX_MEM_RPCMEM = 2 };

/* A buffer this rank owns. */
struct hex_own_buf {
    bool live;
    int fd;
    uint8_t *base; /* this session's mapping */
    size_t bytes;  /* rounded to 4 KiB */
    void *rpc;     /* rpcmem_alloc2 pointer (== base), or NULL */
};

/* A peer's buffer as mapped in this session. */
struct hex_import {
    uint32_t gen; /* registry generation it was imported at; 0 = none */
    uint8_t *base;
    size_t bytes;
};

struct hex_comm {
    struct hex_session *session;
    enum hex_mem_kind mem_kind;
    struct hex_own_buf own[HEX_REG_SLOTS];
    struct hex_import *imports;                  /* [nranks][HEX_REG_SLOTS] */
    struct hex_registry *reg[HEX_MAX_RANKS];     /* every rank's registry, in the segment */
    struct hex_fence_slot *fence[HEX_MAX_RANKS]; /* every session's call slot, mapped here */
    uint32_t seq_last;                           /* the last fence sequence of the communicator */
    uint32_t vtcm_bytes;
    uint32_t threads;
    long fence_timeout_ms;   /* < 0 = never */
    uint64_t next_liveness;  /* when the op's poll next checks peer processes */
    uint64_t next_hook;      /* when the op's poll next runs the wait hook (RT_NEVER: none) */
    uint32_t debug_stall_ms; /* tests: the next op starts this late */
    int last_peer_dead;      /* the poll saw a dead peer process (its rank) + 1 */
};

/* The transport's lifecycle, for the Hexagon backend (collectives/hexagon/). */
bool hex_probe(const struct transport_probe *p, char *why, size_t len);
comm_status_t hex_setup(struct comm *c);
void hex_teardown(struct comm *c);
void hex_publish_failure(struct comm *c, comm_status_t status, const char *msg, bool in_call);

static inline struct hex_comm *hex_of(const struct comm *c)
{
    return c->xport;
}

/* mem.c */
comm_status_t hex_mem_pick(struct comm *c);
comm_status_t hex_mem_alloc_slot(struct comm *c, size_t bytes, int slot, void **ptr);
comm_status_t hex_mem_alloc(struct comm *c, size_t bytes, void **ptr);
comm_status_t hex_mem_free(struct comm *c, void *ptr);
void hex_mem_release_all(struct comm *c);
/* Finds the own buffer holding [p, p + len): its slot and the offset, or -1. */
int hex_mem_lookup(const struct comm *c, const void *p, size_t len, uint64_t *offset);
/* Maps peer's registry slot in this session (cached); COMM_OK or an error recorded. */
comm_status_t hex_mem_import(struct comm *c, int peer, int slot, struct hex_import **out);
const char *hex_mem_kind_name(enum hex_mem_kind k);
/* Makes this rank's wire staging buffer (registry entry HEX_WIRE_SLOT) at least bytes
 * long, reallocating it larger when it is not; COMM_OK or an error recorded.  Called
 * before a call's handshake: the previous call's exit fence means no peer reads it. */
comm_status_t hex_wire_scratch(struct comm *c, size_t bytes);

/* rpcmem.c: libcdsprpc.so, loaded at run time when present. */
bool hex_rpcmem_available(void);
void *hex_rpcmem_alloc(size_t bytes, int *fd);
void hex_rpcmem_free(void *p, int fd, size_t bytes);

/* Tests: makes this rank's session fail with status at its next fence, as if the
 * DSP had hit an error, or start its next op stall_ms late. */
void hex_debug_inject_status(struct comm *c, comm_status_t status);
void hex_debug_stall(struct comm *c, uint32_t stall_ms);

/* What this build and this machine have, for arinfo. */
struct hex_info {
    bool rpcmem;      /* libcdsprpc.so loads here: buffers are real rpcmem */
    bool dma_heap;    /* /dev/dma_heap/system exists */
    const char *ops;  /* where op_allreduce runs: "host emulation" */
    const char *vsum; /* the sum implementation of the emulation ("scalar") */
    bool cross_v69;   /* this build cross-compiled the DSP sources for v69 */
    bool qemu_v67;    /* this build runs the v67 driver under qemu-hexagon */
    bool sdk;         /* this build used a Hexagon SDK */
};
void hex_info_get(struct hex_info *info);

#endif /* ARCOMM_HEX_TRANSPORT_H */
