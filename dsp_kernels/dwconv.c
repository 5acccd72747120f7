/* dwconv.c: depthwise convolution forward and backward data on HVX, channels in the lanes.
 *
 * y[n, oh, ow, c] = sum over taps (i, j) of x[n, oh*s + i - p, ow*s + j - p, c] * w[i, j, c]
 *
 * The reduction is over 9 (or 25) taps of one channel: vrmpy's groups of 4 bytes would
 * need the taps of a channel gathered into a word (a transpose per output). Instead each
 * tap is one vmpy of 128 channel bytes by the tap's 128 weight bytes (128 int8 products
 * in halfwords, even and odd channels apart), and two taps' products are summed into
 * words at once (vaddhw_acc): a halfword holds one product, never a sum, so -128 * -128
 * stays exact. The words come out as channels 4i, 4i+2 | 4i+1, 4i+3, which two vshuff
 * stages put back in order before the store (XNNPACK's depthwise kernels likewise keep
 * channels in the lanes and loop over taps; the widening is HVX's own).
 *
 * Inputs go through a zero-bordered copy of each image (no bounds in the loops), in one
 * of two layouts:
 * - flat (stride 1): the padded rows as they are (W * C bytes). An output vector is 128
 *   consecutive bytes of an output row, whatever C is (several pixels when C < 128), and
 *   tap (i, j) is the same 128 bytes moved by i rows and j * C bytes. Which weight a lane
 *   needs repeats every lcm(128, C) bytes: one weight table per residue r of the vector
 *   index (C / gcd(C, 128) of them), each held in registers while every vector of that
 *   residue, of every row and image, is computed.
 * - blocks (other strides, backward data of stride 2): one 128-channel block of each pixel
 *   at a 128-byte pitch; a vector is one pixel's block (the last block of a ragged C only
 *   partly used).
 * Backward data of stride 1 is the forward conv of err with the taps flipped; of stride
 * s, each class of dx pixels (row and column residues mod s) meets its own taps, so every
 * product is a real one (no zeros inserted).
 * Work is split by images across the HVX threads (threads.h), each with its own copies.
 * The ops below try first the paths that put 4 real products in each vrmpy word:
 * dwconv_pixels.c (small images), dwconv_fwd2.c and dwconv_bwd2.c (3 x 3 at stride 2).
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "dwconv.h"
#include "threads.h"

#define DW_CHUNK (256u * 1024u)   /* padded images a thread copies per pass */
#define DW_MAX_TAPS 64            /* kernels up to 8 x 8 */

int dspt_dw_shape(const struct dspt_op_desc *d, const int32_t *img, const int32_t *out, struct dw_shape *s)
{
    s->n = img[0]; s->h = img[1]; s->w = img[2]; s->c = img[3];
    s->oh = out[1]; s->ow = out[2];
    s->kh = d->kernel_h; s->kw = d->kernel_w; s->stride = d->stride; s->pad = d->pad;
    if (s->n <= 0 || s->h <= 0 || s->w <= 0 || s->c <= 0 || s->kh <= 0 || s->kw <= 0 || s->stride <= 0 ||
        s->pad < 0 || out[0] != s->n || out[3] != s->c || s->oh <= 0 || s->ow <= 0)
        return DSPT_BAD_PARAMS;
    if (s->oh != (s->h + 2 * s->pad - s->kh) / s->stride + 1 || s->ow != (s->w + 2 * s->pad - s->kw) / s->stride + 1)
        return DSPT_BAD_PARAMS;
    if (d->shape_b[0] != s->kh || d->shape_b[1] != s->kw || d->shape_b[2] != s->c)
        return DSPT_BAD_PARAMS;
    return DSPT_OK;
}

/* Flat stacks (pitch C) keep each row's interior on a vector boundary: the row pitch is
 * rounded up to whole vectors and the stack starts `lead` bytes into its (aligned) buffer,
 * so the copy is aligned stores (aligned loads too when the source rows are whole
 * vectors) and the bytes between a row's right border and the next row's left border are
 * never read into a kept sum (column quads: x a zero weight; lanes past the row: dropped). */
static void stack_init(struct stack *st, int h, int w, int pad, int pitch)
{
    st->pad = pad;
    st->hp = h + 2 * pad;
    st->wp = w + 2 * pad;
    st->pitch = pitch;
    st->rowbytes = dw_round_vec(st->wp * pitch);
    st->lead = (HVX_BYTES - pad * pitch % HVX_BYTES) % HVX_BYTES;
    st->imgbytes = dw_round_vec(st->hp * st->rowbytes);
}

