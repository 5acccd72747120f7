/* conv.c: the three convolutions of training, each lowered to the vrmpy GEMM core.
 *
 * forward      y[p, o]   = cols(x)[p, :] . w[o, :]          (im2col rows, chunked)
 * bwd data     dx[q, c]  = gather(err)[q, :] . wT[c, :]     (transposed conv as a gather)
 * bwd weight   dw[o, j]  = sum_p err[p, o] * cols(x)[p, j]  (reduction over p, chunked)
 * Layouts: NHWC, w (O, KH, KW, C). Chunks of im2col rows stay within DSPT_CHUNK bytes
 * per thread (chunk_rows). Each op splits its rows (forward,
 * bwd data) or its reduction (bwd weight) across the descriptor's HVX threads, each
 * share on its own worker thread with its own buffers (threads.h).
 * Operands are packed with vector moves: rows transposed 32 x 32 words (gemm.c), or
 * four rows interleaved byte by byte into vrmpy's 4-byte groups (hvx_interleave4b).
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "conv.h"
#include "conv_common.h"
#include "threads.h"

#define DSPT_CHUNK (256u * 1024u)

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

/* A product's status, with the path it took in result_shift (enum dspt_path: the tests pin
 * each shape's path with it, DspBackend.last_paths). */
static int took(struct dspt_op_desc *d, enum dspt_path path, int status)
{
    d->result_shift = path;
    return status;
}

/* Rows per chunk of one thread: DSPT_CHUNK bytes (a quarter of the v66's 1 MiB L2, or
 * its whole VTCM), a multiple of 4, at least 4. Long chunks keep the GEMM's tiles long:
 * a tile's fixed cost (16 accumulators set and stored) is paid once per chunk. */
static int chunk_rows(const struct dspt_ctx *ctx, int row_bytes)
{
    (void)ctx;
    int rows = (int)(DSPT_CHUNK / (uint32_t)row_bytes) & ~3;
    return rows < 4 ? 4 : rows;
}

/* Copy / zero n bytes at d, moving whole unaligned vectors: up to 127 bytes past d + n
 * are clobbered and past src + n read. im2col and the gather fill a row in increasing
 * address order, so the next write puts those bytes right; their buffers keep HVX_BYTES
 * of slack at the end, and so does the host's arena (dsp_arena.py). */
static inline void copy_over(int8_t *d, const int8_t *src, int n)
{
    if (__builtin_expect(n <= HVX_BYTES, 1)) {   /* one window row: the common case */
        hvx_store_u(d, hvx_load_u(src));
        return;
    }
#pragma clang loop unroll(disable)
    for (int i = 0; i < n; i += HVX_BYTES)
        hvx_store_u(d + i, hvx_load_bytes(src + i, (uint32_t)(n - i < HVX_BYTES ? n - i : HVX_BYTES)));
}

static inline void zero_over(int8_t *d, int n)
{
#pragma clang loop unroll(disable)
    for (int i = 0; i < n; i += HVX_BYTES) hvx_store_u(d + i, Q6_V_vzero());
}

/* The input image conv windows read: x's image n itself without padding, else a copy
 * with `pad` zero rows and columns around it in `buf` (hp x wp x c bytes + slack), so
 * every window row is one copy with no bounds to test. */
struct padded {
    int8_t *buf;
    int n, hp, wp;
    const int8_t *img;
};

static const int8_t *image(struct padded *pd, const int8_t *x, const struct conv_shape *s, int n)
{
    if (n == pd->n) return pd->img;
    pd->n = n;
    const int8_t *src = x + (size_t)n * s->h * s->w * s->c;
    if (s->pad == 0) return pd->img = src;
    int row = s->w * s->c, prow = pd->wp * s->c;
    hvx_zero(pd->buf, (uint32_t)(pd->hp * prow));
    for (int h = 0; h < s->h; h++)
        hvx_copy(pd->buf + ((h + s->pad) * pd->wp + s->pad) * s->c, src + h * row, (uint32_t)row);
    return pd->img = pd->buf;
}

static int8_t *padded_buffer(struct dspt_ctx *ctx, const struct conv_shape *s, struct padded *pd)
{
    pd->n = -1;
    pd->hp = s->h + 2 * s->pad;
    pd->wp = s->w + 2 * s->pad;
    pd->buf = s->pad ? dspt_scratch(ctx, (uint32_t)(pd->hp * pd->wp * s->c) + HVX_BYTES) : 0;
    return s->pad && !pd->buf ? 0 : (int8_t *)1;
}

/* im2col rows p0 .. p0+rows-1 (p = (n, oh, ow)) into dst at row stride ldd bytes,
 * columns (kh, kw, c) like the weights: one copy per kernel row. */
/* The row loop of im2col for kernel height KH (a constant where the caller makes it one),
 * each window row one vector (kc <= 128) or, with KH == 0, any height and width. */
