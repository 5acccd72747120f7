/* gemm.c: int8 GEMM c = a @ b.T on HVX, the core every product op reduces to.
 *
 * vrmpy(Vu.b, Vv.b) multiplies 4 signed bytes per 32-bit lane and sums them, so a
 * vector holding 4 reduction steps of 32 output columns ("packed b": block of 32
 * columns x 4 k) times a splat of 4 bytes of one row of `a` adds 128 MACs to 32
 * accumulators. This is the usual HVX int8 matmul layout (as in Qualcomm's hexagon
 * NN libraries, XNNPACK's Hexagon path and ggml-hexagon); the code here is ours.
 * Register tile: 4 rows x 2 column blocks = 8 accumulators, each packed vector
 * reused by 4 rows, each splat by 2 vectors.
 */
#include "hvx-utils.h"
#include "kernels.h"

uint32_t dspt_packed_b_bytes(int n, int k)
{
    return (uint32_t)((n + 31) / 32) * (uint32_t)((k + 3) / 4) * HVX_BYTES;
}

/* Pack element (i, kk) = src[i*sn + koff[kk]] (koff NULL: kk) of an n x k operand
 * into [n/32 blocks][k/4][32 lanes][4 bytes], zero-padded in both dimensions. */
void dspt_pack_b(int8_t *bp, const int8_t *src, int n, int k, int sn, const int32_t *koff)
{
    int k4 = (k + 3) / 4, nblocks = (n + 31) / 32;
    hvx_zero(bp, dspt_packed_b_bytes(n, k));
    int words = !koff && (k % 4) == 0 && (sn % 4) == 0 && ((uintptr_t)src % 4) == 0;
    for (int nb = 0; nb < nblocks; nb++) {
        int lanes = n - nb * 32 < 32 ? n - nb * 32 : 32;
        for (int l = 0; l < lanes; l++) {
            const int8_t *row = src + (nb * 32 + l) * sn;
            int8_t *dst = bp + ((nb * k4) * 32 + l) * 4;
            if (words) {  /* contiguous rows: move whole words */
                const int32_t *r32 = (const int32_t *)row;
                for (int q = 0; q < k4; q++) ((int32_t *)dst)[q * 32] = r32[q];
                continue;
            }
            for (int kk = 0; kk < k; kk++)
                dst[(kk >> 2) * 128 + (kk & 3)] = row[koff ? koff[kk] : kk];
        }
    }
}

/* Write (or add) the first `cols` lanes of an accumulator vector to c. */
static inline void store_acc(int32_t *c, HVX_Vector v, int cols, int accumulate)
{
    if (cols == 32) {
        if (accumulate) v = Q6_Vw_vadd_VwVw(v, hvx_load_u(c));
        hvx_store_u(c, v);
        return;
    }
    HVX_Vector tmp = v;
    const int32_t *s = (const int32_t *)&tmp;
    for (int i = 0; i < cols; i++) c[i] = accumulate ? c[i] + s[i] : s[i];
}

/* Rows [row, row+4) x column blocks nb (and nb+1 when two). */
static inline void tile4(int32_t *c, int ldc, const int8_t *a, int lda, const HVX_Vector *b0,
                         const HVX_Vector *b1, int k4, int cols0, int cols1, int accumulate)
{
    const int32_t *a0 = (const int32_t *)a, *a1 = (const int32_t *)(a + lda);
    const int32_t *a2 = (const int32_t *)(a + 2 * lda), *a3 = (const int32_t *)(a + 3 * lda);
    HVX_Vector c00 = Q6_V_vzero(), c10 = c00, c20 = c00, c30 = c00;
    HVX_Vector c01 = c00, c11 = c00, c21 = c00, c31 = c00;
    if (b1) {
        for (int q = 0; q < k4; q++) {
            HVX_Vector v0 = b0[q], v1 = b1[q];
            HVX_Vector s0 = Q6_V_vsplat_R(a0[q]), s1 = Q6_V_vsplat_R(a1[q]);
            HVX_Vector s2 = Q6_V_vsplat_R(a2[q]), s3 = Q6_V_vsplat_R(a3[q]);
            c00 = Q6_Vw_vrmpyacc_VwVbVb(c00, v0, s0); c01 = Q6_Vw_vrmpyacc_VwVbVb(c01, v1, s0);
            c10 = Q6_Vw_vrmpyacc_VwVbVb(c10, v0, s1); c11 = Q6_Vw_vrmpyacc_VwVbVb(c11, v1, s1);
            c20 = Q6_Vw_vrmpyacc_VwVbVb(c20, v0, s2); c21 = Q6_Vw_vrmpyacc_VwVbVb(c21, v1, s2);
            c30 = Q6_Vw_vrmpyacc_VwVbVb(c30, v0, s3); c31 = Q6_Vw_vrmpyacc_VwVbVb(c31, v1, s3);
        }
        store_acc(c + 32, c01, cols1, accumulate);
        store_acc(c + ldc + 32, c11, cols1, accumulate);
        store_acc(c + 2 * ldc + 32, c21, cols1, accumulate);
        store_acc(c + 3 * ldc + 32, c31, cols1, accumulate);
    } else {
        for (int q = 0; q < k4; q++) {
            HVX_Vector v0 = b0[q];
            c00 = Q6_Vw_vrmpyacc_VwVbVb(c00, v0, Q6_V_vsplat_R(a0[q]));
            c10 = Q6_Vw_vrmpyacc_VwVbVb(c10, v0, Q6_V_vsplat_R(a1[q]));
            c20 = Q6_Vw_vrmpyacc_VwVbVb(c20, v0, Q6_V_vsplat_R(a2[q]));
            c30 = Q6_Vw_vrmpyacc_VwVbVb(c30, v0, Q6_V_vsplat_R(a3[q]));
        }
    }
    store_acc(c, c00, cols0, accumulate);
    store_acc(c + ldc, c10, cols0, accumulate);
    store_acc(c + 2 * ldc, c20, cols0, accumulate);
    store_acc(c + 3 * ldc, c30, cols0, accumulate);
}

