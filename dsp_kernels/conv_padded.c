/* conv_padded.c: forward convolution of 2-4 channel inputs (VGG's first conv: 3 -> 64)
 * as an implicit GEMM over a channel-padded image.
 *
 * conv.c copies an im2col row per output pixel (K = 27 bytes for 3x3x3) and sums each
 * row for the bias correction: with K this short, the copies and the sums cost more than
 * the products. Here each pixel of the zero-padded image is one word (its channels
 * padded to 4 with zeros: one vdelta spreads 32 pixels), so the im2col row of output
 * pixel (oh, ow) is the words at (oh + i, ow + j) for the KH x KW taps: the GEMM core
 * reads them in place (dspt_gemm_core_words: rows 4 bytes apart, tap q at a table
 * offset). K grows to 4 * KH * KW (36 for 27), paid in vrmpy, and no row is copied. The
 * rows' byte sums come from the image too, once per image: one vrmpy per 32 pixels gives
 * each pixel's sum, KW shifted adds the window rows' sums, KH adds the windows'. Weights get the
 * same channel padding, then dspt_pack_b. Channels in the lanes, as in the core, so the
 * output is NHWC directly.
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "conv.h"
#include "threads.h"

#define MAX_PIXELS 16384   /* padded image pixels: a thread's four buffers within ~256 KiB */

int dspt_conv_padded_fits(const struct conv_shape *s)
{
    /* O <= 32 with few channels goes to conv_grid.c first (dspt_op_conv2d) */
    return s->stride == 1 && s->c >= 2 && s->c <= 4 && s->kh * s->kw <= 64 &&
           (s->h + 2 * s->pad) * (s->w + 2 * s->pad) <= MAX_PIXELS;
}

struct padded_job {
    const int8_t *x;
    int32_t *y;
    const struct conv_shape *s;
    const int8_t *bp;                 /* packed channel-padded weights */
    const int32_t *off;               /* tap q = (i, j): byte offset i * wp * 4 + j * 4 */
    HVX_Vector spread, keep;          /* vdelta control C bytes -> 4 a pixel; the C bytes kept */
    int wp, hp, ws, accumulate;       /* ws: OW rounded up to 32, the sums' row stride */
    int8_t *img[DSPT_MAX_THREADS];    /* each thread's padded image: hp x wp words */
    int32_t *psum[DSPT_MAX_THREADS];  /* its pixels' byte sums, hp x wp */
    int32_t *hsum[DSPT_MAX_THREADS];  /* its window rows' sums, hp x ws */
    int32_t *wsum[DSPT_MAX_THREADS];  /* its windows' sums, oh x ws (+ slack) */
};

/* 32 pixels of C bytes from src -> 32 words (channels 0 .. C-1, then zeros) */
static inline HVX_Vector spread_pixels(const int8_t *src, int c, HVX_Vector ctrl, HVX_Vector keep)
{
    HVX_Vector v = hvx_load_u(src);   /* masked below */
    if (c < 4) v = Q6_V_vdelta_VV(v, ctrl);
    return Q6_V_vand_VV(v, keep);
}

/* Image n of x into img (zero border of `pad`, channels padded to 4), and the byte sum
 * of every output's window into wsum (row oh at wsum + oh * ws): pixels' sums (vrmpy),
 * window rows' (KW shifted adds), windows' (KH aligned adds). */
static void build_image(const struct padded_job *j, int8_t *img, int32_t *psum, int32_t *hsum, int32_t *wsum, int n)
{
    const struct conv_shape *s = j->s;
    uint32_t bytes = (uint32_t)(j->hp * j->wp * 4);
    hvx_zero(img, bytes);
    const int8_t *src = j->x + (size_t)n * s->h * s->w * s->c;
    for (int h = 0; h < s->h; h++) {
        int8_t *dst = img + ((h + s->pad) * j->wp + s->pad) * 4;
        const int8_t *row = src + h * s->w * s->c;
        /* whole vectors in address order: what lands past the row's pixels is masked to
         * zeros (the border), or the next row's, written after */
        for (int x0 = 0; x0 < s->w; x0 += 32) {
            HVX_Vector v = spread_pixels(row + x0 * s->c, s->c, j->spread, j->keep);
            if (s->w - x0 < 32) v = Q6_V_vmux_QVV(Q6_Q_vsetq_R(4 * (uint32_t)(s->w - x0)), v, Q6_V_vzero());
            hvx_store_u(dst + x0 * 4, v);
        }
    }
    /* signed byte sums, 32 pixels a vector (the buffers are whole vectors long) */
    HVX_Vector ones = Q6_V_vsplat_R(0x01010101);
    const HVX_Vector *pix = (const HVX_Vector *)img;
    HVX_Vector *sum = (HVX_Vector *)psum;
    for (uint32_t i = 0; i < (bytes + HVX_BYTES - 1) / HVX_BYTES; i++) sum[i] = Q6_Vw_vrmpy_VbVb(pix[i], ones);
    /* locals: the stores below may alias *j and *s as far as the compiler knows */
    const int hp = j->hp, wp = j->wp, ws = j->ws, kw = s->kw, kh = s->kh, oh_n = s->oh, step = ws / 32;
    for (int r = 0; r < hp; r++)
        for (int x0 = 0; x0 < ws; x0 += 32) {
            const int32_t *p = psum + r * wp + x0;
            HVX_Vector acc = hvx_load_u(p);
            if (kw == 3)   /* the common window, without a loop of two */
                acc = Q6_Vw_vadd_VwVw(acc, Q6_Vw_vadd_VwVw(hvx_load_u(p + 1), hvx_load_u(p + 2)));
            else
                for (int t = 1; t < kw; t++) acc = Q6_Vw_vadd_VwVw(acc, hvx_load_u(p + t));
            *(HVX_Vector *)(hsum + r * ws + x0) = acc;
        }
    for (int oh = 0; oh < oh_n; oh++)
        for (int x0 = 0; x0 < ws; x0 += 32) {
            const HVX_Vector *h = (const HVX_Vector *)(hsum + oh * ws + x0);
            HVX_Vector acc = h[0];
            if (kh == 3)
                acc = Q6_Vw_vadd_VwVw(acc, Q6_Vw_vadd_VwVw(h[step], h[2 * step]));
            else
                for (int i = 1; i < kh; i++) acc = Q6_Vw_vadd_VwVw(acc, h[i * step]);
            *(HVX_Vector *)(wsum + oh * ws + x0) = acc;
        }
}

