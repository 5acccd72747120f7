/* dwconv_pixels.c: depthwise forward and backward data on HVX as each output pixel's own
 * list of taps, four taps in each vrmpy word ("dw_pixel_quads").
 *
 * An output pixel sums, per channel, the products of the taps whose input lies inside the
 * image (forward: x at (oh*s + i - p, ow*s + j - p); backward data: err at
 * ((h + p - i) / s, (w + p - j) / s) where s divides both). So the list holds only real
 * products: a pixel of a 2 x 2 image meets 4 of a 3 x 3 kernel's 9 taps, of a 1 x 1 image
 * the centre alone, a dx pixel of stride 2 its own class's 1, 2 or 4. The taps go 4 at a
 * time into vrmpy's words: the 128-channel blocks of the 4 inputs interleaved (lane l of
 * word vector q holds channel 32q + l of the 4 taps, two vshuff stages) and one vrmpy per
 * vector with the 4 taps' weights interleaved the same way, so the sums come out as words
 * in channel order (no widening, no reorder) and a group short of 4 taps is padded with
 * zero weights. Nothing is copied: inputs are read where they lie (no zero border: the
 * border's taps are not in the list).
 *
 * The weights depend on the pixel's taps alone, so they are built once per pixel and
 * channel block and held in registers while every image of the thread's share passes
 * (work is split by images, threads.h). What it does not do well: a small C wastes the
 * lanes past it (a vector is one pixel's block), and a large image builds weights per
 * pixel; dwconv.c's column quads keep those (dspt_dw_pixels_fit says which).
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "dwconv.h"
#include "threads.h"

#define PX_MAX_AXIS 8    /* kernels up to 8 x 8 */
#define PX_MAX_TAPS (PX_MAX_AXIS * PX_MAX_AXIS)
#define PX_MAX_OUT 64    /* output rows and columns (the path is for small images) */

struct px_job {
    const struct dw_shape *s;
    const int8_t *src, *w;   /* x (forward) or err (backward data); w tap-major (w[t, c]) */
    int32_t *out;
    int bwd, accumulate;
    int src_h, src_w, out_h, out_w;
    int16_t rows[PX_MAX_OUT][PX_MAX_AXIS][2], cols[PX_MAX_OUT][PX_MAX_AXIS][2];   /* axis_taps */
    int8_t rcnt[PX_MAX_OUT], ccnt[PX_MAX_OUT];
    const HVX_Vector *wsrc;   /* source_share's interleaved weights, built once a call (or NULL) */
    const HVX_Vector *wpix;   /* pixel_share's: pixel p, block cb at (p * blocks + cb) * 4 * maxg (or NULL) */
    int maxg;
};

/* Along one axis, output coordinate o meets the kernel rows (or columns) k whose input
 * coordinate is inside: tab[o] lists (input coordinate, k), cnt[o] of them. Forward: input
 * o*s + k - p; backward data: (o + p - k) / s where s divides it. Built once a call, so
 * the pixels' loops never divide (Hexagon has no divide instruction). */
static void axis_taps(int outn, int inn, int k, int stride, int pad, int bwd, int16_t (*tab)[PX_MAX_AXIS][2],
                      int8_t *cnt)
{
    for (int o = 0; o < outn; o++) {
        int n = 0;
        for (int i = 0; i < k; i++) {
            int at = o * stride + i - pad;
            if (bwd) {
                int num = o + pad - i;
                if (num < 0 || num % stride) continue;
                at = num / stride;
            }
            if (at < 0 || at >= inn) continue;
            tab[o][n][0] = (int16_t)at;
            tab[o][n++][1] = (int16_t)i;
        }
        cnt[o] = (int8_t)n;
    }
}

/* Output pixel (oy, ox)'s taps whose input is inside: input byte offsets (pixel * C) and
 * tap indices; returns how many, the list padded to a multiple of 4 with the first tap's
 * input and tap -1 (a zero weight). */
static int pixel_taps(const struct px_job *J, int oy, int ox, int32_t *off, int32_t *tap)
{
    const int C = J->s->c, kw = J->s->kw;
    int n = 0;
    for (int a = 0; a < J->rcnt[oy]; a++)
        for (int b = 0; b < J->ccnt[ox]; b++) {
            off[n] = (J->rows[oy][a][0] * J->src_w + J->cols[ox][b][0]) * C;
            tap[n++] = J->rows[oy][a][1] * kw + J->cols[ox][b][1];
        }
    int real = n;
    while (n % 4) {
        off[n] = real ? off[0] : 0;
        tap[n++] = -1;
    }
    return real;
}

