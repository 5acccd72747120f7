/* threads.c: the worker pool of threads.h, the same on the emulated server and the device.
 * A worker sleeps on its `go` word; the caller fills the job, bumps `go` and wakes it, and
 * later sleeps on the worker's `done` word until the worker has copied `go` into it. One
 * writer per word: no read-modify-write atomics, only acquire/release order. */
#include "dsp_sys.h"
#include "threads.h"
#include "threads_os.h"

#define WORKER_STACK (256u << 10)

struct dspt_worker {
    uint32_t go, done, quit;      /* go: job generation from the caller; done: the worker's echo */
    int t, status;
    dspt_share_fn fn;
    void *job;
    struct dsp_counters cost;     /* the share's packets, counted on the worker's own thread */
    struct dspt_ctx ctx;          /* its scratch; arena and thread count copied per op */
    struct dspt_os_thread os;
    int started;                  /* 1 running, -1 could not start */
} __attribute__((aligned(128)));  /* one worker's words per cache line pair: no false sharing */

struct dspt_pool {
    struct dspt_worker w[DSPT_MAX_THREADS];
    uint32_t scratch_bytes;
};

struct dspt_pool *dspt_pool_create(uint32_t scratch_bytes)
{
    struct dspt_pool *pool = dspt_os_alloc(sizeof *pool);
    if (!pool) return 0;
    memset(pool, 0, sizeof *pool);
    pool->scratch_bytes = scratch_bytes;
    return pool;
}

static void run_share(struct dspt_worker *w)
{
    struct dsp_counters c0, c1;
    dsp_read_counters(&c0);
    w->status = w->fn(&w->ctx, w->t, w->job);
    dsp_read_counters(&c1);
    w->cost.packets = c1.packets - c0.packets;
    w->cost.insns = c1.insns - c0.insns;
    w->cost.hvx = c1.hvx - c0.hvx;
}

static void worker_main(void *arg)
{
    struct dspt_worker *w = arg;
    uint32_t seen = 0, gen;
    for (;;) {
        while ((gen = __atomic_load_n(&w->go, __ATOMIC_ACQUIRE)) == seen) dspt_os_wait(&w->go, seen);
        seen = gen;
        if (__atomic_load_n(&w->quit, __ATOMIC_ACQUIRE)) return;
        run_share(w);
        __atomic_store_n(&w->done, gen, __ATOMIC_RELEASE);
        dspt_os_wake(&w->done);
    }
}

/* Worker t with its scratch, started on first use; NULL when either cannot be had. */
static struct dspt_worker *worker(struct dspt_pool *pool, int t)
{
    struct dspt_worker *w = &pool->w[t];
    if (w->started) return w->started > 0 ? w : 0;
    w->t = t;
    w->ctx.scratch_bytes = pool->scratch_bytes;
    w->ctx.scratch = dspt_os_alloc(pool->scratch_bytes);
    w->started = w->ctx.scratch && dspt_os_start(&w->os, worker_main, w, WORKER_STACK) == 0 ? 1 : -1;
    if (w->started < 0 && w->ctx.scratch) {
        dspt_os_free(w->ctx.scratch, pool->scratch_bytes);
        w->ctx.scratch = 0;
    }
    return w->started > 0 ? w : 0;
}

void dspt_pool_reset(struct dspt_pool *pool)
{
    for (int t = 0; pool && t < DSPT_MAX_THREADS; t++) pool->w[t].ctx.scratch_used = 0;
}

struct dspt_ctx *dspt_thread_ctx(struct dspt_ctx *ctx, int t)
{
    struct dspt_worker *w = ctx->pool ? worker(ctx->pool, t) : 0;
    if (!w) return 0;
    w->ctx.arena = ctx->arena;
    w->ctx.arena_bytes = ctx->arena_bytes;
    w->ctx.threads = ctx->threads;
    return &w->ctx;
}

int dspt_run_shares(struct dspt_ctx *ctx, dspt_share_fn fn, void *job)
{
    int n = (int)ctx->threads, worst = DSPT_OK;
    for (int t = 0; t < n; t++)
        if (!dspt_thread_ctx(ctx, t)) return DSPT_NO_SUPPORT;   /* before any share writes */
    for (int t = 0; t < n; t++) {
        struct dspt_worker *w = &ctx->pool->w[t];
        w->fn = fn;
        w->job = job;
        __atomic_store_n(&w->go, w->go + 1, __ATOMIC_RELEASE);
        dspt_os_wake(&w->go);
    }
    uint32_t longest = 0;
    for (int t = 0; t < n; t++) {   /* the join, in thread order */
        struct dspt_worker *w = &ctx->pool->w[t];
        uint32_t done;
        while ((done = __atomic_load_n(&w->done, __ATOMIC_ACQUIRE)) != w->go) dspt_os_wait(&w->done, done);
        ctx->share_packets[t] += w->cost.packets;
        longest = w->cost.packets > longest ? w->cost.packets : longest;
        ctx->share_insns += w->cost.insns;
        ctx->share_hvx += w->cost.hvx;
        worst = w->status > worst ? w->status : worst;
    }
    ctx->shares_critical += longest;   /* the shares of one call end together: its longest counts */
    return worst;
}

void dspt_pool_stop(struct dspt_pool *pool)
{
    if (!pool) return;
    for (int t = 0; t < DSPT_MAX_THREADS; t++) {
        struct dspt_worker *w = &pool->w[t];
        if (w->started <= 0) continue;
        __atomic_store_n(&w->quit, 1, __ATOMIC_RELEASE);
        __atomic_store_n(&w->go, w->go + 1, __ATOMIC_RELEASE);
        dspt_os_wake(&w->go);
        dspt_os_join(&w->os);
        dspt_os_free(w->ctx.scratch, pool->scratch_bytes);
    }
    dspt_os_free(pool, sizeof *pool);
}
