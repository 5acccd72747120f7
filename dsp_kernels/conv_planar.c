/* conv_planar.c: weight gradient of few-channel stride-1 convolutions from planar operands.
 *
 * dw[o, (i, j, c)] = sum over positions p of err[p, o] * x[p + i * Wp + j, c], with positions
 * laid out on the padded input grid (row stride Wp, image stride Hp * Wp): err is zero at
 * the grid points that are no output (the right and bottom margins), so one flat index
 * serves both operands and every tap is a constant offset. conv.c's path copies KH window
 * rows per position (im2col) and interleaves them; here x and err are split once into one
 * plane per channel (vdelta spreads each pixel's channels to a power of two, vdeal
 * separates them) and then each vrmpy multiplies two plane vectors as they are, 128
 * positions of err channel o by 128 positions of x at tap (i, j, c): each lane sums 4
 * positions, a register tile of 4 channels x 5 taps runs over all positions, and its
 * lanes are summed once at the end. No transposes, no im2col, no bias to take out.
 * Each HVX thread takes whole images and sums into its own partial dw.
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "conv.h"
#include "conv_common.h"
#include "threads.h"

#define GROUP_POSITIONS 8192   /* grid positions per pass: the planes stay within ~200 KiB */

/* vdelta control spreading k bytes a pixel to p2 (util.c routes it, once per shape). */
void dspt_spread_control(uint8_t ctrl[128], int k, int p2)
{
    dspt_restride_control(ctrl, k, k, p2, 128 / p2);
}

/* P vectors of 128/P pixels x P bytes (pixel order) -> P vectors of one channel each for
 * 128 pixels: each stage deals bytes of pairs (even bytes: channel bit clear) */
static inline __attribute__((always_inline)) void to_planes(const int P, HVX_Vector *v)
{
    HVX_Vector t[16];
    for (int s = 1; s < P; s <<= 1) {
#pragma clang loop unroll(full)
        for (int i = 0; i < P / 2; i++) {
            HVX_VectorPair pr = Q6_W_vdeal_VVR(v[2 * i + 1], v[2 * i], -1);
            t[i] = Q6_V_lo_W(pr);
            t[P / 2 + i] = Q6_V_hi_W(pr);
        }
#pragma clang loop unroll(full)
        for (int i = 0; i < P; i++) v[i] = t[i];
    }
}

/* src [npix][k] bytes -> dst[c * stride + p] for c < k, p < npix (whole vectors: up to 127
 * bytes past npix of each plane are written). */
static inline __attribute__((always_inline)) void split_channels(const int P, int8_t *dst, int stride,
                                                                  const int8_t *src, int npix, int k,
                                                                  HVX_Vector spread)
{
    const int per = 128 / P;
    for (int p0 = 0; p0 < npix; p0 += 128) {
        HVX_Vector v[16];
#pragma clang loop unroll(full)
        for (int i = 0; i < P; i++) {
            int first = p0 + i * per, n = npix - first < per ? npix - first : per;
            HVX_Vector in = n > 0 ? hvx_load_bytes(src + first * k, (uint32_t)(n * k)) : Q6_V_vzero();
            v[i] = k < P ? Q6_V_vdelta_VV(in, spread) : in;
        }
        to_planes(P, v);
        for (int c = 0; c < k; c++) hvx_store_u(dst + c * stride + p0, v[c]);
    }
}

static void split(int8_t *dst, int stride, const int8_t *src, int npix, int k, HVX_Vector spread)
{
    if (k == 1) { hvx_copy(dst, src, (uint32_t)npix); return; }
    if (k == 2) split_channels(2, dst, stride, src, npix, k, spread);
    else if (k <= 4) split_channels(4, dst, stride, src, npix, k, spread);
    else if (k <= 8) split_channels(8, dst, stride, src, npix, k, spread);
    else split_channels(16, dst, stride, src, npix, k, spread);
}

static int pow2_at_least(int k)
{
    int p = 1;
    while (p < k) p <<= 1;
    return p;
}

struct planes {
    int hp, wp, grid;              /* padded rows, columns; grid positions per image */
    int xstride, estride;          /* bytes between channel planes */
    int8_t *x, *e, *tmp;           /* planes of one group of images; one image split */
    HVX_Vector xspread, espread;   /* vdelta controls for C and O channels */
};