/* The interleaved weights of each group of 4 taps, the block at channel c0: 4 vectors a group. */
static void pixel_weights(const struct px_job *J, const int32_t *tap, int groups, int c0, HVX_Vector *wq)
{
    const int C = J->s->c;
    for (int g = 0; g < groups; g++) {
        HVX_Vector t[4];
        for (int k = 0; k < 4; k++)
            t[k] = tap[4 * g + k] < 0 ? Q6_V_vzero() : hvx_load_u(J->w + tap[4 * g + k] * C + c0);
        dw_interleave4(wq + 4 * g, t[0], t[1], t[2], t[3]);
    }
}

/* One pixel's block over `n` images: `in` and `out` at the first image's block, steps
 * `inimg` and `outimg` bytes and words. G groups (compile-time: weights in registers; 0:
 * `groups`, weights from wq). WHOLE: 128 words kept and nothing to add to (no branches), 2: on a vector boundary. */
static inline __attribute__((always_inline)) void pixel_core(const int G, const int WHOLE, const int8_t *in,
                                                             int32_t *out, int n, int inimg, int outimg,
                                                             const int32_t *off, const HVX_Vector *wq, int groups,
                                                             int valid, int acc)
{
    /* G = -1: one group holding one real tap (a 1 x 1 image's centre): its 3 other slots
     * weigh zero, so they take a zero vector, not 3 more loads of the first tap's input */
    const int ONE = G < 0, GG = G < 0 ? 1 : G;
    const int ng = GG ? GG : groups;
    const HVX_Vector zero = Q6_V_vzero();
    HVX_Vector W[GG ? 4 * GG : 1];
    int32_t O[GG ? 4 * GG : 1];
    for (int k = 0; k < 4 * GG; k++) { W[k] = wq[k]; O[k] = off[k]; }
    for (int img = 0; img < n; img++, in += inimg, out += outimg) {
        HVX_Vector a[4], x[4];
        for (int g = 0; g < ng; g++) {
            const int32_t *o = GG ? O + 4 * g : off + 4 * g;
            dw_interleave4(x, hvx_load_u(in + o[0]), ONE ? zero : hvx_load_u(in + o[1]),
                           ONE ? zero : hvx_load_u(in + o[2]), ONE ? zero : hvx_load_u(in + o[3]));
            for (int q = 0; q < 4; q++) {
                HVX_Vector w = GG ? W[4 * g + q] : wq[4 * g + q];
                a[q] = g ? Q6_Vw_vrmpyacc_VwVbVb(a[q], x[q], w) : Q6_Vw_vrmpy_VbVb(x[q], w);
            }
        }
        if (WHOLE == 2) {   /* C a multiple of 32: every block's words start on a vector */
            for (int q = 0; q < 4; q++) ((HVX_Vector *)out)[q] = a[q];
            continue;
        }
        if (WHOLE) {
            for (int q = 0; q < 4; q++) dw_store_u(out + 32 * q, a[q]);
            continue;
        }
        for (int q = 0; q < 4 && 32 * q < valid; q++) {
            int words = valid - 32 * q < 32 ? valid - 32 * q : 32;
            HVX_Vector r = acc ? Q6_Vw_vadd_VwVw(a[q], hvx_load_u(out + 32 * q)) : a[q];
            if (words == 32) hvx_store_u(out + 32 * q, r);
            else hvx_store_bytes(out + 32 * q, r, (uint32_t)words * 4);
        }
    }
}

#define PIXEL_GROUPS(WHOLE, ...)                                                    \
    do {                                                                            \
        if (groups == 1 && real == 1) pixel_core(-1, WHOLE, __VA_ARGS__);           \
        else if (groups == 1) pixel_core(1, WHOLE, __VA_ARGS__);                    \
        else if (groups == 2) pixel_core(2, WHOLE, __VA_ARGS__);                    \
        else if (groups == 3) pixel_core(3, WHOLE, __VA_ARGS__);                    \
        else pixel_core(0, WHOLE, __VA_ARGS__);                                     \
    } while (0)

