/* conv.h: a convolution's shape, shared by conv.c and conv_lanes.c. */
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

#endif
