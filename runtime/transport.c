/* SPDX-License-Identifier: MIT */
/*
 * The transports built into this library, in order of preference, and the choice
 * between them.
 */
#include "comm_internal.h"
#include "arcomm_build.h"
#include "shm/shm.h"
#if ARCOMM_HAVE_CUDA
#include "cuda/cuda_ops.h"
#endif
#if ARCOMM_HAVE_HEXAGON
#include "hexagon/hexagon.h"
#endif

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

const struct transport_ops *const rt_transports[] = {
    &shm_transport_ops,
#if ARCOMM_HAVE_CUDA
    &cuda_transport_ops, /* CUDA buffers; shm's probe refuses them */
#endif
#if ARCOMM_HAVE_HEXAGON
    &hexagon_transport_ops,
#endif
};

const size_t rt_transport_count = sizeof(rt_transports) / sizeof(rt_transports[0]);

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

const struct transport_ops *rt_transport_pick(const struct transport_probe *p, const char *name,
                                              char *why, size_t len)
{
    char reason[160] = "", reasons[400] = "";
    bool named = name != NULL && name[0] != '\0';
    for (size_t i = 0; i < rt_transport_count; i++) {
        const struct transport_ops *t = rt_transports[i];
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
        for (size_t i = 0; i < rt_transport_count && used < sizeof(list); i++)
            used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "",
                                     rt_transports[i]->name);
        snprintf(why, len,
                 "no transport named \"%s\" in this build (built: %s); set ARCOMM_TRANSPORT or "
                 "the config's transport to one of them, or leave it empty",
                 name, list);
        return NULL;
    }
    /* A device whose transport is not in this build says so: no probe could. */
    const char *missing = "";
#if !ARCOMM_HAVE_CUDA
    if (p->device == COMM_DEVICE_CUDA)
        missing = "; CUDA is not built into this arcomm (rebuild with -Dcuda=enabled and nvcc "
                  "on PATH)";
#endif
#if !ARCOMM_HAVE_HEXAGON
    if (p->device == COMM_DEVICE_HEXAGON)
        missing = "; Hexagon is not built into this arcomm";
#endif
    snprintf(why, len, "no transport in this build serves %s buffers (%s)%s",
             rt_device_title(p->device), reasons, missing);
    return NULL;
}
