/* conv_pointwise.c: backward data of 1 x 1 convolutions of stride s > 1 (no padding: a
 * ResNet's downsampling shortcut) as GEMMs on err's pixels where they lie, no gather and no
 * col2im ("pointwise_strided"); and the weight gradient of 1 x 1, stride-1 convolutions
 * over few positions ("wgrad_outputs", below).
 *
 * dx is zero but at the pixels (n, s*oh, s*ow), where err row (n, oh) times the packed wT
 * lands, s*C words apart (the GEMM core's output row stride); the rows in between are
 * zeroed (or, accumulating, left). Rows of err are split across the HVX threads
 * (threads.h). The forward stays on conv.c's im2col rows: there a gathered chunk of many
 * output rows feeds one GEMM call, and per-row calls on the strided pixels measured 5-8 %
 * more packets (ResNet-18's shortcuts at 32 x 32, batch 64).
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "conv.h"
#include "conv_common.h"
#include "threads.h"

struct pw_job {
    const struct conv_shape *s;
    const int8_t *err, *bp;
    int32_t *dx;
    int acc;
};

int dspt_pointwise_strided_fits(const struct conv_shape *s)
{
    return s->kh == 1 && s->kw == 1 && s->stride > 1 && s->pad == 0 && s->o % 4 == 0;
}

static int pw_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct pw_job *J = job;
    const struct conv_shape *s = J->s;
    const int S = s->stride, C = s->c, O = s->o;
    int lo, hi;
    dspt_share(tc, s->n * s->oh, 1, t, &lo, &hi);
    for (int r = lo; r < hi; r++) {
        int n = r / s->oh, oh = r % s->oh;
        int32_t *dx = J->dx + (((size_t)n * s->h + (size_t)S * oh) * s->w) * C;   /* pixel (n, s*oh, 0) */
        if (!J->acc) {   /* the dx rows from s*oh to the next err row's (or the image's end) */
            int last = oh + 1 < s->oh ? S * (oh + 1) : s->h;
            hvx_zero(dx, (uint32_t)((size_t)(last - S * oh) * s->w * C * 4));
        }
        dspt_gemm_core(dx, S * C, J->err + (size_t)r * s->ow * O, O, J->bp, s->ow, C, O, J->acc);
    }
    return DSPT_OK;
}

int dspt_pointwise_strided_bwd_data(struct dspt_ctx *ctx, int32_t *dx, const int8_t *err, const int8_t *bp,
                                    const struct conv_shape *s, int acc)
{
    struct pw_job J = {.s = s, .err = err, .bp = bp, .dx = dx, .acc = acc};
    return dspt_run_shares(ctx, pw_share, &J);
}

/* Weight gradient dw[o, c] (+)= sum over positions p of err[p, o] * x[p, c] when all
 * n * h * w positions fit one pass (MobileNetV2's 4 x 4 to 1 x 1 layers: 64 to 1024 of
 * them against 16 K to 300 K weights). conv.c's wgrad_gemm splits the positions across
 * the threads, so each thread would store a whole dw of short sums and the join add them
 * again: here x^T and err^T are interleaved once (the blocks split across the threads),
 * then each thread takes its own run of dw's (32 rows x 32 columns) blocks over all the
 * positions: no partial sums, no join, k4 = P / 4 words a tile. */
struct pw_wgrad_job {
    const struct conv_shape *s;
    const int8_t *err, *x;
    HVX_Vector *xt, *et;   /* x^T packed (biased, lanes c) and err^T (lanes o): k4 vectors a block */
    int32_t *dw;
    int p, k4, cb, ob, acc;
};

int dspt_pointwise_wgrad_fits(const struct conv_shape *s, int pc)
{
    return s->kh == 1 && s->kw == 1 && s->stride == 1 && s->pad == 0 && s->n * s->oh * s->ow <= pc;
}

static int pw_pack_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct pw_wgrad_job *J = job;
    const int C = J->s->c, O = J->s->o;
    int lo, hi;
    int xu = (J->cb + 3) / 4, eu = (J->ob + 3) / 4;   /* units of 4 blocks: one run of 128 bytes a row */
    dspt_share(tc, xu + eu, 1, t, &lo, &hi);
    for (int u = lo; u < hi; u++) {
        if (u < xu)
            dspt_interleave_rows(J->xt + 4 * u * J->k4, J->x + u * 128, C, C - u * 128 < 128 ? C - u * 128 : 128, J->p,
                                 J->k4, 1);
        else {
            int e = u - xu;
            dspt_interleave_rows(J->et + 4 * e * J->k4, J->err + e * 128, O, O - e * 128 < 128 ? O - e * 128 : 128,
                                 J->p, J->k4, 0);
        }
    }
    return DSPT_OK;
}

static int pw_wgrad_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct pw_wgrad_job *J = job;
    const int C = J->s->c, O = J->s->o, cb = J->cb;
    int lo, hi;
    dspt_share(tc, J->ob * cb, 1, t, &lo, &hi);   /* dw's blocks [lo, hi), row-major */
    for (int u = lo; u < hi;) {
        int ob = u / cb, b0 = u % cb, b1 = cb - b0 < hi - u ? cb : b0 + hi - u;
        int m = O - ob * 32 < 32 ? O - ob * 32 : 32, n = (b1 * 32 < C ? b1 * 32 : C) - b0 * 32;
        /* the run holding the last block has x^T's lane of 1s: the rows' sums */
        dspt_gemm_core_strided(J->dw + ob * 32 * C + b0 * 32, C, (const int8_t *)(J->et + ob * J->k4), 4, 32,
                               (const int8_t *)(J->xt + b0 * J->k4), m, n, 4 * J->k4, J->acc);
        u += b1 - b0;
    }
    return DSPT_OK;
}

