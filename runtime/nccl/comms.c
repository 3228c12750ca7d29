/* SPDX-License-Identifier: MIT */
/*
 * Communicators: ncclUniqueId (an arcomm comm_id_t inside, or one derived from
 * NCCL_COMM_ID), ncclCommInitRank[Config] (comm_init on the calling thread's current
 * GPU; in a thread of its own for a nonblocking communicator or inside a group),
 * ncclCommInitAll (comm_init_all), ncclCommSplit (comm_split), finalize, destroy,
 * abort, the asynchronous error (rt_hook_comm_state), the queries, buffer registration
 * and ncclMemAlloc.
 */
#include "face.h"
#include "rt_hooks.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What an ncclUniqueId of this library holds: a tag, then the arcomm id. */
static const char id_tag[8] = {'a', 'r', 'c', 'n', 'c', 'c', 'l', '1'};
_Static_assert(sizeof(id_tag) + sizeof(comm_id_t) <= NCCL_UNIQUE_ID_BYTES, "id fits");
_Static_assert(sizeof(ncclUniqueId) == 128, "NCCL's ABI");

/* FNV-1a, 64 bits, from a given basis. */
static uint64_t fnv1a(const char *s, uint64_t h)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

/*
 * NCCL_COMM_ID names NCCL's bootstrap root ("host:port"), so that every process can
 * take its own ncclGetUniqueId.  On arcomm (one host) it names the communicator: the id
 * is a hash of the value and the user id, the same in every process of that user.
 */
void nccl_id_derive(const char *key, comm_id_t *id)
{
    uint64_t a = fnv1a(key, 0xcbf29ce484222325ull), b = fnv1a(key, 0x84222325cbf29ce4ull);
    memset(id, 0, sizeof(*id));
    snprintf(id->str, sizeof(id->str), "arc1-%016llx%016llx", (unsigned long long)a,
             (unsigned long long)b);
}

static void id_from_env(const char *v, comm_id_t *id)
{
    char key[320];
    snprintf(key, sizeof(key), "%u/%s", (unsigned)getuid(), v);
    nccl_id_derive(key, id);
}

NCCL_API ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    if (uniqueId == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    comm_id_t id;
    const char *env = getenv("NCCL_COMM_ID");
    if (env != NULL && env[0] != '\0') {
        id_from_env(env, &id);
    } else {
        comm_status_t st = comm_id_new(&id);
        if (st != COMM_OK)
            return nccl_fail_comm(NULL, "ncclGetUniqueId", st);
    }
    memset(uniqueId, 0, sizeof(*uniqueId));
    memcpy(uniqueId->internal, id_tag, sizeof(id_tag));
    memcpy(uniqueId->internal + sizeof(id_tag), &id, sizeof(id));
    return ncclSuccess;
}
NCCL_ALIAS(ncclGetUniqueId);

/*
 * The GPU of the calling thread as the program set it: the driver's current context
 * (cuCtxGetDevice), since the program's CUDA runtime is not this library's (cudart is
 * linked in statically); this library's runtime is then set to the same device.  With
 * no context current yet, this runtime's own answer (device 0 unless set).
 */
