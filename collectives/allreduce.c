/* SPDX-License-Identifier: MIT */
/*
 * Allreduce: runs a validated call's plan (paths.c, as every host collective): the flag
 * path, or the bulk path, one-pass where every rank can reach every buffer, CMA where
 * process ranks reach each other's private buffers through the kernel, staged
 * otherwise.  Every rank plans alike: the plan comes from agreed knobs and the call
 * (the peers check flag against bulk), the bulk handshake's published buffer kinds
 * decide the rest.
 */
#include "paths.h"
#include "nt_calibrate.h"
#include "reduce.h"

#include <unistd.h>

void coll_host_resolve_knobs(struct rt_knobs *k, const struct rt_topo_summary *topo, int nranks,
                             bool same_process)
{
    /* The flag path stages a whole message in one slot. */
    size_t slot = (k->shm_slot_bytes + 4095) / 4096 * 4096;
    if (k->flag_threshold == RT_SIZE_AUTO) {
        /* The default flag row of these ranks (paths.c says what measured it). */
        int n = nranks > 0 ? nranks : 1;
        for (size_t i = 0; i < coll_host_path_nrows; i++) {
            const struct coll_path_row *r = &coll_host_path_rows[i];
            enum coll_ranks want = same_process ? COLL_RANKS_THREADS : COLL_RANKS_PROCS;
            if (r->path != COLL_PATH_FLAG || (r->ranks != want && r->ranks != COLL_RANKS_ANY) ||
                n < r->nmin || n > r->nmax)
                continue;
            uint64_t hi = r->hi;
            if (r->hi_total != 0 && r->hi_total / ((uint64_t)n * (uint64_t)n) < hi)
                hi = r->hi_total / ((uint64_t)n * (uint64_t)n);
            k->flag_threshold = (size_t)hi;
            break;
        }
        if (k->flag_threshold == RT_SIZE_AUTO)
            k->flag_threshold = RT_SIZE_OFF; /* no flag row for these ranks */
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

/* The bulk path: the ranks publish how peers reach their buffers, then take the path
 * the plan and the published kinds give every rank alike. */
static comm_status_t allreduce_bulk(struct comm *c, const struct coll_call *call, bool narrow,
                                    const struct coll_plan *plan)
{
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    struct shm_arrival mine = coll_arrival_of(call, SHM_PATH_BULK);
    mine.addend_count = call->addend ? call->addend_count : 0;
    /* How peers may reach this rank's buffers: same process, in the segment, or not. */
    const void *bufs[3] = {call->send, call->recv, call->addend};
    size_t lens[3] = {bytes, bytes,
                      call->addend ? call->addend_count * rt_dtype_size(call->dtype) : 0};
    uint64_t out[3] = {0};
    /* Narrowed and fused-add calls match no CMA row (their plan is not plain). */
    mine.flags = coll_reach(c, 3, bufs, lens, plan->offer_cma, out);
    mine.send = out[0];
    mine.recv = out[1];
    mine.addend = call->addend ? out[2] : 0;
    mine.align = (uint32_t)((uintptr_t)call->recv & 63);
    mine.flags |= (narrow ? SHM_BUF_NARROW : 0u) | (call->addend ? SHM_BUF_ADD : 0u);
    comm_status_t st = coll_meet(c, &mine, "allreduce (bulk path handshake)");
    /* count 0 (flag path "off") touches nothing: matched and numbered, done. */
    if (st != COMM_OK || call->count == 0)
        return st;
    enum shm_bulk path = coll_bulk_path(c, plan, mine.flags);
    if (path == SHM_BULK_DIRECT)
        return coll_allreduce_direct(c, call, narrow);
    /* Private buffers of process ranks: one copy through the kernel where every rank
     * offered it, else through the staging slots. */
    bool cma = path == SHM_BULK_CMA;
    st = cma ? coll_allreduce_cma(c, call) : coll_allreduce_staged(c, call, narrow);
    if (st == COMM_OK)
        coll_host_cma_done(c, &plan->pick, cma, bytes);
    return st;
}

comm_status_t coll_host_allreduce(struct comm *c, const struct coll_call *call)
{
    comm_status_t st = coll_settle(c);
    if (st != COMM_OK)
        return st;
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    bool narrow = coll_narrows(&c->knobs, call->dtype, call->op, bytes);
    struct coll_plan plan;
    coll_host_plan(c, call, narrow, &plan);
    st = plan.path == COLL_PATH_FLAG ? coll_allreduce_small(c, call, narrow)
                                     : allreduce_bulk(c, call, narrow, &plan);
    /* A rank that completed this call never fails a peer's. */
    if (st == COMM_OK) {
        coll_host_plan_done(c, &plan, call);
        shm_complete(c);
    }
    return st;
}
