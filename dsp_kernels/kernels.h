/* kernels.h: what every kernel file sees: the op context, scratch memory, and the
 * entry point of each op family. A kernel returns an enum dspt_status and never
 * writes its inputs. */
#ifndef DSPTRAIN_KERNELS_H
#define DSPTRAIN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h"
#include "hvx-utils.h"

struct dspt_ctx {
    uint8_t *arena;            /* base of the shared arena */
    uint32_t arena_bytes;
    uint8_t *scratch;          /* DSP-private working memory (VTCM on a device) */
    uint32_t scratch_bytes;
    uint32_t scratch_used;     /* bump allocator, reset before every op */
    /* The op's work split across HVX threads (the descriptor's `threads`): share t runs
     * on worker t of the pool (threads.h), which counts its packets on its own thread. */
    uint32_t threads;
    struct dspt_pool *pool;
    uint32_t share_packets[DSPT_MAX_THREADS];
    uint32_t share_insns, share_hvx;   /* summed over the shares */
    uint32_t shares_critical;          /* over the op's split calls, each call's longest share */
};

/* Rows [lo, hi) of `n` that thread t of ctx->threads takes, in multiples of `unit`. */
static inline void dspt_share(const struct dspt_ctx *ctx, int n, int unit, int t, int *lo, int *hi)
{
    int units = (n + unit - 1) / unit, per = (units + (int)ctx->threads - 1) / (int)ctx->threads;
    *lo = t * per * unit < n ? t * per * unit : n;
    *hi = (t + 1) * per * unit < n ? (t + 1) * per * unit : n;
}

/* A 128-byte aligned scratch block, or NULL when the scratch is exhausted. The scratch's
 * last vector is never handed out: kernels read whole vectors up to 127 bytes past a block
 * (what they mask off), and that must stay inside the mapping. */
static inline void *dspt_scratch(struct dspt_ctx *ctx, uint32_t bytes)
{
    uint32_t start = (ctx->scratch_used + 127u) & ~127u;
    if (start + 128u > ctx->scratch_bytes || bytes > ctx->scratch_bytes - 128u - start) return NULL;
    ctx->scratch_used = start + bytes;
    return ctx->scratch + start;
}

/* A pointer to `bytes` bytes at arena offset `off`, or NULL if they fall outside. */
static inline void *dspt_at(struct dspt_ctx *ctx, uint32_t off, uint32_t bytes)
{
    if (off > ctx->arena_bytes || bytes > ctx->arena_bytes - off) return NULL;
    return ctx->arena + off;
}

static inline uint32_t dspt_count(const int32_t *shape)
{
    return (uint32_t)shape[0] * (uint32_t)shape[1] * (uint32_t)shape[2] * (uint32_t)shape[3];
}

/* gemm.c: the vrmpy core shared by the GEMM and the convolutions.
 * a: M rows of K bytes at row stride lda (a multiple of 4, 4-aligned base); the
 * bytes between K and round_up(K, 4) of each row are read (any value is fine);
 * bp: b packed by dspt_pack_b; c: M x N int32 at row stride ldc elements. */
uint32_t dspt_packed_b_bytes(int n, int k);
/* Packed b is biased (b + 128 as unsigned bytes); when n % 32 != 0, lane n % 32 of the
 * last block holds 1s (DSPT_ONES_WORD) so the product also yields each row's sum of a,
 * the bias correction's factor. Every packer of b keeps both rules. */
#define DSPT_ONES_WORD 0x01010101

/* v with word `lane` (0..31) replaced by DSPT_ONES_WORD. */
static inline HVX_Vector dspt_ones_lane(HVX_Vector v, int lane)
{
    HVX_VectorPred word = Q6_Q_and_QQn(Q6_Q_vsetq2_R(4 * lane + 4), Q6_Q_vsetq_R(4 * lane));
    return Q6_V_vmux_QVV(word, Q6_V_vsplat_R(DSPT_ONES_WORD), v);
}
void dspt_pack_b(int8_t *bp, const int8_t *src, int n, int k, int sn);
/* dspt_pack_b of n % 32 == 0 rows, each block's lane c < 16 row 2c and lane c + 16 row
 * 2c + 1: a 16-row product's transposed words then land two rows a vector (conv_pointwise.c). */
void dspt_pack_b_paired(int8_t *bp, const int8_t *src, int n, int k, int sn);
void dspt_gemm_core(int32_t *c, int ldc, const int8_t *a, int lda, const int8_t *bp,
                    int m, int n, int k, int accumulate);
/* The same with word q of row r at a + r * lda + 4 * q * aq (aq = 1: contiguous rows). */
void dspt_gemm_core_strided(int32_t *c, int ldc, const int8_t *a, int lda, int aq, const int8_t *bp,
                            int m, int n, int k, int accumulate);
