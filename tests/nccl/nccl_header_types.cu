/* SPDX-License-Identifier: MIT */
/*
 * Programs written for NCCL use the half-precision types through nccl.h alone, as
 * nccl-tests does (its common.cu declares `half` and converts with __float2bfloat16
 * without including cuda_fp16.h or cuda_bf16.h itself): arcomm's nccl.h must bring them as
 * NCCL's does.  Host code only, so it runs without a GPU: every float16 and bfloat16
 * value of a range converts both ways and back to the same bits.
 */
#include "nccl.h"

#include <stdio.h>
#include <string.h>

int main(void)
{
    int wrong = 0;
    for (unsigned u = 0; u < 65536; u++) {
        unsigned short bits = (unsigned short)u;
        half h; /* cuda_fp16.h's name, as nccl-tests spells it */
        nv_bfloat16 b;
        memcpy((void *)&h, &bits, sizeof(h)); /* the bits, not a value: no constructor */
        memcpy((void *)&b, &bits, sizeof(b));
        float hf = __half2float(h), bf = __bfloat162float(b);
        if (hf != hf || bf != bf)
            continue; /* NaNs need not keep their payload */
        half h2 = __float2half(hf);
        nv_bfloat16 b2 = __float2bfloat16(bf);
        unsigned short hb, bb;
        memcpy(&hb, &h2, sizeof(hb));
        memcpy(&bb, &b2, sizeof(bb));
        if (hb != bits || bb != bits) {
            if (wrong++ < 5)
                printf("bits %#06x: half %#06x, bfloat16 %#06x after a round trip\n", u, hb, bb);
        }
    }
    printf("%s: %d of 65536 patterns changed; ncclBfloat16 = %d, ncclFloat16 = %d\n",
           wrong ? "FAIL" : "ok", wrong, (int)ncclBfloat16, (int)ncclFloat16);
    return wrong != 0;
}
