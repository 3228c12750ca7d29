/* SPDX-License-Identifier: MIT */
/*
 * The Hexagon transport: the lifecycle of a rank's HTP session:
 * setup (segment rendezvous, session, fence buffer, fence exchange with the peers,
 * the starting sequence), teardown, failure publication.
 */
#include "hexagon.h"
#include "arcomm_build.h"
#include "emu/hex_emu.h"
#include "hex_vsum.h"
#include "shm/shm.h"
#include "topo.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool hex_probe(const struct transport_probe *p, char *why, size_t len)
{
    if (p->device != COMM_DEVICE_HEXAGON) {
        snprintf(why, len, "hexagon serves COMM_DEVICE_HEXAGON buffers only");
        return false;
    }
    if (p->nranks > (int)HEX_MAX_RANKS) {
        snprintf(why, len, "hexagon runs at most %u sessions, not %d", HEX_MAX_RANKS, p->nranks);
        return false;
    }
    return true;
}

static struct hex_fence_slot *own_fence(const struct hex_comm *hx, unsigned slot)
{
    return (struct hex_fence_slot *)hx->own[0].base + slot;
}

/* The op's poll while it waits on a fence: comm_abort, and peer processes that died. */
static int32_t hx_poll(void *ctx)
{
    struct comm *c = ctx;
    struct hex_comm *hx = hex_of(c);
    if (atomic_load_explicit(&c->aborted, memory_order_relaxed))
        return HEX_ERR_ABORTED;
    uint64_t now = rt_now_ns();
    if (rt_wait_hook_run(c, now, &hx->next_hook))
        return HEX_ERR_ABORTED;
    if (!c->shm->same_process && now >= hx->next_liveness) {
        hx->next_liveness = now + RT_LIVENESS_PERIOD_NS;
        int p = shm_dead_peer(c, SHM_PEERS_ALL);
        if (p >= 0) {
            hx->last_peer_dead = p + 1;
            return HEX_ERR_PEER;
        }
    }
    return HEX_OK;
}

struct reg_wait {
    int stage; /* 0: every fence registered; 1: initialised; 2: every peer mapped all */
};

static int fences_ready(struct comm *c, void *arg)
{
    const struct reg_wait *w = arg;
    struct hex_comm *hx = hex_of(c);
    for (int p = 0; p < c->nranks; p++) {
        if (w->stage == 0) {
            uint32_t gen = atomic_load_explicit(&hx->reg[p]->e[0].gen, memory_order_acquire);
            if ((gen & 1u) == 0)
                return 0;
        } else {
            const struct hex_fence_slot *id =
                hx->fence[p] - HEX_FENCE_SLOT_CALL + HEX_FENCE_SLOT_ID;
            if (__atomic_load_n(w->stage == 1 ? &id->magic : &id->ready, __ATOMIC_ACQUIRE) !=
                (w->stage == 1 ? HEX_FENCE_MAGIC : 1u))
                return 0;
        }
    }
    return 1;
}

