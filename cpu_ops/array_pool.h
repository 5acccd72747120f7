// The array pool: kept memory that the large NumPy arrays of a memory-planned step come
// from (the results a kernel returns before the executor copies them into the arena, the
// op functions' NumPy temporaries), sized by the plan's largest op workspace
// (runtime/memory/planner.py op_workspace, runtime/memory/pool.py).
//
// Why: under a memory budget glibc's mmap threshold is pinned at 128 KB
// (runtime/memory/arena.py), so without the pool every larger array is a fresh mmap whose
// pages fault in again and whose munmap gives them back: a budgeted step paid 2-3x plain's
// time per sample in the residual adds' int64 temporaries alone. The pool's pages are
// touched once and kept, like the arena's, so its high-water mark is what the plan counts.
//
// One region of address space (mmap, pages resident once touched), first fit
// at the lowest offset (so the pages touched stay at the bottom), freed blocks coalesced.
// A request that does not fit returns nullptr: the caller falls back to the allocator it
// had (and the plan missed something; stats().missed says so). Thread-safe.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>

namespace dsptrain {

struct ArrayPoolStats {
  size_t capacity = 0;     // bytes the pool may hand out
  size_t live = 0;         // bytes in blocks handed out and not yet freed
  size_t high_water = 0;   // highest byte handed out (since a trim): the pages touched
  size_t served = 0;       // blocks handed out since the last reset_counts()
  size_t missed = 0;       // requests that did not fit (the caller fell back)
  size_t largest_miss = 0; // the largest of them, bytes
};

class ArrayPool {
 public:
  static constexpr size_t kAlign = 128;  // an HVX vector, as the arena's offsets

  // Capacity for the next allocations (rounded up to pages). A larger one grows the region
  // (mremap: the pages touched stay); a smaller one keeps it but gives back the free pages
  // above the capacity. Returns the capacity in force.
  size_t reserve(size_t capacity);
  void* allocate(size_t bytes);          // nullptr: no free block holds `bytes`
  bool owns(const void* p) const;        // p points into the region
  size_t block_bytes(const void* p);     // the size of the live block at p (0: none)
  void release(void* p);                 // a block from allocate() goes back
  // Gives the free pages back to the system (they fault in again on use); returns bytes.
  size_t trim();
  ArrayPoolStats stats();
  void reset_counts();

 private:
  size_t trim_locked(size_t from);
  char* base_ = nullptr;
  size_t region_ = 0;                    // bytes mapped at base_
  ArrayPoolStats stats_;
  std::map<size_t, size_t> free_;        // offset -> bytes, coalesced
  std::map<size_t, size_t> live_;        // offset -> bytes
  std::mutex mutex_;
};

// The process's one pool (never destroyed: arrays from it may outlive any owner).
ArrayPool& array_pool();

}  // namespace dsptrain