static inline __attribute__((always_inline)) void im2col_rows(
    const int KH, int8_t *dst, int ldd, const int8_t *x, const struct conv_shape *s, int p0, int rows,
    struct padded *pd)
{
    /* locals, not s->: every vector store may alias the shape and would reload it */
    const int kh = KH ? KH : s->kh, kc = s->kw * s->c, step = s->stride * s->c, prow = pd->wp * s->c;
    const int OW = s->ow, OH = s->oh, N = s->n, rstep = s->stride * prow;
    /* divide once, then step (n, oh, ow): Hexagon divides in software */
    int ow = p0 % OW, oh = (p0 / OW) % OH, n = p0 / (OW * OH);
    const int8_t *img = image(pd, x, s, n), *win = img + oh * rstep + ow * step;
    for (int r = 0; r < rows; r++) {
        int8_t *row = dst + r * ldd;
        if (KH) {   /* all loads, then the stores in address order */
            HVX_Vector v[KH ? KH : 1];
            for (int i = 0; i < KH; i++) v[i] = hvx_load_u(win + i * prow);
            for (int i = 0; i < KH; i++) hvx_store_u(row + i * kc, v[i]);
        } else {
            for (int i = 0; i < kh; i++) copy_over(row + i * kc, win + i * prow, kc);
        }
        if (++ow < OW) { win += step; continue; }
        ow = 0;
        if (++oh == OH) {
            oh = 0;
            if (++n >= N) break;   /* the last row of the last image */
            img = image(pd, x, s, n);
        }
        win = img + oh * rstep;
    }
}

/* im2col rows p0 .. p0+rows-1 (p = (n, oh, ow)) into dst at row stride ldd bytes,
 * columns (kh, kw, c) like the weights: one vector copy per kernel row. */
static void im2col(int8_t *dst, int ldd, const int8_t *x, const struct conv_shape *s, int p0,
                   int rows, struct padded *pd)
{
    int one_vector = s->kw * s->c <= HVX_BYTES;
    if (one_vector && s->kh == 5) im2col_rows(5, dst, ldd, x, s, p0, rows, pd);
    else if (one_vector && s->kh == 3) im2col_rows(3, dst, ldd, x, s, p0, rows, pd);
    else if (one_vector && s->kh == 1) im2col_rows(1, dst, ldd, x, s, p0, rows, pd);
    else im2col_rows(0, dst, ldd, x, s, p0, rows, pd);
}

/* Rows of im2col(x) (or of gathered err) times packed b: one HVX thread's share (threads.h)
 * runs its rows [lo, hi) in chunks through its own chunk buffer and padded image. */
struct rows_job {
    int32_t *y;
    const int8_t *x;
    const struct conv_shape *s;
    const int8_t *bp;
    int k, acc, rows;
    int8_t *cols[DSPT_MAX_THREADS];
    struct padded pd[DSPT_MAX_THREADS];
};

/* Each thread's chunk buffer (and padded image: pad) from its own scratch, before any
 * share runs; 0 when one does not fit. */
static int thread_buffers(struct dspt_ctx *ctx, struct rows_job *j, uint32_t cols_bytes, int pad)
{
    for (int t = 0; t < (int)ctx->threads; t++) {
        struct dspt_ctx *tc = dspt_thread_ctx(ctx, t);
        j->cols[t] = tc ? dspt_scratch(tc, cols_bytes) : 0;
        if (!j->cols[t] || (pad && !padded_buffer(tc, j->s, &j->pd[t]))) return 0;
    }
    return 1;
}

static int conv_rows_share(struct dspt_ctx *tc, int t, void *job)
{
    struct rows_job *j = job;
    const struct conv_shape *s = j->s;
    int ldk = (j->k + 3) & ~3, p = s->n * s->oh * s->ow, lo, hi;
    dspt_share(tc, p, 4, t, &lo, &hi);   /* thread t: output rows [lo, hi) */
    for (int p0 = lo; p0 < hi; p0 += j->rows) {
        int r = hi - p0 < j->rows ? hi - p0 : j->rows;
        im2col(j->cols[t], ldk, j->x, s, p0, r, &j->pd[t]);
        dspt_gemm_core(j->y + p0 * s->o, s->o, j->cols[t], ldk, j->bp, r, s->o, j->k, j->acc);
    }
    return DSPT_OK;
}

/* A pointwise conv (1 x 1, stride 1, no padding) is a GEMM of the image's pixels as they
 * lie (rows of C bytes, C % 4 == 0): no im2col copy. */
static int pointwise_share(struct dspt_ctx *tc, int t, void *job)
{
    struct rows_job *j = job;
    int p = j->s->n * j->s->oh * j->s->ow, lo, hi;
    dspt_share(tc, p, 4, t, &lo, &hi);
    if (lo < hi)
        dspt_gemm_core(j->y + lo * j->s->o, j->s->o, j->x + lo * j->k, j->k, j->bp, hi - lo, j->s->o, j->k, j->acc);
    return DSPT_OK;
}

static int pointwise_fits(const struct conv_shape *s)
{
    return s->kh == 1 && s->kw == 1 && s->stride == 1 && s->pad == 0 && s->c % 4 == 0;
}

/* y[p, :] (+)= im2col(x)[p, :] . packed b, rows split across the HVX threads. */
static int conv_rows(struct dspt_ctx *ctx, int32_t *y, const int8_t *x, const struct conv_shape *s,
                     const int8_t *bp, int k, int acc)
{
    int ldk = (k + 3) & ~3;
    struct rows_job j = {.y = y, .x = x, .s = s, .bp = bp, .k = k, .acc = acc, .rows = chunk_rows(ctx, ldk)};
    if (!thread_buffers(ctx, &j, (uint32_t)j.rows * ldk + HVX_BYTES, 1)) return DSPT_NO_SUPPORT;
    return dspt_run_shares(ctx, conv_rows_share, &j);
}