int dspt_pointwise_wgrad(struct dspt_ctx *ctx, int32_t *dw, const int8_t *err, const int8_t *x,
                         const struct conv_shape *s, int acc)
{
    int p = s->n * s->oh * s->ow, k4 = (p + 3) / 4, cb = (s->c + 31) / 32, ob = (s->o + 31) / 32;
    struct pw_wgrad_job J = {.s = s, .err = err, .x = x, .dw = dw, .p = p, .k4 = k4, .cb = cb, .ob = ob, .acc = acc};
    J.xt = dspt_scratch(ctx, (uint32_t)cb * k4 * HVX_BYTES);
    J.et = dspt_scratch(ctx, (uint32_t)ob * k4 * HVX_BYTES);
    if (!J.xt || !J.et) return DSPT_NO_SUPPORT;
    int st = dspt_run_shares(ctx, pw_pack_share, &J);
    return st ? st : dspt_run_shares(ctx, pw_wgrad_share, &J);
}

/* A pointwise product onto 16 channels (MobileNetV2's 32 -> 16 forward, the 16 -> 96
 * expansion's backward data, at 16 x 16: a third of their passes' packets) with the pixels
 * in the vrmpy lanes ("pointwise_pixels"): with the channels there, 16 of 32 lanes work and
 * each 4-row tile of K = 32 pays a row-sum fix and a 2-row store per 16 vrmpy. Here y^T =
 * wm . src^T: src's pixels packed 32 a block (dspt_pack_b_paired: biased, lane c < 16 pixel
 * 2c, lane c + 16 pixel 2c + 1), wm (16 x K, signed) the GEMM core's rows, so every lane
 * works and the bias comes out of wm's 16 row sums. The 16 x 32 words of a block are then
 * transposed by 4 vshuff stages (bits 0-3 of the channel and of the lane exchanged): vector
 * i holds pixels 2i and 2i + 1, the 32 words y has for them, one store. The layout of the
 * pixels-in-lanes product as in XNNPACK's and hexagon_nn's HVX convolutions (lanes along
 * the output's spatial axis); the pairing and the code are ours. */
#define PX_CHUNK 512   /* pixels a pass: packed src K * 512 bytes, y^T 32 KiB */

struct px_job {
    int32_t *y;
    const int8_t *src, *wm;
    int p, k, acc;
    int8_t *bp[DSPT_MAX_THREADS];
    int32_t *yt[DSPT_MAX_THREADS];
};

int dspt_pointwise_pixels_fits(int out_channels, int k, int pixels)
{
    return out_channels == 16 && k % 4 == 0 && pixels % 32 == 0 && k <= 1024;
}

static int px_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct px_job *J = job;
    const int K = J->k;
    int lo, hi;
    dspt_share(tc, J->p, 32, t, &lo, &hi);
    for (int p0 = lo; p0 < hi; p0 += PX_CHUNK) {
        int cnt = hi - p0 < PX_CHUNK ? hi - p0 : PX_CHUNK;
        int32_t *yt = J->yt[t];
        dspt_pack_b_paired(J->bp[t], J->src + (size_t)p0 * K, cnt, K, K);
        dspt_gemm_core(yt, cnt, J->wm, K, J->bp[t], 16, cnt, K, 0);
        for (int b = 0; b < cnt; b += 32) {
            HVX_Vector v[16];
#pragma clang loop unroll(full)
            for (int o = 0; o < 16; o++) v[o] = *(const HVX_Vector *)(yt + o * cnt + b);
#pragma clang loop unroll(full)
            for (int w = 1; w < 16; w <<= 1)
#pragma clang loop unroll(full)
                for (int r = 0; r < 16; r++) {
                    if (r & w) continue;
                    HVX_VectorPair x = Q6_W_vshuff_VVR(v[r + w], v[r], 4 * w);
                    v[r] = Q6_V_lo_W(x);
                    v[r + w] = Q6_V_hi_W(x);
                }
            int32_t *out = J->y + (size_t)(p0 + b) * 16;
#pragma clang loop unroll(full)
            for (int i = 0; i < 16; i++) {
                HVX_Vector r = J->acc ? Q6_Vw_vadd_VwVw(v[i], hvx_load_u(out + 32 * i)) : v[i];
                hvx_store_u(out + 32 * i, r);
            }
        }
    }
    return DSPT_OK;
}

int dspt_pointwise_pixels(struct dspt_ctx *ctx, int32_t *y, const int8_t *src, const int8_t *wm, int p, int k,
                          int acc)
{
    struct px_job J = {.y = y, .src = src, .wm = wm, .p = p, .k = k, .acc = acc};
    for (int t = 0; t < (int)ctx->threads; t++) {
        struct dspt_ctx *tc = dspt_thread_ctx(ctx, t);
        J.bp[t] = tc ? dspt_scratch(tc, dspt_packed_b_bytes(PX_CHUNK, k)) : 0;
        J.yt[t] = tc ? dspt_scratch(tc, 16 * PX_CHUNK * 4) : 0;
        if (!J.bp[t] || !J.yt[t]) return DSPT_NO_SUPPORT;
    }
    return dspt_run_shares(ctx, px_share, &J);
}
