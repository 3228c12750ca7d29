/* SPDX-License-Identifier: MIT */
/*
 * comm_init_mpi: an arcomm communicator over every rank of an MPI communicator, on any
 * number of hosts.  The ranks of each host form an intra-host arcomm communicator (its
 * id made by the host's leader and broadcast over the host's MPI communicator); the
 * inter-host steps run on MPI communicators of its own; the hierarchical backend
 * (collectives/hier) serves the calls.  With every rank on one host, the host's
 * communicator (host or CUDA buffers) is returned itself: no call goes through MPI.
 * Every rank ends with the same status: the outcome is agreed over MPI, nonblocking and
 * bounded by the timeout, at the start (the arguments, the device and the settings that
 * must be alike everywhere: settings.c), between the steps, and at the end (every part
 * of the setup).
 */
#include "init_mpi.h"
#include "rt_hooks.h"
#include "hier/hier.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Out of memory for the setup's own few bytes. */
static comm_status_t no_memory(struct comm *tc, const char *what)
{
    rt_error(tc, COMM_ERR_NOMEM, "comm_init_mpi: rank %d: out of memory in %s", tc->rank, what);
    return COMM_ERR_NOMEM;
}

/* A wait of the setup on req: when it gives up, the request stays MPI's, and so do the
 * link's communicators if it was on one of them (l: else NULL). */
static comm_status_t setup_wait(struct comm *tc, struct mpi_link *l, MPI_Request *req,
                                uint64_t deadline, const char *what)
{
    comm_status_t st = mpi_link_wait(tc, NULL, req, 1, deadline, false, what);
    if (st != COMM_OK && l != NULL)
        l->abandoned = true;
    return st;
}

/* MPI's status of the whole job: every rank's mine, MAX over mc (the user's
 * communicator, or l's world), bounded.  Every buffer a wait of the setup may give up
 * on is mpi_ctl_new's, as the calls' own are. */
static comm_status_t agree(struct comm *tc, MPI_Comm mc, struct mpi_link *l, comm_status_t mine,
                           uint64_t deadline, const char *what)
{
    struct mpi_status_word *w = mpi_ctl_new(2 * sizeof(*w));
    if (w == NULL)
        return no_memory(tc, what);
    MPI_Request req;
    int err = mpi_link_status_start(mc, tc->rank, mine, &w[0], &w[1], &req);
    if (err != MPI_SUCCESS) {
        mpi_ctl_done(w, true);
        return mpi_link_error(tc, err, "MPI_Iallreduce");
    }
    comm_status_t st = setup_wait(tc, l, &req, deadline, what);
    bool completed = st == COMM_OK;
    if (completed)
        st = mpi_link_status_check(tc, mine, &w[1], what);
    else if (mine != COMM_OK)
        st = mine;
    mpi_ctl_done(w, completed);
    return st;
}