int dspt_op_conv2d(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    struct conv_shape s;
    if (d->dtype != DSPT_I8) return DSPT_NO_SUPPORT;
    int st = conv_shape(d, d->shape_a, d->shape_out, &s);
    if (st) return st;
    if (d->shape_b[0] != s.o || d->shape_b[1] != s.kh || d->shape_b[2] != s.kw || d->shape_b[3] != s.c)
        return DSPT_BAD_PARAMS;
    int k = s.kh * s.kw * s.c, p = s.n * s.oh * s.ow;
    if (too_deep(k)) return DSPT_NO_SUPPORT;
    const int8_t *x = dspt_at(ctx, d->in[0], dspt_count(d->shape_a));
    const int8_t *w = dspt_at(ctx, d->in[1], dspt_count(d->shape_b));
    int32_t *y = dspt_at(ctx, d->out[0], (uint32_t)p * s.o * 4);
    if (!x || !w || !y) return DSPT_BAD_PARAMS;
    int acc = (d->flags & DSPT_F_ACCUMULATE) != 0;
    if (dspt_conv_taps_fits(&s))   /* one input channel, 4 to 7 outputs: pixels x channels in the lanes */
        return took(d, DSPT_PATH_CONV_TAPS, dspt_conv_taps(ctx, y, x, w, &s, acc));
    if (dspt_conv_lanes_fits(&s))   /* one input channel: output pixels in the lanes */
        return took(d, DSPT_PATH_CONV_LANES, dspt_conv_lanes(ctx, y, x, w, &s, acc));
    if (dspt_conv_grid_fits(&s))   /* 2 to 16 input channels: grid positions in the lanes */
        return took(d, DSPT_PATH_CONV_GRID, dspt_conv_grid(ctx, y, x, w, &s, acc));
    if (dspt_conv_padded_fits(&s))   /* 2 to 4 channels, many outputs: the padded image read in place */
        return took(d, DSPT_PATH_CONV_PADDED, dspt_conv_padded(ctx, y, x, w, &s, acc));
    if (pointwise_fits(&s) && dspt_pointwise_pixels_fits(s.o, k, p)) {   /* 16 outputs: pixels in the lanes */
        int8_t *wm = dspt_scratch(ctx, (uint32_t)s.o * k);   /* word-aligned rows for the GEMM's scalar loads */
        if (!wm) return DSPT_NO_SUPPORT;
        hvx_copy(wm, w, (uint32_t)s.o * k);
        return took(d, DSPT_PATH_POINTWISE_PIXELS, dspt_pointwise_pixels(ctx, y, x, wm, p, k, acc));
    }
    int8_t *bp = dspt_scratch(ctx, dspt_packed_b_bytes(s.o, k));
    if (!bp) return DSPT_NO_SUPPORT;
    dspt_pack_b(bp, w, s.o, k, k);
    if (pointwise_fits(&s)) {
        struct rows_job j = {.y = y, .x = x, .s = &s, .bp = bp, .k = k, .acc = acc};
        return took(d, DSPT_PATH_POINTWISE, dspt_run_shares(ctx, pointwise_share, &j));
    }
    return took(d, DSPT_PATH_IM2COL_GEMM, conv_rows(ctx, y, x, &s, bp, k, acc));
}

/* Transposed conv without flipping: input pixel (h, w) gets err[oh, ow] through tap
 * (kh, kw) when h + pad - kh = oh * stride, so each dx row gathers err vectors, one
 * segment of o4 = round_up(O, 4) bytes per tap (zeros off the grid). */
static void gather_err(int8_t *dst, int ldd, const int8_t *err, const struct conv_shape *s,
                       int o4, int q0, int rows)
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
                int8_t *seg = row + (i * s->kw + j) * o4;
                /* bytes o .. o4 of a segment may hold anything: wT is zero there */
                if (hok && tw >= 0 && (one || tw % s->stride == 0) && ow < s->ow)
                    copy_over(seg, err + ((n * s->oh + oh) * s->ow + ow) * s->o, s->o);
                else
                    zero_over(seg, o4);
            }
        }
    }
}

/* Packed wT for bwd data (biased, 1s lane: kernels.h): lanes c, reduction (tap, o) with o
 * padded to o4: the 4 bytes of word (t, g) of lane c are w[4g + i, t', c] (t' = t, or the
 * flipped tap taps-1-t), four rows of w interleaved. A unit (channel quad, tap, group) loads
 * the 4 rows over 128 channels and interleaves them bytewise then by halfwords (4 vshuff,
 * both halves of each pair kept): words (t, g) of 4 blocks from 4 loads. Taking one block's
 * 32 channels from the 4 loads (its low quarter) spent ~22 packets a vector, a third of
 * MobileNetV2's 1 x 1 backward data at 1 x 1 and 2 x 2. Units [lo, hi), g fastest. */
/* n groups of pack_wt's whole channel quads: 4 rows of w over 128 channels, 4 blocks'
 * words. Unaligned loads and vshuff share HVX's permute slot (8 a group); pipelined by hand
 * so group g's 4 stores ride in group g + 1's load packets; nothing past group n - 1 is read. */
