/* dwconv.h: depthwise convolutions (one 2-D filter per channel), shared by dwconv.c
 * (forward, backward data: picks the path), its paths dwconv_quads.c, dwconv_pixels.c,
 * dwconv_fwd2.c, dwconv_bwd2.c, dwconv_bwd2_pairs.c,
 * dwconv_bwd2_144.c, dwconv_bwd_one.c, and dwconv_wgrad.c, dwconv_wgrad_pairs.c (weight gradient). */
#ifndef DSPTRAIN_DWCONV_H
#define DSPTRAIN_DWCONV_H

#include "kernels.h"

/* NHWC image (n, h, w, c), kernel kh x kw per channel, output oh x ow (same c). */
struct dw_shape {
    int n, h, w, c, kh, kw, oh, ow, stride, pad;
};

/* The shape from the descriptor: `img` is the (N, H, W, C) side, `out` the (N, OH, OW, C)
 * side; DSPT_OK or DSPT_BAD_PARAMS. */
int dspt_dw_shape(const struct dspt_op_desc *d, const int32_t *img, const int32_t *out, struct dw_shape *s);

/* dwconv.c's padded images and a call's work, shared with dwconv_quads.c. */
/* A stack of zero-bordered images (`pad` all round), in the flat or the block layout. */
struct stack {
    int8_t *buf;
    int hp, wp, pad;
    int pitch;       /* bytes per pixel: C (flat) or 128 (blocks) */
    int rowbytes, imgbytes;   /* whole vectors each */
    int lead;                 /* buf is this far into its aligned buffer: row interiors aligned */
};

/* What a thread's share runs over: images [lo, hi) in passes of `g` images. */
struct dw_job {
    const struct dw_shape *s;
    const int8_t *src, *w;        /* x (forward) or err (backward data); w tap-major */
    int32_t *out;
    int flat, flip, pad, accumulate, g;
    int src_h, src_w;             /* the image the stack holds (x or err) */
    const int8_t *ext;            /* flat: per tap, the weights repeated (ext_bytes each) */
    int ext_bytes, residues, quads;
    uint32_t buf_bytes;
    int8_t *buf[DSPT_MAX_THREADS];
};

/* dwconv_quads.c: stride 1 or 2 with 3 kernel rows of up to 4 taps takes the column
 * quads (vrmpy) on dwconv.c's stacks; the rest of dwconv.c the vmpy paths. */
int dspt_dw_quads_fit(const struct dw_shape *s);
void dspt_dw_quads_run(const struct dw_job *J, const struct stack *st, int n0, int g);
/* Whether the stride-1 quads run their rows as hand-scheduled packets (DSPT_PATH_DW_QUAD_PACKETS):
 * a zero border, whole aligned output vectors, no accumulation. */
int dspt_dw_quad_packets_fit(const struct dw_shape *s, int pad, int src_h, const int32_t *out, int acc);

/* dwconv_pixels.c: each output pixel's taps inside the image, 4 a vrmpy word (forward, or
 * backward data with `bwd`: s is the forward's shape, src err, out dx); _fit says when. */
int dspt_dw_pixels_fit(const struct dw_shape *s, int bwd);
int dspt_dw_pixels(struct dspt_ctx *ctx, const struct dw_shape *s, const int8_t *src, const int8_t *w, int32_t *out,
                   int bwd, int accumulate);

/* dwconv_fwd2.c: forward of 3 x 3, padding 1, stride 2 (or 1 on small images), each input
 * column's 3 rows a vrmpy word met by the kernel's 3 columns; `flip`: the taps turned
 * (backward data of stride 1 as a forward); _fit says when. */
int dspt_dw_column_triples_fit(const struct dw_shape *s);
int dspt_dw_column_triples(struct dspt_ctx *ctx, const struct dw_shape *s, const int8_t *x, const int8_t *w,
                           int32_t *y, int accumulate, int flip);
/* Whether the triples run their rows as hand-scheduled packets (DSPT_PATH_DW_TRIPLE_PACKETS):
 * stride 2, 96 channels, an even width, y aligned, no accumulation. */
int dspt_dw_triple_packets_fit(const struct dw_shape *s, const int32_t *y, int acc);

/* dwconv_bwd2.c: backward data of 3 x 3, stride 2, padding 1, four err pixels a vrmpy word
 * met by the four dx pixels they feed; _fit says when. */
int dspt_dw_err_quads_fit(const struct dw_shape *s);
int dspt_dw_err_quads(struct dspt_ctx *ctx, const struct dw_shape *s, const int8_t *err, const int8_t *w, int32_t *dx,
                      int accumulate);

/* dwconv_bwd2_pairs.c: the same onto an even width, C % 32 == 0 (>= 64) or 144, dx 128-byte
 * aligned: each row's two dx pixels of an anchor stored as 2C / 32 aligned vectors, the err
 * columns shuffled once; _fit says when (the caller checks dx's alignment). */