/* This rank's own arguments and knobs. */
static comm_status_t check_args(struct comm *tc, comm_t **comm, const comm_config_t *cfg)
{
    if (comm == NULL) {
        rt_error(tc, COMM_ERR_INVALID, "comm_init_mpi: rank %d: comm is NULL", tc->rank);
        return COMM_ERR_INVALID;
    }
    if (cfg != NULL && cfg->size < sizeof(comm_config_t)) {
        rt_error(tc, COMM_ERR_INVALID,
                 "comm_init_mpi: rank %d: cfg->size is %zu: fill the config with "
                 "comm_config_init first",
                 tc->rank, cfg->size);
        return COMM_ERR_INVALID;
    }
    comm_device_t dev = cfg != NULL ? cfg->device : COMM_DEVICE_HOST;
    if (dev == COMM_DEVICE_CUDA && !HIER_CUDA) {
        rt_error(tc, COMM_ERR_UNSUPPORTED,
                 "comm_init_mpi: rank %d: COMM_DEVICE_CUDA: this libarcomm_mpi was built without "
                 "CUDA (no nvcc at build time); build with -Dcuda=enabled, or stage the data "
                 "through host memory on a COMM_DEVICE_HOST communicator",
                 tc->rank);
        return COMM_ERR_UNSUPPORTED;
    }
    if (dev != COMM_DEVICE_HOST && dev != COMM_DEVICE_CUDA) {
        rt_error(tc, COMM_ERR_UNSUPPORTED,
                 "comm_init_mpi: rank %d: device %d: only host (COMM_DEVICE_HOST) and CUDA "
                 "(COMM_DEVICE_CUDA) buffers go between hosts; stage other device data "
                 "through host memory",
                 tc->rank, (int)dev);
        return COMM_ERR_UNSUPPORTED;
    }
    if (dev == COMM_DEVICE_CUDA && cfg->device_index < -1) {
        rt_error(tc, COMM_ERR_INVALID,
                 "comm_init_mpi: rank %d: cfg->device_index is %d: pass a CUDA device ordinal, "
                 "or -1 (the rank's index on its host modulo the GPUs it sees)",
                 tc->rank, cfg->device_index);
        return COMM_ERR_INVALID;
    }
    if (tc->nranks > RT_MAX_RANKS) {
        rt_error(tc, COMM_ERR_INVALID,
                 "comm_init_mpi: rank %d: the MPI communicator has %d ranks, more than "
                 "COMM_MAX_RANKS (%d)",
                 tc->rank, tc->nranks, RT_MAX_RANKS);
        return COMM_ERR_INVALID;
    }
    return COMM_OK;
}

/* CUDA: does this process see the GPU it asks for?  Asked after the ranks agreed on the
 * device, and agreed on in turn, so that a host without a GPU fails every rank alike
 * instead of leaving the others in the setup's MPI calls. */
static comm_status_t check_gpu(struct comm *tc, const comm_config_t *cfg)
{
    int ngpu = hier_cuda_devices();
    if (ngpu < 1) {
        rt_error(tc, COMM_ERR_UNSUPPORTED,
                 "comm_init_mpi: rank %d: COMM_DEVICE_CUDA, but this process sees no CUDA "
                 "device (no GPU, no driver, or CUDA_VISIBLE_DEVICES hides them)",
                 tc->rank);
        return COMM_ERR_UNSUPPORTED;
    }
    if (cfg->device_index >= ngpu) {
        rt_error(tc, COMM_ERR_INVALID,
                 "comm_init_mpi: rank %d: cfg->device_index is %d, but this process sees %d "
                 "CUDA device(s)",
                 tc->rank, cfg->device_index, ngpu);
        return COMM_ERR_INVALID;
    }
    return COMM_OK;
}

/* What the leader of a host tells its ranks. */
struct host_hello {
    comm_id_t id;   /* of the intra-host communicator */
    int32_t leader; /* the leader's rank */
    int32_t status; /* how making the id went */
};

/*
 * The MPI communicators: a duplicate, the host's, the slice of this local index.  MPI
 * has no nonblocking split: MPI_Comm_split_type and MPI_Comm_split wait for every rank
 * without a bound.  So every step that can fail on one rank alone (the op, the notice
 * receive) comes after them, and comm_init_mpi agrees on the outcome before its next
 * step: a rank that failed there never leaves its peers in a split it does not make.
 */
