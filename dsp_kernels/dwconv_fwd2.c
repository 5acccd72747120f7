/* dwconv_fwd2.c: depthwise forward of a 3 x 3 kernel at stride 2, padding 1, each input
 * column's three rows in vrmpy's words ("dw_column_triples").
 *
 * y[m, n] sums x[2m + i - 1, 2n + j - 1] * w[i, j] over the taps (i, j). For output row m,
 * column k's triple is the word (x[2m - 1, k], x[2m, k], x[2m + 1, k], 0) of each channel:
 * output n meets the triples of columns 2n - 1, 2n and 2n + 1, each by one vrmpy with the
 * kernel column's words (w[0, j], w[1, j], w[2, j], 0). Every odd column ends one output
 * and starts the next, so a row builds each column's triple once: per output pixel block
 * (128 channels) 6 loads, 8 vshuff, 12 vrmpy (9 of every 12 bytes real products), 4
 * stores, the 12 weight vectors in registers for the whole share. x is read where it lies
 * (no padded copy): rows outside the image read a zero row, and an odd width's last
 * column is peeled. Work is split by images across the HVX threads (threads.h).
 * Each column's triple is built while the one before it multiplies: clang puts an
 * unaligned load (vmemu) in a packet with no vshuff, so the 6 loads and 8 vshuffs take 14
 * packets and the vrmpy, adds and stores ride in them (17 packets an output block).
 * The 2 x 2 block quads this replaced (16 x 16 x 96 at batch 64: 132 K -> 78 K packets)
 * took 8 loads, 8 vshuff and 16 vrmpy an output, 7 of every 16 weight bytes zero, and 28
 * packets: each load's address chosen between the image and a zero row in the loop.
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "dwconv.h"
#include "threads.h"

struct ct_job {
    const struct dw_shape *s;
    const int8_t *x, *zeros;
    int32_t *y;
    HVX_Vector *wt;   /* per channel block: 12 vectors, kernel column j at 4 j */
    int accumulate;
};

/* Stride 1 (forward, and backward data as the forward with the taps flipped): output n
 * meets columns n - 1, n and n + 1, so each column's triple, built once, ends output
 * n - 1 (kernel column 2), continues n (1) and starts n + 1 (0): per output pixel block 3
 * loads, 4 vshuff, 12 vrmpy. Rows outside read the zero row; no padded copy, and no rows
 * that only start sums (the column quads' strips spend 2 of a 4 x 4 image's 6 rows so). */
static inline __attribute__((always_inline)) void ct_images1(const int NQ, const struct ct_job *J, int lo, int hi,
                                                             int c0, const HVX_Vector *Wm, int valid);


int dspt_dw_column_triples_fit(const struct dw_shape *s)
{
    /* C % 32: every output block starts on a vector; C > 128: whole blocks (dw_block_start) */
    if (s->kh != 3 || s->kw != 3 || s->pad != 1 || s->c < 64 || (s->c % 32 && s->c <= 128)) return 0;
    /* stride 1 on images of 5 to 16 pixels (MobileNetV2's 4 x 4 x 192, batch 64: 47.2 K ->
     * 32.5 K packets); the column quads' flat strips waste no lanes and win on larger ones
     * (8 x 8 x 144: 104 K against 152 K), the pixel quads on 4 pixels or fewer */
    return s->stride == 2 || (s->stride == 1 && s->h * s->w > 4 && s->h * s->w <= 16);
}

/* Column triple at byte offset k of rows r0, r1, r2, interleaved into t. */
static inline __attribute__((always_inline)) void triple(HVX_Vector t[4], const int8_t *r0, const int8_t *r1,
                                                         const int8_t *r2, int k)
{
    dw_interleave4(t, hvx_load_u(r0 + k), hvx_load_u(r1 + k), hvx_load_u(r2 + k), Q6_V_vzero());
}

static inline __attribute__((always_inline)) void store_block(const int NQ, int32_t *y, const HVX_Vector v[4],
                                                              int valid, int acc)
{
    if (NQ == 8) {   /* 4 whole vectors, unaligned */
        for (int q = 0; q < 4; q++) dw_store_u(y + 32 * q, v[q]);
        return;
    }
    if (NQ) {   /* NQ whole aligned vectors */
        for (int q = 0; q < NQ; q++) ((HVX_Vector *)y)[q] = v[q];
        return;
    }
    for (int q = 0; q < 4 && 32 * q < valid; q++) {
        int words = valid - 32 * q < 32 ? valid - 32 * q : 32;
        HVX_Vector r = acc ? Q6_Vw_vadd_VwVw(v[q], hvx_load_u(y + 32 * q)) : v[q];
        if (words == 32) hvx_store_u(y + 32 * q, r);
        else hvx_store_bytes(y + 32 * q, r, (uint32_t)words * 4);
    }
}

