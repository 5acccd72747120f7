/* update.c: NITI's integer SGD step on HVX: w' = clip(w - shift(grad)), the shift
 * from the gradient's range and mu (runtime/algorithms/niti.py, bit for bit). */
#include "hvx-utils.h"
#include "kernels.h"

/* NITI_UPDATE: w' = clip(w - shift_round(g, max(range(g) - mu, 0))); w' = w if g == 0. */
int dspt_op_niti_update(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    uint32_t n = dspt_count(d->shape_a);
    if (d->dtype != DSPT_I8) return DSPT_NO_SUPPORT;
    if (dspt_count(d->shape_b) != n || d->round_mode < DSPT_ROUND || d->round_mode > DSPT_STO)
        return DSPT_BAD_PARAMS;
    const int8_t *w = dspt_at(ctx, d->in[0], n);
    const int32_t *g = dspt_at(ctx, d->in[1], n * 4);
    int8_t *out = dspt_at(ctx, d->out[0], n);
    int8_t *step = dspt_scratch(ctx, n);
    if (!w || !g || !out) return DSPT_BAD_PARAMS;
    if (!step) return DSPT_NO_SUPPORT;
    int st;
    d->result_absmax = dspt_absmax_split(ctx, g, n, &st);   /* both passes split across the HVX threads */
    if (st) return st;
    int b = dspt_range_bits(d->result_absmax);
    if (b == 0) {
        hvx_copy(out, w, n);
        d->result_shift = -1;
        return DSPT_OK;
    }
    int shift = b - d->bits > 0 ? b - d->bits : 0;
    if ((st = dspt_shift_round_split(ctx, step, g, n, shift, d->round_mode, &d->rng, 0))) return st;
    HVX_Vector floor = Q6_Vb_vsplat_R(-127);
    uint32_t i = 0;
    for (; i + 128 <= n; i += 128)  /* saturating byte subtract, then -128 -> -127 */
        hvx_store_u(out + i, Q6_Vb_vmax_VbVb(Q6_Vb_vsub_VbVb_sat(hvx_load_u(w + i), hvx_load_u(step + i)), floor));
    for (; i < n; i++) {
        int v = w[i] - step[i];
        out[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
    d->result_shift = shift;
    return DSPT_OK;
}
