/* dwconv_bwd2_packets.c: the err pairs' anchor rows of 96 channels written in packets
 * ("dw_err_packets"): depthwise backward data of a 3 x 3 kernel at stride 2, padding 1.
 *
 * The arithmetic is dwconv_bwd2_pairs.c's (the phase decomposition of the strided
 * transposed convolution, Shi et al., CVPR 2016): anchor (m, n)'s 4 dx pixels
 * (2m + a, 2n + b) read only err (m + dy, n + dx), so err column n's rows m, m + 1
 * interleaved into bytes (one vshuff, S1) and two neighbouring columns' S1 interleaved into
 * words (two vshuffs, S2) give the words x[g] that meet dx pixel (a, b)'s weights in one
 * vrmpy each; a row's two dx pixels 2n, 2n + 1 are 2C consecutive words, so each product
 * is one aligned store. At 96 channels an anchor is 12 products and 12 stores, and HVX
 * stores one vector a packet: 12 packets is the bound. clang-16 packed the C loop in 18:
 * its err loads were vmemu, which shares a packet with no store (4 of them an anchor).
 *
 * Here an image's rows of anchors are one modulo-scheduled loop (B. R. Rau, MICRO-27, 1994)
 * in 12 packets an anchor: every packet stores the product made in the packet before and
 * makes the next, and the next-but-one column's loads and shuffles ride beside them:
 * - err columns are read as two aligned vmem (the vectors holding the pixel's first and
 *   last byte: nothing past the pixel is read) and one valign, instead of a vmemu: an
 *   aligned load shares a packet with a store and a vrmpy;
 * - each column is loaded and shuffled (S1) once, and serves the anchor on its left and
 *   on its right (the err pairs' C flat loop loaded 4 pixels an anchor);
 * - the slot rules, checked by the assembler: one vector load and one store a packet, a
 *   vshuff (two of the four HVX resources) beside a store and a vrmpy but no load, a
 *   valign beside a store, a vrmpy and a load or a scalar op.
 * A row's last anchor meets a zero column (padding), which costs no packet: the inner loop
 * runs the anchors whose next-but-one column exists, and the last two, unrolled after it,
 * load and shuffle the next row's first two columns beside their stores; a row costs one
 * packet more (the outer loop's first), an image a 12-packet prologue.
 * Work is split by images across the HVX threads (threads.h), as the err pairs.
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "dwconv.h"

/* One image's rows of anchors: err rows from e (row m + 1 of the last anchor row: zeros),
 * dx rows from d (the last anchor row's second dx row: dlast, a sink when H is odd),
 * OW >= 3 anchors a row. W[3 k + g]: dx pixel k = 2a + b's weights for channels
 * 32 g .. 32 g + 31, interleaved as the words (slot dy + 2 dx). Registers: x v0-v2 (v3 the
 * unused fourth group), S1 of the anchor's right column (L) v5:4 and of the next-but-one
 * (R) v7:6, a column's aligned vectors v8-v11 and its pixels v12 (row m), v13 (row m + 1),
 * products v14/v15 in turn, zero v16. A row's last two anchors load no column: the next
 * row's first two are loaded and shuffled beside them, so only the image's first row pays
 * a prologue (err rows are contiguous: the top row runs on; the last row's next is read
 * from the zeros). Not inlined: clang-16's assembler crashes relaxing the callers' branches
 * over several copies of it. */
