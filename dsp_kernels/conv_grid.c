/* conv_grid.c: forward conv of few-channel inputs with the padded grid's pixels in the lanes.
 *
 * conv_lanes.c puts the pixels of one output row in the 32 lanes; with 10 or 14 pixels a
 * row (LeNet's second conv and its backward data) most lanes would idle. Here the lanes
 * hold 32 consecutive positions of the whole padded input grid (row stride Wp): output
 * (oh, ow) is grid position oh * Wp + ow and tap (i, j) reads position + i * Wp + j, so
 * one flat index serves all; the positions past OW in a row are computed and dropped.
 * The input is laid out once per image as word planes ("dealt"): channels padded to a
 * multiple of 4 (C'), word g of every position in plane g, biased; the vector for tap (i,
 * j), word g and 32 positions from q is then one unaligned load at plane g, q + i * Wp + j.
 * vrmpy multiplies it by 4 weights of an output channel (conv_lanes.c's register tile).
 * Backward data is this forward conv of err, padded by KH-1-pad, with the weights flipped
 * and their in and out channels swapped.
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "conv.h"
#include "conv_common.h"
#include "threads.h"

#define MAX_WORDS 4   /* C' <= 16: four word planes */

int dspt_conv_grid_fits(const struct conv_shape *s)
{
    /* many outputs (VGG conv1: 3 -> 64) measured faster on conv.c's path */
    return s->stride == 1 && s->c > 1 && s->c <= 4 * MAX_WORDS && s->o <= 32;
}

struct grid {
    int cp, words, wp, hp, plane;     /* C', words per pixel, grid columns and rows, words a plane */
    int rows_out, blocks;             /* grid rows holding outputs, 32-position blocks of them */
    int opad, kg;
    int32_t *wq, *corr, *off;
};

/* Word planes of image n (biased bytes; zero pixels and channels are 0x80). */
static void deal_image(const struct grid *G, int32_t *planes, int8_t *pix, const int8_t *x,
                       const struct conv_shape *s, int n, HVX_Vector spread)
{
    HVX_Vector bias = Q6_V_vsplat_R((int)0x80808080u);
    const int8_t *img = x + (size_t)n * s->h * s->w * s->c;
    int total = ((G->hp * G->wp + 31) & ~31) * G->cp;   /* bytes of the padded pixel-major image */
    for (int i = 0; i < total + HVX_BYTES; i += HVX_BYTES) hvx_store_u(pix + i, bias);
    int per = HVX_BYTES / G->cp;          /* pixels a spread vector holds */
    for (int h = 0; h < s->h; h++) {
        const int8_t *src = img + h * s->w * s->c;
        int8_t *dst = pix + ((h + s->pad) * G->wp + s->pad) * G->cp;
        for (int p0 = 0; p0 < s->w; p0 += per) {
            int np = s->w - p0 < per ? s->w - p0 : per;
            HVX_Vector v = Q6_V_vxor_VV(hvx_load_bytes(src + p0 * s->c, (uint32_t)(np * s->c)), bias);
            if (s->c < G->cp) v = Q6_V_vdelta_VV(v, spread);   /* C -> C' bytes a pixel */
            v = Q6_V_vmux_QVV(Q6_Q_vsetq2_R((uint32_t)(np * G->cp)), v, bias);
            hvx_store_bytes(dst + p0 * G->cp, v, (uint32_t)(np * G->cp));
        }
    }
    /* pixel-major words -> one plane per word: 32 * words words at a time, vdeal stages */
    int positions = G->hp * G->wp;
    for (int q = 0; q < positions; q += 32) {
        HVX_Vector v[MAX_WORDS], t[MAX_WORDS];
        for (int k = 0; k < G->words; k++) v[k] = hvx_load_u(pix + (q * G->words + 32 * k) * 4);
        if (G->words == 2) {
            HVX_VectorPair d = Q6_W_vdeal_VVR(v[1], v[0], -4);
            v[0] = Q6_V_lo_W(d); v[1] = Q6_V_hi_W(d);
        } else if (G->words == 4) {
            HVX_VectorPair a = Q6_W_vdeal_VVR(v[1], v[0], -4), b = Q6_W_vdeal_VVR(v[3], v[2], -4);
            t[0] = Q6_V_lo_W(a); t[1] = Q6_V_lo_W(b); t[2] = Q6_V_hi_W(a); t[3] = Q6_V_hi_W(b);
            HVX_VectorPair c = Q6_W_vdeal_VVR(t[1], t[0], -4), d = Q6_W_vdeal_VVR(t[3], t[2], -4);
            v[0] = Q6_V_lo_W(c); v[2] = Q6_V_hi_W(c); v[1] = Q6_V_lo_W(d); v[3] = Q6_V_hi_W(d);
        }
        for (int k = 0; k < G->words; k++) hvx_store_u(planes + k * G->plane + q, v[k]);
    }
}

