/* dwconv_wgrad_pairs.c: the depthwise weight gradient of tiny images, every (output,
 * input) pixel pair a register.
 *
 * dw[i, j, c] = sum over (n, oh, ow) of err[n, oh, ow, c] * x[n, oh*s + i - p, ow*s + j - p, c]
 *
 * MobileNetV2's last layers run on 2 x 2 and 1 x 1 images: at most 4 output and 4 input
 * pixels, and every output's window holds every input pixel (a 1 x 1 image meets the
 * centre tap alone, a 2 x 2 one 4 of 9 taps per output). dwconv_wgrad.c's zero-bordered
 * image quads spend most of their vrmpy there on the border (8 of 9 at 1 x 1) and their
 * packets on per-image-group setup, partial sums and their join. Here each pair (output
 * o, input q) is a tap of its own, t = q - o*s + p, so the sums of a pair over the whole
 * batch stay in one register: four images interleaved into each word as in
 * dwconv_wgrad.c, the NO x NI pairs (at most 16) meet once per group of 4 images, and each
 * pair's sum is added to its tap once a call. The threads split the channels (blocks of
 * 128), not the images: no partial dw, no join, and a thread interleaves only its
 * channels.
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "dwconv.h"
#include "dwconv_wgrad.h"
#include "threads.h"

#define PAIRS_MAX_PIXELS 4
#define PAIRS_GROUPS 64   /* groups of 4 images interleaved per pass: 64 x 8 x 512 bytes at most */

int dspt_dw_wgrad_pairs_fit(const struct dw_shape *s)
{
    if (s->h * s->w > PAIRS_MAX_PIXELS || s->oh * s->ow > PAIRS_MAX_PIXELS) return 0;
    /* every input row and column inside every output's window: h - oh*s + p in [0, kh) */
    return s->pad - (s->oh - 1) * s->stride >= 0 && s->h - 1 + s->pad < s->kh &&
           s->pad - (s->ow - 1) * s->stride >= 0 && s->w - 1 + s->pad < s->kw;
}

struct pairs_job {
    const struct dw_shape *s;
    const int8_t *err, *x;
    int32_t *dw;
    int accumulate, groups_per_pass;
    int32_t tap_at[PAIRS_MAX_PIXELS * PAIRS_MAX_PIXELS];   /* pair (o, q): tap t's words, t * C */
    int8_t *buf[DSPT_MAX_THREADS], *zeros[DSPT_MAX_THREADS];
};

/* The `pixels` pixels of groups [g0, g0 + ng) of src (images of `pixels` x c bytes),
 * channel block `block`: group g's pixel q to dst[(g - g0) * gstride + 4 q .. + 3]. Whole
 * groups run down the batch a pixel at a time; images past n read `zeros`. */
static void pairs_fill_one(HVX_Vector *dst, int gstride, const int8_t *src, int pixels, int c, int n, int g0, int ng,
                           int block, const int8_t *zeros)
{
    const int image = pixels * c, whole = n / 4 - g0 < ng ? n / 4 - g0 : ng, gbytes = gstride * HVX_BYTES;
    for (int q = 0; q < pixels; q++) {   /* lanes past C: read, never stored to dw */
        const int8_t *p = src + (size_t)4 * g0 * image + q * c + block * HVX_BYTES;
        HVX_Vector *d = dst + 4 * q;
        if (whole >= 3 && ((uintptr_t)p & (HVX_BYTES - 1)) == 0 && image % HVX_BYTES == 0) {
            /* the groups as dw_fill_packets' steps, 4 images apart, in one run */
            dw_fill_packets((int8_t *)d, p, image, 4 * image, whole, NULL, 0, gbytes, gbytes);
            continue;
        }
        for (int g = 0; g < whole; g++, p += 4 * image, d += gstride)
            dw_interleave4(d, hvx_load_u(p), hvx_load_u(p + image), hvx_load_u(p + 2 * image),
                           hvx_load_u(p + 3 * image));
    }
    if (whole == ng) return;
    const int8_t *im[4];   /* the last group, ragged */
    int step[4];
    for (int k = 0; k < 4; k++) {
        int img = 4 * (g0 + whole) + k;
        im[k] = img < n ? src + (size_t)img * image + block * HVX_BYTES : zeros;
        step[k] = img < n ? c : 0;
    }
    for (int q = 0; q < pixels; q++)
        dw_interleave4(dst + whole * gstride + 4 * q, hvx_load_u(im[0] + q * step[0]),
                       hvx_load_u(im[1] + q * step[1]), hvx_load_u(im[2] + q * step[2]),
                       hvx_load_u(im[3] + q * step[3]));
}

