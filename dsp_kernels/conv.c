/* conv.c: the three convolutions of training, each lowered to dspt_gemm_core.
 *
 * forward      y[p, o]   = cols(x)[p, :] . w[o, :]          (im2col rows, chunked)
 * bwd data     dx[q, c]  = gather(err)[q, :] . wT[c, :]     (transposed conv as a gather)
 * bwd weight   dw[o, j]  = sum_p err[p, o] * cols(x)[p, j]  (reduction over p, chunked)
 * Chunks of im2col rows stay within DSPT_CHUNK bytes, the size of a VTCM slice, so
 * the working set fits on-chip on a device. Layouts: NHWC, w (O, KH, KW, C).
 */
#include "hvx-utils.h"
#include "kernels.h"

#define DSPT_CHUNK (256u * 1024u)

struct conv_shape {
    int n, h, w, c, o, kh, kw, oh, ow, stride, pad;
};

static int conv_shape(const struct dspt_op_desc *d, const int32_t *xs, const int32_t *es,
                      struct conv_shape *s)
{
    s->n = xs[0]; s->h = xs[1]; s->w = xs[2]; s->c = xs[3];
    s->kh = d->kernel_h; s->kw = d->kernel_w; s->stride = d->stride; s->pad = d->pad;
    s->o = es[3]; s->oh = es[1]; s->ow = es[2];
    if (s->n <= 0 || s->h <= 0 || s->w <= 0 || s->c <= 0 || s->o <= 0 || s->kh <= 0 ||
        s->kw <= 0 || s->stride <= 0 || s->pad < 0 || es[0] != s->n)
        return DSPT_BAD_PARAMS;
    if (s->oh != (s->h + 2 * s->pad - s->kh) / s->stride + 1 ||
        s->ow != (s->w + 2 * s->pad - s->kw) / s->stride + 1 || s->oh <= 0 || s->ow <= 0)
        return DSPT_BAD_PARAMS;
    return DSPT_OK;
}

static int too_deep(int64_t depth) { return depth * 127 * 127 >= ((int64_t)1 << 31); }

/* im2col rows p0 .. p0+rows-1 (p = (n, oh, ow)) into dst at row stride ldd bytes,
 * columns (kh, kw, c) like the weights; padding reads as zero. */
static void im2col(int8_t *dst, int ldd, const int8_t *x, const struct conv_shape *s, int p0,
                   int rows)
{
    int kc = s->kw * s->c;
    /* divide once, then step (n, oh, ow): Hexagon divides in software */
    int ow = p0 % s->ow, oh = (p0 / s->ow) % s->oh, n = p0 / (s->ow * s->oh);
    for (int r = 0; r < rows; r++, ow = ow + 1 == s->ow ? 0 : ow + 1,
             oh = ow ? oh : (oh + 1 == s->oh ? 0 : oh + 1), n = (ow || oh) ? n : n + 1) {
        int8_t *row = dst + r * ldd;
        int iw0 = ow * s->stride - s->pad;
        int lo = iw0 < 0 ? -iw0 : 0;                                  /* first kw inside */
        int hi = iw0 + s->kw > s->w ? s->w - iw0 : s->kw;             /* one past last */
        for (int i = 0; i < s->kh; i++) {
            int ih = oh * s->stride - s->pad + i;
            int8_t *seg = row + i * kc;
            if (ih < 0 || ih >= s->h || hi <= lo) { hvx_zero(seg, kc); continue; }
            if (lo > 0) hvx_zero(seg, lo * s->c);
            hvx_copy(seg + lo * s->c, x + (((n * s->h + ih) * s->w) + iw0 + lo) * s->c,
                     (hi - lo) * s->c);
            if (hi < s->kw) hvx_zero(seg + hi * s->c, (s->kw - hi) * s->c);
        }
        for (int k = s->kh * kc; k < ldd; k++) row[k] = 0;
    }
}