static __attribute__((noinline)) void wt_quads(HVX_Vector *restrict o, const int8_t *restrict src, size_t row,
                                               size_t block, int n)
{
    HVX_Vector bias = Q6_V_vsplat_R((int)0x80808080u), x0, x1, x2, x3;
#define SHUFFLED(r0, r1, r2, r3) do { \
        HVX_VectorPair p01 = Q6_W_vshuff_VVR(r1, r0, -1), p23 = Q6_W_vshuff_VVR(r3, r2, -1); \
        HVX_VectorPair q0 = Q6_W_vshuff_VVR(Q6_V_lo_W(p23), Q6_V_lo_W(p01), -2); \
        HVX_VectorPair q1 = Q6_W_vshuff_VVR(Q6_V_hi_W(p23), Q6_V_hi_W(p01), -2); \
        x0 = Q6_V_vxor_VV(Q6_V_lo_W(q0), bias); x1 = Q6_V_vxor_VV(Q6_V_hi_W(q0), bias); \
        x2 = Q6_V_vxor_VV(Q6_V_lo_W(q1), bias); x3 = Q6_V_vxor_VV(Q6_V_hi_W(q1), bias); \
    } while (0)
#define STORE(g) do { \
        o[g] = x0; o[(g) + block] = x1; o[(g) + 2 * block] = x2; o[(g) + 3 * block] = x3; \
    } while (0)
    SHUFFLED(hvx_load_u(src), hvx_load_u(src + row), hvx_load_u(src + 2 * row), hvx_load_u(src + 3 * row));
    for (int g = 1; g < n; g++) {
        src += 4 * row;
        HVX_Vector r0 = hvx_load_u(src), r1 = hvx_load_u(src + row), r2 = hvx_load_u(src + 2 * row),
                   r3 = hvx_load_u(src + 3 * row);
        STORE(g - 1);
        SHUFFLED(r0, r1, r2, r3);
    }
    STORE(n - 1);
#undef SHUFFLED
#undef STORE
}

static inline HVX_Vector wt_block(HVX_Vector v, HVX_Vector bias, int lanes)
{
    HVX_Vector x = Q6_V_vxor_VV(v, bias);
    return lanes < 32 ? dspt_ones_lane(x, lanes) : x;   /* lanes past it: unused columns */
}

static void pack_wt(int8_t *bp, const int8_t *w, const struct conv_shape *s, int o4, int flip, int lo, int hi)
{
    const int taps = s->kh * s->kw, groups = o4 / 4, C = s->c, nblocks = (C + 31) / 32, whole = s->o / 4;
    const size_t row = (size_t)taps * C, block = (size_t)taps * groups;   /* w[o] to w[o + 1]; bp's blocks */
    HVX_Vector bias = Q6_V_vsplat_R((int)0x80808080u);
    int g = lo % groups, t = lo / groups % taps, cq = lo / (groups * taps);   /* divide once, then step */
    for (int u = lo; u < hi; g = 0, t = t + 1 == taps ? 0 : t + 1, cq += t == 0) {
        int g_end = groups - g < hi - u ? groups : g + hi - u;   /* this (quad, tap)'s groups in the share */
        const int8_t *src = w + (flip ? taps - 1 - t : t) * C + cq * 128 + (size_t)4 * g * row;
        HVX_Vector *o = (HVX_Vector *)bp + ((size_t)4 * cq * taps + t) * groups + g;   /* block 4cq, word (t, g) */
        int blocks = nblocks - 4 * cq < 4 ? nblocks - 4 * cq : 4, full = C - cq * 128 >= 128;
        u += g_end - g;
        if (full) {   /* 128 channels of 4 rows of w */
            int n = (g_end < whole ? g_end : whole) - g;
            if (n > 0) {
                wt_quads(o, src, row, block, n);
                g += n, src += 4 * n * row, o += n;
            }
        }
        for (; g < g_end; g++, src += 4 * row, o++) {   /* a ragged quad of channels, rows past O */
            HVX_Vector r[4];
            for (int i = 0; i < 4; i++)   /* rows past O: zeros (wT's padding to o4) */
                r[i] = 4 * g + i < s->o ? hvx_load_u(src + i * row) : Q6_V_vzero();
            HVX_VectorPair p01 = Q6_W_vshuff_VVR(r[1], r[0], -1), p23 = Q6_W_vshuff_VVR(r[3], r[2], -1);
            HVX_VectorPair q0 = Q6_W_vshuff_VVR(Q6_V_lo_W(p23), Q6_V_lo_W(p01), -2);
            HVX_VectorPair q1 = Q6_W_vshuff_VVR(Q6_V_hi_W(p23), Q6_V_hi_W(p01), -2);
            HVX_Vector v[4] = {Q6_V_lo_W(q0), Q6_V_hi_W(q0), Q6_V_lo_W(q1), Q6_V_hi_W(q1)};
            for (int j = 0; j < blocks; j++) o[j * block] = wt_block(v[j], bias, C - (4 * cq + j) * 32);
        }
    }
}

/* pack_wt split across the HVX threads by (channel quad, tap, group) (threads.h). */
struct pack_job {
    int8_t *bp;
    const int8_t *w;
    const struct conv_shape *s;
    int o4, flip;
};

static int pack_wt_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct pack_job *J = job;
    int lo, hi;
    dspt_share(tc, (J->s->c + 127) / 128 * J->s->kh * J->s->kw * (J->o4 / 4), 1, t, &lo, &hi);
    pack_wt(J->bp, J->w, J->s, J->o4, J->flip, lo, hi);
    return DSPT_OK;
}

static int pack_wt_split(struct dspt_ctx *ctx, int8_t *bp, const int8_t *w, const struct conv_shape *s, int o4, int flip)
{
    struct pack_job J = {bp, w, s, o4, flip};
    return dspt_run_shares(ctx, pack_wt_share, &J);
}

