/* dwconv_bwd2_pairs.c: depthwise backward data of a 3 x 3 kernel at stride 2, padding 1,
 * onto an even image width, dx written as whole aligned vectors ("dw_err_pairs").
 *
 * As in dwconv_bwd2.c (the err quads), the four dx pixels (2m + a, 2n + b) of an anchor
 * (m, n) read only the err pixels (m + dy, n + dx), dy, dx in {0, 1}, at tap
 * (a + 1 - 2 dy, b + 1 - 2 dx): the phase decomposition of a strided transposed
 * convolution (each dx class meets its own 1, 2, 2 or 4 taps, no zeros inserted; as in
 * the sub-pixel / phase form of deconvolution, Shi et al., CVPR 2016). Three things
 * differ, all about the stores and loads around the products, since 4 int32 words a
 * MAC-and-a-quarter leave the stores (one a packet) as the bound:
 * - The two dx pixels 2n, 2n + 1 of a row are 2C consecutive words starting at 2nC: with
 *   C % 16 == 0 and the dx rows on a vector, they are C / 16 whole aligned vectors. So
 *   every store is one aligned vmem (it shares a packet with a load; an unaligned vmemu
 *   does not), and C = 144 needs 9 vectors a pixel pair, not two 128-channel blocks a
 *   pixel: pixel 2n takes channels 0..127 from the err block at channel 0, pixel 2n + 1
 *   channels 16..143 from the block at channel 16, and the vector between them (channels
 *   128..143 of one, 0..15 of the other) is one valign of the two.
 * - One call runs a thread's whole share with the weights of a channel unit in registers:
 *   with an even H as one loop over its anchors (ep_flat), with an odd H row by row
 *   (ep_row: the err slots go k = dy + 2 dx, so an err column's first vshuff stage is done
 *   once, not once an anchor). Either way the next anchor's words are built while this
 *   one's products are stored.
 * Work is split by images across the HVX threads (threads.h). At 96 channels (err rows of
 * 3 or more pixels, not accumulating) a share runs dwconv_bwd2_packets.c's rows written in
 * packets instead ("dw_err_packets"), with the weights built here; at 144 channels onto an
 * even H (err rows of 3 or more, not accumulating) dwconv_bwd2_144.c's two passes
 * ("dw_err_144") with these weights.
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "dwconv.h"
#include "threads.h"

#define EP_UNIT 16   /* weight vectors per channel unit: [dx row a][store vector v], 8 a row */
#define EP_U144 18   /* C = 144: one unit of 9 vectors a row */

struct ep_job {
    const struct dw_shape *s;
    const int8_t *err, *zeros;
    int32_t *dx;
    const HVX_Vector *wt;   /* per unit, in store order */
    int32_t *sink[DSPT_MAX_THREADS];   /* odd H: the last anchor row's missing dx row lands here */
    int accumulate;
    int packets;   /* 96 channels: the rows in packets (dwconv_bwd2_packets.c) */
    int two_pass;  /* 144 channels: the two passes of dwconv_bwd2_144.c */
    HVX_Vector *save[DSPT_MAX_THREADS];   /* two_pass: each thread's words from pass A */
};

int dspt_dw_err_pairs_fit(const struct dw_shape *s)
{
    return s->stride == 2 && s->kh == 3 && s->kw == 3 && s->pad == 1 && s->w % 2 == 0 &&
           ((s->c % 32 == 0 && s->c >= 64) || s->c == 144);
}

/* One err column's first vshuff stage: its rows m and m + 1 byte-interleaved. */
static inline HVX_VectorPair ep_column(const int8_t *e0, const int8_t *e1)
{
    return Q6_W_vshuff_VVR(hvx_load_u(e1), hvx_load_u(e0), -1);
}

/* The anchor's words from columns n (p) and n + 1 (q): x[g] lane l holds channel
 * 32 g + l of err (m, n), (m + 1, n), (m, n + 1), (m + 1, n + 1). */
