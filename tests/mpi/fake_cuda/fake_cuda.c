/* SPDX-License-Identifier: MIT */
/* The one piece of state of the fake CUDA runtime (cuda_runtime_api.h beside it): whether
 * the test "captures" its stream, shared by the test and the library built against it. */
#include "cuda_runtime_api.h"

static int capturing;

__attribute__((visibility("default"))) void fake_cuda_set_capturing(int on)
{
    capturing = on;
}

__attribute__((visibility("default"))) int fake_cuda_get_capturing(void)
{
    return capturing;
}