/* dx rows [lo, hi) of thread t: gathered err windows times packed wT, in chunks. */
static int gather_rows_share(struct dspt_ctx *tc, int t, void *job)
{
    struct rows_job *j = job;
    const struct conv_shape *s = j->s;
    int o4 = (s->o + 3) & ~3, q = s->n * s->h * s->w, lo, hi;
    dspt_share(tc, q, 4, t, &lo, &hi);
    for (int q0 = lo; q0 < hi; q0 += j->rows) {
        int r = hi - q0 < j->rows ? hi - q0 : j->rows;
        gather_err(j->cols[t], j->k, j->x, s, o4, q0, r);
        dspt_gemm_core(j->y + q0 * s->c, s->c, j->cols[t], j->k, j->bp, r, s->c, j->k, j->acc);
    }
    return DSPT_OK;
}

int dspt_op_conv2d_bwd_data(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    struct conv_shape s;
    if (d->dtype != DSPT_I8) return DSPT_NO_SUPPORT;
    int st = conv_shape(d, d->shape_out, d->shape_a, &s);  /* out0 is dx [N,H,W,C] */
    if (st) return st;
    if (d->shape_b[0] != s.o || d->shape_b[1] != s.kh || d->shape_b[2] != s.kw || d->shape_b[3] != s.c)
        return DSPT_BAD_PARAMS;
    int o4 = (s.o + 3) & ~3, k = s.kh * s.kw * o4, q = s.n * s.h * s.w;
    if (too_deep(k)) return DSPT_NO_SUPPORT;
    const int8_t *err = dspt_at(ctx, d->in[0], dspt_count(d->shape_a));
    const int8_t *w = dspt_at(ctx, d->in[1], dspt_count(d->shape_b));
    int32_t *dx = dspt_at(ctx, d->out[0], (uint32_t)q * s.c * 4);
    if (!err || !w || !dx) return DSPT_BAD_PARAMS;
    int acc = (d->flags & DSPT_F_ACCUMULATE) != 0;
    int pointwise = s.kh == 1 && s.kw == 1 && s.stride == 1 && s.pad == 0 && o4 == s.o;
    /* pointwise takes the GEMM whatever the channels: few err channels (grid) or few dx
     * channels (col2im) measured 1.8-2.7x more packets on MobileNetV2's 16 x 16 layers */
    if (!pointwise && dspt_conv_grid_bwd_data_fits(&s))   /* few err channels: a forward conv of err, grid in the lanes */
        return took(d, DSPT_PATH_CONV_GRID, dspt_conv_grid_bwd_data(ctx, dx, err, w, &s, acc));
    if (!pointwise && dspt_conv_col2im_fits(&s))   /* few input channels: GEMM into window rows, then add */
        return took(d, DSPT_PATH_COL2IM, dspt_conv_col2im_bwd_data(ctx, dx, err, w, &s, acc));
    if (pointwise && dspt_pointwise_pixels_fits(s.c, s.o, q)) {   /* 16 dx channels: pixels in the lanes */
        int8_t *wm = dspt_scratch(ctx, (uint32_t)s.c * s.o);   /* wT: row c holds w[:, c] */
        if (!wm) return DSPT_NO_SUPPORT;
        for (int c = 0; c < s.c; c++)
            for (int o = 0; o < s.o; o++) wm[c * s.o + o] = w[o * s.c + c];
        return took(d, DSPT_PATH_POINTWISE_PIXELS, dspt_pointwise_pixels(ctx, dx, err, wm, q, s.o, acc));
    }
    int8_t *bp = dspt_scratch(ctx, dspt_packed_b_bytes(s.c, k));
    if (!bp) return DSPT_NO_SUPPORT;
    if (pointwise) {   /* dx = err . wT, err's pixels as they lie */
        struct conv_shape f = {s.n, s.oh, s.ow, s.o, s.c, 1, 1, s.h, s.w, 1, 0};
        struct rows_job j = {.y = dx, .x = err, .s = &f, .bp = bp, .k = s.o, .acc = acc};
        st = pack_wt_split(ctx, bp, w, &s, o4, 0);
        return took(d, DSPT_PATH_POINTWISE, st ? st : dspt_run_shares(ctx, pointwise_share, &j));
    }
    if (dspt_pointwise_strided_fits(&s)) {   /* 1 x 1 of stride s: err . wT lands s*C words apart */
        st = pack_wt_split(ctx, bp, w, &s, o4, 0);
        return took(d, DSPT_PATH_POINTWISE_STRIDED, st ? st : dspt_pointwise_strided_bwd_data(ctx, dx, err, bp, &s, acc));
    }
    if (s.stride == 1 && o4 == s.o && s.pad <= s.kh - 1 && s.pad <= s.kw - 1 && s.kh == s.kw) {
        /* stride 1: a forward conv of err, padded by k-1-pad, with the flipped taps of wT
         * (one window copy per kernel row instead of one per tap) */
        struct conv_shape f = {s.n, s.oh, s.ow, s.o, s.c, s.kh, s.kw, s.h, s.w, 1, s.kh - 1 - s.pad};
        st = pack_wt_split(ctx, bp, w, &s, o4, 1);
        return took(d, DSPT_PATH_FLIPPED_GEMM, st ? st : conv_rows(ctx, dx, err, &f, bp, k, acc));
    }
    struct rows_job j = {.y = dx, .x = err, .s = &s, .bp = bp, .k = k, .acc = acc, .rows = chunk_rows(ctx, k)};
    if (!thread_buffers(ctx, &j, (uint32_t)j.rows * k + HVX_BYTES, 0)) return DSPT_NO_SUPPORT;
    st = pack_wt_split(ctx, bp, w, &s, o4, 0);
    return took(d, DSPT_PATH_GATHER_GEMM, st ? st : dspt_run_shares(ctx, gather_rows_share, &j));
}