static inline __attribute__((always_inline)) void ep_words(const int G, HVX_Vector x[4], HVX_VectorPair p,
                                                           HVX_VectorPair q)
{
    HVX_VectorPair lo = Q6_W_vshuff_VVR(Q6_V_lo_W(q), Q6_V_lo_W(p), -2);
    x[0] = Q6_V_lo_W(lo);
    x[1] = Q6_V_hi_W(lo);
    if (G > 2) {
        HVX_VectorPair hi = Q6_W_vshuff_VVR(Q6_V_hi_W(q), Q6_V_hi_W(p), -2);
        x[2] = Q6_V_lo_W(hi);
        x[3] = Q6_V_hi_W(hi);
    }
}

/* Store (or add) the product at an aligned dx vector. */
static inline __attribute__((always_inline)) void ep_put(const int ACC, int32_t *o, HVX_Vector r)
{
    HVX_Vector *v = (HVX_Vector *)o;
    *v = ACC ? Q6_Vw_vadd_VwVw(r, *v) : r;
}

/* A thread's images [lo, hi), one 128-channel unit at c0 of G groups (C % 32 == 0): each
 * anchor's 4 dx pixels x G aligned vectors; W[8 a + 4 b + g] the weights of dx pixel (a, b). */
/* One anchor row of a unit (odd H: the last row's second dx row is the sink): err rows e0,
 * e1 (or the zeros), dx rows d0, d1. An err column's first vshuff stage is reused by the
 * next anchor. restrict: the stores to dx do not reorder against the err loads. */
static inline __attribute__((always_inline)) void ep_row(const int G, const int ACC, const int8_t *__restrict e0,
                                                         const int8_t *__restrict e1, int32_t *__restrict d0,
                                                         int32_t *__restrict d1, int C, int OW,
                                                         const HVX_Vector W[16])
{
    const HVX_VectorPair zero = Q6_W_vcombine_VV(Q6_V_vzero(), Q6_V_vzero());
    HVX_VectorPair q = 1 < OW ? ep_column(e0 + C, e1 + C) : zero;
    HVX_Vector x[4];
    ep_words(G, x, ep_column(e0, e1), q);
    for (int n = 0; n < OW; n++) {
        /* software-pipelined: the next anchor's words (the column after next loaded, past
         * the last zero) while this one's products are stored */
        int far = n + 2 < OW ? (n + 2) * C : 0;
        HVX_VectorPair r = ep_column(e0 + far, e1 + far);
        if (n + 2 >= OW) r = zero;
        HVX_Vector xn[4];
        ep_words(G, xn, q, r);
        int32_t *o[4] = {d0 + 2 * n * C, d0 + (2 * n + 1) * C, d1 + 2 * n * C, d1 + (2 * n + 1) * C};
        for (int k = 0; k < 4; k++)
            for (int g = 0; g < G; g++) ep_put(ACC, o[k] + 32 * g, Q6_Vw_vrmpy_VbVb(x[g], W[4 * k + g]));
        for (int g = 0; g < G; g++) x[g] = xn[g];
        q = r;
    }
}

/* An even H: the share's anchors are its err pixels in order (anchor t is err pixel t), so
 * one loop runs them all, rows and images alike, with no row prologue (a row of 2 or 4
 * anchors had paid as much as its anchors). Each anchor loads its 4 err pixels (right and
 * bottom neighbours past the image: the zeros; the loop's selects are single ones, so
 * clang keeps it branch-free); the next anchor's words are built while this one's products
 * are stored. e, d: the share's err and dx at the unit's channel. */
struct ep_walk {
    const int8_t *e, *zeros;
    int C, OW, OH, W;
};

/* The 4 err pixels of anchor t, pixel i of its image, column n: slots dy + 2 dx. */
static inline __attribute__((always_inline)) void ep_pixels(const int CHAIN, const struct ep_walk *K, int t, int i,
                                                            int n, const int8_t *p[4])
{
    const int8_t *p00 = K->e + t * K->C;
    int right = n + 1 < K->OW, down = i < (K->OH - 1) * K->OW;
    p[0] = p00;
    p[1] = down ? p00 + K->OW * K->C : K->zeros;
    p[2] = right ? p00 + K->C : K->zeros;
    /* CHAIN: from p[1] (below the last row, C into the zeros): one select, no branch in
     * ep_flat's loop; ep_flat144 measured faster with both conditions */
    p[3] = CHAIN ? (right ? p[1] + K->C : K->zeros) : right && down ? p00 + (K->OW + 1) * K->C : K->zeros;
}

