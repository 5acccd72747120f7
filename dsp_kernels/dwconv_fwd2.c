/* dwconv_fwd2.c: depthwise forward of a 3 x 3 kernel at stride 2, padding 1, each input
 * column's three rows in vrmpy's words ("dw_column_triples").
 *
 * y[m, n] sums x[2m + i - 1, 2n + j - 1] * w[i, j] over the taps (i, j). For output row m,
 * column k's triple is the word (x[2m - 1, k], x[2m, k], x[2m + 1, k], 0) of each channel:
 * output n meets the triples of columns 2n - 1, 2n and 2n + 1, each by one vrmpy with the
 * kernel column's words (w[0, j], w[1, j], w[2, j], 0). Every odd column ends one output
 * and starts the next, so a row builds each column's triple once: per output pixel block
 * (128 channels) 6 loads, 8 vshuff, 12 vrmpy (9 of every 12 bytes real products), 4
 * stores, the 12 weight vectors in registers for the whole share. x is read where it lies
 * (no padded copy): rows outside the image read a zero row, and an odd width's last
 * column is peeled. Work is split by images across the HVX threads (threads.h).
 * Each column's triple is built while the one before it multiplies: clang puts an
 * unaligned load (vmemu) in a packet with no vshuff, so the 6 loads and 8 vshuffs take 14
 * packets and the vrmpy, adds and stores ride in them (17 packets an output block).
 * The 2 x 2 block quads this replaced (16 x 16 x 96 at batch 64: 132 K -> 78 K packets)
 * took 8 loads, 8 vshuff and 16 vrmpy an output, 7 of every 16 weight bytes zero, and 28
 * packets: each load's address chosen between the image and a zero row in the loop.
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "dwconv.h"
#include "threads.h"

struct ct_job {
    const struct dw_shape *s;
    const int8_t *x, *zeros;
    int32_t *y;
    HVX_Vector *wt;   /* per channel block: 12 vectors, kernel column j at 4 j */
    int accumulate;
};

/* Stride 1 (forward, and backward data as the forward with the taps flipped): output n
 * meets columns n - 1, n and n + 1, so each column's triple, built once, ends output
 * n - 1 (kernel column 2), continues n (1) and starts n + 1 (0): per output pixel block 3
 * loads, 4 vshuff, 12 vrmpy. Rows outside read the zero row; no padded copy, and no rows
 * that only start sums (the column quads' strips spend 2 of a 4 x 4 image's 6 rows so). */
static inline __attribute__((always_inline)) void ct_images1(const int NQ, const struct ct_job *J, int lo, int hi,
                                                             int c0, const HVX_Vector *Wm, int valid);


int dspt_dw_column_triples_fit(const struct dw_shape *s)
{
    /* C % 32: every output block starts on a vector; C > 128: whole blocks (dw_block_start) */
    if (s->kh != 3 || s->kw != 3 || s->pad != 1 || s->c < 64 || (s->c % 32 && s->c <= 128)) return 0;
    /* stride 1 on images of 5 to 16 pixels (MobileNetV2's 4 x 4 x 192, batch 64: 47.2 K ->
     * 32.5 K packets); the column quads' flat strips waste no lanes and win on larger ones
     * (8 x 8 x 144: 104 K against 152 K), the pixel quads on 4 pixels or fewer */
    return s->stride == 2 || (s->stride == 1 && s->h * s->w > 4 && s->h * s->w <= 16);
}

int dspt_dw_triple_packets_fit(const struct dw_shape *s, const int32_t *y, int acc)
{
    /* ct_share's NQ == 3: one block of 96 channels kept as 3 aligned vectors */
    return dspt_dw_column_triples_fit(s) && s->stride == 2 && s->c == 96 && s->w % 2 == 0 && s->ow >= 2 && !acc
           && ((uintptr_t)y & (HVX_BYTES - 1)) == 0;
}

/* Where block cb starts and how it is stored (ct_share's NQ): with y on a vector and no
 * accumulation, C % 32 == 0 keeps every block where it is, the last one's C % 128 channels
 * as (C % 128) / 32 aligned vectors (192: 2, not 4 moved back over channels the block
 * before computed); a ragged C > 128 whose last block has at most 32 new channels computes
 * one group of 32 ending at C (144: channels 112..143, 3 vrmpy an output, not 12), stored
 * as one unaligned vector (9); otherwise a ragged last block moves back to end at C
 * (dw_block_start; 8: four unaligned vectors) or keeps `valid` words (0). The products of
 * the groups a block does not store are dead, and clang drops them with their vshuffs. */
