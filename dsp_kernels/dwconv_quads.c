/* dwconv_quads.c: the column quads of dwconv.c's padded stacks (forward, and backward
 * data of stride 1 as the flipped forward): 4 columns of a channel in each vrmpy word
 * ("dw_column_quads"). dwconv.c copies the images into the zero-bordered stack and calls
 * dspt_dw_quads_run per pass. */
#include "hvx-utils.h"
#include "kernels.h"
#include "dwconv.h"

/* Column quads (stride 1, 3 kernel rows of up to 4 taps): a word holds 4 consecutive
 * flat bytes of a padded row, i.e. 4 columns of a channel, so a kernel row is one vrmpy
 * (vector by vector) with the words (w[i, 0..kw-1, c], 0..): three vrmpy a vector of 32
 * outputs, the sums in words and the channels in order (no widening, no reorder). A strip
 * of 128 flat bytes goes down the rows: each input row's words are built once (its bytes
 * at f, f + C, f + 2C, f + 3C interleaved, one vshuff pair a vector) and meet the three
 * output rows they belong to, whose sums stay in registers until the last one. Per 4
 * vectors of output: 4 loads, 4 vshuff pairs, 12 vrmpy, 4 stores, where the vmpy path
 * spends 36 vmpy, 40 widening adds and 16 vshuff (clang issues one vector-by-vector HVX
 * op and one vector memory op a packet). Weights per strip: lane l of the strip's sub-block
 * q is channel (128 v + 32 q + l) mod C, read from the repeated planes. */
int dspt_dw_quads_fit(const struct dw_shape *s)
{
    /* smaller images: two of every few rows only start sums, and the vmpy paths win */
    return (s->stride == 1 || s->stride == 2) && s->kh == 3 && s->kw <= 4 && s->oh * s->ow >= 16;
}

int dspt_dw_quad_packets_fit(const struct dw_shape *s, int pad, int src_h, const int32_t *out, int acc)
{
    int rowlen = s->ow * s->c;
    return dspt_dw_quads_fit(s) && s->stride == 1 && pad > 0 && src_h + 2 * pad >= 4 && !acc && rowlen % 32 == 0
           && rowlen >= HVX_BYTES && ((uintptr_t)out & (HVX_BYTES - 1)) == 0;
}

static inline __attribute__((always_inline)) void quad_store(int32_t *out, const HVX_Vector v[4], int valid, int acc)
{
    for (int q = 0; q < 4; q++) {
        int words = valid - 32 * q;
        if (words <= 0) return;
        HVX_Vector r = acc ? Q6_Vw_vadd_VwVw(v[q], hvx_load_u(out + 32 * q)) : v[q];
        if (words >= 32) hvx_store_u(out + 32 * q, r);
        else hvx_store_bytes(out + 32 * q, r, (uint32_t)words * 4);
    }
}

/* quad_strip's loop written in packets, for a zero-bordered stack (rows 0 and hp - 1 zeros)
 * and 4 whole aligned output vectors (FULL == 8). clang-16 made 13-15 packets a row of the
 * loop above: the two dependent vshuff levels open each row, and the 12 weight vectors,
 * 8 sums, 4 words and 4 loaded vectors leave it no register to pipeline them with. Here
 * each row is 10 packets, the bound under HVX's packet rules as the assembler checks
 * them: a vmemu shares a packet with neither a vshuff nor a store (4 such packets, each
 * with 2 products or adds), a vshuff and a store share one with a single product or add
 * (4), and the 12 vrmpy and 8 vadd left fill 2 packets of 4. Software-pipelined by hand
 * (modulo scheduling: B. R. Rau, "Iterative modulo scheduling", MICRO-27, 1994): a row's
 * second vshuff level and first product ride in the row before it, its last output
 * vector's store and sums in the row after, and the next row's bytes load and get their
 * first vshuff level beside this row's products. Registers: weights (kernel row i, word
 * vector q) where the compiler puts them (v0-v11 left), sums a v12-v15 and b v16-v19
 * (output rows m and m + 1), words x v20-v23, next row's bytes/pairs v24-v27, products
 * v28-v31. A product's register is reused by the sum it joins (done = a + x W2 is stored
 * from a's register), so 4 temporaries suffice. */