static inline __attribute__((always_inline)) void ep_flat(const int G, const int ACC, const struct ep_walk *K,
                                                          int32_t *__restrict d, int anchors, const HVX_Vector W[16])
{
    const int C = K->C, OW = K->OW, OH = K->OH;
    const int8_t *p[4];
    HVX_Vector x[4];
    ep_pixels(1, K, 0, 0, 0, p);
    dw_interleave4(x, hvx_load_u(p[0]), hvx_load_u(p[1]), hvx_load_u(p[2]), hvx_load_u(p[3]));
    int i = 0, n = 0;   /* anchor t's pixel in its image and column: single selects, no branch */
    for (int t = 0; t < anchors; t++) {
        int n1 = n + 1 == OW ? 0 : n + 1, i1 = i + 1 == OH * OW ? 0 : i + 1;
        int t1 = t + 1 < anchors ? t + 1 : t;   /* the last reloads itself: nothing past the share */
        ep_pixels(1, K, t1, i1, n1, p);
        HVX_Vector xn[4];
        dw_interleave4(xn, hvx_load_u(p[0]), hvx_load_u(p[1]), hvx_load_u(p[2]), hvx_load_u(p[3]));
        int32_t *o[4] = {d, d + C, d + K->W * C, d + K->W * C + C};
        for (int k = 0; k < 4; k++)
            for (int g = 0; g < G; g++) ep_put(ACC, o[k] + 32 * g, Q6_Vw_vrmpy_VbVb(x[g], W[4 * k + g]));
        for (int g = 0; g < G; g++) x[g] = xn[g];
        d += n1 ? 2 * C : (K->W + 2) * C;   /* a row's end skips the odd dx row */
        n = n1;
        i = i1;
    }
}

static inline __attribute__((always_inline)) void ep_flat144(const int ACC, const struct ep_walk *K,
                                                             int32_t *__restrict d, int anchors,
                                                             const HVX_Vector W[18])
{
    const int C = 144, OW = K->OW, OH = K->OH;
    const int8_t *p[4];
    int i = 0, n = 0;
    for (int t = 0; t < anchors; t++) {
        ep_pixels(0, K, t, i, n, p);
        HVX_Vector x[9];
        dw_interleave4(x, hvx_load_u(p[0]), hvx_load_u(p[1]), hvx_load_u(p[2]), hvx_load_u(p[3]));
        dw_interleave4(x + 5, hvx_load_u(p[0] + 16), hvx_load_u(p[1] + 16), hvx_load_u(p[2] + 16),
                       hvx_load_u(p[3] + 16));
        x[4] = Q6_V_valign_VVR(x[0], x[8], 64);
        int32_t *d1 = d + K->W * C;
        for (int v = 0; v < 9; v++) ep_put(ACC, d + 32 * v, Q6_Vw_vrmpy_VbVb(x[v], W[v]));
        for (int v = 0; v < 9; v++) ep_put(ACC, d1 + 32 * v, Q6_Vw_vrmpy_VbVb(x[v], W[9 + v]));
        n = n + 1 == OW ? 0 : n + 1;
        i = i + 1 == OH * OW ? 0 : i + 1;
        d += n ? 2 * C : (K->W + 2) * C;
    }
}