/* Groups [g0, g0 + ng) of one 128-channel block into buf: group g, pixel q (x's NI, then
 * err's NO) at vectors ((g - g0) * np + q) * 4 .. + 3, 32 channels x 4 images each. */
static void pairs_fill(HVX_Vector *buf, const struct dw_shape *s, const int8_t *x, const int8_t *err, int block,
                       int g0, int ng, const int8_t *zeros)
{
    const int ni = s->h * s->w, no = s->oh * s->ow, np = ni + no;
    pairs_fill_one(buf, np * 4, x, ni, s->c, s->n, g0, ng, block, zeros);
    pairs_fill_one(buf + ni * 4, np * 4, err, no, s->c, s->n, g0, ng, block, zeros);
}

/* dw[t, 32 channels at ch] += v for `words` of them (1..32). */
static inline void pairs_add(int32_t *dst, HVX_Vector v, int words)
{
    if (words == 32) hvx_store_u(dst, Q6_Vw_vadd_VwVw(v, hvx_load_u(dst)));
    else hvx_store_bytes(dst, Q6_Vw_vadd_VwVw(v, hvx_load_bytes(dst, (uint32_t)words * 4)), (uint32_t)words * 4);
}

/* Sub-block k of the interleaved groups: the NO x NI pair sums over ng groups, then each
 * added to its tap's words. NI, NO are constants at each call, so the sums stay in registers. */
static inline __attribute__((always_inline)) void pairs_sum(const int NI, const int NO, const HVX_Vector *buf,
                                                            int ng, int k, const int32_t *tap_at, int32_t *dw,
                                                            int words)
{
    HVX_Vector acc[NO][NI];
    for (int o = 0; o < NO; o++)
        for (int q = 0; q < NI; q++) acc[o][q] = Q6_V_vzero();
    const int np = NI + NO;
    for (int g = 0; g < ng; g++) {
        const HVX_Vector *v = buf + g * np * 4 + k;
        HVX_Vector xv[NI], ev[NO];
        for (int q = 0; q < NI; q++) xv[q] = v[4 * q];
        for (int o = 0; o < NO; o++) ev[o] = v[4 * (NI + o)];
        for (int o = 0; o < NO; o++)
            for (int q = 0; q < NI; q++)   /* plain vrmpy and vadd: two vrmpy share a packet, two vrmpyacc never */
                acc[o][q] = Q6_Vw_vadd_VwVw(acc[o][q], Q6_Vw_vrmpy_VbVb(xv[q], ev[o]));
    }
    for (int o = 0; o < NO; o++)
        for (int q = 0; q < NI; q++) pairs_add(dw + tap_at[o * NI + q], acc[o][q], words);
}

#define PAIRS_CASE(ni, no) \
    case (ni) * 8 + (no): pairs_sum(ni, no, buf, ng, k, tap_at, dw + ch, words); break;