/* Sources of at most 4 pixels (a 2 x 2 or 1 x 1 image; err of backward data from one):
 * every output pixel reads the same ones, so each image's pixels are interleaved once into
 * the words (slot k: source pixel k) and met by up to NP output pixels at once, each with
 * its own interleaved weights (slot k: the tap joining it to source pixel k, or zero). */
static inline __attribute__((always_inline)) void source_core(const int NP, const int WHOLE, const int8_t *in,
                                                              int32_t *out, int n, int inimg, int outimg, int pixels,
                                                              const int32_t *src, int C, const HVX_Vector *wq,
                                                              int valid, int acc)
{
    const int np = NP ? NP : pixels;
    HVX_Vector W[4 * 4];
    for (int k = 0; k < 4 * np; k++) W[k] = wq[k];
    for (int img = 0; img < n; img++, in += inimg, out += outimg) {
        HVX_Vector x[4];
        dw_interleave4(x, hvx_load_u(in + src[0]), hvx_load_u(in + src[1]), hvx_load_u(in + src[2]),
                       hvx_load_u(in + src[3]));
        for (int p = 0; p < np; p++) {
            int32_t *o = out + p * C;
            HVX_Vector a[4];
            for (int q = 0; q < 4; q++) a[q] = Q6_Vw_vrmpy_VbVb(x[q], W[4 * p + q]);
            if (WHOLE == 2) {
                for (int q = 0; q < 4; q++) ((HVX_Vector *)o)[q] = a[q];
                continue;
            }
            for (int q = 0; q < 4 && 32 * q < valid; q++) {
                int words = valid - 32 * q < 32 ? valid - 32 * q : 32;
                HVX_Vector r = acc ? Q6_Vw_vadd_VwVw(a[q], hvx_load_u(o + 32 * q)) : a[q];
                if (words == 32) hvx_store_u(o + 32 * q, r);
                else hvx_store_bytes(o + 32 * q, r, (uint32_t)words * 4);
            }
        }
    }
}

#define SOURCE_PIXELS(WHOLE, ...)                                                   \
    do {                                                                            \
        if (np == 4) source_core(4, WHOLE, __VA_ARGS__);                            \
        else if (np == 2) source_core(2, WHOLE, __VA_ARGS__);                       \
        else if (np == 1) source_core(1, WHOLE, __VA_ARGS__);                       \
        else source_core(0, WHOLE, __VA_ARGS__);                                    \
    } while (0)

/* The interleaved weights of output pixels p0 .. p0 + np - 1 (slot k: the tap joining the
 * pixel to source pixel k, or zero) for the block at c0: 4 vectors a pixel. */
static void source_weights(const struct px_job *J, int p0, int np, int c0, HVX_Vector *wq)
{
    const int C = J->s->c, kw = J->s->kw;
    int oy = 0, ox = p0;
    while (ox >= J->out_w) { ox -= J->out_w; oy++; }   /* no divide (Hexagon has none) */
    for (int p = 0; p < np; p++) {
        int tk[4] = {-1, -1, -1, -1};
        for (int a = 0; a < J->rcnt[oy]; a++)
            for (int b = 0; b < J->ccnt[ox]; b++)
                tk[J->rows[oy][a][0] * J->src_w + J->cols[ox][b][0]] = J->rows[oy][a][1] * kw + J->cols[ox][b][1];
        HVX_Vector t[4];
        for (int k = 0; k < 4; k++) t[k] = tk[k] < 0 ? Q6_V_vzero() : hvx_load_u(J->w + tk[k] * C + c0);
        dw_interleave4(wq + 4 * p, t[0], t[1], t[2], t[3]);
        if (++ox == J->out_w) { ox = 0; oy++; }
    }
}

/* source_share's weights of every block and pixel, 16 vectors a block and group of 4
 * pixels, once a call in the calling thread: built in each share they were most of a
 * 2 x 2 layer's packets (4 threads each building them all: 2 x 2 x 576, batch 64, 9.8 K of
 * 17.5 K packets). NULL when the scratch cannot hold them (each share builds its own). */