static int ct_block(int cb, const struct dw_shape *s, const int32_t *y, int acc, int *c0, int *valid)
{
    const int C = s->c, start = cb * HVX_BYTES, aligned = ((uintptr_t)y & (HVX_BYTES - 1)) == 0 && !acc;
    if (aligned && C % 32 == 0) {
        *c0 = start;
        *valid = C - start < HVX_BYTES ? C - start : HVX_BYTES;
        return *valid / 32;
    }
    if (aligned && C > HVX_BYTES && C - start <= 32) {
        *c0 = C - 32;
        *valid = 32;
        return 9;
    }
    *c0 = dw_block_start(cb, C, acc);
    *valid = C - *c0 < HVX_BYTES ? C - *c0 : HVX_BYTES;
    return *valid == HVX_BYTES && !acc ? 8 : 0;
}

/* Column triple at byte offset k of rows r0, r1, r2, interleaved into t. */
static inline __attribute__((always_inline)) void triple(HVX_Vector t[4], const int8_t *r0, const int8_t *r1,
                                                         const int8_t *r2, int k)
{
    dw_interleave4(t, hvx_load_u(r0 + k), hvx_load_u(r1 + k), hvx_load_u(r2 + k), Q6_V_vzero());
}

static inline __attribute__((always_inline)) void store_block(const int NQ, int32_t *y, const HVX_Vector v[4],
                                                              int valid, int acc)
{
    if (NQ == 8) {   /* 4 whole vectors, unaligned */
        for (int q = 0; q < 4; q++) dw_store_u(y + 32 * q, v[q]);
        return;
    }
    if (NQ == 9) {   /* one group, unaligned */
        dw_store_u(y, v[0]);
        return;
    }
    if (NQ) {   /* NQ whole aligned vectors */
        for (int q = 0; q < NQ; q++) ((HVX_Vector *)y)[q] = v[q];
        return;
    }
    for (int q = 0; q < 4 && 32 * q < valid; q++) {
        int words = valid - 32 * q < 32 ? valid - 32 * q : 32;
        HVX_Vector r = acc ? Q6_Vw_vadd_VwVw(v[q], hvx_load_u(y + 32 * q)) : v[q];
        if (words == 32) hvx_store_u(y + 32 * q, r);
        else hvx_store_bytes(y + 32 * q, r, (uint32_t)words * 4);
    }
}

/* A row of ct_images below in packets for 96 channels (NQ == 3: 3 aligned output
 * vectors, the fourth word vector unused) and an even width (every output has its column
 * 2n + 1): clang-16 made 17 packets an output, here 14, the bound under HVX's packet rules
 * (the assembler checks them): a vmemu shares a packet with neither a vshuff nor a store,
 * so an output's 6 loads and 8 vshuffs take 14 packets, and its 9 vrmpy, 6 vadds and 3
 * stores ride in them. Output n loads and interleaves column 2n + 1 (to), multiplies it as
 * soon as it is built, and builds column 2n + 2's triple (te) for output n + 1 in its last
 * packets (modulo scheduling: B. R. Rau, "Iterative modulo scheduling", MICRO-27, 1994); the
 * last output builds none (nothing past the row is read). Registers: weights where the
 * compiler puts them (v0-v8 left), sums v10-v12, products v9/v13/v30, te's bytes and pairs
 * v14-v17, its words v20-v23, to's bytes and pairs v18/v19/v28/v29, its words v24-v27, zero v31. */