/* `rows` rows of n bytes (source stride n) at dst + r * span, each followed by zeros to
 * its span (whole vectors: zeros may land up to 127 bytes past; rows go in increasing
 * address order, so each overwrites the previous one's zeros). Sources are read with
 * whole vectors too: the arena and the split planes keep a vector of slack. */
static void put_rows(int8_t *dst, int span, const int8_t *src, int n, int rows)
{
    if (n <= HVX_BYTES && span <= HVX_BYTES) {   /* the common case: one vector a row */
        HVX_VectorPred keep = Q6_Q_vsetq2_R((uint32_t)n);
        for (int r = 0; r < rows; r++)
            hvx_store_u(dst + r * span, Q6_V_vmux_QVV(keep, hvx_load_u(src + r * n), Q6_V_vzero()));
        return;
    }
    for (int r = 0; r < rows; r++, dst += span, src += n) {
        int i = 0;
        for (; i + HVX_BYTES <= n; i += HVX_BYTES) hvx_store_u(dst + i, hvx_load_u(src + i));
        if (i < n) {
            hvx_store_u(dst + i, Q6_V_vmux_QVV(Q6_Q_vsetq_R((uint32_t)(n - i)), hvx_load_u(src + i), Q6_V_vzero()));
            i += HVX_BYTES;
        }
        for (; i < span; i += HVX_BYTES) hvx_store_u(dst + i, Q6_V_vzero());
    }
}

/* Planes of images n0 .. n0+g-1: each image's grid (Hp x Wp) holds x with its zero border
 * and err at its outputs, zeros elsewhere; zeros past the group to the plane's end. */
static void fill_planes(struct planes *P, const int8_t *x, const int8_t *err, const struct conv_shape *s,
                        int n0, int g)
{
    int xs = s->h * s->w, es = s->oh * s->ow, top = s->pad * P->wp + s->pad;
    int xend = (s->pad + s->h) * P->wp + s->pad, eend = s->oh * P->wp;   /* past the rows' spans */
    for (int gi = 0; gi < g; gi++) {
        int n = n0 + gi;
        const int8_t *xi = x + (size_t)n * xs * s->c, *ei = err + (size_t)n * es * s->o;
        const int8_t *xp = xi;
        if (s->c > 1) { split(P->tmp, xs + HVX_BYTES, xi, xs, s->c, P->xspread); xp = P->tmp; }
        for (int c = 0; c < s->c; c++) {
            int8_t *image = P->x + c * P->xstride + gi * P->grid;
            const int8_t *src = xp + (s->c > 1 ? c * (xs + HVX_BYTES) : 0);
            hvx_zero(image, (uint32_t)top);
            put_rows(image + top, P->wp, src, s->w, s->h);
            hvx_zero(image + xend, (uint32_t)(P->grid - xend));
        }
        const int8_t *ep = ei;
        if (s->o > 1) { split(P->tmp, es + HVX_BYTES, ei, es, s->o, P->espread); ep = P->tmp; }
        for (int o = 0; o < s->o; o++) {
            int8_t *image = P->e + o * P->estride + gi * P->grid;
            const int8_t *src = ep + (s->o > 1 ? o * (es + HVX_BYTES) : 0);
            put_rows(image, P->wp, src, s->ow, s->oh);
            hvx_zero(image + eend, (uint32_t)(P->grid - eend));
        }
    }
    for (int c = 0; c < s->c; c++) hvx_zero(P->x + c * P->xstride + g * P->grid, (uint32_t)(P->xstride - g * P->grid));
    for (int o = 0; o < s->o; o++) hvx_zero(P->e + o * P->estride + g * P->grid, (uint32_t)(P->estride - g * P->grid));
}

#define TILE_T 5   /* taps per register tile: up to 20 accumulators + 4 err + 1 x vector */

/* out[o][t] (+)= sum over `chunks` x 128 positions of e[o][p] * x[t][p] for a tile of TO
 * err planes and TILE_T tap rows (pointers into the planes); lanes summed 8 vectors at a
 * time (hvx_reduce8). */