/* Images [lo, hi), the channel block at c0. NQ: whole aligned vectors a block keeps and
 * nothing to add (C % 32 == 0); 8: four whole vectors anywhere; 0: `valid` words, added
 * with `acc`. */
static inline __attribute__((always_inline)) void ct_images(const int NQ, const struct ct_job *J, int lo, int hi,
                                                            int c0, const HVX_Vector *Wm, int valid)
{
    const struct dw_shape *s = J->s;
    const int C = s->c, H = s->h, OH = s->oh, OW = s->ow, rowb = s->w * C, acc = J->accumulate;
    const int full = OW - (s->w & 1);   /* an odd width's last output has no column 2n + 1 */
    const int8_t *zeros = J->zeros + c0;
    HVX_Vector W[12];   /* a local copy: the stores to y cannot alias it, so it stays in registers */
    for (int k = 0; k < 12; k++) W[k] = Wm[k];
    for (int img = lo; img < hi; img++) {
        const int8_t *x = J->x + (size_t)img * H * rowb + c0;
        int32_t *y = J->y + (size_t)img * OH * OW * C + c0;
        for (int m = 0; m < OH; m++) {
            const int8_t *r0 = m ? x + (2 * m - 1) * rowb : zeros, *r1 = x + 2 * m * rowb;
            const int8_t *r2 = 2 * m + 1 < H ? x + (2 * m + 1) * rowb : zeros;
            HVX_Vector cur[4], te[4], to[4];
            for (int q = 0; q < 4; q++) cur[q] = Q6_V_vzero();   /* column -1: the padding */
            triple(te, r0, r1, r2, 0);
            int k = 0;
            /* software-pipelined: each column's triple is built while the one before it
             * multiplies (clang packs the vshuffs beside the vrmpy only across columns) */
#pragma clang loop unroll(disable)
            for (int n = 0; n < full; n++, y += C) {
                HVX_Vector done[4];
                triple(to, r0, r1, r2, k + C);   /* column 2n + 1: ends output n, starts n + 1 */
                for (int q = 0; q < 4; q++) cur[q] = Q6_Vw_vadd_VwVw(cur[q], Q6_Vw_vrmpy_VbVb(te[q], W[4 + q]));
                k = n + 1 < OW ? k + 2 * C : k;   /* column 2n + 2 (the last: this one again, unused) */
                triple(te, r0, r1, r2, k);
                for (int q = 0; q < 4; q++) {
                    done[q] = Q6_Vw_vadd_VwVw(cur[q], Q6_Vw_vrmpy_VbVb(to[q], W[8 + q]));
                    cur[q] = Q6_Vw_vrmpy_VbVb(to[q], W[q]);
                }
                store_block(NQ, y, done, valid, acc);
            }
            if (full < OW) {   /* column 2n + 1 past the image */
                for (int q = 0; q < 4; q++) cur[q] = Q6_Vw_vadd_VwVw(cur[q], Q6_Vw_vrmpy_VbVb(te[q], W[4 + q]));
                store_block(NQ, y, cur, valid, acc);
                y += C;
            }
        }
    }
}

static inline __attribute__((always_inline)) void ct_images1(const int NQ, const struct ct_job *J, int lo, int hi,
                                                             int c0, const HVX_Vector *Wm, int valid)
{
    const struct dw_shape *s = J->s;
    const int C = s->c, H = s->h, Wd = s->w, rowb = Wd * C, acc = J->accumulate;
    const int8_t *zeros = J->zeros + c0;
    HVX_Vector W[12];
    for (int k = 0; k < 12; k++) W[k] = Wm[k];
    for (int img = lo; img < hi; img++) {
        const int8_t *x = J->x + (size_t)img * H * rowb + c0;
        int32_t *y = J->y + (size_t)img * H * rowb + c0;
        for (int m = 0; m < H; m++) {
            const int8_t *r0 = m ? x + (m - 1) * rowb : zeros, *r1 = x + m * rowb;
            const int8_t *r2 = m + 1 < H ? x + (m + 1) * rowb : zeros;
            HVX_Vector a[4], b[4], t[4];
            triple(t, r0, r1, r2, 0);   /* column 0: continues output 0, starts 1 */
            for (int q = 0; q < 4; q++) {
                a[q] = Q6_Vw_vrmpy_VbVb(t[q], W[4 + q]);
                b[q] = Q6_Vw_vrmpy_VbVb(t[q], W[q]);
            }
            /* not software-pipelined as the stride-2 loop: a and b hold 8 registers more, and
             * the next column's triple beside them spilled (27 packets an output, not 13) */
#pragma clang loop unroll(disable)
            for (int n = 1, k = C; n < Wd; n++, k += C, y += C) {
                HVX_Vector done[4];
                triple(t, r0, r1, r2, k);
                for (int q = 0; q < 4; q++) {
                    done[q] = Q6_Vw_vadd_VwVw(a[q], Q6_Vw_vrmpy_VbVb(t[q], W[8 + q]));
                    a[q] = Q6_Vw_vadd_VwVw(b[q], Q6_Vw_vrmpy_VbVb(t[q], W[4 + q]));
                    b[q] = Q6_Vw_vrmpy_VbVb(t[q], W[q]);
                }
                store_block(NQ, y, done, valid, acc);
            }
            store_block(NQ, y, a, valid, acc);   /* the last output: column W is the padding */
            y += C;
        }
    }
}

