/* conv_col2im.c: backward data of convolutions with few input channels, as GEMM + col2im.
 *
 * conv.c's backward data gathers err windows and puts dx's C channels in vrmpy's lanes: a
 * LeNet conv with C = 6 fills 6 of 32. Here the product runs the other way round (the
 * column gradient of Caffe's backward pass, Jia et al. 2014): cols[p, (i, j, c)] =
 * err[p, :] . w[:, (i, j, c)], one GEMM with err's rows as they are and KH * KW * C lanes,
 * then each err position adds its KH window rows (KW * C contiguous words each) into dx.
 * Each HVX thread takes whole images, so the adds never cross threads.
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "conv.h"
#include "threads.h"

int dspt_conv_col2im_fits(const struct conv_shape *s)
{
    return s->c < 32 && s->o % 4 == 0 && s->kw * s->c <= 32;
}

/* Image n's window rows (cols, row stride ldc words: p's taps (i, j, c)) added into buf:
 * the image with `pad` zero rows and columns around it and KW columns more on the right,
 * so every window row lands whole (no clipping); KW * C <= 32 words: one vector each. The
 * adds run in the order of p: each reads what the previous one wrote. */
static void col2im(int32_t *buf, int wb, const int32_t *cols, int ldc, const struct conv_shape *s)
{
    int row = s->kw * s->c;
    HVX_VectorPred keep = Q6_Q_vsetq2_R((uint32_t)row * 4);
    for (int oh = 0, p = 0; oh < s->oh; oh++)
        for (int ow = 0; ow < s->ow; ow++, p++) {
            const int32_t *src = cols + p * ldc;
            int32_t *dst = buf + (oh * s->stride * wb + ow * s->stride) * s->c;
            for (int i = 0; i < s->kh; i++, src += row, dst += wb * s->c)
                hvx_store_u(dst, Q6_Vw_vadd_VwVw(hvx_load_u(dst), Q6_V_vmux_QVV(keep, hvx_load_u(src), Q6_V_vzero())));
        }
}

/* dx image (+)= the interior of buf. */
static void unpad(int32_t *dx, const int32_t *buf, int wb, const struct conv_shape *s, int accumulate)
{
    int n = s->w * s->c;
    for (int h = 0; h < s->h; h++) {
        const int32_t *src = buf + ((h + s->pad) * wb + s->pad) * s->c;
        int32_t *dst = dx + h * n;
        for (int i = 0; i < n; i += 32) {
            uint32_t bytes = (uint32_t)(n - i < 32 ? n - i : 32) * 4;
            HVX_Vector v = hvx_load_u(src + i);
            if (accumulate) v = Q6_Vw_vadd_VwVw(v, hvx_load_bytes(dst + i, bytes));
            hvx_store_bytes(dst + i, v, bytes);
        }
    }
}

/* Images [lo, hi) of thread t (threads.h), through its own window rows and padded image. */
struct col2im_job {
    int32_t *dx;
    const int8_t *err, *bp;
    const struct conv_shape *s;
    int ldc, pix, wb, accumulate;
    uint32_t image, buf_words;
    int32_t *cols[DSPT_MAX_THREADS], *buf[DSPT_MAX_THREADS];
};

static int col2im_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct col2im_job *J = job;
    const struct conv_shape *s = J->s;
    int32_t *dx = J->dx, *cols = J->cols[t], *buf = J->buf[t];
    const int8_t *err = J->err, *bp = J->bp;
    int ldc = J->ldc, pix = J->pix, wb = J->wb, accumulate = J->accumulate;
    uint32_t image = J->image, buf_words = J->buf_words;
    int lo, hi;
    dspt_share(tc, s->n, 1, t, &lo, &hi);
    for (int n = lo; n < hi; n++) {
        dspt_gemm_core(cols, ldc, err + (size_t)n * pix * s->o, s->o, bp, pix, ldc, s->o, 0);
        hvx_zero(buf, buf_words * 4);
        col2im(buf, wb, cols, ldc, s);
        unpad(dx + (size_t)n * image, buf, wb, s, accumulate);
    }
    return DSPT_OK;
}

int dspt_conv_col2im_bwd_data(struct dspt_ctx *ctx, int32_t *dx, const int8_t *err, const int8_t *w,
                              const struct conv_shape *s, int accumulate)
{
    /* taps padded to whole lane blocks: aligned rows of cols, and the GEMM's vector row
     * sums instead of its lane of 1s (kernels.h) */
    int taps = s->kh * s->kw * s->c, ldc = (taps + 31) & ~31, pix = s->oh * s->ow;
    int hb = s->h + 2 * s->pad + s->kh, wb = s->w + 2 * s->pad + s->kw;   /* buf: padded dx image */
    int8_t *wt = dspt_scratch(ctx, (uint32_t)ldc * s->o);
    int8_t *bp = dspt_scratch(ctx, dspt_packed_b_bytes(ldc, s->o));
    if (!wt || !bp) return DSPT_NO_SUPPORT;
    for (int o = 0; o < s->o; o++)   /* w [O][taps] -> wT [taps][O]: the packed side's rows */
        for (int j = 0; j < ldc; j++) wt[j * s->o + o] = j < taps ? w[o * taps + j] : 0;
    dspt_pack_b(bp, wt, ldc, s->o, s->o);
    uint32_t image = (uint32_t)s->h * s->w * s->c, buf_words = (uint32_t)hb * wb * s->c;
    struct col2im_job job = {.dx = dx, .err = err, .bp = bp, .s = s, .ldc = ldc, .pix = pix, .wb = wb,
                             .accumulate = accumulate, .image = image, .buf_words = buf_words};
    for (int t = 0; t < (int)ctx->threads; t++) {   /* each thread's buffers, from its own scratch */
        struct dspt_ctx *tc = dspt_thread_ctx(ctx, t);
        if (!tc) return DSPT_NO_SUPPORT;
        job.cols[t] = dspt_scratch(tc, (uint32_t)pix * ldc * 4 + HVX_BYTES);
        job.buf[t] = dspt_scratch(tc, buf_words * 4 + HVX_BYTES);
        if (!job.cols[t] || !job.buf[t]) return DSPT_NO_SUPPORT;
    }
    return dspt_run_shares(ctx, col2im_share, &job);
}