static inline __attribute__((always_inline)) void ct_row96(const int8_t *r0, const int8_t *r1, const int8_t *r2,
                                                           int32_t *y, int C, int OW, const HVX_Vector *W)
{
    /* t0..t2 and y1, y2 are made in the prologue's free slots (in C: register moves a row) */
    const int8_t *e0 = r0, *e1 = r1, *e2 = r2, *t0, *t1, *t2;
    int32_t *y0 = y, *y1, *y2;
    const int step = 2 * C, ybytes = 4 * C, n = OW - 1, m1 = -1, m2 = -2;
    __asm__ volatile(
        /* column 0's triple (te); column -1 is the padding: the sums start at zero */
        "{ m0 = %[step]; v14 = vmemu(%[e0]+#0); v31 = vxor(v31, v31) }\n"
        "{ v15 = vmemu(%[e1]++m0); loop0(1f, %[n]); v12 = vxor(v12, v12) }\n"
        "{ v16 = vmemu(%[e2]++m0); m1 = %[ybytes]; %[t0] = add(%[e0], %[C]) }\n"
        "{ v15:14 = vshuff(v15, v14, %[m1]); v10 = vxor(v10, v10); %[e0] = add(%[e0], %[step]) }\n"
        "{ v17:16 = vshuff(v31, v16, %[m1]); v11 = vxor(v11, v11); %[t1] = sub(%[e1], %[C]); %[t2] = sub(%[e2], %[C]) }\n"
        "{ v21:20 = vshuff(v16, v14, %[m2]); %[y1] = add(%[y0], #128); %[y2] = add(%[y0], #256) }\n"
        "{ v23:22 = vshuff(v17, v15, %[m2]) }\n"
        "1:\n"
        "{ v18 = vmemu(%[t0]++m0); v9.w = vrmpy(v20.b, %[w10].b); v13.w = vrmpy(v21.b, %[w11].b) }\n"
        "{ v19 = vmemu(%[t1]++m0); v30.w = vrmpy(v22.b, %[w12].b); v10.w = vadd(v10.w, v9.w) }\n"
        "{ v28 = vmemu(%[t2]++m0); v11.w = vadd(v11.w, v13.w); v12.w = vadd(v12.w, v30.w) }\n"
        "{ v19:18 = vshuff(v19, v18, %[m1]) }\n"
        "{ v29:28 = vshuff(v31, v28, %[m1]) }\n"
        "{ v25:24 = vshuff(v28, v18, %[m2]) }\n"
        "{ v27:26 = vshuff(v29, v19, %[m2]); v9.w = vrmpy(v24.b, %[w20].b); v13.w = vrmpy(v25.b, %[w21].b) }\n"
        "{ v14 = vmemu(%[e0]++m0); v30.w = vrmpy(v26.b, %[w22].b); v10.w = vadd(v10.w, v9.w) }\n"
        "{ v15 = vmemu(%[e1]++m0); v11.w = vadd(v11.w, v13.w); v12.w = vadd(v12.w, v30.w) }\n"
        "{ v16 = vmemu(%[e2]++m0) }\n"
        "{ v15:14 = vshuff(v15, v14, %[m1]); vmem(%[y0]++m1) = v10; v10.w = vrmpy(v24.b, %[w00].b) }\n"
        "{ v17:16 = vshuff(v31, v16, %[m1]); vmem(%[y1]++m1) = v11; v11.w = vrmpy(v25.b, %[w01].b) }\n"
        "{ v21:20 = vshuff(v16, v14, %[m2]); vmem(%[y2]++m1) = v12; v12.w = vrmpy(v26.b, %[w02].b) }\n"
        "{ v23:22 = vshuff(v17, v15, %[m2]) }:endloop0\n"
        /* the last output: column 2n + 2 is past the image */
        "{ v18 = vmemu(%[t0]+#0); v9.w = vrmpy(v20.b, %[w10].b); v13.w = vrmpy(v21.b, %[w11].b) }\n"
        "{ v19 = vmemu(%[t1]+#0); v30.w = vrmpy(v22.b, %[w12].b); v10.w = vadd(v10.w, v9.w) }\n"
        "{ v28 = vmemu(%[t2]+#0); v11.w = vadd(v11.w, v13.w); v12.w = vadd(v12.w, v30.w) }\n"
        "{ v19:18 = vshuff(v19, v18, %[m1]) }\n"
        "{ v29:28 = vshuff(v31, v28, %[m1]) }\n"
        "{ v25:24 = vshuff(v28, v18, %[m2]) }\n"
        "{ v27:26 = vshuff(v29, v19, %[m2]); v9.w = vrmpy(v24.b, %[w20].b); v13.w = vrmpy(v25.b, %[w21].b) }\n"
        "{ v30.w = vrmpy(v26.b, %[w22].b); v10.w = vadd(v10.w, v9.w); v11.w = vadd(v11.w, v13.w) }\n"
        "{ vmem(%[y0]+#0) = v10; v12.w = vadd(v12.w, v30.w) }\n"
        "{ vmem(%[y1]+#0) = v11 }\n"
        "{ vmem(%[y2]+#0) = v12 }\n"
        : [e0] "+r"(e0), [e1] "+r"(e1), [e2] "+r"(e2), [t0] "=&r"(t0), [t1] "=&r"(t1), [t2] "=&r"(t2), [y0] "+r"(y0),
          [y1] "=&r"(y1), [y2] "=&r"(y2)
        : [C] "r"(C), [step] "r"(step), [ybytes] "r"(ybytes), [n] "r"(n), [m1] "r"(m1), [m2] "r"(m2), [w00] "v"(W[0]),
          [w01] "v"(W[1]), [w02] "v"(W[2]), [w10] "v"(W[4]), [w11] "v"(W[5]), [w12] "v"(W[6]), [w20] "v"(W[8]),
          [w21] "v"(W[9]), [w22] "v"(W[10])
        : "v9", "v10", "v11", "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23",
          "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31", "m0", "m1", "lc0", "sa0", "usr", "memory");
}

