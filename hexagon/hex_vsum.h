/* SPDX-License-Identifier: MIT */
/*
 * Sums over HVX vectors (128 bytes: 32 f32 or 64 f16 lanes) held in VTCM: the
 * arithmetic of op_allreduce.  Every rank sums in the same order, so every rank gets
 * the same bits:
 *
 *   acc = add(in[0], in[1])           (the second rank's sum; in[0] alone for 1 rank)
 *   acc = add(acc, in[k]), k = 2..    (later ranks folded in, in rank order)
 *   acc = add(acc, addend)            (residual or row-broadcast bias, last)
 *   out = round(acc)                  (f16: accumulated in f32, rounded once)
 *
 * Two implementations with one interface: vsum_hvx.c (v68+ HVX float: qf32 adds, the
 * DSP build) and vsum_scalar.c (portable C: the host emulation, and real Hexagon code
 * on cores without HVX float, such as the v67 that qemu runs).  HVX qf32 arithmetic is
 * not IEEE rounding, so the DSP and the emulation may differ in the last bit; each is
 * bit-identical across ranks.
 *
 * out, in[k] and addend are 128-byte aligned; n_vec vectors each.  out may be in[k].
 */
#ifndef ARCOMM_HEX_VSUM_H
#define ARCOMM_HEX_VSUM_H

#include <stdint.h>

#define HEX_VEC_BYTES 128u

#if defined(__hexagon__) && defined(__HVX__) && __HVX_ARCH__ >= 68 && !defined(HEX_FORCE_SCALAR)
#define HEX_VSUM_HVX 1
#else
#define HEX_VSUM_HVX 0
#endif

void hex_vsum_f32(float *out, const float *const *in, uint32_t n_in, const float *addend,
                  uint32_t n_vec);
void hex_vsum_f16(uint16_t *out, const uint16_t *const *in, uint32_t n_in, const uint16_t *addend,
                  uint32_t n_vec);

/* "hvx-qf32" or "scalar": which implementation this build has. */
const char *hex_vsum_impl(void);

#endif /* ARCOMM_HEX_VSUM_H */