/* dw's words of pair (o, q) (o * NI + q) start at dw + tap_at[o * NI + q]. */
static void pairs_block(const struct dw_shape *s, const HVX_Vector *buf, int ng, int block, const int32_t *tap_at,
                        int32_t *dw)
{
    for (int k = 0; k < 4; k++) {
        int ch = block * HVX_BYTES + 32 * k, words = s->c - ch < 32 ? s->c - ch : 32;
        if (words <= 0) return;
        switch (s->h * s->w * 8 + s->oh * s->ow) {
            PAIRS_CASE(1, 1) PAIRS_CASE(1, 2) PAIRS_CASE(1, 3) PAIRS_CASE(1, 4)
            PAIRS_CASE(2, 1) PAIRS_CASE(2, 2) PAIRS_CASE(2, 3) PAIRS_CASE(2, 4)
            PAIRS_CASE(3, 1) PAIRS_CASE(3, 2) PAIRS_CASE(3, 3) PAIRS_CASE(3, 4)
            PAIRS_CASE(4, 1) PAIRS_CASE(4, 2) PAIRS_CASE(4, 3) PAIRS_CASE(4, 4)
        }
    }
}

static int pairs_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct pairs_job *J = job;
    const struct dw_shape *s = J->s;
    int lo, hi, groups = (s->n + 3) / 4, taps = s->kh * s->kw;
    dspt_share(tc, (s->c + HVX_BYTES - 1) / HVX_BYTES, 1, t, &lo, &hi);
    if (lo < hi) hvx_zero(J->zeros[t], 2 * HVX_BYTES);
    for (int b = lo; b < hi; b++) {
        int ch = b * HVX_BYTES, words = s->c - ch < HVX_WORDS * 4 ? s->c - ch : HVX_WORDS * 4;
        if (!J->accumulate)   /* the taps no pair meets stay zero; the others add onto zero */
            for (int tap = 0; tap < taps; tap++)
                for (int w0 = 0; w0 < words; w0 += 32)
                    hvx_store_bytes(J->dw + tap * s->c + ch + w0, Q6_V_vzero(),
                                    (uint32_t)(words - w0 < 32 ? words - w0 : 32) * 4);
        for (int g0 = 0; g0 < groups; g0 += J->groups_per_pass) {
            int ng = groups - g0 < J->groups_per_pass ? groups - g0 : J->groups_per_pass;
            pairs_fill((HVX_Vector *)J->buf[t], s, J->x, J->err, b, g0, ng, J->zeros[t]);
            pairs_block(s, (const HVX_Vector *)J->buf[t], ng, b, J->tap_at, J->dw);
        }
    }
    return DSPT_OK;
}

int dspt_dw_wgrad_pairs(struct dspt_ctx *ctx, const struct dw_shape *s, const int8_t *err, const int8_t *x,
                        int32_t *dw, int accumulate)
{
    int groups = (s->n + 3) / 4, np = s->h * s->w + s->oh * s->ow;
    struct pairs_job J = {.s = s, .err = err, .x = x, .dw = dw, .accumulate = accumulate,
                          .groups_per_pass = groups < PAIRS_GROUPS ? groups : PAIRS_GROUPS};
    const int ni = s->h * s->w, no = s->oh * s->ow;
    for (int o = 0; o < no; o++)
        for (int q = 0; q < ni; q++) {
            int i = q / s->w - (o / s->ow) * s->stride + s->pad, j = q % s->w - (o % s->ow) * s->stride + s->pad;
            J.tap_at[o * ni + q] = (i * s->kw + j) * s->c;
        }
    for (int t = 0; t < (int)ctx->threads; t++) {   /* each thread's buffers, from its own scratch */
        struct dspt_ctx *tc = dspt_thread_ctx(ctx, t);
        if (!tc) return DSPT_NO_SUPPORT;
        J.buf[t] = dspt_scratch(tc, (uint32_t)J.groups_per_pass * np * 4 * HVX_BYTES);
        J.zeros[t] = dspt_scratch(tc, 2 * HVX_BYTES);
        if (!J.buf[t] || !J.zeros[t]) return DSPT_NO_SUPPORT;
    }
    return dspt_run_shares(ctx, pairs_share, &J);
}
