/* SPDX-License-Identifier: MIT */
/*
 * The little a freestanding Hexagon program needs under qemu-hexagon (linux-user):
 * _start, write/exit/clock_gettime through trap0(#1) with the syscall number in r6,
 * memcpy/memset/memmove, and the integer division helpers the compiler calls (the
 * Hexagon ISA has no divide; clang expects compiler-rt's __hexagon_* routines, which
 * Debian does not ship for this target).  Also the platform hooks of hex_platform.h.
 */
#include "crt.h"
#include "hex_platform.h"

#define SYS_WRITE         64
#define SYS_EXIT          93
#define SYS_CLOCK_GETTIME 113 /* 32-bit time_t on this ABI */
#define CLOCK_MONOTONIC   1

static long sys3(long nr, long a, long b, long c)
{
    register long r0 __asm__("r0") = a;
    register long r1 __asm__("r1") = b;
    register long r2 __asm__("r2") = c;
    register long r6 __asm__("r6") = nr;
    __asm__ volatile("trap0(#1)" : "+r"(r0) : "r"(r1), "r"(r2), "r"(r6) : "memory");
    return r0;
}

void crt_write(const char *s, unsigned len)
{
    sys3(SYS_WRITE, 1, (long)s, (long)len);
}

void crt_exit(int code)
{
    sys3(SYS_EXIT, code, 0, 0);
    for (;;) {
    }
}

void crt_puts(const char *s)
{
    unsigned n = 0;
    while (s[n])
        n++;
    crt_write(s, n);
}

void crt_put_u32(uint32_t v)
{
    char buf[12];
    int i = 11;
    buf[i] = 0;
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v && i > 0);
    crt_puts(buf + i);
}

void crt_put_i32(int32_t v)
{
    if (v < 0) {
        crt_puts("-");
        crt_put_u32((uint32_t)(-(int64_t)v));
    } else {
        crt_put_u32((uint32_t)v);
    }
}

void crt_put_hex(uint32_t v)
{
    char buf[11] = "0x";
    for (int i = 0; i < 8; i++) {
        uint32_t d = (v >> (28 - 4 * i)) & 15u;
        buf[2 + i] = (char)(d < 10 ? '0' + d : 'a' + d - 10);
    }
    buf[10] = 0;
    crt_puts(buf);
}

uint64_t hex_now_us(void)
{
    int32_t ts[2] = {0, 0};
    sys3(SYS_CLOCK_GETTIME, CLOCK_MONOTONIC, (long)ts, 0);
    return (uint64_t)(uint32_t)ts[0] * 1000000u + (uint32_t)ts[1] / 1000u;
}

void hex_relax(uint32_t iter)
{
    (void)iter; /* one thread: nothing else could run meanwhile */
}

int main(void);

void _start(void)
{
    crt_exit(main());
}

/* The compiler turns copy loops into calls to these: they must not call themselves. */
void *memcpy(void *d, const void *s, unsigned n)
{
    unsigned char *dp = d;
    const unsigned char *sp = s;
    if ((((uintptr_t)dp | (uintptr_t)sp | n) & 3u) == 0) {
        uint32_t *dw = d;
        const uint32_t *sw = s;
        for (unsigned i = 0; i < n / 4; i++)
            ((volatile uint32_t *)dw)[i] = sw[i];
        return d;
    }
    for (unsigned i = 0; i < n; i++)
        ((volatile unsigned char *)dp)[i] = sp[i];
    return d;
}

void *memmove(void *d, const void *s, unsigned n)
{
    unsigned char *dp = d;
    const unsigned char *sp = s;
    if (dp < sp) {
        for (unsigned i = 0; i < n; i++)
            ((volatile unsigned char *)dp)[i] = sp[i];
    } else {
        for (unsigned i = n; i > 0; i--)
            ((volatile unsigned char *)dp)[i - 1] = sp[i - 1];
    }
    return d;
}

void *memset(void *d, int c, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        ((volatile unsigned char *)d)[i] = (unsigned char)c;
    return d;
}

/* Shift-and-subtract division; b == 0 gives all ones, as no trap exists to raise. */
static uint64_t udivmod64(uint64_t a, uint64_t b, uint64_t *rem)
{
    if (b == 0) {
        *rem = a;
        return ~0ull;
    }
    uint64_t q = 0, r = 0;
    for (int i = 63; i >= 0; i--) {
        r = (r << 1) | ((a >> i) & 1u);
        if (r >= b) {
            r -= b;
            q |= 1ull << i;
        }
    }
    *rem = r;
    return q;
}

static uint32_t udivmod32(uint32_t a, uint32_t b, uint32_t *rem)
{
    if (b == 0) {
        *rem = a;
        return ~0u;
    }
    uint32_t q = 0, r = 0;
    for (int i = 31; i >= 0; i--) {
        r = (r << 1) | ((a >> i) & 1u);
        if (r >= b) {
            r -= b;
            q |= 1u << i;
        }
    }
    *rem = r;
    return q;
}

uint32_t __hexagon_udivsi3(uint32_t a, uint32_t b)
{
    uint32_t r;
    return udivmod32(a, b, &r);
}

uint32_t __hexagon_umodsi3(uint32_t a, uint32_t b)
{
    uint32_t r;
    udivmod32(a, b, &r);
    return r;
}

int32_t __hexagon_divsi3(int32_t a, int32_t b)
{
    uint32_t r;
    uint32_t ua = a < 0 ? 0u - (uint32_t)a : (uint32_t)a;
    uint32_t ub = b < 0 ? 0u - (uint32_t)b : (uint32_t)b;
    uint32_t q = udivmod32(ua, ub, &r);
    return (a < 0) != (b < 0) ? (int32_t)(0u - q) : (int32_t)q;
}

