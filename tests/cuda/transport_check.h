/* SPDX-License-Identifier: MIT */
/*
 * The CUDA tests run on whichever CUDA transport ARCOMM_TRANSPORT names (unset: the one a
 * communicator picks, the host-staged "cuda"); ARCOMM_TRANSPORT=cuda-p2p runs them on the
 * peer-to-peer transport.  This checks that a communicator really is on the one named.
 */
#ifndef ARCOMM_TESTS_CUDA_TRANSPORT_CHECK_H
#define ARCOMM_TESTS_CUDA_TRANSPORT_CHECK_H

#include "arcomm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void transport_check(const comm_t *c, int rank)
{
    const char *want = getenv("ARCOMM_TRANSPORT");
    const char *got = comm_transport_name(c);
    if (want == NULL || want[0] == '\0')
        return;
    if (got == NULL || strcmp(got, want) != 0) {
        fprintf(stderr, "FAIL: rank %d: ARCOMM_TRANSPORT=%s, but the communicator is on %s\n", rank,
                want, got ? got : "(none)");
        exit(1);
    }
}

/* What a test's first lines say about the transport under test. */
static inline const char *transport_label(void)
{
    const char *t = getenv("ARCOMM_TRANSPORT");
    return t != NULL && t[0] != '\0' ? t : "auto";
}

#endif /* ARCOMM_TESTS_CUDA_TRANSPORT_CHECK_H */
