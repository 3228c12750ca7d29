/* SPDX-License-Identifier: MIT */
/*
 * The backends built into this library, in order of preference (the one list: adding
 * a backend is its folder and one entry here), and the choice between them.
 */
#include "comm_internal.h"
#include "arcomm_build.h"
#include "backend.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

const struct backend_ops *const rt_backends[] = {
    &coll_host_backend,
#if ARCOMM_HAVE_CUDA
    &coll_cuda_backend, /* CUDA buffers; shm's probe refuses them */
    /* Not verified on two GPUs yet: after "cuda", so only ARCOMM_TRANSPORT=cuda-p2p picks it. */
    &coll_cuda_p2p_backend,
#endif
#if ARCOMM_HAVE_HEXAGON
    &coll_hexagon_backend,
#endif
};

const size_t rt_backend_count = sizeof(rt_backends) / sizeof(rt_backends[0]);

/* A device whose backend is not in this build says so: no probe could. */
static const struct {
    comm_device_t device;
    const char *why;
} rt_backends_missing[] = {
#if !ARCOMM_HAVE_CUDA
    {COMM_DEVICE_CUDA, "; CUDA is not built into this arcomm (rebuild with -Dcuda=enabled and nvcc "
                       "on PATH)"},
#endif
#if !ARCOMM_HAVE_HEXAGON
    {COMM_DEVICE_HEXAGON, "; Hexagon is not built into this arcomm"},
#endif
    {COMM_DEVICE_HOST, ""}, /* keeps the array non-empty; host is always built */
};

/* Appends "name: reason" to the list of every probe's refusal. */
static void add_reason(char *list, size_t len, const char *name, const char *reason)
{
    size_t used = strlen(list);
    if (used + 1 >= len)
        return;
    size_t n = strlen(name);
    bool named = strncmp(reason, name, n) == 0 && reason[n] == ' ';
    snprintf(list + used, len - used, "%s%s%s%s", used ? "; " : "", named ? "" : name,
             named ? "" : ": ", reason);
}

const struct backend_ops *rt_backend_pick(const struct transport_probe *p, const char *name,
                                          char *why, size_t len)
{
    char reason[160] = "", reasons[400] = "";
    bool named = name != NULL && name[0] != '\0';
    for (size_t i = 0; i < rt_backend_count; i++) {
        const struct backend_ops *t = rt_backends[i];
        if (named && strcmp(t->name, name) != 0)
            continue;
        reason[0] = '\0';
        if (t->probe(p, reason, sizeof(reason)))
            return t;
        if (named) {
            snprintf(why, len, "transport \"%s\" cannot serve this communicator: %s", name, reason);
            return NULL;
        }
        add_reason(reasons, sizeof(reasons), t->name, reason);
    }
    if (named) {
        char list[128] = "";
        size_t used = 0;
        for (size_t i = 0; i < rt_backend_count && used < sizeof(list); i++)
            used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "",
                                     rt_backends[i]->name);
        snprintf(why, len,
                 "no transport named \"%s\" in this build (built: %s); set ARCOMM_TRANSPORT or "
                 "the config's transport to one of them, or leave it empty",
                 name, list);
        return NULL;
    }
    const char *missing = "";
    for (size_t i = 0; i < sizeof(rt_backends_missing) / sizeof(rt_backends_missing[0]); i++)
        if (rt_backends_missing[i].device == p->device)
            missing = rt_backends_missing[i].why;
    snprintf(why, len, "no transport in this build serves %s buffers (%s)%s",
             rt_device_title(p->device), reasons, missing);
    return NULL;
}
