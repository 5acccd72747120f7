/* hvx-utils.h: small HVX helpers (128-byte vectors) shared by the kernel files. */
#ifndef DSPTRAIN_HVX_UTILS_H
#define DSPTRAIN_HVX_UTILS_H

#include <hexagon_types.h>
#include <hvx_hexagon_protos.h>
#include <stdint.h>

#define HVX_BYTES 128
#define HVX_WORDS 32

typedef HVX_Vector hvx_uvec __attribute__((aligned(1)));  /* unaligned vector access */

static inline HVX_Vector hvx_load_u(const void *p) { return *(const hvx_uvec *)p; }
static inline void hvx_store_u(void *p, HVX_Vector v) { *(hvx_uvec *)p = v; }

/* Store the first `bytes` (< 128) bytes of v at p: predicated stores need alignment,
 * so the tail goes through a stack vector. */
static inline void hvx_store_partial(void *p, HVX_Vector v, uint32_t bytes)
{
    HVX_Vector tmp = v;
    const uint8_t *s = (const uint8_t *)&tmp;
    uint8_t *d = (uint8_t *)p;
    for (uint32_t i = 0; i < bytes; i++) d[i] = s[i];
}

/* Load `bytes` (< 128) bytes from p into the low lanes of a vector, zeros above. */
static inline HVX_Vector hvx_load_partial(const void *p, uint32_t bytes)
{
    HVX_Vector tmp = Q6_V_vzero();
    uint8_t *d = (uint8_t *)&tmp;
    const uint8_t *s = (const uint8_t *)p;
    for (uint32_t i = 0; i < bytes; i++) d[i] = s[i];
    return tmp;
}

/* memcpy with unaligned vector moves for the body. */
static inline void hvx_copy(void *dst, const void *src, uint32_t bytes)
{
    uint8_t *d = (uint8_t *)dst;
    const uint8_t *s = (const uint8_t *)src;
    uint32_t i = 0;
    for (; i + HVX_BYTES <= bytes; i += HVX_BYTES) hvx_store_u(d + i, hvx_load_u(s + i));
    for (; i < bytes; i++) d[i] = s[i];
}

static inline void hvx_zero(void *dst, uint32_t bytes)
{
    uint8_t *d = (uint8_t *)dst;
    uint32_t i = 0;
    for (; i + HVX_BYTES <= bytes; i += HVX_BYTES) hvx_store_u(d + i, Q6_V_vzero());
    for (; i < bytes; i++) d[i] = 0;
}

#endif