/* Units [lo, hi) of (image, block) of thread t (threads.h), through its own planes,
 * pixels, staging rows and accumulators. */
struct grid_job {
    struct grid G;   /* a copy: the kernel's own stays unescaped, its fields known to the compiler */
    int32_t *y;
    const int8_t *x;
    const struct conv_shape *s;
    const HVX_Vector *ctrl;
    int most, accumulate;
    int32_t *planes[DSPT_MAX_THREADS], *stage[DSPT_MAX_THREADS];
    int8_t *pix[DSPT_MAX_THREADS];
    HVX_Vector *yt[DSPT_MAX_THREADS];
};

static int grid_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct grid_job *J = job;
    const struct grid G = J->G;
    const struct conv_shape *s = J->s;
    const int8_t *x = J->x;
    int32_t *y = J->y;
    const HVX_Vector *ctrl = J->ctrl;
    int most = J->most, accumulate = J->accumulate;
    int32_t *planes = J->planes[t], *stage = J->stage[t];
    int8_t *pix = J->pix[t];
    HVX_Vector *yt = J->yt[t];
    int lo, hi;
    dspt_share(tc, s->n * G.blocks, 1, t, &lo, &hi);
    if (lo >= hi) return DSPT_OK;
    for (int n = lo / G.blocks, u0 = n * G.blocks; u0 < hi; n++, u0 += G.blocks) {
        int blo = lo > u0 ? lo - u0 : 0, bhi = hi - u0 < G.blocks ? hi - u0 : G.blocks;
        deal_image(&G, planes, pix, x, s, n, ctrl[0]);
        for (int b0 = blo; b0 < bhi;) {
            int R = bhi - b0 >= most ? most : (bhi - b0 >= 2 ? 2 : 1);
            const int8_t *base = (const int8_t *)(planes + b0 * 32);
            for (int o0 = 0, rest = s->o; rest > 0; rest -= dspt_lanes_tile_width(rest)) {
                int T = dspt_lanes_tile_width(rest);
                dspt_lanes_tile(R, T, yt + o0, G.opad, base, HVX_BYTES, G.off, G.kg, G.wq + o0, G.opad,
                                G.corr + o0);
                o0 += T;
            }
            for (int rr = 0; rr < R; rr++)   /* address order: each store's tail is overwritten */
                dspt_lanes_store(stage + (b0 + rr) * 32 * s->o, s->o, yt + rr * G.opad, 32, &ctrl[1]);
            b0 += R;
        }
        /* the outputs of each grid row, as far as this share computed them */
        int32_t *yn = y + (size_t)n * s->oh * s->ow * s->o;
        int first = blo * 32, end = bhi * 32;
        for (int oh = 0; oh < s->oh; oh++) {
            int p0 = oh * G.wp > first ? oh * G.wp : first, p1 = oh * G.wp + s->ow < end ? oh * G.wp + s->ow : end;
            if (p0 >= p1) continue;
            const int32_t *src = stage + p0 * s->o;
            int32_t *dst = yn + (oh * s->ow + p0 - oh * G.wp) * s->o;
            uint32_t words = (uint32_t)((p1 - p0) * s->o);
            if (accumulate) dspt_add_words(dst, src, words);
            else hvx_copy(dst, src, words * 4);
        }
    }
    return DSPT_OK;
}

