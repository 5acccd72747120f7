/* conv_lanes.c: forward convolution of few-channel inputs with output pixels in the lanes.
 *
 * conv.c puts output channels in vrmpy's 32 lanes and an im2col row in the scalar: a
 * LeNet conv with 6 outputs fills 6 lanes of 32 and copies 5 window rows per pixel.
 * Here the roles swap: the lanes hold 32 output pixels of one output row, the scalar
 * holds 4 weights of one output channel, so every lane works for any O. For stride 1
 * and C <= 4 channels the vector for kernel row i and weight word g is the same for every
 * output row reading input row r = oh + i: lane p holds the 4 bytes at p * C' + 4g of
 * padded row r (C' = 1, or 4 with channels 2 and 3 padded with zeros), so each input
 * row is laid out once per image ("the table", 4 shifted loads interleaved for C' = 1, an
 * unaligned load for C' = 4) and read by KH output rows. The image goes in biased
 * (x + 128, unsigned for vrmpy); the bias comes back out per channel as -128 * sum(w[o]).
 * Accumulators (channels x pixels) are transposed to NHWC with vshuff stages and, when O
 * is not a power of two, compacted with one vrdelta (a monotone route on the inverse
 * butterfly, the construction of Hilewitz and Lee's parallel extract, ASAP 2006).
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "conv.h"
#include "conv_common.h"
#include "threads.h"

#define MAX_ROWS 4         /* output rows sharing each weight word (loads: T + R per R*T vrmpy) */
#define MAX_TILE 12        /* output channels per accumulator tile */
#define MAX_ACC 24         /* R * T accumulators stay in the 32 vector registers */

struct lanes {
    int cp, groups, blocks;        /* C' (1 or 4), weight words per kernel row, pixel blocks per row */
    int hp, wp, row_bytes;         /* padded image rows and columns, bytes of one padded row */
    int opad;                      /* O rounded up to whole tiles */
    int32_t *wq;                   /* [kh][groups][opad] weight words */
    int32_t *corr;                 /* [opad] -128 * sum of w[o] */
};

/* Weight words: word (i, g, o) holds w[o, i, kw, c] for the 4 bytes 4g + t = kw * C' + c
 * (zero for padded channels and taps past KW); the bias correction of each channel. */
static void pack_weights(struct lanes *L, const int8_t *w, const struct conv_shape *s)
{
    for (int o = 0; o < L->opad; o++) {
        int32_t sum = 0;
        for (int i = 0; i < s->kh; i++)
            for (int g = 0; g < L->groups; g++) {
                uint32_t word = 0;
                for (int t = 0; t < 4; t++) {
                    int b = 4 * g + t, kw = b / L->cp, c = b % L->cp;
                    int8_t v = (o < s->o && kw < s->kw && c < s->c) ? w[((o * s->kh + i) * s->kw + kw) * s->c + c] : 0;
                    sum += v;
                    word |= (uint32_t)(uint8_t)v << (8 * t);
                }
                L->wq[(i * L->groups + g) * L->opad + o] = (int32_t)word;
            }
        L->corr[o] = -128 * sum;
    }
}

/* The table of image n: for every padded row r, word group g and pixel block b, the
 * vector whose lane p holds bytes (32b + p) * C' + 4g .. +3 of row r, biased. */
