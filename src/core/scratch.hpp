// Reusable scratch memory for kernels. Fresh multi-megabyte allocations cost a page fault per 4 KiB on
// first touch (~0.5 ms for 8 MB), which dominates short calls such as decode; this pool keeps a few
// released blocks and hands them back out. Thread-safe; a block belongs to one Scratch at a time.
#pragma once
#include <cstddef>

namespace flashkit {

class Scratch {
 public:
  explicit Scratch(size_t bytes);  // 64-byte aligned, at least `bytes`; throws std::bad_alloc
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* data() const { return data_; }
  float* floats() const { return static_cast<float*>(data_); }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// Frees every pooled block (tests and long-running servers that want memory back).
void scratch_release_all();

}  // namespace flashkit