int nccl_current_device(int *device)
{
    static int (*ctx_get_device)(int *) = NULL;
    static _Atomic int looked_up = 0;
    if (!atomic_load(&looked_up)) {
        void *fn = NULL;
        enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion("cuCtxGetDevice", &fn, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            ctx_get_device = (int (*)(int *))fn;
        atomic_store(&looked_up, 1);
    }
    int d = -1;
    if (ctx_get_device != NULL && ctx_get_device(&d) == 0 && d >= 0) {
        *device = d;
        return (int)cudaSetDevice(d);
    }
    (void)cudaGetLastError();
    return (int)cudaGetDevice(device);
}

static bool id_of(const ncclUniqueId *u, comm_id_t *id)
{
    if (memcmp(u->internal, id_tag, sizeof(id_tag)) != 0)
        return false;
    memcpy(id, u->internal + sizeof(id_tag), sizeof(*id));
    id->str[COMM_ID_BYTES - 1] = '\0';
    return true;
}

struct ncclComm *nccl_comm_new(int nranks, int rank, int device, bool blocking)
{
    struct ncclComm *comm = calloc(1, sizeof(*comm));
    if (comm == NULL)
        return NULL;
    comm->magic = NCCL_FACE_MAGIC;
    comm->nranks = nranks;
    comm->rank = rank;
    comm->device = device;
    comm->blocking = blocking;
    atomic_init(&comm->job, NULL);
    atomic_init(&comm->init_result, ncclInProgress);
    atomic_init(&comm->call_result, ncclSuccess);
    return comm;
}

void nccl_comm_free(struct ncclComm *comm)
{
    if (comm->scratch != NULL || comm->scratch_done != NULL) {
        int prev = 0;
        (void)nccl_current_device(&prev);
        (void)cudaSetDevice(comm->device);
        if (comm->scratch != NULL)
            (void)cudaFree(comm->scratch);
        if (comm->scratch_done != NULL)
            (void)cudaEventDestroy((cudaEvent_t)comm->scratch_done);
        (void)cudaSetDevice(prev);
    }
    comm->magic = NCCL_FACE_DEAD;
    free(comm);
}

static bool comm_alive(const struct ncclComm *comm)
{
    return comm != NULL && comm->magic == NCCL_FACE_MAGIC;
}

/* Where a finished job's outcome lands: the communicator it made, or its failure. */
static void job_settle(struct ncclComm *comm, struct nccl_job *job)
{
    if (job->parent != NULL && job->parent == comm->c)
        return; /* the split's parent: nothing made here */
    if (job->status == COMM_OK) {
        comm->c = job->made; /* NULL after a split without a color */
        if (comm->c != NULL) {
            comm->nranks = comm_size(comm->c);
            comm->rank = comm_rank(comm->c);
        }
        atomic_store(&comm->init_result, ncclSuccess);
    } else {
        snprintf(comm->errmsg, sizeof(comm->errmsg), "%s", job->errmsg);
        atomic_store(&comm->init_result, (int)nccl_result(job->status));
    }
}

/* Guards the jobs' reference counts and the communicators' job pointers. */
static pthread_mutex_t jobs_lock = PTHREAD_MUTEX_INITIALIZER;

static void job_unref_locked(struct nccl_job *job, int n)
{
    job->refs -= n;
    if (job->refs == 0) {
        pthread_mutex_destroy(&job->lock);
        free(job);
    }
}

void nccl_comm_join(struct ncclComm *comm)
{
    pthread_mutex_lock(&jobs_lock);
    struct nccl_job *job = atomic_load(&comm->job);
    if (job == NULL) {
        pthread_mutex_unlock(&jobs_lock);
        return;
    }
    job->refs++; /* ours, while joining without jobs_lock */
    pthread_mutex_unlock(&jobs_lock);

    pthread_mutex_lock(&job->lock);
    if (!job->joined) {
        pthread_join(job->thread, NULL);
        job->joined = true;
    }
    pthread_mutex_unlock(&job->lock);

    pthread_mutex_lock(&jobs_lock);
    int drop = 1; /* ours, and the communicator's when it still holds the job */
    if (atomic_load(&comm->job) == job) {
        job_settle(comm, job);
        atomic_store(&comm->job, NULL);
        drop++;
    }
    job_unref_locked(job, drop);
    pthread_mutex_unlock(&jobs_lock);

    /* The owner's thread only (a call on comm, or its destroy): the split is done. */
    struct ncclComm *orphan = comm->orphan;
    if (orphan != NULL) {
        comm->orphan = NULL;
        nccl_comm_join(orphan);
        nccl_comm_free(orphan);
    }
}

/* Has the job's thread finished (so that joining it does not wait)? */
static bool job_done(struct ncclComm *comm)
{
    pthread_mutex_lock(&jobs_lock);
    struct nccl_job *job = atomic_load(&comm->job);
    bool done = job != NULL && atomic_load(&job->done);
    pthread_mutex_unlock(&jobs_lock);
    return done;
}

ncclResult_t nccl_comm_ready(struct ncclComm *comm, const char *fn)
{
    if (!comm_alive(comm))
        return nccl_fail(ncclInvalidArgument, "%s: comm %p is not a live communicator", fn,
                         (void *)comm);
    nccl_comm_join(comm);
    int r = atomic_load(&comm->init_result);
    if (r != ncclSuccess)
        return nccl_fail((ncclResult_t)r, "%s: the communicator's init failed: %s", fn,
                         comm->errmsg);
    return ncclSuccess;
}

ncclResult_t nccl_comm_enter(struct ncclComm *comm, const char *fn)
{
    ncclResult_t r = nccl_comm_ready(comm, fn);
    return r == ncclSuccess ? nccl_group_enter(comm->blocking, fn) : r;
}

static void *job_run(void *arg)
{
    struct nccl_job *job = arg;
    comm_status_t st;
    if (job->parent != NULL) {
        st = rt_hook_split(job->parent, job->color, job->key, &job->abort, &job->made);
        if (st != COMM_OK)
            snprintf(job->errmsg, sizeof(job->errmsg), "ncclCommSplit: %s",
                     comm_last_error(job->parent));
    } else {
        (void)cudaSetDevice(job->cfg.device_index);
        st = comm_init(&job->made, &job->cfg);
        if (st != COMM_OK)
            snprintf(job->errmsg, sizeof(job->errmsg), "ncclCommInitRank: %s",
                     comm_last_error(NULL));
    }
    job->status = st;
    atomic_store(&job->done, true);
    return NULL;
}

static struct nccl_job *job_start(const comm_config_t *cfg, comm_t *parent, int color, int key,
                                  int refs)
{
    struct nccl_job *job = calloc(1, sizeof(*job));
    if (job == NULL)
        return NULL;
    pthread_mutex_init(&job->lock, NULL);
    job->refs = refs;
    if (cfg != NULL) {
        job->cfg = *cfg;
        job->cfg.abort_flag = &job->abort;
    }
    job->parent = parent;
    job->color = color;
    job->key = key;
    if (pthread_create(&job->thread, NULL, job_run, job) != 0) {
        pthread_mutex_destroy(&job->lock);
        free(job);
        return NULL;
    }
    return job;
}

/* The 2.19 fields of a program's config, as far as its size says they are there. */
static ncclResult_t read_config(const ncclConfig_t *config, bool *blocking, const char *fn)
{
    *blocking = true;
    if (config == NULL)
        return ncclSuccess;
    if (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, blocking) + 4)
        return nccl_fail(ncclInvalidArgument,
                         "%s: config was not set up with NCCL_CONFIG_INITIALIZER (magic 0x%x, "
                         "size %zu)",
                         fn, config->magic, config->size);
    if (config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != 0 && config->blocking != 1)
        return nccl_fail(ncclInvalidArgument, "%s: config->blocking is %d; use 0 or 1", fn,
                         config->blocking);
    *blocking = config->blocking != 0;
    return ncclSuccess;
}

