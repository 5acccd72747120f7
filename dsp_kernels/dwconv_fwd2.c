/* dwconv_fwd2.c: depthwise forward of a 3 x 3 kernel at stride 2, padding 1, the input's
 * 2 x 2 blocks in vrmpy's words ("dw_block_quads").
 *
 * y[m, n] sums x[2m + i - 1, 2n + j - 1] * w[i, j]. Tile x (padded by one row and column
 * of zeros above and to the left) into 2 x 2 blocks: block (u, v) holds rows 2u - 1, 2u and
 * columns 2v - 1, 2v. Output (m, n) reads exactly the blocks (m + du, n + dv), du, dv in
 * {0, 1}: slot (dy, dx) of block (m + du, n + dv) is tap (2 du + dy, 2 dv + dx) when both
 * are at most 2 (4 + 2 + 2 + 1 = 9 taps), else weight 0. So a block's four 128-channel
 * pixel blocks are interleaved once into words (two vshuff stages) and met by four weight
 * sets (16 vectors, in registers for the whole image): block (u, v) ends output
 * (u - 1, v - 1) with set (1, 1), (u - 1, v) with (1, 0), and so on. Along an output row
 * the two block rows u = m and m + 1 are built per column, each block feeding the output
 * to its left (finishing it) and the next (starting it): per output pixel block, 8 loads,
 * 8 vshuff, 16 vrmpy, 4 stores, no padded copy (past the image, a zero buffer stands in).
 * Work is split by images across the HVX threads (threads.h).
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "dwconv.h"
#include "threads.h"

struct bq_job {
    const struct dw_shape *s;
    const int8_t *x, *zeros;
    int32_t *y;
    HVX_Vector *wq;   /* per channel block: 16 vectors, set (du, dv) at 4 * (2 du + dv) */
    int accumulate;
};

int dspt_dw_block_quads_fit(const struct dw_shape *s)
{
    /* C % 32: every output block starts on a vector; C > 128: whole blocks (dw_block_start) */
    return s->stride == 2 && s->kh == 3 && s->kw == 3 && s->pad == 1 && s->c >= 64 && (s->c % 32 == 0 || s->c > 128);
}

/* The block of rows r0, r1 (pointers, the zeros past the image) at columns c0, c1 (byte
 * offsets; ok0, ok1 whether inside), interleaved into q. */
static inline __attribute__((always_inline)) void block(HVX_Vector q[4], const int8_t *r0, const int8_t *r1,
                                                        const int8_t *zeros, int c0, int c1, int ok0, int ok1)
{
    dw_interleave4(q, hvx_load_u(ok0 ? r0 + c0 : zeros), hvx_load_u(ok1 ? r0 + c1 : zeros),
                   hvx_load_u(ok0 ? r1 + c0 : zeros), hvx_load_u(ok1 ? r1 + c1 : zeros));
}

/* Output row m of one image, channel block cb: xa0, xa1 the x rows 2m - 1, 2m; xb0, xb1
 * 2m + 1, 2m + 2 (the zeros where outside). NQ: whole aligned vectors a block keeps and
 * nothing to add (C % 32 == 0); 8: four whole vectors anywhere; 0: `valid` words, added
 * with `acc`. */
static inline __attribute__((always_inline)) void out_row(const int NQ, const struct dw_shape *s, const int8_t *xa0,
                                                          const int8_t *xa1, const int8_t *xb0, const int8_t *xb1,
                                                          const int8_t *zeros, int32_t *y, const HVX_Vector *Wm,
                                                          int valid, int acc)
{
    const int C = s->c, OW = s->ow, Wd = s->w;
    HVX_Vector W[16];   /* a local copy: the stores to y cannot alias it, so it stays in registers */
    for (int k = 0; k < 16; k++) W[k] = Wm[k];
    HVX_Vector qa[4], qb[4], na[4], nb[4], cur[4];
    /* blocks (m, 0), (m + 1, 0): columns -1 (outside) and 0 start output 0 */
    block(qa, xa0, xa1, zeros, -C, 0, 0, 1);
    block(qb, xb0, xb1, zeros, -C, 0, 0, 1);
    for (int q = 0; q < 4; q++) cur[q] = Q6_Vw_vadd_VwVw(Q6_Vw_vrmpy_VbVb(qa[q], W[q]), Q6_Vw_vrmpy_VbVb(qb[q], W[8 + q]));
    block(na, xa0, xa1, zeros, C, 2 * C, 1 < Wd, 2 < Wd);
    block(nb, xb0, xb1, zeros, C, 2 * C, 1 < Wd, 2 < Wd);
    for (int n = 0; n < OW; n++, y += C) {
        for (int q = 0; q < 4; q++) { qa[q] = na[q]; qb[q] = nb[q]; }
        /* the blocks of column n + 2 built while these are multiplied (read past the last: zeros) */
        int c0 = (2 * n + 3) * C, ok0 = 2 * n + 3 < Wd, ok1 = 2 * n + 4 < Wd;
        block(na, xa0, xa1, zeros, c0, c0 + C, ok0, ok1);
        block(nb, xb0, xb1, zeros, c0, c0 + C, ok0, ok1);
        HVX_Vector done[4];
        for (int q = 0; q < 4; q++) {
            HVX_Vector end = Q6_Vw_vadd_VwVw(Q6_Vw_vrmpy_VbVb(qa[q], W[4 + q]), Q6_Vw_vrmpy_VbVb(qb[q], W[12 + q]));
            done[q] = Q6_Vw_vadd_VwVw(cur[q], end);
            cur[q] = Q6_Vw_vadd_VwVw(Q6_Vw_vrmpy_VbVb(qa[q], W[q]), Q6_Vw_vrmpy_VbVb(qb[q], W[8 + q]));
        }
        if (NQ == 8) {   /* 4 whole vectors, unaligned */
            for (int q = 0; q < 4; q++) dw_store_u(y + 32 * q, done[q]);
            continue;
        }
        if (NQ) {
            for (int q = 0; q < NQ; q++) ((HVX_Vector *)y)[q] = done[q];
            continue;
        }
        for (int q = 0; q < 4 && 32 * q < valid; q++) {
            int words = valid - 32 * q < 32 ? valid - 32 * q : 32;
            HVX_Vector r = acc ? Q6_Vw_vadd_VwVw(done[q], hvx_load_u(y + 32 * q)) : done[q];
            if (words == 32) hvx_store_u(y + 32 * q, r);
            else hvx_store_bytes(y + 32 * q, r, (uint32_t)words * 4);
        }
    }
}