static const HVX_Vector *source_weights_all(struct dspt_ctx *ctx, const struct px_job *J)
{
    const int C = J->s->c, pixels = J->out_h * J->out_w, groups = (pixels + 3) / 4;
    const int blocks = (C + HVX_BYTES - 1) / HVX_BYTES;
    if ((int64_t)blocks * groups * 16 * HVX_BYTES > 256 * 1024) return 0;
    HVX_Vector *wq = dspt_scratch(ctx, (uint32_t)(blocks * groups * 16 * HVX_BYTES));
    if (!wq) return 0;
    for (int cb = 0; cb < blocks; cb++)
        for (int g = 0; g < groups; g++) {
            int p0 = 4 * g, np = pixels - p0 < 4 ? pixels - p0 : 4;
            source_weights(J, p0, np, dw_block_start(cb, C, J->accumulate), wq + (cb * groups + g) * 16);
        }
    return wq;
}

/* pixel_share's weights likewise, once a call: every output pixel's groups for every block
 * (1 x 1 x 960: 8 blocks, which each of 4 shares had built). NULL past 256 KB. */
static const HVX_Vector *pixel_weights_all(struct dspt_ctx *ctx, struct px_job *J)
{
    const int C = J->s->c, pixels = J->out_h * J->out_w, blocks = (C + HVX_BYTES - 1) / HVX_BYTES;
    J->maxg = (J->s->kh * J->s->kw + 3) / 4;
    int64_t bytes = (int64_t)pixels * blocks * J->maxg * 4 * HVX_BYTES;
    if (bytes > 256 * 1024) return 0;
    HVX_Vector *wq = dspt_scratch(ctx, (uint32_t)bytes);
    if (!wq) return 0;
    int32_t off[PX_MAX_TAPS + 3], tap[PX_MAX_TAPS + 3];
    for (int oy = 0, p = 0; oy < J->out_h; oy++)
        for (int ox = 0; ox < J->out_w; ox++, p++) {
            int groups = (pixel_taps(J, oy, ox, off, tap) + 3) / 4;
            for (int cb = 0; cb < blocks; cb++)
                pixel_weights(J, tap, groups, dw_block_start(cb, C, J->accumulate),
                              wq + (p * blocks + cb) * 4 * J->maxg);
        }
    return wq;
}

/* Images [lo, hi) when the source has at most 4 pixels: output pixels 4 at a time. */
static int source_share(const struct px_job *J, int lo, int hi, int aligned)
{
    const int C = J->s->c, pixels = J->out_h * J->out_w, acc = J->accumulate;
    const int inimg = J->src_h * J->src_w * C, outimg = pixels * C, sp = J->src_h * J->src_w;
    int32_t src[4];
    for (int k = 0; k < 4; k++) src[k] = k < sp ? k * C : 0;   /* slots past the source: any pixel, zero weights */
    HVX_Vector wq[16];
    for (int cb = 0; cb * HVX_BYTES < C; cb++) {
        int c0 = dw_block_start(cb, C, acc), valid = C - c0 < HVX_BYTES ? C - c0 : HVX_BYTES;
        for (int p0 = 0; p0 < pixels; p0 += 4) {
            int np = pixels - p0 < 4 ? pixels - p0 : 4;
            const HVX_Vector *W = wq;
            if (J->wsrc) W = J->wsrc + (cb * ((pixels + 3) / 4) + p0 / 4) * 16;
            else source_weights(J, p0, np, c0, wq);
            const int8_t *in = J->src + (size_t)lo * inimg + c0;
            int32_t *out = J->out + (size_t)lo * outimg + p0 * C + c0;
            if (valid == HVX_BYTES && !acc && aligned && c0 % 32 == 0)
                SOURCE_PIXELS(2, in, out, hi - lo, inimg, outimg, np, src, C, W, valid, acc);
            else
                SOURCE_PIXELS(0, in, out, hi - lo, inimg, outimg, np, src, C, W, valid, acc);
        }
    }
    return DSPT_OK;
}

