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