static void build_table(const struct lanes *L, HVX_Vector *tab, int8_t *row, const int8_t *x,
                        const struct conv_shape *s, int n)
{
    const int8_t *img = x + (size_t)n * s->h * s->w * s->c;
    HVX_Vector bias = Q6_V_vsplat_R((int)0x80808080u);
    if (L->cp == 1 && L->blocks == 1 && L->wp + 4 * L->groups <= HVX_BYTES && L->groups <= 8) {
        /* a padded row fits one vector: built and shifted in registers */
        HVX_VectorPred inside = Q6_Q_and_QQn(Q6_Q_vsetq2_R((uint32_t)(s->pad + s->w)), Q6_Q_vsetq_R((uint32_t)s->pad));
        for (int r = 0; r < L->hp; r++) {
            int h = r - s->pad;
            HVX_Vector v = bias;
            if (h >= 0 && h < s->h) {
                HVX_Vector src = Q6_V_vxor_VV(hvx_load_u(img + h * s->w), bias);   /* past w: masked below */
                v = Q6_V_vmux_QVV(inside, Q6_V_vlalign_VVR(src, src, (uint32_t)s->pad), bias);
            }
            /* positions 0 .. 63 interleaved (both halves of the last vshuff); group g is
             * the same words 4g positions on */
            HVX_Vector s1 = Q6_V_valign_VVR(bias, v, 1), s2 = Q6_V_valign_VVR(bias, v, 2), s3 = Q6_V_valign_VVR(bias, v, 3);
            HVX_Vector p01 = Q6_V_lo_W(Q6_W_vshuff_VVR(s1, v, -1)), p23 = Q6_V_lo_W(Q6_W_vshuff_VVR(s3, s2, -1));
            HVX_VectorPair words = Q6_W_vshuff_VVR(p23, p01, -2);
            HVX_Vector lo = Q6_V_lo_W(words), hi = Q6_V_hi_W(words);
            for (int g = 0; g < L->groups; g++) tab[r * L->groups + g] = g ? Q6_V_valign_VVR(hi, lo, 16 * g) : lo;
        }
        return;
    }
    for (int r = 0; r < L->hp; r++) {
        int h = r - s->pad;
        for (int i = 0; i < L->row_bytes; i += HVX_BYTES) hvx_store_u(row + i, bias);   /* zeros, biased */
        if (h >= 0 && h < s->h) {
            const int8_t *src = img + h * s->w * s->c;
            int8_t *dst = row + s->pad * L->cp;
            if (L->cp == s->c) {
                for (int i = 0; i < s->w * s->c; i += HVX_BYTES) {
                    uint32_t n8 = (uint32_t)(s->w * s->c - i < HVX_BYTES ? s->w * s->c - i : HVX_BYTES);
                    hvx_store_bytes(dst + i, Q6_V_vxor_VV(hvx_load_bytes(src + i, n8), bias), n8);
                }
            } else {   /* 2 or 3 channels spread to 4 (the fourth stays a biased zero) */
                for (int x0 = 0; x0 < s->w; x0++)
                    for (int c = 0; c < s->c; c++) dst[x0 * 4 + c] = (int8_t)(src[x0 * s->c + c] ^ 0x80);
            }
        }
        HVX_Vector *out = tab + (size_t)r * L->groups * L->blocks;
        for (int g = 0; g < L->groups; g++)
            for (int b = 0; b < L->blocks; b++) {
                const int8_t *at = row + 32 * b * L->cp + 4 * g;
                out[g * L->blocks + b] = L->cp == 4 ? hvx_load_u(at)
                    : hvx_interleave4b(hvx_load_u(at), hvx_load_u(at + 1), hvx_load_u(at + 2), hvx_load_u(at + 3));
            }
    }
}

/* R output rows x T channels of accumulators over one pixel block, started at the
 * channels' corrections: for each (kernel row, word group) step k, the vector at byte
 * offset off[k] from base (+ rr * rstride bytes for row rr) times the T weight words
 * wq[k * opad + t]. Inlined with constant R and T, acc stays in registers. */
static inline __attribute__((always_inline)) void accumulate_tile(
    const int R, const int T, HVX_Vector acc[MAX_ROWS][MAX_TILE], const int8_t *base, int rstride,
    const int32_t *off, int kg, const int32_t *wq, int opad, const int32_t *corr)
{
    for (int rr = 0; rr < R; rr++)
        for (int t = 0; t < T; t++) acc[rr][t] = Q6_V_vsplat_R(corr[t]);
    for (int k = 0; k < kg; k++) {
        const int8_t *v = base + off[k];
        const int32_t *w = wq + k * opad;
        HVX_Vector vr[MAX_ROWS];
        for (int rr = 0; rr < R; rr++) vr[rr] = hvx_load_u(v + rr * rstride);
        for (int t = 0; t < T; t++) {
            int32_t word = w[t];
            for (int rr = 0; rr < R; rr++) acc[rr][t] = Q6_Vw_vrmpyacc_VwVubRb(acc[rr][t], vr[rr], word);
        }
    }
}