static inline __attribute__((always_inline)) void quad_strip_packets(const int8_t *in, int32_t *out, int hp,
                                                                     int rowbytes, int rowlen, int C,
                                                                     const HVX_Vector W[3][4])
{
    /* the other loads' and stores' pointers are made in the asm's free slots: set up in C,
     * they had cost each call 3 packets of register moves */
    const int8_t *i0 = in + rowbytes, *i1, *i2, *i3;   /* row 0 is the zero border */
    int32_t *o0 = out, *o1, *o2, *o3;
    const int rows = hp - 3, m1 = -1, m2 = -2, obytes = rowlen * 4;
    __asm__ volatile(
        /* row 1 (row 0 is zeros): a = x W1, b = x W0 */
        "{ m0 = %[rowbytes]; v24 = vmemu(%[i0]+#0); %[i1] = add(%[i0], %[C]) }\n"
        "{ v25 = vmemu(%[i1]++m0); %[i2] = addasl(%[i0], %[C], #1); %[i3] = addasl(%[i1], %[C], #1) }\n"
        "{ v26 = vmemu(%[i2]++m0); %[o1] = add(%[o0], #128); %[o2] = add(%[o0], #256) }\n"
        "{ v27 = vmemu(%[i3]++m0); %[o3] = add(%[o0], #384) }\n"
        "{ v25:24 = vshuff(v25, v24, %[m1]); %[i0] = add(%[i0], %[rowbytes]) }\n"
        "{ v27:26 = vshuff(v27, v26, %[m1]); m1 = %[obytes] }\n"
        "{ v21:20 = vshuff(v26, v24, %[m2]); loop0(1f, %[rows]) }\n"
        "{ v23:22 = vshuff(v27, v25, %[m2]); v12.w = vrmpy(v20.b, %[w10].b); v16.w = vrmpy(v20.b, %[w00].b) }\n"
        "{ v24 = vmemu(%[i0]++m0); v13.w = vrmpy(v21.b, %[w11].b); v17.w = vrmpy(v21.b, %[w01].b) }\n"
        "{ v25 = vmemu(%[i1]++m0); v14.w = vrmpy(v22.b, %[w12].b); v18.w = vrmpy(v22.b, %[w02].b) }\n"
        "{ v26 = vmemu(%[i2]++m0); v15.w = vrmpy(v23.b, %[w13].b); v19.w = vrmpy(v23.b, %[w03].b) }\n"
        "{ v27 = vmemu(%[i3]++m0) }\n"
        /* row 2's words and its first product */
        "{ v25:24 = vshuff(v25, v24, %[m1]) }\n"
        "{ v27:26 = vshuff(v27, v26, %[m1]) }\n"
        "{ v21:20 = vshuff(v26, v24, %[m2]) }\n"
        "{ v23:22 = vshuff(v27, v25, %[m2]); v28.w = vrmpy(v20.b, %[w20].b) }\n"
        /* rows 2 .. hp - 2: output row r - 2 stored, a and b moved down a row, row r + 1 loaded */
        "1:\n"
        "{ v24 = vmemu(%[i0]++m0); v29.w = vrmpy(v21.b, %[w21].b); v12.w = vadd(v12.w, v28.w) }\n"
        "{ v25 = vmemu(%[i1]++m0); v28.w = vrmpy(v20.b, %[w10].b); v30.w = vrmpy(v22.b, %[w22].b) }\n"
        "{ v25:24 = vshuff(v25, v24, %[m1]); vmem(%[o0]++m1) = v12; v13.w = vadd(v13.w, v29.w) }\n"
        "{ v26 = vmemu(%[i2]++m0); v12.w = vadd(v28.w, v16.w); v29.w = vrmpy(v21.b, %[w11].b) }\n"
        "{ v27 = vmemu(%[i3]++m0); v16.w = vrmpy(v20.b, %[w00].b); v14.w = vadd(v14.w, v30.w) }\n"
        "{ v27:26 = vshuff(v27, v26, %[m1]); vmem(%[o1]++m1) = v13; v31.w = vrmpy(v23.b, %[w23].b) }\n"
        "{ v13.w = vadd(v29.w, v17.w); v17.w = vrmpy(v21.b, %[w01].b); v30.w = vrmpy(v22.b, %[w12].b);"
        " v15.w = vadd(v15.w, v31.w) }\n"
        "{ vmem(%[o2]++m1) = v14; v14.w = vadd(v30.w, v18.w); v18.w = vrmpy(v22.b, %[w02].b);"
        " v31.w = vrmpy(v23.b, %[w13].b) }\n"
        "{ v21:20 = vshuff(v26, v24, %[m2]); vmem(%[o3]++m1) = v15; v15.w = vadd(v31.w, v19.w) }\n"
        "{ v23:22 = vshuff(v27, v25, %[m2]); v19.w = vrmpy(v23.b, %[w03].b); v28.w = vrmpy(v20.b, %[w20].b) }"
        ":endloop0\n"
        /* the last output row: the zero row below adds nothing */
        "{ vmem(%[o0]+#0) = v12 }\n"
        "{ vmem(%[o1]+#0) = v13 }\n"
        "{ vmem(%[o2]+#0) = v14 }\n"
        "{ vmem(%[o3]+#0) = v15 }\n"
        : [i0] "+r"(i0), [i1] "=&r"(i1), [i2] "=&r"(i2), [i3] "=&r"(i3), [o0] "+r"(o0), [o1] "=&r"(o1),
          [o2] "=&r"(o2), [o3] "=&r"(o3)
        : [rowbytes] "r"(rowbytes), [obytes] "r"(obytes), [rows] "r"(rows), [m1] "r"(m1), [m2] "r"(m2), [C] "r"(C),
          [w00] "v"(W[0][0]), [w01] "v"(W[0][1]), [w02] "v"(W[0][2]), [w03] "v"(W[0][3]), [w10] "v"(W[1][0]),
          [w11] "v"(W[1][1]), [w12] "v"(W[1][2]), [w13] "v"(W[1][3]), [w20] "v"(W[2][0]), [w21] "v"(W[2][1]),
          [w22] "v"(W[2][2]), [w23] "v"(W[2][3])
        : "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23", "v24", "v25", "v26",
          "v27", "v28", "v29", "v30", "v31", "m0", "m1", "lc0", "sa0", "usr", "memory");
}