int dspt_op_conv2d(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    struct conv_shape s;
    if (d->dtype != DSPT_I8) return DSPT_NO_SUPPORT;
    int st = conv_shape(d, d->shape_a, d->shape_out, &s);
    if (st) return st;
    if (d->shape_b[0] != s.o || d->shape_b[1] != s.kh || d->shape_b[2] != s.kw || d->shape_b[3] != s.c)
        return DSPT_BAD_PARAMS;
    int k = s.kh * s.kw * s.c, ldk = (k + 3) & ~3, p = s.n * s.oh * s.ow;
    if (too_deep(k)) return DSPT_NO_SUPPORT;
    const int8_t *x = dspt_at(ctx, d->in[0], dspt_count(d->shape_a));
    const int8_t *w = dspt_at(ctx, d->in[1], dspt_count(d->shape_b));
    int32_t *y = dspt_at(ctx, d->out[0], (uint32_t)p * s.o * 4);
    if (!x || !w || !y) return DSPT_BAD_PARAMS;
    int8_t *bp = dspt_scratch(ctx, dspt_packed_b_bytes(s.o, k));
    int rows = (int)(DSPT_CHUNK / ldk) & ~3;
    if (rows < 4) rows = 4;
    int8_t *cols = dspt_scratch(ctx, (uint32_t)rows * ldk);
    if (!bp || !cols) return DSPT_NO_SUPPORT;
    dspt_pack_b(bp, w, s.o, k, k, 0);
    int acc = (d->flags & DSPT_F_ACCUMULATE) != 0;
    for (int p0 = 0; p0 < p; p0 += rows) {
        int r = p - p0 < rows ? p - p0 : rows;
        im2col(cols, ldk, x, &s, p0, r);
        dspt_gemm_core(y + p0 * s.o, s.o, cols, ldk, bp, r, s.o, k, acc);
    }
    return DSPT_OK;
}

/* Transposed conv without flipping: input pixel (h, w) gets err[oh, ow] through tap
 * (kh, kw) when h + pad - kh = oh * stride, so each dx row gathers err vectors. */
static void gather_err(int8_t *dst, int ldd, const int8_t *err, const struct conv_shape *s,
                       int q0, int rows)
{
    int w = q0 % s->w, h = (q0 / s->w) % s->h, n = q0 / (s->w * s->h);
    for (int r = 0; r < rows; r++, w = w + 1 == s->w ? 0 : w + 1,
             h = w ? h : (h + 1 == s->h ? 0 : h + 1), n = (w || h) ? n : n + 1) {
        int8_t *row = dst + r * ldd;
        for (int i = 0; i < s->kh; i++) {
            int th = h + s->pad - i, one = s->stride == 1;  /* skip software division */
            int oh = one ? th : th / s->stride;
            int hok = th >= 0 && (one || th % s->stride == 0) && oh < s->oh;
            for (int j = 0; j < s->kw; j++) {
                int tw = w + s->pad - j, ow = one ? tw : tw / s->stride;
                int8_t *seg = row + (i * s->kw + j) * s->o;
                if (hok && tw >= 0 && (one || tw % s->stride == 0) && ow < s->ow)
                    hvx_copy(seg, err + ((n * s->oh + oh) * s->ow + ow) * s->o, s->o);
                else
                    hvx_zero(seg, s->o);
            }
        }
        for (int k = s->kh * s->kw * s->o; k < ldd; k++) row[k] = 0;
    }
}

