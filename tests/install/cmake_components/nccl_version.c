/* SPDX-License-Identifier: MIT */
/* Built on arcomm::nccl: nccl.h compiles (with the CUDA runtime's headers) and
 * ncclGetVersion links from arcomm's libnccl.so.2.  Prints "nccl CODE". */
#include <nccl.h>
#include <stdio.h>

int main(void)
{
    int version = 0;

    if (ncclGetVersion(&version) != ncclSuccess)
        return 1;
    printf("nccl %d\n", version);
    return 0;
}
