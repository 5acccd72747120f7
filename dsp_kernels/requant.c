/* requant.c: NITI's epilogue on HVX: the range estimate (max |acc|) and the shift with
 * round / psto / sto rounding (runtime/numerics.py, bit for bit); update.c rounds the
 * weight step with the same pass. int32 accumulators only; int64 -> NO_SUPPORT. */
#include "hvx-threefry.h"
#include "kernels.h"
#include "threads.h"

int dspt_range_bits(uint32_t max_abs)
{
    return max_abs == 0 ? 0 : (max_abs == 1 ? 0 : 32 - __builtin_clz(max_abs - 1));
}

/* max |x| over n int32 (|INT32_MIN| = 2**31 is exact as an unsigned word): the signed
 * maximum and minimum kept apart (one vmax, one vmin a vector, no predicates), |min| taken
 * once at the end. */
uint32_t dspt_absmax_s32(const int32_t *x, uint32_t n)
{
    HVX_Vector hi0 = Q6_V_vzero(), hi1 = hi0, lo0 = hi0, lo1 = hi0;
    uint32_t i = 0;
    for (; i + 64 <= n; i += 64) {   /* two independent pairs: no chain from one vector to the next */
        HVX_Vector a = hvx_load_u(x + i), b = hvx_load_u(x + i + 32);
        hi0 = Q6_Vw_vmax_VwVw(hi0, a);
        lo0 = Q6_Vw_vmin_VwVw(lo0, a);
        hi1 = Q6_Vw_vmax_VwVw(hi1, b);
        lo1 = Q6_Vw_vmin_VwVw(lo1, b);
    }
    for (; i + 32 <= n; i += 32) {
        HVX_Vector a = hvx_load_u(x + i);
        hi0 = Q6_Vw_vmax_VwVw(hi0, a);
        lo0 = Q6_Vw_vmin_VwVw(lo0, a);
    }
    hi0 = Q6_Vw_vmax_VwVw(hi0, hi1);
    lo0 = Q6_Vw_vmin_VwVw(lo0, lo1);
    const int32_t *his = (const int32_t *)&hi0, *los = (const int32_t *)&lo0;
    int32_t top = 0, bottom = 0;
    for (int l = 0; l < 32; l++) {
        top = his[l] > top ? his[l] : top;
        bottom = los[l] < bottom ? los[l] : bottom;
    }
    for (; i < n; i++) {
        top = x[i] > top ? x[i] : top;
        bottom = x[i] < bottom ? x[i] : bottom;
    }
    uint32_t down = 0u - (uint32_t)bottom;   /* bottom <= 0 */
    return (uint32_t)top > down ? (uint32_t)top : down;
}

/* numerics.shift_round for one element, any shift in 0..62 (the general path). */
static int8_t shift_one(int32_t v, int shift, int mode, uint32_t rnd)
{
    int64_t wide = v;
    if (shift <= 0) return (int8_t)(wide > 127 ? 127 : wide < -127 ? -127 : wide);
    uint64_t mag = wide < 0 ? (uint64_t)-wide : (uint64_t)wide;
    uint64_t kept = mag >> shift, dropped = mag & ((1ull << shift) - 1), up;
    if (mode == DSPT_ROUND) {
        up = (dropped >> (shift - 1)) & 1;
    } else if (mode == DSPT_PSTO) {
        int low_bits = shift / 2;
        uint64_t high = dropped >> low_bits, low = dropped & ((1ull << low_bits) - 1);
        if (shift % 2) low <<= 1;
        up = high > low;
    } else {
        int width = shift < 32 ? shift : 32;
        if (shift > 32) dropped >>= shift - 32;
        uint64_t bits = width < 32 ? (rnd & ((1u << width) - 1)) : rnd;
        up = dropped > bits;
    }
    uint64_t r = kept + up;
    int32_t m = r > 127 ? 127 : (int32_t)r;
    return (int8_t)(v < 0 ? -m : m);
}