/* Zero the whole vectors from the one holding p up to end (rounded up): rounding out is
 * safe, since the border is zeroed before any fill and the fills write every interior byte. */
static void zero_vectors(int8_t *p, const int8_t *end)
{
    HVX_Vector *v = (HVX_Vector *)((uintptr_t)p & ~(uintptr_t)(HVX_BYTES - 1));
    int n = (int)(((uintptr_t)end + HVX_BYTES - 1 - (uintptr_t)v) / HVX_BYTES);
    for (int i = 0; i < n; i++) v[i] = Q6_V_vzero();
}

/* The zero border of g images (once a call: the fills never touch it). Row interiors are
 * aligned, so everything between one row's interior and the next (right border, the
 * pitch's slack, left border) is the same few whole vectors a row: one short loop. */
static void stack_zero_border(const struct stack *st, int h, int w, int g)
{
    if (!st->pad) return;
    const int rb = st->rowbytes, tail = (w * st->pitch) & ~(HVX_BYTES - 1), k = (rb - tail) / HVX_BYTES;
    for (int gi = 0; gi < g; gi++) {
        int8_t *img = st->buf + gi * st->imgbytes, *in0 = img + st->pad * rb + st->pad * st->pitch;
        zero_vectors(img, in0);                                    /* top rows, left of row 0 */
        for (int i = 0; i < k; i++) {   /* rows innermost: one store a packet */
            HVX_Vector *v = (HVX_Vector *)(in0 + tail) + i;
            for (int r = 0; r + 1 < h; r++, v += rb / HVX_BYTES) *v = Q6_V_vzero();
        }
        zero_vectors(in0 + (h - 1) * rb + tail, img + st->hp * rb);   /* right of the last row, bottom rows */
    }
}

/* rows of `bytes` from src (one after another) to the vector-aligned dst (dst_step apart):
 * aligned stores, aligned loads when every source row starts on a vector. The longer of
 * the two loops (rows, or a row's vectors) innermost: its loop is a load and a store. */
static void copy_rows_to_aligned(int8_t *dst, int dst_step, const int8_t *src, int rows, uint32_t bytes)
{
    const int whole = (int)(bytes / HVX_BYTES), rest = (int)(bytes % HVX_BYTES), dv = dst_step / HVX_BYTES;
    const int aligned = ((uintptr_t)src & (HVX_BYTES - 1)) == 0 && rest == 0;
    if (rows > whole) {
        for (int i = 0; i < whole; i++) {
            HVX_Vector *d = (HVX_Vector *)dst + i;
            const int8_t *sp = src + i * HVX_BYTES;
            if (aligned)
                for (int r = 0; r < rows; r++, d += dv, sp += bytes) *d = *(const HVX_Vector *)sp;
            else
                for (int r = 0; r < rows; r++, d += dv, sp += bytes) *d = hvx_load_u(sp);
        }
        if (rest)
            for (int r = 0; r < rows; r++)
                hvx_store_bytes(dst + r * dst_step + whole * HVX_BYTES,
                                hvx_load_bytes(src + (size_t)r * bytes + whole * HVX_BYTES, (uint32_t)rest), (uint32_t)rest);
        return;
    }
    for (int r = 0; r < rows; r++, dst += dst_step, src += bytes) {
        HVX_Vector *d = (HVX_Vector *)dst;
        if (aligned)
            for (uint32_t i = 0; i < (uint32_t)whole; i++) d[i] = ((const HVX_Vector *)src)[i];
        else
            for (uint32_t i = 0; i < (uint32_t)whole; i++) d[i] = hvx_load_u(src + i * HVX_BYTES);
        if (rest) hvx_store_bytes(d + whole, hvx_load_bytes(src + whole * HVX_BYTES, (uint32_t)rest), (uint32_t)rest);
    }
}

/* `rows` rows of `whole` (>= 2) aligned vectors, one after another at src, to rows `dst_step`
 * bytes apart at the aligned dst, in packets: each vector's store shares a packet with the
 * next one's load, so a row is whole + 1 packets (clang-16's loops took about 3 packets a
 * vector on MobileNetV2's rows of 4 and 9 vectors: the row and image ends' branches). */
