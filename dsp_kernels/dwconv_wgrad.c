/* dwconv_wgrad.c: the depthwise weight gradient on HVX, four images in each vrmpy word.
 *
 * dw[i, j, c] = sum over (n, oh, ow) of err[n, oh, ow, c] * x[n, oh*s + i - p, ow*s + j - p, c]
 *
 * The reduction runs over positions, and for a given tap every image reads x at the same
 * offset: so the bytes of four images are interleaved into each word (lane c of a vector:
 * images 4g .. 4g+3 of channel c), for x (zero-bordered) and err alike. Then one vrmpy of
 * an x vector by an err vector is 32 channels x 4 images of products summed per channel,
 * a tap is an address offset, and all 128 bytes of every product are real ones (ragged
 * batches pad the last group with zero images). A register per tap (9, or 25) sums over
 * every position of the pass; one interleave (two vshuff stages) per 4 x 128 input bytes.
 * Each HVX thread takes whole groups of images and sums into its own partial dw, added
 * after the join (conv.c's dspt_join_partials). dw is tap-major, dw[t, c], as the
 * forward's weights (ops.h): the host transposes C * KH * KW words. The fill of whole
 * aligned rows is a packet loop (dw_fill_packets, dwconv_wgrad.h), and the 3 x 3 rows that
 * dwconv_wgrad_rows.c takes (path dw_image_rows) run there as packets; the rest are C loops.
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "conv_common.h"
#include "dwconv.h"
#include "dwconv_wgrad.h"
#include "threads.h"

#define WG_CHUNK (512u * 1024u)   /* interleaved x and err a thread holds per pass */
#define WG_MAX_TAPS 64

static void quad_init(struct quad *q, int h, int w, int pad, int c)
{
    q->pad = pad;
    q->rows = h + 2 * pad;
    q->cols = w + 2 * pad;
    q->blocks = (c + 31) / 32;
    q->pitch = 4 * c;
    q->group_bytes = q->rows * q->cols * q->pitch;
    /* rows a whole number of vectors apart: moving buf `lead` bytes into its buffer puts
     * every row's interior (pad pixels in) on a vector, so the fill stores whole vectors */
    q->aligned = q->cols * q->pitch % HVX_BYTES == 0;
    q->lead = q->aligned ? (HVX_BYTES - pad * q->pitch % HVX_BYTES) % HVX_BYTES : 0;
}

/* Groups of 4 images of src (n images of h x w x c, from image `first`), ng of them, into
 * q's interior; images past n read `zeros` (a zero row). 128 bytes of each image's row make
 * 4 vectors of q's row (aligned stores when C % 32 == 0). */
