// The array pool (array_pool.h) as NumPy's allocator for array data: while it serves,
// every array of at least kPoolFrom bytes made on this thread's context (a kernel's result,
// a NumPy temporary of an op function) comes from the pool, and smaller ones, or ones the
// pool has no room for, from the allocator NumPy had before.
//
// NumPy's memory-handler API (NEP 49, NumPy >= 1.22): a "mem_handler" capsule holding a
// PyDataMem_Handler, made current for the calling context by PyDataMem_SetHandler. Like
// pybind11's own numpy.h, this file reads NumPy's C API table (`_ARRAY_API`) by index
// instead of including NumPy's headers; the indices and the handler's layout (version 1)
// are part of NumPy's ABI (numpy/_core/code_generators/numpy_api.py, ndarraytypes.h).
#include <cstring>

#include "array_pool.h"
#include "bindings.h"

namespace dsptrain {
namespace bind {
namespace {

struct NpyAllocator {   // PyDataMemAllocator
  void* ctx;
  void* (*malloc)(void* ctx, size_t size);
  void* (*calloc)(void* ctx, size_t nelem, size_t elsize);
  void* (*realloc)(void* ctx, void* ptr, size_t new_size);
  void (*free)(void* ctx, void* ptr, size_t size);
};

struct NpyHandler {     // PyDataMem_Handler, version 1
  char name[127];
  uint8_t version;
  NpyAllocator allocator;
};

constexpr int kSetHandler = 304;   // PyDataMem_SetHandler in NumPy's C API table
constexpr int kGetHandler = 305;   // PyDataMem_GetHandler
// Smaller arrays stay on the heap: glibc serves them from memory it keeps (below its mmap
// threshold, runtime/memory/arena.py MMAP_THRESHOLD), so they cost no page faults.
constexpr size_t kPoolFrom = 128 * 1024;

NpyAllocator before;             // the allocator NumPy had when the pool first served
bool serving = false;
PyObject* previous = nullptr;    // the handler to restore when the pool stops serving

void* pool_malloc(void*, size_t n) {
  if (n >= kPoolFrom)
    if (void* p = array_pool().allocate(n)) return p;
  return before.malloc(before.ctx, n);
}

void* pool_calloc(void*, size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) return nullptr;
  if (n >= kPoolFrom)
    if (void* p = array_pool().allocate(n)) return std::memset(p, 0, n);
  return before.calloc(before.ctx, count, size);
}

void* pool_realloc(void*, void* p, size_t n) {
  ArrayPool& pool = array_pool();
  if (p == nullptr || !pool.owns(p)) return before.realloc(before.ctx, p, n);
  const size_t held = pool.block_bytes(p);
  if (n <= held) return p;
  void* q = pool_malloc(nullptr, n);
  if (q != nullptr) {
    std::memcpy(q, p, held);
    pool.release(p);
  }
  return q;
}

void pool_free(void*, void* p, size_t n) {
  ArrayPool& pool = array_pool();
  if (p != nullptr && pool.owns(p)) pool.release(p);
  else before.free(before.ctx, p, n);
}

NpyHandler handler{"dsptrain_array_pool", 1, {nullptr, pool_malloc, pool_calloc, pool_realloc, pool_free}};

void** numpy_api() {
  static void** api = [] {
    py::object capsule = py::module_::import("numpy._core._multiarray_umath").attr("_ARRAY_API");
    return static_cast<void**>(PyCapsule_GetPointer(capsule.ptr(), nullptr));
  }();
  return api;
}

// Makes the pool NumPy's allocator for the calling context (on) or restores the one it
// replaced (off); returns whether it served before.
bool serve(bool on) {
  if (on == serving) return serving;
  auto set_handler = reinterpret_cast<PyObject* (*)(PyObject*)>(numpy_api()[kSetHandler]);
  if (on) {
    static PyObject* ours = [] {   // made once and never freed: arrays keep a reference to it
      auto get_handler = reinterpret_cast<PyObject* (*)()>(numpy_api()[kGetHandler]);
      PyObject* current = get_handler();   // kept: `before` lives in it
      if (current == nullptr) throw py::error_already_set();
      auto* h = static_cast<NpyHandler*>(PyCapsule_GetPointer(current, "mem_handler"));
      if (h == nullptr) throw py::error_already_set();
      before = h->allocator;
      return PyCapsule_New(&handler, "mem_handler", nullptr);
    }();
    previous = set_handler(ours);
    if (previous == nullptr) throw py::error_already_set();
  } else {
    PyObject* ours = set_handler(previous);
    if (ours == nullptr) throw py::error_already_set();
    Py_DECREF(ours);
    Py_DECREF(previous);
    previous = nullptr;
  }
  serving = on;
  return !on;
}

}  // namespace

void def_memory(py::module_& m) {
  m.def("array_pool_reserve", [](size_t capacity) { return array_pool().reserve(capacity); }, py::arg("capacity"),
        "Capacity of the array pool (bytes); returns the capacity in force.");
  m.def("array_pool_serve", &serve, py::arg("on"),
        "Make the array pool NumPy's allocator for arrays of 128 KB and more on this context (on), or "
        "restore the allocator it replaced (off); returns whether it served before.");
  m.def("array_pool_trim", [] { return array_pool().trim(); },
        "Give the pool's free pages back to the system; returns the bytes.");
  m.def("array_pool_stats", [] {
    const ArrayPoolStats s = array_pool().stats();
    py::dict d;
    d["capacity"] = s.capacity;
    d["live"] = s.live;
    d["high_water"] = s.high_water;
    d["served"] = s.served;
    d["missed"] = s.missed;
    d["largest_miss"] = s.largest_miss;
    return d;
  }, "The pool's capacity, live bytes, high-water mark, and blocks served and missed since the last reset.");
  m.def("array_pool_reset_counts", [] { array_pool().reset_counts(); });
}

}  // namespace bind
}  // namespace dsptrain