static void copy_rows_packets(int8_t *dst, int dst_step, const int8_t *src, int rows, int whole)
{
    const int inner = whole - 1, next = dst_step - inner * HVX_BYTES;
    __asm__ volatile(
        "{ loop1(2f, %[rows]) }\n"
        "2:\n"
        "{ v0 = vmem(%[s]++#1); loop0(1f, %[inner]) }\n"
        "1:\n"
        "{ vmem(%[d]++#1) = v0; v0 = vmem(%[s]++#1) }:endloop0\n"
        "{ vmem(%[d]+#0) = v0; %[d] = add(%[d], %[next]) }:endloop1\n"
        : [d] "+r"(dst), [s] "+r"(src)
        : [rows] "r"(rows), [inner] "r"(inner), [next] "r"(next)
        : "v0", "lc0", "sa0", "lc1", "sa1", "usr", "memory");
}

/* Images n0 .. n0+g-1 of src (N, h, w, c) into the stack: whole rows (flat) or channel
 * block cb of every pixel (blocks). Only the interior is written: the border, zeroed once
 * a call, stays zero. */
static void stack_fill(struct stack *st, const int8_t *src, int h, int w, int c, int n0, int g, int cb)
{
    const int8_t *first = src + (size_t)n0 * h * w * c;
    if (st->pitch == c && (w * c) % HVX_BYTES == 0 && w * c >= 2 * HVX_BYTES &&
        ((uintptr_t)first & (HVX_BYTES - 1)) == 0) {
        /* whole aligned rows (MobileNetV2's 16 x 16 x 32, 8 x 8 x 144) */
        for (int gi = 0; gi < g; gi++)
            copy_rows_packets(st->buf + gi * st->imgbytes + st->pad * st->rowbytes + st->pad * st->pitch,
                              st->rowbytes, first + (size_t)gi * h * w * c, h, w * c / HVX_BYTES);
        return;
    }
    if (st->pitch == c && (w * c) % HVX_BYTES == 0 && h <= w * c / HVX_BYTES &&
        ((uintptr_t)first & (HVX_BYTES - 1)) == 0) {
        /* whole aligned rows of at least h vectors (8 x 8 x 144, 4 x 4 x 192): the g images'
         * rows are one run of source vectors, copied by one loop whose destination skips the
         * border at each row's and image's end (a loop per row: about 3 packets a vector on
         * these short rows; MobileNetV2's 4 x 4 x 192, batch 64: 48.8 K -> 47.2 K packets).
         * Taller images keep copy_rows_to_aligned's loop down the rows. */
        const HVX_Vector *sv = (const HVX_Vector *)first;
        HVX_Vector *d = (HVX_Vector *)(st->buf + st->pad * st->rowbytes + st->pad * st->pitch);
        const int whole = w * c / HVX_BYTES, row_skip = st->rowbytes / HVX_BYTES - whole;
        const int img_skip = (st->imgbytes - h * st->rowbytes) / HVX_BYTES;
        int col = 0, row = 0;
        for (int k = 0; k < g * h * whole; k++) {
            *d++ = sv[k];
            if (++col == whole) {
                col = 0;
                d += row_skip;
                if (++row == h) { row = 0; d += img_skip; }
            }
        }
        return;
    }
    for (int gi = 0; gi < g; gi++) {
        const int8_t *img = src + (size_t)(n0 + gi) * h * w * c;
        int8_t *dst = st->buf + gi * st->imgbytes + st->pad * st->rowbytes + st->pad * st->pitch;
        if (st->pitch == c) {   /* flat (or one block of exactly 128 channels): one copy a row */
            copy_rows_to_aligned(dst, st->rowbytes, img, h, (uint32_t)(w * c));
            continue;
        }
        const int8_t *px = img + cb * HVX_BYTES;   /* blocks: whole vectors (lanes past C unused) */
        for (int r = 0; r < h; r++) {
            HVX_Vector *row = (HVX_Vector *)(dst + r * st->rowbytes);
            for (int q = 0; q < w; q++, px += c) row[q] = hvx_load_u(px);
        }
    }
}

/* One batch of output vectors sharing taps and weights: three nested loops (a, b, c) with
 * their steps in input bytes and output words; vector b of a row keeps
 * min(cap, lim - b * vstep) words. */
struct dw_run {
    const int8_t *in;
    int32_t *out;
    int na, nb, nc, ia, ib, ic, oa, ob, oc;
    int cap, lim, vstep, accumulate;
};

/* 128 words in channel order from the two word pairs (even channels: 4i | 4i+2; odd:
 * 4i+1 | 4i+3), stored (or added) at out, `valid` words of them; WHOLE (compile-time):
 * that many whole vectors and nothing to add to, the store without branches. */