/* Each store mode its own function: inlined together they would share one register
 * allocation (and spill). */
#define IMAGES_FN(K)                                                                                    \
    static __attribute__((noinline)) void ct_images_##K(const struct ct_job *J, int lo, int hi, int c0, \
                                                        const HVX_Vector *W, int valid)                 \
    {                                                                                                   \
        if (J->s->stride == 1) ct_images1(K, J, lo, hi, c0, W, valid);                                  \
        else ct_images(K, J, lo, hi, c0, W, valid);                                                     \
    }
IMAGES_FN(0)
IMAGES_FN(3)
IMAGES_FN(4)
IMAGES_FN(8)

static int ct_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct ct_job *J = job;
    const struct dw_shape *s = J->s;
    const int C = s->c, acc = J->accumulate;
    const int aligned = ((uintptr_t)J->y & (HVX_BYTES - 1)) == 0 && !acc;   /* with C % 32 == 0 */
    int lo, hi, blocks = (C + HVX_BYTES - 1) / HVX_BYTES;
    dspt_share(tc, s->n, 1, t, &lo, &hi);
    if (lo >= hi) return DSPT_OK;
    for (int cb = 0; cb < blocks; cb++) {
        int c0 = dw_block_start(cb, C, acc), valid = C - c0 < HVX_BYTES ? C - c0 : HVX_BYTES;
        int nq = aligned && C % 32 == 0 ? valid / 32 : valid == HVX_BYTES && !acc ? 8 : 0;
        const HVX_Vector *W = J->wt + 12 * cb;
        if (nq == 8) ct_images_8(J, lo, hi, c0, W, valid);
        else if (nq == 4) ct_images_4(J, lo, hi, c0, W, valid);
        else if (nq == 3) ct_images_3(J, lo, hi, c0, W, valid);
        else ct_images_0(J, lo, hi, c0, W, valid);
    }
    return DSPT_OK;
}

int dspt_dw_column_triples(struct dspt_ctx *ctx, const struct dw_shape *s, const int8_t *x, const int8_t *w,
                           int32_t *y, int accumulate, int flip)
{
    int blocks = (s->c + HVX_BYTES - 1) / HVX_BYTES;
    uint32_t zero_bytes = (uint32_t)s->w * s->c + HVX_BYTES;   /* a row and what a block reads past it */
    HVX_Vector *wt = dspt_scratch(ctx, (uint32_t)blocks * 12 * HVX_BYTES);
    int8_t *zeros = dspt_scratch(ctx, zero_bytes);
    if (!wt || !zeros) return DSPT_NO_SUPPORT;
    hvx_zero(zeros, zero_bytes);
    for (int cb = 0; cb < blocks; cb++) {
        int c0 = dw_block_start(cb, s->c, accumulate);
        for (int j = 0; j < 3; j++)
        {
            int t0 = flip ? 8 - j : j, t1 = flip ? 5 - j : 3 + j, t2 = flip ? 2 - j : 6 + j;   /* rows 0, 1, 2 of column j */
            dw_interleave4(wt + 12 * cb + 4 * j, hvx_load_u(w + t0 * s->c + c0), hvx_load_u(w + t1 * s->c + c0),
                           hvx_load_u(w + t2 * s->c + c0), Q6_V_vzero());
        }
    }
    struct ct_job J = {.s = s, .x = x, .zeros = zeros, .y = y, .wt = wt, .accumulate = accumulate};
    return dspt_run_shares(ctx, ct_share, &J);
}