static inline __attribute__((always_inline)) void ep_block(const int G, const int ACC, const struct ep_job *J,
                                                           int lo, int hi, int c0, const HVX_Vector *wt,
                                                           int32_t *sink)
{
    const struct dw_shape *s = J->s;
    const int C = s->c, OW = s->ow, OH = s->oh, AH = (s->h + 1) / 2;
    HVX_Vector W[16];
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int g = 0; g < G; g++) W[8 * a + 4 * b + g] = wt[8 * a + 4 * b + g];
    if (s->h % 2 == 0) {
        struct ep_walk K = {J->err + (size_t)lo * OH * OW * C + c0, J->zeros, C, OW, OH, s->w};
        ep_flat(G, ACC, &K, J->dx + (size_t)lo * s->h * s->w * C + c0, (hi - lo) * OH * OW, W);
        return;
    }
    for (int img = lo; img < hi; img++) {
        const int8_t *err = J->err + (size_t)img * OH * OW * C + c0;
        int32_t *dx = J->dx + (size_t)img * s->h * s->w * C + c0;
        for (int m = 0; m < AH; m++) {
            const int8_t *e0 = err + m * OW * C, *e1 = m + 1 < OH ? e0 + OW * C : J->zeros;
            int32_t *d0 = dx + 2 * m * s->w * C, *d1 = 2 * m + 1 < s->h ? d0 + s->w * C : sink;
            ep_row(G, ACC, e0, e1, d0, d1, C, OW, W);
        }
    }
}

/* C = 144 as one unit: pixel 2n from the err block at channel 0 (A), 2n + 1 from the
 * block at channel 16 (B), the vector between them one valign; W[9 a + v] store order. */
static inline __attribute__((always_inline)) void ep_row144(const int ACC, const int8_t *__restrict e0,
                                                            const int8_t *__restrict e1, int32_t *__restrict d0,
                                                            int32_t *__restrict d1, int OW, const HVX_Vector W[18])
{
    const int C = 144;
    const HVX_VectorPair zero = Q6_W_vcombine_VV(Q6_V_vzero(), Q6_V_vzero());
    HVX_VectorPair pa = ep_column(e0, e1), pb = ep_column(e0 + 16, e1 + 16);
    HVX_VectorPair qa = zero, qb = zero;
    if (1 < OW) {
        qa = ep_column(e0 + C, e1 + C);
        qb = ep_column(e0 + C + 16, e1 + C + 16);
    }
    for (int n = 0; n < OW; n++) {
        int far = n + 2 < OW ? (n + 2) * C : 0;
        HVX_VectorPair ra = ep_column(e0 + far, e1 + far), rb = ep_column(e0 + far + 16, e1 + far + 16);
        if (n + 2 >= OW) ra = rb = zero;
        HVX_Vector x[9];
        ep_words(4, x, pa, qa);
        ep_words(4, x + 5, pb, qb);
        x[4] = Q6_V_valign_VVR(x[0], x[8], 64);   /* A's channels 128..143 = B's words 16..31, then A's 0..15 */
        int32_t *o0 = d0 + 2 * n * C, *o1 = d1 + 2 * n * C;
        for (int v = 0; v < 9; v++) ep_put(ACC, o0 + 32 * v, Q6_Vw_vrmpy_VbVb(x[v], W[v]));
        for (int v = 0; v < 9; v++) ep_put(ACC, o1 + 32 * v, Q6_Vw_vrmpy_VbVb(x[v], W[9 + v]));
        pa = qa;
        pb = qb;
        qa = ra;
        qb = rb;
    }
}

/* C = 144 as one unit: pixel 2n from the err block at channel 0 (A), 2n + 1 from the
 * block at channel 16 (B), the vector between them one valign; W[9 a + v] store order. */