/* accumulate_tile into yt[rr * ytstride + t]. */
static inline __attribute__((always_inline)) void tile(
    const int R, const int T, HVX_Vector *yt, int ytstride, const int8_t *base, int rstride,
    const int32_t *off, int kg, const int32_t *wq, int opad, const int32_t *corr)
{
    HVX_Vector acc[MAX_ROWS][MAX_TILE];
    accumulate_tile(R, T, acc, base, rstride, off, kg, wq, opad, corr);
    for (int rr = 0; rr < R; rr++)
        for (int t = 0; t < T; t++) yt[rr * ytstride + t] = acc[rr][t];
}

/* Tile widths compiled with constant trip counts (the accumulators stay in registers). */
int dspt_lanes_tile_width(int left)
{
    static const int widths[] = {2, 4, 6, 8, 12};
    for (int i = 0; i < 5; i++)
        if (left <= widths[i]) return widths[i];
    return 12;
}

void dspt_lanes_tile(int R, int T, HVX_Vector *yt, int ytstride, const int8_t *base, int rstride,
                     const int32_t *off, int kg, const int32_t *wq, int opad, const int32_t *corr)
{
#define ROWS(r, t) tile(r, t, yt, ytstride, base, rstride, off, kg, wq, opad, corr)
#define CASE(t) \
    case t: if (R == 4 && 4 * t <= MAX_ACC) ROWS(4, t); else if (R == 2) ROWS(2, t); else ROWS(1, t); break;
    switch (T) { CASE(2) CASE(4) CASE(6) CASE(8) CASE(12) default: break; }
#undef CASE
#undef ROWS
}

/* One stage of to_pixel_major: channel groups of s (s vectors each) paired into groups of
 * 2s with vshuff of 4s-byte elements. */
static inline __attribute__((always_inline)) void pair_groups(const int P, const int s, const HVX_Vector *src,
                                                               HVX_Vector *dst)
{
#pragma clang loop unroll(full)
    for (int k = 0; k < P / (2 * s); k++)
#pragma clang loop unroll(full)
        for (int j = 0; j < s; j++) {
            HVX_VectorPair pr = Q6_W_vshuff_VVR(src[(2 * k + 1) * s + j], src[2 * k * s + j], -4 * s);
            dst[2 * k * s + 2 * j] = Q6_V_lo_W(pr);
            dst[2 * k * s + 2 * j + 1] = Q6_V_hi_W(pr);
        }
}

/* vrdelta control moving bytes (q * 4P + b, b < 4 * oc) to q * 4 * oc + b (util.c routes
 * it, once per shape). */
void dspt_lanes_compaction(uint8_t ctrl[128], int oc, int P)
{
    dspt_restride_control(ctrl, 4 * oc, 4 * P, 4 * oc, 32 / P);
}

/* yt[o] (pixel lanes) -> stage[p][o] for pixels p < npx, channels c0 .. c0+oc-1 of O.
 * The stage is private: when a tile holds all O channels (or 32) its vectors are stored
 * whole, all 32 pixels, in address order: what lands past pixel npx or past a tile is
 * overwritten by the next block, row or tile, or falls in the stage's slack. */
