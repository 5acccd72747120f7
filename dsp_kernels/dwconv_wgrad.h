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

/* The interleave of 4 images into words (dw_interleave4's two vshuff stages) as a packet
 * loop, shared by the image quads (dwconv_wgrad.c's quad_fill: a step is the next vector of
 * each image's rows, a run one row) and the pixel pairs (dwconv_wgrad_pairs.c: a step is
 * the next group of 4 images, one run). `count` (>= 3) steps: the 4 vectors at src,
 * src + image, src + 2 image, src + 3 image (aligned), each load pointer then `stride`
 * bytes on (m0), go to 4 aligned vectors at dst; dst moves `small` bytes a step, and `big`
 * into the next run when image 0's load pointer meets run_end (advanced `runlen` then;
 * NULL: one run). 4 packets a step: each holds one vector load (the next step's), one
 * vshuff and one aligned store (the step before's); the fourth slot compares and muxes the
 * run's end, and the prologue's spare slots set m0 and images 1-3's pointers, so the
 * caller passes one base and no run end costs a packet. The software-pipelined
 * (modulo-scheduled: B. R. Rau, MICRO-27, 1994) loop is written in packets: clang-16 packs
 * the same C (loads a step ahead) in 9.5 packets, not 4, and serially in 11. The last
 * step's next vectors are not read (they may lie past the source). Inlined: the callers'
 * loop-invariant operands stay in registers. */
static inline __attribute__((always_inline)) void dw_fill_packets(int8_t *dst, const int8_t *src, int image,
                                                                   int stride, int count, const int8_t *run_end,
                                                                   int runlen, int small, int big)
{
    const int8_t *a = src, *b, *c, *e;
    int step, n = count - 2;
    register int m1 __asm__("r6") = -1;   /* vshuff's Rt is one of r0-r7 */
    register int m2 __asm__("r7") = -2;
    __asm__ volatile(
        "{ m0 = %[stride]; v10 = vmem(%[a]+#0); %[b] = add(%[a], %[image]); %[a] = add(%[a], %[stride]) }\n"
        "{ v11 = vmem(%[b]++m0); %[c] = add(%[b], %[image]) }\n"
        "{ v12 = vmem(%[c]++m0); %[e] = add(%[c], %[image]) }\n"
        "{ v13 = vmem(%[e]++m0) }\n"
        "{ v1:0 = vshuff(v11,v10,%[m1]); v10 = vmem(%[a]++m0) }\n"
        "{ v3:2 = vshuff(v13,v12,%[m1]); v11 = vmem(%[b]++m0) }\n"
        "{ v5:4 = vshuff(v2,v0,%[m2]); v12 = vmem(%[c]++m0) }\n"
        "{ v7:6 = vshuff(v3,v1,%[m2]); v13 = vmem(%[e]++m0); loop0(1f, %[n]) }\n"
        ".falign\n"
        "1:\n"
        "{ v1:0 = vshuff(v11,v10,%[m1]); v10 = vmem(%[a]++m0); vmem(%[d]+#0) = v4; p0 = cmp.eq(%[a], %[rend]) }\n"
        "{ v3:2 = vshuff(v13,v12,%[m1]); v11 = vmem(%[b]++m0); vmem(%[d]+#1) = v5;"
        "  if (p0) %[rend] = add(%[rend], %[runlen]) }\n"
        "{ v5:4 = vshuff(v2,v0,%[m2]); v12 = vmem(%[c]++m0); vmem(%[d]+#2) = v6;"
        "  %[step] = mux(p0, %[big], %[small]) }\n"
        "{ v7:6 = vshuff(v3,v1,%[m2]); v13 = vmem(%[e]++m0); vmem(%[d]+#3) = v7; %[d] = add(%[d], %[step]) }:endloop0\n"
        "{ v1:0 = vshuff(v11,v10,%[m1]); vmem(%[d]+#0) = v4; p0 = cmp.eq(%[a], %[rend]) }\n"
        "{ v3:2 = vshuff(v13,v12,%[m1]); vmem(%[d]+#1) = v5 }\n"
        "{ v5:4 = vshuff(v2,v0,%[m2]); vmem(%[d]+#2) = v6; %[step] = mux(p0, %[big], %[small]) }\n"
        "{ v7:6 = vshuff(v3,v1,%[m2]); vmem(%[d]+#3) = v7; %[d] = add(%[d], %[step]) }\n"
        "{ vmem(%[d]+#0) = v4 }\n"
        "{ vmem(%[d]+#1) = v5 }\n"
        "{ vmem(%[d]+#2) = v6 }\n"
        "{ vmem(%[d]+#3) = v7 }\n"
        : [a] "+r"(a), [b] "=&r"(b), [c] "=&r"(c), [e] "=&r"(e), [d] "+r"(dst), [rend] "+r"(run_end),
          [step] "=&r"(step)
        : [n] "r"(n), [m1] "r"(m1), [m2] "r"(m2), [image] "r"(image), [stride] "r"(stride), [runlen] "r"(runlen),
          [big] "r"(big), [small] "r"(small)
        : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v10", "v11", "v12", "v13", "p0", "m0", "lc0", "sa0", "usr",
          "memory");
}

/* dwconv_wgrad_rows.c: 3 x 3 at stride 1 with OW % 4 == 0, or stride 2 with OW % 2 == 0:
 * part's taps of channel block cb (+)= the sums over ng groups, the rows as modulo-scheduled
 * packets; AL: the quads' vectors aligned (C % 32 == 0). */
int dspt_dw_wgrad_rows_fit(const struct dw_shape *s);
void dspt_dw_wgrad_rows(int AL, int32_t *part, const struct dw_shape *s, const struct quad *xq, const struct quad *eq,
                        int ng, int cb, int add);

#endif