/* Each store mode its own function: inlined together they would share one register
 * allocation (and spill). */
#define ROW_FN(K)                                                                                     \
    static __attribute__((noinline)) void out_row_##K(const struct dw_shape *s, const int8_t *const r[4], \
                                                      const int8_t *zeros, int32_t *y,                    \
                                                      const HVX_Vector *W, int valid, int acc)            \
    {                                                                                                 \
        out_row(K, s, r[0], r[1], r[2], r[3], zeros, y, W, valid, acc);                               \
    }
ROW_FN(0)
ROW_FN(3)
ROW_FN(4)
ROW_FN(8)

static int bq_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct bq_job *J = job;
    const struct dw_shape *s = J->s;
    const int C = s->c, H = s->h, rowb = s->w * C, acc = J->accumulate;
    const int aligned = ((uintptr_t)J->y & (HVX_BYTES - 1)) == 0 && !acc;   /* with C % 32 == 0 */
    int lo, hi, blocks = (C + HVX_BYTES - 1) / HVX_BYTES;
    dspt_share(tc, s->n, 1, t, &lo, &hi);
    for (int cb = 0; cb < blocks; cb++) {
        int c0 = dw_block_start(cb, C, acc), valid = C - c0 < HVX_BYTES ? C - c0 : HVX_BYTES;
        int nq = aligned && C % 32 == 0 ? valid / 32 : valid == HVX_BYTES && !acc ? 8 : 0;
        const HVX_Vector *W = J->wq + 16 * cb;
        for (int img = lo; img < hi; img++) {
            const int8_t *x = J->x + (size_t)img * H * rowb + c0;
            int32_t *y = J->y + (size_t)img * s->oh * s->ow * C + c0;
            for (int m = 0; m < s->oh; m++, y += s->ow * C) {
                const int8_t *r[4];
                for (int k = 0; k < 4; k++) {   /* rows 2m - 1 .. 2m + 2 */
                    int row = 2 * m - 1 + k;
                    r[k] = row >= 0 && row < H ? x + row * rowb : J->zeros;
                }
                if (nq == 8) out_row_8(s, r, J->zeros, y, W, valid, acc);
                else if (nq == 4) out_row_4(s, r, J->zeros, y, W, valid, acc);
                else if (nq == 3) out_row_3(s, r, J->zeros, y, W, valid, acc);
                else out_row_0(s, r, J->zeros, y, W, valid, acc);
            }
        }
    }
    return DSPT_OK;
}

int dspt_dw_block_quads(struct dspt_ctx *ctx, const struct dw_shape *s, const int8_t *x, const int8_t *w, int32_t *y,
                        int accumulate)
{
    int blocks = (s->c + HVX_BYTES - 1) / HVX_BYTES;
    uint32_t zero_bytes = (uint32_t)(s->w + 2) * s->c + HVX_BYTES;   /* a row and what a block reads past it */
    HVX_Vector *wq = dspt_scratch(ctx, (uint32_t)blocks * 16 * HVX_BYTES);
    int8_t *zeros = dspt_scratch(ctx, zero_bytes);
    if (!wq || !zeros) return DSPT_NO_SUPPORT;
    hvx_zero(zeros, zero_bytes);
    for (int cb = 0; cb < blocks; cb++)
        for (int du = 0, c0 = dw_block_start(cb, s->c, accumulate); du < 2; du++)
            for (int dv = 0; dv < 2; dv++) {
                HVX_Vector t[4];
                for (int dy = 0; dy < 2; dy++)
                    for (int dx = 0; dx < 2; dx++) {
                        int i = 2 * du + dy, j = 2 * dv + dx;
                        t[2 * dy + dx] = i > 2 || j > 2 ? Q6_V_vzero()
                                                        : hvx_load_u(w + (i * 3 + j) * s->c + c0);
                    }
                dw_interleave4(wq + 16 * cb + 4 * (2 * du + dv), t[0], t[1], t[2], t[3]);
            }
    struct bq_job J = {.s = s, .x = x, .zeros = zeros, .y = y, .wq = wq, .accumulate = accumulate};
    return dspt_run_shares(ctx, bq_share, &J);
}
