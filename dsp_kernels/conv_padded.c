/* conv_padded.c: forward convolution of 2-4 channel inputs (VGG's first conv: 3 -> 64)
 * as an implicit GEMM over a channel-padded image.
 *
 * conv.c copies an im2col row per output pixel (K = 27 bytes for 3x3x3) and sums each
 * row for the bias correction: with K this short, the copies and the sums cost more than
 * the products. Here each pixel of the zero-padded image is one word (its channels
 * padded to 4 with zeros: one vdelta spreads 32 pixels), so the im2col row of output
 * pixel (oh, ow) is the words at (oh + i, ow + j) for the KH x KW taps: the GEMM core
 * reads them in place (dspt_gemm_core_words: rows 4 bytes apart, tap q at a table
 * offset). K grows to 4 * KH * KW (36 for 27), paid in vrmpy, and no row is copied (with
 * 3 channels the last tap rides in the other taps' 4th bytes: 32, build_views). The
 * rows' byte sums come from the image too, once per image: one vrmpy per 32 pixels gives
 * each pixel's sum, KW shifted adds the window rows' sums, KH adds the windows'. Weights get the
 * same channel padding, then dspt_pack_b. Channels in the lanes, as in the core, so the
 * output is NHWC directly.
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "conv.h"
#include "conv_common.h"
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
    int wp, hp, accumulate;
    uint32_t img_bytes;               /* the padded image and the slack the tiles read */
    int fold, k4, view_vectors;       /* 3 channels: the last tap's bytes in the first 3 taps' 4th */
    int shift[3];                     /* view c: pixel p's 4th byte is channel c of pixel p + shift[c] */
    int8_t *img[DSPT_MAX_THREADS];    /* each thread's padded image: hp x wp words */
    int32_t *psum[DSPT_MAX_THREADS];  /* its pixels' byte sums, hp x wp (+ slack) */
    int32_t *hsum[DSPT_MAX_THREADS];  /* its window rows' sums, hp x wp */
    int32_t *wsum[DSPT_MAX_THREADS];  /* its windows' sums, oh x wp (+ slack) */
};

/* 32 pixels of C bytes from src -> 32 words (channels 0 .. C-1, then zeros) */
static inline HVX_Vector spread_pixels(const int8_t *src, int c, HVX_Vector ctrl, HVX_Vector keep)
{
    HVX_Vector v = hvx_load_u(src);   /* masked below */
    if (c < 4) v = Q6_V_vdelta_VV(v, ctrl);
    return Q6_V_vand_VV(v, keep);
}

/* Image n of x into img's interior (the zero border was written once, by the share's
 * first image: every image writes the same pixels), and the byte sum of every output's
 * window into wsum, flat over the padded positions (output (oh, ow) at oh * wp + ow):
 * pixels' sums (vrmpy with 1s), window rows' (KW shifted adds), windows' (KH adds of
 * rows wp apart). The positions past OW in a row get sums too, never read. */
