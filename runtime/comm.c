/* SPDX-License-Identifier: MIT */
/*
 * The communicator's lifecycle: comm_init (validate, knobs, transport, rendezvous),
 * comm_init_env, comm_destroy, comm_abort, comm_mem_alloc/free and the accessors.
 */
#include "comm_internal.h"
#include "env_vars.h"
#include "id.h"
#include "reduce.h"
#include "rt_hooks.h"
#include "shm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

ARCOMM_API void comm_config_init(comm_config_t *cfg)
{
    if (cfg == NULL)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->size = sizeof(*cfg);
    cfg->nranks = 1;
    cfg->rank = 0;
    cfg->device = COMM_DEVICE_HOST;
    cfg->device_index = -1;
    cfg->transport = NULL;
    cfg->timeout_ms = 0;
    cfg->knob_defaults = NULL;
    cfg->abort_flag = NULL;
}

/* The config's knob defaults, where its size says it has the field (NULL: none). */
static const char *knob_defaults_of(const comm_config_t *cfg)
{
    if (cfg->size < offsetof(comm_config_t, knob_defaults) + sizeof(cfg->knob_defaults))
        return NULL;
    return cfg->knob_defaults;
}

/* The config's abort word, where its size says it has the field (NULL: none). */
static const volatile int *abort_flag_of(const comm_config_t *cfg)
{
    if (cfg->size < offsetof(comm_config_t, abort_flag) + sizeof(cfg->abort_flag))
        return NULL;
    return cfg->abort_flag;
}

ARCOMM_API size_t comm_dtype_size(comm_dtype_t dtype)
{
    return rt_dtype_size(dtype);
}

