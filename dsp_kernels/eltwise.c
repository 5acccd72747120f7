/* eltwise.c: ReLU and its backward on int8, 128 elements per vector, scalar tails. */
#include "hvx-utils.h"
#include "kernels.h"

int dspt_op_relu(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    uint32_t n = dspt_count(d->shape_a);
    if (d->dtype != DSPT_I8) return DSPT_NO_SUPPORT;
    const int8_t *x = dspt_at(ctx, d->in[0], n);
    int8_t *y = dspt_at(ctx, d->out[0], n);
    if (!x || !y) return DSPT_BAD_PARAMS;
    uint32_t i = 0;
    HVX_Vector zero = Q6_V_vzero();
    for (; i + 256 <= n; i += 256) {   /* two vectors at a time: loads first (no chain) */
        HVX_Vector a = hvx_load_u(x + i), b = hvx_load_u(x + i + 128);
        hvx_store_u(y + i, Q6_Vb_vmax_VbVb(a, zero));
        hvx_store_u(y + i + 128, Q6_Vb_vmax_VbVb(b, zero));
    }
    for (; i + 128 <= n; i += 128) hvx_store_u(y + i, Q6_Vb_vmax_VbVb(hvx_load_u(x + i), zero));
    for (; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;
    return DSPT_OK;
}

/* err where the forward output y > 0, else 0. */
int dspt_op_relu_bwd(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    uint32_t n = dspt_count(d->shape_a);
    if (d->dtype != DSPT_I8) return DSPT_NO_SUPPORT;
    if (dspt_count(d->shape_b) != n) return DSPT_BAD_PARAMS;
    const int8_t *err = dspt_at(ctx, d->in[0], n), *y = dspt_at(ctx, d->in[1], n);
    int8_t *out = dspt_at(ctx, d->out[0], n);
    if (!err || !y || !out) return DSPT_BAD_PARAMS;
    uint32_t i = 0;
    HVX_Vector zero = Q6_V_vzero();
    for (; i + 256 <= n; i += 256) {   /* two vectors at a time: loads first (no chain) */
        HVX_Vector y0 = hvx_load_u(y + i), y1 = hvx_load_u(y + i + 128);
        HVX_Vector e0 = hvx_load_u(err + i), e1 = hvx_load_u(err + i + 128);
        hvx_store_u(out + i, Q6_V_vmux_QVV(Q6_Q_vcmp_gt_VbVb(y0, zero), e0, zero));
        hvx_store_u(out + i + 128, Q6_V_vmux_QVV(Q6_Q_vcmp_gt_VbVb(y1, zero), e1, zero));
    }
    for (; i + 128 <= n; i += 128) {
        HVX_VectorPred pos = Q6_Q_vcmp_gt_VbVb(hvx_load_u(y + i), zero);
        hvx_store_u(out + i, Q6_V_vmux_QVV(pos, hvx_load_u(err + i), zero));
    }
    for (; i < n; i++) out[i] = y[i] > 0 ? err[i] : 0;
    return DSPT_OK;
}