/* One strip of one image: rows 0 and 1 start their sums, then each row finishes the one
 * two above it. FULL: that many whole vectors of 32 words kept and nothing to add to (the
 * loop without branches; 8: four on vector boundaries); 0: `valid` words, added to the
 * output with `acc`. */
static inline __attribute__((always_inline)) void quad_strip(const int FULL, const int8_t *in, int32_t *out, int hp,
                                                             int rowbytes, int rowlen, int C, const HVX_Vector *W0,
                                                             const HVX_Vector *W1, const HVX_Vector *W2, int valid,
                                                             int acc, int zrows)
{
    HVX_Vector x[4], a[4], b[4];
    /* with a zero border (pad >= 1) the first and last rows are zeros: their products are
     * not computed (2 of a 4 x 4 image's 6 rows, of an 8 x 8's 10) */
    const int end = zrows ? hp - 1 : hp;
    if (zrows) {
        for (int q = 0; q < 4; q++) b[q] = Q6_V_vzero();
    } else {
        dw_interleave4(x, hvx_load_u(in), hvx_load_u(in + C), hvx_load_u(in + 2 * C), hvx_load_u(in + 3 * C));
        for (int q = 0; q < 4; q++) b[q] = Q6_Vw_vrmpy_VbVb(x[q], W0[q]);
    }
    in += rowbytes;
    dw_interleave4(x, hvx_load_u(in), hvx_load_u(in + C), hvx_load_u(in + 2 * C), hvx_load_u(in + 3 * C));
    for (int q = 0; q < 4; q++) {
        a[q] = Q6_Vw_vadd_VwVw(b[q], Q6_Vw_vrmpy_VbVb(x[q], W1[q]));
        b[q] = Q6_Vw_vrmpy_VbVb(x[q], W0[q]);
    }
    in += rowbytes;
    /* The next row's bytes are loaded while this row multiplies (the last row reloads
     * itself: nothing past the stack is read), and every product is a plain vrmpy added
     * with vadd: clang pairs two vrmpy in a packet, never two vrmpyacc. Not unrolled: two
     * rows' registers spill. MobileNetV2's stride-1 layers: 10-17 % fewer packets. */
    HVX_Vector r[4] = {hvx_load_u(in), hvx_load_u(in + C), hvx_load_u(in + 2 * C), hvx_load_u(in + 3 * C)};
#pragma clang loop unroll(disable)
    for (int row = 2; row < end; row++, out += rowlen) {
        dw_interleave4(x, r[0], r[1], r[2], r[3]);
        if (row + 1 < end) in += rowbytes;
        for (int q = 0; q < 4; q++) r[q] = hvx_load_u(in + q * C);
        HVX_Vector done[4];
        for (int q = 0; q < 4; q++) {
            done[q] = Q6_Vw_vadd_VwVw(a[q], Q6_Vw_vrmpy_VbVb(x[q], W2[q]));
            a[q] = Q6_Vw_vadd_VwVw(b[q], Q6_Vw_vrmpy_VbVb(x[q], W1[q]));
            b[q] = Q6_Vw_vrmpy_VbVb(x[q], W0[q]);
        }
        if (FULL == 8) {   /* 4 whole vectors on vector boundaries */
            for (int q = 0; q < 4; q++) ((HVX_Vector *)out)[q] = done[q];
        } else if (FULL) {
            for (int q = 0; q < FULL; q++) hvx_store_u(out + 32 * q, done[q]);
        } else {
            quad_store(out, done, valid, acc);
        }
    }
    if (zrows) {   /* the last output row: the zero row below adds nothing */
        if (FULL == 8) {
            for (int q = 0; q < 4; q++) ((HVX_Vector *)out)[q] = a[q];
        } else if (FULL) {
            for (int q = 0; q < FULL; q++) hvx_store_u(out + 32 * q, a[q]);
        } else {
            quad_store(out, a, valid, acc);
        }
    }
}