/* Expands %h (host name) and %p (pid) in a log file pattern. */
static void expand_log_path(const char *pattern, char *out, size_t len)
{
    size_t o = 0;
    for (const char *p = pattern; *p && o + 1 < len; p++) {
        if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
            char piece[HOST_NAME_MAX + 1];
            if (p[1] == 'h') {
                if (gethostname(piece, sizeof(piece)) != 0)
                    snprintf(piece, sizeof(piece), "unknown");
                piece[HOST_NAME_MAX] = '\0';
            } else {
                snprintf(piece, sizeof(piece), "%d", (int)getpid());
            }
            o += (size_t)snprintf(out + o, len - o, "%s", piece);
            if (o >= len)
                o = len - 1;
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

/*
 * Can a failure of this config be told to the other ranks of its communicator?  Only
 * when the config names one: its size covers nranks, rank and the id, and they are
 * valid (a rank outside 0..nranks-1 has no place to report from).
 */
static bool config_identifiable(const comm_config_t *cfg)
{
    char idwhy[128];
    return cfg->size >= offsetof(comm_config_t, device) && cfg->nranks >= 1 &&
           cfg->nranks <= RT_MAX_RANKS && cfg->rank >= 0 && cfg->rank < cfg->nranks &&
           rt_id_valid(&cfg->id, idwhy, sizeof(idwhy));
}

/*
 * An init failure after the config named its communicator reaches the other ranks at
 * once (with comm_last_error(NULL)'s message) instead of at their timeout; segment.c
 * says how, and who removes what it leaves in /dev/shm.
 */
static void init_failure_publish(const comm_config_t *cfg, long timeout_ms, comm_status_t status)
{
    if (cfg == NULL || !config_identifiable(cfg))
        return;
    if (timeout_ms == 0)
        timeout_ms = 120000;
    shm_init_failure_publish(&cfg->id, cfg->nranks, cfg->rank, timeout_ms, status,
                             comm_last_error(NULL));
}

/*
 * Opens the log file without blocking (a FIFO with no reader would hang fopen), and
 * takes only a regular file or a character device (a terminal, /dev/null).
 */
static FILE *open_log(const char *path, char *why, size_t len)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0644);
    if (fd < 0) {
        if (errno == ENXIO)
            snprintf(why, len,
                     "it is a FIFO with no reader (a log must be a regular file or a "
                     "terminal)");
        else
            snprintf(why, len, "%s", strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISCHR(st.st_mode))) {
        snprintf(why, len,
                 "it is not a regular file or a terminal (a FIFO, socket or "
                 "directory cannot take the log)");
        close(fd);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    FILE *f = NULL;
    if (fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0)
        f = fdopen(fd, "a");
    if (f == NULL) {
        snprintf(why, len, "%s", strerror(errno));
        close(fd);
    }
    return f;
}

static comm_status_t check_config(const comm_config_t *cfg, char *why, size_t len)
{
    if (cfg->size < offsetof(comm_config_t, timeout_ms) + sizeof(cfg->timeout_ms)) {
        snprintf(why, len, "cfg->size is %zu: fill the config with comm_config_init first",
                 cfg->size);
        return COMM_ERR_INVALID;
    }
    if (cfg->nranks < 1 || cfg->nranks > RT_MAX_RANKS) {
        snprintf(why, len, "nranks %d is out of range 1..%d", cfg->nranks, RT_MAX_RANKS);
        return COMM_ERR_INVALID;
    }
    if (cfg->rank < 0 || cfg->rank >= cfg->nranks) {
        snprintf(why, len, "rank %d is out of range 0..%d for nranks %d", cfg->rank,
                 cfg->nranks - 1, cfg->nranks);
        return COMM_ERR_INVALID;
    }
    if ((unsigned)cfg->device > COMM_DEVICE_HEXAGON) {
        snprintf(why, len, "rank %d: device %d is not a comm_device_t", cfg->rank,
                 (int)cfg->device);
        return COMM_ERR_INVALID;
    }
    char idwhy[128];
    if (!rt_id_valid(&cfg->id, idwhy, sizeof(idwhy))) {
        snprintf(why, len, "rank %d: %s; make one with comm_id_new on one rank and pass it to all",
                 cfg->rank, idwhy);
        return COMM_ERR_INVALID;
    }
    return COMM_OK;
}

/*
 * comm_init's work.  local_rank: the rank on this host (comm_init_env's
 * ARCOMM_LOCAL_RANK), from which a device_index of -1 derives the device; -1 takes the
 * rank.  forced: the backend a library layered on this one (libarcomm_mpi) made ready,
 * with its state in xport (no pick, no segment); its failures are not published
 * through the segment, since the caller agrees on them with its peers.
 */
static comm_status_t init_with(comm_t **comm, const comm_config_t *cfg, int local_rank,
                               const struct backend_ops *forced, void *xport, struct comm *parent)
{
    char why[RT_ERRMSG_BYTES];
    rt_init_error_clear();
    if (comm == NULL || cfg == NULL) {
        rt_init_error(NULL, COMM_ERR_INVALID, "comm_init: %s is NULL",
                      comm == NULL ? "comm" : "cfg");
        return COMM_ERR_INVALID;
    }
    comm_status_t status = check_config(cfg, why, sizeof(why));
    if (status != COMM_OK) {
        rt_init_error(NULL, status, "comm_init: %s", why);
        if (forced == NULL)
            init_failure_publish(cfg, 0, status);
        return status;
    }
    /* A forced backend's peers learn of a failure from its caller, not the segment. */
    const comm_config_t *pub = forced == NULL ? cfg : NULL;

    struct comm *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        rt_init_error(NULL, COMM_ERR_NOMEM, "comm_init: rank %d: out of memory", cfg->rank);
        init_failure_publish(pub, cfg->timeout_ms, COMM_ERR_NOMEM);
        return COMM_ERR_NOMEM;
    }
    c->rank = cfg->rank;
    c->nranks = cfg->nranks;
    c->device = cfg->device;
    c->device_index = cfg->device_index;
    c->local_rank = local_rank >= 0 ? local_rank : cfg->rank;
    c->id = cfg->id;
    c->init_abort = abort_flag_of(cfg);
    c->init_abort_what = "comm_init's abort_flag was set";
    c->parent = parent;
    /* Set before this rank came: it fails at once (the waits below poll it too). */
    if (rt_abort_requested(c)) {
        rt_init_error(NULL, COMM_ERR_ABORTED,
                      "comm_init: rank %d: %s before rank %d joined communicator %s", c->rank,
                      rt_abort_cause(c), c->rank, c->id.str);
        init_failure_publish(pub, cfg->timeout_ms, COMM_ERR_ABORTED);
        status = COMM_ERR_ABORTED;
        goto err_free;
    }

    const char *defaults = knob_defaults_of(cfg);
    if (defaults != NULL && strlen(defaults) >= sizeof(c->knob_defaults)) {
        snprintf(why, sizeof(why), "the config's knob_defaults is %zu characters long: at most %zu",
                 strlen(defaults), sizeof(c->knob_defaults) - 1);
        status = COMM_ERR_INVALID;
    } else {
        if (defaults != NULL)
            snprintf(c->knob_defaults, sizeof(c->knob_defaults), "%s", defaults);
        status = rt_knobs_load_with(&c->knobs, defaults, why, sizeof(why));
    }
    if (status == COMM_OK)
        status = rt_knobs_check(&c->knobs, c->nranks, why, sizeof(why));
    if (status != COMM_OK) {
        rt_init_error(NULL, status, "comm_init: rank %d: %s", c->rank, why);
        init_failure_publish(pub, cfg->timeout_ms, status);
        goto err_free;
    }
    if (cfg->timeout_ms != 0) {
        c->knobs.timeout_ms = cfg->timeout_ms;
        c->knobs.source[RT_KNOB_TIMEOUT_MS] = RT_SRC_CONFIG;
    }
    c->timeout_ms = c->knobs.timeout_ms < 0 ? -1 : c->knobs.timeout_ms;
    if (cfg->transport != NULL) {
        snprintf(c->knobs.transport, sizeof(c->knobs.transport), "%s", cfg->transport);
        c->knobs.source[RT_KNOB_TRANSPORT] = RT_SRC_CONFIG;
    }

    if (c->knobs.log_file[0] != '\0') {
        char path[PATH_MAX];
        expand_log_path(c->knobs.log_file, path, sizeof(path));
        char logwhy[160];
        c->log = open_log(path, logwhy, sizeof(logwhy));
        if (c->log == NULL) {
            rt_init_error(&c->knobs, COMM_ERR_INVALID,
                          "comm_init: rank %d: cannot open ARCOMM_LOG_FILE %s: %s; point it at "
                          "a file, or unset it to log to stderr",
                          c->rank, path, logwhy);
            status = COMM_ERR_INVALID;
            init_failure_publish(pub, c->timeout_ms, status);
            goto err_free;
        }
        c->log_owned = true;
    }

    /* A misspelt knob would otherwise be silently ignored: said once per process, on
     * the log the knobs just chose. */
    rt_env_warn_unknown_once(c);

    struct transport_probe probe = {.nranks = c->nranks, .device = c->device};
    c->ops =
        forced != NULL ? forced : rt_backend_pick(&probe, c->knobs.transport, why, sizeof(why));
    c->xport = xport;
    if (c->ops == NULL) {
        status = c->knobs.transport[0] ? COMM_ERR_INVALID : COMM_ERR_UNSUPPORTED;
        rt_init_error(&c->knobs, status, "comm_init: rank %d: %s", c->rank, why);
        init_failure_publish(pub, c->timeout_ms, status);
        goto err_log;
    }

    /* What the backends may know of the host, found once here (hwloc). */
    c->topo = rt_topo_summary();
    c->numa_node = rt_topo_current_numa_node();

    c->backend_name = c->ops->name;
    status = c->ops->setup(c);
    if (status != COMM_OK) {
        /* Already logged where it was found. */
        rt_init_error_quiet("comm_init: %s", c->errmsg);
        /* A transport that failed before it reached the segment (a CUDA device it
         * cannot use, a Hexagon knob out of range) has told nobody yet. */
        if (!atomic_load(&c->published))
            init_failure_publish(pub, c->timeout_ms, status);
        goto err_log;
    }
    c->init_abort = NULL; /* read during comm_init only: the word may go now */
    c->parent = NULL;
    if (c->ops->resolve_knobs != NULL)
        c->ops->resolve_knobs(c);
    rt_log(c, RT_LOG_INFO, "rank %d: joined communicator %s of %d ranks over %s", c->rank,
           c->id.str, c->nranks, c->ops->name);
    c->magic = RT_COMM_LIVE;
    rt_live_add(c);
    *comm = c;
    return COMM_OK;

err_log:
    if (c->log_owned)
        fclose(c->log);
err_free:
    free(c);
    return status;
}

