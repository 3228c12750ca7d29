/* SPDX-License-Identifier: MIT */
/*
 * Portable C vector sums: the host emulation's stand-in for HVX, and the sum path of
 * Hexagon cores without HVX float (v67 under qemu).  Lane by lane, in the order
 * hex_vsum.h fixes; compilers vectorise the inner loops on the host.
 */
#include "hex_vsum.h"
#include "hex_f16.h"

#if !HEX_VSUM_HVX

#define F32_LANES (HEX_VEC_BYTES / 4u)
#define F16_LANES (HEX_VEC_BYTES / 2u)

void hex_vsum_f32(float *out, const float *const *in, uint32_t n_in, const float *addend,
                  uint32_t n_vec)
{
    uint32_t n = n_vec * F32_LANES;
    for (uint32_t i = 0; i < n; i++) {
        float acc = n_in > 1 ? in[0][i] + in[1][i] : in[0][i];
        for (uint32_t k = 2; k < n_in; k++)
            acc += in[k][i];
        if (addend != 0)
            acc += addend[i];
        out[i] = acc;
    }
}

void hex_vsum_f16(uint16_t *out, const uint16_t *const *in, uint32_t n_in, const uint16_t *addend,
                  uint32_t n_vec)
{
    uint32_t n = n_vec * F16_LANES;
    for (uint32_t i = 0; i < n; i++) {
        float acc = hex_f16_to_f32(in[0][i]);
        if (n_in > 1)
            acc = acc + hex_f16_to_f32(in[1][i]);
        for (uint32_t k = 2; k < n_in; k++)
            acc += hex_f16_to_f32(in[k][i]);
        if (addend != 0)
            acc += hex_f16_to_f32(addend[i]);
        out[i] = hex_f32_to_f16(acc);
    }
}

const char *hex_vsum_impl(void)
{
    return "scalar";
}

#endif
