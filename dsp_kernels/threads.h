/* threads.h: the worker pool that runs an op's shares on the DSP's hardware threads.
 *
 * A kernel splits its work into ctx->threads shares (dspt_share) and hands them to
 * dspt_run_shares: share t runs on worker t, a thread started once and kept, with its
 * own context and scratch (dspt_thread_ctx), while the calling thread waits for all of
 * them. Each worker counts the packets of its own share (QEMU's counters are per thread),
 * which dispatch.c reports per thread and as the op's critical path. The OS part is in
 * threads_linux.c (emulated server) or threads_qurt.c (device skel), behind threads_os.h.
 */
#ifndef DSPTRAIN_THREADS_H
#define DSPTRAIN_THREADS_H

#include "kernels.h"

/* One share: thread t of tc->threads, on the worker's context (its scratch). Returns an
 * enum dspt_status; a share that allocates does so before it writes any output. */
typedef int (*dspt_share_fn)(struct dspt_ctx *tc, int t, void *job);

/* The pool of ctx (its workers and their scratch of `scratch_bytes` each, started as
 * shares first need them); NULL when out of memory. dspt_pool_stop ends the workers,
 * joins them and frees it (the skel's close, the emulated server's QUIT). */
struct dspt_pool *dspt_pool_create(uint32_t scratch_bytes);
void dspt_pool_stop(struct dspt_pool *pool);

/* Before each op: every worker's scratch is empty again. */
void dspt_pool_reset(struct dspt_pool *pool);

/* Worker t's context (t < ctx->threads), to carve its scratch before the shares run, so
 * that an op that does not fit fails before writing anything; NULL if it cannot start. */
struct dspt_ctx *dspt_thread_ctx(struct dspt_ctx *ctx, int t);

/* Run fn(worker t's context, t, job) for t < ctx->threads, each on its own worker, and
 * wait for all; the worst status of the shares. Packets per share go to ctx->share_packets. */
int dspt_run_shares(struct dspt_ctx *ctx, dspt_share_fn fn, void *job);

#endif
