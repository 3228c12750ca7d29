/* SPDX-License-Identifier: MIT */
/* Configure-time probe: does this clang build HVX v69 float code for Hexagon? */
#include <hexagon_types.h>
#include <hvx_hexagon_protos.h>

HVX_Vector probe(HVX_Vector a, HVX_Vector b)
{
    return Q6_Vsf_equals_Vqf32(Q6_Vqf32_vadd_VsfVsf(a, b));
}
