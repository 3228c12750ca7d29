/* SPDX-License-Identifier: MIT */
/*
 * Results, error strings and the last error: arcomm's statuses as the NCCL results a
 * program expects, ncclGetLastError (this thread's last failure, as NCCL's is
 * process-wide text), and NCCL_DEBUG / NCCL_DEBUG_FILE mapped to arcomm's log knobs.
 */
#include "face.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static _Thread_local char last_error[NCCL_FACE_ERRMSG];

ncclResult_t nccl_result(comm_status_t st)
{
    switch (st) {
    case COMM_OK:
        return ncclSuccess;
    case COMM_ERR_INVALID:
    case COMM_ERR_UNSUPPORTED:
        return ncclInvalidArgument;
    case COMM_ERR_MISMATCH:
    case COMM_ERR_ABORTED:
        return ncclInvalidUsage;
    case COMM_ERR_TIMEOUT:
    case COMM_ERR_PEER:
        return ncclRemoteError;
    case COMM_ERR_NOMEM:
    case COMM_ERR_SYSTEM:
        return ncclSystemError;
    }
    return ncclInternalError;
}

static _Atomic int debug_level = -1;

static void debug_read(void)
{
    const char *v = getenv("NCCL_DEBUG");
    int lvl = 0;
    if (v == NULL)
        lvl = 0;
    else if (strcasecmp(v, "VERSION") == 0)
        lvl = 1;
    else if (strcasecmp(v, "WARN") == 0)
        lvl = 2;
    else if (strcasecmp(v, "INFO") == 0)
        lvl = 3;
    else if (strcasecmp(v, "TRACE") == 0)
        lvl = 4;
    atomic_store(&debug_level, lvl);
}

int nccl_debug_level(void)
{
    if (atomic_load(&debug_level) < 0)
        debug_read();
    return atomic_load(&debug_level);
}

/* NCCL_DEBUG is read again at the next message (the log knobs of communicators already
 * made stay as they were). */
NCCL_API void ncclResetDebugInit(void)
{
    atomic_store(&debug_level, -1);
}
NCCL_ALIAS(ncclResetDebugInit);

static pthread_once_t env_once = PTHREAD_ONCE_INIT;

/* Once, at the first init: setenv is not safe against a getenv in another thread, and
 * a program's threads rarely read the environment while NCCL makes its first comm. */
static void env_apply(void)
{
    static const char *const levels[] = {"error", "error", "warn", "info", "trace"};
    int lvl = nccl_debug_level();
    if (getenv("NCCL_DEBUG") != NULL && getenv("ARCOMM_LOG_LEVEL") == NULL)
        setenv("ARCOMM_LOG_LEVEL", levels[lvl], 0);
    const char *file = getenv("NCCL_DEBUG_FILE");
    if (file != NULL && getenv("ARCOMM_LOG_FILE") == NULL)
        setenv("ARCOMM_LOG_FILE", file, 0); /* %h and %p mean the same in both */
    if (lvl >= 1) {
        int maj = 0, min = 0, pat = 0;
        comm_get_version(&maj, &min, &pat);
        fprintf(stderr, "NCCL version %d.%d.%d (arcomm %d.%d.%d, libarcomm_nccl)\n", NCCL_MAJOR,
                NCCL_MINOR, NCCL_PATCH, maj, min, pat);
    }
}

void nccl_env_setup(void)
{
    pthread_once(&env_once, env_apply);
}

ncclResult_t nccl_fail(ncclResult_t r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    if (nccl_debug_level() >= 2)
        fprintf(stderr, "NCCL WARN arcomm: %s\n", last_error);
    return r;
}

ncclResult_t nccl_fail_comm(struct ncclComm *comm, const char *fn, comm_status_t st)
{
    const char *msg = comm != NULL && comm->c != NULL ? comm_last_error(comm->c) : "";
    if (msg == NULL || msg[0] == '\0')
        msg = comm_last_error(NULL);
    ncclResult_t r = nccl_result(st);
    if (comm != NULL) {
        int expected = ncclSuccess;
        atomic_compare_exchange_strong(&comm->call_result, &expected, (int)r);
    }
    return nccl_fail(r, "%s: %s (%s)", fn, msg != NULL && msg[0] ? msg : comm_status_string(st),
                     comm_status_string(st));
}

NCCL_API const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the arcomm developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}
NCCL_ALIAS(ncclGetErrorString);

/* NCCL's text is not per communicator either: the calling thread's last failure. */
NCCL_API const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return last_error;
}
NCCL_ALIAS(ncclGetLastError);

NCCL_API ncclResult_t ncclGetVersion(int *version)
{
    if (version == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}
NCCL_ALIAS(ncclGetVersion);

ncclResult_t nccl_refuse(const char *fn, ncclResult_t r, const char *why)
{
    /* Always said, once per call: a program that needs it must not fail silently. */
    fprintf(stderr, "arcomm libnccl: %s is not supported: %s\n", fn, why);
    snprintf(last_error, sizeof(last_error), "%s is not supported by arcomm's libnccl: %s", fn,
             why);
    return r;
}
