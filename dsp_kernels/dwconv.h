/* dwconv.h: depthwise convolutions (one 2-D filter per channel), shared by dwconv.c
 * (forward, backward data) and dwconv_wgrad.c (weight gradient). */
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

/* Image-stack pitch: bytes from one padded image to the next, whole vectors. */
static inline int dw_round_vec(int bytes) { return (bytes + HVX_BYTES - 1) & ~(HVX_BYTES - 1); }

#endif