int32_t __hexagon_modsi3(int32_t a, int32_t b)
{
    uint32_t r;
    uint32_t ua = a < 0 ? 0u - (uint32_t)a : (uint32_t)a;
    uint32_t ub = b < 0 ? 0u - (uint32_t)b : (uint32_t)b;
    udivmod32(ua, ub, &r);
    return a < 0 ? (int32_t)(0u - r) : (int32_t)r;
}

uint64_t __hexagon_udivdi3(uint64_t a, uint64_t b)
{
    uint64_t r;
    return udivmod64(a, b, &r);
}

uint64_t __hexagon_umoddi3(uint64_t a, uint64_t b)
{
    uint64_t r;
    udivmod64(a, b, &r);
    return r;
}

int64_t __hexagon_divdi3(int64_t a, int64_t b)
{
    uint64_t r;
    uint64_t ua = a < 0 ? 0ull - (uint64_t)a : (uint64_t)a;
    uint64_t ub = b < 0 ? 0ull - (uint64_t)b : (uint64_t)b;
    uint64_t q = udivmod64(ua, ub, &r);
    return (a < 0) != (b < 0) ? (int64_t)(0ull - q) : (int64_t)q;
}

int64_t __hexagon_moddi3(int64_t a, int64_t b)
{
    uint64_t r;
    uint64_t ua = a < 0 ? 0ull - (uint64_t)a : (uint64_t)a;
    uint64_t ub = b < 0 ? 0ull - (uint64_t)b : (uint64_t)b;
    udivmod64(ua, ub, &r);
    return a < 0 ? (int64_t)(0ull - r) : (int64_t)r;
}

/* Called by clang for struct copies it knows are 8-byte aligned multiples of 8. */
void *__hexagon_memcpy_likely_aligned_min32bytes_mult8bytes(void *d, const void *s, unsigned n)
{
    return memcpy(d, s, n);
}

/*
 * The float helpers the wire codecs' scalar code (wire_scalar.h) calls: rintf and the
 * f32 division, correctly rounded (to nearest even) as IEEE and the host have them, so
 * that the driver's encodings are the host's bytes.  Integer arithmetic only.
 */
static uint32_t f_bits(float f)
{
    uint32_t u;
    __builtin_memcpy(&u, &f, 4);
    return u;
}

static float f_of(uint32_t u)
{
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}

float rintf(float f)
{
    uint32_t u = f_bits(f), sign = u & 0x80000000u;
    uint32_t e = (u >> 23) & 0xffu;
    if (e >= 150) /* an integer already, inf or NaN */
        return f;
    if (e < 126) /* |f| < 0.5 */
        return f_of(sign);
    uint32_t sh = 150 - e; /* fraction bits: 1..24 */
    uint32_t m = (u & 0x7fffffu) | 0x800000u;
    uint32_t ip = m >> sh, frac = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);
    if (frac > half || (frac == half && (ip & 1u)))
        ip++;
    return f_of(sign | f_bits((float)ip));
}

float __hexagon_divsf3(float a, float b)
{
    uint32_t ua = f_bits(a), ub = f_bits(b);
    uint32_t sign = (ua ^ ub) & 0x80000000u;
    int32_t ea = (int32_t)((ua >> 23) & 0xffu), eb = (int32_t)((ub >> 23) & 0xffu);
    uint32_t ma = ua & 0x7fffffu, mb = ub & 0x7fffffu;
    if (ea == 255 || eb == 255) {
        if ((ea == 255 && ma) || (eb == 255 && mb) || (ea == 255 && eb == 255))
            return f_of(0x7fc00000u); /* NaN in, or inf / inf */
        return f_of(ea == 255 ? sign | 0x7f800000u : sign);
    }
    if (eb == 0 && mb == 0) /* x / 0 */
        return f_of(ea == 0 && ma == 0 ? 0x7fc00000u : sign | 0x7f800000u);
    if (ea == 0 && ma == 0)
        return f_of(sign);
    /* Significands in [2^23, 2^24), subnormals normalised. */
    if (ea == 0) {
        ea = 1;
        while (!(ma & 0x800000u)) {
            ma <<= 1;
            ea--;
        }
    } else {
        ma |= 0x800000u;
    }
    if (eb == 0) {
        eb = 1;
        while (!(mb & 0x800000u)) {
            mb <<= 1;
            eb--;
        }
    } else {
        mb |= 0x800000u;
    }
    /* q = ma 2^40 / mb in [2^39, 2^41), its remainder the sticky bit. */
    uint64_t rem;
    uint64_t q = udivmod64((uint64_t)ma << 40, mb, &rem);
    int32_t lead = q >= (1ull << 40) ? 40 : 39;
    int32_t exp = ea - eb + (lead - 40) + 127;
    int32_t sh = lead - 23;
    if (exp <= 0)
        sh += 1 - exp; /* subnormal result */
    if (sh > 62)
        return f_of(sign); /* below half the smallest subnormal */
    uint64_t kept = q >> sh, rest = q & ((1ull << sh) - 1u), half = 1ull << (sh - 1);
    if (rest > half || (rest == half && (rem != 0 || (kept & 1u))))
        kept++;
    uint32_t bits = exp <= 0 ? (uint32_t)kept : ((uint32_t)exp << 23) + (uint32_t)kept - 0x800000u;
    if (exp >= 255 || bits >= 0x7f800000u)
        bits = 0x7f800000u; /* overflow */
    return f_of(sign | bits);
}