ARCOMM_API comm_status_t comm_init(comm_t **comm, const comm_config_t *cfg)
{
    return init_with(comm, cfg, -1, NULL, NULL, NULL);
}

comm_status_t rt_init_split_child(comm_t **comm, const comm_config_t *cfg, struct comm *parent)
{
    return init_with(comm, cfg, -1, NULL, NULL, parent);
}

ARCOMM_HOOK comm_status_t rt_hook_init_backend(comm_t **comm, const comm_config_t *cfg,
                                               const struct backend_ops *ops, void *xport)
{
    if (ops == NULL) {
        rt_init_error(NULL, COMM_ERR_INVALID, "rt_hook_init_backend: ops is NULL");
        return COMM_ERR_INVALID;
    }
    return init_with(comm, cfg, -1, ops, xport, NULL);
}

ARCOMM_HOOK void rt_hook_init_error(const char *msg)
{
    rt_init_error_quiet("%s", msg);
}

/* libarcomm_nccl's ncclCommGetAsyncError (rt_hooks.h): atomics only, any thread. */
ARCOMM_HOOK comm_status_t rt_hook_comm_id(const comm_t *comm, comm_id_t *id)
{
    if (comm == NULL || comm->magic != RT_COMM_LIVE || id == NULL)
        return COMM_ERR_INVALID;
    *id = comm->id;
    return COMM_OK;
}