/* Stride 2: a strip is channels 128k.. of output pixel ow, its words the 4 pixels from
 * 2 ow; input row 2m + 1 feeds output row m (kernel row 1), row 2m + 2 ends row m (2)
 * and starts row m + 1 (0). */
static inline __attribute__((always_inline)) void quad_strip2(const int FULL, const int8_t *in, int32_t *out, int oh,
                                                              int rowbytes, int outrow, int C, const HVX_Vector *W0,
                                                              const HVX_Vector *W1, const HVX_Vector *W2, int valid,
                                                              int acc)
{
    HVX_Vector x[4], a[4];
    dw_interleave4(x, hvx_load_u(in), hvx_load_u(in + C), hvx_load_u(in + 2 * C), hvx_load_u(in + 3 * C));
    for (int q = 0; q < 4; q++) a[q] = Q6_Vw_vrmpy_VbVb(x[q], W0[q]);
    in += rowbytes;
    for (int m = 0; m < oh; m++, out += outrow) {
        dw_interleave4(x, hvx_load_u(in), hvx_load_u(in + C), hvx_load_u(in + 2 * C), hvx_load_u(in + 3 * C));
        for (int q = 0; q < 4; q++) a[q] = Q6_Vw_vrmpyacc_VwVbVb(a[q], x[q], W1[q]);
        in += rowbytes;
        dw_interleave4(x, hvx_load_u(in), hvx_load_u(in + C), hvx_load_u(in + 2 * C), hvx_load_u(in + 3 * C));
        HVX_Vector done[4];
        for (int q = 0; q < 4; q++) {
            done[q] = Q6_Vw_vrmpyacc_VwVbVb(a[q], x[q], W2[q]);
            a[q] = Q6_Vw_vrmpy_VbVb(x[q], W0[q]);
        }
        in += rowbytes;
        if (FULL == 8) {
            for (int q = 0; q < 4; q++) ((HVX_Vector *)out)[q] = done[q];
        } else if (FULL) {
            for (int q = 0; q < FULL; q++) hvx_store_u(out + 32 * q, done[q]);
        } else {
            quad_store(out, done, valid, acc);
        }
    }
}

/* A strip's loop compiled for its whole vectors (no accumulation), else the general one. */
#define QUAD_DISPATCH(fn, valid, acc, aligned, ...)                                 \
    do {                                                                            \
        int whole_ = (acc) || (valid) % 32 ? 0 : (valid) / 32;                      \
        if (whole_ == 4 && (aligned)) fn(8, __VA_ARGS__);                           \
        else if (whole_ == 4) fn(4, __VA_ARGS__);                                   \
        else if (whole_ == 3) fn(3, __VA_ARGS__);                                   \
        else if (whole_ == 2) fn(2, __VA_ARGS__);                                   \
        else if (whole_ == 1) fn(1, __VA_ARGS__);                                   \
        else fn(0, __VA_ARGS__);                                                    \
    } while (0)

