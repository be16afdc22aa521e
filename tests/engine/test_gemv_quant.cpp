// The CPU GEMV / GEMM over GGUF block-quantized weights against a plain f64 product with the values the test packed
// (tests/model/quant_pack.hpp): every quantized type, every ISA, the decode (T <= 8) and prefill (T > 8) paths, odd
// row counts, strided x and out, NaN-poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../model/quant_pack.hpp"
#include "engine/cpu/gemv_quant.hpp"

namespace {

using flashkit::engine::cpu::Isa;
using fk_test::QType;

flashkit::model::WeightType weight_type(QType t) {
  using W = flashkit::model::WeightType;
  switch (t) {
    case QType::q8_0: return W::q8_0;
    case QType::q4_0: return W::q4_0;
    case QType::q4_k: return W::q4_k;
    case QType::q5_k: return W::q5_k;
    case QType::q6_k: return W::q6_k;
  }
  return W::f32;
}

TEST(EngineKernels, MatmulQuantEveryTypeIsaAndShape) {
  std::vector<Isa> isas = {Isa::scalar};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    isas.push_back(Isa::avx2);
  std::mt19937 rng(17);
  std::normal_distribution<float> nd;
  for (QType qt : {QType::q8_0, QType::q4_0, QType::q4_k, QType::q5_k, QType::q6_k})
    for (int64_t T : {1, 3, 8, 11})
      for (int64_t N : {1, 7, 37}) {
        const int64_t bpr = qt == QType::q4_0 || qt == QType::q8_0 ? 5 : 2, K = bpr * fk_test::qtype_values(qt);
        std::string blocks;
        std::vector<double> w;
        for (int64_t i = 0; i < N * bpr; ++i) fk_test::pack_random_block(qt, rng, blocks, w);
        const int64_t ldx = K + 3, ldo = N + 2;
        std::vector<float> x(size_t(T * ldx));
        for (auto& v : x) v = nd(rng);
        for (Isa isa : isas) {
          std::vector<float> out(size_t(T * ldo), std::numeric_limits<float>::quiet_NaN());
          flashkit::engine::cpu::matmul_quant(isa, 2, x.data(), ldx, T,
                                              reinterpret_cast<const uint8_t*>(blocks.data()), weight_type(qt), N, K,
                                              out.data(), ldo);
          double d = 0, r = 0;
          for (int64_t t = 0; t < T; ++t)
            for (int64_t n = 0; n < N; ++n) {
              double e = 0;
              for (int64_t k = 0; k < K; ++k) e += double(x[size_t(t * ldx + k)]) * w[size_t(n * K + k)];
              const double o = out[size_t(t * ldo + n)];
              d += (o - e) * (o - e);
              r += e * e;
            }
          EXPECT_LT(std::sqrt(d / r), 1e-5)
              << fk_test::qtype_name(qt) << " isa " << flashkit::engine::cpu::isa_name(isa) << " T " << T << " N " << N;
        }
      }
}

}  // namespace
