// The bulk GEMV (src/engine/cuda/gemv.cu, gemv_bulk_kernel) on the CPU emulation against the legacy kernel: every
// fused prologue / epilogue feature of tests/engine/gemv_feature_cases.hpp (the small shapes), with the default ring
// and with a 16 KB ring (two stages, many refills); y, h_out, a_out bitwise the legacy kernel's and close to f64.
// A development check of the ring's indexing and barriers without a GPU; tests/engine/test_cuda_gemv_bulk.cpp is
// the real one.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/cuda/kernels.hpp"
#include "gemv_feature_cases.hpp"

using namespace flashkit;

Tuning g_tuning;
namespace flashkit::engine::cuda {
const Tuning& launch_tuning() { return g_tuning; }
}  // namespace flashkit::engine::cuda
namespace flashkit::engine::cuda {
extern const char* emu_last_launch_name();
}

struct HostMem {
  void* alloc(size_t bytes) {
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    std::memset(p, 0xff, bytes);
    return p;
  }
  void put(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
  void get(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
  void free(void* p) { std::free(p); }
};

int main() {
  int fails = 0;
  HostMem mem;
  for (const auto& c : fk_test::gemv_feature_cases()) {
    if (c.big) continue;
    g_tuning.cuda_gemv_plan = 1;  // legacy
    g_tuning.cuda_gemv_ring_kb = 0;
    const auto ref = fk_test::run_gemv_feature_case(c, mem);
    for (int ring : {0, 16}) {
      g_tuning.cuda_gemv_plan = 3;  // bulk
      g_tuning.cuda_gemv_ring_kb = ring;
      const auto got = fk_test::run_gemv_feature_case(c, mem);
      const std::string kern = engine::cuda::emu_last_launch_name();
      const bool same = got.y.size() == ref.y.size() && !std::memcmp(got.y.data(), ref.y.data(), got.y.size() * 4) &&
                        got.h.size() == ref.h.size() && !std::memcmp(got.h.data(), ref.h.data(), got.h.size() * 4) &&
                        got.a.size() == ref.a.size() && !std::memcmp(got.a.data(), ref.a.data(), got.a.size() * 4);
      const bool ok = same && kern == "gemv_bf16_bulk" && got.err <= fk_test::gemv_feature_tolerance(c) &&
                      ref.err <= fk_test::gemv_feature_tolerance(c);
      std::printf("%s %-72s ring %4d KB: %s, %s, err %.3g (legacy %.3g)\n", ok ? "ok  " : "FAIL", c.name, ring,
                  kern.c_str(), same ? "bitwise the legacy kernel's" : "bits differ", got.err, ref.err);
      fails += !ok;
    }
  }
  std::printf("%s\n", fails ? "gemv bulk emulation: FAILED" : "gemv bulk emulation: all ok");
  return fails ? 1 : 0;
}
