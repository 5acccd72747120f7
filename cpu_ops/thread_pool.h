// A small persistent thread pool: parallel_for(n, fn) runs fn(0..n-1) on all cores,
// the caller included. Callers from several Python threads are serialised; a call made
// from inside a task runs inline (no nested parallelism).
#pragma once
#include <functional>

namespace dsptrain {

// Threads the pool uses (hardware concurrency, or DSPTRAIN_CPU_THREADS).
int pool_threads();

void parallel_for(int ntasks, const std::function<void(int)>& fn);

}  // namespace dsptrain