static comm_status_t make_comms(struct comm *tc, MPI_Comm user, struct hier_comm *h,
                                uint64_t deadline)
{
    MPI_Comm *dup = mpi_ctl_new(sizeof(*dup));
    if (dup == NULL)
        return no_memory(tc, "comm_init_mpi (MPI_Comm_idup)");
    MPI_Request req;
    int err = MPI_Comm_idup(user, dup, &req);
    if (err != MPI_SUCCESS) {
        mpi_ctl_done(dup, true);
        return mpi_link_error(tc, err, "MPI_Comm_idup");
    }
    comm_status_t st = setup_wait(tc, NULL, &req, deadline, "comm_init_mpi (MPI_Comm_idup)");
    if (st == COMM_OK)
        h->link.world = *dup;
    mpi_ctl_done(dup, st == COMM_OK);
    if (st != COMM_OK)
        return st;
    MPI_Comm_set_errhandler(h->link.world, MPI_ERRORS_RETURN);
    long per = tc->knobs.mpi_ranks_per_host;
    if (per > 0)
        err = MPI_Comm_split(h->link.world, tc->rank / (int)per, tc->rank, &h->link.host);
    else
        err = MPI_Comm_split_type(h->link.world, MPI_COMM_TYPE_SHARED, tc->rank, MPI_INFO_NULL,
                                  &h->link.host);
    if (err != MPI_SUCCESS)
        return mpi_link_error(tc, err, per > 0 ? "MPI_Comm_split (hosts)" : "MPI_Comm_split_type");
    MPI_Comm_rank(h->link.host, &h->local);
    MPI_Comm_size(h->link.host, &h->nlocal);
    err = MPI_Comm_split(h->link.world, h->local, tc->rank, &h->link.slice);
    if (err != MPI_SUCCESS)
        return mpi_link_error(tc, err, "MPI_Comm_split (slices)");
    MPI_Comm_set_errhandler(h->link.host, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(h->link.slice, MPI_ERRORS_RETURN);
    err = mpi_link_ops_create(&h->link);
    if (err != MPI_SUCCESS)
        return mpi_link_error(tc, err, "MPI_Op_create");
    err = mpi_link_notice_start(&h->link);
    if (err != MPI_SUCCESS)
        return mpi_link_error(tc, err, "MPI_Irecv (failure notices)");
    return COMM_OK;
}

/* Every rank's place: host, local index, slice rank; the hosts' sizes and offsets. */
static comm_status_t map_ranks(struct comm *tc, struct hier_comm *h, int leader, uint64_t deadline)
{
    int n = tc->nranks, slice_rank;
    MPI_Comm_rank(h->link.slice, &slice_rank);
    int32_t *mine = mpi_ctl_new(((size_t)n + 1) * 4 * sizeof(int32_t));
    h->host_of = calloc((size_t)n, sizeof(int));
    h->local_of = calloc((size_t)n, sizeof(int));
    h->slice_rank_of = calloc((size_t)n, sizeof(int));
    h->host_size = calloc((size_t)n, sizeof(int));
    h->host_off = calloc((size_t)n, sizeof(int));
    if (!mine || !h->host_of || !h->local_of || !h->slice_rank_of || !h->host_size ||
        !h->host_off) {
        mpi_ctl_done(mine, true);
        return no_memory(tc, "comm_init_mpi (the ranks' places)");
    }
    int32_t *all = mine + 4;
    mine[0] = h->local;
    mine[1] = h->nlocal;
    mine[2] = slice_rank;
    mine[3] = leader;
    MPI_Request req;
    int err = MPI_Iallgather(mine, 4, MPI_INT32_T, all, 4, MPI_INT32_T, h->link.world, &req);
    if (err != MPI_SUCCESS) {
        mpi_ctl_done(mine, true);
        return mpi_link_error(tc, err, "MPI_Iallgather");
    }
    comm_status_t st =
        setup_wait(tc, &h->link, &req, deadline, "comm_init_mpi (the ranks' places)");
    if (st != COMM_OK) {
        mpi_ctl_done(mine, false);
        return st;
    }
    h->nhosts = 0;
    h->equal = true;
    for (int w = 0; w < n; w++) {
        h->local_of[w] = all[4 * w];
        h->slice_rank_of[w] = all[4 * w + 2];
        h->host_of[w] = all[4 * all[4 * w + 3] + 2]; /* its leader's rank among the leaders */
        h->nhosts += all[4 * w] == 0;
        h->equal = h->equal && all[4 * w + 1] == h->nlocal;
    }
    for (int w = 0; w < n; w++)
        h->host_size[h->host_of[w]]++;
    for (int k = 1; k < h->nhosts; k++)
        h->host_off[k] = h->host_off[k - 1] + h->host_size[k - 1];
    h->host = h->host_of[tc->rank];
    mpi_ctl_done(mine, true);
    return COMM_OK;
}

/* The entry points the hierarchical algorithms call on the intra-host communicator. */
static const struct hier_intra_ops intra_ops = {
    .broadcast = comm_broadcast,
    .reduce = comm_reduce,
    .allgather = comm_allgather,
    .reduce_scatter = comm_reduce_scatter,
    .barrier = comm_barrier,
    .destroy = comm_destroy,
    .last_error = comm_last_error,
    .state = rt_hook_comm_state,
    .combine = rt_hook_reduce_pair,
};

/* The intra-host communicator, its id from the host's leader. */
static comm_status_t make_intra(struct comm *tc, struct hier_comm *h, const comm_config_t *cfg,
                                bool alone, int *leader, uint64_t deadline)
{
    struct host_hello *msg = mpi_ctl_new(sizeof(*msg));
    if (msg == NULL)
        return no_memory(tc, "comm_init_mpi (the host's id)");
    memset(msg, 0, sizeof(*msg));
    msg->leader = tc->rank;
    if (h->local == 0 && comm_id_new(&msg->id) != COMM_OK)
        msg->status = COMM_ERR_SYSTEM;
    MPI_Request req;
    int err = MPI_Ibcast(msg, (int)sizeof(*msg), MPI_BYTE, 0, h->link.host, &req);
    if (err != MPI_SUCCESS) {
        mpi_ctl_done(msg, true);
        return mpi_link_error(tc, err, "MPI_Ibcast (the host's id)");
    }
    comm_status_t st = setup_wait(tc, &h->link, &req, deadline, "comm_init_mpi (the host's id)");
    struct host_hello hello = *msg;
    mpi_ctl_done(msg, st == COMM_OK);
    if (st != COMM_OK)
        return st;
    *leader = hello.leader;
    if (hello.status != COMM_OK) {
        rt_error(tc, COMM_ERR_SYSTEM,
                 "comm_init_mpi: rank %d: the leader of this host (rank %d) could not make an "
                 "id: comm_id_new failed there",
                 tc->rank, hello.leader);
        return COMM_ERR_SYSTEM;
    }
    comm_config_t icfg;
    comm_config_init(&icfg);
    icfg.nranks = h->nlocal;
    icfg.rank = h->local;
    icfg.id = hello.id;
    icfg.timeout_ms = tc->timeout_ms < 0 ? -1 : (int)tc->timeout_ms;
    icfg.transport = cfg != NULL ? cfg->transport : NULL;
    icfg.knob_defaults = cfg != NULL && cfg->size >= sizeof(*cfg) ? cfg->knob_defaults : NULL;
    if (cfg != NULL && cfg->device == COMM_DEVICE_CUDA) {
        /* The rank's GPU: as given, else its index on the host modulo the GPUs it sees
         * (process ranks may share one). */
        int ngpu = hier_cuda_devices(); /* >= 1: check_args saw to it */
        if (ngpu < 1)
            ngpu = 1;
        icfg.device = COMM_DEVICE_CUDA;
        icfg.device_index = cfg->device_index >= 0 ? cfg->device_index : h->local % ngpu;
        h->device_index = icfg.device_index;
#ifdef HIER_FAKE_CUDA
        icfg.device = COMM_DEVICE_HOST; /* the test's "device" memory is host memory */
#endif
    }
    h->iops = &intra_ops;
    st = comm_init(&h->intra, &icfg);
    if (st != COMM_OK) {
        snprintf(tc->errmsg, sizeof(tc->errmsg),
                 "comm_init_mpi: rank %d: the communicator of this host's %d ranks: %s", tc->rank,
                 h->nlocal, comm_last_error(NULL));
        return st;
    }
    /* The inter-host staging; a host alone in the job is the communicator itself. */
    if (cfg != NULL && cfg->device == COMM_DEVICE_CUDA && !alone)
        st = hier_cuda_open(tc, h, icfg.device_index);
    return st;
}

static void hier_free(struct comm *tc, struct hier_comm *h)
{
    comm_destroy(h->intra);
    hier_cuda_close(tc, h);
    mpi_link_free(&h->link);
    free(h->host_of);
    free(h->local_of);
    free(h->slice_rank_of);
    free(h->host_size);
    free(h->host_off);
    free(h);
}

/*
 * comm_split's join on a communicator made here (struct backend_ops.split_join): every
 * rank splits the MPI communicator (MPI_UNDEFINED for COMM_SPLIT_NONE; the handshake
 * before it found every rank in this split, so the blocking call meets them all), and
 * each group's ranks make theirs over their part with comm_init_mpi (bounded; the same
 * status on every rank of the group), with the device, GPU, transport, timeout and knob
 * defaults of c.  A group on one host gets that host's own communicator.
 */
static comm_status_t split_join(struct comm *c, int color, int key, struct comm **out)
{
    struct hier_comm *h = hier_of(c);
    MPI_Comm part = MPI_COMM_NULL;
    int err = MPI_Comm_split(h->link.world, color < 0 ? MPI_UNDEFINED : color, key, &part);
    if (err != MPI_SUCCESS) {
        comm_status_t st = mpi_link_error(c, err, "MPI_Comm_split (comm_split)");
        rt_hook_init_error(c->errmsg);
        return st;
    }
    if (part == MPI_COMM_NULL)
        return COMM_OK;
    comm_config_t cfg;
    comm_config_init(&cfg);
    if (h->cuda != NULL) {
        cfg.device = COMM_DEVICE_CUDA;
        cfg.device_index = h->device_index;
    }
    cfg.transport = h->intra->knobs.transport[0] != '\0' ? h->intra->knobs.transport : NULL;
    cfg.timeout_ms = c->timeout_ms < 0 ? -1 : (int)c->timeout_ms;
    cfg.knob_defaults = c->knob_defaults[0] != '\0' ? c->knob_defaults : NULL;
    comm_status_t st = comm_init_mpi(out, part, &cfg);
    /* A failed setup may have given up on a request on part (the first agreement): then
     * part stays until MPI_Finalize (mpi_link_free says why). */
    if (st == COMM_OK)
        MPI_Comm_free(&part);
    return st;
}

/* The communicator over every rank, with the hierarchical backend, id from rank 0. */
static comm_status_t make_comm(struct comm *tc, struct hier_comm *h, comm_t **out,
                               uint64_t deadline)
{
    comm_config_t hcfg;
    comm_config_init(&hcfg);
    hcfg.nranks = tc->nranks;
    hcfg.rank = tc->rank;
    hcfg.timeout_ms = tc->timeout_ms < 0 ? -1 : (int)tc->timeout_ms;
    hcfg.knob_defaults = tc->knob_defaults[0] != '\0' ? tc->knob_defaults : NULL;
    if (h->cuda != NULL) {
        hcfg.device = COMM_DEVICE_CUDA;
        hcfg.device_index = h->device_index;
    }
    comm_id_t *id = mpi_ctl_new(sizeof(*id));
    if (id == NULL)
        return no_memory(tc, "comm_init_mpi (the id)");
    if (tc->rank == 0 && comm_id_new(id) != COMM_OK)
        memset(id, 0, sizeof(*id)); /* comm_init refuses it below, on every rank */
    MPI_Request req;
    int err = MPI_Ibcast(id, (int)sizeof(*id), MPI_BYTE, 0, h->link.world, &req);
    if (err != MPI_SUCCESS) {
        mpi_ctl_done(id, true);
        return mpi_link_error(tc, err, "MPI_Ibcast (the id)");
    }
    comm_status_t st = setup_wait(tc, &h->link, &req, deadline, "comm_init_mpi (the id)");
    if (st == COMM_OK)
        hcfg.id = *id;
    mpi_ctl_done(id, st == COMM_OK);
    if (st != COMM_OK)
        return st;
    /* The key of this communicator's failure notices: 64 bits of its random id. */
    uint64_t key = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < sizeof(hcfg.id.str) && hcfg.id.str[i] != '\0'; i++)
        key = (key ^ (unsigned char)hcfg.id.str[i]) * 0x100000001b3ull;
    h->link.notice_key = (int64_t)(key >> 1);
    h->ops = hier_backend;
    if (h->cuda != NULL)
        hier_cuda_adapt(&h->ops);
    h->ops.split_join = split_join;
    snprintf(h->name, sizeof(h->name), "%s+mpi", comm_transport_name(h->intra));
    h->ops.name = h->name;
    st = rt_hook_init_backend(out, &hcfg, &h->ops, h);
    /* The host's waits in this communicator's calls run its wait hook. */
    if (st == COMM_OK)
        h->intra->hook_owner = *out;
    if (st != COMM_OK)
        snprintf(tc->errmsg, sizeof(tc->errmsg), "comm_init_mpi: rank %d: %s", tc->rank,
                 comm_last_error(NULL));
    return st;
}

