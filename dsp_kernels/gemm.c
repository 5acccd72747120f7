/* gemm.c: int8 GEMM c = a @ b.T on HVX, the core every product op reduces to.
 *
 * Vx.w += vrmpy(Vu.ub, Rt.b) multiplies 4 unsigned bytes per 32-bit lane of a vector
 * by the 4 signed bytes of a scalar register and sums them: a vector holding 4
 * reduction steps of 32 output columns ("packed b": block of 32 columns x 4 k) times
 * one word of a row of `a` adds 128 MACs to 32 accumulators. This vector-by-scalar
 * form needs no vsplat (which would take a slot 2/3 multiply resource like vrmpy
 * itself: Hexagon V66 HVX Programmer's Reference, VLIW packing rules), so two
 * vrmpy issue per packet. b is signed, so it is packed biased (b + 128 as ub) and the
 * bias comes back out exactly: sum (b + 128) a = sum b a + 128 sum a, and the
 * accumulators start at -128 * rowsum(a). The usual HVX int8 matmul layout (as in
 * Qualcomm's hexagon_nn, XNNPACK's Hexagon path and ggml-hexagon); the code is ours.
 * Register tile: 4 rows x up to 4 column blocks = 16 accumulators.
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "threads.h"

#define BIAS_WORD 0x80808080u

uint32_t dspt_packed_b_bytes(int n, int k)
{
    return (uint32_t)((n + 31) / 32) * (uint32_t)((k + 3) / 4) * HVX_BYTES;
}

/* Pack rows i (stride sn bytes, k contiguous bytes each) of an n x k operand into
 * [n/32 blocks][k/4][32 lanes][4 bytes], biased by 128, zero (128) padded, and 1s in
 * lane n % 32 of the last block (the row sums): 32 rows x 32 words at a time, loaded
 * as vectors and transposed with vshuff. */
void dspt_pack_b(int8_t *bp, const int8_t *src, int n, int k, int sn)
{
    int k4 = (k + 3) / 4, nblocks = (n + 31) / 32;
    HVX_Vector bias = Q6_V_vsplat_R((int)BIAS_WORD), v[32];
    for (int nb = 0; nb < nblocks; nb++) {
        int lanes = n - nb * 32 < 32 ? n - nb * 32 : 32;
        for (int q0 = 0; q0 < k4; q0 += 32) {
            int bytes = k - q0 * 4 < HVX_BYTES ? k - q0 * 4 : HVX_BYTES;
            HVX_VectorPred inside = Q6_Q_vsetq2_R(bytes);
            for (int l = 0; l < 32; l++) {
                HVX_Vector row = l < lanes ? hvx_load_u(src + (nb * 32 + l) * sn + q0 * 4)   /* masked below */
                                           : Q6_V_vzero();
                v[l] = Q6_V_vxor_VV(Q6_V_vmux_QVV(inside, row, Q6_V_vzero()), bias);
            }
            if (lanes < 32) v[lanes] = Q6_V_vsplat_R(DSPT_ONES_WORD);   /* the row-sum lane */
            hvx_transpose32w(v);
            int words = k4 - q0 < 32 ? k4 - q0 : 32;
            HVX_Vector *dst = (HVX_Vector *)bp + nb * k4 + q0;
            for (int q = 0; q < words; q++) dst[q] = v[q];
        }
    }
}

/* Partial sums (32 lanes) of the bytes of words 0 .. k4-1 of one row, each byte + 128. */
static inline HVX_Vector row_part(const int8_t *row, int bytes, HVX_Vector flip)
{
    const int ones = 0x01010101;
    HVX_Vector acc = Q6_V_vzero();
    for (int i = 0; i < bytes; i += HVX_BYTES) {
        int n = bytes - i < HVX_BYTES ? bytes - i : HVX_BYTES;
        HVX_Vector v = Q6_V_vxor_VV(hvx_load_u(row + i), flip);   /* masked below */
        acc = Q6_Vw_vrmpyacc_VwVubRb(acc, Q6_V_vmux_QVV(Q6_Q_vsetq2_R(n), v, Q6_V_vzero()), ones);
    }
    return acc;
}

/* sums[r] = sum of the signed bytes of words 0 .. k4-1 of rows r < m (m <= 32) of a:
 * the bias correction's factor, with vectors: bytes made unsigned (^ 0x80) are summed
 * 4 to a word by vrmpy with 0x01010101. Rows stored as the lanes of vectors (lda == 4,
 * aq == 32) sum lane-wise over q; rows stored as rows give a vector each, reduced
 * across lanes eight rows at a time (reduce8). */