static __attribute__((noinline)) void er_image96(const int8_t *e, const int8_t *zeros, int32_t *d, int32_t *dlast,
                                                 int OH, int OW, int rowd, const HVX_Vector *W)
{
    /* a column's first byte (valign's Rt, one of r0-r7 as vshuff's), its last byte */
    register const int8_t *pt __asm__("r4") = e;
    register const int8_t *pb __asm__("r5") = OH > 1 ? e + OW * 96 : zeros;
    const int8_t *pt95, *pb95;
    int32_t *d0 = d, *d1 = OH > 1 ? d + rowd : dlast, *t2;
    const int step = 96, n = OW - 2, owc = OW * 96, rb256 = rowd * 4 + 256;
    int k = OH;   /* the rows left, this one's included */
    register int m1 __asm__("r6") = -1;
    register int m2 __asm__("r7") = -2;
    __asm__ volatile(
        /* prologue: columns 0 (S1 into v7:6) and 1 (S1 into v5:4, the loop's L), anchor 0's
         * words and first product */
        "{ m0 = %[step]; v8 = vmem(%[pt]+#0); v16 = vxor(v16, v16); %[pt95] = add(%[pt], #95) }\n"
        "{ v9 = vmem(%[pt95]++m0); loop0(1f, %[n]); %[pb95] = add(%[pb], #95) }\n"
        "{ v10 = vmem(%[pb]+#0); v12 = valign(v9, v8, %[pt]); %[pt] = add(%[pt], #96) }\n"
        "{ v11 = vmem(%[pb95]++m0); loop1(2f, %[k]) }\n"
        "{ v8 = vmem(%[pt]+#0); v13 = valign(v11, v10, %[pb]); %[pb] = add(%[pb], #96) }\n"
        "{ v9 = vmem(%[pt95]++m0); v7:6 = vshuff(v13, v12, %[m1]) }\n"
        "{ v10 = vmem(%[pb]+#0); v12 = valign(v9, v8, %[pt]); %[pt] = add(%[pt], #96) }\n"
        "{ v11 = vmem(%[pb95]++m0) }\n"
        "{ v13 = valign(v11, v10, %[pb]); %[pb] = add(%[pb], #96) }\n"
        "{ v5:4 = vshuff(v13, v12, %[m1]) }\n"
        "{ v1:0 = vshuff(v4, v6, %[m2]) }\n"
        "{ v3:2 = vshuff(v5, v7, %[m2]); v15.w = vrmpy(v0.b, %[w00].b); jump 1f }\n"
        /* a row after the first: the last row's last store, the first product, the pointers */
        ".falign\n"
        "2:\n"
        "{ vmem(%[d1]+#0) = v14; v15.w = vrmpy(v0.b, %[w00].b); %[d1] = mux(p0, %[dlast], %[t2]); loop0(1f, %[n]) }\n"
        /* anchor n: stores and products of n; column n + 2 loaded and shuffled (R); the
         * words of n + 1 from L and R; L = R */
        "1:\n"
        "{ vmem(%[d0]++#1) = v15; v14.w = vrmpy(v1.b, %[w01].b); v8 = vmem(%[pt]+#0) }\n"
        "{ vmem(%[d0]++#1) = v14; v15.w = vrmpy(v2.b, %[w02].b); v9 = vmem(%[pt95]++m0) }\n"
        "{ vmem(%[d0]++#1) = v15; v14.w = vrmpy(v0.b, %[w10].b); v10 = vmem(%[pb]+#0) }\n"
        "{ vmem(%[d0]++#1) = v14; v15.w = vrmpy(v1.b, %[w11].b); v11 = vmem(%[pb95]++m0) }\n"
        "{ vmem(%[d0]++#1) = v15; v14.w = vrmpy(v2.b, %[w12].b); v12 = valign(v9, v8, %[pt]);"
        "  %[pt] = add(%[pt], #96) }\n"
        "{ vmem(%[d0]++#1) = v14; v15.w = vrmpy(v0.b, %[w20].b); v13 = valign(v11, v10, %[pb]);"
        "  %[pb] = add(%[pb], #96) }\n"
        "{ vmem(%[d1]++#1) = v15; v14.w = vrmpy(v1.b, %[w21].b) }\n"
        "{ vmem(%[d1]++#1) = v14; v15.w = vrmpy(v2.b, %[w22].b); v7:6 = vshuff(v13, v12, %[m1]) }\n"
        "{ vmem(%[d1]++#1) = v15; v14.w = vrmpy(v0.b, %[w30].b) }\n"
        "{ vmem(%[d1]++#1) = v14; v15.w = vrmpy(v1.b, %[w31].b); v1:0 = vshuff(v6, v4, %[m2]) }\n"
        "{ vmem(%[d1]++#1) = v15; v14.w = vrmpy(v2.b, %[w32].b); v3:2 = vshuff(v7, v5, %[m2]) }\n"
        "{ vmem(%[d1]++#1) = v14; v15.w = vrmpy(v0.b, %[w00].b); v4 = v6; v5 = v7 }:endloop0\n"
        /* anchor OW - 2, no column to load; the next row's pointers (p0: the next row is the
         * image's last, its row m + 1 the zeros; p1: there is none, read the zeros) */
        "{ vmem(%[d0]++#1) = v15; v14.w = vrmpy(v1.b, %[w01].b); %[k] = add(%[k], #-1) }\n"
        "{ vmem(%[d0]++#1) = v14; v15.w = vrmpy(v2.b, %[w02].b); p1 = cmp.eq(%[k], #0);"
        "  p0 = cmp.eq(%[k], #1) }\n"
        "{ vmem(%[d0]++#1) = v15; v14.w = vrmpy(v0.b, %[w10].b); %[pb] = add(%[pt], %[owc]) }\n"
        "{ vmem(%[d0]++#1) = v14; v15.w = vrmpy(v1.b, %[w11].b); if (p0) %[pb] = add(%[zeros], #0);"
        "  if (p1) %[pt] = add(%[zeros], #0) }\n"
        "{ vmem(%[d0]++#1) = v15; v14.w = vrmpy(v2.b, %[w12].b); if (p1) %[pb] = add(%[zeros], #0) }\n"
        "{ vmem(%[d0]++#1) = v14; v15.w = vrmpy(v0.b, %[w20].b); %[pt95] = add(%[pt], #95);"
        "  %[pb95] = add(%[pb], #95) }\n"
        "{ vmem(%[d1]++#1) = v15; v14.w = vrmpy(v1.b, %[w21].b) }\n"
        "{ vmem(%[d1]++#1) = v14; v15.w = vrmpy(v2.b, %[w22].b); v8 = vmem(%[pt]+#0) }\n"
        "{ vmem(%[d1]++#1) = v15; v14.w = vrmpy(v0.b, %[w30].b); v9 = vmem(%[pt95]++m0) }\n"
        /* the last anchor's right column is the padding */
        "{ vmem(%[d1]++#1) = v14; v15.w = vrmpy(v1.b, %[w31].b); v1:0 = vshuff(v16, v4, %[m2]) }\n"
        "{ vmem(%[d1]++#1) = v15; v14.w = vrmpy(v2.b, %[w32].b); v3:2 = vshuff(v16, v5, %[m2]) }\n"
        "{ vmem(%[d1]++#1) = v14; v15.w = vrmpy(v0.b, %[w00].b); v10 = vmem(%[pb]+#0) }\n"
        /* anchor OW - 1, beside the next row's columns 0 (S1 into v7:6) and 1 (into v5:4) */
        "{ vmem(%[d0]++#1) = v15; v14.w = vrmpy(v1.b, %[w01].b); v11 = vmem(%[pb95]++m0);"
        "  v12 = valign(v9, v8, %[pt]) }\n"
        "{ vmem(%[d0]++#1) = v14; v15.w = vrmpy(v2.b, %[w02].b); v13 = valign(v11, v10, %[pb]);"
        "  %[pt] = add(%[pt], #96) }\n"
        "{ vmem(%[d0]++#1) = v15; v14.w = vrmpy(v0.b, %[w10].b); v7:6 = vshuff(v13, v12, %[m1]);"
        "  %[pb] = add(%[pb], #96) }\n"
        "{ vmem(%[d0]++#1) = v14; v15.w = vrmpy(v1.b, %[w11].b); v8 = vmem(%[pt]+#0) }\n"
        "{ vmem(%[d0]++#1) = v15; v14.w = vrmpy(v2.b, %[w12].b); v9 = vmem(%[pt95]++m0) }\n"
        "{ vmem(%[d0]++#1) = v14; v15.w = vrmpy(v0.b, %[w20].b); v10 = vmem(%[pb]+#0) }\n"
        "{ vmem(%[d1]++#1) = v15; v14.w = vrmpy(v1.b, %[w21].b); v11 = vmem(%[pb95]++m0);"
        "  v12 = valign(v9, v8, %[pt]) }\n"
        "{ vmem(%[d1]++#1) = v14; v15.w = vrmpy(v2.b, %[w22].b); v13 = valign(v11, v10, %[pb]);"
        "  %[pt] = add(%[pt], #96) }\n"
        "{ vmem(%[d1]++#1) = v15; v14.w = vrmpy(v0.b, %[w30].b); v5:4 = vshuff(v13, v12, %[m1]);"
        "  %[pb] = add(%[pb], #96) }\n"
        "{ vmem(%[d1]++#1) = v14; v15.w = vrmpy(v1.b, %[w31].b); v1:0 = vshuff(v4, v6, %[m2]);"
        "  %[d0] = add(%[d1], #384) }\n"
        "{ vmem(%[d1]++#1) = v15; v14.w = vrmpy(v2.b, %[w32].b); v3:2 = vshuff(v5, v7, %[m2]);"
        "  %[t2] = add(%[d1], %[rb256]) }:endloop1\n"
        "{ vmem(%[d1]+#0) = v14 }\n"
        : [pt] "+r"(pt), [pb] "+r"(pb), [pt95] "=&r"(pt95), [pb95] "=&r"(pb95), [t2] "=&r"(t2),
          [d0] "+r"(d0), [d1] "+r"(d1), [k] "+r"(k)
        : [step] "r"(step), [n] "r"(n), [owc] "r"(owc), [rb256] "r"(rb256),
          [zeros] "r"(zeros), [dlast] "r"(dlast), [m1] "r"(m1), [m2] "r"(m2), [w00] "v"(W[0]), [w01] "v"(W[1]),
          [w02] "v"(W[2]), [w10] "v"(W[3]), [w11] "v"(W[4]), [w12] "v"(W[5]), [w20] "v"(W[6]), [w21] "v"(W[7]),
          [w22] "v"(W[8]), [w30] "v"(W[9]), [w31] "v"(W[10]), [w32] "v"(W[11])
        : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "v16",
          "p0", "p1", "m0", "lc0", "sa0", "lc1", "sa1", "usr", "memory");
}

void dspt_dw_err_packets(const struct dw_shape *s, const int8_t *err, const int8_t *zeros, const HVX_Vector *wt,
                         int32_t *dx, int32_t *sink, int lo, int hi)
{
    const int C = 96, OW = s->ow, OH = s->oh, rowd = s->w * C;   /* OH = (H + 1) / 2 anchor rows */
    HVX_Vector W[12];   /* a local copy: the stores to dx cannot alias it, so it stays in registers */
    for (int k = 0; k < 4; k++)
        for (int g = 0; g < 3; g++) W[3 * k + g] = wt[4 * k + g];
    for (int img = lo; img < hi; img++) {
        int32_t *dx_i = dx + (size_t)img * s->h * rowd;
        int32_t *dlast = 2 * OH - 1 < s->h ? dx_i + (2 * OH - 1) * rowd : sink;
        er_image96(err + (size_t)img * OH * OW * C, zeros, dx_i, dlast, OH, OW, rowd, W);
    }
}
