/* conv_taps.c: forward convolution of one-channel inputs with 4 to 7 outputs (LeNet's
 * first conv: 1 -> 6, 5x5), the weights in the vector and the image in the scalar.
 *
 * conv_lanes.c puts 32 output pixels in vrmpy's lanes and 4 taps of one channel in the
 * scalar: each image row is first laid out as interleaved words (its table), and the
 * accumulators (channels x pixels) are transposed to NHWC afterwards. Here the lanes are
 * 4 consecutive output pixels j x 8 channel slots o, and the scalar is a word of the
 * image row, read in place: the vector for kernel row i and word u holds in lane (j, o)
 * the taps t = 4u + b - j (byte b) of w[o, i] that meet bytes 4u .. 4u + 3 of the four
 * pixels' window row (zeros where t is outside the kernel), biased (w + 128, unsigned for
 * vrmpy). The accumulators are NHWC already: pixel-major, channels in the lanes. Slot O
 * holds 1s at the valid taps, so its lane sums the window, S_j: a vrdelta copies it over
 * the pixel's lanes to take the bias's 128 S_j back out, and a second (the compaction of
 * dspt_lanes_compaction) closes the gap of the unused slots before the store. No table,
 * no transpose. Rows are read in place when they need no padding and hold whole words,
 * else from a zero-bordered copy of the image made once per image.
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "conv.h"
#include "conv_common.h"
#include "threads.h"

#define SLOTS 8        /* channel slots per pixel: 4 pixels x 8 words fill the 32 lanes */
#define MAX_WORDS 4    /* image words per window row: kw + 3 <= 16 */
#define MAX_GROUPS 8   /* groups of 4 pixels per register tile: 8 accumulators */

int dspt_conv_taps_fits(const struct conv_shape *s)
{
    return s->stride == 1 && s->c == 1 && s->o >= 4 && s->o < SLOTS && s->kw + 3 <= 4 * MAX_WORDS;
}

struct taps_job {
    int32_t *y;
    const int8_t *x;
    const struct conv_shape *s;
    const HVX_Vector *wv;            /* [kh][nw] weight vectors */
    HVX_Vector bcast, compact;       /* vrdelta controls: S over the pixel's lanes; O of 8 slots kept */
    int nw, groups, rs, accumulate;  /* words per window row, pixel groups per output row, row stride */
    int whole;                       /* groups stored as whole vectors: 4 g O + 32 <= OW O words */
    int in_place;                    /* x's rows read where they are (no padding, rows of whole words) */
    uint32_t copy_bytes;             /* else a thread's image copy with its border and slack */
    int8_t *img[DSPT_MAX_THREADS];   /* each thread's zero-bordered copy of one image */
};

/* Groups g0 .. g0 + TG - 1 (pixels 4g .. 4g + 3) of `rows` consecutive output rows of one
 * image, row r at y + r * OW * O, its window rows at src + r * rs (rs bytes apart): NW
 * words of each window row per group, NW a constant where it is 2 (LeNet's 5 taps), else
 * (NW = 0) the job's. Groups past the row are computed, not stored. */
static inline __attribute__((always_inline)) void taps_tile(
    const int TG, const int NW, const struct taps_job *j, int32_t *y, const int8_t *src, int rows, int g0)
{
    /* locals: the stores through y may alias *j as far as the compiler knows */
    const struct conv_shape *s = j->s;
    const int nw = NW ? NW : j->nw, kh = s->kh, o = s->o, ow = s->ow, groups = j->groups, rs = j->rs;
    const int acc_y = j->accumulate, whole = j->whole, row_words = ow * o;   /* whole: 0 when acc_y */
    const HVX_Vector *wv = j->wv;
    const HVX_Vector bcast = j->bcast, compact = j->compact;
    for (int r = 0; r < rows; r++, y += row_words, src += rs) {
        HVX_Vector acc[MAX_GROUPS];
        for (int g = 0; g < TG; g++) acc[g] = Q6_V_vzero();
        for (int i = 0; i < kh; i++) {
            const int32_t *row = (const int32_t *)(src + i * rs) + g0;
            if (NW) {   /* each word loaded once, used by NW groups */
                int32_t xw[MAX_GROUPS + MAX_WORDS - 1];
                for (int q = 0; q < TG + NW - 1; q++) xw[q] = row[q];
                for (int u = 0; u < NW; u++) {
                    HVX_Vector v = wv[i * NW + u];
                    for (int g = 0; g < TG; g++) acc[g] = Q6_Vw_vrmpyacc_VwVubRb(acc[g], v, xw[g + u]);
                }
            } else {
                for (int u = 0; u < nw; u++) {
                    HVX_Vector v = wv[i * nw + u];
                    for (int g = 0; g < TG; g++) acc[g] = Q6_Vw_vrmpyacc_VwVubRb(acc[g], v, row[g + u]);
                }
            }
        }
        /* all groups' results first, then the stores: nothing between them for the
         * scheduler to wait on (one permute a packet: two per group) */
#pragma clang loop unroll(full)
        for (int g = 0; g < TG; g++) {
            HVX_Vector sum = Q6_V_vrdelta_VV(acc[g], bcast);   /* S_j in every lane of pixel j */
            acc[g] = Q6_V_vrdelta_VV(Q6_Vw_vsub_VwVw(acc[g], Q6_Vw_vasl_VwR(sum, 7)), compact);
        }
#pragma clang loop unroll(full)
        for (int g = 0; g < TG; g++)   /* whole vectors within the row: later groups overwrite the tails */
            if (g0 + g < whole) hvx_store_u(y + 4 * (g0 + g) * o, acc[g]);
#pragma clang loop unroll(full)
        for (int g = 0; g < TG; g++) {   /* the row's last groups (every group when accumulating): exact */
            int gq = g0 + g;
            if (gq < whole || gq >= groups) continue;
            int px = ow - 4 * gq < 4 ? ow - 4 * gq : 4;
            uint32_t bytes = (uint32_t)(px * o * 4);
            int32_t *dst = y + 4 * gq * o;
            HVX_Vector v = acc[g];
            if (acc_y) v = Q6_Vw_vadd_VwVw(v, hvx_load_bytes(dst, bytes));
            hvx_store_bytes(dst, v, bytes);
        }
    }
}