static __attribute__((noinline)) void row_sums(int32_t sums[32], const int8_t *a, int lda, int aq, int m, int k4)
{
    HVX_Vector flip = Q6_V_vsplat_R((int)BIAS_WORD), bias = Q6_V_vsplat_R(128 * 4 * k4);
    if (lda == 4 && aq == 32) {
        HVX_Vector total = Q6_V_vzero();
        for (int q = 0; q < k4; q++)
            total = Q6_Vw_vrmpyacc_VwVubRb(total, Q6_V_vxor_VV(((const HVX_Vector *)a)[q], flip), 0x01010101);
        *(HVX_Vector *)sums = Q6_Vw_vsub_VwVw(total, bias);
        return;
    }
    int bytes = 4 * k4;
    for (int r0 = 0; r0 < m; r0 += 8) {
        const int8_t *b = a + r0 * lda;
        int last = m - r0 - 1;   /* rows past m repeat a valid row; their sums are unused */
#define ROW(i) row_part(b + (i < last ? i : last) * lda, bytes, flip)
        HVX_Vector v = Q6_Vw_vsub_VwVw(hvx_reduce8(ROW(0), ROW(1), ROW(2), ROW(3), ROW(4), ROW(5), ROW(6), ROW(7)), bias);
#undef ROW
        const int32_t *lanes = (const int32_t *)&v;
        for (int j = 0; j < 8; j++) sums[r0 + j] = lanes[4 * j];
    }
}

/* Write (or add) the first `bytes` bytes of v to c. */
static inline void store_acc_bytes(int32_t *c, HVX_Vector v, uint32_t bytes, int accumulate)
{
    if (accumulate) v = Q6_Vw_vadd_VwVw(v, hvx_load_bytes(c, bytes));
    hvx_store_bytes(c, v, bytes);
}

/* Write (or add) the first `cols` lanes of an accumulator vector to c. */
static inline void store_acc(int32_t *c, HVX_Vector v, int cols, int accumulate)
{
    if (cols == 32) {
        if (accumulate) v = Q6_Vw_vadd_VwVw(v, hvx_load_u(c));
        hvx_store_u(c, v);
        return;
    }
    if (accumulate) v = Q6_Vw_vadd_VwVw(v, hvx_load_bytes(c, (uint32_t)cols * 4));
    hvx_store_bytes(c, v, (uint32_t)cols * 4);
}

/* Rows a[0..3] x NB column blocks starting at b (blocks k4 vectors apart). Rows past
 * `rows` repeat a valid row and are not stored. */
static inline __attribute__((always_inline)) void tile(
    const int NB, int32_t *c, int ldc, const int32_t *const a[4], int aq, const HVX_Vector *b,
    int k4, const HVX_Vector bias[4], int rows, int cols_last, int accumulate, int ones, int32_t sums[4])
{
    HVX_Vector acc[4][4];
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < NB; j++) acc[r][j] = bias[r];
    const int32_t *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
    for (int q = 0; q < k4; q++) {
        int32_t w0 = a0[q * aq], w1 = a1[q * aq], w2 = a2[q * aq], w3 = a3[q * aq];
        for (int j = 0; j < NB; j++) {
            HVX_Vector v = b[j * k4 + q];
            acc[0][j] = Q6_Vw_vrmpyacc_VwVubRb(acc[0][j], v, w0);
            acc[1][j] = Q6_Vw_vrmpyacc_VwVubRb(acc[1][j], v, w1);
            acc[2][j] = Q6_Vw_vrmpyacc_VwVubRb(acc[2][j], v, w2);
            acc[3][j] = Q6_Vw_vrmpyacc_VwVubRb(acc[3][j], v, w3);
        }
    }
    if (ones >= 0) {   /* lane `ones` of the last block summed a against 1s: the row sums */
        HVX_Vector fix[4];
        for (int r = 0; r < 4; r++) {
            sums[r] = Q6_R_vextract_VR(acc[r][NB - 1], 4 * ones);
            fix[r] = Q6_V_vsplat_R(-128 * sums[r]);
        }
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < NB; j++) acc[r][j] = Q6_Vw_vadd_VwVw(acc[r][j], fix[r]);
    }
    if (NB == 1 && ldc == cols_last && cols_last <= 16) {
        /* narrow outputs (n <= 16, rows contiguous): two rows per vector, one store */
        uint32_t shift = 4 * (uint32_t)cols_last;
        HVX_VectorPred upper = Q6_Q_vsetq_R(shift);   /* lanes of the first row */
        HVX_Vector v01 = Q6_V_vmux_QVV(upper, acc[0][0], Q6_V_vlalign_VVR(acc[1][0], acc[1][0], shift));
        HVX_Vector v23 = Q6_V_vmux_QVV(upper, acc[2][0], Q6_V_vlalign_VVR(acc[3][0], acc[3][0], shift));
        store_acc_bytes(c, v01, (rows < 2 ? rows : 2) * shift, accumulate);
        if (rows > 2) store_acc_bytes(c + 2 * ldc, v23, (uint32_t)(rows - 2) * shift, accumulate);
        return;
    }
    /* constant row indices keep the accumulators in registers */
    for (int j = 0; j < NB; j++) {
        int cols = j == NB - 1 ? cols_last : 32;
        store_acc(c + j * 32, acc[0][j], cols, accumulate);
        if (rows > 1) store_acc(c + ldc + j * 32, acc[1][j], cols, accumulate);
        if (rows > 2) store_acc(c + 2 * ldc + j * 32, acc[2][j], cols, accumulate);
        if (rows > 3) store_acc(c + 3 * ldc + j * 32, acc[3][j], cols, accumulate);
    }
}

