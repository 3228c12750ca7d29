/* SPDX-License-Identifier: MIT */
/*
 * HVX float vector sums for v68 and later (the DSP build): f32 lanes added as qf32,
 * f16 lanes widened to qf32 pairs (a multiply by 1.0, the HVX idiom), summed there and
 * narrowed once.  Compiled by CI for v69; the QEMU in Debian cannot run these
 * instructions, so their results are checked on hardware only.
 */
#include "hex_vsum.h"

#if HEX_VSUM_HVX

#include <hexagon_types.h>
#include <hvx_hexagon_protos.h>

void hex_vsum_f32(float *out, const float *const *in, uint32_t n_in, const float *addend,
                  uint32_t n_vec)
{
    const HVX_Vector zero = Q6_V_vzero();
    for (uint32_t v = 0; v < n_vec; v++) {
        HVX_Vector s0 = ((const HVX_Vector *)in[0])[v];
        /* qf32 needs an add to enter the format: adding +0 keeps a lone rank exact. */
        HVX_Vector acc = Q6_Vqf32_vadd_VsfVsf(s0, n_in > 1 ? ((const HVX_Vector *)in[1])[v] : zero);
        for (uint32_t k = 2; k < n_in; k++)
            acc = Q6_Vqf32_vadd_Vqf32Vsf(acc, ((const HVX_Vector *)in[k])[v]);
        if (addend != 0)
            acc = Q6_Vqf32_vadd_Vqf32Vsf(acc, ((const HVX_Vector *)addend)[v]);
        ((HVX_Vector *)out)[v] = Q6_Vsf_equals_Vqf32(acc);
    }
}

/* f16 lanes to a qf32 pair: hf * 1.0 in qf32 (lanes split even/odd as vmpy does;
 * Q6_Vhf_equals_Wqf32 puts them back in order). */
static inline HVX_VectorPair widen(HVX_Vector h, HVX_Vector one)
{
    return Q6_Wqf32_vmpy_VhfVhf(h, one);
}

void hex_vsum_f16(uint16_t *out, const uint16_t *const *in, uint32_t n_in, const uint16_t *addend,
                  uint32_t n_vec)
{
    const HVX_Vector one = Q6_Vh_vsplat_R(0x3c00); /* 1.0 in f16 */
    for (uint32_t v = 0; v < n_vec; v++) {
        HVX_VectorPair acc = widen(((const HVX_Vector *)in[0])[v], one);
        HVX_Vector lo = Q6_V_lo_W(acc), hi = Q6_V_hi_W(acc);
        for (uint32_t k = 1; k < n_in; k++) {
            HVX_VectorPair x = widen(((const HVX_Vector *)in[k])[v], one);
            lo = Q6_Vqf32_vadd_Vqf32Vqf32(lo, Q6_V_lo_W(x));
            hi = Q6_Vqf32_vadd_Vqf32Vqf32(hi, Q6_V_hi_W(x));
        }
        if (addend != 0) {
            HVX_VectorPair x = widen(((const HVX_Vector *)addend)[v], one);
            lo = Q6_Vqf32_vadd_Vqf32Vqf32(lo, Q6_V_lo_W(x));
            hi = Q6_Vqf32_vadd_Vqf32Vqf32(hi, Q6_V_hi_W(x));
        }
        ((HVX_Vector *)out)[v] = Q6_Vhf_equals_Wqf32(Q6_W_vcombine_VV(hi, lo));
    }
}

const char *hex_vsum_impl(void)
{
    return "hvx-qf32";
}

#endif