ARCOMM_API comm_status_t comm_init_mpi(comm_t **comm, MPI_Comm mpi_comm, const comm_config_t *cfg)
{
    int inited = 0, finalized = 0, inter = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized) {
        rt_hook_init_error(finalized ? "comm_init_mpi: MPI_Finalize was called already; make "
                                       "communicators between MPI_Init and MPI_Finalize"
                                     : "comm_init_mpi: MPI is not initialised: call MPI_Init "
                                       "(or MPI_Init_thread) first");
        return COMM_ERR_INVALID;
    }
    if (mpi_comm == MPI_COMM_NULL || MPI_Comm_test_inter(mpi_comm, &inter) != MPI_SUCCESS ||
        inter) {
        rt_hook_init_error("comm_init_mpi: mpi_comm is MPI_COMM_NULL or an inter-communicator: "
                           "pass an intra-communicator such as MPI_COMM_WORLD");
        return COMM_ERR_INVALID;
    }
    struct comm *tc = calloc(1, sizeof(*tc)); /* errors, knobs and timeout of the setup */
    if (tc == NULL) {
        rt_hook_init_error("comm_init_mpi: out of memory");
        return COMM_ERR_NOMEM;
    }
    MPI_Comm_rank(mpi_comm, &tc->rank);
    MPI_Comm_size(mpi_comm, &tc->nranks);
    char why[RT_ERRMSG_BYTES];
    const char *defaults = cfg != NULL && cfg->size >= sizeof(*cfg) ? cfg->knob_defaults : NULL;
    comm_status_t mine = rt_knobs_load_with(&tc->knobs, defaults, why, sizeof(why));
    if (mine == COMM_OK && defaults != NULL &&
        (size_t)snprintf(tc->knob_defaults, sizeof(tc->knob_defaults), "%s", defaults) >=
            sizeof(tc->knob_defaults)) {
        snprintf(why, sizeof(why), "the config's knob_defaults is %zu characters long: at most %zu",
                 strlen(defaults), sizeof(tc->knob_defaults) - 1);
        mine = COMM_ERR_INVALID;
    }
    if (mine != COMM_OK) {
        tc->knobs.log_level = RT_LOG_ERROR;
        rt_error(tc, mine, "comm_init_mpi: rank %d: %s", tc->rank, why);
    }
    tc->timeout_ms = cfg != NULL && cfg->size >= sizeof(*cfg) && cfg->timeout_ms != 0
                         ? cfg->timeout_ms
                         : tc->knobs.timeout_ms;
    if (tc->timeout_ms < 0)
        tc->timeout_ms = -1;
    uint64_t deadline = rt_comm_deadline(tc);
    /* Before this rank's first byte to another host. */
    mpi_link_ignore_sigpipe(tc);
    if (mine == COMM_OK)
        mine = check_args(tc, comm, cfg);
    /* Before any step that depends on them: the ranks' arguments, devices and the
     * settings that shape the setup, alike on every rank (settings.c). */
    comm_status_t st = rt_mpi_agree_settings(tc, mpi_comm, mine, cfg, deadline);
    /* Every rank has come: the later steps get a timeout of their own, from now.  A rank
     * that came late (near the others' timeout) would otherwise see them give up on a
     * later step that it then completes: on the last agreement it would return COMM_OK
     * with the others failed, and after MPI_Comm_idup wait in the blocking splits for
     * ever. */
    if (st == COMM_OK)
        deadline = rt_comm_deadline(tc);
    if (st == COMM_OK && cfg != NULL && cfg->device == COMM_DEVICE_CUDA)
        st = agree(tc, mpi_comm, NULL, check_gpu(tc, cfg), deadline,
                   "comm_init_mpi (the ranks' GPUs)");
    if (st != COMM_OK)
        goto out;

    struct hier_comm *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        rt_error(tc, COMM_ERR_NOMEM, "comm_init_mpi: rank %d: out of memory", tc->rank);
        st = COMM_ERR_NOMEM; /* the peers wait for this rank until their timeout */
        goto out;
    }
    h->link.world = h->link.host = h->link.slice = MPI_COMM_NULL;
    h->link.sum8 = MPI_OP_NULL;
    h->link.notice_req = MPI_REQUEST_NULL;
    int leader = 0;
    comm_t *c = NULL;
    st = make_comms(tc, mpi_comm, h, deadline);
    /* Agreed before the host's Ibcast, which a rank whose setup failed would not make. */
    if (h->link.world != MPI_COMM_NULL)
        st = agree(tc, h->link.world, &h->link, st, deadline,
                   "comm_init_mpi (the MPI communicators)");
    /* Every rank on one host: the host's communicator is the communicator (its ranks in
     * the MPI communicator's order), and no call goes through MPI; for CUDA buffers its
     * calls are a single-host CUDA communicator's (kernels and copies on the stream, graph
     * capture), with nothing staged through the host.  The GPU-less test build of the CUDA
     * path keeps the hierarchical one: its host communicator stands in for a CUDA one. */
    bool one_host = st == COMM_OK && h->nlocal == tc->nranks && h->local == tc->rank;