/* Word g of lane l in block lb: rows 4g .. 4g+3 of src (row stride ld bytes, `rows`
 * valid, zeros after), bytes lb*32 + l: four rows interleaved, stored as vector g of
 * the block (stride k4 vectors). `biased`: the packed b side (kernels.h: + 128, and
 * the lane of 1s after the last column). Four rows' 128 bytes make up to 4 blocks at
 * once (the byte and halfword vshuffs' high halves are blocks 1 and 3: 4 loads and 4
 * vshuff for 4 blocks, not 16 and 12), and the groups of 4 valid rows run without a test
 * per load (with one, clang branched around each load and reloaded ld: 3x the packets,
 * most of a 16 x 16 pointwise weight gradient's); the last group or groups after them. */
static inline __attribute__((always_inline)) void blocks4(const int NB, const int RAGGED, HVX_Vector *out, int k4,
                                                          const int8_t *p,
                                                          int ld, HVX_Vector bias, HVX_VectorPred last,
                                                          HVX_Vector ones)
{
    HVX_Vector r0 = hvx_load_u(p), r1 = hvx_load_u(p + ld), r2 = hvx_load_u(p + 2 * ld), r3 = hvx_load_u(p + 3 * ld);
    HVX_VectorPair p01 = Q6_W_vshuff_VVR(r1, r0, -1), p23 = Q6_W_vshuff_VVR(r3, r2, -1);
    HVX_VectorPair lo = Q6_W_vshuff_VVR(Q6_V_lo_W(p23), Q6_V_lo_W(p01), -2);
    HVX_Vector v[4] = {Q6_V_lo_W(lo), Q6_V_hi_W(lo), 0, 0};
    if (NB > 2) {
        HVX_VectorPair hi = Q6_W_vshuff_VVR(Q6_V_hi_W(p23), Q6_V_hi_W(p01), -2);
        v[2] = Q6_V_lo_W(hi);
        v[3] = Q6_V_hi_W(hi);
    }
#pragma clang loop unroll(full)
    for (int j = 0; j < NB; j++) {
        HVX_Vector u = Q6_V_vxor_VV(v[j], bias);
        out[j * k4] = RAGGED && j == NB - 1 ? Q6_V_vmux_QVV(last, ones, u) : u;   /* `last`: the 1s lane */
    }
}

/* Rows of exactly 32 or 16 bytes (MobileNetV2's 32- and 16-channel pointwise layers): 4
 * rows of 32 bytes are one vector, and two byte shuffles (lane i -> 2i, i + 64 -> 2i + 1)
 * put row r's byte l at 4l + r: one load a group, not 4 (the general loop's group of one
 * block took 11 packets, loads and vshuff one a packet). 8 rows of 16 bytes are one
 * vector: a 16-byte vshuff with zeros spreads rows 0-3 and 4-7 to 32 bytes apart first.
 * Functions of their own: the general loop's code stays as it was. */
static __attribute__((noinline)) void interleave_narrow(HVX_Vector *dst, const int8_t *src, int ld, int rows, int k4,
                                                        HVX_Vector bias)
{
    HVX_Vector zero = Q6_V_vzero();
    int whole = rows / 4 < k4 ? rows / 4 : k4, g = 0;
#define SHUFFLE2(v) Q6_V_vxor_VV(Q6_Vb_vshuff_Vb(Q6_Vb_vshuff_Vb(v)), bias)
    if (ld == 32)
        for (; g < whole; g++) dst[g] = SHUFFLE2(hvx_load_u(src + g * 128));
    else
        for (; g < whole; g += 2) {   /* an odd last group: its pair's rows are read, not stored */
            HVX_VectorPair w = Q6_W_vshuff_VVR(zero, hvx_load_u(src + g * 64), -16);
            dst[g] = SHUFFLE2(Q6_V_lo_W(w));
            if (g + 1 < whole) dst[g + 1] = SHUFFLE2(Q6_V_hi_W(w));
        }
#undef SHUFFLE2
    for (g = whole; g < k4; g++) {   /* the rest, rows past `rows` zeros */
        HVX_Vector r[4];
        for (int i = 0; i < 4; i++) r[i] = 4 * g + i < rows ? hvx_load_u(src + (4 * g + i) * ld) : zero;
        dst[g] = Q6_V_vxor_VV(hvx_interleave4b(r[0], r[1], r[2], r[3]), bias);
    }
}