int dspt_op_conv2d_bwd_data(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    struct conv_shape s;
    if (d->dtype != DSPT_I8) return DSPT_NO_SUPPORT;
    int st = conv_shape(d, d->shape_out, d->shape_a, &s);  /* out0 is dx [N,H,W,C] */
    if (st) return st;
    if (d->shape_b[0] != s.o || d->shape_b[1] != s.kh || d->shape_b[2] != s.kw || d->shape_b[3] != s.c)
        return DSPT_BAD_PARAMS;
    int k = s.kh * s.kw * s.o, ldk = (k + 3) & ~3, q = s.n * s.h * s.w;
    if (too_deep(k)) return DSPT_NO_SUPPORT;
    const int8_t *err = dspt_at(ctx, d->in[0], dspt_count(d->shape_a));
    const int8_t *w = dspt_at(ctx, d->in[1], dspt_count(d->shape_b));
    int32_t *dx = dspt_at(ctx, d->out[0], (uint32_t)q * s.c * 4);
    if (!err || !w || !dx) return DSPT_BAD_PARAMS;
    int32_t *koff = dspt_scratch(ctx, (uint32_t)k * 4);
    int8_t *bp = dspt_scratch(ctx, dspt_packed_b_bytes(s.c, k));
    int rows = (int)(DSPT_CHUNK / ldk) & ~3;
    if (rows < 4) rows = 4;
    int8_t *cols = dspt_scratch(ctx, (uint32_t)rows * ldk);
    if (!koff || !bp || !cols) return DSPT_NO_SUPPORT;
    /* wT[c, (kh, kw, o)] = w[o, kh, kw, c] */
    for (int t = 0; t < s.kh * s.kw; t++)
        for (int o = 0; o < s.o; o++) koff[t * s.o + o] = (o * s.kh * s.kw + t) * s.c;
    dspt_pack_b(bp, w, s.c, k, 1, koff);
    int acc = (d->flags & DSPT_F_ACCUMULATE) != 0;
    for (int q0 = 0; q0 < q; q0 += rows) {
        int r = q - q0 < rows ? q - q0 : rows;
        gather_err(cols, ldk, err, &s, q0, r);
        dspt_gemm_core(dx + q0 * s.c, s.c, cols, ldk, bp, r, s.c, k, acc);
    }
    return DSPT_OK;
}

int dspt_op_conv2d_bwd_weight(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    struct conv_shape s;
    if (d->dtype != DSPT_I8) return DSPT_NO_SUPPORT;
    int st = conv_shape(d, d->shape_b, d->shape_a, &s);  /* in1 is x, in0 is err */
    if (st) return st;
    int j = s.kh * s.kw * s.c, p = s.n * s.oh * s.ow;
    if (too_deep(p)) return DSPT_NO_SUPPORT;
    const int8_t *err = dspt_at(ctx, d->in[0], dspt_count(d->shape_a));
    const int8_t *x = dspt_at(ctx, d->in[1], dspt_count(d->shape_b));
    int32_t *dw = dspt_at(ctx, d->out[0], (uint32_t)s.o * j * 4);
    if (!err || !x || !dw) return DSPT_BAD_PARAMS;
    /* chunk the reduction: pc positions (a multiple of 4) per pass */
    int pc = (int)(DSPT_CHUNK / (uint32_t)(j + s.o)) & ~3;
    if (pc < 4) pc = 4;
    if (pc > ((p + 3) & ~3)) pc = (p + 3) & ~3;
    int8_t *cols = dspt_scratch(ctx, (uint32_t)pc * j);
    int8_t *et = dspt_scratch(ctx, (uint32_t)s.o * pc);
    int32_t *koff = dspt_scratch(ctx, (uint32_t)pc * 4);
    int8_t *bp = dspt_scratch(ctx, dspt_packed_b_bytes(j, pc));
    if (!cols || !et || !koff || !bp) return DSPT_NO_SUPPORT;
    for (int i = 0; i < pc; i++) koff[i] = i * j;
    for (int p0 = 0; p0 < p; p0 += pc) {
        int r = p - p0 < pc ? p - p0 : pc;
        im2col(cols, j, x, &s, p0, r);
        /* errT[o, p] for this chunk, zero past the end (the packed b is zero there too) */
        for (int o = 0; o < s.o; o++) {
            int8_t *row = et + o * pc;
            for (int i = 0; i < r; i++) row[i] = err[(p0 + i) * s.o + o];
            for (int i = r; i < pc; i++) row[i] = 0;
        }
        dspt_pack_b(bp, cols, j, r, 1, koff);
        int acc = p0 > 0 || (d->flags & DSPT_F_ACCUMULATE) != 0;
        dspt_gemm_core(dw, j, et, pc, bp, s.o, j, r, acc);
    }
    return DSPT_OK;
}