#ifdef HIER_FAKE_CUDA
    one_host = one_host && (cfg == NULL || cfg->device == COMM_DEVICE_HOST);
#endif
    if (st == COMM_OK)
        st = make_intra(tc, h, cfg, one_host, &leader, deadline);
    /* Agreed before the next step on world, which a rank whose host's communicator
     * failed would not make: the ranks would pair different collectives on world (an
     * Iallgather with an Iallreduce) and wait until the timeout, or read garbage. */
    if (h->link.world != MPI_COMM_NULL)
        st = agree(tc, h->link.world, &h->link, st, deadline,
                   "comm_init_mpi (the hosts' communicators)");
    if (one_host) {
        if (st == COMM_OK) {
            c = h->intra;
            h->intra = NULL;
            rt_log(c, RT_LOG_INFO,
                   "rank %d: joined a communicator of %d ranks on one host: the host's own "
                   "communicator (%s), no MPI in its calls",
                   c->rank, c->nranks, comm_transport_name(c));
            *comm = c;
        }
        hier_free(tc, h);
        goto out;
    }
    if (st == COMM_OK)
        st = map_ranks(tc, h, leader, deadline);
    /* The same before make_comm's Ibcast (map_ranks fails alone only out of memory). */
    if (h->link.world != MPI_COMM_NULL)
        st = agree(tc, h->link.world, &h->link, st, deadline, "comm_init_mpi (the ranks' places)");
    if (st == COMM_OK) {
        h->link.watch = hier_watch; /* the host's ranks exist, and the map */
        h->link.watch_arg = h;
    }
    if (st == COMM_OK)
        st = make_comm(tc, h, &c, deadline);
    if (h->link.world != MPI_COMM_NULL)
        st = agree(tc, h->link.world, &h->link, st, deadline, "comm_init_mpi (every host's setup)");
    if (st != COMM_OK) {
        if (c != NULL)
            comm_destroy(c); /* its teardown frees h */
        else
            hier_free(tc, h);
        goto out;
    }
    rt_log(c, RT_LOG_INFO,
           "rank %d: joined a communicator of %d ranks on %d hosts over %s (this host: %d ranks)",
           c->rank, c->nranks, h->nhosts, h->name, h->nlocal);
    *comm = c;
out:
    if (st != COMM_OK)
        rt_hook_init_error(tc->errmsg);
    free(tc);
    return st;
}
