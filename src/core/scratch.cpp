#include "core/scratch.hpp"

#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

namespace flashkit {

namespace {

struct Block {
  void* p;
  size_t capacity;
};

// Keeps at most kMaxBlocks blocks and kMaxBytes in total; larger releases are freed at once.
constexpr size_t kMaxBlocks = 16;
constexpr size_t kMaxBytes = size_t(1) << 30;

struct Pool {
  std::mutex mu;
  std::vector<Block> free;
  size_t bytes = 0;
  ~Pool() {
    for (auto& b : free) std::free(b.p);
  }
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: kernels may run during static destruction
  return *p;
}

}  // namespace

Scratch::Scratch(size_t bytes) {
  const size_t want = (bytes + 63) / 64 * 64 + 64;
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    size_t best = p.free.size();
    for (size_t i = 0; i < p.free.size(); ++i)  // smallest block that fits
      if (p.free[i].capacity >= want && (best == p.free.size() || p.free[i].capacity < p.free[best].capacity)) best = i;
    if (best != p.free.size() && p.free[best].capacity <= 4 * want) {
      data_ = p.free[best].p;
      capacity_ = p.free[best].capacity;
      p.bytes -= capacity_;
      p.free.erase(p.free.begin() + long(best));
      return;
    }
  }
  data_ = std::aligned_alloc(64, want);
  if (!data_) throw std::bad_alloc();
  capacity_ = want;
}

Scratch::~Scratch() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  if (capacity_ <= kMaxBytes / 4) {
    while (!p.free.empty() && (p.free.size() >= kMaxBlocks || p.bytes + capacity_ > kMaxBytes)) {
      std::free(p.free.front().p);
      p.bytes -= p.free.front().capacity;
      p.free.erase(p.free.begin());
    }
    if (p.bytes + capacity_ <= kMaxBytes) {
      p.free.push_back({data_, capacity_});
      p.bytes += capacity_;
      return;
    }
  }
  std::free(data_);
}

void scratch_release_all() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  for (auto& b : p.free) std::free(b.p);
  p.free.clear();
  p.bytes = 0;
}

}  // namespace flashkit
