/* dwconv_bwd2_144.c: the err pairs at 144 channels in two passes ("dw_err_144"): depthwise
 * backward data of a 3 x 3 kernel at stride 2, padding 1, an even H and W.
 *
 * The arithmetic is dwconv_bwd2_pairs.c's (the phase decomposition of the strided
 * transposed convolution, Shi et al., CVPR 2016): anchor (m, n)'s 4 dx pixels
 * (2m + a, 2n + b) read only err (m + dy, n + dx); a row's dx pixels 2n, 2n + 1 are 288
 * consecutive words, 9 aligned vectors: pixel 2n's channels 0..127 from the err block at
 * channel 0 (A), 2n + 1's channels 16..143 from the block at channel 16 (B), the vector
 * between them (2n's 128..143, 2n + 1's 0..15) one valign of A's first and B's last words.
 * 18 products and 18 aligned stores an anchor: 18 packets is the bound. In one pass an
 * anchor needs its 18 weight vectors, 9 word vectors and two columns' shuffled err in
 * registers, more than 32 (the one-pass loop takes 30 packets an anchor). So:
 * - pass A runs a chunk's anchors with 8 weights: A's 4 word vectors, 8 products, and A's
 *   first words saved (one aligned store) for pass B;
 * - pass B runs them again with 10 weights: B's 4 word vectors and the middle one (from
 *   the saved words), 10 products.
 * Both passes run a chunk of whole anchor rows (over images) as one loop written in packets,
 * modulo-scheduled by hand (B. R. Rau, MICRO-27, 1994) as dwconv_bwd2_packets.c's: every
 * packet stores the product made in the packet before and makes the next, 9 packets an
 * anchor in pass A and 10 in pass B (the bound of their stores), the next-but-one err
 * column's loads and shuffles beside them:
 * - an err pixel's 128 bytes from channel 0 (A) or 16 (B) are read from p = the pixel or 16
 *   bytes in as the aligned vectors holding bytes p and p + 127 and one valign by p (when p
 *   is on a vector both are the same one and the shift 0), not a vmemu, which shares a
 *   packet with no store; nothing past the pixel is read;
 * - each column's rows m, m + 1 are byte-interleaved once (S1) and serve the anchors on its
 *   left and right; two neighbouring columns' S1 interleaved into words (S2);
 * - a row's last anchor meets the zero column (v16); a row's last two anchors load the next
 *   row's first two columns (the rows are contiguous in err; below an image's last row, or
 *   past the chunk, the zeros), so only a chunk pays the column prologue. Pass A's row ends
 *   take no packet more: the next row's flags are set in the loop's free slots, its column
 *   0 loaded and aligned beside the row's next-to-last anchor, column 1 and the words
 *   beside the last, and the inner loop's count rewritten (lc0: the assembler crashes on
 *   a loop0 in a packet of three more instructions); pass B's row ends still take 3
 *   packets more (its loop has no free slots for the flags; it makes an anchor's middle
 *   words in the anchor's second packet, so a row needs no packet for its first's).
 * Work is split by images across the HVX threads (dwconv_bwd2_pairs.c's shares).
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "dwconv.h"

#define C144 144

/* Both passes' prologue up to column 1's last load: column 0 loaded and shuffled (S1 into
 * v7:6), column 1 loaded; the hardware loops set up (rows, the anchors before a row's last two). */
#define E144_PROLOGUE \
    "{ m0 = %[step]; v8 = vmem(%[pt]+#0); v16 = vxor(v16, v16); %[ptl] = add(%[pt], #127) }\n" \
    "{ v9 = vmem(%[ptl]++m0); %[pbl] = add(%[pb], #127); loop1(2f, %[rr]) }\n" \
    "{ v10 = vmem(%[pb]+#0); v12 = valign(v9, v8, %[pt]); %[pt] = add(%[pt], #144) }\n" \
    "{ v11 = vmem(%[pbl]++m0); loop0(1f, %[n]) }\n" \
    "{ v8 = vmem(%[pt]+#0); v13 = valign(v11, v10, %[pb]); %[pb] = add(%[pb], #144) }\n" \
    "{ v9 = vmem(%[ptl]++m0); v7:6 = vshuff(v13, v12, %[m1]) }\n" \
    "{ v10 = vmem(%[pb]+#0); v12 = valign(v9, v8, %[pt]); %[pt] = add(%[pt], #144) }\n" \
    "{ v11 = vmem(%[pbl]++m0) }\n"