static void quad_fill(struct quad *q, const int8_t *src, int n, int h, int w, int c, int first, int ng,
                      const int8_t *zeros)
{
    const int rowlen = w * c, rows = q->rows, cols = q->cols, pitch = q->pitch, pad = q->pad;
    /* whole aligned vectors a row (no border: an image), at least 3 of them an image */
    const int fast = q->aligned && (pad ? rowlen : h * rowlen) % HVX_BYTES == 0 &&
                     ((uintptr_t)src & (HVX_BYTES - 1)) == 0 && h * rowlen >= 3 * HVX_BYTES;
    const int image = h * rowlen, small = 4 * HVX_BYTES, big = small + cols * pitch - 4 * rowlen;
    for (int gi = 0; gi < ng; gi++) {
        if (fast && first + 4 * gi + 3 < n) {   /* 4 real images (a ragged batch's last group below) */
            int8_t *dst = q->buf + ((gi * rows + pad) * cols + pad) * pitch;
            const int8_t *p = src + (size_t)(first + 4 * gi) * image;
            if (pad)   /* a run a row: image 0's load pointer a vector into its next row starts the next */
                dw_fill_packets(dst, p, image, HVX_BYTES, image / HVX_BYTES, p + rowlen + HVX_BYTES, rowlen, small,
                                big);
            else   /* no border: one run */
                dw_fill_packets(dst, p, image, HVX_BYTES, image / HVX_BYTES, NULL, 0, small, small);
            continue;
        }
        const int8_t *im[4];
        int step[4];
        for (int k = 0; k < 4; k++) {
            int img = first + 4 * gi + k;
            im[k] = img < n ? src + (size_t)img * image : zeros;
            step[k] = img < n ? rowlen : 0;
        }
        for (int r = 0; r < h; r++) {
            const int8_t *r0 = im[0] + r * step[0], *r1 = im[1] + r * step[1];
            const int8_t *r2 = im[2] + r * step[2], *r3 = im[3] + r * step[3];
            int8_t *dst = q->buf + ((gi * rows + r + pad) * cols + pad) * pitch;
            HVX_Vector v[4];
            int o = 0;
            if (pitch % HVX_BYTES == 0)
                for (; o + HVX_BYTES <= rowlen; o += HVX_BYTES, dst += 4 * HVX_BYTES)
                    dw_interleave4((HVX_Vector *)dst, hvx_load_u(r0 + o), hvx_load_u(r1 + o), hvx_load_u(r2 + o),
                                   hvx_load_u(r3 + o));
            for (; o + HVX_BYTES <= rowlen; o += HVX_BYTES, dst += 4 * HVX_BYTES) {
                dw_interleave4(v, hvx_load_u(r0 + o), hvx_load_u(r1 + o), hvx_load_u(r2 + o), hvx_load_u(r3 + o));
                for (int k = 0; k < 4; k++) dw_store_u((int32_t *)(dst + k * HVX_BYTES), v[k]);
            }
            if (o < rowlen) {   /* the row's last bytes, exactly: the border follows */
                dw_interleave4(v, hvx_load_u(r0 + o), hvx_load_u(r1 + o), hvx_load_u(r2 + o), hvx_load_u(r3 + o));
                for (int k = 0, left = 4 * (rowlen - o); left > 0; k++, left -= HVX_BYTES)
                    hvx_store_bytes(dst + k * HVX_BYTES, v[k], left < HVX_BYTES ? (uint32_t)left : HVX_BYTES);
            }
        }
    }
}

/* Whole aligned vectors from the one holding p up to end (rounded up): rounding out is safe,
 * since the border is zeroed before any fill and the fills write every interior byte (the
 * buffer's lead and slack hold the rounding at its ends). */
static void quad_zero_vectors(int8_t *p, const int8_t *end)
{
    HVX_Vector *v = (HVX_Vector *)((uintptr_t)p & ~(uintptr_t)(HVX_BYTES - 1));
    int n = (int)(((uintptr_t)end + HVX_BYTES - 1 - (uintptr_t)v) / HVX_BYTES);
    for (int i = 0; i < n; i++) v[i] = Q6_V_vzero();
}

/* The zero border of ng groups of q (the interiors are filled each pass, the border never):
 * pad whole rows above and below, pad pixels either side of each row between. */
static void quad_zero_border(const struct quad *q, int ng)
{
    const int pad = q->pad, rowbytes = q->cols * q->pitch, side = pad * q->pitch;
    if (!pad) return;
    if (q->aligned) {   /* row interiors on vectors: as dwconv.c's stack_zero_border, one store a packet */
        const int h = q->rows - 2 * pad, tail = (q->cols - 2 * pad) * q->pitch & ~(HVX_BYTES - 1);
        const int k = (rowbytes - tail) / HVX_BYTES;   /* from a row interior's last vector to the next interior */
        for (int gi = 0; gi < ng; gi++) {
            int8_t *g = q->buf + (size_t)gi * q->group_bytes, *in0 = g + pad * rowbytes + side;
            quad_zero_vectors(g, in0);   /* top rows, left of row 0 */
            for (int i = 0; i < k; i++) {
                HVX_Vector *v = (HVX_Vector *)(in0 + tail) + i;
                for (int r = 0; r + 1 < h; r++, v += rowbytes / HVX_BYTES) *v = Q6_V_vzero();
            }
            quad_zero_vectors(in0 + (h - 1) * rowbytes + tail, g + q->group_bytes);   /* bottom */
        }
        return;
    }
    for (int gi = 0; gi < ng; gi++) {
        int8_t *g = q->buf + (size_t)gi * q->group_bytes;
        hvx_zero(g, (uint32_t)(pad * rowbytes));
        hvx_zero(g + (q->rows - pad) * rowbytes, (uint32_t)(pad * rowbytes));
        for (int r = pad; r < q->rows - pad; r++) {
            hvx_zero(g + r * rowbytes, (uint32_t)side);
            hvx_zero(g + (r + 1) * rowbytes - side, (uint32_t)side);
        }
    }
}