/* Own fence buffer, its exchange with the peers, and the first sequence number. */
static comm_status_t setup_fences(struct comm *c)
{
    struct hex_comm *hx = hex_of(c);
    void *fb;
    comm_status_t st = hex_mem_alloc_slot(c, HEX_FENCE_BYTES, 0, &fb);
    if (st != COMM_OK)
        return st;
    struct hex_fence_slot *id = own_fence(hx, HEX_FENCE_SLOT_ID);
    id->rank = (uint32_t)c->rank;
    id->nranks = (uint32_t)c->nranks;
    atomic_store(&own_fence(hx, HEX_FENCE_SLOT_CALL)->seq, (uint32_t)c->knobs.hex.seq_start);
    __atomic_store_n(&id->magic, HEX_FENCE_MAGIC, __ATOMIC_RELEASE);

    struct reg_wait w = {.stage = 0};
    st = shm_wait(c, fences_ready, &w, "hexagon setup (fence buffers)");
    if (st != COMM_OK)
        return st;
    for (int p = 0; p < c->nranks; p++) {
        struct hex_import *m;
        st = hex_mem_import(c, p, 0, &m);
        if (st != COMM_OK)
            return st;
        hx->fence[p] = (struct hex_fence_slot *)m->base + HEX_FENCE_SLOT_CALL;
    }
    w.stage = 1;
    st = shm_wait(c, fences_ready, &w, "hexagon setup (fence contents)");
    if (st != COMM_OK)
        return st;
    /* Sessions may start from different sequences (reused sessions, tests): every rank
     * starts from the largest, wrap-aware.  Nobody moves a fence before every rank
     * passed the first call's handshake, so all ranks read the same values here. */
    uint32_t max = atomic_load(&hx->fence[0]->seq);
    for (int p = 0; p < c->nranks; p++) {
        const struct hex_fence_slot *idp = hx->fence[p] - HEX_FENCE_SLOT_CALL + HEX_FENCE_SLOT_ID;
        if (idp->rank != (uint32_t)p || idp->nranks != (uint32_t)c->nranks) {
            rt_error(c, COMM_ERR_INVALID,
                     "rank %d: the fence buffer registered by rank %d says rank %u of %u", c->rank,
                     p, idp->rank, idp->nranks);
            return COMM_ERR_INVALID;
        }
        uint32_t s = atomic_load(&hx->fence[p]->seq);
        if ((int32_t)(s - max) > 0)
            max = s;
    }
    hx->seq_last = max;
    /* No rank may return from comm_init (and so free its fence buffer in comm_destroy)
     * before every rank has mapped every fence buffer. */
    __atomic_store_n(&id->ready, 1u, __ATOMIC_RELEASE);
    w.stage = 2;
    return shm_wait(c, fences_ready, &w, "hexagon setup (fences exchanged)");
}

_Static_assert(RT_KNOB_HEX_THREADS_MAX == HEX_MAX_THREADS,
               "ARCOMM_HEX_THREADS's range in the knob table is the HVX thread limit");

static comm_status_t check_knobs(struct comm *c)
{
    struct hex_comm *hx = hex_of(c);
    const struct rt_knobs *k = &c->knobs;
    /* The threads and the VTCM are in range: the knob table bounds them, and comm_init
     * refused anything else. */
    hx->threads = (uint32_t)k->hex.threads;
    hx->vtcm_bytes = (uint32_t)k->hex.vtcm_bytes;
    /* The fence wait, already bounded by the communicator's timeout (the backend's
     * setup resolved it: collectives/hexagon/knobs_hex.c). */
    hx->fence_timeout_ms = k->hex.fence_timeout_ms;
    return COMM_OK;
}

void hex_teardown(struct comm *c)
{
    struct hex_comm *hx = hex_of(c);
    if (hx != NULL) {
        hex_emu_session_destroy(hx->session);
        if (c->shm != NULL)
            hex_mem_release_all(c);
        else
            for (int p = 0; p < (int)HEX_MAX_RANKS; p++)
                hx->reg[p] = NULL;
    }
    shm_segment_detach(c);
    free(hx);
    c->xport = NULL;
}