static inline __attribute__((always_inline)) void store_tile(
    const int P, int32_t *stage, int O, int c0, int oc, const HVX_Vector *yt, int npx, HVX_Vector ctrl)
{
    /* v[0 .. P-1] (channels, 32 pixel lanes each) -> P vectors of 32/P pixels x P words
     * in pixel order, one array per stage: constant indices keep them in registers (a
     * pointer to either of two arrays, or a copy loop, would put them in memory) */
    HVX_Vector s0[32], s1[32], s2[32], s3[32], s4[32], s5[32];
#pragma clang loop unroll(full)
    for (int t = 0; t < P; t++) s0[t] = t < oc ? yt[c0 + t] : Q6_V_vzero();
    if (P > 1) pair_groups(P, 1, s0, s1);
    if (P > 2) pair_groups(P, 2, s1, s2);
    if (P > 4) pair_groups(P, 4, s2, s3);
    if (P > 8) pair_groups(P, 8, s3, s4);
    if (P > 16) pair_groups(P, 16, s4, s5);
    HVX_Vector *v = P == 1 ? s0 : P == 2 ? s1 : P == 4 ? s2 : P == 8 ? s3 : P == 16 ? s4 : s5;
    const int per = 32 / P;
    if (oc == O || oc == 32) {   /* whole vectors, straight-line: tails land where later stores go */
#pragma clang loop unroll(full)
        for (int j = 0; j < P; j++)
            hvx_store_u(stage + j * per * O + c0, oc < P ? Q6_V_vrdelta_VV(v[j], ctrl) : v[j]);
        return;
    }
    for (int j = 0; j * per < npx; j++)   /* a ragged tile of many channels: pixel by pixel */
        for (int q = 0; q < per && j * per + q < npx; q++)
            hvx_store_bytes(stage + (j * per + q) * O + c0, Q6_V_valign_VVR(v[j], v[j], 4 * P * q), (uint32_t)oc * 4);
}

/* store_tile for 5 to 8 channels, written out: three vshuff stages, one vrdelta and one
 * store per 4 pixels, nothing in memory between (the generic form's arrays spill). */
static inline __attribute__((always_inline)) void store8_regs(
    int32_t *stage, int O, HVX_Vector v0, HVX_Vector v1, HVX_Vector v2, HVX_Vector v3, HVX_Vector v4,
    HVX_Vector v5, HVX_Vector v6, HVX_Vector v7, HVX_Vector ctrl)
{
    HVX_VectorPair a = Q6_W_vshuff_VVR(v1, v0, -4), b = Q6_W_vshuff_VVR(v3, v2, -4);
    HVX_VectorPair c = Q6_W_vshuff_VVR(v5, v4, -4), d = Q6_W_vshuff_VVR(v7, v6, -4);
    HVX_VectorPair e0 = Q6_W_vshuff_VVR(Q6_V_lo_W(b), Q6_V_lo_W(a), -8);
    HVX_VectorPair e1 = Q6_W_vshuff_VVR(Q6_V_hi_W(b), Q6_V_hi_W(a), -8);
    HVX_VectorPair f0 = Q6_W_vshuff_VVR(Q6_V_lo_W(d), Q6_V_lo_W(c), -8);
    HVX_VectorPair f1 = Q6_W_vshuff_VVR(Q6_V_hi_W(d), Q6_V_hi_W(c), -8);
    HVX_VectorPair g0 = Q6_W_vshuff_VVR(Q6_V_lo_W(f0), Q6_V_lo_W(e0), -16);
    HVX_VectorPair g1 = Q6_W_vshuff_VVR(Q6_V_hi_W(f0), Q6_V_hi_W(e0), -16);
    HVX_VectorPair g2 = Q6_W_vshuff_VVR(Q6_V_lo_W(f1), Q6_V_lo_W(e1), -16);
    HVX_VectorPair g3 = Q6_W_vshuff_VVR(Q6_V_hi_W(f1), Q6_V_hi_W(e1), -16);
    int step = 4 * O;   /* words per 4 pixels */
#define PUT(j, v) hvx_store_u(stage + (j) * step, O < 8 ? Q6_V_vrdelta_VV(v, ctrl) : (v))
    PUT(0, Q6_V_lo_W(g0)); PUT(1, Q6_V_hi_W(g0)); PUT(2, Q6_V_lo_W(g1)); PUT(3, Q6_V_hi_W(g1));
    PUT(4, Q6_V_lo_W(g2)); PUT(5, Q6_V_hi_W(g2)); PUT(6, Q6_V_lo_W(g3)); PUT(7, Q6_V_hi_W(g3));
#undef PUT
}