/* A row of ct_images' last group (NQ == 9: 32 channels ending at C, one unaligned output
 * vector) at an even width, in packets as ct_row96 but for the one group: an output's 6
 * vmemu, 6 vshuff (each triple's low halves only) and its vmemu store, which shares a
 * packet with none of them, take 13 packets; its 3 vrmpy and 2 vadd ride beside the loads
 * (clang-16: 19.5). Registers: the sum v10, products v9, te's bytes and pairs v14-v17, its
 * words v20 (v21 unused), to's v18/v19/v28/v29, its words v24 (v25), zero v31. */
static inline __attribute__((always_inline)) void ct_row32(const int8_t *r0, const int8_t *r1, const int8_t *r2,
                                                           int32_t *y, int C, int OW, const HVX_Vector *W)
{
    const int8_t *e0 = r0, *e1 = r1, *e2 = r2, *t0, *t1, *t2;
    int32_t *y0 = y;
    const int step = 2 * C, ybytes = 4 * C, n = OW - 1;
    register int m1 __asm__("r6") = -1;   /* vshuff's Rt is one of r0-r7 */
    register int m2 __asm__("r7") = -2;
    __asm__ volatile(
        /* column 0's triple (te); column -1 is the padding: the sum starts at zero */
        "{ m0 = %[step]; v14 = vmemu(%[e0]+#0); v31 = vxor(v31, v31) }\n"
        "{ v15 = vmemu(%[e1]++m0); loop0(1f, %[n]); v10 = vxor(v10, v10) }\n"
        "{ v16 = vmemu(%[e2]++m0); m1 = %[ybytes]; %[t0] = add(%[e0], %[C]) }\n"
        "{ v15:14 = vshuff(v15, v14, %[m1]); %[e0] = add(%[e0], %[step]) }\n"
        "{ v17:16 = vshuff(v31, v16, %[m1]); %[t1] = sub(%[e1], %[C]); %[t2] = sub(%[e2], %[C]) }\n"
        "{ v21:20 = vshuff(v16, v14, %[m2]) }\n"
        "1:\n"
        "{ v18 = vmemu(%[t0]++m0); v9.w = vrmpy(v20.b, %[w1].b) }\n"
        "{ v19 = vmemu(%[t1]++m0); v10.w = vadd(v10.w, v9.w) }\n"
        "{ v28 = vmemu(%[t2]++m0) }\n"
        "{ v19:18 = vshuff(v19, v18, %[m1]) }\n"
        "{ v29:28 = vshuff(v31, v28, %[m1]) }\n"
        "{ v25:24 = vshuff(v28, v18, %[m2]) }\n"
        "{ v14 = vmemu(%[e0]++m0); v9.w = vrmpy(v24.b, %[w2].b) }\n"
        "{ v15 = vmemu(%[e1]++m0); v10.w = vadd(v10.w, v9.w) }\n"
        "{ v16 = vmemu(%[e2]++m0) }\n"
        "{ vmemu(%[y0]++m1) = v10; v10.w = vrmpy(v24.b, %[w0].b) }\n"
        "{ v15:14 = vshuff(v15, v14, %[m1]) }\n"
        "{ v17:16 = vshuff(v31, v16, %[m1]) }\n"
        "{ v21:20 = vshuff(v16, v14, %[m2]) }:endloop0\n"
        /* the last output: column 2n + 2 is past the image */
        "{ v18 = vmemu(%[t0]+#0); v9.w = vrmpy(v20.b, %[w1].b) }\n"
        "{ v19 = vmemu(%[t1]+#0); v10.w = vadd(v10.w, v9.w) }\n"
        "{ v28 = vmemu(%[t2]+#0) }\n"
        "{ v19:18 = vshuff(v19, v18, %[m1]) }\n"
        "{ v29:28 = vshuff(v31, v28, %[m1]) }\n"
        "{ v25:24 = vshuff(v28, v18, %[m2]) }\n"
        "{ v9.w = vrmpy(v24.b, %[w2].b) }\n"
        "{ v10.w = vadd(v10.w, v9.w) }\n"
        "{ vmemu(%[y0]+#0) = v10 }\n"
        : [e0] "+r"(e0), [e1] "+r"(e1), [e2] "+r"(e2), [t0] "=&r"(t0), [t1] "=&r"(t1), [t2] "=&r"(t2), [y0] "+r"(y0)
        : [C] "r"(C), [step] "r"(step), [ybytes] "r"(ybytes), [n] "r"(n), [m1] "r"(m1), [m2] "r"(m2),
          [w0] "v"(W[0]), [w1] "v"(W[4]), [w2] "v"(W[8])
        : "v9", "v10", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v24", "v25", "v28", "v29", "v31", "m0",
          "m1", "lc0", "sa0", "usr", "memory");
}