static inline __attribute__((always_inline)) void dw_store(const int WHOLE, int32_t *out, HVX_VectorPair ev,
                                                           HVX_VectorPair od, int valid, int accumulate)
{
    HVX_VectorPair a = Q6_W_vshuff_VVR(Q6_V_lo_W(od), Q6_V_lo_W(ev), -4);   /* 0,1,4,5.. | 64,65.. */
    HVX_VectorPair b = Q6_W_vshuff_VVR(Q6_V_hi_W(od), Q6_V_hi_W(ev), -4);   /* 2,3,6,7.. | 66,67.. */
    HVX_VectorPair lo = Q6_W_vshuff_VVR(Q6_V_lo_W(b), Q6_V_lo_W(a), -8);    /* 0..31 | 32..63 */
    HVX_VectorPair hi = Q6_W_vshuff_VVR(Q6_V_hi_W(b), Q6_V_hi_W(a), -8);    /* 64..95 | 96..127 */
    HVX_Vector v[4] = {Q6_V_lo_W(lo), Q6_V_hi_W(lo), Q6_V_lo_W(hi), Q6_V_hi_W(hi)};
    if (WHOLE) {
        for (int q = 0; q < WHOLE; q++) hvx_store_u(out + 32 * q, v[q]);
        return;
    }
    for (int q = 0; q < 4 && 32 * q < valid; q++) {
        int words = valid - 32 * q < 32 ? valid - 32 * q : 32;
        HVX_Vector r = accumulate ? Q6_Vw_vadd_VwVw(v[q], hvx_load_u(out + 32 * q)) : v[q];
        if (words == 32) hvx_store_u(out + 32 * q, r);
        else hvx_store_bytes(out + 32 * q, r, (uint32_t)words * 4);
    }
}

/* The run with NT taps (a compile-time count: the weights stay in registers; 0: nt taps,
 * weights read from wv each time). Tap t reads the input at off[t] bytes past the vector. */
static inline __attribute__((always_inline)) void dw_core(const int NT, const int WHOLE, const struct dw_run *R,
                                                          const int32_t *off, const HVX_Vector *wv, int nt)
{
    const int n = NT ? NT : nt;
    HVX_Vector W[NT ? NT : 1];
    int32_t O[NT ? NT : 1];
    for (int t = 0; t < NT; t++) { W[t] = wv[t]; O[t] = off[t]; }
    const HVX_Vector zero = Q6_V_vzero();
    const int na = R->na, nb = R->nb, nc = R->nc, ia = R->ia, ib = R->ib, ic = R->ic;
    const int oa = R->oa, ob = R->ob, oc = R->oc, cap = R->cap, lim = R->lim, vstep = R->vstep, acc = R->accumulate;
    for (int a = 0; a < na; a++)
        for (int b = 0; b < nb; b++) {
            int valid = lim - b * vstep < cap ? lim - b * vstep : cap;
            const int8_t *in = R->in + a * ia + b * ib;
            int32_t *out = R->out + a * oa + b * ob;
            for (int c = 0; c < nc; c++, in += ic, out += oc) {
                HVX_VectorPair ev = Q6_W_vcombine_VV(zero, zero), od = ev;
                int t = 0;
                for (; t + 1 < n; t += 2) {
                    HVX_Vector w0 = NT ? W[t] : wv[t], w1 = NT ? W[t + 1] : wv[t + 1];
                    HVX_VectorPair p0 = Q6_Wh_vmpy_VbVb(hvx_load_u(in + (NT ? O[t] : off[t])), w0);
                    HVX_VectorPair p1 = Q6_Wh_vmpy_VbVb(hvx_load_u(in + (NT ? O[t + 1] : off[t + 1])), w1);
                    ev = Q6_Ww_vaddacc_WwVhVh(ev, Q6_V_lo_W(p0), Q6_V_lo_W(p1));
                    od = Q6_Ww_vaddacc_WwVhVh(od, Q6_V_hi_W(p0), Q6_V_hi_W(p1));
                }
                if (t < n) {
                    HVX_VectorPair p0 = Q6_Wh_vmpy_VbVb(hvx_load_u(in + (NT ? O[t] : off[t])), NT ? W[t] : wv[t]);
                    ev = Q6_Ww_vaddacc_WwVhVh(ev, Q6_V_lo_W(p0), zero);
                    od = Q6_Ww_vaddacc_WwVhVh(od, Q6_V_hi_W(p0), zero);
                }
                dw_store(WHOLE, out, ev, od, valid, acc);
            }
        }
}

