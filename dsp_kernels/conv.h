/* conv.h: a convolution's shape and the few-channel paths conv.c hands shapes to. */
#ifndef DSPTRAIN_CONV_H
#define DSPTRAIN_CONV_H

#include "kernels.h"

/* NHWC input (n, h, w, c), O output channels, kernel kh x kw, output oh x ow. */
struct conv_shape {
    int n, h, w, c, o, kh, kw, oh, ow, stride, pad;
};

/* conv_lanes.c: forward conv with output pixels in the lanes (stride 1, C <= 4). */
int dspt_conv_lanes_fits(const struct conv_shape *s);
int dspt_conv_lanes(struct dspt_ctx *ctx, int32_t *y, const int8_t *x, const int8_t *w,
                    const struct conv_shape *s, int accumulate);

/* conv_taps.c: forward conv of one-channel inputs with 4 to 7 outputs, lanes (4 pixels x
 * 8 channel slots), weights in the vector, image words in the scalar (stride 1). */
int dspt_conv_taps_fits(const struct conv_shape *s);
int dspt_conv_taps(struct dspt_ctx *ctx, int32_t *y, const int8_t *x, const int8_t *w,
                   const struct conv_shape *s, int accumulate);

/* conv_lanes.c's pieces, shared with conv_grid.c: a register tile of R blocks x T
 * channels (vectors at byte offsets off[k] from base, rows rstride bytes apart, weight
 * words wq[k * opad + t]); tile widths; accumulators (channels x 32 pixel lanes) stored
 * pixel-major with the vrdelta compaction of dspt_lanes_compaction; dst += src. */
int dspt_lanes_tile_width(int left);
void dspt_lanes_tile(int R, int T, HVX_Vector *yt, int ytstride, const int8_t *base, int rstride,
                     const int32_t *off, int kg, const int32_t *wq, int opad, const int32_t *corr);
void dspt_lanes_compaction(uint8_t ctrl[128], int oc, int P);
void dspt_lanes_store(int32_t *stage, int O, const HVX_Vector *yt, int npx, const HVX_Vector *ctrl);
/* conv_planar.c's vdelta control spreading k bytes a pixel to p2 bytes (shared with conv_grid.c). */
void dspt_spread_control(uint8_t ctrl[128], int k, int p2);
void dspt_add_words(int32_t *dst, const int32_t *src, uint32_t n);
/* conv.c: dw += part[1] + ... + part[shares-1] (a split weight gradient's partial sums, in
 * thread order), the words split across the HVX threads. */
int dspt_join_partials(struct dspt_ctx *ctx, int32_t *dw, int32_t *const *part, int shares, uint32_t words);

/* conv_grid.c: forward conv of 2-16 channel inputs, pixels of the padded grid in the lanes
 * (stride 1); also backward data, as the forward conv of err with flipped weights. */
int dspt_conv_grid_fits(const struct conv_shape *s);
int dspt_conv_grid(struct dspt_ctx *ctx, int32_t *y, const int8_t *x, const int8_t *w,
                   const struct conv_shape *s, int accumulate);
int dspt_conv_grid_bwd_data_fits(const struct conv_shape *s);
int dspt_conv_grid_bwd_data(struct dspt_ctx *ctx, int32_t *dx, const int8_t *err, const int8_t *w,
                            const struct conv_shape *s, int accumulate);

/* conv_padded.c: forward conv of 2-4 channel inputs as an implicit GEMM over the
 * channel-padded image (stride 1; VGG's first conv). */
int dspt_conv_padded_fits(const struct conv_shape *s);
int dspt_conv_padded(struct dspt_ctx *ctx, int32_t *y, const int8_t *x, const int8_t *w,
                     const struct conv_shape *s, int accumulate);

/* conv_planar.c: weight gradient from channel planes (stride 1, C <= 8, O <= 16). */
int dspt_conv_planar_fits(const struct conv_shape *s);
int dspt_conv_planar_bwd_weight(struct dspt_ctx *ctx, int32_t *dw, const int8_t *err, const int8_t *x,
                                const struct conv_shape *s, int accumulate);

/* conv_col2im.c: backward data as GEMM + col2im (C < 32, O % 4 == 0). */
int dspt_conv_col2im_fits(const struct conv_shape *s);
int dspt_conv_col2im_bwd_data(struct dspt_ctx *ctx, int32_t *dx, const int8_t *err, const int8_t *w,
                              const struct conv_shape *s, int accumulate);

#endif