static __attribute__((noinline)) void interleave_rows(HVX_Vector *dst, const int8_t *src, int ld, int width, int rows,
                                                      int k4, int biased)
{
    HVX_Vector zero = Q6_V_vzero(), bias = biased ? Q6_V_vsplat_R((int)0x80808080u) : zero;
    HVX_Vector ones = Q6_V_vsplat_R(DSPT_ONES_WORD);
    int whole = rows / 4 < k4 ? rows / 4 : k4, blocks = (width + 31) / 32;   /* groups of 4 valid rows */
    for (int lb0 = 0; lb0 < blocks; lb0 += 4) {
        int nb = blocks - lb0 < 4 ? blocks - lb0 : 4, lanes = width - (lb0 + nb - 1) * 32;
        /* the group's last block: its lane `lanes` the 1s when ragged (lanes past it: never stored columns) */
        HVX_VectorPred last = biased && lanes < 32 ? Q6_Q_and_QQn(Q6_Q_vsetq2_R(4 * lanes + 4), Q6_Q_vsetq_R(4 * lanes))
                                                   : Q6_Q_vsetq_R(0);
        HVX_Vector *out = dst + lb0 * k4;
        const int8_t *p = src + lb0 * 32;
        int ragged = biased && lanes < 32;
#define RUN(NB, R) for (int g = 0; g < whole; g++, p += 4 * ld) blocks4(NB, R, out + g, k4, p, ld, bias, last, ones)
        if (nb == 4 && !ragged) RUN(4, 0);
        else if (nb == 4) RUN(4, 1);
        else if (nb == 3 && !ragged) RUN(3, 0);
        else if (nb == 3) RUN(3, 1);
        else if (nb == 2 && !ragged) RUN(2, 0);
        else if (nb == 2) RUN(2, 1);
        else if (!ragged) RUN(1, 0);
        else RUN(1, 1);
#undef RUN
        for (int lb = lb0; lb < lb0 + nb; lb++) {
            int lanes_lb = width - lb * 32 < 32 ? width - lb * 32 : 32;
            for (int g = whole; g < k4; g++) {
                HVX_Vector r[4];
                for (int i = 0; i < 4; i++) r[i] = 4 * g + i < rows ? hvx_load_u(src + (4 * g + i) * ld + lb * 32) : zero;
                HVX_Vector v = Q6_V_vxor_VV(hvx_interleave4b(r[0], r[1], r[2], r[3]), bias);
                dst[lb * k4 + g] = biased && lanes_lb < 32 ? dspt_ones_lane(v, lanes_lb) : v;
            }
        }
    }
}

void dspt_interleave_rows(HVX_Vector *dst, const int8_t *src, int ld, int width, int rows, int k4, int biased)
{
    if ((width == 32 || (width == 16 && !biased)) && ld == width)   /* 16 biased: the lane of 1s */
        interleave_narrow(dst, src, ld, rows, k4, biased ? Q6_V_vsplat_R((int)0x80808080u) : Q6_V_vzero());
    else
        interleave_rows(dst, src, ld, width, rows, k4, biased);
}

/* dw[o, j] += sum over positions p in [lo, hi) of err[p, o] * cols(x)[p, j], chunked:
 * b = cols^T packed (lanes j), a = err^T as words (lanes o, read with stride 32 words).
 * `flip` (more outputs than columns: MobileNetV2's expansions, 16 -> 96 channels): the
 * wider side goes in the lanes, dwT[j, o] = sum err^T x with b = err^T packed (lanes o),
 * a = cols^T (rows j), so a 16-column dw fills 3 blocks of vrmpy lanes, not half of one,
 * and a tile loads 8 rows' words for 3 blocks' vrmpy, not 4 for 1; the join transposes. */
static void bwd_weight_range(struct dspt_ctx *ctx, int32_t *dw, const int8_t *err, const int8_t *x,
                             const struct conv_shape *s, int lo, int hi, int pc, int8_t *cols,
                             HVX_Vector *bp, HVX_Vector *et, int accumulate, struct padded *pd, int flip)
{
    int j = s->kh * s->kw * s->c;
    for (int p0 = lo; p0 < hi; p0 += pc) {
        int r = hi - p0 < pc ? hi - p0 : pc, k4 = (r + 3) / 4;
        /* a 1 x 1, stride-1, unpadded conv's im2col rows are x's pixels: read in place */
        const int8_t *rows = s->kh == 1 && s->kw == 1 && s->stride == 1 && s->pad == 0 ? x + (size_t)p0 * j : cols;
        if (rows == cols) im2col(cols, j, x, s, p0, r, pd);
        int acc = p0 > lo || accumulate;
        if (flip) {
            dspt_interleave_rows(bp, err + p0 * s->o, s->o, s->o, r, k4, 1);
            dspt_interleave_rows(et, rows, j, j, r, k4, 0);
            for (int jb = 0; jb * 32 < j; jb++)
                dspt_gemm_core_strided(dw + jb * 32 * s->o, s->o, (const int8_t *)(et + jb * k4), 4, 32,
                                       (const int8_t *)bp, j - jb * 32 < 32 ? j - jb * 32 : 32, s->o, 4 * k4, acc);
            continue;
        }
        dspt_interleave_rows(bp, rows, j, j, r, k4, 1);
        dspt_interleave_rows(et, err + p0 * s->o, s->o, s->o, r, k4, 0);
        for (int ob = 0; ob * 32 < s->o; ob++) {
            int m = s->o - ob * 32 < 32 ? s->o - ob * 32 : 32;
            dspt_gemm_core_strided(dw + ob * 32 * j, j, (const int8_t *)(et + ob * k4), 4, 32,
                                   (const int8_t *)bp, m, j, 4 * k4, acc);
        }
    }
}

/* The weight gradient's reduction over positions, split across the HVX threads: thread 0
 * sums its positions into dw, thread t > 0 into its own partial sum part[t]. */
struct weight_job {
    int32_t *dw;
    const int8_t *err, *x;
    const struct conv_shape *s;
    int pc, acc, flip;
    int8_t *cols[DSPT_MAX_THREADS];
    HVX_Vector *bp[DSPT_MAX_THREADS], *et[DSPT_MAX_THREADS];
    int32_t *part[DSPT_MAX_THREADS];
    struct padded pd[DSPT_MAX_THREADS];
};