/* Images [lo, hi), the channel block at c0. NQ: whole aligned vectors a block keeps and
 * nothing to add (C % 32 == 0); 8: four whole vectors anywhere; 0: `valid` words, added
 * with `acc`. */
static inline __attribute__((always_inline)) void ct_images(const int NQ, const struct ct_job *J, int lo, int hi,
                                                            int c0, const HVX_Vector *Wm, int valid)
{
    const struct dw_shape *s = J->s;
    const int C = s->c, H = s->h, OH = s->oh, OW = s->ow, rowb = s->w * C, acc = J->accumulate;
    const int full = OW - (s->w & 1);   /* an odd width's last output has no column 2n + 1 */
    const int8_t *zeros = J->zeros + c0;
    HVX_Vector W[12];   /* a local copy: the stores to y cannot alias it, so it stays in registers */
    for (int k = 0; k < 12; k++) W[k] = Wm[k];
    for (int img = lo; img < hi; img++) {
        const int8_t *x = J->x + (size_t)img * H * rowb + c0;
        int32_t *y = J->y + (size_t)img * OH * OW * C + c0;
        for (int m = 0; m < OH; m++) {
            const int8_t *r0 = m ? x + (2 * m - 1) * rowb : zeros, *r1 = x + 2 * m * rowb;
            const int8_t *r2 = 2 * m + 1 < H ? x + (2 * m + 1) * rowb : zeros;
            if (NQ == 3 && full == OW && OW >= 2) {   /* 96 channels, an even width */
                ct_row96(r0, r1, r2, y, C, OW, W);
                y += OW * C;
                continue;
            }
            if (NQ == 9 && full == OW && OW >= 2) {   /* the last group of a ragged C, an even width */
                ct_row32(r0, r1, r2, y, C, OW, W);
                y += OW * C;
                continue;
            }
            HVX_Vector cur[4], te[4], to[4];
            for (int q = 0; q < 4; q++) cur[q] = Q6_V_vzero();   /* column -1: the padding */
            triple(te, r0, r1, r2, 0);
            int k = 0;
            /* software-pipelined: each column's triple is built while the one before it
             * multiplies (clang packs the vshuffs beside the vrmpy only across columns) */
#pragma clang loop unroll(disable)
            for (int n = 0; n < full; n++, y += C) {
                HVX_Vector done[4];
                triple(to, r0, r1, r2, k + C);   /* column 2n + 1: ends output n, starts n + 1 */
                for (int q = 0; q < 4; q++) cur[q] = Q6_Vw_vadd_VwVw(cur[q], Q6_Vw_vrmpy_VbVb(te[q], W[4 + q]));
                k = n + 1 < OW ? k + 2 * C : k;   /* column 2n + 2 (the last: this one again, unused) */
                triple(te, r0, r1, r2, k);
                for (int q = 0; q < 4; q++) {
                    done[q] = Q6_Vw_vadd_VwVw(cur[q], Q6_Vw_vrmpy_VbVb(to[q], W[8 + q]));
                    cur[q] = Q6_Vw_vrmpy_VbVb(to[q], W[q]);
                }
                store_block(NQ, y, done, valid, acc);
            }
            if (full < OW) {   /* column 2n + 1 past the image */
                for (int q = 0; q < 4; q++) cur[q] = Q6_Vw_vadd_VwVw(cur[q], Q6_Vw_vrmpy_VbVb(te[q], W[4 + q]));
                store_block(NQ, y, cur, valid, acc);
                y += C;
            }
        }
    }
}