/* One row (the m % 4 tail) x one column block. */
static inline void tile1(int32_t *c, const int8_t *a, const HVX_Vector *b0, int k4, int cols,
                         int accumulate)
{
    const int32_t *a0 = (const int32_t *)a;
    HVX_Vector acc = Q6_V_vzero();
    for (int q = 0; q < k4; q++) acc = Q6_Vw_vrmpyacc_VwVbVb(acc, b0[q], Q6_V_vsplat_R(a0[q]));
    store_acc(c, acc, cols, accumulate);
}

void dspt_gemm_core(int32_t *c, int ldc, const int8_t *a, int lda, const int8_t *bp,
                    int m, int n, int k, int accumulate)
{
    int k4 = (k + 3) / 4, nblocks = (n + 31) / 32;
    const HVX_Vector *bv = (const HVX_Vector *)bp;
    for (int nb = 0; nb < nblocks; nb += 2) {
        int two = nb + 1 < nblocks;
        int cols0 = n - nb * 32 < 32 ? n - nb * 32 : 32;
        int cols1 = two ? (n - (nb + 1) * 32 < 32 ? n - (nb + 1) * 32 : 32) : 0;
        const HVX_Vector *b0 = bv + nb * k4, *b1 = two ? b0 + k4 : 0;
        int row = 0;
        for (; row + 4 <= m; row += 4)
            tile4(c + row * ldc + nb * 32, ldc, a + row * lda, lda, b0, b1, k4, cols0, cols1,
                  accumulate);
        for (; row < m; row++) {
            tile1(c + row * ldc + nb * 32, a + row * lda, b0, k4, cols0, accumulate);
            if (two) tile1(c + row * ldc + nb * 32 + 32, a + row * lda, b1, k4, cols1, accumulate);
        }
    }
}

/* Rows of `a` must be word-aligned for the splats: copy them to a stride of
 * round_up(k, 4) when they are not. */
static const int8_t *aligned_rows(struct dspt_ctx *ctx, const int8_t *a, int m, int k, int *lda)
{
    if ((k % 4) == 0 && ((uintptr_t)a % 4) == 0) { *lda = k; return a; }
    int stride = (k + 3) & ~3;
    int8_t *buf = dspt_scratch(ctx, (uint32_t)m * stride);
    if (!buf) return 0;
    for (int r = 0; r < m; r++) hvx_copy(buf + r * stride, a + r * k, k);
    *lda = stride;
    return buf;
}

/* Op: in0 a[M,K] (shape_a = M,K,1,1), in1 b[N,K] -> out0 c[M,N] int32. */
int dspt_op_gemm(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    int m = d->shape_a[0], k = d->shape_a[1], n = d->shape_b[0];
    if (d->dtype != DSPT_I8) return DSPT_NO_SUPPORT;
    if (m <= 0 || n <= 0 || k <= 0 || d->shape_b[1] != k) return DSPT_BAD_PARAMS;
    if ((int64_t)k * 127 * 127 >= ((int64_t)1 << 31)) return DSPT_NO_SUPPORT;  /* int64 acc */
    const int8_t *a = dspt_at(ctx, d->in[0], (uint32_t)m * k);
    const int8_t *b = dspt_at(ctx, d->in[1], (uint32_t)n * k);
    int32_t *c = dspt_at(ctx, d->out[0], (uint32_t)m * n * 4);
    if (!a || !b || !c) return DSPT_BAD_PARAMS;
    int8_t *bp = dspt_scratch(ctx, dspt_packed_b_bytes(n, k));
    int lda;
    const int8_t *ar = aligned_rows(ctx, a, m, k, &lda);
    if (!bp || !ar) return DSPT_NO_SUPPORT;  /* too big for the scratch: the CPU takes it */
    dspt_pack_b(bp, b, n, k, k, 0);
    dspt_gemm_core(c, n, ar, lda, bp, m, n, k, (d->flags & DSPT_F_ACCUMULATE) != 0);
    return DSPT_OK;
}
