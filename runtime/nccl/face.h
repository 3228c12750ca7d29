/* SPDX-License-Identifier: MIT */
/*
 * libarcomm_nccl's own state: a ncclComm_t is a struct ncclComm that holds an arcomm
 * CUDA communicator (public API only, plus rt_hook_comm_state), the init that may still
 * be running in a thread of its own (nonblocking communicators, inits inside a group),
 * and the premultiplied sums made on it.  The calling thread's group depth and last
 * error live in thread-local storage.
 */
#ifndef ARCOMM_NCCL_FACE_H
#define ARCOMM_NCCL_FACE_H

#include "arcomm.h"
#include "nccl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* The communicators' knob defaults: f32 keeps its precision, as NCCL's does (arcomm's
 * own CUDA default sends f32 as bf16 from 1 MiB); ARCOMM_BF16_THRESHOLD still opts in. */
#define NCCL_FACE_KNOB_DEFAULTS "ARCOMM_BF16_THRESHOLD=off"

/* Every exported NCCL function, and its pnccl alias (NCCL's profiling names). */
#define NCCL_API __attribute__((visibility("default")))
#define NCCL_ALIAS(name)                                                                           \
    extern __typeof__(name) p##name __attribute__((alias(#name), visibility("default")))

#define NCCL_FACE_MAGIC  0x6e63636cu /* "nccl" */
#define NCCL_FACE_DEAD   0x64656164u
#define NCCL_FACE_ERRMSG 512
#define NCCL_PREMUL_MAX  64

/* An init or split running in a thread of its own; joined once, by whoever needs it. */
struct nccl_job {
    pthread_t thread;
    pthread_mutex_t lock;
    bool joined;
    int refs;             /* who holds it (a split: parent and child); under comms.c's jobs_lock */
    comm_config_t cfg;    /* init: what comm_init gets (its abort_flag: &abort) */
    int abort;            /* ncclCommAbort during the init or split: it stops */
    comm_t *parent;       /* split: the parent's communicator, else NULL */
    int color, key;       /* split */
    comm_t *made;         /* the communicator made (NULL after a split with no color) */
    comm_status_t status; /* comm_init's / comm_split's */
    _Atomic bool done;    /* the thread has finished: joining it does not wait */
    char errmsg[NCCL_FACE_ERRMSG];
};

/* A premultiplied sum (ncclRedOpCreatePreMulSum): op ncclNumOps + index. */
struct nccl_premul {
    bool used;
    ncclDataType_t dtype;
    ncclScalarResidence_t residence;
    const void *dev_scalar; /* ncclScalarDevice: read by the scaling kernel */
    uint64_t host_bits;     /* ncclScalarHostImmediate: its bytes, read at creation */
};

struct ncclComm {
    uint32_t magic; /* NCCL_FACE_MAGIC while alive */
    comm_t *c;      /* NULL until the init finished (or when it failed) */
    int nranks, rank, device;
    bool blocking;
    /* The init in progress; NULL once joined.  _Atomic: ncclCommGetAsyncError reads it
     * from any thread. */
    struct nccl_job *_Atomic job;
    _Atomic int init_result; /* ncclResult_t of the init, ncclInProgress while it runs */
    _Atomic int call_result; /* the first failure of a call, ncclSuccess until then */
    char errmsg[NCCL_FACE_ERRMSG];
    bool finalized;
    bool nocolor; /* a split in a group without a color: freed at the group's end */
    /* A nonblocking split of this communicator without a color, outside a group: its
     * hidden child, freed once this communicator joins the split (its next call). */
    struct ncclComm *orphan;
    struct nccl_premul premul[NCCL_PREMUL_MAX];
    void *scratch; /* premultiplied inputs, on device; grown on demand */
    size_t scratch_bytes;
    void *scratch_done; /* cudaEvent_t: the scratch's last reader is done */
};

