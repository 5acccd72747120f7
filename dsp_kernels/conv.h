/* conv.h: a convolution's shape and the paths conv.c hands shapes to (each kernel file
 * defines its own; what they share otherwise is in conv_common.h). */
#ifndef DSPTRAIN_CONV_H
#define DSPTRAIN_CONV_H

#include "kernels.h"

/* NHWC input (n, h, w, c), O output channels, kernel kh x kw, output oh x ow. */
struct conv_shape {
    int n, h, w, c, o, kh, kw, oh, ow, stride, pad;
};

/* conv_pointwise.c: backward data of 1 x 1, stride > 1, no padding (bp packed wT), GEMMs on
 * err's pixels where they lie, dx written s*C words apart. */
int dspt_pointwise_strided_fits(const struct conv_shape *s);
int dspt_pointwise_strided_bwd_data(struct dspt_ctx *ctx, int32_t *dx, const int8_t *err, const int8_t *bp,
                                    const struct conv_shape *s, int acc);

/* conv_pointwise.c: weight gradient of 1 x 1, stride 1, no padding, whose positions
 * (n * h * w, at most pc) are reduced in one pass: dw's blocks split across the threads. */
int dspt_pointwise_wgrad_fits(const struct conv_shape *s, int pc);
int dspt_pointwise_wgrad(struct dspt_ctx *ctx, int32_t *dw, const int8_t *err, const int8_t *x,
                         const struct conv_shape *s, int acc);

/* conv_pointwise.c: y[p, 0..15] (+)= src[p, :] . wm[0..15, :] for p < pixels (a multiple of
 * 32; K % 4 == 0, wm word-aligned), the pixels in the vrmpy lanes. */
int dspt_pointwise_pixels_fits(int out_channels, int k, int pixels);
int dspt_pointwise_pixels(struct dspt_ctx *ctx, int32_t *y, const int8_t *src, const int8_t *wm, int p, int k,
                          int acc);

/* conv_lanes.c: forward conv with output pixels in the lanes (stride 1, C <= 4). */
int dspt_conv_lanes_fits(const struct conv_shape *s);
int dspt_conv_lanes(struct dspt_ctx *ctx, int32_t *y, const int8_t *x, const int8_t *w,
                    const struct conv_shape *s, int accumulate);

/* conv_taps.c: forward conv of one-channel inputs with 4 to 7 outputs, lanes (4 pixels x
 * 8 channel slots), weights in the vector, image words in the scalar (stride 1). */
int dspt_conv_taps_fits(const struct conv_shape *s);
int dspt_conv_taps(struct dspt_ctx *ctx, int32_t *y, const int8_t *x, const int8_t *w,
                   const struct conv_shape *s, int accumulate);

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