int dspt_conv_grid(struct dspt_ctx *ctx, int32_t *y, const int8_t *x, const int8_t *w,
                   const struct conv_shape *s, int accumulate)
{
    struct grid G;
    G.cp = (s->c + 3) & ~3;
    G.words = G.cp / 4;
    if (G.words == 3) { G.cp = 16; G.words = 4; }   /* planes dealt in powers of two */
    G.wp = s->w + 2 * s->pad;
    G.hp = s->h + 2 * s->pad;
    G.rows_out = s->oh;
    G.blocks = (s->oh * G.wp + 31) / 32;
    /* a block reads up to (KH-1) * Wp + KW-1 + 31 positions past its start */
    G.plane = ((G.blocks * 32 + (s->kh - 1) * G.wp + s->kw + 32 + 31) & ~31) + 32;
    G.kg = s->kh * s->kw * G.words;
    G.opad = 0;
    for (int left = s->o; left > 0; left -= dspt_lanes_tile_width(left)) G.opad += dspt_lanes_tile_width(left);
    G.wq = dspt_scratch(ctx, (uint32_t)G.kg * G.opad * 4);
    G.corr = dspt_scratch(ctx, (uint32_t)G.opad * 4);
    G.off = dspt_scratch(ctx, (uint32_t)G.kg * 4);
    HVX_Vector *ctrl = dspt_scratch(ctx, 2 * HVX_BYTES);
    if (!G.wq || !G.corr || !G.off || !ctrl) return DSPT_NO_SUPPORT;
    int8_t *wrow = dspt_scratch(ctx, (uint32_t)G.kg * 4 + HVX_BYTES);   /* one channel's taps, C' wide */
    uint8_t *keep = dspt_scratch(ctx, HVX_BYTES);                          /* the C real bytes of each C' */
    if (!wrow || !keep) return DSPT_NO_SUPPORT;
    if (s->c < G.cp) dspt_spread_control((uint8_t *)&ctrl[0], s->c, G.cp);
    for (int i = 0; i < HVX_BYTES; i++) keep[i] = (i & (G.cp - 1)) < s->c ? 0xFF : 0;   /* C' a power of two */
    /* weight words (i, j, g) x channel and bias corrections: each channel's taps spread
     * C -> C' bytes as the image is (vdelta), 128 / C' taps a vector, summed by vrmpy */
    const int taps = s->kh * s->kw, per = HVX_BYTES / G.cp;
    const HVX_Vector spread = ctrl[0], kept = *(const HVX_Vector *)keep, ones = Q6_V_vsplat_R(0x01010101);
    for (int o = 0; o < G.opad; o++) {
        HVX_Vector sums = Q6_V_vzero();
        const int8_t *src = w + (size_t)o * taps * s->c;
        for (int t0 = 0; t0 < taps; t0 += per) {   /* whole vectors in address order; past the taps: zeros */
            HVX_Vector v = o < s->o ? hvx_load_u(src + t0 * s->c) : Q6_V_vzero();
            if (s->c < G.cp) v = Q6_V_vdelta_VV(v, spread);
            int n = taps - t0 < per ? taps - t0 : per;
            v = Q6_V_vmux_QVV(Q6_Q_vsetq2_R((uint32_t)(n * G.cp)), Q6_V_vand_VV(v, kept), Q6_V_vzero());
            hvx_store_u(wrow + t0 * G.cp, v);
            sums = Q6_Vw_vrmpyacc_VwVbVb(sums, v, ones);
        }
        for (int r = 64; r >= 4; r >>= 1) sums = Q6_Vw_vadd_VwVw(sums, Q6_V_vror_VR(sums, r));
        for (int k = 0; k < G.kg; k++) G.wq[k * G.opad + o] = ((const int32_t *)wrow)[k];
        G.corr[o] = -128 * Q6_R_vextract_VR(sums, 0);
    }
    for (int i = 0, k = 0; i < s->kh; i++)
        for (int j = 0; j < s->kw; j++)
            for (int g = 0; g < G.words; g++, k++) G.off[k] = (g * G.plane + i * G.wp + j) * 4;
    int last = s->o % 32, P = 1;
    while (P < last) P <<= 1;
    if (last && last < P) dspt_lanes_compaction((uint8_t *)&ctrl[1], last, P);
    int widest = 0;
    for (int left = s->o; left > 0; left -= dspt_lanes_tile_width(left))
        widest = dspt_lanes_tile_width(left) > widest ? dspt_lanes_tile_width(left) : widest;
    int most = 24 / widest >= 4 ? 4 : 2;   /* blocks per register tile */
    uint32_t out_words = (uint32_t)G.blocks * 32 * s->o;
    struct grid_job job = {.G = G, .y = y, .x = x, .s = s, .ctrl = ctrl, .most = most, .accumulate = accumulate};
    for (int t = 0; t < (int)ctx->threads; t++) {   /* each thread's buffers, from its own scratch */
        struct dspt_ctx *tc = dspt_thread_ctx(ctx, t);
        if (!tc) return DSPT_NO_SUPPORT;
        job.planes[t] = dspt_scratch(tc, (uint32_t)G.words * G.plane * 4 + HVX_BYTES);
        job.pix[t] = dspt_scratch(tc, (uint32_t)(((G.hp * G.wp + 31) & ~31) * G.cp + 2 * HVX_BYTES));
        job.stage[t] = dspt_scratch(tc, (out_words + 32 * (uint32_t)s->o) * 4 + HVX_BYTES);
        job.yt[t] = dspt_scratch(tc, (uint32_t)most * G.opad * HVX_BYTES);
        if (!job.planes[t] || !job.pix[t] || !job.stage[t] || !job.yt[t]) return DSPT_NO_SUPPORT;
    }
    return dspt_run_shares(ctx, grid_share, &job);
}