/* The calling thread's GPU as the program set it (comms.c); a cudaError_t. */
int nccl_current_device(int *device);

/* ncclResult_t for an arcomm status. */
ncclResult_t nccl_result(comm_status_t st);

/* Records why this thread's last call failed (ncclGetLastError) and, at NCCL_DEBUG=WARN
 * or above, prints it; returns r. */
ncclResult_t nccl_fail(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The failure of an arcomm call on comm (or of an init, comm NULL): its message. */
ncclResult_t nccl_fail_comm(struct ncclComm *comm, const char *fn, comm_status_t st);

/* The handle may be used: alive, its init done (joined here when it ran in a thread)
 * and successful.  Else the failure, recorded. */
ncclResult_t nccl_comm_ready(struct ncclComm *comm, const char *fn);
/* nccl_comm_ready for an operation a group holds (collective, send, receive): also the
 * group's kind (nccl_group_enter). */
ncclResult_t nccl_comm_enter(struct ncclComm *comm, const char *fn);
struct ncclComm *nccl_comm_new(int nranks, int rank, int device, bool blocking);
void nccl_comm_free(struct ncclComm *comm);
/* Joins the communicator's pending job, if any (its result lands in comm). */
void nccl_comm_join(struct ncclComm *comm);

/* Groups (group.c): inside ncclGroupStart/End, inits and splits run in threads joined
 * at the outermost ncclGroupEnd (blocking communicators) or left running (nonblocking:
 * ncclGroupEnd returns ncclInProgress), and the first failure of the group is its result. */
bool nccl_in_group(void);
/* A call on a communicator of this kind (blocking or not) inside a group: fails, recorded
 * as the group's, when the group already holds the other kind; ncclSuccess outside one. */
ncclResult_t nccl_group_enter(bool blocking, const char *fn);
void nccl_group_add_job(struct ncclComm *comm);
ncclResult_t nccl_group_result(ncclResult_t r);

/* NCCL_DEBUG as a level (0 none, 1 version, 2 warn, 3 info, 4 trace); read once. */
int nccl_debug_level(void);
/* ARCOMM_LOG_LEVEL / ARCOMM_LOG_FILE from NCCL_DEBUG / NCCL_DEBUG_FILE, before the
 * first communicator is made (where the ARCOMM_* ones are not set). */
void nccl_env_setup(void);

/* scale.cu: dst[i] = src[i] * scalar, rounded once to dtype, on stream.  The scalar (of
 * dtype) is *dev_scalar when dev_scalar is not NULL, else the first bytes of host_bits.
 * Returns a cudaError_t. */
int nccl_scale_launch(void *dst, const void *src, size_t count, comm_dtype_t dtype,
                      const void *dev_scalar, uint64_t host_bits, void *stream);

/* scale.cu: buf[i] = buf[i] / n for an integer dtype (truncated toward zero, as C and
 * NCCL's ncclAvg divide), on stream.  Returns a cudaError_t. */
int nccl_divide_launch(void *buf, size_t count, comm_dtype_t dtype, int n, void *stream);

/* NCCL's datatype as arcomm's (colls.c); reduces: the call reduces (no fp8 then). */
ncclResult_t nccl_map_dtype(ncclDataType_t t, bool reduces, comm_dtype_t *out, const char *fn);

/* A communicator id derived from key (a hash of it): the same in every process. */
void nccl_id_derive(const char *key, comm_id_t *id);

/* Point-to-point (p2p.c).  ncclSend/ncclRecv are kept until the outermost ncclGroupEnd
 * (at once outside a group), which runs them as one arcomm group (comm_send, comm_recv):
 * nccl_p2p_flush. */
ncclResult_t nccl_p2p_flush(void);

/* The NCCL functions of later versions that this library defines only to refuse. */
ncclResult_t nccl_refuse(const char *fn, ncclResult_t r, const char *why);

#endif /* ARCOMM_NCCL_FACE_H */