ARCOMM_HOOK comm_status_t rt_hook_bulk_calls(const comm_t *comm, uint64_t out[3])
{
    if (comm == NULL || comm->magic != RT_COMM_LIVE || comm->shm == NULL || out == NULL)
        return COMM_ERR_INVALID;
    _Static_assert(SHM_BULK_KINDS == 3, "out[] holds every path");
    for (int k = 0; k < SHM_BULK_KINDS; k++)
        out[k] = comm->shm->bulk_calls[k];
    return COMM_OK;
}

ARCOMM_HOOK void rt_hook_reduce_pair(void *out, const void *a, const void *b, size_t count,
                                     comm_dtype_t dtype, comm_op_t op)
{
    const void *src[2] = {a, b};
    void *dst[1] = {out};
    coll_reduce(&(struct coll_reduce_args){.dst = dst,
                                           .ndst = 1,
                                           .dst_dtype = dtype,
                                           .src = src,
                                           .nsrc = 2,
                                           .src_dtype = dtype,
                                           .count = count,
                                           .op = op});
}

ARCOMM_HOOK comm_status_t rt_hook_comm_state(const comm_t *comm)
{
    if (comm == NULL || comm->magic != RT_COMM_LIVE)
        return COMM_ERR_INVALID;
    int broken = atomic_load(&comm->broken);
    if (broken != 0)
        return (comm_status_t)broken;
    if (atomic_load(&comm->aborted))
        return COMM_ERR_ABORTED;
    if (comm->shm != NULL) {
        /* A peer's own failure; COMM_ERR_PEER is what a peer passes on, or says when
         * it left through comm_destroy, which is no failure of a call to come. */
        for (int p = 0; p < comm->nranks; p++) {
            int32_t st = p != comm->rank ? shm_peer_status(comm, p) : COMM_OK;
            if (st != COMM_OK && st != COMM_ERR_PEER)
                return COMM_ERR_PEER;
        }
    }
    return COMM_OK;
}

/* Parses a non-negative decimal integer environment variable. */
static bool env_int(const char *name, int *out, bool required, char *why, size_t len)
{
    const char *v = getenv(name);
    if (v == NULL) {
        if (required)
            snprintf(why, len, "%s is not set (start the program with arrun, or set it)", name);
        return !required;
    }
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < 0 || x > INT_MAX) {
        snprintf(why, len, "%s=\"%.32s\" is not a non-negative integer", name, v);
        return false;
    }
    *out = (int)x;
    return true;
}

/*
 * Why ARCOMM_RANK is missing, when the environment shows another launcher: MPI's (its
 * programs take comm_init_mpi) or torchrun's.  False when it shows none.
 */
static bool other_launcher(char *why, size_t len)
{
    static const char *const mpi_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",
                                           "PMI_SIZE", "MPI_LOCALRANKID"};
    for (size_t i = 0; i < sizeof(mpi_vars) / sizeof(mpi_vars[0]); i++) {
        if (getenv(mpi_vars[i]) == NULL)
            continue;
        snprintf(why, len,
                 "ARCOMM_RANK is not set, and %s is: an MPI launcher (mpirun, srun) started "
                 "this process; call comm_init_mpi (arcomm_mpi.h, libarcomm_mpi) instead, "
                 "or start it with arrun",
                 mpi_vars[i]);
        return true;
    }
    if (getenv("RANK") != NULL && getenv("WORLD_SIZE") != NULL && getenv("MASTER_ADDR") != NULL) {
        snprintf(why, len,
                 "ARCOMM_RANK is not set, and RANK, WORLD_SIZE, MASTER_ADDR are: torchrun "
                 "started this process; start it with arrun instead, or fill a comm_config_t "
                 "(rank = RANK, nranks = WORLD_SIZE, an id from comm_id_new on rank 0 sent "
                 "to the others) and call comm_init");
        return true;
    }
    return false;
}

