// A small persistent thread pool: parallel_for(n, fn) runs fn(0..n-1) on all cores,
// the caller included. Callers from several Python threads are serialised; a call made
// from inside a task runs inline (no nested parallelism).
#pragma once
#include <cstddef>
#include <functional>

namespace dsptrain {

// Threads the kernels may use now: the pool's size (hardware concurrency, or
// DSPTRAIN_CPU_THREADS) capped by set_thread_limit.
int pool_threads();

// Caps the threads parallel_for uses (1: everything inline on the caller), at most the
// pool's size; returns the cap now in force. Tests use it to compare 1 and 2 threads.
int set_thread_limit(int threads);

// While one lives on a thread, parallel_for on that thread runs inline: for calls whose
// work is too small to pay for waking the pool (see serial_below_macs below).
class SerialScope {
 public:
  explicit SerialScope(bool active = true);
  ~SerialScope();
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  bool previous_;
};

void parallel_for(int ntasks, const std::function<void(int)>& fn);

// Waking the pool costs tens of microseconds, so a call touching less than about this
// many bytes per thread runs inline on the caller.
constexpr size_t kTaskGrainBytes = 256 * 1024;

// Products of fewer multiply-accumulates than serial_below_macs() run on the caller
// alone: below it the pool's wake-up and the second core's cold caches cost more than the
// split gains. bench/bench_threads.py times every LeNet-5 and VGG-11 product at 1 and 2
// threads to set it. On a quiet 2-core AMD EPYC (AVX-512 VNNI, load average 1.4) two
// threads were slower (1.26-1.71x the time) on every product of up to 3.1e6 MACs (the
// linears) and faster (1.22-1.95x) on every one from 7.5e6 (LeNet's convolutions) up;
// 5e6 sits between the two. set_serial_below_macs(0) threads every
// product (that bench measures with it).
constexpr double kDefaultSerialBelowMacs = 5.0e6;
double serial_below_macs();
void set_serial_below_macs(double macs);
inline bool small_op(double macs) { return macs < serial_below_macs(); }

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
