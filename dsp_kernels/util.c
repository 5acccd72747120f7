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

/* Permutation controls for vdelta (stages highest first) and vrdelta (lowest first):
 * stage o of either sets byte k to byte k ^ o of the stage's input where bit o of ctrl[k]
 * is set. A control depends on the shape alone and routing one costs thousands of scalar
 * packets, so each is routed once per server (or skel) lifetime and kept under a nonzero
 * key: direct-mapped slots; ops run one at a time on one context (its scratch is not
 * shared either), so they need no lock. */
#define KEPT_CONTROLS 32
static HVX_Vector kept_control[KEPT_CONTROLS];
static uint32_t kept_key[KEPT_CONTROLS];   /* 0: empty */

static uint32_t control_slot(uint32_t key) { return (key * 2654435761u) >> 27; }   /* Knuth's multiplicative hash, 5 bits */

static int kept(uint8_t ctrl[128], uint32_t key)
{
    uint32_t slot = control_slot(key);
    if (kept_key[slot] != key) return 0;
    hvx_store_u(ctrl, kept_control[slot]);
    return 1;
}

/* Route byte pos[e] to dst[e] for e < count, each by the bits of (position ^ destination),
 * stage by stage, and keep the control. Conflict free when no two routes meet at a
 * position holding different bytes: monotone spreads and compactions (Hilewitz and Lee,
 * ASAP 2006), and copies of one byte within a group that the routes never leave. */
static void route(uint8_t ctrl[128], uint8_t *pos, const uint8_t *dst, int count, int high_first, uint32_t key)
{
    for (int i = 0; i < 128; i++) ctrl[i] = 0;
    for (int stage = 0; stage < 7; stage++) {
        int o = high_first ? 64 >> stage : 1 << stage;
        for (int e = 0; e < count; e++)
            if ((pos[e] ^ dst[e]) & o) {
                pos[e] ^= (uint8_t)o;
                ctrl[pos[e]] |= (uint8_t)o;
            }
    }
    uint32_t slot = control_slot(key);
    kept_control[slot] = hvx_load_u(ctrl);
    kept_key[slot] = key;
}

/* Byte q * from + b to q * to + b (b < k, q < groups): a spread (from < to) for vdelta, a
 * compaction (from > to) for vrdelta. Key: the four sizes (groups <= 128). */
void dspt_restride_control(uint8_t ctrl[128], int k, int from, int to, int groups)
{
    uint32_t key = (uint32_t)k | (uint32_t)from << 8 | (uint32_t)to << 16 | (uint32_t)groups << 24;
    if (kept(ctrl, key)) return;
    uint8_t pos[128], dst[128];
    int count = 0;
    for (int q = 0; q < groups; q++)
        for (int b = 0; b < k; b++) {
            pos[count] = (uint8_t)(q * from + b);
            dst[count++] = (uint8_t)(q * to + b);
        }
    route(ctrl, pos, dst, count, from < to, key);
}

/* Word `word` of every group of `words` words (a power of two) to all the group's words,
 * for vrdelta. Key: 255 in the top byte, which a restride's group count never reaches. */
void dspt_broadcast_control(uint8_t ctrl[128], int word, int words)
{
    uint32_t key = 0xFF000000u | (uint32_t)word << 8 | (uint32_t)words;
    if (kept(ctrl, key)) return;
    uint8_t pos[128], dst[128];
    for (int d = 0; d < 128; d++) {
        int group = d / (4 * words);
        pos[d] = (uint8_t)((group * words + word) * 4 + d % 4);
        dst[d] = (uint8_t)d;
    }
    route(ctrl, pos, dst, 128, 0, key);
}
