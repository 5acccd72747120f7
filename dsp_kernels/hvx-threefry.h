/* hvx-threefry.h: Threefry-2x32 with 20 rounds (Salmon, Moraes, Dror, Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3", SC 2011), the counter-based RNG of
 * runtime/numerics.py: key (seed, tensor_id), counter (offset + index, step), first
 * output word. Only 32-bit add, rotate and xor, so 32 elements per HVX vector. */
#ifndef DSPTRAIN_HVX_THREEFRY_H
#define DSPTRAIN_HVX_THREEFRY_H

#include "hvx-utils.h"
#include "ops.h"

#define THREEFRY_PARITY 0x1BD11BDAu

static const int threefry_rot[8] = {13, 15, 26, 6, 17, 29, 16, 24};

static inline uint32_t threefry_scalar(const struct dspt_rng *key, uint32_t index)
{
    uint32_t ks[3] = {key->seed, key->tensor_id, THREEFRY_PARITY ^ key->seed ^ key->tensor_id};
    uint32_t x0 = key->offset + index + ks[0], x1 = key->step + ks[1];
    for (int g = 0; g < 5; g++) {
        for (int i = 0; i < 4; i++) {
            int r = threefry_rot[(g % 2) * 4 + i];
            x0 += x1;
            x1 = ((x1 << r) | (x1 >> (32 - r))) ^ x0;
        }
        x0 += ks[(g + 1) % 3];
        x1 += ks[(g + 2) % 3] + (uint32_t)(g + 1);
    }
    return x0;
}

static inline HVX_Vector hvx_rotl(HVX_Vector x, int r)
{
    return Q6_V_vor_VV(Q6_Vw_vasl_VwR(x, r), Q6_Vuw_vlsr_VuwR(x, 32 - r));
}

/* Random words for elements index .. index+31; `lanes` holds 0, 1, ..., 31. */
static inline HVX_Vector threefry_hvx(const struct dspt_rng *key, uint32_t index, HVX_Vector lanes)
{
    uint32_t ks[3] = {key->seed, key->tensor_id, THREEFRY_PARITY ^ key->seed ^ key->tensor_id};
    HVX_Vector x0 = Q6_Vw_vadd_VwVw(lanes, Q6_V_vsplat_R(key->offset + index + ks[0]));
    HVX_Vector x1 = Q6_V_vsplat_R(key->step + ks[1]);
    for (int g = 0; g < 5; g++) {
        for (int i = 0; i < 4; i++) {
            x0 = Q6_Vw_vadd_VwVw(x0, x1);
            x1 = Q6_V_vxor_VV(hvx_rotl(x1, threefry_rot[(g % 2) * 4 + i]), x0);
        }
        x0 = Q6_Vw_vadd_VwVw(x0, Q6_V_vsplat_R(ks[(g + 1) % 3]));
        x1 = Q6_Vw_vadd_VwVw(x1, Q6_V_vsplat_R(ks[(g + 2) % 3] + (uint32_t)(g + 1)));
    }
    return x0;
}

static inline HVX_Vector hvx_lane_index(void)
{
    HVX_Vector v;
    int32_t *w = (int32_t *)&v;
    for (int i = 0; i < 32; i++) w[i] = i;
    return v;
}

#endif