static ncclResult_t init_rank(ncclComm_t *out, int nranks, ncclUniqueId commId, int rank,
                              ncclConfig_t *config, const char *fn)
{
    if (out == NULL)
        return nccl_fail(ncclInvalidArgument, "%s: comm is NULL", fn);
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return nccl_fail(ncclInvalidArgument, "%s: rank %d of %d ranks is out of range", fn, rank,
                         nranks);
    bool blocking = true;
    ncclResult_t r = read_config(config, &blocking, fn);
    if (r == ncclSuccess)
        r = nccl_group_enter(blocking, fn);
    if (r != ncclSuccess)
        return r;
    comm_config_t cfg;
    comm_config_init(&cfg);
    if (!id_of(&commId, &cfg.id))
        return nccl_fail(ncclInvalidArgument,
                         "%s: rank %d: this ncclUniqueId was not made by arcomm's libnccl "
                         "(ncclGetUniqueId of the same library, or NCCL_COMM_ID, on every rank)",
                         fn, rank);
    int device = 0;
    cudaError_t e = (cudaError_t)nccl_current_device(&device);
    if (e != cudaSuccess)
        return nccl_fail(ncclUnhandledCudaError, "%s: rank %d: no current GPU: %s", fn, rank,
                         cudaGetErrorString(e));
    nccl_env_setup();
    cfg.nranks = nranks;
    cfg.rank = rank;
    cfg.device = COMM_DEVICE_CUDA;
    cfg.knob_defaults = NCCL_FACE_KNOB_DEFAULTS;
    cfg.device_index = device;
    struct ncclComm *comm = nccl_comm_new(nranks, rank, device, blocking);
    if (comm == NULL)
        return nccl_fail(ncclSystemError, "%s: out of memory", fn);

    /* A blocking init outside a group: comm_init here.  Otherwise in a thread, joined at
     * the group's end or at the first call that needs the communicator. */
    if (blocking && !nccl_in_group()) {
        comm_status_t st = comm_init(&comm->c, &cfg);
        if (st != COMM_OK) {
            r = nccl_fail_comm(NULL, fn, st);
            nccl_comm_free(comm);
            return r;
        }
        atomic_store(&comm->init_result, ncclSuccess);
        *out = comm;
        return ncclSuccess;
    }
    struct nccl_job *job = job_start(&cfg, NULL, 0, 0, 1);
    if (job == NULL) {
        nccl_comm_free(comm);
        return nccl_fail(ncclSystemError, "%s: rank %d: cannot start the init thread", fn, rank);
    }
    atomic_store(&comm->job, job);
    *out = comm;
    if (nccl_in_group()) {
        nccl_group_add_job(comm);
        return ncclSuccess;
    }
    return ncclInProgress; /* nonblocking: ncclCommGetAsyncError says when it is done */
}

NCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                             int rank, ncclConfig_t *config)
{
    return nccl_group_result(
        init_rank(comm, nranks, commId, rank, config, "ncclCommInitRankConfig"));
}
NCCL_ALIAS(ncclCommInitRankConfig);

NCCL_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    return nccl_group_result(init_rank(comm, nranks, commId, rank, NULL, "ncclCommInitRank"));
}
NCCL_ALIAS(ncclCommInitRank);

NCCL_API ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
    if (comms == NULL || ndev < 1)
        return nccl_fail(ncclInvalidArgument, "ncclCommInitAll: comms %p, ndev %d", (void *)comms,
                         ndev);
    nccl_env_setup();
    comm_t **made = calloc((size_t)ndev, sizeof(*made));
    struct ncclComm **w = calloc((size_t)ndev, sizeof(*w));
    ncclResult_t r = ncclSuccess;
    if (made == NULL || w == NULL) {
        r = nccl_fail(ncclSystemError, "ncclCommInitAll: out of memory");
        goto out;
    }
    for (int i = 0; i < ndev; i++) {
        w[i] = nccl_comm_new(ndev, i, devlist != NULL ? devlist[i] : i, true);
        if (w[i] == NULL) {
            r = nccl_fail(ncclSystemError, "ncclCommInitAll: out of memory");
            goto out;
        }
    }
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.device = COMM_DEVICE_CUDA;
    cfg.knob_defaults = NCCL_FACE_KNOB_DEFAULTS;
    comm_status_t st = comm_init_all(made, ndev, devlist, &cfg);
    if (st != COMM_OK) {
        r = nccl_fail_comm(NULL, "ncclCommInitAll", st);
        goto out;
    }
    for (int i = 0; i < ndev; i++) {
        w[i]->c = made[i];
        atomic_store(&w[i]->init_result, ncclSuccess);
        comms[i] = w[i];
        w[i] = NULL;
    }
out:
    for (int i = 0; w != NULL && i < ndev; i++)
        if (w[i] != NULL)
            nccl_comm_free(w[i]);
    free(w);
    free(made);
    return r;
}
NCCL_ALIAS(ncclCommInitAll);