/* The compiled tap counts: full 3x3 kernels, and the tap classes of backward data at
 * stride 2 (3x3: 1, 2, 4; 5x5: 4, 6, 9); 5x5's 25 weights would not fit the registers. */
static inline __attribute__((always_inline)) void dw_run_whole(const int WHOLE, const struct dw_run *R,
                                                               const int32_t *off, const HVX_Vector *wv, int nt)
{
    switch (nt) {
    case 1: dw_core(1, WHOLE, R, off, wv, nt); break;
    case 2: dw_core(2, WHOLE, R, off, wv, nt); break;
    case 4: dw_core(4, WHOLE, R, off, wv, nt); break;
    case 6: dw_core(6, WHOLE, R, off, wv, nt); break;
    case 9: dw_core(9, WHOLE, R, off, wv, nt); break;
    default: dw_core(0, WHOLE, R, off, wv, nt); break;
    }
}

/* Runs whose every vector keeps 4 or 3 whole vectors of words (C = 128k or 128k + 96) store
 * without branches; the rest through the general store. */
static void dw_run_taps(const struct dw_run *R, const int32_t *off, const HVX_Vector *wv, int nt)
{
    int fixed = R->vstep == 0 || R->nb * R->vstep <= R->lim - R->cap + R->vstep;   /* no row ends mid-vector */
    int whole = !R->accumulate && fixed && R->cap % 32 == 0 ? R->cap / 32 : 0;
    if (whole == 4) dw_run_whole(4, R, off, wv, nt);
    else if (whole == 3) dw_run_whole(3, R, off, wv, nt);
    else dw_run_whole(0, R, off, wv, nt);
}

/* y of images n0 .. n0+g-1 from the flat stack (stride 1): one run per weight residue. */
static void forward_flat(const struct dw_job *J, struct stack *st, int n0, int g)
{
    const struct dw_shape *s = J->s;
    int taps = s->kh * s->kw, rowlen = s->ow * s->c, nv = (rowlen + HVX_BYTES - 1) / HVX_BYTES;
    int32_t off[DW_MAX_TAPS];
    HVX_Vector wv[DW_MAX_TAPS];
    for (int i = 0; i < s->kh; i++)
        for (int j = 0; j < s->kw; j++) off[i * s->kw + j] = i * st->rowbytes + j * s->c;
    for (int r = 0; r < J->residues && r < nv; r++) {
        for (int t = 0; t < taps; t++)
            wv[t] = *(const HVX_Vector *)(J->ext + (J->flip ? taps - 1 - t : t) * J->ext_bytes + r * HVX_BYTES);
        struct dw_run R = {.in = st->buf + r * HVX_BYTES, .out = J->out + (size_t)n0 * s->oh * rowlen + r * HVX_BYTES,
                           .na = s->oh, .nb = (nv - r + J->residues - 1) / J->residues, .nc = g,
                           .ia = st->rowbytes, .ib = J->residues * HVX_BYTES, .ic = st->imgbytes,
                           .oa = rowlen, .ob = J->residues * HVX_BYTES, .oc = s->oh * rowlen,
                           .cap = HVX_BYTES, .lim = rowlen - r * HVX_BYTES, .vstep = J->residues * HVX_BYTES,
                           .accumulate = J->accumulate};
        dw_run_taps(&R, off, wv, taps);
    }
}

/* y of images n0 .. n0+g-1, channel block cb, from the block stack (any stride). */
static void forward_blocks(const struct dw_job *J, struct stack *st, int n0, int g, int cb)
{
    const struct dw_shape *s = J->s;
    int taps = s->kh * s->kw, lanes = s->c - cb * HVX_BYTES;
    int32_t off[DW_MAX_TAPS];
    HVX_Vector wv[DW_MAX_TAPS];
    for (int i = 0; i < s->kh; i++)
        for (int j = 0; j < s->kw; j++) {
            off[i * s->kw + j] = i * st->rowbytes + j * HVX_BYTES;
            wv[i * s->kw + j] = hvx_load_u(J->w + (i * s->kw + j) * s->c + cb * HVX_BYTES);
        }
    struct dw_run R = {.in = st->buf, .out = J->out + (size_t)n0 * s->oh * s->ow * s->c + cb * HVX_BYTES,
                       .na = s->oh, .nb = s->ow, .nc = g,
                       .ia = s->stride * st->rowbytes, .ib = s->stride * HVX_BYTES, .ic = st->imgbytes,
                       .oa = s->ow * s->c, .ob = s->c, .oc = s->oh * s->ow * s->c,
                       .cap = lanes < HVX_BYTES ? lanes : HVX_BYTES, .lim = 1 << 30, .vstep = 0,
                       .accumulate = J->accumulate};
    dw_run_taps(&R, off, wv, taps);
}

