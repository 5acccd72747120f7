/* dwconv_bwd2.c: depthwise backward data of a 3 x 3 kernel at stride 2, padding 1 (the
 * downsampling layers of MobileNet-style models), four err pixels in each vrmpy word
 * ("dw_err_quads").
 *
 * dx[h, w] sums err[(h + 1 - i) / 2, (w + 1 - j) / 2] * w[i, j] over the taps where 2
 * divides both. The four dx pixels (2m + a, 2n + b), a, b in {0, 1}, read only the err
 * pixels (m + dy, n + dx), dy, dx in {0, 1}: tap i = a + 1 - 2 dy, j = b + 1 - 2 dx when
 * inside the kernel (1, 2, 2 and 4 taps: 9 in all). So the 128-channel blocks of those four
 * err pixels are interleaved once into vrmpy's words (two vshuff stages) and met by the four
 * dx pixels' interleaved weights (a slot whose tap is outside the kernel: weight 0), held in
 * 16 registers for the whole image: per 4 x 128 dx words, 4 loads, 4 vshuff, 16 vrmpy and
 * 16 stores, every dx word written once (no zeros inserted, no accumulation pass). err is
 * read where it lies; past its last row or column a zero buffer stands in. Work is split
 * by images across the HVX threads (threads.h).
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "dwconv.h"
#include "threads.h"

struct eq_job {
    const struct dw_shape *s;
    const int8_t *err, *zeros;
    int32_t *dx;
    HVX_Vector *wq;   /* per channel block: 16 vectors (dx pixel a * 2 + b, word vector q) */
    int accumulate;
};

int dspt_dw_err_quads_fit(const struct dw_shape *s)
{
    /* C % 32: every dx block starts on a vector; C > 128: whole blocks (dw_block_start) */
    return s->stride == 2 && s->kh == 3 && s->kw == 3 && s->pad == 1 && s->c >= 64 && (s->c % 32 == 0 || s->c > 128);
}

/* The four dx pixels of one anchor (m, n) from x, its four err blocks interleaved (slot
 * k = 2 dy + dx): dst[p] the dx block of pixel p = 2 a + b (NULL: past dx's edge).
 * ALIGNED: C % 32 == 0, that many whole vectors of words kept, nothing to add (plain
 * vector stores); 8: four whole vectors anywhere (vmemu); else `valid` words, `acc`. */
static inline __attribute__((always_inline)) void anchor_x(const int ALIGNED, const HVX_Vector x[4],
                                                           int32_t *const dst[4], const HVX_Vector W[16], int valid,
                                                           int acc)
{
    for (int p = 0; p < 4; p++) {
        HVX_Vector a[4];
        for (int q = 0; q < 4; q++) a[q] = Q6_Vw_vrmpy_VbVb(x[q], W[4 * p + q]);
        int32_t *o = dst[p];
        if (ALIGNED == 8) {   /* 4 whole vectors, unaligned */
            for (int q = 0; q < 4; q++) dw_store_u(o + 32 * q, a[q]);
            continue;
        }
        if (ALIGNED) {
            for (int q = 0; q < ALIGNED; q++) ((HVX_Vector *)o)[q] = a[q];
            continue;
        }
        if (!o) continue;
        for (int q = 0; q < 4 && 32 * q < valid; q++) {
            int words = valid - 32 * q < 32 ? valid - 32 * q : 32;
            HVX_Vector r = acc ? Q6_Vw_vadd_VwVw(a[q], hvx_load_u(o + 32 * q)) : a[q];
            if (words == 32) hvx_store_u(o + 32 * q, r);
            else hvx_store_bytes(o + 32 * q, r, (uint32_t)words * 4);
        }
    }
}

/* The anchor whose err blocks are src[k] (slot k = 2 dy + dx). */
static inline __attribute__((always_inline)) void anchor(const int ALIGNED, const int8_t *const src[4],
                                                         int32_t *const dst[4], const HVX_Vector W[16], int valid,
                                                         int acc)
{
    HVX_Vector x[4];
    dw_interleave4(x, hvx_load_u(src[0]), hvx_load_u(src[1]), hvx_load_u(src[2]), hvx_load_u(src[3]));
    anchor_x(ALIGNED, x, dst, W, valid, acc);
}

/* Row m of anchors of one image, channel block cb: e0, e1 err rows m and m + 1 (or the
 * zeros), d0, d1 dx rows 2m and 2m + 1 (d1 NULL past dx). The anchors whose four dx pixels
 * all exist run without checks (FAST: the whole vectors a block keeps), the rest through
 * the general one. */
