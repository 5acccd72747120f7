/* kernels.h: what every kernel file sees: the op context, scratch memory, and the
 * entry point of each op family. A kernel returns an enum dspt_status and never
 * writes its inputs. */
#ifndef DSPTRAIN_KERNELS_H
#define DSPTRAIN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h"

struct dspt_ctx {
    uint8_t *arena;            /* base of the shared arena */
    uint32_t arena_bytes;
    uint8_t *scratch;          /* DSP-private working memory (VTCM on a device) */
    uint32_t scratch_bytes;
    uint32_t scratch_used;     /* bump allocator, reset before every op */
};

/* A 128-byte aligned scratch block, or NULL when the scratch is exhausted. */
static inline void *dspt_scratch(struct dspt_ctx *ctx, uint32_t bytes)
{
    uint32_t start = (ctx->scratch_used + 127u) & ~127u;
    if (start > ctx->scratch_bytes || bytes > ctx->scratch_bytes - start) return NULL;
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
 * a: M rows of K bytes at row stride lda (a multiple of 4, 4-aligned base);
 * bp: b packed by dspt_pack_b; c: M x N int32 at row stride ldc elements. */
uint32_t dspt_packed_b_bytes(int n, int k);
void dspt_pack_b(int8_t *bp, const int8_t *src, int n, int k, int sn, const int32_t *koff);
void dspt_gemm_core(int32_t *c, int ldc, const int8_t *a, int lda, const int8_t *bp,
                    int m, int n, int k, int accumulate);

int dspt_op_gemm(struct dspt_ctx *ctx, struct dspt_op_desc *d);
int dspt_op_conv2d(struct dspt_ctx *ctx, struct dspt_op_desc *d);
int dspt_op_conv2d_bwd_data(struct dspt_ctx *ctx, struct dspt_op_desc *d);
int dspt_op_conv2d_bwd_weight(struct dspt_ctx *ctx, struct dspt_op_desc *d);
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

/* libc pieces the compiler may call in a freestanding build (util.c). */
void *memcpy(void *dst, const void *src, size_t n);
void *memset(void *dst, int v, size_t n);

#endif