static void store8(int32_t *stage, int O, const HVX_Vector *yt, HVX_Vector ctrl)
{
    HVX_Vector z = Q6_V_vzero();
    store8_regs(stage, O, yt[0], yt[1], yt[2], yt[3], yt[4], O > 5 ? yt[5] : z, O > 6 ? yt[6] : z,
                O > 7 ? yt[7] : z, ctrl);
}

/* tile() and store8 in one for 5 to 8 channels in one tile (T = 6 or 8) of one pixel
 * block: each row's accumulators go from registers through the shuffles to out (row rr
 * at out + rr * rowstride), never through memory. */
static inline __attribute__((always_inline)) void tile_store8(
    const int R, const int T, int32_t *out, int rowstride, int O, const int8_t *base, int rstride,
    const int32_t *off, int kg, const int32_t *wq, int opad, const int32_t *corr, HVX_Vector ctrl)
{
    HVX_Vector acc[MAX_ROWS][MAX_TILE], z = Q6_V_vzero();
    accumulate_tile(R, T, acc, base, rstride, off, kg, wq, opad, corr);
    for (int rr = 0; rr < R; rr++)   /* channels past O: zero weights and correction, so zeros */
        store8_regs(out + rr * rowstride, O, acc[rr][0], acc[rr][1], acc[rr][2], acc[rr][3], acc[rr][4],
                    acc[rr][5], T > 6 ? acc[rr][6] : z, T > 6 ? acc[rr][7] : z, ctrl);
}

static void lanes_tile_store8(int R, int T, int32_t *out, int rowstride, int O, const int8_t *base, int rstride,
                              const int32_t *off, int kg, const int32_t *wq, int opad, const int32_t *corr,
                              HVX_Vector ctrl)
{
#define F(r, t) tile_store8(r, t, out, rowstride, O, base, rstride, off, kg, wq, opad, corr, ctrl)
    if (T == 6) { if (R == 4) F(4, 6); else if (R == 2) F(2, 6); else F(1, 6); }
    else { if (R == 2) F(2, 8); else F(1, 8); }
#undef F
}

void dspt_lanes_store(int32_t *stage, int O, const HVX_Vector *yt, int npx, const HVX_Vector *ctrl)
{
    if (O > 4 && O <= 8) { store8(stage, O, yt, *ctrl); return; }
    for (int c0 = 0; c0 < O; c0 += 32) {
        int oc = O - c0 < 32 ? O - c0 : 32, P = 1;
        while (P < oc) P <<= 1;
        HVX_Vector c = *ctrl;
        switch (P) {
        case 1: store_tile(1, stage, O, c0, oc, yt, npx, c); break;
        case 2: store_tile(2, stage, O, c0, oc, yt, npx, c); break;
        case 4: store_tile(4, stage, O, c0, oc, yt, npx, c); break;
        case 8: store_tile(8, stage, O, c0, oc, yt, npx, c); break;
        case 16: store_tile(16, stage, O, c0, oc, yt, npx, c); break;
        default: store_tile(32, stage, O, c0, oc, yt, npx, c); break;
        }
    }
}

/* dst[i] += src[i] for i < n (DSPT_F_ACCUMULATE) */
void dspt_add_words(int32_t *dst, const int32_t *src, uint32_t n)
{
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) hvx_store_u(dst + i, Q6_Vw_vadd_VwVw(hvx_load_u(dst + i), hvx_load_u(src + i)));
    if (i < n)
        hvx_store_bytes(dst + i, Q6_Vw_vadd_VwVw(hvx_load_bytes(dst + i, (n - i) * 4), hvx_load_bytes(src + i, (n - i) * 4)),
                        (n - i) * 4);
}

