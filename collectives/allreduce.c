/* SPDX-License-Identifier: MIT */
/*
 * Allreduce: picks the path for a validated call.  Small messages take the flag path;
 * large ones the bulk path, one-pass where every rank can reach every buffer, CMA where
 * process ranks reach each other's private buffers through the kernel, staged
 * otherwise.  Every rank picks alike: the size decides between flag and bulk (and the
 * peers check it), the bulk handshake's published buffer kinds decide the rest.
 */
#include "coll.h"
#include "nt_calibrate.h"
#include "reduce.h"

#include <unistd.h>

void coll_host_resolve_knobs(struct rt_knobs *k, const struct rt_topo_summary *topo, int nranks,
                             bool same_process)
{
    /* The flag path stages a whole message in one slot. */
    size_t slot = (k->shm_slot_bytes + 4095) / 4096 * 4096;
    if (k->flag_threshold == RT_SIZE_AUTO) {
        /*
         * Measured on the 2-core development machine (docs/PERFORMANCE.md).  Thread
         * ranks: the one-pass path reads each peer's input once and is as fast as the
         * flag round trip from about 1 KiB on.  Process ranks: one copy in and n reads
         * beat the staged path's three copies and three synchronisations up to the
         * slot size for 2 ranks; the flag path's reads grow with n, the staged path's
         * do not, so the crossover falls as 2 MiB / n.  But not above 512 KiB: with 2
         * process ranks (slow state of the VM, 2026-12-01) a 1 MiB message took 111-151
         * us on the flag path against 43 us (reduce's pipeline) and 112-124 us
         * (allreduce's staged path), while at 512 KiB the flag path still won, 21-32 us
         * against 26-61.
         */
        size_t n = nranks > 0 ? (size_t)nranks : 1;
        size_t procs = (2u << 20) / n;
        k->flag_threshold = same_process ? 1024 : procs < (512u << 10) ? procs : 512u << 10;
    }
    /* "off" stays RT_SIZE_OFF, as for every size knob (coll_host_flag_path reads it). */
    if (k->flag_threshold != RT_SIZE_OFF && k->flag_threshold > slot)
        k->flag_threshold = slot;
    /* Thread ranks reach each other's buffers directly. */
    if (same_process)
        k->cma_threshold = RT_SIZE_OFF;
    /* Host shared memory is not a narrow link: keep every bit unless asked. */
    if (k->bf16_threshold == RT_SIZE_AUTO)
        k->bf16_threshold = RT_SIZE_OFF;
    if (k->wire_threshold == RT_SIZE_AUTO)
        k->wire_threshold = k->bf16_threshold;
    if (k->nt_threshold == RT_SIZE_AUTO) {
        /* Streaming stores pay once a call's inputs and outputs, all ranks' together,
         * no longer fit the cache this process gets: the outputs would only evict the
         * inputs.  The point is measured once per process (nt_calibrate.c), capped by
         * the last-level cache hwloc reports. */
        k->nt_threshold = coll_nt_auto_threshold(topo, coll_nt_calibration(), NULL);
    }
}

const char *coll_host_path_name(const struct rt_knobs *k, size_t bytes)
{
    return coll_host_kind_flag(COLL_ALLREDUCE, k, bytes, 1) ? "flag" : "bulk";
}

static comm_status_t host_allreduce_path(struct comm *c, const struct coll_call *call)
{
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    bool narrow = coll_narrows(&c->knobs, call->dtype, call->op, bytes);
    /* Rank 0's choice may send a flag-sized call through CMA (coll_choice_take): not a
     * narrowed or fused-add one, which have no CMA path. */
    struct coll_choice ch = {0};
    if (coll_host_kind_flag(COLL_ALLREDUCE, &c->knobs, bytes, c->nranks) &&
        (narrow || call->addend != NULL || !coll_choice_take(c, COLL_ALLREDUCE, bytes, &ch))) {
        comm_status_t st = coll_allreduce_small(c, call, narrow);
        if (st == COMM_OK)
            coll_choice_done(c, &ch, bytes);
        return st;
    }

    struct shm_arrival mine = coll_arrival_of(call, SHM_PATH_BULK);
    mine.addend_count = call->addend ? call->addend_count : 0;
    /* How peers may reach this rank's buffers: same process, in the segment, or not. */
    const void *bufs[3] = {call->send, call->recv, call->addend};
    size_t lens[3] = {bytes, bytes,
                      call->addend ? call->addend_count * rt_dtype_size(call->dtype) : 0};
    uint64_t out[3] = {0};
    /* Narrowed and fused-add calls have no CMA path. */
    struct coll_cma_pick pick = {0};
    if (ch.cma)
        pick.offer = true; /* rank 0's choice for every rank */
    else if (!narrow && call->addend == NULL)
        pick = coll_host_cma_pick(c, COLL_ALLREDUCE, bytes);
    mine.flags = coll_reach(c, 3, bufs, lens, pick.offer, out);
    mine.send = out[0];
    mine.recv = out[1];
    mine.addend = call->addend ? out[2] : 0;
    mine.align = (uint32_t)((uintptr_t)call->recv & 63);
    mine.flags |= (narrow ? SHM_BUF_NARROW : 0u) | (call->addend ? SHM_BUF_ADD : 0u);
    coll_arrive(c, &mine);
    comm_status_t st = coll_wait_arrivals(c, "allreduce (bulk path handshake)");
    /* count 0 (flag path "off") touches nothing: matched and numbered, done. */
    if (st != COMM_OK || call->count == 0)
        return st;
    enum shm_bulk path = coll_bulk_path(c, mine.flags);
    if (path == SHM_BULK_DIRECT)
        return coll_allreduce_direct(c, call, narrow);
    /* Private buffers of process ranks: one copy through the kernel where every rank
     * offered it, else through the staging slots. */
    bool cma = path == SHM_BULK_CMA;
    st = cma ? coll_allreduce_cma(c, call) : coll_allreduce_staged(c, call, narrow);
    if (st == COMM_OK) {
        coll_host_cma_done(c, &pick, cma, bytes);
        coll_choice_done(c, &ch, bytes);
    }
    return st;
}

comm_status_t coll_host_allreduce(struct comm *c, const struct coll_call *call)
{
    comm_status_t st = coll_settle(c);
    if (st == COMM_OK)
        st = host_allreduce_path(c, call);
    /* A rank that completed this call never fails a peer's. */
    if (st == COMM_OK)
        shm_complete(c);
    return st;
}