struct wg_job {
    const struct dw_shape *s;
    const int8_t *err, *x;
    int groups_per_pass, accumulate;
    int32_t *part[DSPT_MAX_THREADS];
    int8_t *xq[DSPT_MAX_THREADS], *eq[DSPT_MAX_THREADS], *zeros[DSPT_MAX_THREADS];
    uint32_t zero_bytes;
    uint32_t xq_bytes;
};

/* A vector of the interleaved images: aligned (AL, C % 32 == 0) or not. */
static inline __attribute__((always_inline)) HVX_Vector wg_load(const int AL, const int8_t *p)
{
    return AL ? *(const HVX_Vector *)p : hvx_load_u(p);
}

/* part[t, c] (+)= the sums of channel block cb over the pass's positions; `add` when the
 * partial already holds sums. NT taps in registers (0: any count, sums in memory). */
static inline __attribute__((always_inline)) void wg_block(const int NT, const int AL, int32_t *part,
                                                           const struct dw_shape *s, const struct quad *xq,
                                                           const struct quad *eq, int ng, int cb, const int32_t *off,
                                                           int add)
{
    const int taps = NT ? NT : s->kh * s->kw;
    HVX_Vector acc[NT ? NT : WG_MAX_TAPS];
    for (int t = 0; t < taps; t++) acc[t] = Q6_V_vzero();
    const int S = s->stride, xrow = xq->cols * xq->pitch;
    for (int gi = 0; gi < ng; gi++)
        for (int oh = 0; oh < s->oh; oh++) {
            const int8_t *xr = xq->buf + (gi * xq->rows + oh * S) * xrow + cb * HVX_BYTES;
            const int8_t *er = eq->buf + ((gi * eq->rows + oh) * eq->cols) * eq->pitch + cb * HVX_BYTES;
#pragma clang loop unroll(disable)
            for (int ow = 0; ow < s->ow; ow++, xr += S * xq->pitch, er += eq->pitch) {
                HVX_Vector e = wg_load(AL, er);
                for (int t = 0; t < taps; t++) acc[t] = Q6_Vw_vrmpyacc_VwVbVb(acc[t], wg_load(AL, xr + off[t]), e);
            }
        }
    wg_store(part, s, acc, taps, cb, add);
}

/* The 9 taps of a 3 x 3 window (rows a, b, c; columns 0-2) met by one err vector: each
 * tap's accumulator gains one vrmpy (the stride-1 and stride-2 row loops share it). */
static inline __attribute__((always_inline)) void wg_taps3x3(HVX_Vector acc[9], HVX_Vector a0, HVX_Vector a1,
                                                             HVX_Vector a2, HVX_Vector b0, HVX_Vector b1,
                                                             HVX_Vector b2, HVX_Vector c0, HVX_Vector c1,
                                                             HVX_Vector c2, HVX_Vector e)
{
    /* plain vrmpy added with vadd: clang pairs two vrmpy in a packet, never two vrmpyacc */
    const HVX_Vector x[9] = {a0, a1, a2, b0, b1, b2, c0, c1, c2};
    for (int t = 0; t < 9; t++) acc[t] = Q6_Vw_vadd_VwVw(acc[t], Q6_Vw_vrmpy_VbVb(x[t], e));
}