static void build_image(const struct padded_job *j, int8_t *img, int32_t *psum, int32_t *hsum, int32_t *wsum, int n)
{
    /* locals: the stores below may alias *j and *s as far as the compiler knows */
    const struct conv_shape *s = j->s;
    const int c = s->c, w = s->w, h_n = s->h, pad = s->pad, wp = j->wp, kw = s->kw, kh = s->kh;
    const HVX_Vector spread = j->spread, keep = j->keep;
    const int8_t *src = j->x + (size_t)n * h_n * w * c;
    for (int h = 0; h < h_n; h++) {
        int8_t *dst = img + ((h + pad) * wp + pad) * 4;
        const int8_t *row = src + h * w * c;
        /* whole vectors in address order: what lands past the row's pixels is masked to
         * zeros (the border), or the next row's, written after */
        for (int x0 = 0; x0 < w; x0 += 32) {
            HVX_Vector v = spread_pixels(row + x0 * c, c, spread, keep);
            if (w - x0 < 32) v = Q6_V_vmux_QVV(Q6_Q_vsetq_R(4 * (uint32_t)(w - x0)), v, Q6_V_vzero());
            hvx_store_u(dst + x0 * 4, v);
        }
    }
    /* signed byte sums, 32 pixels a vector (the buffers are whole vectors long) */
    HVX_Vector ones = Q6_V_vsplat_R(0x01010101);
    const int pix_vectors = (j->hp * wp + 31) / 32, out_vectors = (s->oh * wp + 31) / 32;
    for (int i = 0; i < pix_vectors; i++)
        ((HVX_Vector *)psum)[i] = Q6_Vw_vrmpy_VbVb(((const HVX_Vector *)img)[i], ones);
    for (int i = 0; i < pix_vectors; i++) {
        const int32_t *p = psum + 32 * i;
        HVX_Vector acc = hvx_load_u(p);
        if (kw == 3)   /* the common window, without a loop of two */
            acc = Q6_Vw_vadd_VwVw(acc, Q6_Vw_vadd_VwVw(hvx_load_u(p + 1), hvx_load_u(p + 2)));
        else
            for (int t = 1; t < kw; t++) acc = Q6_Vw_vadd_VwVw(acc, hvx_load_u(p + t));
        ((HVX_Vector *)hsum)[i] = acc;
    }
    for (int i = 0; i < out_vectors; i++) {
        const int32_t *p = hsum + 32 * i;
        HVX_Vector acc = hvx_load_u(p);
        if (kh == 3)
            acc = Q6_Vw_vadd_VwVw(acc, Q6_Vw_vadd_VwVw(hvx_load_u(p + wp), hvx_load_u(p + 2 * wp)));
        else
            for (int r = 1; r < kh; r++) acc = Q6_Vw_vadd_VwVw(acc, hvx_load_u(p + r * wp));
        ((HVX_Vector *)wsum)[i] = acc;
    }
}

/* Three channels leave the 4th byte of every tap's word zero: the last tap's three bytes
 * go there instead, in the words of the first three taps, so K is 4 (KH KW - 1) (32 for
 * 3x3, not 36) and vrmpy does 8 steps a row, not 9. Tap c < 3 then reads view c, the
 * image with pixel p's 4th byte taken from channel c of pixel p + shift[c] (the window's
 * last tap, seen from tap c): one unaligned load (4th byte lined up) and a byte mux per
 * 32 pixels. Views follow the image in its buffer, img_bytes apart. The window sums do
 * not change: the row's bytes are the same 27. */
static void build_views(const struct padded_job *j, int8_t *img)
{
    const int vectors = j->view_vectors;   /* the image's positions, whole vectors */
    HVX_VectorPred fourth = Q6_Q_vand_VR(Q6_V_vsplat_R((int)0xFF000000u), -1);
    for (int c = 0; c < 3; c++) {
        HVX_Vector *view = (HVX_Vector *)(img + (c + 1) * j->img_bytes);
        const int8_t *from = img + 4 * j->shift[c] + c - 3;   /* channel c of p + shift at byte 4p + 3 */
        for (int i = 0; i < vectors; i++)
            view[i] = Q6_V_vmux_QVV(fourth, hvx_load_u(from + i * HVX_BYTES), ((const HVX_Vector *)img)[i]);
    }
}

