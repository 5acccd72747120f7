/* conv_pointwise.c: backward data of 1 x 1 convolutions of stride s > 1 (no padding: a
 * ResNet's downsampling shortcut) as GEMMs on err's pixels where they lie, no gather and no
 * col2im ("pointwise_strided").
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