/* A row of ct_images1 for a block of two groups (NQ == 2: 64 channels kept as 2 aligned
 * vectors, 192's second block), Wd >= 3, in packets: a column's 3 vmemu, 3 vshuff (the
 * triple's low halves), 6 vrmpy, 4 vadd and 2 stores take 6 packets (clang-16: 12.5), the
 * next column's loads and triple built beside this one's products (modulo scheduling,
 * B. R. Rau, MICRO-27 1994); the last column loads nothing. Registers: the column's bytes
 * v0-v2, pairs v5:4, v7:6, words v8 (group 0), v9 (1), sums a v10/v11 and b v12/v13,
 * products and the done sums v14-v17, zero v31. */
static inline __attribute__((always_inline)) void ct_row1_2(const int8_t *r0, const int8_t *r1, const int8_t *r2,
                                                            int32_t *y, int C, int Wd, const HVX_Vector *W)
{
    const int8_t *a0 = r0, *a1 = r1, *a2 = r2;
    int32_t *y0 = y, *y1;
    const int ybytes = 4 * C, n = Wd - 2;
    register int m1 __asm__("r6") = -1;   /* vshuff's Rt is one of r0-r7 */
    register int m2 __asm__("r7") = -2;
    __asm__ volatile(
        /* column 0's triple; its products start outputs 0 (a) and 1 (b); column 1 loaded */
        "{ m0 = %[C]; v0 = vmemu(%[a0]+#0); v31 = vxor(v31, v31) }\n"
        "{ v1 = vmemu(%[a1]+#0); m1 = %[ybytes]; %[a0] = add(%[a0], %[C]) }\n"
        "{ v2 = vmemu(%[a2]+#0); %[a1] = add(%[a1], %[C]); %[y1] = add(%[y0], #128) }\n"
        "{ v5:4 = vshuff(v1, v0, %[m1]); %[a2] = add(%[a2], %[C]) }\n"
        "{ v7:6 = vshuff(v31, v2, %[m1]); loop0(1f, %[n]) }\n"
        "{ v9:8 = vshuff(v6, v4, %[m2]) }\n"
        "{ v0 = vmemu(%[a0]++m0); v10.w = vrmpy(v8.b, %[w40].b); v11.w = vrmpy(v9.b, %[w41].b) }\n"
        "{ v1 = vmemu(%[a1]++m0); v12.w = vrmpy(v8.b, %[w00].b); v13.w = vrmpy(v9.b, %[w01].b) }\n"
        "{ v2 = vmemu(%[a2]++m0) }\n"
        "{ v5:4 = vshuff(v1, v0, %[m1]) }\n"
        "{ v7:6 = vshuff(v31, v2, %[m1]) }\n"
        "{ v9:8 = vshuff(v6, v4, %[m2]) }\n"
        /* column c: output c - 1 done (a + t w2) and stored, a = b + t w1, b = t w0; column
         * c + 1 loaded and its triple built */
        ".falign\n"
        "1:\n"
        "{ v0 = vmemu(%[a0]++m0); v14.w = vrmpy(v8.b, %[w80].b); v15.w = vrmpy(v9.b, %[w81].b) }\n"
        "{ v1 = vmemu(%[a1]++m0); v16.w = vrmpy(v8.b, %[w40].b); v17.w = vrmpy(v9.b, %[w41].b) }\n"
        "{ v2 = vmemu(%[a2]++m0); v14.w = vadd(v10.w, v14.w); v15.w = vadd(v11.w, v15.w) }\n"
        "{ v5:4 = vshuff(v1, v0, %[m1]); vmem(%[y0]++m1) = v14; v10.w = vadd(v12.w, v16.w) }\n"
        "{ v7:6 = vshuff(v31, v2, %[m1]); vmem(%[y1]++m1) = v15; v11.w = vadd(v13.w, v17.w) }\n"
        "{ v9:8 = vshuff(v6, v4, %[m2]); v12.w = vrmpy(v8.b, %[w00].b); v13.w = vrmpy(v9.b, %[w01].b) }:endloop0\n"
        /* the last column: output Wd - 2 done, then Wd - 1 (column Wd is the padding) */
        "{ v14.w = vrmpy(v8.b, %[w80].b); v15.w = vrmpy(v9.b, %[w81].b) }\n"
        "{ v16.w = vrmpy(v8.b, %[w40].b); v17.w = vrmpy(v9.b, %[w41].b) }\n"
        "{ v14.w = vadd(v10.w, v14.w); v15.w = vadd(v11.w, v15.w) }\n"
        "{ vmem(%[y0]++m1) = v14; v10.w = vadd(v12.w, v16.w) }\n"
        "{ vmem(%[y1]++m1) = v15; v11.w = vadd(v13.w, v17.w) }\n"
        "{ vmem(%[y0]+#0) = v10 }\n"
        "{ vmem(%[y1]+#0) = v11 }\n"
        : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [y0] "+r"(y0), [y1] "=&r"(y1)
        : [C] "r"(C), [ybytes] "r"(ybytes), [n] "r"(n), [m1] "r"(m1), [m2] "r"(m2), [w00] "v"(W[0]), [w01] "v"(W[1]),
          [w40] "v"(W[4]), [w41] "v"(W[5]), [w80] "v"(W[8]), [w81] "v"(W[9])
        : "v0", "v1", "v2", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "v16",
          "v17", "v31", "m0", "m1", "lc0", "sa0", "usr", "memory");
}