static int padded_share(struct dspt_ctx *tc, int t, void *arg)
{
    struct padded_job *j = arg;
    const struct conv_shape *s = j->s;
    int lo, hi, image = -1, k4 = s->kh * s->kw;
    dspt_share(tc, s->n * s->oh, 1, t, &lo, &hi);   /* thread t: output rows [lo, hi) */
    int n = lo / s->oh, oh = lo % s->oh;             /* divide once, then step */
    for (int r = lo; r < hi; r++) {
        if (n != image) { build_image(j, j->img[t], j->psum[t], j->hsum[t], j->wsum[t], n); image = n; }
        dspt_gemm_core_words(j->y + (size_t)r * s->ow * s->o, s->o, j->img[t] + oh * j->wp * 4, j->off, k4,
                             j->wsum[t] + oh * j->ws, j->bp, s->ow, s->o, j->accumulate);
        if (++oh == s->oh) { oh = 0; n++; }
    }
    return DSPT_OK;
}

int dspt_conv_padded(struct dspt_ctx *ctx, int32_t *y, const int8_t *x, const int8_t *w,
                     const struct conv_shape *s, int accumulate)
{
    struct padded_job j = {.x = x, .y = y, .s = s, .accumulate = accumulate};
    int taps = s->kh * s->kw, k = 4 * taps;
    j.wp = s->w + 2 * s->pad;
    j.hp = s->h + 2 * s->pad;
    j.ws = (s->ow + 31) & ~31;
    HVX_Vector *ctrl = dspt_scratch(ctx, HVX_BYTES);
    int8_t *wpad = dspt_scratch(ctx, (uint32_t)(s->o * k) + HVX_BYTES);
    int8_t *bp = dspt_scratch(ctx, dspt_packed_b_bytes(s->o, k));
    int32_t *off = dspt_scratch(ctx, (uint32_t)taps * 4);
    if (!ctrl || !wpad || !bp || !off) return DSPT_NO_SUPPORT;
    if (s->c < 4) dspt_spread_control((uint8_t *)ctrl, s->c, 4);
    j.spread = *ctrl;
    j.keep = Q6_V_vsplat_R((int)(0xFFFFFFFFu >> (8 * (4 - s->c))));
    for (int i = 0, q = 0; i < s->kh; i++)
        for (int t = 0; t < s->kw; t++) off[q++] = (i * j.wp + t) * 4;
    j.off = off;
    /* weights [O][KH][KW][C] -> [O][KH * KW][4]: up to 32 taps a vector, rows in address
     * order (a row's last vector spills into the next row, written after it) */
    for (int o = 0; o < s->o; o++)
        for (int q = 0; q < taps; q += 32)
            hvx_store_u(wpad + o * k + q * 4, spread_pixels(w + (o * taps + q) * s->c, s->c, j.spread, j.keep));
    dspt_pack_b(bp, wpad, s->o, k, k);
    j.bp = bp;
    uint32_t img_bytes = ((uint32_t)(j.hp * j.wp * 4) + 2 * HVX_BYTES - 1) & ~(uint32_t)(HVX_BYTES - 1);
    for (int t = 0; t < (int)ctx->threads; t++) {   /* each thread's image, sums, from its own scratch */
        struct dspt_ctx *tc = dspt_thread_ctx(ctx, t);
        if (!tc) return DSPT_NO_SUPPORT;
        j.img[t] = dspt_scratch(tc, img_bytes + HVX_BYTES);   /* + the tiles' reads past a row */
        j.psum[t] = dspt_scratch(tc, img_bytes + (uint32_t)(j.ws + 64) * 4);   /* + the window rows' reads past the last */
        j.hsum[t] = dspt_scratch(tc, (uint32_t)(j.hp * j.ws) * 4);
        j.wsum[t] = dspt_scratch(tc, (uint32_t)(s->oh * j.ws) * 4 + HVX_BYTES);   /* + the tiles' reads past */
        if (!j.img[t] || !j.psum[t] || !j.hsum[t] || !j.wsum[t]) return DSPT_NO_SUPPORT;
    }
    return dspt_run_shares(ctx, padded_share, &j);
}