/* wg_block for 3 x 3 at stride 1: along a row of outputs each x vector serves three taps
 * (column ow + j is tap j of ow, j - 1 of ow + 1, ...), so the three columns of each kernel
 * row stay in registers and only the new one is loaded: 4 loads for 9 vrmpy, not 10. */
static inline __attribute__((always_inline)) void wg_block3(const int AL, int32_t *part, const struct dw_shape *s,
                                                            const struct quad *xq, const struct quad *eq, int ng,
                                                            int cb, int add)
{
    HVX_Vector acc[9];
    for (int t = 0; t < 9; t++) acc[t] = Q6_V_vzero();
    const int P = xq->pitch, xrow = xq->cols * P, EP = eq->pitch, OH = s->oh, OW = s->ow;   /* in bytes */
    for (int gi = 0; gi < ng; gi++)
        for (int oh = 0; oh < OH; oh++) {
            const int8_t *x0 = xq->buf + (gi * xq->rows + oh) * xrow + cb * HVX_BYTES;
            const int8_t *x1 = x0 + xrow, *x2 = x1 + xrow;
            const int8_t *er = eq->buf + (gi * eq->rows + oh) * eq->cols * EP + cb * HVX_BYTES;
            HVX_Vector a0 = wg_load(AL, x0), a1 = wg_load(AL, x0 + P), b0 = wg_load(AL, x1), b1 = wg_load(AL, x1 + P);
            HVX_Vector c0 = wg_load(AL, x2), c1 = wg_load(AL, x2 + P);
#pragma clang loop unroll(disable) /* one vrmpy a packet either way; unrolled, the row's setup spills */
            for (int ow = 0; ow < OW; ow++, er += EP) {
                int next = (ow + 2) * P;
                HVX_Vector a2 = wg_load(AL, x0 + next), b2 = wg_load(AL, x1 + next), c2 = wg_load(AL, x2 + next);
                HVX_Vector e = wg_load(AL, er);
                wg_taps3x3(acc, a0, a1, a2, b0, b1, b2, c0, c1, c2, e);
                a0 = a1; a1 = a2; b0 = b1; b1 = b2; c0 = c1; c1 = c2;
            }
        }
    wg_store(part, s, acc, 9, cb, add);
}

/* wg_block for 3 x 3 at stride 2: output ow reads columns 2 ow .. 2 ow + 2, so column
 * 2 ow + 2 of each kernel row is column 0 of ow + 1 and stays in a register: 7 loads for
 * 9 vrmpy, not 10. */
static inline __attribute__((always_inline)) void wg_block3s2(const int AL, int32_t *part, const struct dw_shape *s,
                                                              const struct quad *xq, const struct quad *eq, int ng,
                                                              int cb, int add)
{
    HVX_Vector acc[9];
    for (int t = 0; t < 9; t++) acc[t] = Q6_V_vzero();
    const int P = xq->pitch, xrow = xq->cols * P, EP = eq->pitch, OH = s->oh, OW = s->ow;   /* in bytes */
    for (int gi = 0; gi < ng; gi++)
        for (int oh = 0; oh < OH; oh++) {
            const int8_t *x0 = xq->buf + (gi * xq->rows + 2 * oh) * xrow + cb * HVX_BYTES;
            const int8_t *x1 = x0 + xrow, *x2 = x1 + xrow;
            const int8_t *er = eq->buf + (gi * eq->rows + oh) * eq->cols * EP + cb * HVX_BYTES;
            HVX_Vector a0 = wg_load(AL, x0), b0 = wg_load(AL, x1), c0 = wg_load(AL, x2);
#pragma clang loop unroll(disable)
            for (int ow = 0; ow < OW; ow++, er += EP) {
                int mid = (2 * ow + 1) * P, next = mid + P;
                HVX_Vector a1 = wg_load(AL, x0 + mid), b1 = wg_load(AL, x1 + mid), c1 = wg_load(AL, x2 + mid);
                HVX_Vector a2 = wg_load(AL, x0 + next), b2 = wg_load(AL, x1 + next), c2 = wg_load(AL, x2 + next);
                HVX_Vector e = wg_load(AL, er);
                wg_taps3x3(acc, a0, a1, a2, b0, b1, b2, c0, c1, c2, e);
                a0 = a2; b0 = b2; c0 = c2;
            }
        }
    wg_store(part, s, acc, 9, cb, add);
}