static inline __attribute__((always_inline)) void ep_144(const int ACC, const struct ep_job *J, int lo, int hi,
                                                         int32_t *sink)
{
    const struct dw_shape *s = J->s;
    const int C = 144, OW = s->ow, OH = s->oh, AH = (s->h + 1) / 2;
    HVX_Vector W[EP_U144];
    for (int k = 0; k < EP_U144; k++) W[k] = J->wt[k];
    if (s->h % 2 == 0) {
        struct ep_walk K = {J->err + (size_t)lo * OH * OW * C, J->zeros, C, OW, OH, s->w};
        ep_flat144(ACC, &K, J->dx + (size_t)lo * s->h * s->w * C, (hi - lo) * OH * OW, W);
        return;
    }
    for (int img = lo; img < hi; img++) {
        const int8_t *err = J->err + (size_t)img * OH * OW * C;
        int32_t *dx = J->dx + (size_t)img * s->h * s->w * C;
        for (int m = 0; m < AH; m++) {
            const int8_t *e0 = err + m * OW * C, *e1 = m + 1 < OH ? e0 + OW * C : J->zeros;
            int32_t *d0 = dx + 2 * m * s->w * C, *d1 = 2 * m + 1 < s->h ? d0 + s->w * C : sink;
            ep_row144(ACC, e0, e1, d0, d1, OW, W);
        }
    }
}

/* Each unit shape its own function: one register allocation each. */
#define BLOCK_FN(G, ACC)                                                                                      \
    static __attribute__((noinline)) void ep_block_##G##_##ACC(const struct ep_job *J, int lo, int hi, int c0, \
                                                               const HVX_Vector *wt, int32_t *sink)          \
    {                                                                                                         \
        ep_block(G, ACC, J, lo, hi, c0, wt, sink);                                                            \
    }
BLOCK_FN(1, 0)
BLOCK_FN(2, 0)
BLOCK_FN(3, 0)
BLOCK_FN(4, 0)
BLOCK_FN(1, 1)
BLOCK_FN(2, 1)
BLOCK_FN(3, 1)
BLOCK_FN(4, 1)
static __attribute__((noinline)) void ep_144_0(const struct ep_job *J, int lo, int hi, int32_t *sink)
{
    ep_144(0, J, lo, hi, sink);
}
static __attribute__((noinline)) void ep_144_1(const struct ep_job *J, int lo, int hi, int32_t *sink)
{
    ep_144(1, J, lo, hi, sink);
}

static int ep_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct ep_job *J = job;
    const struct dw_shape *s = J->s;
    int lo, hi;
    dspt_share(tc, s->n, 1, t, &lo, &hi);
    if (lo >= hi) return DSPT_OK;
    if (J->packets) {
        dspt_dw_err_packets(s, J->err, J->zeros, J->wt, J->dx, J->sink[t], lo, hi);
        return DSPT_OK;
    }
    if (J->two_pass) {
        dspt_dw_err_144(s, J->err, J->zeros, J->wt, J->dx, J->save[t], lo, hi);
        return DSPT_OK;
    }
    if (s->c == 144) {
        if (J->accumulate) ep_144_1(J, lo, hi, J->sink[t]);
        else ep_144_0(J, lo, hi, J->sink[t]);
        return DSPT_OK;
    }
    /* C % 32 == 0: 128-channel units, the last of (C % 128) / 32 groups (lanes past C unused) */
    for (int cb = 0; cb * HVX_BYTES < s->c; cb++) {
        int c0 = cb * HVX_BYTES, g = (s->c - c0) / 32 < 4 ? (s->c - c0) / 32 : 4;
        const HVX_Vector *wt = J->wt + EP_UNIT * cb;
        if (J->accumulate) {
            if (g == 4) ep_block_4_1(J, lo, hi, c0, wt, J->sink[t]);
            else if (g == 3) ep_block_3_1(J, lo, hi, c0, wt, J->sink[t]);
            else if (g == 2) ep_block_2_1(J, lo, hi, c0, wt, J->sink[t]);
            else ep_block_1_1(J, lo, hi, c0, wt, J->sink[t]);
        } else {
            if (g == 4) ep_block_4_0(J, lo, hi, c0, wt, J->sink[t]);
            else if (g == 3) ep_block_3_0(J, lo, hi, c0, wt, J->sink[t]);
            else if (g == 2) ep_block_2_0(J, lo, hi, c0, wt, J->sink[t]);
            else ep_block_1_0(J, lo, hi, c0, wt, J->sink[t]);
        }
    }
    return DSPT_OK;
}

