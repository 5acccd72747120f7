/* dwconv_wgrad.h: the depthwise weight gradient's image quads, shared by dwconv_wgrad.c
 * (the fill, the C row loops, the op) and dwconv_wgrad_rows.c (3 x 3 rows as packets). */
#ifndef DSPTRAIN_DWCONV_WGRAD_H
#define DSPTRAIN_DWCONV_WGRAD_H

#include "hvx-utils.h"
#include "dwconv.h"

/* Interleaved images: pixel (r, q) of group gi at ((gi * rows + r) * cols + q) * pitch,
 * pitch = 4 C bytes: byte b of a row of 4 images is word b of the interleaved row, so a
 * row interleaves as one run of bytes whatever C is, and channel block cb32 (32 channels x
 * 4 images) of a pixel is the vector at byte 128 cb32 of it: aligned when C % 32 == 0,
 * else read unaligned (lanes past C: the next pixel's, never stored). */
struct quad {
    int8_t *buf;
    int rows, cols, pad, blocks, pitch, group_bytes;
    int lead;      /* buf is this far into its aligned buffer: row interiors on vectors */
    int aligned;   /* every row interior starts on a vector */
};

/* bytes past a quads buffer that dwconv_wgrad_rows.c may read: a row and 4 pixels past the
 * last group, from the last channel block */
#define WG_SLACK(q) ((q)->cols * (q)->pitch + 4 * (q)->pitch + (q)->blocks * HVX_BYTES)

/* part[t, 32 channels of block cb] = acc[t], or += with `add`; a ragged block's words only. */
static inline void wg_store(int32_t *part, const struct dw_shape *s, const HVX_Vector *acc, int taps, int cb, int add)
{
    int words = s->c - 32 * cb < 32 ? s->c - 32 * cb : 32;
    for (int t = 0; t < taps; t++) {
        int32_t *dst = part + t * s->c + 32 * cb;
        HVX_Vector v = add ? Q6_Vw_vadd_VwVw(acc[t], hvx_load_u(dst)) : acc[t];
        if (words == 32) hvx_store_u(dst, v);
        else hvx_store_bytes(dst, v, (uint32_t)words * 4);
    }
}

/* dwconv_wgrad_rows.c: 3 x 3 at stride 1 with OW % 4 == 0, or stride 2 with OW % 2 == 0:
 * part's taps of channel block cb (+)= the sums over ng groups, the rows as modulo-scheduled
 * packets; AL: the quads' vectors aligned (C % 32 == 0). */
int dspt_dw_wgrad_rows_fit(const struct dw_shape *s);
void dspt_dw_wgrad_rows(int AL, int32_t *part, const struct dw_shape *s, const struct quad *xq, const struct quad *eq,
                        int ng, int cb, int add);

#endif
