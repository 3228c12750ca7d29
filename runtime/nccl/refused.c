/* SPDX-License-Identifier: MIT */
/*
 * Every other public function of NCCL 2.28's host API (and the later ones PyTorch
 * references), defined so that a program that needs one fails here, loudly (one line
 * on stderr, ncclGetLastError saying why), and never reaches a real libnccl that
 * happens to be loaded in the same process: PyTorch's own copy comes in through an
 * RPATH.  The parameters are declared for the record only: a refusal reads none.
 */
#include "face.h"

#include <stdint.h>

#pragma GCC diagnostic ignored "-Wunused-parameter"

/* Types of later NCCL headers, opaque here. */
typedef struct ncclWindow_vidmem *ncclWindow_t;
struct nccl_team {
    int nRanks, rank, stride; /* NCCL 2.28's ncclTeam, returned by value */
};

#define REFUSE(name, params, result, why)                                                          \
    NCCL_API ncclResult_t name params                                                              \
    {                                                                                              \
        return nccl_refuse(#name, result, why);                                                    \
    }                                                                                              \
    NCCL_ALIAS(name)

static const char no_one_sided[] =
    "arcomm has no one-sided operations (ncclSend and ncclRecv are served)";
static const char no_device_api[] =
    "arcomm has no device-side API (NCCL 2.28 device communicators, teams, barriers)";
static const char no_windows[] = "arcomm has no symmetric memory windows";
static const char no_elastic[] =
    "arcomm communicators cannot be revoked, shrunk, grown or suspended; destroy it and "
    "make a new one";

REFUSE(ncclPutSignal,
       (const void *localbuff, size_t count, ncclDataType_t datatype, int peer,
        ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
        ncclComm_t comm, cudaStream_t stream),
       ncclInvalidUsage, no_one_sided);
REFUSE(ncclSignal,
       (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream),
       ncclInvalidUsage, no_one_sided);
REFUSE(ncclWaitSignal, (int nDesc, void *signalDescs, ncclComm_t comm, cudaStream_t stream),
       ncclInvalidUsage, no_one_sided);

REFUSE(ncclCommRevoke, (ncclComm_t comm, int revokeFlags), ncclInvalidUsage, no_elastic);
REFUSE(ncclCommShrink,
       (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,
        ncclConfig_t *config, int shrinkFlags),
       ncclInvalidUsage, no_elastic);
REFUSE(ncclCommGrow,
       (ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank, ncclComm_t *newcomm,
        ncclConfig_t *config),
       ncclInvalidUsage, no_elastic);
REFUSE(ncclCommGetUniqueId, (ncclComm_t comm, ncclUniqueId *uniqueId), ncclInvalidUsage,
       no_elastic);
REFUSE(ncclCommSuspend, (ncclComm_t comm, int flags), ncclInvalidUsage, no_elastic);
REFUSE(ncclCommResume, (ncclComm_t comm), ncclInvalidUsage, no_elastic);
REFUSE(ncclCommMemStats, (ncclComm_t comm, int stat, uint64_t *value), ncclInvalidUsage,
       "arcomm keeps no NCCL memory statistics");
REFUSE(ncclCommQueryProperties, (ncclComm_t comm, void *props), ncclInvalidUsage, no_device_api);
REFUSE(ncclGroupSimulateEnd, (void *simInfo), ncclInvalidUsage,
       "arcomm has no cost model to simulate a group with");

REFUSE(ncclCommWindowRegister,
       (ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags),
       ncclInvalidUsage, no_windows);
REFUSE(ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win), ncclInvalidUsage, no_windows);
REFUSE(ncclWinGetUserPtr, (ncclComm_t comm, ncclWindow_t win, void **outUserPtr), ncclInvalidUsage,
       no_windows);
REFUSE(ncclGetLsaMultimemDevicePointer, (ncclWindow_t window, size_t offset, void **outPtr),
       ncclInvalidUsage, no_windows);
REFUSE(ncclGetMultimemDevicePointer,
       (ncclWindow_t window, size_t offset, void *multimem, void **outPtr), ncclInvalidUsage,
       no_windows);
REFUSE(ncclGetPeerDevicePointer, (ncclWindow_t window, size_t offset, int peer, void **outPtr),
       ncclInvalidUsage, no_windows);
REFUSE(ncclGetLsaDevicePointer, (ncclWindow_t window, size_t offset, int lsaRank, void **outPtr),
       ncclInvalidUsage, no_windows);

REFUSE(ncclDevCommCreate, (ncclComm_t comm, const void *reqs, void *outDevComm), ncclInvalidUsage,
       no_device_api);
REFUSE(ncclDevCommDestroy, (ncclComm_t comm, const void *devComm), ncclInvalidUsage, no_device_api);
REFUSE(ncclLsaBarrierCreateRequirement,
       (struct nccl_team team, int nBarriers, void *outHandle, void *outReq), ncclInvalidUsage,
       no_device_api);
REFUSE(ncclGinBarrierCreateRequirement,
       (ncclComm_t comm, struct nccl_team team, int nBarriers, void *outHandle, void *outReq),
       ncclInvalidUsage, no_device_api);
REFUSE(ncclLLA2ACreateRequirement, (int nBlocks, int nSlots, void *outHandle, void *outReq),
       ncclInvalidUsage, no_device_api);
REFUSE(ncclGinInboxA2ACreateRequirement, (ncclComm_t comm, void *a, void *b, void *c),
       ncclInvalidUsage, no_device_api);
REFUSE(ncclGinOutboxCreateRequirement, (ncclComm_t comm, void *a, void *b, void *c),
       ncclInvalidUsage, no_device_api);

/* The device API's host queries return values, not results: an empty team, -1. */
#define REFUSE_TEAM(name)                                                                          \
    NCCL_API struct nccl_team name(ncclComm_t comm)                                                \
    {                                                                                              \
        (void)nccl_refuse(#name, ncclInvalidUsage, no_device_api);                                 \
        return (struct nccl_team){.nRanks = 0, .rank = -1, .stride = 0};                           \
    }                                                                                              \
    NCCL_ALIAS(name)
REFUSE_TEAM(ncclTeamWorld);
REFUSE_TEAM(ncclTeamLsa);
REFUSE_TEAM(ncclTeamRail);

NCCL_API int ncclTeamRankToWorld(ncclComm_t comm, struct nccl_team team, int rank)
{
    (void)nccl_refuse("ncclTeamRankToWorld", ncclInvalidUsage, no_device_api);
    return -1;
}
NCCL_ALIAS(ncclTeamRankToWorld);

NCCL_API int ncclTeamRankToLsa(ncclComm_t comm, struct nccl_team team, int rank)
{
    (void)nccl_refuse("ncclTeamRankToLsa", ncclInvalidUsage, no_device_api);
    return -1;
}
NCCL_ALIAS(ncclTeamRankToLsa);

NCCL_API int ncclLLA2ACalcSlots(int maxElts, int maxEltSize)
{
    (void)nccl_refuse("ncclLLA2ACalcSlots", ncclInvalidUsage, no_device_api);
    return -1;
}
NCCL_ALIAS(ncclLLA2ACalcSlots);