/* The interleaved weights of dx pixel (a, b), the 128 channels at c0: slot k = dy + 2 dx
 * holds tap (a + 1 - 2 dy, b + 1 - 2 dx), zero where that is outside the kernel. */
static void ep_weights(const int8_t *w, int C, int a, int b, int c0, HVX_Vector q[4])
{
    HVX_Vector t[4];
    for (int dy = 0; dy < 2; dy++)
        for (int dxx = 0; dxx < 2; dxx++) {
            int i = a + 1 - 2 * dy, j = b + 1 - 2 * dxx;
            t[dy + 2 * dxx] = i < 0 || j < 0 ? Q6_V_vzero() : hvx_load_u(w + (i * 3 + j) * C + c0);
        }
    dw_interleave4(q, t[0], t[1], t[2], t[3]);
}

int dspt_dw_err_pairs(struct dspt_ctx *ctx, const struct dw_shape *s, const int8_t *err, const int8_t *w, int32_t *dx,
                      int accumulate)
{
    const int C = s->c, units = (C + HVX_BYTES - 1) / HVX_BYTES;
    /* dw_err_144's pass B reads a row past its chunk from the zeros at OW C in */
    int two_pass = dspt_dw_err_144_fit(s, accumulate);
    uint32_t zero_bytes = (uint32_t)(s->ow + 1 + two_pass) * C + (1 + two_pass) * HVX_BYTES;
    HVX_Vector *wt = dspt_scratch(ctx, (uint32_t)(C == 144 ? EP_U144 : units * EP_UNIT) * HVX_BYTES);
    int8_t *zeros = dspt_scratch(ctx, zero_bytes);
    if (!wt || !zeros) return DSPT_NO_SUPPORT;
    struct ep_job J = {.s = s, .err = err, .zeros = zeros, .dx = dx, .wt = wt, .accumulate = accumulate,
                       .packets = dspt_dw_err_packets_fit(s, accumulate),
                       .two_pass = two_pass};
    uint32_t save_bytes = (uint32_t)((s->ow > DW_ERR144_SAVE ? s->ow : DW_ERR144_SAVE) + 1) * HVX_BYTES;   /* pass B reads one past */
    for (int t = 0; t < (int)ctx->threads; t++) {   /* carved before anything is written */
        struct dspt_ctx *tc = s->h % 2 ? dspt_thread_ctx(ctx, t) : 0;
        J.sink[t] = tc ? dspt_scratch(tc, (uint32_t)s->w * C * 4) : 0;
        if (s->h % 2 && !J.sink[t]) return DSPT_NO_SUPPORT;
    }
    for (int t = 0; t < (int)ctx->threads && J.two_pass; t++) {
        struct dspt_ctx *tc = dspt_thread_ctx(ctx, t);
        J.save[t] = tc ? dspt_scratch(tc, save_bytes) : 0;
        if (!J.save[t]) return DSPT_NO_SUPPORT;
    }
    hvx_zero(zeros, zero_bytes);
    for (int a = 0; a < 2; a++) {
        if (C == 144) {
            HVX_Vector A0[4], A1[4], B0[4], B1[4];
            ep_weights(w, C, a, 0, 0, A0);
            ep_weights(w, C, a, 1, 0, A1);
            ep_weights(w, C, a, 0, 16, B0);
            ep_weights(w, C, a, 1, 16, B1);
            HVX_Vector *r = wt + 9 * a;
            for (int g = 0; g < 4; g++) {
                r[g] = A0[g];       /* pixel 2n, channels 32 g .. */
                r[5 + g] = B1[g];   /* pixel 2n + 1, channels 16 + 32 g .. */
            }
            r[4] = Q6_V_valign_VVR(A1[0], B0[3], 64);   /* 2n's channels 128..143, then 2n + 1's 0..15 */
            continue;
        }
        for (int u = 0; u < units; u++)
            for (int b = 0; b < 2; b++) ep_weights(w, C, a, b, u * HVX_BYTES, wt + EP_UNIT * u + 8 * a + 4 * b);
    }
    return dspt_run_shares(ctx, ep_share, &J);
}