/* Kernel row i's words for the lanes of residue r of the repeated planes. */
static void quad_weights(const struct dw_job *J, int r, HVX_Vector W[3][4])
{
    const struct dw_shape *s = J->s;
    int taps = 3 * s->kw;
    for (int i = 0; i < 3; i++) {
        HVX_Vector t[4];
        for (int j = 0; j < 4; j++) {
            int tap = i * s->kw + j;
            t[j] = j < s->kw ? *(const HVX_Vector *)(J->ext + (J->flip ? taps - 1 - tap : tap) * J->ext_bytes
                                                     + r * HVX_BYTES) : Q6_V_vzero();
        }
        dw_interleave4(W[i], t[0], t[1], t[2], t[3]);
    }
}

static void quads_stride2(const struct dw_job *J, const struct stack *st, int n0, int g)
{
    const struct dw_shape *s = J->s;
    const int C = s->c, OH = s->oh, OW = s->ow, rowbytes = st->rowbytes, imgbytes = st->imgbytes, acc = J->accumulate;
    for (int k = 0; k * HVX_BYTES < C; k++) {
        int valid = C - k * HVX_BYTES < HVX_BYTES ? C - k * HVX_BYTES : HVX_BYTES;
        HVX_Vector W[3][4];
        quad_weights(J, (k * HVX_BYTES % (J->residues * HVX_BYTES)) / HVX_BYTES, W);   /* channel 128k: residue k mod R */
        for (int gi = 0; gi < g; gi++)
            for (int ow = 0; ow < OW; ow++) {
                const int8_t *in = st->buf + gi * imgbytes + 2 * ow * C + k * HVX_BYTES;
                int32_t *out = J->out + ((size_t)(n0 + gi) * OH * OW + ow) * C + k * HVX_BYTES;
                QUAD_DISPATCH(quad_strip2, valid, acc, 0, in, out, OH, rowbytes, OW * C, C, W[0], W[1], W[2], valid, acc);
            }
    }
}

static void quads_stride1(const struct dw_job *J, const struct stack *st, int n0, int g)
{
    const struct dw_shape *s = J->s;
    const int C = s->c, rowlen = s->ow * C, nv = (rowlen + HVX_BYTES - 1) / HVX_BYTES;
    const int hp = st->hp, rowbytes = st->rowbytes, imgbytes = st->imgbytes, OH = s->oh, acc = J->accumulate;
    const int aligned = ((uintptr_t)J->out & (HVX_BYTES - 1)) == 0 && rowlen % 32 == 0;   /* every strip's rows */
    /* whole aligned output vectors, a zero border: quad_strip_packets (its strips of 128 lanes) */
    const int packets = dspt_dw_quad_packets_fit(s, st->pad, J->src_h, J->out, acc);
    for (int v = 0; v < nv; v++) {
        int valid = rowlen - v * HVX_BYTES < HVX_BYTES ? rowlen - v * HVX_BYTES : HVX_BYTES;
        HVX_Vector W[3][4], *W0 = W[0], *W1 = W[1], *W2 = W[2];
        quad_weights(J, v % J->residues, W);
        if (packets && valid == HVX_BYTES) {
            for (int gi = 0; gi < g; gi++)
                quad_strip_packets(st->buf + gi * imgbytes + v * HVX_BYTES,
                                   J->out + (size_t)(n0 + gi) * OH * rowlen + v * HVX_BYTES, hp, rowbytes, rowlen, C,
                                   W);
            continue;
        }
        for (int gi = 0; gi < g; gi++) {
            const int8_t *in = st->buf + gi * imgbytes + v * HVX_BYTES;
            int32_t *out = J->out + (size_t)(n0 + gi) * OH * rowlen + v * HVX_BYTES;
            QUAD_DISPATCH(quad_strip, valid, acc, aligned, in, out, hp, rowbytes, rowlen, C, W0, W1, W2, valid, acc,
                          st->pad > 0);
        }
    }
}

void dspt_dw_quads_run(const struct dw_job *J, const struct stack *st, int n0, int g)
{
    /* local copies: the output stores cannot alias them, so their fields stay in registers */
    const struct dw_job job = *J;
    const struct stack stack = *st;
    if (job.s->stride == 2) quads_stride2(&job, &stack, n0, g);
    else quads_stride1(&job, &stack, n0, g);
}