/* 32 elements, 1 <= shift <= 31: magnitudes fit an unsigned word. */
static inline HVX_Vector shift_vec(HVX_Vector x, int shift, int mode, HVX_Vector rnd)
{
    HVX_Vector zero = Q6_V_vzero(), one = Q6_V_vsplat_R(1);
    HVX_Vector mag = Q6_Vw_vabs_Vw(x);
    HVX_Vector cap = Q6_V_vsplat_R(127);
    if (mode == DSPT_ROUND) {   /* kept + bit (shift-1) of the dropped part = (mag + half) >> shift */
        HVX_Vector r = Q6_Vuw_vlsr_VuwR(Q6_Vw_vadd_VwVw(mag, Q6_V_vsplat_R(1 << (shift - 1))), shift);
        r = Q6_V_vmux_QVV(Q6_Q_vcmp_gt_VuwVuw(r, cap), cap, r);
        return Q6_V_vmux_QVV(Q6_Q_vcmp_gt_VwVw(zero, x), Q6_Vw_vsub_VwVw(zero, r), r);
    }
    HVX_Vector kept = Q6_Vuw_vlsr_VuwR(mag, shift);
    HVX_Vector dropped = Q6_V_vand_VV(mag, Q6_V_vsplat_R((int)((1u << shift) - 1)));
    HVX_Vector up;
    if (mode == DSPT_ROUND) {
        up = Q6_V_vand_VV(Q6_Vuw_vlsr_VuwR(dropped, shift - 1), one);
    } else {
        HVX_Vector high, low;
        if (mode == DSPT_PSTO) {
            int low_bits = shift / 2;
            high = Q6_Vuw_vlsr_VuwR(dropped, low_bits);
            low = Q6_V_vand_VV(dropped, Q6_V_vsplat_R((1 << low_bits) - 1));
            if (shift % 2) low = Q6_Vw_vasl_VwR(low, 1);
        } else {
            high = dropped;
            low = Q6_V_vand_VV(rnd, Q6_V_vsplat_R((int)((1u << shift) - 1)));
        }
        up = Q6_V_vmux_QVV(Q6_Q_vcmp_gt_VuwVuw(high, low), one, zero);
    }
    HVX_Vector r = Q6_Vw_vadd_VwVw(kept, up);
    r = Q6_V_vmux_QVV(Q6_Q_vcmp_gt_VuwVuw(r, cap), cap, r);
    return Q6_V_vmux_QVV(Q6_Q_vcmp_gt_VwVw(zero, x), Q6_Vw_vsub_VwVw(zero, r), r);
}

/* best = max(best, |x|) per unsigned lane (|INT32_MIN| = 2**31 is exact unsigned). */
static inline HVX_Vector max_abs_vec(HVX_Vector best, HVX_Vector x)
{
    HVX_Vector m = Q6_Vw_vabs_Vw(x);
    return Q6_V_vmux_QVV(Q6_Q_vcmp_gt_VuwVuw(m, best), m, best);
}

static uint32_t max_lane(HVX_Vector best)
{
    uint32_t out = 0;
    const uint32_t *lanes = (const uint32_t *)&best;
    for (int l = 0; l < 32; l++) out = lanes[l] > out ? lanes[l] : out;
    return out;
}

/* DSPT_ROUND over the whole 128-element steps of n (returns how many elements it did):
 * round half away from zero, (|x| + half) >> shift in words (at most 1.5 * 2**30, never
 * negative), then the clamp to 127 and the sign in halfwords, half the vectors (both packs
 * saturate: > 127 stays > 127, x's sign survives). With `peak` set it also keeps the
 * largest rounded magnitude before the clamp: a vmax on the halfword pack the clamp reads
 * anyway, one op per two vectors, where max |x| costs a compare and a mux per vector (a
 * given shift's saturation check: dspt_round_peak_s32). */
