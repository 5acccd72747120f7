/* skel.c: the FastRPC side of the device build: the skel's invoke entry calls these,
 * and they run the same kernels as the emulated server (dispatch.c). Built with the
 * Hexagon SDK (`make -C dsp_kernels device`: qaic's iface_skel.c, the SDK's headers) or
 * without it (`make -C dsp_kernels skel`: clang-16 / lld-16, skel_invoke.c and the ABI
 * restated in fastrpc_abi.h), which CI does so the device build cannot rot. */
#ifdef DSPT_HEXAGON_SDK
#include <stdlib.h>

#include "HAP_mem.h"
#include "iface.h"
#else
#include "fastrpc_abi.h"
#endif
#include "kernels.h"
#include "threads.h"

#define SKEL_SCRATCH (16u << 20)
#define SKEL_THREAD_SCRATCH (4u << 20)   /* each HVX worker's own (threads.h) */

struct session {
    struct dspt_ctx ctx;
};

int dsptrain_open(const char *uri, remote_handle64 *handle)
{
    struct session *s = calloc(1, sizeof *s);
    if (!s) return AEE_ENOMEMORY;
    s->ctx.scratch = memalign(128, SKEL_SCRATCH);  /* VTCM would be better: see docs/phone.md */
    s->ctx.pool = s->ctx.scratch ? dspt_pool_create(SKEL_THREAD_SCRATCH) : 0;
    if (!s->ctx.pool) { free(s->ctx.scratch); free(s); return AEE_ENOMEMORY; }
    s->ctx.scratch_bytes = SKEL_SCRATCH;
    *handle = (remote_handle64)s;
    return AEE_SUCCESS;
}

int dsptrain_close(remote_handle64 handle)
{
    struct session *s = (struct session *)handle;
    if (s) { dspt_pool_stop(s->ctx.pool); free(s->ctx.scratch); free(s); }
    return AEE_SUCCESS;
}

/* The arena was mapped into this process by the host's fastrpc_mmap(fd): look it up. */
static int bind_arena(struct session *s, int fd, uint32_t bytes)
{
    void *va = 0;
    uint64 pa = 0;
    if (HAP_mmap_get(fd, &va, &pa) != 0 || !va) return AEE_EBADPARM;
    s->ctx.arena = va;
    if (bytes) s->ctx.arena_bytes = bytes;
    HAP_mmap_put(fd);
    return AEE_SUCCESS;
}

int dsptrain_hello(remote_handle64 handle, int fd, unsigned int bytes, dspt_hello_t *info)
{
    struct session *s = (struct session *)handle;
    int rc = bind_arena(s, fd, bytes);
    if (rc) return rc;
    info->magic = DSPT_MAGIC;
    info->abi_version = DSPT_ABI_VERSION;
    info->sizeof_desc = sizeof(struct dspt_op_desc);
    info->offsetof_rng = __builtin_offsetof(struct dspt_op_desc, rng);
    info->offsetof_status = __builtin_offsetof(struct dspt_op_desc, status);
    info->offsetof_cost = __builtin_offsetof(struct dspt_op_desc, cost);
    info->op_mask = dspt_op_mask();
    info->arena_bytes = s->ctx.arena_bytes;
    return AEE_SUCCESS;
}

int dsptrain_run(remote_handle64 handle, int fd, unsigned int first, unsigned int count,
                 dspt_reply_t *reply)
{
    struct session *s = (struct session *)handle;
    if (!s->ctx.arena && bind_arena(s, fd, 0)) return AEE_EBADPARM;
    struct dspt_op_desc *ring = (struct dspt_op_desc *)(s->ctx.arena + DSPT_RING_OFFSET);
    reply->magic = DSPT_MAGIC;
    reply->status = DSPT_OK;
    reply->done = 0;
    if (first >= DSPT_RING_SLOTS || count > DSPT_RING_SLOTS - first) {
        reply->status = DSPT_BAD_PARAMS;
        return AEE_SUCCESS;
    }
    for (unsigned int i = 0; reply->status == DSPT_OK && i < count; i++) {
        reply->status = (uint32_t)dspt_run_op(&s->ctx, &ring[first + i]);
        if (reply->status == DSPT_OK) reply->done++;
    }
    return AEE_SUCCESS;
}