ARCOMM_API comm_status_t comm_init_env(comm_t **comm)
{
    char why[384];
    comm_config_t cfg;
    comm_config_init(&cfg);
    int local_rank = -1;
    if (getenv("ARCOMM_RANK") == NULL && other_launcher(why, sizeof(why)))
        goto err_invalid;
    if (!env_int("ARCOMM_RANK", &cfg.rank, true, why, sizeof(why)) ||
        !env_int("ARCOMM_SIZE", &cfg.nranks, true, why, sizeof(why)) ||
        !env_int("ARCOMM_LOCAL_RANK", &local_rank, false, why, sizeof(why)))
        goto err_invalid;
    const char *id = getenv("ARCOMM_ID");
    if (id == NULL) {
        snprintf(why, sizeof(why), "ARCOMM_ID is not set (start the program with arrun)");
        goto err_invalid;
    }
    if (strlen(id) >= COMM_ID_BYTES) {
        snprintf(why, sizeof(why), "ARCOMM_ID is %zu characters long, not an arcomm id",
                 strlen(id));
        goto err_invalid;
    }
    snprintf(cfg.id.str, sizeof(cfg.id.str), "%s", id);
    char idwhy[128];
    if (!rt_id_valid(&cfg.id, idwhy, sizeof(idwhy))) {
        snprintf(why, sizeof(why), "ARCOMM_ID: %s", idwhy);
        goto err_invalid;
    }
    const char *dev = getenv("ARCOMM_DEVICE");
    if (dev != NULL) {
        if (!rt_device_parse(dev, &cfg.device)) {
            snprintf(why, sizeof(why), "ARCOMM_DEVICE=\"%.32s\" is not host, cuda or hexagon", dev);
            goto err_invalid;
        }
    }
    /* The device follows the local rank modulo the devices the process sees (the
     * transport's rule for device_index -1): process ranks may share a GPU. */
    return init_with(comm, &cfg, local_rank, NULL, NULL, NULL);

err_invalid:
    rt_init_error(NULL, COMM_ERR_INVALID, "comm_init_env: %s", why);
    return COMM_ERR_INVALID;
}

/* comm_destroy's look at the asynchronous requests, under the registry lock (the
 * handle is alive there). */
static _Thread_local unsigned destroy_outstanding;
static void count_outstanding(struct comm *c)
{
    destroy_outstanding = rt_async_outstanding(c);
}

ARCOMM_API comm_status_t comm_destroy(comm_t *comm)
{
    if (comm == NULL)
        return COMM_OK;
    /* Requests still outstanding own their buffers and this handle: refused, nothing
     * freed (async.c).  Only this thread issues requests, so none can appear after. */
    bool alive = rt_live_run(comm, count_outstanding);
    if (alive && destroy_outstanding != 0) {
        rt_init_error(NULL, COMM_ERR_INVALID,
                      "comm_destroy: rank %d: %u asynchronous request%s of this communicator "
                      "%s not completed; nothing was freed: comm_wait (or comm_wait_all) for "
                      "them first (after comm_abort when they must end at once)",
                      comm->rank, destroy_outstanding, destroy_outstanding == 1 ? "" : "s",
                      destroy_outstanding == 1 ? "is" : "are");
        return COMM_ERR_INVALID;
    }
    /* What is still queued is a refused call's failure (async.c): it reaches the peers. */
    if (alive && comm->async != NULL)
        rt_async_drain(comm);
    /* Out of the registry first: a comm_abort in another thread either finished before
     * this or finds nothing. */
    enum rt_live_status live = rt_live_remove(comm);
    if (live == RT_LIVE_GONE) {
        rt_init_error(NULL, COMM_ERR_INVALID,
                      "comm_destroy: %p is not a live communicator: it was destroyed already, "
                      "or it was not made by comm_init; destroy each communicator once",
                      (void *)comm);
        return COMM_ERR_INVALID;
    }
    if (live == RT_LIVE_BUSY) {
        rt_init_error(NULL, COMM_ERR_INVALID,
                      "comm_destroy: rank %d: a call on this communicator is still running in "
                      "another thread; nothing was freed: call comm_abort, let that call "
                      "return, then comm_destroy",
                      comm->rank);
        return COMM_ERR_INVALID;
    }
    /* Peers still waiting for a call this rank will never make learn at once. */
    if (atomic_load(&comm->broken) == 0 && comm->ops != NULL && comm->nranks > 1) {
        char msg[160];
        snprintf(msg, sizeof(msg), "rank %d left the communicator (comm_destroy) after %u calls",
                 comm->rank, comm->seq);
        comm->ops->publish_failure(comm, COMM_ERR_PEER, msg, true);
    }
    if (comm->async != NULL)
        rt_async_close(comm);
    if (comm->ops != NULL)
        comm->ops->teardown(comm);
    if (comm->log_owned)
        fclose(comm->log);
    comm->magic = RT_COMM_DEAD;
    free(comm);
    return COMM_OK;
}