static inline __attribute__((always_inline)) void tile_sums(
    const int TO, int32_t *out, const int8_t *const *e, const int8_t *const *x, int chunks)
{
    HVX_Vector acc[4 * TILE_T + 7];
    for (int a = 0; a < 4 * TILE_T + 7; a++) acc[a] = Q6_V_vzero();
    for (int q = 0; q < chunks; q++) {
        HVX_Vector ev[4];
        for (int o = 0; o < TO; o++) ev[o] = ((const HVX_Vector *)e[o])[q];
        for (int t = 0; t < TILE_T; t++) {
            HVX_Vector xv = hvx_load_u(x[t] + q * HVX_BYTES);
            for (int o = 0; o < TO; o++) acc[o * TILE_T + t] = Q6_Vw_vrmpyacc_VwVbVb(acc[o * TILE_T + t], xv, ev[o]);
        }
    }
    for (int a = 0; a < TO * TILE_T; a += 8) {
        HVX_Vector v = hvx_reduce8(acc[a], acc[a + 1], acc[a + 2], acc[a + 3], acc[a + 4], acc[a + 5],
                                   acc[a + 6], acc[a + 7]);
        const int32_t *lanes = (const int32_t *)&v;
        for (int j = 0; j < 8 && a + j < TO * TILE_T; j++) out[a + j] = lanes[4 * j];
    }
}

static void run_tile(int to, int32_t *out, const int8_t *const *e, const int8_t *const *x, int chunks)
{
    if (to == 4) tile_sums(4, out, e, x, chunks);
    else if (to == 3) tile_sums(3, out, e, x, chunks);
    else if (to == 2) tile_sums(2, out, e, x, chunks);
    else tile_sums(1, out, e, x, chunks);
}

/* Err channels per tile: 4, or 3 when that pads O less (O = 6: two tiles of 3). */
static int tile_channels(int o)
{
    int pad4 = (o + 3) / 4 * 4 - o, pad3 = (o + 2) / 3 * 3 - o;
    return pad3 < pad4 ? 3 : 4;
}

int dspt_conv_planar_fits(const struct conv_shape *s)
{
    /* the work is the grid's (Hp x Wp positions an image): where under 55% of it is
     * outputs (LeNet's second conv: 100 of 196) conv.c's path measured as fast */
    int grid = (s->h + 2 * s->pad) * (s->w + 2 * s->pad);
    return s->stride == 1 && s->c <= 8 && s->o <= 16 && 100 * s->oh * s->ow >= 55 * grid;
}

/* Images [lo, hi) of thread t (threads.h), through its own planes: thread 0 sums into
 * dw, thread t > 0 into its own partial sum part[t], added after the join. */
struct planar_job {
    struct planes P;   /* a copy: the kernel's own stays unescaped, its fields known to the compiler */
    const int8_t *err, *x;
    const struct conv_shape *s;
    const uint32_t *tap_off;
    int g, taps, to, opad, tpad, accumulate;
    int8_t *px[DSPT_MAX_THREADS], *pe[DSPT_MAX_THREADS], *tmp[DSPT_MAX_THREADS];
    int32_t *part[DSPT_MAX_THREADS];
};

static int planar_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct planar_job *J = job;
    struct planes P = J->P;
    const struct conv_shape *s = J->s;
    const int8_t *err = J->err, *x = J->x;
    const uint32_t *tap_off = J->tap_off;
    int g = J->g, taps = J->taps, to = J->to, opad = J->opad, tpad = J->tpad, accumulate = J->accumulate;
    int32_t *out = J->part[t];
    P.x = J->px[t];
    P.e = J->pe[t];
    P.tmp = J->tmp[t];
    int lo, hi;
    dspt_share(tc, s->n, 1, t, &lo, &hi);
    for (int n0 = lo; n0 < hi; n0 += g) {
        int gn = hi - n0 < g ? hi - n0 : g, chunks = (gn * P.grid + HVX_BYTES - 1) / HVX_BYTES;
        fill_planes(&P, x, err, s, n0, gn);
        int add = n0 > lo || (t == 0 && accumulate);   /* each share's first pass writes (thread 0 adds to dw if asked) */
        for (int o0 = 0; o0 < opad; o0 += to) {
            const int8_t *e[4];
            for (int o = 0; o < to; o++) e[o] = P.e + (o0 + o < s->o ? o0 + o : 0) * P.estride;
            for (int t0 = 0; t0 < tpad; t0 += TILE_T) {
                const int8_t *xr[TILE_T];
                int32_t sums[4 * TILE_T];
                for (int k = 0; k < TILE_T; k++) xr[k] = P.x + tap_off[t0 + k];
                run_tile(to, sums, e, xr, chunks);
                for (int o = 0; o < to && o0 + o < s->o; o++)
                    for (int k = 0; k < TILE_T && t0 + k < taps; k++) {
                        int32_t *w = out + (o0 + o) * taps + t0 + k;
                        *w = add ? *w + sums[o * TILE_T + k] : sums[o * TILE_T + k];
                    }
            }
        }
    }
    return DSPT_OK;
}

