/* dispatch.c: one op descriptor -> its kernel, with the cost measured around it (the
 * calling thread's packets, plus each worker's share: threads.h).
 * Shared by the emulated server (main.c) and the FastRPC skel (skel.c). */
#include "dsp_sys.h"
#include "kernels.h"
#include "threads.h"

typedef int (*dspt_kernel)(struct dspt_ctx *, struct dspt_op_desc *);

static const dspt_kernel kernels[DSPT_OP_COUNT] = {
    [DSPT_OP_GEMM_S8] = dspt_op_gemm,
    [DSPT_OP_CONV2D_S8] = dspt_op_conv2d,
    [DSPT_OP_CONV2D_BWD_DATA_S8] = dspt_op_conv2d_bwd_data,
    [DSPT_OP_CONV2D_BWD_WEIGHT_S8] = dspt_op_conv2d_bwd_weight,
    [DSPT_OP_REQUANT] = dspt_op_requant,
    [DSPT_OP_ABSMAX] = dspt_op_absmax,
    [DSPT_OP_RELU_S8] = dspt_op_relu,
    [DSPT_OP_RELU_BWD_S8] = dspt_op_relu_bwd,
    [DSPT_OP_MAXPOOL_S8] = dspt_op_maxpool,
    [DSPT_OP_MAXPOOL_BWD_S8] = dspt_op_maxpool_bwd,
    [DSPT_OP_NITI_UPDATE_S8] = dspt_op_niti_update,
    [DSPT_OP_DWCONV2D_S8] = dspt_op_dwconv2d,
    [DSPT_OP_DWCONV2D_BWD_DATA_S8] = dspt_op_dwconv2d_bwd_data,
    [DSPT_OP_DWCONV2D_BWD_WEIGHT_S8] = dspt_op_dwconv2d_bwd_weight,
};

uint32_t dspt_op_mask(void)
{
    uint32_t mask = 1u << DSPT_OP_NOP;
    for (int i = 0; i < DSPT_OP_COUNT; i++)
        if (kernels[i]) mask |= 1u << i;
#ifdef DSPT_EMULATED
    mask |= (1u << DSPT_OP_DEBUG_SLEEP) | (1u << DSPT_OP_DEBUG_CRASH);
#endif
    return mask;
}

#ifdef DSPT_EMULATED
static int debug_op(struct dspt_op_desc *d)
{
    if (d->op == DSPT_OP_DEBUG_CRASH) dsp_syscall3(SYS_exit_group, 70, 0, 0);
    struct { long sec, nsec; } ts = {d->shift / 1000, (d->shift % 1000) * 1000000L};
    dsp_syscall3(SYS_nanosleep, &ts, 0, 0);
    return DSPT_OK;
}
#endif

int dspt_run_op(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    struct dsp_counters c0, c1;
    int status = DSPT_NO_SUPPORT;
    ctx->scratch_used = 0;
    dspt_pool_reset(ctx->pool);
    ctx->threads = d->threads < 1 ? 1 : (d->threads > DSPT_MAX_THREADS ? DSPT_MAX_THREADS : d->threads);
    for (int t = 0; t < DSPT_MAX_THREADS; t++) ctx->share_packets[t] = 0;
    ctx->share_insns = ctx->share_hvx = ctx->shares_critical = 0;
    dsp_read_counters(&c0);
    if (d->op == DSPT_OP_NOP) status = DSPT_OK;
    else if (d->op < DSPT_OP_COUNT && kernels[d->op]) status = kernels[d->op](ctx, d);
#ifdef DSPT_EMULATED
    else if (d->op == DSPT_OP_DEBUG_SLEEP || d->op == DSPT_OP_DEBUG_CRASH) status = debug_op(d);
#endif
    dsp_read_counters(&c1);
    /* this thread ran the serial part (and waited for the workers); the shares ran on them */
    uint32_t shares = 0, serial = c1.packets - c0.packets;
    for (int t = 0; t < DSPT_MAX_THREADS; t++) {
        d->cost.thread_packets[t] = ctx->share_packets[t];
        shares += ctx->share_packets[t];
    }
    d->cost.packets = serial + shares;
    d->cost.insns = c1.insns - c0.insns + ctx->share_insns;
    d->cost.hvx = c1.hvx - c0.hvx + ctx->share_hvx;
    d->cost.critical = serial + ctx->shares_critical;
    d->status = status;
    return status;
}