int dspt_conv_lanes_fits(const struct conv_shape *s)
{
    /* C = 2 .. 4 computes (channels spread to 4 words) but measured slower than conv.c's
     * path on VGG's first conv (3 -> 64): one channel only */
    return s->stride == 1 && s->c == 1 && s->kw <= 64;
}

/* Output rows [lo, hi) of thread t (threads.h), through its own table, row and accumulators. */
struct lanes_job {
    struct lanes L;   /* a copy: the kernel's own stays unescaped, its fields known to the compiler */
    int32_t *y;
    const int8_t *x;
    const struct conv_shape *s;
    int accumulate, rows, most, rstride, kg, ytrow;
    const int32_t *off;
    const HVX_Vector *ctrl;
    HVX_Vector *tab[DSPT_MAX_THREADS], *yt[DSPT_MAX_THREADS];
    int8_t *row[DSPT_MAX_THREADS];
    int32_t *stage[DSPT_MAX_THREADS];
};

static int lanes_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct lanes_job *J = job;
    const struct lanes L = J->L;
    const struct conv_shape *s = J->s;
    const int8_t *x = J->x;
    int32_t *y = J->y;
    const int32_t *off = J->off;
    const HVX_Vector *ctrl = J->ctrl;
    int accumulate = J->accumulate, most = J->most, rstride = J->rstride, kg = J->kg, ytrow = J->ytrow;
    HVX_Vector *tab = J->tab[t], *yt = J->yt[t];
    int8_t *row = J->row[t];
    int32_t *stage = J->stage[t];
    int lo, hi;
    /* 5 to 8 channels, one tile, one pixel block: accumulators to y through registers */
    int fused = L.blocks == 1 && s->o > 4 && s->o <= 8;
    dspt_share(tc, J->rows, 1, t, &lo, &hi);
    int image = -1, n = lo / s->oh, oh = lo % s->oh;   /* divide once, then step */
    for (int r0 = lo; r0 < hi;) {
        int left = hi - r0 < s->oh - oh ? hi - r0 : s->oh - oh;
        int R = left >= 4 && most == 4 ? 4 : (left >= 2 ? 2 : 1);
        if (n != image) { build_table(&L, tab, row, x, s, n); image = n; }
        int32_t *dst = y + (size_t)r0 * s->ow * s->o;
        uint32_t words = (uint32_t)(R * s->ow * s->o);
        /* straight into y while this share's rows after these cover what the whole-vector
         * stores write past them (up to 32 pixels and a vector); else through the stage */
        int direct = !accumulate && (hi - r0 - R) * s->ow * s->o >= 32 * s->o + 32;
        int32_t *out = direct ? dst : stage;
        if (fused) {   /* rows in address order: each store's tail is overwritten */
            lanes_tile_store8(R, dspt_lanes_tile_width(s->o), out, s->ow * s->o, s->o,
                              (const int8_t *)(tab + (size_t)oh * rstride), rstride * HVX_BYTES, off, kg, L.wq,
                              L.opad, L.corr, *ctrl);
        } else {
            for (int b = 0; b < L.blocks; b++) {
                const HVX_Vector *base = tab + (size_t)oh * rstride + b;
                int o0 = 0;
                for (int rest = s->o; rest > 0; rest -= dspt_lanes_tile_width(rest)) {
                    int T = dspt_lanes_tile_width(rest);
                    dspt_lanes_tile(R, T, yt + b * L.opad + o0, ytrow, (const int8_t *)base, rstride * HVX_BYTES, off,
                                    kg, L.wq + o0, L.opad, L.corr + o0);
                    o0 += T;
                }
            }
            for (int rr = 0; rr < R; rr++)   /* in address order: each store's tail is overwritten */
                for (int b = 0; b < L.blocks; b++) {
                    int npx = s->ow - 32 * b < 32 ? s->ow - 32 * b : 32;
                    dspt_lanes_store(out + (rr * s->ow + 32 * b) * s->o, s->o, yt + rr * ytrow + b * L.opad, npx, ctrl);
                }
        }
        if (accumulate) dspt_add_words(dst, stage, words);
        else if (!direct) hvx_copy(dst, stage, words * 4);
        r0 += R;
        oh += R;
        if (oh == s->oh) { oh = 0; n++; }
    }
    return DSPT_OK;
}

