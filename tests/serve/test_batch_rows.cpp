// A batched decode step multiplies up to 8 rows (one per sequence) by each weight matrix in one pass. Each row must
// come out exactly as it does alone (the GEMV kernels sum every output in the same order whatever the number of rows),
// and match an f64 reference: every ISA, f32 and bf16 weights, 1..8 rows (6-8 are the 8-row tiles), odd sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/cpu/gemv.hpp"
#include "flashkit/dtype.hpp"

namespace {

using flashkit::engine::cpu::Isa;

TEST(BatchRows, EachRowAsAloneAndAsTheReference) {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd;
  std::vector<Isa> isas = {Isa::scalar};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isas.push_back(Isa::avx2);
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) isas.push_back(Isa::avx512);
  for (auto [N, K] : std::vector<std::pair<int64_t, int64_t>>{{37, 64}, {130, 96}, {9, 23}})
    for (bool bf16 : {false, true})
      for (int64_t T = 1; T <= 8; ++T) {
        const int64_t ldx = K + 3, ldo = N + 1;
        std::vector<float> x(size_t(T * ldx)), wf(size_t(N * K));
        std::vector<uint16_t> wb(size_t(N * K));
        for (auto& v : x) v = nd(rng);
        for (size_t i = 0; i < wf.size(); ++i) {
          wb[i] = flashkit::f32_to_bf16(nd(rng));
          wf[i] = flashkit::bf16_to_f32(wb[i]);
        }
        const void* W = bf16 ? static_cast<const void*>(wb.data()) : wf.data();
        const flashkit::DType wt = bf16 ? flashkit::DType::bf16 : flashkit::DType::f32;
        for (Isa isa : isas) {
          std::vector<float> all(size_t(T * ldo), NAN), one(size_t(ldo), NAN);
          flashkit::engine::cpu::matmul(isa, 2, x.data(), ldx, T, W, wt, N, K, all.data(), ldo);
          for (int64_t t = 0; t < T; ++t) {
            flashkit::engine::cpu::matmul(isa, 1, x.data() + t * ldx, ldx, 1, W, wt, N, K, one.data(), ldo);
            double d = 0, r = 0;
            for (int64_t n = 0; n < N; ++n) {
              ASSERT_EQ(all[size_t(t * ldo + n)], one[size_t(n)])
                  << flashkit::engine::cpu::isa_name(isa) << " T " << T << " row " << t << " col " << n << " bf16 " << bf16;
              double ref = 0;
              for (int64_t k = 0; k < K; ++k) ref += double(x[size_t(t * ldx + k)]) * wf[size_t(n * K + k)];
              d += (one[size_t(n)] - ref) * (one[size_t(n)] - ref);
              r += ref * ref;
            }
            EXPECT_LT(std::sqrt(d / r), 1e-5);
          }
        }
      }
}

}  // namespace
