// A small persistent thread pool: parallel_for(n, fn) runs fn(0..n-1) on all cores,
// the caller included. Callers from several Python threads are serialised; a call made
// from inside a task runs inline (no nested parallelism).
#pragma once
#include <cstddef>
#include <functional>

namespace dsptrain {

// Threads the pool uses (hardware concurrency, or DSPTRAIN_CPU_THREADS).
int pool_threads();

void parallel_for(int ntasks, const std::function<void(int)>& fn);

// Waking the pool costs tens of microseconds, so a call touching less than about this
// many bytes per thread runs inline on the caller.
constexpr size_t kTaskGrainBytes = 256 * 1024;

// Tasks to split a call touching `bytes` into: one per `grain` bytes, at most 4 per
// thread and at most `max_tasks` (the units that can be split), at least one.
int tasks_for(size_t bytes, int max_tasks, size_t grain = kTaskGrainBytes);

// fn(begin, end) over [0, units) in tasks_for(bytes, units) contiguous ranges: for loops
// whose units (rows, images, channels) are too small to be tasks one by one.
template <typename F>
void parallel_ranges(int units, size_t bytes, F fn) {
  const int tasks = tasks_for(bytes, units);
  parallel_for(tasks, [&](int t) {
    fn(static_cast<int>(static_cast<long long>(units) * t / tasks), static_cast<int>(static_cast<long long>(units) * (t + 1) / tasks));
  });
}

}  // namespace dsptrain