int dspt_conv_lanes(struct dspt_ctx *ctx, int32_t *y, const int8_t *x, const int8_t *w,
                    const struct conv_shape *s, int accumulate)
{
    struct lanes L;
    L.cp = s->c == 1 ? 1 : 4;
    L.groups = (s->kw * L.cp + 3) / 4;
    L.blocks = (s->ow + 31) / 32;
    L.hp = s->h + 2 * s->pad;
    L.wp = s->w + 2 * s->pad;
    /* the table reads up to (32 * blocks + 3) * C' + 4 * groups bytes of a row */
    int need = (32 * L.blocks + 4) * L.cp + 4 * L.groups, have = L.wp * L.cp;
    L.row_bytes = ((need > have ? need : have) + 2 * HVX_BYTES - 1) & ~(HVX_BYTES - 1);
    L.opad = 0;
    for (int left = s->o; left > 0; left -= dspt_lanes_tile_width(left)) L.opad += dspt_lanes_tile_width(left);
    L.wq = dspt_scratch(ctx, (uint32_t)L.opad * s->kh * L.groups * 4);
    L.corr = dspt_scratch(ctx, (uint32_t)L.opad * 4);
    HVX_Vector *ctrl = dspt_scratch(ctx, HVX_BYTES);
    int kg = s->kh * L.groups;
    int32_t *off = dspt_scratch(ctx, (uint32_t)kg * 4);
    int rstride = L.groups * L.blocks;
    uint32_t tab_bytes = (uint32_t)L.hp * rstride * HVX_BYTES;
    if (!L.wq || !L.corr || !ctrl || !off) return DSPT_NO_SUPPORT;
    pack_weights(&L, w, s);
    for (int i = 0; i < s->kh; i++)
        for (int g = 0; g < L.groups; g++) off[i * L.groups + g] = (i * rstride + g * L.blocks) * HVX_BYTES;
    int last = s->o % 32, P = 1;
    while (P < last) P <<= 1;
    if (last && last < P) dspt_lanes_compaction((uint8_t *)ctrl, last, P);
    int rows = s->n * s->oh, widest = 0;
    for (int left = s->o; left > 0; left -= dspt_lanes_tile_width(left)) widest = dspt_lanes_tile_width(left) > widest ? dspt_lanes_tile_width(left) : widest;
    int most = MAX_ACC / widest >= 4 ? 4 : 2;   /* output rows per pass */
    uint32_t yt_bytes = (uint32_t)most * L.blocks * L.opad * HVX_BYTES;
    int ytrow = L.blocks * L.opad;              /* yt: [row][block][channel] vectors */
    struct lanes_job job = {.L = L, .y = y, .x = x, .s = s, .accumulate = accumulate, .rows = rows, .most = most,
                            .rstride = rstride, .kg = kg, .ytrow = ytrow, .off = off, .ctrl = ctrl};
    for (int t = 0; t < (int)ctx->threads; t++) {   /* each thread's table, row and accumulators */
        struct dspt_ctx *tc = dspt_thread_ctx(ctx, t);
        if (!tc) return DSPT_NO_SUPPORT;
        job.tab[t] = dspt_scratch(tc, tab_bytes);
        job.yt[t] = dspt_scratch(tc, yt_bytes);
        job.row[t] = dspt_scratch(tc, (uint32_t)L.row_bytes);
        job.stage[t] = dspt_scratch(tc, (uint32_t)(most * s->ow + 32) * s->o * 4 + HVX_BYTES);
        if (!job.tab[t] || !job.yt[t] || !job.row[t] || !job.stage[t]) return DSPT_NO_SUPPORT;
    }
    return dspt_run_shares(ctx, lanes_share, &job);
}