/* One compiled tile per width (its accumulators its own registers), NW 2 or any. */
typedef void (*taps_fn)(const struct taps_job *, int32_t *, const int8_t *, int, int);
#define TILE(tg) \
    static __attribute__((noinline)) void tile_##tg##_2(const struct taps_job *j, int32_t *y, const int8_t *src, \
                                                       int rows, int g0) { taps_tile(tg, 2, j, y, src, rows, g0); } \
    static __attribute__((noinline)) void tile_##tg##_n(const struct taps_job *j, int32_t *y, const int8_t *src, \
                                                       int rows, int g0) { taps_tile(tg, 0, j, y, src, rows, g0); }
TILE(1) TILE(2) TILE(3) TILE(4) TILE(5) TILE(6) TILE(7) TILE(8)
#undef TILE
static const taps_fn tiles[2][MAX_GROUPS] = {
    {tile_1_n, tile_2_n, tile_3_n, tile_4_n, tile_5_n, tile_6_n, tile_7_n, tile_8_n},
    {tile_1_2, tile_2_2, tile_3_2, tile_4_2, tile_5_2, tile_6_2, tile_7_2, tile_8_2},
};

/* `rows` output rows of one image in tiles of up to MAX_GROUPS groups. */
static void taps_rows(const struct taps_job *j, int32_t *y, const int8_t *src, int rows)
{
    for (int g0 = 0; g0 < j->groups; g0 += MAX_GROUPS) {
        int width = j->groups - g0 < MAX_GROUPS ? j->groups - g0 : MAX_GROUPS;
        tiles[j->nw == 2][width - 1](j, y, src, rows, g0);
    }
}

/* Image n's rows into the copy's interior (the border was zeroed once, by the share's
 * first image). A padded row within a vector is stored as one whole vector, its lanes
 * outside the row's pixels zeros, in address order: what it writes past the row is
 * border, or the next row's, written after (the copy keeps a vector of slack). */
static void copy_image(const struct taps_job *j, int8_t *img, int n)
{
    const struct conv_shape *s = j->s;
    const int w = s->w, rs = j->rs, pad = s->pad;
    const int8_t *src = j->x + (size_t)n * s->h * w;
    if (rs <= HVX_BYTES) {
        HVX_VectorPred inside = Q6_Q_and_QQn(Q6_Q_vsetq2_R((uint32_t)(pad + w)), Q6_Q_vsetq_R((uint32_t)pad));
        int8_t *dst = img + pad * rs;
        for (int h = 0; h < s->h; h++) {
            HVX_Vector v = hvx_load_u(src + h * w);   /* past the row: masked */
            hvx_store_u(dst + h * rs, Q6_V_vmux_QVV(inside, Q6_V_vlalign_VVR(v, v, (uint32_t)pad), Q6_V_vzero()));
        }
        return;
    }
    int8_t *dst = img + pad * rs + pad;
    for (int h = 0; h < s->h; h++)
        for (int x0 = 0; x0 < w; x0 += HVX_BYTES) {
            uint32_t bytes = (uint32_t)(w - x0 < HVX_BYTES ? w - x0 : HVX_BYTES);
            hvx_store_bytes(dst + h * rs + x0, hvx_load_bytes(src + h * w + x0, bytes), bytes);
        }
}