/* The block's kernel: 3 x 3 at stride 1 or 2 as packets (dwconv_wgrad_rows.c) or reusing
 * columns, 9 or 25 taps in registers, or any. */
static inline __attribute__((always_inline)) void wg_pick(const int AL, int32_t *part, const struct dw_shape *s,
                                                          const struct quad *xq, const struct quad *eq, int ng, int cb,
                                                          const int32_t *off, int add)
{
    int taps = s->kh * s->kw;
    if (dspt_dw_wgrad_rows_fit(s)) dspt_dw_wgrad_rows(AL, part, s, xq, eq, ng, cb, add);
    else if (s->kh == 3 && s->kw == 3 && s->stride == 1) wg_block3(AL, part, s, xq, eq, ng, cb, add);
    else if (s->kh == 3 && s->kw == 3 && s->stride == 2) wg_block3s2(AL, part, s, xq, eq, ng, cb, add);
    else if (taps == 9) wg_block(9, AL, part, s, xq, eq, ng, cb, off, add);
    else if (taps == 25) wg_block(25, AL, part, s, xq, eq, ng, cb, off, add);
    else wg_block(0, AL, part, s, xq, eq, ng, cb, off, add);
}

static int wg_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct wg_job *J = job;
    const struct dw_shape *s = J->s;
    struct quad xq, eq;
    quad_init(&xq, s->h, s->w, s->pad, s->c);
    quad_init(&eq, s->oh, s->ow, 0, s->c);
    xq.buf = J->xq[t] + xq.lead;
    eq.buf = J->eq[t] + eq.lead;
    int lo, hi, groups = (s->n + 3) / 4;
    dspt_share(tc, groups, 1, t, &lo, &hi);
    if (lo >= hi) return DSPT_OK;
    quad_zero_border(&xq, J->groups_per_pass);
    hvx_zero(J->zeros[t], J->zero_bytes);
    int32_t off[WG_MAX_TAPS];
    for (int i = 0; i < s->kh; i++)
        for (int j = 0; j < s->kw; j++) off[i * s->kw + j] = (i * xq.cols + j) * xq.pitch;
    for (int g0 = lo; g0 < hi; g0 += J->groups_per_pass) {
        int ng = hi - g0 < J->groups_per_pass ? hi - g0 : J->groups_per_pass;
        quad_fill(&xq, J->x, s->n, s->h, s->w, s->c, 4 * g0, ng, J->zeros[t]);
        quad_fill(&eq, J->err, s->n, s->oh, s->ow, s->c, 4 * g0, ng, J->zeros[t]);
        int add = g0 > lo || (t == 0 && J->accumulate);
        for (int cb = 0; cb < xq.blocks; cb++) {
            if (s->c % 32 == 0) wg_pick(1, J->part[t], s, &xq, &eq, ng, cb, off, add);
            else wg_pick(0, J->part[t], s, &xq, &eq, ng, cb, off, add);
        }
    }
    return DSPT_OK;
}