/* The same with row r's word q at a + 4 * r + off[q] (a and off[q] multiples of 4
 * bytes: words of a channel-padded image, no im2col; rows up to 7 past m are read) and
 * each row's byte sum given in sums[r] (8 readable past m), for `groups` groups of m
 * rows: group i's a, c and sums a_bytes, c_words and sums elements on from the first
 * (an image's output rows in one call: the tiles' set-up is paid once, not per row). */
struct dspt_row_groups {
    int groups, a_bytes, c_words, sums;
};
void dspt_gemm_core_words(int32_t *c, int ldc, const int8_t *a, const int32_t *off, int k4, const int32_t *sums,
                          const int8_t *bp, int m, int n, int accumulate, const struct dspt_row_groups *rg);

int dspt_op_gemm(struct dspt_ctx *ctx, struct dspt_op_desc *d);
int dspt_op_conv2d(struct dspt_ctx *ctx, struct dspt_op_desc *d);
int dspt_op_conv2d_bwd_data(struct dspt_ctx *ctx, struct dspt_op_desc *d);
int dspt_op_conv2d_bwd_weight(struct dspt_ctx *ctx, struct dspt_op_desc *d);
/* dwconv.c, dwconv_wgrad.c: depthwise convolutions (weights tap-major: ops.h) */
int dspt_op_dwconv2d(struct dspt_ctx *ctx, struct dspt_op_desc *d);
int dspt_op_dwconv2d_bwd_data(struct dspt_ctx *ctx, struct dspt_op_desc *d);
int dspt_op_dwconv2d_bwd_weight(struct dspt_ctx *ctx, struct dspt_op_desc *d);
/* requant.c: the epilogue's passes, shared with update.c */
int dspt_range_bits(uint32_t max_abs);
uint32_t dspt_absmax_s32(const int32_t *x, uint32_t n);
void dspt_shift_round_s32(int8_t *out, const int32_t *in, uint32_t n, int shift, int mode,
                          const struct dspt_rng *rng, uint32_t *max_abs);
/* The same two passes with the elements split across ctx->threads HVX threads (threads.h);
 * bit for bit what one pass gives. The split shift-round returns an enum dspt_status. */
uint32_t dspt_absmax_split(struct dspt_ctx *ctx, const int32_t *x, uint32_t n, int *status);
int dspt_shift_round_split(struct dspt_ctx *ctx, int8_t *out, const int32_t *in, uint32_t n, int shift,
                           int mode, const struct dspt_rng *rng, uint32_t *max_abs);
/* DSPT_ROUND with 1 <= shift <= 31, returning the peak rounded magnitude before the clamp
 * (requant.c: dspt_round_peak_s32), split as above. */
uint32_t dspt_round_peak_s32(int8_t *out, const int32_t *in, uint32_t n, int shift);
uint32_t dspt_round_peak_split(struct dspt_ctx *ctx, int8_t *out, const int32_t *in, uint32_t n, int shift,
                               int *status);

int dspt_op_requant(struct dspt_ctx *ctx, struct dspt_op_desc *d);
int dspt_op_absmax(struct dspt_ctx *ctx, struct dspt_op_desc *d);
int dspt_op_niti_update(struct dspt_ctx *ctx, struct dspt_op_desc *d);
int dspt_op_relu(struct dspt_ctx *ctx, struct dspt_op_desc *d);
int dspt_op_relu_bwd(struct dspt_ctx *ctx, struct dspt_op_desc *d);
int dspt_op_maxpool(struct dspt_ctx *ctx, struct dspt_op_desc *d);
int dspt_op_maxpool_bwd(struct dspt_ctx *ctx, struct dspt_op_desc *d);

/* dispatch.c: runs one descriptor, fills status and cost; shared by both builds. */
int dspt_run_op(struct dspt_ctx *ctx, struct dspt_op_desc *d);
uint32_t dspt_op_mask(void);

/* util.c: permutation controls, routed once per shape and kept. The vdelta (from < to)
 * or vrdelta (from > to) control moving byte q * from + b to q * to + b for b < k,
 * q < groups; the vrdelta control copying word `word` of every group of `words` words
 * (a power of two) to all the group's words. */
void dspt_restride_control(uint8_t ctrl[128], int k, int from, int to, int groups);
void dspt_broadcast_control(uint8_t ctrl[128], int word, int words);

/* libc pieces the compiler may call in a freestanding build (util.c). */
void *memcpy(void *dst, const void *src, size_t n);
void *memset(void *dst, int v, size_t n);

#endif
