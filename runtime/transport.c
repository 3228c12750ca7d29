/*
 * The transports built into this library, in order of preference, and the choice
 * between them.
 */
#include "transport.h"
#include "arcomm_build.h"
#include "shm/shm.h"
#if ARCOMM_HAVE_CUDA
#include "cuda/cuda_ops.h"
#endif
#if ARCOMM_HAVE_HEXAGON
#include "hexagon/hexagon.h"
#endif

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

const struct transport_ops *rt_transport_pick(const struct transport_probe *p, const char *name,
                                              char *why, size_t len)
{
    char reason[160] = "";
    bool named = name != NULL && name[0] != '\0';
    for (size_t i = 0; i < rt_transport_count; i++) {
        const struct transport_ops *t = rt_transports[i];
        if (named && strcmp(t->name, name) != 0)
            continue;
        if (t->probe(p, reason, sizeof(reason)))
            return t;
        if (named) {
            snprintf(why, len, "transport \"%s\" cannot serve this communicator: %s", name, reason);
            return NULL;
        }
    }
    if (named) {
        char list[128] = "";
        size_t used = 0;
        for (size_t i = 0; i < rt_transport_count && used < sizeof(list); i++)
            used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "",
                                     rt_transports[i]->name);
        snprintf(why, len, "no transport named \"%s\" in this build (built: %s)", name, list);
    } else {
        snprintf(why, len, "no transport in this build serves %s buffers%s%s",
                 p->device == COMM_DEVICE_CUDA      ? "CUDA"
                 : p->device == COMM_DEVICE_HEXAGON ? "Hexagon"
                                                    : "host",
                 reason[0] ? ": " : "", reason);
    }
    return NULL;
}