static int bwd_weight_share(struct dspt_ctx *tc, int t, void *job)
{
    struct weight_job *J = job;
    int lo, hi;
    dspt_share(tc, J->s->n * J->s->oh * J->s->ow, 4, t, &lo, &hi);   /* thread t: positions [lo, hi) */
    if (lo < hi)
        bwd_weight_range(tc, J->part[t], J->err, J->x, J->s, lo, hi, J->pc, J->cols[t], J->bp[t], J->et[t],
                         t == 0 && J->acc && !J->flip, &J->pd[t], J->flip);
    return DSPT_OK;
}

/* The join of a split weight gradient, itself split: thread t adds, over its own range of
 * dw's words (whole vectors), the partial sums of threads 1 .. shares-1 in thread order. */
struct join_job {
    int32_t *dw;
    int32_t *const *part;
    int shares;
    uint32_t words;
};

static int join_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct join_job *J = job;
    int lo, hi;
    dspt_share(tc, (int)J->words, 32, t, &lo, &hi);
    for (int s = 1; s < J->shares && lo < hi; s++) dspt_add_words(J->dw + lo, J->part[s] + lo, (uint32_t)(hi - lo));
    return DSPT_OK;
}

/* The join of a flipped weight gradient: dw[o, j] (+)= the shares' dwT[j, o] summed in
 * thread order, dw's rows split across the threads. */
struct join_t_job {
    int32_t *dw;
    int32_t *const *part;
    int shares, o, j, acc;
};

static int join_t_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct join_t_job *J = job;
    int lo, hi;
    dspt_share(tc, J->o, 1, t, &lo, &hi);
    for (int o = lo; o < hi; o++) {
        int32_t *row = J->dw + o * J->j;
        for (int c = 0; c < J->j; c++) {
            int32_t v = J->acc ? row[c] : 0;
            for (int s = 0; s < J->shares; s++) v += J->part[s][c * J->o + o];
            row[c] = v;
        }
    }
    return DSPT_OK;
}

int dspt_join_partials(struct dspt_ctx *ctx, int32_t *dw, int32_t *const *part, int shares, uint32_t words)
{
    struct join_job J = {dw, part, shares, words};
    return shares > 1 ? dspt_run_shares(ctx, join_share, &J) : DSPT_OK;
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
    if (dspt_conv_planar_fits(&s))   /* few channels: operands split into planes */
        return took(d, DSPT_PATH_PLANAR,
                    dspt_conv_planar_bwd_weight(ctx, dw, err, x, &s, (d->flags & DSPT_F_ACCUMULATE) != 0));
    /* chunk the reduction: pc positions (a multiple of 4) per pass and thread */
    int pc = chunk_rows(ctx, j + s.o);
    if (dspt_pointwise_wgrad_fits(&s, pc))   /* the whole reduction in one pass: the threads split dw */
        return took(d, DSPT_PATH_WGRAD_OUTPUTS,
                    dspt_pointwise_wgrad(ctx, dw, err, x, &s, (d->flags & DSPT_F_ACCUMULATE) != 0));
    if (pc > ((p + 3) & ~3)) pc = (p + 3) & ~3;
    int jb = (j + 31) / 32, obk = (s.o + 31) / 32, k4 = pc / 4;
    uint32_t dw_words = (uint32_t)s.o * j;
    /* flipped (bwd_weight_range) where the columns would leave half of the lanes empty and
     * the outputs fill more (16 -> 96: 599 K -> 464 K packets; 24 -> 144, 3/4 full, measured
     * 20 % more flipped), over enough positions that the transposing join stays small */
    int flip = j <= 16 && s.o > j && p >= 4 * s.o;
    struct weight_job job = {.dw = dw, .err = err, .x = x, .s = &s, .pc = pc, .acc = (d->flags & DSPT_F_ACCUMULATE) != 0,
                             .flip = flip};
    for (int t = 0; t < (int)ctx->threads; t++) {   /* each thread's buffers, from its own scratch */
        struct dspt_ctx *tc = dspt_thread_ctx(ctx, t);
        if (!tc) return DSPT_NO_SUPPORT;
        job.cols[t] = dspt_scratch(tc, (uint32_t)pc * j + HVX_BYTES);
        job.bp[t] = dspt_scratch(tc, (uint32_t)(flip ? obk : jb) * k4 * HVX_BYTES);
        job.et[t] = dspt_scratch(tc, (uint32_t)(flip ? jb : obk) * k4 * HVX_BYTES);
        job.part[t] = t || flip ? dspt_scratch(tc, dw_words * 4) : dw;
        if (!job.cols[t] || !job.bp[t] || !job.et[t] || !job.part[t] || !padded_buffer(tc, &s, &job.pd[t]))
            return DSPT_NO_SUPPORT;
    }
    int status = dspt_run_shares(ctx, bwd_weight_share, &job), shares = 0;
    for (int t = 0; t < (int)ctx->threads; t++) {   /* the threads that had work (idle ones come last) */
        int lo, hi;
        dspt_share(ctx, p, 4, t, &lo, &hi);
        shares += lo < hi;
    }
    if (!status && flip) {
        struct join_t_job J = {dw, job.part, shares, s.o, j, job.acc};
        status = dspt_run_shares(ctx, join_t_share, &J);
    } else if (!status) {
        status = dspt_join_partials(ctx, dw, job.part, shares, dw_words);
    }
    return took(d, DSPT_PATH_WGRAD_GEMM, status);
}