static inline __attribute__((always_inline)) uint32_t round_loop(int8_t *out, const int32_t *in, uint32_t n,
                                                                 int shift, uint32_t *peak)
{
    const HVX_Vector half = Q6_V_vsplat_R(1 << (shift - 1)), zero = Q6_V_vzero(), cap = Q6_Vh_vsplat_R(127);
    HVX_Vector top[2] = {zero, zero};   /* two running maxima: no chain across the pair */
    uint32_t i = 0;
    for (; i + 128 <= n; i += 128) {
        HVX_Vector x[4], r[4];
        for (int j = 0; j < 4; j++) {
            x[j] = hvx_load_u(in + i + 32 * j);
            r[j] = Q6_Vuw_vlsr_VuwR(Q6_Vw_vadd_VwVw(Q6_Vw_vabs_Vw(x[j]), half), shift);
        }
        HVX_Vector h[2];
        for (int j = 0; j < 2; j++) {
            HVX_Vector p = Q6_Vh_vpack_VwVw_sat(r[2 * j + 1], r[2 * j]);
            if (peak) top[j] = Q6_Vh_vmax_VhVh(top[j], p);
            HVX_Vector m = Q6_Vh_vmin_VhVh(p, cap);
            HVX_Vector sign = Q6_Vh_vpack_VwVw_sat(x[2 * j + 1], x[2 * j]);
            h[j] = Q6_V_vmux_QVV(Q6_Q_vcmp_gt_VhVh(zero, sign), Q6_Vh_vsub_VhVh(zero, m), m);
        }
        hvx_store_u(out + i, Q6_Vb_vpacke_VhVh(h[1], h[0]));
    }
    if (peak) {
        HVX_Vector both = Q6_Vh_vmax_VhVh(top[0], top[1]);
        const int16_t *lanes = (const int16_t *)&both;
        uint32_t best = 0;
        for (int l = 0; l < 64; l++) best = (uint32_t)lanes[l] > best ? (uint32_t)lanes[l] : best;
        *peak = best;
    }
    return i;
}

/* Each its own function: inlined into the general loop they changed the other modes' schedule. */
static __attribute__((noinline)) uint32_t round_vectors(int8_t *out, const int32_t *in, uint32_t n, int shift)
{
    return round_loop(out, in, n, shift, 0);
}

static __attribute__((noinline)) uint32_t round_vectors_peak(int8_t *out, const int32_t *in, uint32_t n, int shift,
                                                             uint32_t *peak)
{
    return round_loop(out, in, n, shift, peak);
}

/* DSPT_ROUND with 1 <= shift <= 31, as dspt_shift_round_s32 rounds, returning the peak:
 * the largest rounded magnitude before the clamp, min(max (|x| + 2**(shift-1)) >> shift,
 * 32767). peak < 2**(bits-1) proves max |x| < 2**(shift + bits - 1), i.e. the estimate
 * would not ask for more than `shift`; a larger peak leaves it open (|x| may lie within
 * half a step below the bound), so the caller then reads the range itself. */
uint32_t dspt_round_peak_s32(int8_t *out, const int32_t *in, uint32_t n, int shift)
{
    uint32_t peak = 0, i = round_vectors_peak(out, in, n, shift, &peak);
    for (; i < n; i++) {
        uint64_t mag = in[i] < 0 ? 0ull - (uint64_t)(int64_t)in[i] : (uint64_t)in[i];
        uint64_t r = (mag + (1ull << (shift - 1))) >> shift;
        r = r > 32767 ? 32767 : r;
        peak = r > peak ? (uint32_t)r : peak;
        out[i] = shift_one(in[i], shift, DSPT_ROUND, 0);
    }
    return peak;
}

/* out[i] = shift_round(in[i]) for n elements; rng used only by DSPT_STO. With `max_abs`
 * set, max |in| is taken in the same pass (a given shift checked for saturation; DSPT_ROUND
 * checks through dspt_round_peak_s32 instead). */