int dspt_conv_grid_bwd_data_fits(const struct conv_shape *s)
{
    return s->stride == 1 && s->o > 1 && s->o <= 4 * MAX_WORDS && s->kh == s->kw && s->pad <= s->kh - 1;
}

int dspt_conv_grid_bwd_data(struct dspt_ctx *ctx, int32_t *dx, const int8_t *err, const int8_t *w,
                            const struct conv_shape *s, int accumulate)
{
    /* dx = conv(err padded by KH-1-pad, w' [c][i][j][o] = w[o][KH-1-i][KW-1-j][c]) */
    struct conv_shape f = {s->n, s->oh, s->ow, s->o, s->c, s->kh, s->kw, s->h, s->w, 1, s->kh - 1 - s->pad};
    const int taps = s->kh * s->kw, c_n = s->c, o_n = s->o;
    int8_t *wf = dspt_scratch(ctx, (uint32_t)c_n * taps * o_n);
    if (!wf) return DSPT_NO_SUPPORT;
    for (int c = 0; c < c_n; c++)   /* stores in address order, loads strided: one packet a byte */
        for (int t = 0; t < taps; t++) {
            int8_t *__restrict dst = wf + (c * taps + t) * o_n;
            const int8_t *__restrict src = w + (taps - 1 - t) * c_n + c;
            for (int o = 0; o < o_n; o++) dst[o] = src[o * taps * c_n];
        }
    return dspt_conv_grid(ctx, dx, err, wf, &f, accumulate);
}