/* dx of images n0 .. n0+g-1, channel block cb, from the block stack of err (padded by
 * J->pad): dx pixel (h, w) meets the taps i = (h + p) mod s (step s), j likewise, at err
 * row (h + p - i) / s and column (w + p - j) / s. One run per class of (h mod s, w mod s). */
static void bwd_data_blocks(const struct dw_job *J, struct stack *st, int n0, int g, int cb)
{
    const struct dw_shape *s = J->s;
    int S = s->stride, p = s->pad, pe = J->pad, lanes = s->c - cb * HVX_BYTES;
    int32_t off[DW_MAX_TAPS];
    HVX_Vector wv[DW_MAX_TAPS];
    for (int a = 0; a < S && a < s->h; a++)
        for (int b = 0; b < S && b < s->w; b++) {
            int nt = 0;
            for (int i = (a + p) % S; i < s->kh; i += S)
                for (int j = (b + p) % S; j < s->kw; j += S) {
                    int er = (a + p - i) / S + pe, ec = (b + p - j) / S + pe;   /* exact: i = a + p mod S */
                    off[nt] = er * st->rowbytes + ec * HVX_BYTES;
                    wv[nt++] = hvx_load_u(J->w + (i * s->kw + j) * s->c + cb * HVX_BYTES);
                }
            struct dw_run R = {.in = st->buf, .out = J->out + ((size_t)n0 * s->h * s->w + a * s->w + b) * s->c + cb * HVX_BYTES,
                               .na = (s->h - a + S - 1) / S, .nb = (s->w - b + S - 1) / S, .nc = g,
                               .ia = st->rowbytes, .ib = HVX_BYTES, .ic = st->imgbytes,
                               .oa = S * s->w * s->c, .ob = S * s->c, .oc = s->h * s->w * s->c,
                               .cap = lanes < HVX_BYTES ? lanes : HVX_BYTES, .lim = 1 << 30, .vstep = 0,
                               .accumulate = J->accumulate};
            dw_run_taps(&R, off, wv, nt);
        }
}

static int dw_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct dw_job *J = job;
    const struct dw_shape *s = J->s;
    struct stack st;
    stack_init(&st, J->src_h, J->src_w, J->pad, J->flat || J->quads ? s->c : HVX_BYTES);
    st.buf = J->buf[t] + st.lead;
    int lo, hi, blocks = J->flat || J->quads ? 1 : (s->c + HVX_BYTES - 1) / HVX_BYTES;
    dspt_share(tc, s->n, 1, t, &lo, &hi);
    if (lo < hi) stack_zero_border(&st, J->src_h, J->src_w, hi - lo < J->g ? hi - lo : J->g);
    for (int n0 = lo; n0 < hi; n0 += J->g) {
        int g = hi - n0 < J->g ? hi - n0 : J->g;
        for (int cb = 0; cb < blocks; cb++) {
            stack_fill(&st, J->src, J->src_h, J->src_w, s->c, n0, g, cb);
            if (J->quads) dspt_dw_quads_run(J, &st, n0, g);
            else if (J->flat) forward_flat(J, &st, n0, g);
            else if (J->out && J->flip < 0) bwd_data_blocks(J, &st, n0, g, cb);
            else forward_blocks(J, &st, n0, g, cb);
        }
    }
    return DSPT_OK;
}

static int gcd(int a, int b)
{
    while (b) { int t = a % b; a = b; b = t; }
    return a;
}

/* Carve each thread's stack (its share zeroes it: the border) and, flat, the repeated weight planes;
 * then run the shares. */
