/* hvx-utils.h: small HVX helpers (128-byte vectors) shared by the kernel files. */
#ifndef DSPTRAIN_HVX_UTILS_H
#define DSPTRAIN_HVX_UTILS_H

#include <hexagon_types.h>
#include <hvx_hexagon_protos.h>
#include <stdint.h>

#define HVX_BYTES 128
#define HVX_WORDS 32

typedef HVX_Vector hvx_uvec __attribute__((aligned(1)));  /* unaligned vector access */

static inline HVX_Vector hvx_load_u(const void *p) { return *(const hvx_uvec *)p; }
static inline void hvx_store_u(void *p, HVX_Vector v) { *(hvx_uvec *)p = v; }

/* Load `bytes` (1..128) bytes from p into the low lanes (lanes above: whatever the
 * aligned block holds). Only the aligned blocks holding those bytes are read, so it
 * never touches a page the caller does not own. */
static inline HVX_Vector hvx_load_bytes(const void *p, uint32_t bytes)
{
    uint32_t off = (uint32_t)(uintptr_t)p & 127u;
    const HVX_Vector *block = (const HVX_Vector *)((uintptr_t)p - off);
    HVX_Vector lo = block[0];
    HVX_Vector hi = off + bytes > HVX_BYTES ? block[1] : lo;
    return Q6_V_valign_VVR(hi, lo, off);
}

/* Store the first `bytes` (1..128) lanes of v at p with predicated aligned stores
 * (one or two), so no byte outside [p, p + bytes) is written. */
static inline void hvx_store_bytes(void *p, HVX_Vector v, uint32_t bytes)
{
    uint32_t off = (uint32_t)(uintptr_t)p & 127u, end = off + bytes;
    HVX_Vector *block = (HVX_Vector *)((uintptr_t)p - off);
    HVX_Vector r = Q6_V_vlalign_VVR(v, v, off);       /* lane i of v -> lane off + i */
    HVX_VectorPred before = Q6_Q_vsetq_R(off);         /* lanes < off (none when off = 0) */
    if (end <= HVX_BYTES) {
        HVX_VectorPred upto = Q6_Q_vsetq2_R(end);      /* lanes < end, end in 1..128 */
        Q6_vmem_QRIV(Q6_Q_and_QQn(upto, before), block, r);
        return;
    }
    Q6_vmem_QnRIV(before, block, r);
    Q6_vmem_QRIV(Q6_Q_vsetq_R(end - HVX_BYTES), block + 1, r);
}

/* memcpy with vector moves; the tail is one predicated store, not a byte loop. */
static inline void hvx_copy(void *dst, const void *src, uint32_t bytes)
{
    uint8_t *d = (uint8_t *)dst;
    const uint8_t *s = (const uint8_t *)src;
    uint32_t i = 0;
    for (; i + HVX_BYTES <= bytes; i += HVX_BYTES) hvx_store_u(d + i, hvx_load_u(s + i));
    if (i < bytes) hvx_store_bytes(d + i, hvx_load_bytes(s + i, bytes - i), bytes - i);
}

static inline void hvx_zero(void *dst, uint32_t bytes)
{
    uint8_t *d = (uint8_t *)dst;
    uint32_t i = 0;
    for (; i + HVX_BYTES <= bytes; i += HVX_BYTES) hvx_store_u(d + i, Q6_V_vzero());
    if (i < bytes) hvx_store_bytes(d + i, Q6_V_vzero(), bytes - i);
}

/* Transpose 32 vectors of 32 words in place: v[r] word c <-> v[c] word r. Five
 * butterfly stages; vshuff(hi, lo, 4w) swaps word c+w of lo with word c of hi (c with
 * bit w clear), i.e. elements (r, c+w) and (r+w, c). */
static inline void hvx_transpose32w(HVX_Vector v[32])
{
    for (int w = 1; w < 32; w <<= 1)
        for (int r = 0; r < 32; r++) {
            if (r & w) continue;
            HVX_VectorPair p = Q6_W_vshuff_VVR(v[r + w], v[r], 4 * w);
            v[r] = Q6_V_lo_W(p);
            v[r + w] = Q6_V_hi_W(p);
        }
}

/* Lane l (of 32) gets bytes r0[l], r1[l], r2[l], r3[l]: four rows of 32 bytes
 * interleaved into the 4-byte groups vrmpy reduces over. */
static inline HVX_Vector hvx_interleave4b(HVX_Vector r0, HVX_Vector r1, HVX_Vector r2, HVX_Vector r3)
{
    HVX_Vector p01 = Q6_V_lo_W(Q6_W_vshuff_VVR(r1, r0, -1));
    HVX_Vector p23 = Q6_V_lo_W(Q6_W_vshuff_VVR(r3, r2, -1));
    return Q6_V_lo_W(Q6_W_vshuff_VVR(p23, p01, -2));
}

/* Eight vectors' lane sums: the 32 lanes of p_j summed into lane 4j: three
 * vshuff + add stages pair halves of two rows' vectors (row r keeps block r), then two
 * rotate-adds sum each 4-lane block. */
static inline HVX_Vector hvx_reduce8(HVX_Vector p0, HVX_Vector p1, HVX_Vector p2, HVX_Vector p3,
                                 HVX_Vector p4, HVX_Vector p5, HVX_Vector p6, HVX_Vector p7)
{
#define FOLD(x, y, bytes) \
    ({ HVX_VectorPair pr_ = Q6_W_vshuff_VVR(y, x, bytes); Q6_Vw_vadd_VwVw(Q6_V_lo_W(pr_), Q6_V_hi_W(pr_)); })
    HVX_Vector q0 = FOLD(p0, p4, 64), q1 = FOLD(p1, p5, 64), q2 = FOLD(p2, p6, 64), q3 = FOLD(p3, p7, 64);
    HVX_Vector r0 = FOLD(q0, q2, 32), r1 = FOLD(q1, q3, 32);
    HVX_Vector v = FOLD(r0, r1, 16);
#undef FOLD
    v = Q6_Vw_vadd_VwVw(v, Q6_V_vror_VR(v, 4));
    return Q6_Vw_vadd_VwVw(v, Q6_V_vror_VR(v, 8));
}

#endif
