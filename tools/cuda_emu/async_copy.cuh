// CPU emulation of src/kernels/cuda/ssm/async_copy.cuh (tools/cuda_emu/run_ssm.sh puts it first on the include
// path): each emulated thread queues its copies; commit closes a group; wait<N> performs all but the N most recent
// groups. So a kernel that reads shared memory before waiting for the copy reads the poisoned (0xff) bytes and fails.
#pragma once
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <vector>

namespace flashkit::kernels {

inline thread_local std::vector<std::function<void()>> emu_open_group;
inline thread_local std::deque<std::vector<std::function<void()>>> emu_groups;

inline void emu_cp(float* dst, const float* src, int size, int bytes) {
  emu_open_group.push_back([=] {
    std::memset(dst, 0, size_t(size));
    if (bytes) std::memcpy(dst, src, size_t(bytes));
  });
}
inline void cp_async16(float* dst, const float* src, int bytes) { emu_cp(dst, src, 16, bytes); }
inline void cp_async4(float* dst, const float* src, int bytes) { emu_cp(dst, src, 4, bytes); }
inline void cp_async_commit() {
  emu_groups.push_back(std::move(emu_open_group));
  emu_open_group.clear();
}
template <int N>
inline void cp_async_wait() {
  while (emu_groups.size() > size_t(N)) {
    for (auto& f : emu_groups.front()) f();
    emu_groups.pop_front();
  }
}
inline float ex2_approx(float x) { return std::exp2(x); }

}  // namespace flashkit::kernels