int dspt_conv_planar_bwd_weight(struct dspt_ctx *ctx, int32_t *dw, const int8_t *err, const int8_t *x,
                                const struct conv_shape *s, int accumulate)
{
    struct planes P;
    P.hp = s->h + 2 * s->pad;
    P.wp = s->w + 2 * s->pad;
    P.grid = P.hp * P.wp;
    int g = GROUP_POSITIONS / P.grid < 1 ? 1 : GROUP_POSITIONS / P.grid;
    if (g > s->n) g = s->n;
    int positions = (g * P.grid + HVX_BYTES - 1) & ~(HVX_BYTES - 1);
    int taps = s->kh * s->kw * s->c;
    int to = tile_channels(s->o), opad = (s->o + to - 1) / to * to, tpad = (taps + TILE_T - 1) / TILE_T * TILE_T;
    /* x planes are read up to (KH-1) * Wp + KW-1 + 127 bytes past the group's grid; the
     * channels and taps that pad the last tiles read plane 0 and their sums are dropped */
    P.xstride = (positions + s->kh * P.wp + 2 * HVX_BYTES) & ~(HVX_BYTES - 1);
    P.estride = positions + HVX_BYTES;
    int most = s->h * s->w > s->oh * s->ow ? s->h * s->w : s->oh * s->ow;
    uint32_t tmp_bytes = (uint32_t)(s->c > s->o ? s->c : s->o) * (most + HVX_BYTES) + 2 * HVX_BYTES;
    uint32_t dw_words = (uint32_t)s->o * taps;
    HVX_Vector *ctrl = dspt_scratch(ctx, 2 * HVX_BYTES);
    uint32_t *tap_off = dspt_scratch(ctx, (uint32_t)tpad * 4);   /* tap (i, j, c): offset in the x planes */
    if (!ctrl || !tap_off) return DSPT_NO_SUPPORT;
    if (s->c > 1 && s->c < pow2_at_least(s->c)) dspt_spread_control((uint8_t *)&ctrl[0], s->c, pow2_at_least(s->c));
    if (s->o > 1 && s->o < pow2_at_least(s->o)) dspt_spread_control((uint8_t *)&ctrl[1], s->o, pow2_at_least(s->o));
    P.xspread = ctrl[0];
    P.espread = ctrl[1];
    int jl = 0;
    for (int i = 0; i < s->kh; i++)   /* no division: Hexagon divides in software */
        for (int j = 0; j < s->kw; j++)
            for (int c = 0; c < s->c; c++) tap_off[jl++] = (uint32_t)(c * P.xstride + i * P.wp + j);
    for (; jl < tpad; jl++) tap_off[jl] = 0;   /* padding taps read plane 0; their sums are dropped */
    struct planar_job job = {.P = P, .err = err, .x = x, .s = s, .tap_off = tap_off, .g = g, .taps = taps, .to = to,
                             .opad = opad, .tpad = tpad, .accumulate = accumulate};
    for (int t = 0; t < (int)ctx->threads; t++) {   /* each thread's planes, from its own scratch */
        struct dspt_ctx *tc = dspt_thread_ctx(ctx, t);
        if (!tc) return DSPT_NO_SUPPORT;
        job.px[t] = dspt_scratch(tc, (uint32_t)(s->c * P.xstride));
        job.pe[t] = dspt_scratch(tc, (uint32_t)(s->o * P.estride));
        job.tmp[t] = dspt_scratch(tc, tmp_bytes);
        job.part[t] = t ? dspt_scratch(tc, dw_words * 4) : dw;
        if (!job.px[t] || !job.pe[t] || !job.tmp[t] || !job.part[t]) return DSPT_NO_SUPPORT;
    }
    int status = dspt_run_shares(ctx, planar_share, &job), shares = 0;
    for (int t = 0; t < (int)ctx->threads; t++) {   /* the threads that had work (idle ones come last) */
        int lo, hi;
        dspt_share(ctx, s->n, 1, t, &lo, &hi);
        shares += lo < hi;
    }
    return status ? status : dspt_join_partials(ctx, dw, job.part, shares, dw_words);
}
