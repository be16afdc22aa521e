// The CUDA quantized GEMV's lane arithmetic (src/engine/cuda/quant_dot.cuh, host-and-device code) run on the CPU:
// the 32 lanes' shares of each row summed and compared with an f64 product over the values the test packed
// (tests/model/quant_pack.hpp). Every type, T = 1..3 rows of x (strided), rows of several blocks, a row buffer with
// the alignment the backend gives (16 bytes). Catches index mistakes without a GPU; CudaGemvQuant.* runs the kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../model/quant_pack.hpp"
#include "engine/cuda/quant_dot.cuh"

namespace {

using fk_test::QType;
using flashkit::model::WeightType;

namespace q = flashkit::engine::cuda::quant;

// All 32 lanes' shares; nw (the RMSNorm prologue's weight) may be null: the plain dot product.
template <WeightType W, int T>
void lanes(const uint8_t* row, int64_t nb, const float* x, int64_t ldx, const float* nw, float* acc, float* sq) {
  for (int lane = 0; lane < 32; ++lane) {
    if (nw) q::lane_dot<W, T, true>(row, nb, q::XIn<true>{x, ldx, nw, sq}, lane, acc);
    else q::lane_dot<W, T>(row, nb, x, ldx, lane, acc);
  }
}

template <WeightType W>
void lanes_t(int T, const uint8_t* row, int64_t nb, const float* x, int64_t ldx, const float* nw, float* acc,
             float* sq) {
  if (T == 1) lanes<W, 1>(row, nb, x, ldx, nw, acc, sq);
  else if (T == 2) lanes<W, 2>(row, nb, x, ldx, nw, acc, sq);
  else lanes<W, 3>(row, nb, x, ldx, nw, acc, sq);
}

void run(QType qt, int T, const uint8_t* row, int64_t nb, const float* x, int64_t ldx, const float* nw, float* acc,
         float* sq) {
  switch (qt) {
    case QType::q8_0: return lanes_t<WeightType::q8_0>(T, row, nb, x, ldx, nw, acc, sq);
    case QType::q4_0: return lanes_t<WeightType::q4_0>(T, row, nb, x, ldx, nw, acc, sq);
    case QType::q4_k: return lanes_t<WeightType::q4_k>(T, row, nb, x, ldx, nw, acc, sq);
    case QType::q5_k: return lanes_t<WeightType::q5_k>(T, row, nb, x, ldx, nw, acc, sq);
    case QType::q6_k: return lanes_t<WeightType::q6_k>(T, row, nb, x, ldx, nw, acc, sq);
  }
}

TEST(CudaQuantLanes, EveryTypeAgainstF64) {
  std::mt19937 rng(31);
  std::normal_distribution<float> nd;
  for (QType qt : {QType::q8_0, QType::q4_0, QType::q4_k, QType::q5_k, QType::q6_k})
    for (int64_t nb : {1, 3, 9, 11})  // Q4_0 / Q8_0: fewer blocks than a warp step, and not a multiple of it
      for (int T : {1, 2, 3})
        for (bool norm : {false, true}) {
        const int64_t K = nb * fk_test::qtype_values(qt), ldx = K + 5;
        std::string bytes;
        std::vector<double> w;
        for (int64_t b = 0; b < nb; ++b) fk_test::pack_random_block(qt, rng, bytes, w);
        // The row at a 16-byte aligned address, as the backend places segments (8-byte aligned storage, room for the
        // shift).
        std::vector<uint64_t> storage(bytes.size() / 8 + 4);
        auto* row = reinterpret_cast<uint8_t*>(storage.data()) + (16 - reinterpret_cast<uintptr_t>(storage.data()) % 16) % 16;
        std::memcpy(row, bytes.data(), bytes.size());
        std::vector<float> x(size_t(T * ldx)), nw(static_cast<size_t>(K));
        for (float& v : x) v = nd(rng);
        for (float& v : nw) v = 1.0f + 0.3f * nd(rng);
        float acc[3] = {0, 0, 0}, sq[3] = {0, 0, 0};
        run(qt, T, row, nb, x.data(), ldx, norm ? nw.data() : nullptr, acc, sq);
        for (int t = 0; t < T; ++t) {
          double e = 0, mag = 0, ss = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double xk = double(x[size_t(t * ldx + k)]) * (norm ? nw[size_t(k)] : 1.0f);
            e += xk * w[size_t(k)];
            mag += std::fabs(xk * w[size_t(k)]);
            ss += double(x[size_t(t * ldx + k)]) * x[size_t(t * ldx + k)];
          }
          EXPECT_LE(std::fabs(acc[t] - e), 1e-5 * mag + 1e-30) << fk_test::qtype_name(qt) << " blocks " << nb << " T "
                                                                << T << " norm " << norm << " row " << t;
          if (norm) EXPECT_NEAR(sq[t], ss, 1e-5 * ss) << fk_test::qtype_name(qt) << " sum of squares, row " << t;
        }
      }
}

}  // namespace
