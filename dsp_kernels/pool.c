/* pool.c: NHWC max-pool (no padding) and its backward.
 * Forward keeps the FIRST maximum of each window (strictly-greater updates in
 * kh, kw order), its argmax is kh * k + kw as uint8. Channels go 128 per vector;
 * the channel tail (C % 128, all of it for small C) runs scalar. */
#include "hvx-utils.h"
#include "kernels.h"

static int pool_shape(const struct dspt_op_desc *d, const int32_t *xs, const int32_t *ys)
{
    int k = d->kernel_h, s = d->stride;
    if (k <= 0 || k > 15 || s <= 0 || d->kernel_w != k) return DSPT_BAD_PARAMS;
    if (xs[0] != ys[0] || xs[3] != ys[3] || ys[1] != (xs[1] - k) / s + 1 ||
        ys[2] != (xs[2] - k) / s + 1 || ys[1] <= 0 || ys[2] <= 0)
        return DSPT_BAD_PARAMS;
    return DSPT_OK;
}

int dspt_op_maxpool(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    if (d->dtype != DSPT_I8) return DSPT_NO_SUPPORT;
    int st = pool_shape(d, d->shape_a, d->shape_out);
    if (st) return st;
    int n = d->shape_a[0], h = d->shape_a[1], w = d->shape_a[2], c = d->shape_a[3];
    int oh = d->shape_out[1], ow = d->shape_out[2], k = d->kernel_h, s = d->stride;
    const int8_t *x = dspt_at(ctx, d->in[0], dspt_count(d->shape_a));
    int8_t *y = dspt_at(ctx, d->out[0], dspt_count(d->shape_out));
    uint8_t *am = dspt_at(ctx, d->out[1], dspt_count(d->shape_out));
    if (!x || !y || !am) return DSPT_BAD_PARAMS;
    int cv = c & ~127;
    for (int b = 0; b < n; b++)
        for (int i = 0; i < oh; i++)
            for (int j = 0; j < ow; j++) {
                const int8_t *win = x + ((b * h + i * s) * w + j * s) * c;
                int out = ((b * oh + i) * ow + j) * c;
                for (int ch = 0; ch < cv; ch += 128) {
                    HVX_Vector best = hvx_load_u(win + ch), idx = Q6_V_vzero();
                    for (int t = 1; t < k * k; t++) {
                        HVX_Vector v = hvx_load_u(win + ((t / k) * w + t % k) * c + ch);
                        HVX_VectorPred gt = Q6_Q_vcmp_gt_VbVb(v, best);
                        best = Q6_V_vmux_QVV(gt, v, best);
                        idx = Q6_V_vmux_QVV(gt, Q6_Vb_vsplat_R(t), idx);
                    }
                    hvx_store_u(y + out + ch, best);
                    hvx_store_u(am + out + ch, idx);
                }
                for (int ch = cv; ch < c; ch++) {
                    int8_t best = win[ch];
                    int idx = 0;
                    for (int t = 1; t < k * k; t++) {
                        int8_t v = win[((t / k) * w + t % k) * c + ch];
                        if (v > best) { best = v; idx = t; }
                    }
                    y[out + ch] = best;
                    am[out + ch] = (uint8_t)idx;
                }
            }
    return DSPT_OK;
}

/* Scatter-add err to each window's argmax in int32 (windows may overlap), then clip;
 * one image at a time so the int32 plane stays small. */
int dspt_op_maxpool_bwd(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    if (d->dtype != DSPT_I8) return DSPT_NO_SUPPORT;
    int st = pool_shape(d, d->shape_out, d->shape_a);
    if (st) return st;
    int n = d->shape_out[0], h = d->shape_out[1], w = d->shape_out[2], c = d->shape_out[3];
    int oh = d->shape_a[1], ow = d->shape_a[2], k = d->kernel_h, s = d->stride;
    const int8_t *err = dspt_at(ctx, d->in[0], dspt_count(d->shape_a));
    const uint8_t *am = dspt_at(ctx, d->in[1], dspt_count(d->shape_a));
    int8_t *dx = dspt_at(ctx, d->out[0], dspt_count(d->shape_out));
    if (!err || !am || !dx) return DSPT_BAD_PARAMS;
    uint32_t plane = (uint32_t)h * w * c;
    int32_t *acc = dspt_scratch(ctx, plane * 4);
    if (!acc) return DSPT_NO_SUPPORT;
    for (int b = 0; b < n; b++) {
        hvx_zero(acc, plane * 4);
        for (int i = 0; i < oh; i++)
            for (int j = 0; j < ow; j++) {
                int o = ((b * oh + i) * ow + j) * c;
                int32_t *win = acc + (i * s * w + j * s) * c;
                for (int ch = 0; ch < c; ch++) {
                    int t = am[o + ch];
                    if (t >= k * k) continue;  /* not an index of this window */
                    win[((t / k) * w + t % k) * c + ch] += err[o + ch];
                }
            }
        int8_t *dst = dx + b * plane;
        uint32_t e = 0;
        HVX_Vector hi = Q6_V_vsplat_R(127), lo = Q6_V_vsplat_R(-127);
        for (; e + 128 <= plane; e += 128) {
            HVX_Vector v[4];
            for (int q = 0; q < 4; q++)
                v[q] = Q6_Vw_vmin_VwVw(Q6_Vw_vmax_VwVw(hvx_load_u(acc + e + 32 * q), lo), hi);
            HVX_Vector h01 = Q6_Vh_vpacke_VwVw(v[1], v[0]), h23 = Q6_Vh_vpacke_VwVw(v[3], v[2]);
            hvx_store_u(dst + e, Q6_Vb_vpacke_VhVh(h23, h01));
        }
        for (; e < plane; e++) dst[e] = (int8_t)(acc[e] > 127 ? 127 : acc[e] < -127 ? -127 : acc[e]);
    }
    return DSPT_OK;
}