static int taps_share(struct dspt_ctx *tc, int t, void *arg)
{
    const struct taps_job *j = arg;
    const struct conv_shape *s = j->s;
    int lo, hi;
    dspt_share(tc, s->n * s->oh, 1, t, &lo, &hi);   /* thread t: output rows [lo, hi) */
    if (lo < hi && !j->in_place) hvx_zero(j->img[t], j->copy_bytes);
    for (int r = lo; r < hi;) {   /* each image's rows of the share */
        int n = r / s->oh, oh = r % s->oh, rows = s->oh - oh < hi - r ? s->oh - oh : hi - r;
        const int8_t *img = j->x + (size_t)n * s->h * s->w;
        if (!j->in_place) {
            copy_image(j, j->img[t], n);
            img = j->img[t];
        }
        taps_rows(j, j->y + (size_t)r * s->ow * s->o, img + oh * j->rs, rows);
        r += rows;
    }
    return DSPT_OK;
}

/* Weight vector (i, u): lane (j, o) byte b holds w[o, i, 4u + b - j] + 128 (unsigned), 1 in
 * slot O (the window's sum), zero past the kernel's taps and in the slots after O. Lane
 * (j, o) is the 4 bytes at 4u + 3 - j of channel o's tap row laid out with 3 zeros before
 * and after (taps[o]), so each lane is one word put together from bytes. */
static void weight_vectors(HVX_Vector *wv, const int8_t *w, const struct conv_shape *s, int nw)
{
    uint8_t taps[SLOTS][4 * MAX_WORDS + 4];
    const int kw = s->kw, o_n = s->o;
    for (int o = 0; o < SLOTS; o++)
        for (int p = 0; p < 4 * nw + 4; p++) taps[o][p] = 0;
    for (int i = 0; i < s->kh; i++) {
        for (int t = 0; t < kw; t++) {
            for (int o = 0; o < o_n; o++) taps[o][t + 3] = (uint8_t)(w[(o * s->kh + i) * kw + t] ^ 0x80);
            taps[o_n][t + 3] = 1;
        }
        for (int u = 0; u < nw; u++) {
            uint32_t *v = (uint32_t *)&wv[i * nw + u];
            for (int j = 0; j < 4; j++)
                for (int o = 0; o < SLOTS; o++) {
                    const uint8_t *b = &taps[o][4 * u + 3 - j];
                    v[SLOTS * j + o] = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
                }
        }
    }
}

int dspt_conv_taps(struct dspt_ctx *ctx, int32_t *y, const int8_t *x, const int8_t *w,
                   const struct conv_shape *s, int accumulate)
{
    struct taps_job j = {.y = y, .x = x, .s = s, .accumulate = accumulate};
    j.nw = (s->kw + 3 + 3) / 4;
    j.groups = (s->ow + 3) / 4;
    j.whole = 0;   /* accumulating: every group through an exact load, add and store */
    while (!accumulate && j.whole < j.groups && 4 * j.whole * s->o + HVX_WORDS <= s->ow * s->o) j.whole++;
    /* Window rows rs bytes apart, rs a multiple of 4: a tile's words past a row's pixels
     * are the next row's (they meet zero weights or pixels past OW, never stored); the
     * last row's reads end at most 4 nw - kw - 1 < 16 bytes past it. Unpadded rows of a
     * multiple of 4 bytes are read in place, any others from a zero-bordered copy. */
    j.in_place = s->pad == 0 && s->w % 4 == 0 && ((uintptr_t)x & 3) == 0;
    j.rs = (s->w + 2 * s->pad + 3) & ~3;
    j.copy_bytes = j.in_place ? 0 : (uint32_t)((s->h + 2 * s->pad) * j.rs + HVX_BYTES);
    HVX_Vector *wv = dspt_scratch(ctx, (uint32_t)(s->kh * j.nw) * HVX_BYTES);
    HVX_Vector *ctrl = dspt_scratch(ctx, 2 * HVX_BYTES);
    if (!wv || !ctrl) return DSPT_NO_SUPPORT;
    weight_vectors(wv, w, s, j.nw);
    j.wv = wv;
    dspt_broadcast_control((uint8_t *)&ctrl[0], s->o, SLOTS);
    dspt_lanes_compaction((uint8_t *)&ctrl[1], s->o, SLOTS);
    j.bcast = ctrl[0];
    j.compact = ctrl[1];
    for (int t = 0; t < (int)ctx->threads; t++) {   /* each thread's image copy, from its own scratch */
        struct dspt_ctx *tc = dspt_thread_ctx(ctx, t);
        if (!tc) return DSPT_NO_SUPPORT;
        j.img[t] = j.in_place ? 0 : dspt_scratch(tc, j.copy_bytes);
        if (!j.in_place && !j.img[t]) return DSPT_NO_SUPPORT;
    }
    return dspt_run_shares(ctx, taps_share, &j);
}