static inline __attribute__((always_inline)) void anchor_row(const int FAST, const struct dw_shape *s,
                                                             const int8_t *e0, const int8_t *e1, int32_t *d0,
                                                             int32_t *d1, const int8_t *zeros, const HVX_Vector *Wm,
                                                             int valid, int acc)
{
    const int C = s->c, OW = s->ow, AW = (s->w + 1) / 2;
    HVX_Vector W[16];   /* a local copy: the stores to dx cannot alias it, so it stays in registers */
    for (int k = 0; k < 16; k++) W[k] = Wm[k];
    int n = 0;
    const int fast = FAST && d1 ? s->w / 2 : 0;   /* anchors whose four dx pixels all exist */
    if (fast) {
        /* software-pipelined: the next anchor's err blocks are loaded and interleaved while
         * this one's products are stored (clang schedules one loop body, not across them) */
        HVX_Vector x[4];
        dw_interleave4(x, hvx_load_u(e0), hvx_load_u(1 < OW ? e0 + C : zeros), hvx_load_u(e1),
                       hvx_load_u(1 < OW ? e1 + C : zeros));
        for (; n < fast; n++) {
            int next = n + 1 < fast ? n + 1 : n, right = next + 1 < OW;   /* the last reloads itself */
            HVX_Vector r0 = hvx_load_u(e0 + next * C), r1 = hvx_load_u(right ? e0 + (next + 1) * C : zeros);
            HVX_Vector r2 = hvx_load_u(e1 + next * C), r3 = hvx_load_u(right ? e1 + (next + 1) * C : zeros);
            int32_t *dst[4] = {d0 + 2 * n * C, d0 + (2 * n + 1) * C, d1 + 2 * n * C, d1 + (2 * n + 1) * C};
            anchor_x(FAST, x, dst, W, valid, acc);
            dw_interleave4(x, r0, r1, r2, r3);
        }
    }
    for (; n < AW; n++) {
        int right = n + 1 < OW, wide = 2 * n + 1 < s->w;
        const int8_t *src[4] = {e0 + n * C, right ? e0 + (n + 1) * C : zeros, e1 + n * C,
                                right ? e1 + (n + 1) * C : zeros};
        int32_t *dst[4] = {d0 + 2 * n * C, wide ? d0 + (2 * n + 1) * C : 0, d1 ? d1 + 2 * n * C : 0,
                           d1 && wide ? d1 + (2 * n + 1) * C : 0};
        anchor(0, src, dst, W, valid, acc);
    }
}

/* Each store mode its own function: inlined together they share one register allocation
 * and the aligned loop lost a fifth of its speed. */
#define ROW_FN(K)                                                                               \
    static __attribute__((noinline)) void anchor_row_##K(const struct dw_shape *s, const int8_t *e0, \
                                                         const int8_t *e1, int32_t *d0, int32_t *d1,    \
                                                         const int8_t *zeros, const HVX_Vector W[16],   \
                                                         int valid, int acc)                            \
    {                                                                                           \
        anchor_row(K, s, e0, e1, d0, d1, zeros, W, valid, acc);                                 \
    }
ROW_FN(0)
ROW_FN(3)
ROW_FN(4)
ROW_FN(8)

static int eq_share(struct dspt_ctx *tc, int t, void *job)
{
    const struct eq_job *J = job;
    const struct dw_shape *s = J->s;
    const int C = s->c, AH = (s->h + 1) / 2, acc = J->accumulate;
    const int aligned = C % 32 == 0 && ((uintptr_t)J->dx & (HVX_BYTES - 1)) == 0 && !acc;
    const int blocks = (C + HVX_BYTES - 1) / HVX_BYTES;
    int lo, hi;
    dspt_share(tc, s->n, 1, t, &lo, &hi);
    for (int cb = 0; cb < blocks; cb++) {
        int c0 = dw_block_start(cb, C, acc), valid = C - c0 < HVX_BYTES ? C - c0 : HVX_BYTES;
        HVX_Vector W[16];
        for (int k = 0; k < 16; k++) W[k] = J->wq[16 * cb + k];
        for (int img = lo; img < hi; img++) {
            const int8_t *err = J->err + ((size_t)img * s->oh * s->ow * C) + c0;
            int32_t *dx = J->dx + ((size_t)img * s->h * s->w * C) + c0;
            for (int m = 0; m < AH; m++) {
                const int8_t *e0 = err + m * s->ow * C, *e1 = m + 1 < s->oh ? e0 + s->ow * C : J->zeros;
                int32_t *d0 = dx + 2 * m * s->w * C, *d1 = 2 * m + 1 < s->h ? d0 + s->w * C : 0;
                int whole = aligned ? valid / 32 : valid == HVX_BYTES && !acc ? 8 : 0;
                if (whole == 8) anchor_row_8(s, e0, e1, d0, d1, J->zeros, W, valid, acc);
                else if (whole == 4) anchor_row_4(s, e0, e1, d0, d1, J->zeros, W, valid, acc);
                else if (whole == 3) anchor_row_3(s, e0, e1, d0, d1, J->zeros, W, valid, acc);
                else anchor_row_0(s, e0, e1, d0, d1, J->zeros, W, valid, acc);
            }
        }
    }
    return DSPT_OK;
}

int dspt_dw_err_quads(struct dspt_ctx *ctx, const struct dw_shape *s, const int8_t *err, const int8_t *w, int32_t *dx,
                      int accumulate)
{
    int blocks = (s->c + HVX_BYTES - 1) / HVX_BYTES;
    uint32_t zero_bytes = (uint32_t)(s->ow + 1) * s->c + HVX_BYTES;
    HVX_Vector *wq = dspt_scratch(ctx, (uint32_t)blocks * 16 * HVX_BYTES);
    int8_t *zeros = dspt_scratch(ctx, zero_bytes);
    if (!wq || !zeros) return DSPT_NO_SUPPORT;
    hvx_zero(zeros, zero_bytes);
    for (int cb = 0; cb < blocks; cb++)
        for (int a = 0, c0 = dw_block_start(cb, s->c, accumulate); a < 2; a++)
            for (int b = 0; b < 2; b++) {
                HVX_Vector t[4];
                for (int dy = 0; dy < 2; dy++)
                    for (int dxx = 0; dxx < 2; dxx++) {
                        int i = a + 1 - 2 * dy, j = b + 1 - 2 * dxx;
                        t[2 * dy + dxx] = i < 0 || j < 0 ? Q6_V_vzero()
                                                         : hvx_load_u(w + (i * 3 + j) * s->c + c0);
                    }
                dw_interleave4(wq + 16 * cb + 4 * (2 * a + b), t[0], t[1], t[2], t[3]);
            }
    struct eq_job J = {.s = s, .err = err, .zeros = zeros, .dx = dx, .wq = wq, .accumulate = accumulate};
    return dspt_run_shares(ctx, eq_share, &J);
}