/* Pass A over `rows` whole anchor rows in packets. top/bot: the first row's top and bottom
 * err pixels (the bottom: zoff when that row is its image's last), zoff the zeros, d0 its
 * first dx pair, k the rows left in its image (its own included). Registers: words v0-v3,
 * S1 of the anchor's right column (L) v5:4 and of the next-but-one (R) v7:6, a column's
 * aligned vectors v8-v11 and its views v12 (row m), v13 (row m + 1), products v14/v15 in
 * turn, zero v16; d1 (dx row 2m + 1) lags an anchor, bumped in the anchor's first packet.
 * Not inlined: clang-16's assembler crashes relaxing branches over several copies (and on a
 * loop0 set up in a packet of three or more other instructions). */
static __attribute__((noinline)) void e144_rows_a(const int8_t *top, const int8_t *bot, const int8_t *zoff,
                                                  int32_t *d0, HVX_Vector *sv, int rows, int k, int OH, int OW,
                                                  int W_, const HVX_Vector *wt)
{
    register const int8_t *pt __asm__("r4") = top;
    register const int8_t *pb __asm__("r5") = bot;
    register int m1 __asm__("r6") = -1;
    register int m2 __asm__("r7") = -2;
    const int8_t *ptl, *pbl;
    const int rowd4 = W_ * C144 * 4, owc = OW * C144, n = OW - 2, dskip = 1152 + rowd4, step = C144;
    int32_t *d1 = d0 + W_ * C144 - 288;   /* lags an anchor: bumped in the anchor's first packet */
    int rr = rows;
    HVX_Vector w0 = wt[0], w1 = wt[1], w2 = wt[2], w3 = wt[3], w4 = wt[9], w5 = wt[10], w6 = wt[11], w7 = wt[12];
    __asm__ volatile(
        /* prologue: the first row's columns 0 (S1 into v7:6) and 1 (into v5:4), anchor 0's words */
        E144_PROLOGUE
        "{ v13 = valign(v11, v10, %[pb]); %[pb] = add(%[pb], #144); %[k] = add(%[k], #-1); %[rr] = add(%[rr], #-1) }\n"
        "{ v5:4 = vshuff(v13, v12, %[m1]) }\n"
        "{ v1:0 = vshuff(v4, v6, %[m2]) }\n"
        "{ v3:2 = vshuff(v5, v7, %[m2]); v15.w = vrmpy(v0.b, %[w0].b) }\n"
        /* anchor n < OW - 2: its stores and products; column n + 2 loaded and shuffled (S1,
         * v7:6); the words of n + 1 from L (v5:4) and it; L = it. In the free slots, the next
         * row's flags (idempotent: the loop runs at least once): p1 no next row in the chunk,
         * p2 the next row its image's last (k: the rows of the image after this one) */
        ".falign\n"
        "2:\n"
        "1:\n"
        "{ vmem(%[d0]+#0) = v15; v14.w = vrmpy(v0.b, %[w4].b); v8 = vmem(%[pt]+#0); %[d1] = add(%[d1], #1152) }\n"
        "{ vmem(%[d1]+#0) = v14; v15.w = vrmpy(v1.b, %[w1].b); v9 = vmem(%[ptl]++m0); p0 = cmp.eq(%[k], #0) }\n"
        "{ vmem(%[sv]++#1) = v0; v14.w = vrmpy(v1.b, %[w5].b); v10 = vmem(%[pb]+#0); if (p0) %[k] = add(%[oh], #0) }\n"
        "{ vmem(%[d0]+#1) = v15; v15.w = vrmpy(v2.b, %[w2].b); v11 = vmem(%[pbl]++m0); v12 = valign(v9, v8, %[pt]) }\n"
        "{ vmem(%[d1]+#1) = v14; v14.w = vrmpy(v2.b, %[w6].b); v13 = valign(v11, v10, %[pb]); %[pt] = add(%[pt], #144) }\n"
        "{ vmem(%[d0]+#2) = v15; v15.w = vrmpy(v3.b, %[w3].b); v7:6 = vshuff(v13, v12, %[m1]); %[pb] = add(%[pb], #144) }\n"
        "{ vmem(%[d1]+#2) = v14; v14.w = vrmpy(v3.b, %[w7].b); v1:0 = vshuff(v6, v4, %[m2]); p1 = cmp.eq(%[rr], #0) }\n"
        "{ vmem(%[d0]+#3) = v15; v3:2 = vshuff(v7, v5, %[m2]); %[d0] = add(%[d0], #1152); p2 = cmp.eq(%[k], #1) }\n"
        "{ vmem(%[d1]+#3) = v14; v15.w = vrmpy(v0.b, %[w0].b); v4 = v6; v5 = v7 }:endloop0\n"
        /* anchor OW - 2: its right column is the padding (zeros, v16); the next row's column
         * 0 loaded (past the chunk, or below an image's last row, the zeros) */
        "{ vmem(%[d0]+#0) = v15; v14.w = vrmpy(v0.b, %[w4].b); %[d1] = add(%[d1], #1152); if (p1) %[pt] = add(%[zoff], #0) }\n"
        "{ vmem(%[d1]+#0) = v14; v15.w = vrmpy(v1.b, %[w1].b); %[pb] = add(%[pt], %[owc]); %[ptl] = add(%[pt], #127) }\n"
        "{ vmem(%[sv]++#1) = v0; v14.w = vrmpy(v1.b, %[w5].b); v8 = vmem(%[pt]+#0); p2 = or(p2, p1) }\n"
        "{ vmem(%[d0]+#1) = v15; v15.w = vrmpy(v2.b, %[w2].b); v9 = vmem(%[ptl]++m0); if (p2) %[pb] = add(%[zoff], #0) }\n"
        "{ vmem(%[d1]+#1) = v14; v14.w = vrmpy(v2.b, %[w6].b); v12 = valign(v9, v8, %[pt]); %[pbl] = add(%[pb], #127) }\n"
        "{ vmem(%[d0]+#2) = v15; v15.w = vrmpy(v3.b, %[w3].b); v10 = vmem(%[pb]+#0); %[pt] = add(%[pt], #144) }\n"
        "{ vmem(%[d1]+#2) = v14; v14.w = vrmpy(v3.b, %[w7].b); v1:0 = vshuff(v16, v4, %[m2]) }\n"
        "{ vmem(%[d0]+#3) = v15; v3:2 = vshuff(v16, v5, %[m2]); %[d0] = add(%[d0], #1152) }\n"
        "{ vmem(%[d1]+#3) = v14; v15.w = vrmpy(v0.b, %[w0].b); v11 = vmem(%[pbl]++m0); %[d1] = add(%[d1], #1152) }\n"
        /* anchor OW - 1, beside the next row's column 0's S1 (v7:6), column 1 (v5:4) and its
         * anchor 0's words; the dx pointers skip the odd dx row */
        "{ vmem(%[d0]+#0) = v15; v14.w = vrmpy(v0.b, %[w4].b); v13 = valign(v11, v10, %[pb]); v8 = vmem(%[pt]+#0) }\n"
        "{ vmem(%[d1]+#0) = v14; v15.w = vrmpy(v1.b, %[w1].b); v9 = vmem(%[ptl]++m0); %[pb] = add(%[pb], #144) }\n"
        "{ vmem(%[sv]++#1) = v0; v14.w = vrmpy(v1.b, %[w5].b); v7:6 = vshuff(v13, v12, %[m1]); %[rr] = add(%[rr], #-1) }\n"
        "{ vmem(%[d0]+#1) = v15; v15.w = vrmpy(v2.b, %[w2].b); v10 = vmem(%[pb]+#0); v12 = valign(v9, v8, %[pt]) }\n"
        "{ vmem(%[d1]+#1) = v14; v14.w = vrmpy(v2.b, %[w6].b); v11 = vmem(%[pbl]++m0); %[pt] = add(%[pt], #144) }\n"
        "{ vmem(%[d0]+#2) = v15; v15.w = vrmpy(v3.b, %[w3].b); v13 = valign(v11, v10, %[pb]); %[k] = add(%[k], #-1) }\n"
        "{ vmem(%[d1]+#2) = v14; v14.w = vrmpy(v3.b, %[w7].b); v5:4 = vshuff(v13, v12, %[m1]); %[pb] = add(%[pb], #144) }\n"
        "{ vmem(%[d0]+#3) = v15; v1:0 = vshuff(v4, v6, %[m2]); %[d0] = add(%[d0], %[dskip]); lc0 = %[n] }\n"
        "{ vmem(%[d1]+#3) = v14; v3:2 = vshuff(v5, v7, %[m2]); v15.w = vrmpy(v0.b, %[w0].b); %[d1] = add(%[d1], %[rowd4]) }:endloop1\n"
        : [pt] "+r"(pt), [pb] "+r"(pb), [ptl] "=&r"(ptl), [pbl] "=&r"(pbl), [d0] "+r"(d0), [d1] "+r"(d1),
          [sv] "+r"(sv), [k] "+r"(k), [rr] "+r"(rr)
        : [step] "r"(step), [n] "r"(n), [owc] "r"(owc), [rowd4] "r"(rowd4), [dskip] "r"(dskip), [oh] "r"(OH),
          [zoff] "r"(zoff), [m1] "r"(m1), [m2] "r"(m2), [w0] "v"(w0), [w1] "v"(w1), [w2] "v"(w2), [w3] "v"(w3),
          [w4] "v"(w4), [w5] "v"(w5), [w6] "v"(w6), [w7] "v"(w7)
        : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "v16",
          "p0", "p1", "p2", "m0", "lc0", "sa0", "lc1", "sa1", "usr", "memory");
}

