/* dwconv_bwd_one.c: depthwise backward data from an err of one pixel ("dw_err_one"):
 * MobileNetV2's last stride-2 layer (err 1 x 1 onto a 2 x 2 image) and its 1 x 1 images.
 *
 * With one err pixel, dx pixel (h, w) is err times the single tap (h + p, w + p) (zero
 * when that is outside the kernel): no sum at all, so the pixel quads' words, one real
 * byte of 4 met by 4 output pixels' weights, spent their interleave and their masked
 * bookkeeping on nothing. Here err's 128-channel block is spread once into words (one real
 * byte, three zeros: 3 vshuff) and each dx pixel is one vrmpy a word vector with its tap's
 * weights spread alike, stored as a whole aligned vector (C % 32 == 0, dx aligned). The
 * weights of every dx pixel (at most 4) stay in registers while the thread's images pass
 * (work is split by images, threads.h).
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "dwconv.h"
#include "threads.h"

struct eo_job {
    const struct dw_shape *s;
    const int8_t *err;
    int32_t *dx;
    const HVX_Vector *wt;   /* per 128-channel block: dx pixel p's 4 word vectors at 4 p */
    int accumulate;
};

int dspt_dw_err_one_fit(const struct dw_shape *s)
{
    int px = s->h * s->w;
    return s->oh == 1 && s->ow == 1 && s->c % 32 == 0 && (px == 1 || px == 2 || px == 4);
}

/* v's bytes spread into words, one a word and three zeros: x[g] word l = v[32 g + l]. */
static inline __attribute__((always_inline)) void eo_spread(const int G, HVX_Vector x[4], HVX_Vector v)
{
    const HVX_Vector z = Q6_V_vzero();
    HVX_VectorPair h = Q6_W_vshuff_VVR(z, v, -1);
    HVX_VectorPair lo = Q6_W_vshuff_VVR(z, Q6_V_lo_W(h), -2);
    x[0] = Q6_V_lo_W(lo);
    x[1] = Q6_V_hi_W(lo);
    if (G > 2) {
        HVX_VectorPair hi = Q6_W_vshuff_VVR(z, Q6_V_hi_W(h), -2);
        x[2] = Q6_V_lo_W(hi);
        x[3] = Q6_V_hi_W(hi);
    }
}

/* Images [lo, hi) of one block at c0 (G word vectors), P dx pixels. */
static inline __attribute__((always_inline)) void eo_core(const int P, const int G, const int ACC,
                                                          const int8_t *__restrict err, int32_t *__restrict dx,
                                                          int n, int C, const HVX_Vector *wt)
{
    HVX_Vector W[16];
    for (int p = 0; p < P; p++)
        for (int g = 0; g < G; g++) W[4 * p + g] = wt[4 * p + g];
    if (P == 1) {   /* 4 stores an image: clang packs the plain loop tighter (1 x 1 x 960: 3.8 K, 4.5 K pipelined) */
        for (int img = 0; img < n; img++, err += C, dx += C) {
            HVX_Vector x[4];
            eo_spread(G, x, hvx_load_u(err));
            for (int g = 0; g < G; g++) {
                HVX_Vector *o = (HVX_Vector *)(dx + 32 * g), r = Q6_Vw_vrmpy_VbVb(x[g], W[g]);
                *o = ACC ? Q6_Vw_vadd_VwVw(r, *o) : r;
            }
        }
        return;
    }
    /* software-pipelined: the next image's err spread while this one's products are stored
     * (the last image spreads itself again: nothing past err is read) */
    HVX_Vector x[4];
    eo_spread(G, x, hvx_load_u(err));
    for (int img = 0; img < n; img++, err += C, dx += P * C) {
        HVX_Vector xn[4];
        eo_spread(G, xn, hvx_load_u(img + 1 < n ? err + C : err));
        for (int p = 0; p < P; p++)
            for (int g = 0; g < G; g++) {
                HVX_Vector *o = (HVX_Vector *)(dx + p * C + 32 * g), r = Q6_Vw_vrmpy_VbVb(x[g], W[4 * p + g]);
                *o = ACC ? Q6_Vw_vadd_VwVw(r, *o) : r;
            }
        for (int g = 0; g < G; g++) x[g] = xn[g];
    }
}

#define ONE_FN(P, ACC)                                                                                   \
    static __attribute__((noinline)) void eo_##P##_##ACC(int g, const int8_t *err, int32_t *dx, int n, int C, \
                                                         const HVX_Vector *wt)                          \
    {                                                                                                    \
        if (g == 4) eo_core(P, 4, ACC, err, dx, n, C, wt);                                               \
        else if (g == 3) eo_core(P, 3, ACC, err, dx, n, C, wt);                                          \
        else if (g == 2) eo_core(P, 2, ACC, err, dx, n, C, wt);                                          \
        else eo_core(P, 1, ACC, err, dx, n, C, wt);                                                      \
    }
ONE_FN(1, 0)
ONE_FN(2, 0)
ONE_FN(4, 0)
ONE_FN(1, 1)
ONE_FN(2, 1)
ONE_FN(4, 1)

static int eo_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct eo_job *J = job;
    const struct dw_shape *s = J->s;
    const int C = s->c, P = s->h * s->w;
    int lo, hi;
    dspt_share(tc, s->n, 1, t, &lo, &hi);
    for (int cb = 0; cb * HVX_BYTES < C && lo < hi; cb++) {
        int c0 = cb * HVX_BYTES, g = (C - c0) / 32 < 4 ? (C - c0) / 32 : 4;
        const int8_t *err = J->err + (size_t)lo * C + c0;
        int32_t *dx = J->dx + (size_t)lo * P * C + c0;
        const HVX_Vector *wt = J->wt + 16 * cb;
        void (*fn)(int, const int8_t *, int32_t *, int, int, const HVX_Vector *) =
            J->accumulate ? (P == 4 ? eo_4_1 : P == 2 ? eo_2_1 : eo_1_1) : (P == 4 ? eo_4_0 : P == 2 ? eo_2_0 : eo_1_0);
        fn(g, err, dx, hi - lo, C, wt);
    }
    return DSPT_OK;
}

int dspt_dw_err_one(struct dspt_ctx *ctx, const struct dw_shape *s, const int8_t *err, const int8_t *w, int32_t *dx,
                    int accumulate)
{
    const int C = s->c, blocks = (C + HVX_BYTES - 1) / HVX_BYTES;
    HVX_Vector *wt = dspt_scratch(ctx, (uint32_t)blocks * 16 * HVX_BYTES);
    if (!wt) return DSPT_NO_SUPPORT;
    for (int cb = 0; cb < blocks; cb++)
        for (int h = 0; h < s->h; h++)
            for (int x = 0; x < s->w; x++) {   /* dx pixel (h, x) meets tap (h + pad, x + pad) alone */
                int i = h + s->pad, j = x + s->pad;
                HVX_Vector v = i < s->kh && j < s->kw ? hvx_load_u(w + (i * s->kw + j) * C + cb * HVX_BYTES) : Q6_V_vzero();
                eo_spread(4, wt + 16 * cb + 4 * (h * s->w + x), v);
            }
    struct eo_job J = {.s = s, .err = err, .dx = dx, .wt = wt, .accumulate = accumulate};
    return dspt_run_shares(ctx, eo_share, &J);
}