int dspt_op_dwconv2d_bwd_weight(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    struct dw_shape s;
    if (d->dtype != DSPT_I8) return DSPT_NO_SUPPORT;
    /* in0 err (N, OH, OW, C), in1 x (N, H, W, C); out0 dw (KH, KW, C): shape_b is x here */
    s.n = d->shape_b[0]; s.h = d->shape_b[1]; s.w = d->shape_b[2]; s.c = d->shape_b[3];
    s.oh = d->shape_a[1]; s.ow = d->shape_a[2];
    s.kh = d->kernel_h; s.kw = d->kernel_w; s.stride = d->stride; s.pad = d->pad;
    if (s.n <= 0 || s.h <= 0 || s.w <= 0 || s.c <= 0 || s.kh <= 0 || s.kw <= 0 || s.stride <= 0 || s.pad < 0 ||
        d->shape_a[0] != s.n || d->shape_a[3] != s.c || s.oh != (s.h + 2 * s.pad - s.kh) / s.stride + 1 ||
        s.ow != (s.w + 2 * s.pad - s.kw) / s.stride + 1 || s.oh <= 0 || s.ow <= 0 ||
        d->shape_out[0] != s.kh || d->shape_out[1] != s.kw || d->shape_out[2] != s.c)
        return DSPT_BAD_PARAMS;
    int taps = s.kh * s.kw;
    if (taps > WG_MAX_TAPS) return DSPT_NO_SUPPORT;
    if ((int64_t)s.n * s.oh * s.ow * 127 * 127 >= ((int64_t)1 << 31)) return DSPT_NO_SUPPORT;
    const int8_t *err = dspt_at(ctx, d->in[0], dspt_count(d->shape_a));
    const int8_t *x = dspt_at(ctx, d->in[1], dspt_count(d->shape_b));
    uint32_t dw_words = (uint32_t)taps * s.c;
    int32_t *dw = dspt_at(ctx, d->out[0], dw_words * 4);
    if (!err || !x || !dw) return DSPT_BAD_PARAMS;
    if (dspt_dw_wgrad_pairs_fit(&s)) {
        d->result_shift = DSPT_PATH_DW_IMAGE_PAIRS;
        return dspt_dw_wgrad_pairs(ctx, &s, err, x, dw, (d->flags & DSPT_F_ACCUMULATE) != 0);
    }
    struct quad xq, eq;
    quad_init(&xq, s.h, s.w, s.pad, s.c);
    quad_init(&eq, s.oh, s.ow, 0, s.c);
    int groups = (s.n + 3) / 4, share = (groups + (int)ctx->threads - 1) / (int)ctx->threads;
    int gp = (int)(WG_CHUNK / (uint32_t)(xq.group_bytes + eq.group_bytes));
    if (gp < 1) gp = 1;
    if (gp > share) gp = share;
    struct wg_job J = {.s = &s, .err = err, .x = x, .groups_per_pass = gp,
                       .accumulate = (d->flags & DSPT_F_ACCUMULATE) != 0,
                       .xq_bytes = (uint32_t)gp * xq.group_bytes,
                       .zero_bytes = (uint32_t)(s.w > s.ow ? s.w : s.ow) * s.c + 2 * HVX_BYTES};
    for (int t = 0; t < (int)ctx->threads; t++) {   /* each thread's buffers, from its own scratch */
        struct dspt_ctx *tc = dspt_thread_ctx(ctx, t);
        if (!tc) return DSPT_NO_SUPPORT;
        J.xq[t] = dspt_scratch(tc, J.xq_bytes + (uint32_t)(xq.lead + WG_SLACK(&xq)));
        J.eq[t] = dspt_scratch(tc, (uint32_t)(gp * eq.group_bytes + eq.lead + WG_SLACK(&eq)));
        J.part[t] = t ? dspt_scratch(tc, dw_words * 4 + HVX_BYTES) : dw;
        J.zeros[t] = dspt_scratch(tc, J.zero_bytes);
        if (!J.xq[t] || !J.eq[t] || !J.part[t] || !J.zeros[t]) return DSPT_NO_SUPPORT;
    }
    d->result_shift = dspt_dw_wgrad_rows_fit(&s) ? DSPT_PATH_DW_IMAGE_ROWS : DSPT_PATH_DW_IMAGE_QUADS;
    int status = dspt_run_shares(ctx, wg_share, &J), shares = 0;
    for (int t = 0; t < (int)ctx->threads; t++) {   /* the threads that had work (idle ones come last) */
        int lo, hi;
        dspt_share(ctx, groups, 1, t, &lo, &hi);
        shares += lo < hi;
    }
    return status ? status : dspt_join_partials(ctx, dw, J.part, shares, dw_words);
}