void dspt_gemm_core(int32_t *c, int ldc, const int8_t *a, int lda, const int8_t *bp,
                    int m, int n, int k, int accumulate)
{
    dspt_gemm_core_strided(c, ldc, a, lda, 1, bp, m, n, k, accumulate);
}

/* The tile holding the last column block (nb_last .. nblocks-1), 1 to 4 blocks. */
static inline __attribute__((always_inline)) void last_tile(int left, int32_t *c, int ldc, const int32_t *const a[4], int aq,
                             const HVX_Vector *b, int k4, const HVX_Vector bias[4], int rows,
                             int cols_last, int accumulate, int ones, int32_t sums[4])
{
    if (left == 4) tile(4, c, ldc, a, aq, b, k4, bias, rows, cols_last, accumulate, ones, sums);
    if (left == 3) tile(3, c, ldc, a, aq, b, k4, bias, rows, cols_last, accumulate, ones, sums);
    if (left == 2) tile(2, c, ldc, a, aq, b, k4, bias, rows, cols_last, accumulate, ones, sums);
    if (left == 1) tile(1, c, ldc, a, aq, b, k4, bias, rows, cols_last, accumulate, ones, sums);
}

static inline __attribute__((always_inline)) void core(
    int32_t *c, int ldc, const int8_t *a, int lda, const int aq, const int8_t *bp, int m, int n, int k,
    int accumulate)
{
    int k4 = (k + 3) / 4, nblocks = (n + 31) / 32;
    int nb_last = (nblocks - 1) / 4 * 4, left = nblocks - nb_last, cols_last = n - (nblocks - 1) * 32;
    /* packed b has a lane of 1s after the last column when n % 32 != 0 (dspt_pack_b and
     * the conv packers): the tile holding it yields the row sums, and runs first */
    int ones = n % 32 ? n % 32 : -1;
    const HVX_Vector *bv = (const HVX_Vector *)bp;
    HVX_Vector sum_vec, zero = Q6_V_vzero();
    int32_t *group = (int32_t *)&sum_vec, sums[4];
    for (int row = 0; row < m; row += 4) {
        int rows = m - row < 4 ? m - row : 4;
        const int32_t *ar[4];
        HVX_Vector bias[4] = {zero, zero, zero, zero};
        for (int r = 0; r < 4; r++)
            ar[r] = (const int32_t *)(a + (row + (r < rows ? r : rows - 1)) * lda);
        int32_t *crow = c + row * ldc;
        if (ones >= 0) {
            last_tile(left, crow + nb_last * 32, ldc, ar, aq, bv + nb_last * k4, k4, bias, rows,
                      cols_last, accumulate, ones, sums);
        } else {
            if (row % 32 == 0) row_sums(group, a + row * lda, lda, aq, m - row < 32 ? m - row : 32, k4);
            for (int r = 0; r < 4; r++) sums[r] = group[(row + (r < rows ? r : rows - 1)) % 32];
        }
        for (int r = 0; r < 4; r++) bias[r] = Q6_V_vsplat_R(-128 * sums[r]);
        for (int nb = 0; nb < nb_last; nb += 4)
            tile(4, crow + nb * 32, ldc, ar, aq, bv + nb * k4, k4, bias, rows, 32, accumulate, -1, sums);
        if (ones < 0)
            last_tile(left, crow + nb_last * 32, ldc, ar, aq, bv + nb_last * k4, k4, bias, rows,
                      cols_last, accumulate, -1, sums);
    }
}

void dspt_gemm_core_strided(int32_t *c, int ldc, const int8_t *a, int lda, int aq, const int8_t *bp,
                            int m, int n, int k, int accumulate)
{
    if (aq == 1)   /* contiguous rows: the common case, compiled with a constant stride */
        core(c, ldc, a, lda, 1, bp, m, n, k, accumulate);
    else if (aq == 32)   /* rows as the lanes of vectors (conv.c's weight gradient) */
        core(c, ldc, a, lda, 32, bp, m, n, k, accumulate);
    else
        core(c, ldc, a, lda, aq, bp, m, n, k, accumulate);
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

/* One HVX thread's band of rows of c (threads.h). */
struct gemm_job {
    int32_t *c;
    const int8_t *a;
    int lda;
    const int8_t *bp;
    int m, n, k, acc;
};

static int gemm_share(struct dspt_ctx *tc, int t, void *arg)
{
    const struct gemm_job *j = arg;
    int lo, hi;
    dspt_share(tc, j->m, 4, t, &lo, &hi);
    if (lo < hi) dspt_gemm_core(j->c + lo * j->n, j->n, j->a + lo * j->lda, j->lda, j->bp, hi - lo, j->n, j->k, j->acc);
    return DSPT_OK;
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
    dspt_pack_b(bp, b, n, k, k);
    struct gemm_job job = {c, ar, lda, bp, m, n, k, (d->flags & DSPT_F_ACCUMULATE) != 0};
    return dspt_run_shares(ctx, gemm_share, &job);
}
