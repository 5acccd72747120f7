/* util.c: the libc functions clang may emit calls to in a freestanding build, and the
 * kept permutation controls of the lane kernels. */
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

/* The vdelta / vrdelta control moving byte q * from + b to q * to + b (b < k, q < groups):
 * each byte is routed by the bits of (position ^ destination); a spread (from < to) runs
 * vdelta's stages, highest first, a compaction (from > to) vrdelta's, lowest first; both
 * are monotone, so they route without conflict (Hilewitz and Lee, ASAP 2006). A control
 * depends on the shape alone and routing one costs thousands of scalar packets, so each
 * is routed once per server (or skel) lifetime and kept: direct-mapped slots; ops run one
 * at a time on one context (its scratch is not shared either), so they need no lock. */
#define KEPT_CONTROLS 32
static HVX_Vector kept_control[KEPT_CONTROLS];
static uint32_t kept_key[KEPT_CONTROLS];   /* 0: empty (keys are never 0: k >= 1) */

void dspt_restride_control(uint8_t ctrl[128], int k, int from, int to, int groups)
{
    uint32_t key = (uint32_t)k | (uint32_t)from << 8 | (uint32_t)to << 16 | (uint32_t)groups << 24;
    uint32_t slot = (key * 2654435761u) >> 27;   /* Knuth's multiplicative hash, 5 bits */
    if (kept_key[slot] == key) {
        hvx_store_u(ctrl, kept_control[slot]);
        return;
    }
    uint8_t pos[128], dst[128];
    int count = 0;
    for (int q = 0; q < groups; q++)
        for (int b = 0; b < k; b++) {
            pos[count] = (uint8_t)(q * from + b);
            dst[count++] = (uint8_t)(q * to + b);
        }
    for (int i = 0; i < 128; i++) ctrl[i] = 0;
    for (int stage = 0; stage < 7; stage++) {
        int o = from < to ? 64 >> stage : 1 << stage;
        for (int e = 0; e < count; e++)
            if ((pos[e] ^ dst[e]) & o) {
                pos[e] ^= (uint8_t)o;
                ctrl[pos[e]] |= (uint8_t)o;
            }
    }
    kept_control[slot] = hvx_load_u(ctrl);
    kept_key[slot] = key;
}
