// The array pool (see array_pool.h): one mmap'd region, first fit, coalescing free list.
#include "array_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

namespace dsptrain {
namespace {

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

size_t page_bytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

size_t ArrayPool::reserve(size_t capacity) {
  capacity = round_up(capacity, page_bytes());
  std::lock_guard<std::mutex> lock(mutex_);
  if (capacity > region_) {   // grow the region, keeping the pages touched so far
    void* p = base_ == nullptr
                  ? mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                  // live blocks pin the region where it is: grow it in place or not at all
                  : mremap(base_, region_, capacity, live_.empty() ? MREMAP_MAYMOVE : 0);
    if (p != MAP_FAILED) {
      base_ = static_cast<char*>(p);
      const size_t added = capacity - region_;
      auto last = free_.empty() ? free_.end() : std::prev(free_.end());
      if (last != free_.end() && last->first + last->second == region_) last->second += added;
      else free_[region_] = added;
      region_ = capacity;
    }
  }
  // a smaller capacity keeps the region (address space only) but gives its pages above back
  stats_.capacity = std::min(capacity, region_);
  trim_locked(stats_.capacity);
  return stats_.capacity;
}

void* ArrayPool::allocate(size_t bytes) {
  const size_t n = round_up(std::max<size_t>(bytes, 1), kAlign);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = free_.begin(); it != free_.end() && it->first + n <= stats_.capacity; ++it) {
    if (it->second < n) continue;
    const size_t offset = it->first, rest = it->second - n;
    free_.erase(it);
    if (rest > 0) free_[offset + n] = rest;
    live_[offset] = n;
    stats_.live += n;
    stats_.high_water = std::max(stats_.high_water, offset + n);
    ++stats_.served;
    return base_ + offset;
  }
  ++stats_.missed;
  stats_.largest_miss = std::max(stats_.largest_miss, bytes);
  return nullptr;
}

// Without the lock: the region moves only in reserve(), which runs between steps.
bool ArrayPool::owns(const void* p) const {
  const char* c = static_cast<const char*>(p);
  return base_ != nullptr && c >= base_ && c < base_ + region_;
}

size_t ArrayPool::block_bytes(const void* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(static_cast<size_t>(static_cast<const char*>(p) - base_));
  return it == live_.end() ? 0 : it->second;
}

void ArrayPool::release(void* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(static_cast<size_t>(static_cast<char*>(p) - base_));
  if (it == live_.end()) return;   // not a live block: nothing to give back
  size_t offset = it->first, n = it->second;
  live_.erase(it);
  stats_.live -= n;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + n == next->first) {   // join the free block after
    n += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {                                 // and the one before
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += n;
      return;
    }
  }
  free_[offset] = n;
}

size_t ArrayPool::trim_locked(size_t from) {
  const size_t page = page_bytes();
  size_t given = 0;
  for (const auto& [offset, n] : free_) {
    const size_t start = round_up(std::max(offset, from), page);
    const size_t end = (offset + n) / page * page;
    if (end > start && madvise(base_ + start, end - start, MADV_DONTNEED) == 0) given += end - start;
  }
  // The pages still touched end with the last live block (live_ is ordered by offset and
  // its blocks never overlap).
  const size_t top = live_.empty() ? 0 : live_.rbegin()->first + live_.rbegin()->second;
  stats_.high_water = std::max(std::min(stats_.high_water, from), top);
  return given;
}

size_t ArrayPool::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  return base_ == nullptr ? 0 : trim_locked(0);
}

ArrayPoolStats ArrayPool::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void ArrayPool::reset_counts() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.served = stats_.missed = stats_.largest_miss = 0;
}

ArrayPool& array_pool() {
  static ArrayPool* pool = new ArrayPool;
  return *pool;
}

}  // namespace dsptrain