static ncclResult_t split(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                          ncclConfig_t *config)
{
    ncclResult_t r = nccl_comm_ready(comm, "ncclCommSplit");
    if (r != ncclSuccess)
        return r;
    if (newcomm == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
    bool blocking = comm->blocking;
    if (config != NULL && (r = read_config(config, &blocking, "ncclCommSplit")) != ncclSuccess)
        return r;
    if ((r = nccl_group_enter(blocking, "ncclCommSplit")) != ncclSuccess)
        return r;
    if (color < 0)
        color = COMM_SPLIT_NONE;
    /* The parent's device; the new rank and size are known once it is made. */
    struct ncclComm *child = nccl_comm_new(0, -1, comm->device, blocking);
    if (child == NULL)
        return nccl_fail(ncclSystemError, "ncclCommSplit: out of memory");
    if (blocking && !nccl_in_group()) {
        comm_status_t st = comm_split(comm->c, color, key, &child->c);
        if (st != COMM_OK) {
            r = nccl_fail_comm(comm, "ncclCommSplit", st);
            nccl_comm_free(child);
            return r;
        }
        if (child->c == NULL) {
            nccl_comm_free(child);
            *newcomm = NULL;
            return ncclSuccess;
        }
        child->nranks = comm_size(child->c);
        child->rank = comm_rank(child->c);
        atomic_store(&child->init_result, ncclSuccess);
        *newcomm = child;
        return ncclSuccess;
    }
    /* In a group, or nonblocking: comm_split blocks until every rank split, so it runs in
     * a thread (one thread may drive several communicators), joined at the end of a
     * blocking group, or (nonblocking, in a group or not) once ncclCommGetAsyncError finds
     * it done or the child is used; the parent joins it at its next call, and frees a
     * child without a color then. */
    struct nccl_job *job = job_start(NULL, comm->c, color, key, 2);
    if (job == NULL) {
        nccl_comm_free(child);
        return nccl_fail(ncclSystemError, "ncclCommSplit: cannot start the split thread");
    }
    atomic_store(&comm->job, job);
    atomic_store(&child->job, job);
    child->nocolor = color == COMM_SPLIT_NONE;
    *newcomm = child->nocolor ? NULL : child;
    if (child->nocolor && !blocking)
        comm->orphan = child;
    if (nccl_in_group()) {
        nccl_group_add_job(child);
        return ncclSuccess;
    }
    return ncclInProgress;
}

/* Inside a group, a failure is the group's too (ncclGroupEnd returns the first). */
NCCL_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                    ncclConfig_t *config)
{
    return nccl_group_result(split(comm, color, key, newcomm, config));
}
NCCL_ALIAS(ncclCommSplit);

/* Nothing to flush: calls were enqueued on the program's streams, which comm_destroy
 * drains.  No rank waits for another here (one thread may finalize several). */
NCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    ncclResult_t r = nccl_comm_ready(comm, "ncclCommFinalize");
    if (r != ncclSuccess)
        return r;
    comm->finalized = true;
    return ncclSuccess;
}
NCCL_ALIAS(ncclCommFinalize);

/* ncclCommAbort while the communicator's init or split runs in its thread: the init
 * stops at once (comm_init's abort_flag) and its peers' inits fail, as NCCL's do; a
 * split stops as well (rt_hook_split's word), and the parent it was split from breaks
 * on every rank, so that no peer waits for this rank's part until the timeout. */
static void job_abort(struct ncclComm *comm)
{
    pthread_mutex_lock(&jobs_lock);
    struct nccl_job *job = atomic_load(&comm->job);
    if (job != NULL)
        __atomic_store_n(&job->abort, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&jobs_lock);
}

static ncclResult_t destroy(ncclComm_t comm, bool abort, const char *fn)
{
    if (comm == NULL)
        return ncclSuccess;
    if (!comm_alive(comm))
        return nccl_fail(ncclInvalidArgument, "%s: comm %p is not a live communicator", fn,
                         (void *)comm);
    if (abort) {
        job_abort(comm);
        if (comm->c != NULL)
            (void)comm_abort(comm->c); /* a nonblocking split of it still running ends too */
    }
    nccl_comm_join(comm);
    if (comm->c != NULL) {
        comm_status_t st = comm_destroy(comm->c);
        if (st != COMM_OK)
            return nccl_fail_comm(NULL, fn, st); /* busy in another thread: nothing freed */
    }
    nccl_comm_free(comm);
    return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    return destroy(comm, false, "ncclCommDestroy");
}
NCCL_ALIAS(ncclCommDestroy);

NCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return destroy(comm, true, "ncclCommAbort");
}
NCCL_ALIAS(ncclCommAbort);

