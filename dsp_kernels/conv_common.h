/* conv_common.h: the pieces the convolution kernel files share, each defined once: a file
 * includes this for what it calls of another's, and conv.h only for the paths. */
#ifndef DSPTRAIN_CONV_COMMON_H
#define DSPTRAIN_CONV_COMMON_H

#include "kernels.h"

/* conv_lanes.c (used by conv_grid.c, conv_taps.c): a register tile of R blocks x T channels
 * (vectors at byte offsets off[k] from base, rows rstride bytes apart, weight words
 * wq[k * opad + t]); tile widths; accumulators (channels x 32 pixel lanes) stored
 * pixel-major with the vrdelta compaction of dspt_lanes_compaction. */
int dspt_lanes_tile_width(int left);
void dspt_lanes_tile(int R, int T, HVX_Vector *yt, int ytstride, const int8_t *base, int rstride,
                     const int32_t *off, int kg, const int32_t *wq, int opad, const int32_t *corr);
void dspt_lanes_compaction(uint8_t ctrl[128], int oc, int P);
void dspt_lanes_store(int32_t *stage, int O, const HVX_Vector *yt, int npx, const HVX_Vector *ctrl);

/* conv_lanes.c (used by conv.c, conv_grid.c): dst[i] += src[i] for n words. */
void dspt_add_words(int32_t *dst, const int32_t *src, uint32_t n);

/* conv_planar.c (used by conv_grid.c, conv_padded.c): the vdelta control spreading k bytes
 * a pixel to p2 bytes. */
void dspt_spread_control(uint8_t ctrl[128], int k, int p2);

/* conv.c (used by conv_planar.c, dwconv_wgrad.c): dw += part[1] + ... + part[shares-1] (a
 * split weight gradient's partial sums, in thread order), the words split across the HVX
 * threads. */
int dspt_join_partials(struct dspt_ctx *ctx, int32_t *dw, int32_t *const *part, int shares, uint32_t words);

/* conv.c (used by conv_pointwise.c): rows 4g .. 4g+3 of src (row stride ld bytes, `rows`
 * valid, zeros after) interleaved byte by byte into word g of each 32-lane block of
 * `width` columns (block lb at dst + lb * k4); `biased`: the packed b side (+ 128, the
 * lane of 1s after the last column: kernels.h). */
void dspt_interleave_rows(HVX_Vector *dst, const int8_t *src, int ld, int width, int rows, int k4, int biased);

#endif