void dspt_shift_round_s32(int8_t *out, const int32_t *in, uint32_t n, int shift, int mode,
                          const struct dspt_rng *rng, uint32_t *max_abs)
{
    uint32_t i = 0;
    HVX_Vector best = Q6_V_vzero(), b1 = best, b2 = best, b3 = best;
    if (shift >= 1 && shift <= 31 && mode == DSPT_ROUND && !max_abs) {
        i = round_vectors(out, in, n, shift);
    } else if (shift >= 1 && shift <= 31) {
        HVX_Vector lanes = hvx_lane_index(), r0 = lanes, r1 = lanes, r2 = lanes, r3 = lanes;
        for (; i + 128 <= n; i += 128) {
            if (mode == DSPT_STO) {
                r0 = threefry_hvx(rng, i, lanes); r1 = threefry_hvx(rng, i + 32, lanes);
                r2 = threefry_hvx(rng, i + 64, lanes); r3 = threefry_hvx(rng, i + 96, lanes);
            }
            HVX_Vector x0 = hvx_load_u(in + i), x1 = hvx_load_u(in + i + 32);
            HVX_Vector x2 = hvx_load_u(in + i + 64), x3 = hvx_load_u(in + i + 96);
            if (max_abs) {   /* four independent maxima, merged after the loop */
                best = max_abs_vec(best, x0); b1 = max_abs_vec(b1, x1);
                b2 = max_abs_vec(b2, x2); b3 = max_abs_vec(b3, x3);
            }
            HVX_Vector w0 = shift_vec(x0, shift, mode, r0), w1 = shift_vec(x1, shift, mode, r1);
            HVX_Vector w2 = shift_vec(x2, shift, mode, r2), w3 = shift_vec(x3, shift, mode, r3);
            /* words -> halfwords -> bytes, keeping element order (values fit a byte) */
            HVX_Vector h01 = Q6_Vh_vpacke_VwVw(w1, w0), h23 = Q6_Vh_vpacke_VwVw(w3, w2);
            hvx_store_u(out + i, Q6_Vb_vpacke_VhVh(h23, h01));
        }
    } else if (shift <= 0) {
        HVX_Vector hi = Q6_V_vsplat_R(127), lo = Q6_V_vsplat_R(-127);
        for (; i + 128 <= n; i += 128) {
            HVX_Vector w[4];
            for (int j = 0; j < 4; j++) {
                HVX_Vector x = hvx_load_u(in + i + 32 * j);
                if (max_abs) best = max_abs_vec(best, x);
                w[j] = Q6_Vw_vmin_VwVw(Q6_Vw_vmax_VwVw(x, lo), hi);
            }
            HVX_Vector h01 = Q6_Vh_vpacke_VwVw(w[1], w[0]), h23 = Q6_Vh_vpacke_VwVw(w[3], w[2]);
            hvx_store_u(out + i, Q6_Vb_vpacke_VhVh(h23, h01));
        }
    }
    if (max_abs) {
        best = Q6_V_vmux_QVV(Q6_Q_vcmp_gt_VuwVuw(b1, best), b1, best);
        b2 = Q6_V_vmux_QVV(Q6_Q_vcmp_gt_VuwVuw(b3, b2), b3, b2);
        best = Q6_V_vmux_QVV(Q6_Q_vcmp_gt_VuwVuw(b2, best), b2, best);
    }
    uint32_t m = max_abs ? max_lane(best) : 0;
    for (; i < n; i++) {
        if (max_abs) {
            uint32_t a = in[i] < 0 ? 0u - (uint32_t)in[i] : (uint32_t)in[i];
            m = a > m ? a : m;
        }
        out[i] = shift_one(in[i], shift, mode, mode == DSPT_STO ? threefry_scalar(rng, i) : 0);
    }
    if (max_abs) *max_abs = m;
}

/* The passes split across the HVX threads (threads.h) in ranges of whole 128-element
 * steps, so only the last range has a scalar tail, as in one pass; each range's random
 * stream is offset by its start, so every element draws what it draws in one pass, and
 * the ranges' maxima are combined after the join. */