static int pixel_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct px_job *J = job;
    const struct dw_shape *s = J->s;
    const int C = s->c, inimg = J->src_h * J->src_w * C, outimg = J->out_h * J->out_w * C, acc = J->accumulate;
    int lo, hi, aligned = C % 32 == 0 && ((uintptr_t)J->out & (HVX_BYTES - 1)) == 0;
    const int blocks = (C + HVX_BYTES - 1) / HVX_BYTES;
    dspt_share(tc, s->n, 1, t, &lo, &hi);
    if (lo >= hi) return DSPT_OK;
    int32_t off[PX_MAX_TAPS + 3], tap[PX_MAX_TAPS + 3];
    HVX_Vector wq[PX_MAX_TAPS + 3];
    if (J->src_h * J->src_w <= 4 && J->out_h * J->out_w > 1) return source_share(J, lo, hi, aligned);
    for (int oy = 0; oy < J->out_h; oy++)
        for (int ox = 0; ox < J->out_w; ox++) {
            int real = pixel_taps(J, oy, ox, off, tap), groups = (real + 3) / 4;
            for (int cb = 0; cb * HVX_BYTES < C; cb++) {
                /* not accumulating, a ragged C > 128's last block overlaps the one before
                 * (dw_block_start): whole-vector stores instead of masked ones */
                int c0 = dw_block_start(cb, C, acc), valid = C - c0 < HVX_BYTES ? C - c0 : HVX_BYTES;
                int32_t *out = J->out + (size_t)lo * outimg + (oy * J->out_w + ox) * C + c0;
                if (!real) {   /* no tap inside (stride > kernel): zeros, or nothing to add */
                    for (int n = lo; !acc && n < hi; n++, out += outimg) hvx_zero(out, (uint32_t)valid * 4);
                    continue;
                }
                const int8_t *in = J->src + (size_t)lo * inimg + c0;
                const HVX_Vector *W = wq;
                if (J->wpix) W = J->wpix + ((oy * J->out_w + ox) * blocks + cb) * 4 * J->maxg;
                else pixel_weights(J, tap, groups, c0, wq);
                if (valid == HVX_BYTES && !acc && aligned && c0 % 32 == 0)
                    PIXEL_GROUPS(2, in, out, hi - lo, inimg, outimg, off, W, groups, valid, acc);
                else if (valid == HVX_BYTES && !acc)
                    PIXEL_GROUPS(1, in, out, hi - lo, inimg, outimg, off, W, groups, valid, acc);
                else
                    PIXEL_GROUPS(0, in, out, hi - lo, inimg, outimg, off, W, groups, valid, acc);
            }
        }
    return DSPT_OK;
}

int dspt_dw_pixels_fit(const struct dw_shape *s, int bwd)
{
    int oh = bwd ? s->h : s->oh, ow = bwd ? s->w : s->ow, sources = bwd ? s->oh * s->ow : s->h * s->w;
    if (s->kh > PX_MAX_AXIS || s->kw > PX_MAX_AXIS || oh > PX_MAX_OUT || ow > PX_MAX_OUT) return 0;
    /* a vector is one pixel's block: C well under 128 leaves lanes idle */
    if (s->c < 96) return 0;
    /* measured on MobileNetV2's shapes (bench/bench_dsp.py): a source of 4 pixels or fewer
     * (most taps on the border, the interleave shared), or a forward of stride 2 onto 16
     * outputs or fewer; the column quads and the classes win on the larger images */
    return sources <= 4 || (!bwd && s->stride > 1 && oh * ow <= 16);
}

int dspt_dw_pixels(struct dspt_ctx *ctx, const struct dw_shape *s, const int8_t *src, const int8_t *w, int32_t *out,
                   int bwd, int accumulate)
{
    struct px_job J;   /* fields set one by one: an initializer would zero the tap tables (4 KB) first */
    J.s = s;
    J.src = src;
    J.w = w;
    J.out = out;
    J.bwd = bwd;
    J.accumulate = accumulate;
    J.src_h = bwd ? s->oh : s->h;
    J.src_w = bwd ? s->ow : s->w;
    J.out_h = bwd ? s->h : s->oh;
    J.out_w = bwd ? s->w : s->ow;
    axis_taps(J.out_h, J.src_h, s->kh, s->stride, s->pad, bwd, J.rows, J.rcnt);
    axis_taps(J.out_w, J.src_w, s->kw, s->stride, s->pad, bwd, J.cols, J.ccnt);
    int sources = J.src_h * J.src_w <= 4 && J.out_h * J.out_w > 1;
    J.wsrc = sources ? source_weights_all(ctx, &J) : 0;
    J.wpix = sources ? 0 : pixel_weights_all(ctx, &J);
    return dspt_run_shares(ctx, pixel_share, &J);
}