static int dw_run_job(struct dspt_ctx *ctx, struct dw_job *J)
{
    const struct dw_shape *s = J->s;
    struct stack st;
    stack_init(&st, J->src_h, J->src_w, J->pad, J->flat || J->quads ? s->c : HVX_BYTES);
    int per = (int)ctx->threads, share = (s->n + per - 1) / per;
    J->g = (int)(DW_CHUNK / (uint32_t)st.imgbytes);
    if (J->g < 1) J->g = 1;
    if (J->g > share) J->g = share;
    /* vectors read past the last row (column quads: 3 C further) */
    uint32_t bytes = (uint32_t)(st.lead + J->g * st.imgbytes) + 2 * HVX_BYTES + (J->quads ? 3 * s->c : 0);
    J->buf_bytes = bytes;
    int taps = s->kh * s->kw;
    if (taps > DW_MAX_TAPS) return DSPT_NO_SUPPORT;
    if (J->flat || J->quads) {
        J->residues = s->c / gcd(s->c, HVX_BYTES);
        J->ext_bytes = (J->residues + 1) * HVX_BYTES;
        int8_t *ext = dspt_scratch(ctx, (uint32_t)(taps * J->ext_bytes));
        if (!ext) return DSPT_NO_SUPPORT;
        for (int t = 0; t < taps; t++) {   /* plane t repeated: lane l of residue r is channel (128 r + l) mod C */
            int8_t *e = ext + t * J->ext_bytes;
            hvx_copy(e, J->w + t * s->c, (uint32_t)(J->ext_bytes < s->c ? J->ext_bytes : s->c));
            /* doubled from itself (have stays a multiple of C): a few long copies, not
             * ext_bytes / C short ones with a masked tail each (9 x 9 for C = 144) */
            for (int have = s->c; have < J->ext_bytes; have *= 2)
                hvx_copy(e + have, e, (uint32_t)(J->ext_bytes - have < have ? J->ext_bytes - have : have));
        }
        J->ext = ext;
    }
    for (int t = 0; t < (int)ctx->threads; t++) {
        struct dspt_ctx *tc = dspt_thread_ctx(ctx, t);
        J->buf[t] = tc ? dspt_scratch(tc, bytes) : 0;
        if (!J->buf[t]) return DSPT_NO_SUPPORT;
    }
    return dspt_run_shares(ctx, dw_share, J);
}

static int too_deep(int64_t depth) { return depth * 127 * 127 >= ((int64_t)1 << 31); }

int dspt_op_dwconv2d(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    struct dw_shape s;
    if (d->dtype != DSPT_I8) return DSPT_NO_SUPPORT;
    int st = dspt_dw_shape(d, d->shape_a, d->shape_out, &s);
    if (st) return st;
    if (too_deep(s.kh * s.kw)) return DSPT_NO_SUPPORT;
    uint32_t y_words = (uint32_t)s.n * s.oh * s.ow * s.c;
    const int8_t *x = dspt_at(ctx, d->in[0], dspt_count(d->shape_a));
    const int8_t *w = dspt_at(ctx, d->in[1], (uint32_t)(s.kh * s.kw * s.c));
    int32_t *y = dspt_at(ctx, d->out[0], y_words * 4);
    if (!x || !w || !y) return DSPT_BAD_PARAMS;
    int acc = (d->flags & DSPT_F_ACCUMULATE) != 0;
    /* the column triples from 2 x 2 outputs up (MobileNetV2's 8 x 8 x 144 at stride 2, batch 64:
     * 87 K -> 52 K packets, 4 x 4 x 192: 16 K -> 15 K); onto one pixel the pixel quads (6.6 K, 14 K) */
    int triples = dspt_dw_column_triples_fit(&s);
    if (dspt_dw_pixels_fit(&s, 0) && !(triples && s.oh >= 2 && s.ow >= 2)) {
        d->result_shift = DSPT_PATH_DW_PIXEL_QUADS;
        return dspt_dw_pixels(ctx, &s, x, w, y, 0, acc);
    }
    if (triples) {
        d->result_shift = dspt_dw_triple_packets_fit(&s, y, acc) ? DSPT_PATH_DW_TRIPLE_PACKETS : DSPT_PATH_DW_COLUMN_TRIPLES;
        return dspt_dw_column_triples(ctx, &s, x, w, y, acc, 0);
    }
    struct dw_job J = {.s = &s, .src = x, .w = w, .out = y, .flat = s.stride == 1, .flip = 0, .pad = s.pad,
                       .accumulate = acc, .src_h = s.h, .src_w = s.w,
                       .quads = dspt_dw_quads_fit(&s)};
    d->result_shift = J.quads ? DSPT_PATH_DW_COLUMN_QUADS : J.flat ? DSPT_PATH_DW_FLAT : DSPT_PATH_DW_BLOCKS;   /* quads: stride 1 or 2 */
    if (J.quads && dspt_dw_quad_packets_fit(&s, J.pad, J.src_h, y, acc)) d->result_shift = DSPT_PATH_DW_QUAD_PACKETS;
    return dw_run_job(ctx, &J);
}

