// Persistent workers wait on a condition variable for a new "generation" of tasks and
// take task indices from an atomic counter; the caller works too and then waits for
// the workers that joined the call (not for those that woke too late to). Started on first use, joined at exit.
// Both sides spin briefly before they block: a training step makes a few hundred calls
// tens of microseconds apart, and waking a sleeping thread (a futex, on a VM an idle
// virtual CPU) costs about as much as a small call's work.
#include "thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace dsptrain {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// How long a thread polls before it sleeps: a little more than the gap between two ops
// of a step (the Python around each op), so a step's calls find the worker awake.
constexpr auto kSpin = std::chrono::microseconds(50);

// Polls `done()` for up to kSpin; true if it became true.
template <typename Done>
bool spin_until(Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

thread_local bool t_inside_task = false;
thread_local bool t_serial = false;
std::atomic<int> g_thread_limit{1 << 20};
std::atomic<double> g_serial_below_macs{kDefaultSerialBelowMacs};

class ThreadPool {
 public:
  explicit ThreadPool(int threads) : threads_(threads) {
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      stop_flag_.store(true);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int threads() const { return threads_; }

  void run(int ntasks, const std::function<void(int)>& fn) {
    std::lock_guard<std::mutex> serial(caller_mutex_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = &fn;
      ntasks_ = ntasks;
      next_.store(0);
      busy_ = 0;
      open_ = true;
      ++generation_;
    }
    wake_.notify_all();
    drain();
    // Close the call: a worker that has not woken up by now (its core busy with another
    // process) stays out, instead of the caller waiting a scheduler time slice for it
    // to find every task taken. Only the workers that joined are waited for.
    std::unique_lock<std::mutex> lock(mutex_);
    open_ = false;
    if (busy_.load() != 0) {  // a joined worker finishing its last task: poll, then sleep
      lock.unlock();
      spin_until([this] { return busy_.load(std::memory_order_acquire) == 0; });
      lock.lock();
    }
    done_.wait(lock, [this] { return busy_ == 0; });
    fn_ = nullptr;
  }

 private:
  void drain() {
    t_inside_task = true;
    for (int i = next_.fetch_add(1); i < ntasks_; i = next_.fetch_add(1)) (*fn_)(i);
    t_inside_task = false;
  }
  void worker_loop() {
    long seen = 0;
    for (;;) {
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen || stop_flag_.load(); });
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (!open_) continue;   // woke after the caller closed the call: nothing left for it
        ++busy_;
      }
      drain();
      std::lock_guard<std::mutex> lock(mutex_);
      if (--busy_ == 0) done_.notify_one();
    }
  }

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex caller_mutex_, mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* fn_ = nullptr;
  int ntasks_ = 0;
  std::atomic<int> busy_{0};        // written under mutex_, polled without it
  std::atomic<long> generation_{0}; // as busy_
  std::atomic<int> next_{0};
  std::atomic<bool> stop_flag_{false};  // stop_, for the polling loop
  bool stop_ = false;
  bool open_ = false;   // workers may still join the current call
};

int configured_threads() {
  if (const char* env = std::getenv("DSPTRAIN_CPU_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  return hw > 0 ? hw : 1;
}

ThreadPool& pool() {
  static ThreadPool instance(configured_threads());
  return instance;
}

}  // namespace

int pool_threads() { return std::min(pool().threads(), g_thread_limit.load(std::memory_order_relaxed)); }

int set_thread_limit(int threads) {
  g_thread_limit.store(std::max(1, std::min(threads, pool().threads())));
  return pool_threads();
}

double serial_below_macs() { return g_serial_below_macs.load(std::memory_order_relaxed); }
void set_serial_below_macs(double macs) { g_serial_below_macs.store(macs); }

SerialScope::SerialScope(bool active) : previous_(t_serial) { t_serial = previous_ || active; }
SerialScope::~SerialScope() { t_serial = previous_; }

int tasks_for(size_t bytes, int max_tasks, size_t grain) {
  const size_t by_work = bytes / (grain > 0 ? grain : 1);
  const size_t cap = std::min<size_t>(static_cast<size_t>(std::max(max_tasks, 1)), 4 * static_cast<size_t>(pool_threads()));
  return static_cast<int>(std::max<size_t>(1, std::min(by_work, cap)));
}

void parallel_for(int ntasks, const std::function<void(int)>& fn) {
  if (ntasks <= 0) return;
  if (ntasks == 1 || t_inside_task || t_serial || pool_threads() == 1) {
    for (int i = 0; i < ntasks; ++i) fn(i);
    return;
  }
  pool().run(ntasks, fn);
}

}  // namespace dsptrain