/* Pass B over the same rows in packets: as pass A, top/bot 16 bytes into the pixels, d0 at
 * the pair's middle vector, sv the words pass A saved (one read past the chunk's), the
 * middle words v17 made from them (v18) and B's last words. */
static __attribute__((noinline)) void e144_rows_b(const int8_t *top, const int8_t *bot, const int8_t *zoff,
                                                  int32_t *d0, const HVX_Vector *sv, int rows, int k, int OH,
                                                  int OW, int W_, const HVX_Vector *wt)
{
    register const int8_t *pt __asm__("r4") = top;
    register const int8_t *pb __asm__("r5") = bot;
    register int m1 __asm__("r6") = -1;
    register int m2 __asm__("r7") = -2;
    register int r64 __asm__("r3") = 64;
    const int8_t *ptl, *pbl;
    const int rowd4 = W_ * C144 * 4, owc = OW * C144, n = OW - 2, dskip = 1152 + rowd4, step = C144;
    int32_t *d1 = d0 + W_ * C144 - 288;   /* lags an anchor: bumped in the anchor's first packet */
    int rr = rows;
    HVX_Vector w0 = wt[4], w1 = wt[5], w2 = wt[6], w3 = wt[7], w4 = wt[8];
    HVX_Vector w5 = wt[13], w6 = wt[14], w7 = wt[15], w8 = wt[16], w9 = wt[17];
    __asm__ volatile(
        E144_PROLOGUE
        "{ v13 = valign(v11, v10, %[pb]); %[pb] = add(%[pb], #144); v18 = vmem(%[sv]++#1) }\n"
        "{ v5:4 = vshuff(v13, v12, %[m1]) }\n"
        "{ v1:0 = vshuff(v4, v6, %[m2]) }\n"
        /* a row: its anchor 0's first product and middle words (v17) */
        ".falign\n"
        "2:\n"
        "{ v3:2 = vshuff(v5, v7, %[m2]); v15.w = vrmpy(v0.b, %[w1].b) }\n"
        /* anchor n < OW - 2 (as pass A's, the middle vector's products last: its words
         * v17 from the next anchor's saved words v18 and its B words) */
        ".falign\n"
        "1:\n"
        "{ vmem(%[d0]+#1) = v15; v14.w = vrmpy(v0.b, %[w6].b); v8 = vmem(%[pt]+#0); %[d1] = add(%[d1], #1152) }\n"
        "{ vmem(%[d1]+#1) = v14; v15.w = vrmpy(v1.b, %[w2].b); v9 = vmem(%[ptl]++m0); v17 = valign(v18, v3, %[r64]) }\n"
        "{ vmem(%[d0]+#2) = v15; v14.w = vrmpy(v1.b, %[w7].b); v10 = vmem(%[pb]+#0) }\n"
        "{ vmem(%[d1]+#2) = v14; v15.w = vrmpy(v2.b, %[w3].b); v11 = vmem(%[pbl]++m0); v12 = valign(v9, v8, %[pt]) }\n"
        "{ vmem(%[d0]+#3) = v15; v14.w = vrmpy(v2.b, %[w8].b); v13 = valign(v11, v10, %[pb]); v18 = vmem(%[sv]++#1) }\n"
        "{ vmem(%[d1]+#3) = v14; v15.w = vrmpy(v3.b, %[w4].b); v7:6 = vshuff(v13, v12, %[m1]); %[pt] = add(%[pt], #144) }\n"
        "{ vmem(%[d0]+#4) = v15; v14.w = vrmpy(v3.b, %[w9].b); v1:0 = vshuff(v6, v4, %[m2]); %[pb] = add(%[pb], #144) }\n"
        "{ vmem(%[d1]+#4) = v14; v15.w = vrmpy(v17.b, %[w0].b); v3:2 = vshuff(v7, v5, %[m2]) }\n"
        "{ vmem(%[d0]+#0) = v15; v14.w = vrmpy(v17.b, %[w5].b); %[d0] = add(%[d0], #1152) }\n"
        "{ vmem(%[d1]+#0) = v14; v15.w = vrmpy(v0.b, %[w1].b); v4 = v6; v5 = v7 }:endloop0\n"
        /* anchor OW - 2: the padding on its right; the next row's pointers and column 0 */
        "{ vmem(%[d0]+#1) = v15; v14.w = vrmpy(v0.b, %[w6].b); %[d1] = add(%[d1], #1152); %[k] = add(%[k], #-1) }\n"
        "{ vmem(%[d1]+#1) = v14; v15.w = vrmpy(v1.b, %[w2].b); v17 = valign(v18, v3, %[r64]); %[rr] = add(%[rr], #-1) }\n"
        "{ vmem(%[d0]+#2) = v15; v14.w = vrmpy(v1.b, %[w7].b); p0 = cmp.eq(%[k], #0); p1 = cmp.eq(%[rr], #0) }\n"
        "{ vmem(%[d1]+#2) = v14; v15.w = vrmpy(v2.b, %[w3].b); if (p0) %[k] = add(%[oh], #0); if (p1) %[pt] = add(%[zoff], #0) }\n"
        "{ vmem(%[d0]+#3) = v15; v14.w = vrmpy(v2.b, %[w8].b); %[pb] = add(%[pt], %[owc]); %[ptl] = add(%[pt], #127) }\n"
        "{ vmem(%[d1]+#3) = v14; v15.w = vrmpy(v3.b, %[w4].b); v8 = vmem(%[pt]+#0); p0 = cmp.eq(%[k], #1) }\n"
        "{ vmem(%[d0]+#4) = v15; v14.w = vrmpy(v3.b, %[w9].b); v1:0 = vshuff(v16, v4, %[m2]); if (p0) %[pb] = add(%[zoff], #0) }\n"
        "{ vmem(%[d1]+#4) = v14; v15.w = vrmpy(v17.b, %[w0].b); v3:2 = vshuff(v16, v5, %[m2]); %[pbl] = add(%[pb], #127) }\n"
        "{ vmem(%[d0]+#0) = v15; v14.w = vrmpy(v17.b, %[w5].b); v18 = vmem(%[sv]++#1); %[d0] = add(%[d0], #1152) }\n"
        "{ vmem(%[d1]+#0) = v14; v15.w = vrmpy(v0.b, %[w1].b); v17 = valign(v18, v3, %[r64]); v9 = vmem(%[ptl]++m0) }\n"
        /* anchor OW - 1, beside the next row's columns 0 and 1 */
        "{ vmem(%[d0]+#1) = v15; v14.w = vrmpy(v0.b, %[w6].b); v10 = vmem(%[pb]+#0); %[d1] = add(%[d1], #1152) }\n"
        "{ vmem(%[d1]+#1) = v14; v15.w = vrmpy(v1.b, %[w2].b); v11 = vmem(%[pbl]++m0); v12 = valign(v9, v8, %[pt]) }\n"
        "{ vmem(%[d0]+#2) = v15; v14.w = vrmpy(v1.b, %[w7].b); v13 = valign(v11, v10, %[pb]); %[pt] = add(%[pt], #144) }\n"
        "{ vmem(%[d1]+#2) = v14; v15.w = vrmpy(v2.b, %[w3].b); v7:6 = vshuff(v13, v12, %[m1]); %[pb] = add(%[pb], #144) }\n"
        "{ vmem(%[d0]+#3) = v15; v14.w = vrmpy(v2.b, %[w8].b); v8 = vmem(%[pt]+#0) }\n"
        "{ vmem(%[d1]+#3) = v14; v15.w = vrmpy(v3.b, %[w4].b); v9 = vmem(%[ptl]++m0) }\n"
        "{ vmem(%[d0]+#4) = v15; v14.w = vrmpy(v3.b, %[w9].b); v10 = vmem(%[pb]+#0); v12 = valign(v9, v8, %[pt]) }\n"
        "{ vmem(%[d1]+#4) = v14; v15.w = vrmpy(v17.b, %[w0].b); v11 = vmem(%[pbl]++m0) }\n"
        "{ vmem(%[d0]+#0) = v15; v14.w = vrmpy(v17.b, %[w5].b); v13 = valign(v11, v10, %[pb]); %[d0] = add(%[d0], %[dskip]) }\n"
        "{ vmem(%[d1]+#0) = v14; v18 = vmem(%[sv]++#1); %[pt] = add(%[pt], #144); %[d1] = add(%[d1], %[rowd4]) }\n"
        "{ v5:4 = vshuff(v13, v12, %[m1]); %[pb] = add(%[pb], #144); loop0(1b, %[n]) }\n"
        "{ v1:0 = vshuff(v4, v6, %[m2]) }:endloop1\n"
        : [pt] "+r"(pt), [pb] "+r"(pb), [ptl] "=&r"(ptl), [pbl] "=&r"(pbl), [d0] "+r"(d0), [d1] "+r"(d1),
          [sv] "+r"(sv), [k] "+r"(k), [rr] "+r"(rr)
        : [step] "r"(step), [n] "r"(n), [owc] "r"(owc), [rowd4] "r"(rowd4), [dskip] "r"(dskip), [oh] "r"(OH),
          [zoff] "r"(zoff), [m1] "r"(m1), [m2] "r"(m2), [r64] "r"(r64), [w0] "v"(w0), [w1] "v"(w1), [w2] "v"(w2),
          [w3] "v"(w3), [w4] "v"(w4), [w5] "v"(w5), [w6] "v"(w6), [w7] "v"(w7), [w8] "v"(w8), [w9] "v"(w9)
        : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "v16",
          "v17", "v18", "p0", "p1", "m0", "lc0", "sa0", "lc1", "sa1", "usr", "memory");
}

void dspt_dw_err_144(const struct dw_shape *s, const int8_t *err, const int8_t *zeros, const HVX_Vector *wt,
                     int32_t *dx, HVX_Vector *save, int lo, int hi)
{
    const int C = C144, OW = s->ow, OH = s->oh;
    const int chunk = DW_ERR144_SAVE / OW > 0 ? DW_ERR144_SAVE / OW : 1;   /* anchor rows a chunk */
    for (int r = lo * OH; r < hi * OH; r += chunk) {   /* r: an anchor row over the images */
        int nr = hi * OH - r < chunk ? hi * OH - r : chunk, k = OH - r % OH;   /* k: rows left in its image */
        const int8_t *top = err + (size_t)r * OW * C, *bot = k == 1 ? zeros : top + OW * C;
        int32_t *d = dx + (size_t)r * 2 * s->w * C;
        e144_rows_a(top, bot, zeros, d, save, nr, k, OH, OW, s->w, wt);
        e144_rows_b(top + 16, bot + 16, zeros + 16, d + 4 * 32, save, nr, k, OH, OW, s->w, wt);
    }
}
