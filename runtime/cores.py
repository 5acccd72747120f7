"""One owner of the cores: dsptrain's native thread pool (cpu_ops/thread_pool.h) runs the
kernels, so the BLAS under NumPy (OpenBLAS) gets one thread.

Two pools on two cores oversubscribe: OpenBLAS's threads spin after each call and fight
dsptrain's workers, and with another busy process on the machine a step can take ten
times longer (issue #15 measured 48x for FP32 beside one busy process). BLAS only runs
the ref backend's products and a few float reductions here, small enough that one thread
loses little. `threadpoolctl` sets the limit in-process, whatever BLAS NumPy was built
with; DSPTRAIN_BLAS_THREADS=N overrides it (a debug knob).
"""

from __future__ import annotations

import os

BLAS_THREADS_ENV = "DSPTRAIN_BLAS_THREADS"


def own_cores() -> int:
    """Limit BLAS to one thread (or DSPTRAIN_BLAS_THREADS) for the rest of the process;
    returns the limit set. Safe to call more than once."""
    from threadpoolctl import threadpool_limits

    limit = int(os.environ.get(BLAS_THREADS_ENV, "1"))
    threadpool_limits(limits=limit, user_api="blas")
    return limit


def blas_threads() -> int:
    """The largest thread count of the BLAS libraries loaded now (0 when none is)."""
    from threadpoolctl import threadpool_info

    return max((p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"), default=0)