/* Any thread, any time: atomics only (the init's state, then the communicator's). */
NCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!comm_alive(comm) || asyncError == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclCommGetAsyncError: comm %p, asyncError %p",
                         (void *)comm, (void *)asyncError);
    int r = atomic_load(&comm->init_result);
    if (r == ncclInProgress && job_done(comm)) {
        /* Joined here only once its thread is done: the caller never waits. */
        nccl_comm_join(comm);
        r = atomic_load(&comm->init_result);
    }
    if (r == ncclSuccess && comm->c != NULL) {
        comm_status_t st = rt_hook_comm_state(comm->c);
        r = st != COMM_OK ? (int)nccl_result(st) : atomic_load(&comm->call_result);
    }
    *asyncError = (ncclResult_t)r;
    return ncclSuccess;
}
NCCL_ALIAS(ncclCommGetAsyncError);

NCCL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    ncclResult_t r = nccl_comm_ready(comm, "ncclCommCount");
    if (r != ncclSuccess)
        return r;
    if (count == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclCommCount: count is NULL");
    *count = comm->nranks;
    return ncclSuccess;
}
NCCL_ALIAS(ncclCommCount);

NCCL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    ncclResult_t r = nccl_comm_ready(comm, "ncclCommCuDevice");
    if (r != ncclSuccess)
        return r;
    if (device == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
    *device = comm->device;
    return ncclSuccess;
}
NCCL_ALIAS(ncclCommCuDevice);

NCCL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    ncclResult_t r = nccl_comm_ready(comm, "ncclCommUserRank");
    if (r != ncclSuccess)
        return r;
    if (rank == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
    *rank = comm->rank;
    return ncclSuccess;
}
NCCL_ALIAS(ncclCommUserRank);

/* Registration buys nothing on arcomm (every call stages through its own pinned
 * segment): accepted, with a handle that only ncclCommDeregister looks at. */
static char registered_tag;

NCCL_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                                       void **handle)
{
    ncclResult_t r = nccl_comm_ready(comm, "ncclCommRegister");
    if (r != ncclSuccess)
        return r;
    if (handle == NULL || (buff == NULL && size > 0))
        return nccl_fail(ncclInvalidArgument, "ncclCommRegister: buff %p, size %zu, handle %p",
                         buff, size, (void *)handle);
    *handle = &registered_tag;
    return ncclSuccess;
}
NCCL_ALIAS(ncclCommRegister);

NCCL_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
    ncclResult_t r = nccl_comm_ready(comm, "ncclCommDeregister");
    if (r != ncclSuccess)
        return r;
    if (handle != &registered_tag)
        return nccl_fail(ncclInvalidArgument,
                         "ncclCommDeregister: %p is not a handle of ncclCommRegister", handle);
    return ncclSuccess;
}
NCCL_ALIAS(ncclCommDeregister);

NCCL_API ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
    if (ptr == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
    if (size == 0) {
        *ptr = NULL;
        return ncclSuccess;
    }
    void *p = NULL;
    int device = 0;
    cudaError_t e = (cudaError_t)nccl_current_device(&device);
    if (e == cudaSuccess)
        e = cudaMalloc(&p, size);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return nccl_fail(ncclUnhandledCudaError, "ncclMemAlloc: cudaMalloc of %zu bytes: %s", size,
                         cudaGetErrorString(e));
    }
    *ptr = p;
    return ncclSuccess;
}
NCCL_ALIAS(ncclMemAlloc);

NCCL_API ncclResult_t ncclMemFree(void *ptr)
{
    if (ptr == NULL)
        return ncclSuccess;
    cudaError_t e = cudaFree(ptr);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return nccl_fail(ncclUnhandledCudaError, "ncclMemFree: cudaFree(%p): %s", ptr,
                         cudaGetErrorString(e));
    }
    return ncclSuccess;
}
NCCL_ALIAS(ncclMemFree);

/* NCCL 2.23's init from several ids (their roots share the bootstrap): on one host one
 * id is enough, and every rank passes the same list, so the first names the comm. */
NCCL_API ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                               ncclUniqueId *commIds, ncclConfig_t *config)
{
    if (nId < 1 || commIds == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclCommInitRankScalable: nId %d, commIds %p", nId,
                         (void *)commIds);
    return nccl_group_result(
        init_rank(newcomm, nranks, commIds[0], myrank, config, "ncclCommInitRankScalable"));
}
NCCL_ALIAS(ncclCommInitRankScalable);
