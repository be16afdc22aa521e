// The CUDA decode GEMV over GGUF block-quantized weights (src/engine/cuda/gemv_quant.cu) against an f64 product
// with the values the test packed (tests/model/quant_pack.hpp): every quantized type, T = 1..8, odd row counts,
// strided x and out, NaN-poisoned outputs. Skips without a CUDA device (and in CPU builds).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../model/quant_pack.hpp"
#include "flashkit/runtime.hpp"
#include "model/weights.hpp"
#ifdef FLASHKIT_WITH_CUDA
#include <cuda_runtime.h>

#include "engine/cuda/gemv_quant.hpp"
#endif

namespace {

using fk_test::QType;

#ifdef FLASHKIT_WITH_CUDA
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

template <class T>
T* to_device(const T* host, size_t n) {
  void* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, n * sizeof(T) + 16), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, host, n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return static_cast<T*>(d);
}
#endif

TEST(CudaGemvQuant, EveryTypeAgainstF64) {
#ifndef FLASHKIT_WITH_CUDA
  GTEST_SKIP() << "CPU build";
#else
  if (flashkit::cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(23);
  std::normal_distribution<float> nd;
  for (QType qt : {QType::q8_0, QType::q4_0, QType::q4_k, QType::q5_k, QType::q6_k})
    for (int T : {1, 2, 5, 8})
      for (int64_t N : {1, 37, 300}) {
        const int64_t bpr = qt == QType::q4_0 || qt == QType::q8_0 ? 7 : 3, K = bpr * fk_test::qtype_values(qt);
        std::string blocks;
        std::vector<double> w;
        for (int64_t i = 0; i < N * bpr; ++i) fk_test::pack_random_block(qt, rng, blocks, w);
        const int64_t ldx = K + 4, ldo = N + 3;
        std::vector<float> x(size_t(T * ldx)), out(size_t(T * ldo), std::numeric_limits<float>::quiet_NaN());
        for (auto& v : x) v = nd(rng);
        float* dx = to_device(x.data(), x.size());
        float* dout = to_device(out.data(), out.size());
        auto* dw = to_device(reinterpret_cast<const uint8_t*>(blocks.data()), blocks.size());
        // The fused variants: N = 1 and 300 also add the output to a residual (the add after o / down; stride
        // ldo + 2); N = 37 and 300 take the raw x with an RMSNorm prologue and write the normed rows (stride K + 1).
        const bool add = N != 37, norm = N != 1;
        const int64_t ldh = ldo + 2, ldn = K + 1;
        const float eps = 1e-5f;
        std::vector<float> h(size_t(T * ldh)), h_out(h.size()), nw(static_cast<size_t>(K)),
            xn(size_t(T * ldn), std::numeric_limits<float>::quiet_NaN());
        for (auto& v : h) v = nd(rng);
        for (auto& v : nw) v = 1.0f + 0.3f * nd(rng);
        float* dh = to_device(h.data(), h.size());
        float* dnw = to_device(nw.data(), nw.size());
        float* dxn = to_device(xn.data(), xn.size());
        flashkit::engine::cuda::QuantGemvFusion fu;
        if (add) fu.add_to = dh, fu.ld_add = ldh;
        if (norm) fu.norm_w = dnw, fu.eps = eps, fu.norm_out = dxn, fu.ld_norm_out = ldn;
        flashkit::engine::cuda::gemv_quant(dx, ldx, T, dw, weight_type(qt), N, K, dout, ldo, nullptr, fu);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(h_out.data(), dh, h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(xn.data(), dxn, xn.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        for (float* p : {dx, dout, dh, dnw, dxn}) cudaFree(p);
        cudaFree(dw);
        double d = 0, r = 0, dh2 = 0;
        for (int t = 0; t < T; ++t) {
          double ss = 0;
          for (int64_t k = 0; k < K; ++k) ss += double(x[size_t(t * ldx + k)]) * x[size_t(t * ldx + k)];
          const double inv = norm ? 1.0 / std::sqrt(ss / double(K) + eps) : 1.0;
          for (int64_t k = 0; norm && k < K; ++k) {
            const double e = double(x[size_t(t * ldx + k)]) * inv * nw[size_t(k)];
            ASSERT_NEAR(xn[size_t(t * ldn + k)], e, 1e-5 * (std::fabs(e) + 1)) << "normed row " << t << " col " << k;
          }
          for (int64_t n = 0; n < N; ++n) {
            double e = 0;
            for (int64_t k = 0; k < K; ++k)
              e += double(x[size_t(t * ldx + k)]) * (norm ? inv * nw[size_t(k)] : 1.0) * w[size_t(n * K + k)];
            const double o = out[size_t(t * ldo + n)];
            d += (o - e) * (o - e);
            r += e * e;
            const double he = double(h[size_t(t * ldh + n)]) + (add ? e : 0.0), ho = h_out[size_t(t * ldh + n)];
            dh2 += (ho - he) * (ho - he);
          }
        }
        EXPECT_LT(std::sqrt(d / r), 1e-5) << fk_test::qtype_name(qt) << " T " << T << " N " << N;
        EXPECT_LT(std::sqrt(dh2 / r), 1e-5) << "residual add: " << fk_test::qtype_name(qt) << " T " << T << " N " << N;
        for (int t = 0; t < T; ++t)  // the gaps of the strided residual are untouched
          for (int64_t n = N; n < ldh; ++n) ASSERT_EQ(h_out[size_t(t * ldh + n)], h[size_t(t * ldh + n)]);
      }
#endif
}

// The prefill panel dequantization (bf16 out) and the quantized embedding gather against the packed values: odd row
// counts, outputs poisoned, an out-of-range token giving a NaN row (as the plain embed kernel).
TEST(CudaGemvQuant, DequantizeAndEmbedAgainstPackedValues) {
#ifndef FLASHKIT_WITH_CUDA
  GTEST_SKIP() << "CPU build";
#else
  if (flashkit::cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(29);
  for (QType qt : {QType::q8_0, QType::q4_0, QType::q4_k, QType::q5_k, QType::q6_k}) {
    const int64_t bpr = qt == QType::q4_0 || qt == QType::q8_0 ? 5 : 2, K = bpr * fk_test::qtype_values(qt), N = 37;
    std::string blocks;
    std::vector<double> w;
    for (int64_t i = 0; i < N * bpr; ++i) fk_test::pack_random_block(qt, rng, blocks, w);
    auto* dw = to_device(reinterpret_cast<const uint8_t*>(blocks.data()), blocks.size());
    // f32 evaluation of d * sc * q - dmin * m may cancel: an absolute slack of 1e-6 of the largest value.
    double amax = 0;
    for (double v : w) amax = std::max(amax, std::fabs(v));
    const double slack = 1e-6 * amax;
    // Rows 3 .. N-1 of the matrix (a panel that does not start at row 0).
    const int64_t r0 = 3, rows = N - r0, row_bytes = bpr * fk_test::qtype_bytes(qt);
    std::vector<uint16_t> deq(size_t(rows * K), 0x7fc0);  // bf16 NaN
    uint16_t* ddeq = to_device(deq.data(), deq.size());
    flashkit::engine::cuda::dequantize_bf16(dw + r0 * row_bytes, weight_type(qt), rows, K, ddeq, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(deq.data(), ddeq, deq.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int64_t i = 0; i < rows * K; ++i) {
      const double e = w[size_t(r0 * K + i)], o = flashkit::bf16_to_f32(deq[size_t(i)]);
      ASSERT_LE(std::fabs(o - e), std::fabs(e) * (1.0 / 256) + slack) << fk_test::qtype_name(qt) << " value " << i;
    }
    // Embedding rows of tokens {N-1, 0, N (out of range), 17}, scaled, f32 and bf16 outputs of stride K + 3.
    const std::vector<int32_t> tokens = {int32_t(N - 1), 0, int32_t(N), 17};
    const int64_t T = int64_t(tokens.size()), ldo = K + 3;
    int32_t* dtok = to_device(tokens.data(), tokens.size());
    for (bool obf : {false, true}) {
      const size_t es = obf ? 2 : 4;
      std::vector<uint8_t> out(size_t(T * ldo) * es, 0xff);  // NaN in either dtype
      uint8_t* dout = to_device(out.data(), out.size());
      flashkit::engine::cuda::embed_quant(dw, weight_type(qt), N, K, dtok, T, dout, obf, ldo, 1.5f, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(out.data(), dout, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      cudaFree(dout);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t k = 0; k < K; ++k) {
          const size_t at = size_t(t * ldo + k);
          float o;
          if (obf) {
            uint16_t h;
            std::memcpy(&h, &out[at * 2], 2);
            o = flashkit::bf16_to_f32(h);
          } else {
            std::memcpy(&o, &out[at * 4], 4);
          }
          if (tokens[size_t(t)] >= N) {
            ASSERT_TRUE(std::isnan(o)) << "out-of-range token row " << t;
            continue;
          }
          const double e = 1.5 * w[size_t(tokens[size_t(t)] * K + k)];
          ASSERT_LE(std::fabs(o - e), std::fabs(e) * (obf ? 1.0 / 256 : 1e-6) + 1.5 * slack)
              << fk_test::qtype_name(qt) << (obf ? " bf16" : " f32") << " row " << t << " col " << k;
        }
    }
    cudaFree(dtok);
    cudaFree(ddeq);
    cudaFree(dw);
  }
#endif
}

}  // namespace