/* comm_abort's work, under the registry lock (live.c): only atomics and the segment,
 * since a collective may be running in another thread. */
static void abort_live(struct comm *c)
{
    atomic_store(&c->aborted, 1);
    char msg[96];
    snprintf(msg, sizeof(msg), "rank %d called comm_abort", c->rank);
    c->ops->publish_failure(c, COMM_ERR_ABORTED, msg, false);
    c->ops->wake(c);
}

ARCOMM_API comm_status_t comm_abort(comm_t *comm)
{
    if (comm == NULL) {
        rt_init_error(NULL, COMM_ERR_INVALID, "comm_abort: comm is NULL");
        return COMM_ERR_INVALID;
    }
    if (!rt_live_run(comm, abort_live)) {
        rt_init_error(NULL, COMM_ERR_INVALID,
                      "comm_abort: %p is not a live communicator (comm_destroy freed it, or it "
                      "was not made by comm_init); nothing was aborted",
                      (void *)comm);
        return COMM_ERR_INVALID;
    }
    return COMM_OK;
}

/* The longest period comm_set_wait_hook takes: a second. */
#define WAIT_HOOK_MAX_US 1000000u

ARCOMM_API comm_status_t comm_set_wait_hook(comm_t *comm, comm_wait_hook_fn fn, void *arg,
                                            unsigned period_us)
{
    if (!rt_handle_ok(comm, "comm_set_wait_hook"))
        return COMM_ERR_INVALID;
    /* The waits read the hook without a lock: it may change only between calls. */
    if (atomic_load_explicit(&comm->entered, memory_order_acquire) != 0) {
        rt_init_error(&comm->knobs, COMM_ERR_INVALID,
                      "rank %d: comm_set_wait_hook: a call on this communicator is running in "
                      "another thread; set the hook before the calls (or between them)",
                      comm->rank);
        return COMM_ERR_INVALID;
    }
    if (period_us > WAIT_HOOK_MAX_US) {
        rt_error(comm, COMM_ERR_INVALID,
                 "rank %d: comm_set_wait_hook: period_us %u is more than %u (a second): a "
                 "hook that runs less often cannot keep anything moving; pass 0 for the "
                 "default of 1000",
                 comm->rank, period_us, WAIT_HOOK_MAX_US);
        return COMM_ERR_INVALID;
    }
    comm->wait_hook = fn;
    comm->wait_hook_arg = fn != NULL ? arg : NULL;
    comm->wait_hook_period_ns = (uint64_t)(period_us != 0 ? period_us : 1000u) * 1000u;
    return COMM_OK;
}

ARCOMM_API comm_status_t comm_mem_alloc(comm_t *comm, size_t bytes, void **ptr)
{
    if (!rt_handle_ok(comm, "comm_mem_alloc"))
        return COMM_ERR_INVALID;
    if (ptr == NULL || bytes == 0) {
        rt_error(comm, COMM_ERR_INVALID, "rank %d: comm_mem_alloc: %s", comm->rank,
                 ptr == NULL ? "ptr is NULL" : "bytes is 0");
        return COMM_ERR_INVALID;
    }
    return comm->ops->mem_alloc(comm, bytes, ptr);
}

ARCOMM_API comm_status_t comm_mem_free(comm_t *comm, void *ptr)
{
    if (!rt_handle_ok(comm, "comm_mem_free"))
        return COMM_ERR_INVALID;
    if (ptr == NULL)
        return COMM_OK;
    return comm->ops->mem_free(comm, ptr);
}

ARCOMM_API int comm_rank(const comm_t *comm)
{
    return comm ? comm->rank : -1;
}

ARCOMM_API int comm_size(const comm_t *comm)
{
    return comm ? comm->nranks : -1;
}

ARCOMM_API const char *comm_transport_name(const comm_t *comm)
{
    return comm && comm->ops ? comm->ops->name : "";
}
