/* util.c: the libc functions clang may emit calls to in a freestanding build (the
 * Hexagon SDK's toolchain brings its own: `make device` leaves this file out). */
#include "hvx-utils.h"
#include "kernels.h"

/* Eight bytes a store where both ends allow it (the compiler's calls are mostly structs
 * being zeroed or copied: a kernel's job of per-thread pointers is a few hundred bytes). */
void *memcpy(void *dst, const void *src, size_t n)
{
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t i = 0;
    if ((((uintptr_t)d | (uintptr_t)s) & 7) == 0)
        for (; i + 8 <= n; i += 8) *(uint64_t *)(d + i) = *(const uint64_t *)(s + i);
    for (; i < n; i++) d[i] = s[i];
    return dst;
}

void *memset(void *dst, int v, size_t n)
{
    uint8_t *d = dst;
    size_t i = 0;
    if (((uintptr_t)d & 7) == 0) {
        uint64_t word = 0x0101010101010101ull * (uint8_t)v;
        for (; i + 8 <= n; i += 8) *(uint64_t *)(d + i) = word;
    }
    for (; i < n; i++) d[i] = (uint8_t)v;
    return dst;
}

/* Hexagon has no divide instruction; these are the compiler's runtime calls
 * (compiler-rt's are not installed with clang-16). Restoring shift-subtract over the
 * quotient's bits only (count leading zeros, cl0): a kernel's divisions have small
 * quotients (rows per thread, pixels per row), so a division takes a few steps, not 32. */
unsigned int __hexagon_udivsi3(unsigned int n, unsigned int d);
unsigned int __hexagon_umodsi3(unsigned int n, unsigned int d);
int __hexagon_divsi3(int n, int d);
int __hexagon_modsi3(int n, int d);

static unsigned int udivmod(unsigned int n, unsigned int d, unsigned int *rem)
{
    if (d == 0) { *rem = n; return 0xFFFFFFFFu; }
    if (n < d) { *rem = n; return 0; }
    int top = __builtin_clz(d) - __builtin_clz(n);   /* d << top <= n < d << (top + 1) */
    unsigned int q = 0;
    for (int i = top; i >= 0; i--)
        if (n >= d << i) { n -= d << i; q |= 1u << i; }
    *rem = n;
    return q;
}

unsigned int __hexagon_udivsi3(unsigned int n, unsigned int d) { unsigned int r; return udivmod(n, d, &r); }
unsigned int __hexagon_umodsi3(unsigned int n, unsigned int d) { unsigned int r; udivmod(n, d, &r); return r; }

int __hexagon_divsi3(int n, int d)
{
    unsigned int r, q = udivmod(n < 0 ? 0u - (unsigned)n : (unsigned)n, d < 0 ? 0u - (unsigned)d : (unsigned)d, &r);
    return (n < 0) != (d < 0) ? -(int)q : (int)q;
}

int __hexagon_modsi3(int n, int d)
{
    unsigned int r;
    udivmod(n < 0 ? 0u - (unsigned)n : (unsigned)n, d < 0 ? 0u - (unsigned)d : (unsigned)d, &r);
    return n < 0 ? -(int)r : (int)r;
}
