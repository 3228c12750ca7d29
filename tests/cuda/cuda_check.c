/* SPDX-License-Identifier: MIT */
/* What every CUDA test program shares (cuda_check.h). */
#include "cuda_check.h"

#include <stdlib.h>

int g_fail;
int g_ndev;

void cuda_ok(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "FAIL: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}