static inline __attribute__((always_inline)) void ct_images1(const int NQ, const struct ct_job *J, int lo, int hi,
                                                             int c0, const HVX_Vector *Wm, int valid)
{
    const struct dw_shape *s = J->s;
    const int C = s->c, H = s->h, Wd = s->w, rowb = Wd * C, acc = J->accumulate;
    const int8_t *zeros = J->zeros + c0;
    HVX_Vector W[12];
    for (int k = 0; k < 12; k++) W[k] = Wm[k];
    for (int img = lo; img < hi; img++) {
        const int8_t *x = J->x + (size_t)img * H * rowb + c0;
        int32_t *y = J->y + (size_t)img * H * rowb + c0;
        for (int m = 0; m < H; m++) {
            const int8_t *r0 = m ? x + (m - 1) * rowb : zeros, *r1 = x + m * rowb;
            const int8_t *r2 = m + 1 < H ? x + (m + 1) * rowb : zeros;
            if (NQ == 2 && Wd >= 3) {   /* two groups: the row in packets */
                ct_row1_2(r0, r1, r2, y, C, Wd, W);
                y += Wd * C;
                continue;
            }
            HVX_Vector a[4], b[4], t[4];
            triple(t, r0, r1, r2, 0);   /* column 0: continues output 0, starts 1 */
            for (int q = 0; q < 4; q++) {
                a[q] = Q6_Vw_vrmpy_VbVb(t[q], W[4 + q]);
                b[q] = Q6_Vw_vrmpy_VbVb(t[q], W[q]);
            }
            /* not software-pipelined as the stride-2 loop: a and b hold 8 registers more, and
             * the next column's triple beside them spilled (27 packets an output, not 13) */
#pragma clang loop unroll(disable)
            for (int n = 1, k = C; n < Wd; n++, k += C, y += C) {
                HVX_Vector done[4];
                triple(t, r0, r1, r2, k);
                for (int q = 0; q < 4; q++) {
                    done[q] = Q6_Vw_vadd_VwVw(a[q], Q6_Vw_vrmpy_VbVb(t[q], W[8 + q]));
                    a[q] = Q6_Vw_vadd_VwVw(b[q], Q6_Vw_vrmpy_VbVb(t[q], W[4 + q]));
                    b[q] = Q6_Vw_vrmpy_VbVb(t[q], W[q]);
                }
                store_block(NQ, y, done, valid, acc);
            }
            store_block(NQ, y, a, valid, acc);   /* the last output: column W is the padding */
            y += C;
        }
    }
}