enum pass_max { PASS_NO_MAX, PASS_MAX_ABS, PASS_PEAK };   /* what a rounding pass keeps in max[] */

struct pass_job {
    int8_t *out;                  /* NULL: the max only */
    const int32_t *in;
    uint32_t n;
    int shift, mode;
    enum pass_max keep;
    const struct dspt_rng *rng;
    uint32_t max[DSPT_MAX_THREADS];
};

static int pass_share(struct dspt_ctx *tc, int t, void *job)
{
    struct pass_job *J = job;
    int lo, hi;
    dspt_share(tc, (int)J->n, 128, t, &lo, &hi);
    J->max[t] = 0;
    if (lo >= hi) return DSPT_OK;
    if (!J->out) {
        J->max[t] = dspt_absmax_s32(J->in + lo, (uint32_t)(hi - lo));
        return DSPT_OK;
    }
    if (J->keep == PASS_PEAK) {   /* DSPT_ROUND: no random stream */
        J->max[t] = dspt_round_peak_s32(J->out + lo, J->in + lo, (uint32_t)(hi - lo), J->shift);
        return DSPT_OK;
    }
    struct dspt_rng rng = *J->rng;
    rng.offset += (uint32_t)lo;
    dspt_shift_round_s32(J->out + lo, J->in + lo, (uint32_t)(hi - lo), J->shift, J->mode, &rng,
                         J->keep == PASS_MAX_ABS ? &J->max[t] : 0);
    return DSPT_OK;
}

static uint32_t run_pass(struct dspt_ctx *ctx, struct pass_job *J, int *status)
{
    uint32_t m = 0;
    *status = dspt_run_shares(ctx, pass_share, J);
    for (int t = 0; t < (int)ctx->threads; t++) m = J->max[t] > m ? J->max[t] : m;
    return m;
}

uint32_t dspt_absmax_split(struct dspt_ctx *ctx, const int32_t *x, uint32_t n, int *status)
{
    struct pass_job J = {.out = 0, .in = x, .n = n};
    return run_pass(ctx, &J, status);
}

int dspt_shift_round_split(struct dspt_ctx *ctx, int8_t *out, const int32_t *in, uint32_t n, int shift,
                           int mode, const struct dspt_rng *rng, uint32_t *max_abs)
{
    struct pass_job J = {.out = out, .in = in, .n = n, .shift = shift, .mode = mode,
                         .keep = max_abs ? PASS_MAX_ABS : PASS_NO_MAX, .rng = rng};
    int status;
    uint32_t m = run_pass(ctx, &J, &status);
    if (max_abs) *max_abs = m;
    return status;
}

uint32_t dspt_round_peak_split(struct dspt_ctx *ctx, int8_t *out, const int32_t *in, uint32_t n, int shift,
                               int *status)
{
    struct pass_job J = {.out = out, .in = in, .n = n, .shift = shift, .mode = DSPT_ROUND, .keep = PASS_PEAK};
    return run_pass(ctx, &J, status);
}

static int epilogue_args(struct dspt_ctx *ctx, struct dspt_op_desc *d, uint32_t *n,
                         const int32_t **acc)
{
    if (d->dtype != DSPT_I32) return DSPT_NO_SUPPORT;
    if (d->round_mode < DSPT_ROUND || d->round_mode > DSPT_STO) return DSPT_BAD_PARAMS;
    *n = dspt_count(d->shape_a);
    *acc = dspt_at(ctx, d->in[0], *n * 4);
    return *acc ? DSPT_OK : DSPT_BAD_PARAMS;
}

int dspt_op_absmax(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    uint32_t n = dspt_count(d->shape_a);
    int st;
    if (d->dtype != DSPT_I32) return DSPT_NO_SUPPORT;
    const int32_t *acc = dspt_at(ctx, d->in[0], n * 4);
    if (!acc) return DSPT_BAD_PARAMS;
    d->result_absmax = dspt_absmax_split(ctx, acc, n, &st);
    return st;
}