static int padded_share(struct dspt_ctx *tc, int t, void *arg)
{
    struct padded_job *j = arg;
    const struct conv_shape *s = j->s;
    int lo, hi, k4 = j->k4;
    dspt_share(tc, s->n * s->oh, 1, t, &lo, &hi);   /* thread t: output rows [lo, hi) */
    if (lo < hi) hvx_zero(j->img[t], j->img_bytes);   /* the border, for every image */
    /* each image's rows of the share in one core call, a row a group */
    for (int r = lo; r < hi;) {
        int n = r / s->oh, oh = r % s->oh, rows = s->oh - oh < hi - r ? s->oh - oh : hi - r;
        build_image(j, j->img[t], j->psum[t], j->hsum[t], j->wsum[t], n);
        if (j->fold) build_views(j, j->img[t]);
        struct dspt_row_groups rg = {rows, j->wp * 4, s->ow * s->o, j->wp};
        dspt_gemm_core_words(j->y + (size_t)r * s->ow * s->o, s->o, j->img[t] + oh * j->wp * 4, j->off, k4,
                             j->wsum[t] + oh * j->wp, j->bp, s->ow, s->o, j->accumulate, &rg);
        r += rows;
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
    HVX_Vector *ctrl = dspt_scratch(ctx, HVX_BYTES);
    int8_t *wpad = dspt_scratch(ctx, (uint32_t)(s->o * k) + HVX_BYTES);
    int8_t *bp = dspt_scratch(ctx, dspt_packed_b_bytes(s->o, k));
    int32_t *off = dspt_scratch(ctx, (uint32_t)taps * 4);
    if (!ctrl || !wpad || !bp || !off) return DSPT_NO_SUPPORT;
    if (s->c < 4) dspt_spread_control((uint8_t *)ctrl, s->c, 4);
    j.spread = *ctrl;
    j.keep = Q6_V_vsplat_R((int)(0xFFFFFFFFu >> (8 * (4 - s->c))));
    j.fold = s->c == 3 && taps >= 4 && j.hp * j.wp <= MAX_PIXELS / 4;   /* the image and 3 views */
    j.k4 = j.fold ? taps - 1 : taps;
    uint32_t pix = (uint32_t)(j.hp * j.wp + 31) / 32 * 32 + 32, outs = (uint32_t)(s->oh * j.wp + 31) / 32 * 32 + 32;
    int last = (s->kh - 1) * j.wp + s->kw - 1;   /* the window's last tap, in pixels from its first */
    /* whole vectors of positions, + one: the tiles read up to 7 rows past a group's last;
     * folded, + the views' loads past the image (a last tap's shift and a vector) */
    j.img_bytes = j.fold ? (4 * (pix + (uint32_t)last) + 2 * HVX_BYTES - 1) & ~(uint32_t)(HVX_BYTES - 1) : 4 * pix;
    j.view_vectors = (int)pix / 32;
    for (int i = 0, q = 0; i < s->kh; i++)
        for (int t = 0; t < s->kw; t++, q++) {
            off[q] = (i * j.wp + t) * 4;
            if (j.fold && q < 3) {
                j.shift[q] = last - (i * j.wp + t);
                off[q] += (q + 1) * (int)j.img_bytes;   /* view q */
            }
        }
    j.off = off;
    /* weights [O][KH][KW][C] -> [O][KH * KW][4]: up to 32 taps a vector, rows in address
     * order (a row's last vector spills into the next row, written after it); folded, the
     * last tap's channel c goes to the 4th byte of tap c and the rows are packed K short */
    for (int o = 0; o < s->o; o++) {
        for (int q = 0; q < taps; q += 32)
            hvx_store_u(wpad + o * k + q * 4, spread_pixels(w + (o * taps + q) * s->c, s->c, j.spread, j.keep));
        if (j.fold)
            for (int c = 0; c < 3; c++) wpad[o * k + 4 * c + 3] = w[(o * taps + taps - 1) * 3 + c];
    }
    dspt_pack_b(bp, wpad, s->o, 4 * j.k4, k);
    j.bp = bp;
    for (int t = 0; t < (int)ctx->threads; t++) {   /* each thread's image, sums, from its own scratch */
        struct dspt_ctx *tc = dspt_thread_ctx(ctx, t);
        if (!tc) return DSPT_NO_SUPPORT;
        j.img[t] = dspt_scratch(tc, j.fold ? 4 * j.img_bytes : j.img_bytes);
        j.psum[t] = dspt_scratch(tc, 4 * (pix + (uint32_t)s->kw + 32));   /* + the window rows' reads past the last */
        j.hsum[t] = dspt_scratch(tc, 4 * (pix + 32));   /* + the past-the-end positions' reads (sums never used) */
        j.wsum[t] = dspt_scratch(tc, 4 * outs);
        if (!j.img[t] || !j.psum[t] || !j.hsum[t] || !j.wsum[t]) return DSPT_NO_SUPPORT;
    }
    return dspt_run_shares(ctx, padded_share, &j);
}