comm_status_t hex_setup(struct comm *c)
{
    struct hex_comm *hx = calloc(1, sizeof(*hx));
    if (hx == NULL) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory", c->rank);
        return COMM_ERR_NOMEM;
    }
    for (unsigned i = 0; i < HEX_REG_SLOTS; i++)
        hx->own[i].fd = -1;
    c->xport = hx;
    comm_status_t st = check_knobs(c);
    if (st == COMM_OK)
        st = hex_mem_pick(c);
    if (st != COMM_OK) {
        free(hx);
        c->xport = NULL;
        return st;
    }
    st = shm_segment_create_or_attach(c);
    if (st != COMM_OK) {
        free(hx);
        c->xport = NULL;
        return st;
    }
    if (c->shm->slot_bytes * SHM_SLOTS < sizeof(struct hex_registry)) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: ARCOMM_SHM_SLOT_BYTES=%llu leaves no room for the Hexagon buffer "
                 "registry (%zu bytes); leave it at its default",
                 c->rank, (unsigned long long)c->shm->slot_bytes, sizeof(struct hex_registry));
        st = COMM_ERR_INVALID;
        goto err_teardown;
    }
    for (int p = 0; p < c->nranks; p++)
        hx->reg[p] = (struct hex_registry *)shm_slot(c->shm, p, 0);
    hx->imports = calloc((size_t)c->nranks * HEX_REG_SLOTS, sizeof(*hx->imports));
    if (hx->imports == NULL) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory", c->rank);
        st = COMM_ERR_NOMEM;
        goto err_teardown;
    }
    int err = hex_emu_session_create(hx->threads, hx->vtcm_bytes, &hx->session);
    if (err != 0) {
        rt_error(c, COMM_ERR_SYSTEM,
                 "rank %d: starting the emulated HTP session (%u threads, %u bytes VTCM) "
                 "failed: %s",
                 c->rank, hx->threads, hx->vtcm_bytes, strerror(err));
        st = COMM_ERR_SYSTEM;
        goto err_teardown;
    }
    hx->session->poll = hx_poll;
    hx->session->poll_ctx = c;
    st = setup_fences(c);
    if (st != COMM_OK)
        goto err_teardown;
    rt_log(c, RT_LOG_INFO,
           "rank %d: HTP session %d (emulated, %u threads, %u KiB VTCM, %s buffers), fences "
           "start at %u",
           c->rank, c->device_index < 0 ? c->local_rank : c->device_index, hx->threads,
           hx->vtcm_bytes >> 10, hex_mem_kind_name(hx->mem_kind), hx->seq_last);
    /* Asking for a Hexagon communicator and silently getting the host's emulation
     * would mislead (its timings say nothing of a DSP): said once per process. */
    static atomic_bool emulation_said;
    if (!atomic_exchange(&emulation_said, true))
        rt_log(c, RT_LOG_WARN,
               "Hexagon communicators of this process run on the host emulation of the HTP "
               "(no DSP session here): results are right, timings are not a DSP's");
    return COMM_OK;

err_teardown:
    /* Peers waiting for this rank's fence must not wait for the timeout. */
    shm_setup_failed(c, st);
    hex_teardown(c);
    return st;
}

void hex_publish_failure(struct comm *c, comm_status_t status, const char *msg, bool in_call)
{
    struct hex_comm *hx = hex_of(c);
    if (c->shm == NULL)
        return;
    /* The host side as on shm (the message first, for whoever reads it), then the
     * fence, where waiting sessions see it. */
    shm_publish_failure(c, status, msg, in_call);
    if (hx != NULL && hx->own[0].live)
        hex_fence_fail(own_fence(hx, HEX_FENCE_SLOT_CALL), (int32_t)status);
}

void hex_debug_inject_status(struct comm *c, comm_status_t status)
{
    struct hex_comm *hx = hex_of(c);
    hex_fence_fail(own_fence(hx, HEX_FENCE_SLOT_CALL), (int32_t)status);
}

void hex_debug_stall(struct comm *c, uint32_t stall_ms)
{
    hex_of(c)->debug_stall_ms = stall_ms;
}

void hex_info_get(struct hex_info *info)
{
    memset(info, 0, sizeof(*info));
    info->rpcmem = hex_rpcmem_available();
    info->dma_heap = access("/dev/dma_heap/system", R_OK | W_OK) == 0;
    info->ops = "host emulation";
    info->vsum = hex_vsum_impl();
    info->cross_v69 = ARCOMM_HEX_CROSS_V69;
    info->qemu_v67 = ARCOMM_HEX_QEMU_V67;
    info->sdk = ARCOMM_HEX_SDK;
}