/* A given shift checked for saturation (base.py's requantize: max(given, estimate)).
 * DSPT_ROUND, the recipes' activations and errors: the rounding pass keeps its peak P
 * (dspt_round_peak_s32). P < 2**(bits-1) clears the shift: that is almost every call, at
 * the cost of the plain pass. Else, with max |acc| = M in [P * 2**s - 2**(s-1),
 * P * 2**s + 2**(s-1) - 1], P strictly between two powers of two 2**(k-1) < P < 2**k puts
 * M strictly between 2**(k+s-1) and 2**(k+s), so the estimate's range_bits(M) is k + s
 * and the shift gives way without reading the range; a P that is a power of two (or the
 * pack's saturated 32767) leaves M's side of the bound open and reads it (an ABSMAX pass).
 * That made a skipped estimate cheaper than a run one: on 64x16x16x96 int32 sums, 4
 * threads, 259k packets against 345k for ABSMAX + rounding, where the rounding pass that
 * also took max |acc| cost 394k. The other modes take max |acc| in their rounding pass
 * (their rounding dominates). result_absmax is max |acc| when the range was read, else 0. */
static int checked_round(struct dspt_ctx *ctx, struct dspt_op_desc *d, int8_t *out, const int32_t *acc,
                         uint32_t n, int *shift)
{
    int st, needed;
    d->result_absmax = 0;
    if (d->round_mode == DSPT_ROUND && *shift >= 1 && *shift <= 31 && d->bits >= 2 && d->bits <= 15) {
        uint32_t peak = dspt_round_peak_split(ctx, out, acc, n, *shift, &st);
        if (st || peak < (1u << (d->bits - 1))) return st;
        if (peak < 32767 && (peak & (peak - 1))) {
            needed = *shift + dspt_range_bits(peak) - (d->bits - 1);
        } else {
            d->result_absmax = dspt_absmax_split(ctx, acc, n, &st);
            if (st) return st;
            needed = dspt_range_bits(d->result_absmax) - (d->bits - 1);
        }
    } else {
        st = dspt_shift_round_split(ctx, out, acc, n, *shift, d->round_mode, &d->rng, &d->result_absmax);
        if (st) return st;
        needed = dspt_range_bits(d->result_absmax) - (d->bits - 1);
    }
    if (needed <= *shift) return DSPT_OK;
    *shift = needed;   /* it would saturate: round again with the estimate */
    return dspt_shift_round_split(ctx, out, acc, n, needed, d->round_mode, &d->rng, 0);
}

/* REQUANT: shift = given, or NITI's activation shift max(range - (bits - 1), 0). */
int dspt_op_requant(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    uint32_t n;
    const int32_t *acc;
    int st = epilogue_args(ctx, d, &n, &acc);
    if (st) return st;
    int8_t *out = dspt_at(ctx, d->out[0], n);
    if (!out) return DSPT_BAD_PARAMS;
    int shift = d->shift;
    if (shift == DSPT_SHIFT_ESTIMATE) {
        d->result_absmax = dspt_absmax_split(ctx, acc, n, &st);
        if (st) return st;
        shift = dspt_range_bits(d->result_absmax) - (d->bits - 1);
        if (shift < 0) shift = 0;
    } else if (shift < 0) {
        shift = 0;  /* numerics: shift <= 0 is a clipping cast */
    }
    if (shift > 62) return DSPT_BAD_PARAMS;
    if (d->shift != DSPT_SHIFT_ESTIMATE && (d->flags & DSPT_F_SATURATE_CHECK)) {
        st = checked_round(ctx, d, out, acc, n, &shift);
    } else {
        st = dspt_shift_round_split(ctx, out, acc, n, shift, d->round_mode, &d->rng, 0);
    }
    if (st) return st;
    d->result_shift = shift;
    return DSPT_OK;
}