int dspt_op_dwconv2d_bwd_data(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    struct dw_shape s;
    if (d->dtype != DSPT_I8) return DSPT_NO_SUPPORT;
    int st = dspt_dw_shape(d, d->shape_out, d->shape_a, &s);   /* out0 is dx (N, H, W, C) */
    if (st) return st;
    if (too_deep(s.kh * s.kw)) return DSPT_NO_SUPPORT;
    const int8_t *err = dspt_at(ctx, d->in[0], dspt_count(d->shape_a));
    const int8_t *w = dspt_at(ctx, d->in[1], (uint32_t)(s.kh * s.kw * s.c));
    int32_t *dx = dspt_at(ctx, d->out[0], dspt_count(d->shape_out) * 4);
    if (!err || !w || !dx) return DSPT_BAD_PARAMS;
    int acc = (d->flags & DSPT_F_ACCUMULATE) != 0;
    /* the err quads before the pixel quads once err has 2 x 2 pixels (MobileNetV2's 4 x 4 x 192
     * stride 2, batch 64: 37 K -> 29 K packets); on a 1 x 1 err the pixel quads win (18 K, 28 K) */
    int dx_aligned = ((uintptr_t)dx & (HVX_BYTES - 1)) == 0;
    if (dspt_dw_err_one_fit(&s) && dx_aligned) {
        d->result_shift = DSPT_PATH_DW_ERR_ONE;
        return dspt_dw_err_one(ctx, &s, err, w, dx, acc);
    }
    int err_quads = dspt_dw_err_quads_fit(&s);
    if (dspt_dw_pixels_fit(&s, 1) && !(err_quads && s.oh >= 2 && s.ow >= 2)) {
        d->result_shift = DSPT_PATH_DW_PIXEL_QUADS;
        return dspt_dw_pixels(ctx, &s, err, w, dx, 1, acc);
    }
    if (dspt_dw_err_pairs_fit(&s) && dx_aligned) {
        d->result_shift = dspt_dw_err_packets_fit(&s, acc)   ? DSPT_PATH_DW_ERR_PACKETS
                          : dspt_dw_err_144_fit(&s, acc) ? DSPT_PATH_DW_ERR_144
                                                              : DSPT_PATH_DW_ERR_PAIRS;
        return dspt_dw_err_pairs(ctx, &s, err, w, dx, acc);
    }
    if (err_quads) {
        d->result_shift = DSPT_PATH_DW_ERR_QUADS;
        return dspt_dw_err_quads(ctx, &s, err, w, dx, acc);
    }
    if (s.stride == 1 && s.kh == s.kw && s.pad <= s.kh - 1) {
        /* the forward conv of err (padded by k - 1 - p) with the taps flipped */
        struct dw_shape f = {s.n, s.oh, s.ow, s.c, s.kh, s.kw, s.h, s.w, 1, s.kh - 1 - s.pad};
        if (dspt_dw_column_triples_fit(&f)) {
            d->result_shift = DSPT_PATH_DW_COLUMN_TRIPLES;
            return dspt_dw_column_triples(ctx, &f, err, w, dx, acc, 1);
        }
        struct dw_job J = {.s = &f, .src = err, .w = w, .out = dx, .flat = 1, .flip = 1, .pad = f.pad,
                           .accumulate = acc, .src_h = s.oh, .src_w = s.ow, .quads = dspt_dw_quads_fit(&f)};
        d->result_shift = J.quads ? DSPT_PATH_DW_COLUMN_QUADS : DSPT_PATH_DW_FLAT;
        if (J.quads && dspt_dw_quad_packets_fit(&f, J.pad, J.src_h, dx, acc)) d->result_shift = DSPT_PATH_DW_QUAD_PACKETS;
        return dw_run_job(ctx, &J);
    }
    /* err padded so that every class's taps land inside: rows (h + p - i) / s from
     * -(k - 1 - p) / s up to (H - 1 + p) / s */
    int k = s.kh > s.kw ? s.kh : s.kw, hw = s.h > s.w ? s.h : s.w, ohw = s.oh < s.ow ? s.oh : s.ow;
    int pe = (k - 1 - s.pad + s.stride - 1) / s.stride, below = (hw - 1 + s.pad) / s.stride - (ohw - 1);
    if (pe < below) pe = below;
    if (pe < 0) pe = 0;
    struct dw_job J = {.s = &s, .src = err, .w = w, .out = dx, .flat = 0, .flip = -1, .pad = pe,
                       .accumulate = acc, .src_h = s.oh, .src_w = s.ow};
    d->result_shift = DSPT_PATH_DW_CLASSES;
    return dw_run_job(ctx, &J);
}