/* Each store mode its own function: inlined together they would share one register
 * allocation (and spill). */
#define IMAGES_FN(K)                                                                                    \
    static __attribute__((noinline)) void ct_images_##K(const struct ct_job *J, int lo, int hi, int c0, \
                                                        const HVX_Vector *W, int valid)                 \
    {                                                                                                   \
        if (J->s->stride == 1) ct_images1(K, J, lo, hi, c0, W, valid);                                  \
        else ct_images(K, J, lo, hi, c0, W, valid);                                                     \
    }
IMAGES_FN(0)
IMAGES_FN(1)
IMAGES_FN(2)
IMAGES_FN(3)
IMAGES_FN(4)
IMAGES_FN(8)
IMAGES_FN(9)

static int ct_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct ct_job *J = job;
    const struct dw_shape *s = J->s;
    const int C = s->c, acc = J->accumulate;
    int lo, hi, blocks = (C + HVX_BYTES - 1) / HVX_BYTES;
    dspt_share(tc, s->n, 1, t, &lo, &hi);
    if (lo >= hi) return DSPT_OK;
    for (int cb = 0; cb < blocks; cb++) {
        int c0, valid, nq = ct_block(cb, s, J->y, acc, &c0, &valid);
        const HVX_Vector *W = J->wt + 12 * cb;
        if (nq == 8) ct_images_8(J, lo, hi, c0, W, valid);
        else if (nq == 9) ct_images_9(J, lo, hi, c0, W, valid);
        else if (nq == 4) ct_images_4(J, lo, hi, c0, W, valid);
        else if (nq == 3) ct_images_3(J, lo, hi, c0, W, valid);
        else if (nq == 2) ct_images_2(J, lo, hi, c0, W, valid);
        else if (nq == 1) ct_images_1(J, lo, hi, c0, W, valid);
        else ct_images_0(J, lo, hi, c0, W, valid);
    }
    return DSPT_OK;
}

int dspt_dw_column_triples(struct dspt_ctx *ctx, const struct dw_shape *s, const int8_t *x, const int8_t *w,
                           int32_t *y, int accumulate, int flip)
{
    int blocks = (s->c + HVX_BYTES - 1) / HVX_BYTES;
    uint32_t zero_bytes = (uint32_t)s->w * s->c + HVX_BYTES;   /* a row and what a block reads past it */
    HVX_Vector *wt = dspt_scratch(ctx, (uint32_t)blocks * 12 * HVX_BYTES);
    int8_t *zeros = dspt_scratch(ctx, zero_bytes);
    if (!wt || !zeros) return DSPT_NO_SUPPORT;
    hvx_zero(zeros, zero_bytes);
    for (int cb = 0; cb < blocks; cb++) {
        int c0, valid;
        ct_block(cb, s, y, accumulate, &c0, &valid);
        for (int j = 0; j < 3; j++)
        {
            int t0 = flip ? 8 - j : j, t1 = flip ? 5 - j : 3 + j, t2 = flip ? 2 - j : 6 + j;   /* rows 0, 1, 2 of column j */
            dw_interleave4(wt + 12 * cb + 4 * j, hvx_load_u(w + t0 * s->c + c0), hvx_load_u(w + t1 * s->c + c0),
                           hvx_load_u(w + t2 * s->c + c0), Q6_V_vzero());
        }
    }
    struct ct_job J = {.s = s, .x = x, .zeros = zeros, .y = y, .wt = wt, .accumulate = accumulate};
    return dspt_run_shares(ctx, ct_share, &J);
}