int dspt_dw_err_pairs_fit(const struct dw_shape *s);
int dspt_dw_err_pairs(struct dspt_ctx *ctx, const struct dw_shape *s, const int8_t *err, const int8_t *w, int32_t *dx,
                      int accumulate);

/* dwconv_bwd2_packets.c: the err pairs' anchor rows of 96 channels as hand-scheduled packets
 * (DSPT_PATH_DW_ERR_PACKETS): where the err pairs run (their fit and dx aligned), at C = 96,
 * OW >= 3 and no accumulation; run by dspt_dw_err_pairs' shares over images [lo, hi), wt
 * its weights. */
static inline int dspt_dw_err_packets_fit(const struct dw_shape *s, int acc)
{
    return s->c == 96 && s->ow >= 3 && !acc;
}
void dspt_dw_err_packets(const struct dw_shape *s, const int8_t *err, const int8_t *zeros, const HVX_Vector *wt,
                         int32_t *dx, int32_t *sink, int lo, int hi);

/* dwconv_bwd2_144.c: the err pairs at C = 144 onto an even H, err rows of 3 pixels or more,
 * not accumulating (DSPT_PATH_DW_ERR_144), in two passes over chunks of whole anchor rows of at
 * most DW_ERR144_SAVE anchors (or one row), `save` a thread's buffer of that many vectors
 * (pass A's words for pass B); run by dspt_dw_err_pairs' shares over images [lo, hi), wt
 * its weights. */
#define DW_ERR144_SAVE 256
static inline int dspt_dw_err_144_fit(const struct dw_shape *s, int acc)
{
    return s->c == 144 && s->h % 2 == 0 && s->ow >= 3 && !acc;
}
void dspt_dw_err_144(const struct dw_shape *s, const int8_t *err, const int8_t *zeros, const HVX_Vector *wt,
                     int32_t *dx, HVX_Vector *save, int lo, int hi);

/* dwconv_bwd_one.c: backward data from an err of one pixel onto 1, 2 or 4 dx pixels, C % 32 == 0,
 * dx 128-byte aligned (the caller checks): each dx pixel err times its single tap. */
int dspt_dw_err_one_fit(const struct dw_shape *s);
int dspt_dw_err_one(struct dspt_ctx *ctx, const struct dw_shape *s, const int8_t *err, const int8_t *w, int32_t *dx,
                    int accumulate);

/* dwconv_wgrad_pairs.c: weight gradient of images and outputs of at most 4 pixels, each
 * output's window holding every input pixel: each (output, input) pair a register over
 * the batch, the threads on channel blocks; _fit says when. */
int dspt_dw_wgrad_pairs_fit(const struct dw_shape *s);
int dspt_dw_wgrad_pairs(struct dspt_ctx *ctx, const struct dw_shape *s, const int8_t *err, const int8_t *x,
                        int32_t *dw, int accumulate);

/* Image-stack pitch: bytes from one padded image to the next, whole vectors. */
static inline int dw_round_vec(int bytes) { return (bytes + HVX_BYTES - 1) & ~(HVX_BYTES - 1); }

/* dwconv.c (column quads), dwconv_wgrad.c (image quads): four byte rows r0..r3 (128 lanes each) interleaved into vrmpy's 4-byte groups, all of
 * them: q[k] lane l (k < 4, l < 32) holds r0[32k + l], r1[32k + l], r2[..], r3[..].
 * Four vshuff pairs for four vectors. */
static inline void dw_interleave4(HVX_Vector q[4], HVX_Vector r0, HVX_Vector r1, HVX_Vector r2, HVX_Vector r3)
{
    HVX_VectorPair p01 = Q6_W_vshuff_VVR(r1, r0, -1), p23 = Q6_W_vshuff_VVR(r3, r2, -1);
    HVX_VectorPair lo = Q6_W_vshuff_VVR(Q6_V_lo_W(p23), Q6_V_lo_W(p01), -2);
    HVX_VectorPair hi = Q6_W_vshuff_VVR(Q6_V_hi_W(p23), Q6_V_hi_W(p01), -2);
    q[0] = Q6_V_lo_W(lo);
    q[1] = Q6_V_hi_W(lo);
    q[2] = Q6_V_lo_W(hi);
    q[3] = Q6_V_hi_W(hi);
}

/* Where channel block cb starts. Not accumulating, with C > 128 and ragged, the last block
 * is moved back to end at C: it overlaps the one before (those channels computed twice,
 * stored twice with the same values) but keeps 128 lanes, so no block stores in pieces. */
static inline int dw_block_start(int cb, int c, int acc)
{
    int start = cb * HVX_BYTES;
    return !acc && c > HVX_BYTES && start + HVX_BYTES > c ? c - HVX_BYTES : start;
}

/* An unaligned store kept one vmemu: the empty asm hides that consecutive stores are
 * adjacent, which clang would otherwise merge into vlalign and two masked stores each
 * (five packets for four vectors where vmemu pairs with the multiplies). */
static inline void dw_store_u(int32_t *p, HVX_Vector v)
{
    __asm__("" : "+r"(p));
    hvx_store_u(p, v);
}

#endif
