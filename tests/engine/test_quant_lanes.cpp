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

template <WeightType W, int T>
void lanes(const uint8_t* row, int64_t nb, const float* x, int64_t ldx, float* acc) {
  for (int lane = 0; lane < 32; ++lane) flashkit::engine::cuda::quant::lane_dot<W, T>(row, nb, x, ldx, lane, acc);
}

template <WeightType W>
void lanes_t(int T, const uint8_t* row, int64_t nb, const float* x, int64_t ldx, float* acc) {
  if (T == 1) lanes<W, 1>(row, nb, x, ldx, acc);
  else if (T == 2) lanes<W, 2>(row, nb, x, ldx, acc);
  else lanes<W, 3>(row, nb, x, ldx, acc);
}

void run(QType qt, int T, const uint8_t* row, int64_t nb, const float* x, int64_t ldx, float* acc) {
  switch (qt) {
    case QType::q8_0: return lanes_t<WeightType::q8_0>(T, row, nb, x, ldx, acc);
    case QType::q4_0: return lanes_t<WeightType::q4_0>(T, row, nb, x, ldx, acc);
    case QType::q4_k: return lanes_t<WeightType::q4_k>(T, row, nb, x, ldx, acc);
    case QType::q5_k: return lanes_t<WeightType::q5_k>(T, row, nb, x, ldx, acc);
    case QType::q6_k: return lanes_t<WeightType::q6_k>(T, row, nb, x, ldx, acc);
  }
}

TEST(CudaQuantLanes, EveryTypeAgainstF64) {
  std::mt19937 rng(31);
  std::normal_distribution<float> nd;
  for (QType qt : {QType::q8_0, QType::q4_0, QType::q4_k, QType::q5_k, QType::q6_k})
    for (int64_t nb : {1, 3, 9, 11})  // Q4_0 / Q8_0: fewer blocks than a warp step, and not a multiple of it
      for (int T : {1, 2, 3}) {
        const int64_t K = nb * fk_test::qtype_values(qt), ldx = K + 5;
        std::string bytes;
        std::vector<double> w;
        for (int64_t b = 0; b < nb; ++b) fk_test::pack_random_block(qt, rng, bytes, w);
        std::vector<uint64_t> storage(bytes.size() / 8 + 2);  // 8-byte aligned; +16 gives the backend's alignment
        auto* row = reinterpret_cast<uint8_t*>(storage.data()) + 16 - reinterpret_cast<uintptr_t>(storage.data()) % 16;
        if (row + bytes.size() > reinterpret_cast<uint8_t*>(storage.data() + storage.size())) {
          storage.resize(storage.size() + 2);
          row = reinterpret_cast<uint8_t*>(storage.data()) + 16 - reinterpret_cast<uintptr_t>(storage.data()) % 16;
        }
        std::memcpy(row, bytes.data(), bytes.size());
        std::vector<float> x(size_t(T * ldx));
        for (float& v : x) v = nd(rng);
        float acc[3] = {0, 0, 0};
        run(qt, T, row, nb, x.data(), ldx, acc);
        for (int t = 0; t < T; ++t) {
          double e = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            e += double(x[size_t(t * ldx + k)]) * w[size_t(k)];
            mag += std::fabs(double(x[size_t(t * ldx + k)]) * w[size_t(k)]);
          }
          EXPECT_LE(std::fabs(acc[t] - e), 1e-5 * mag + 1e-30)
              << fk_test::qtype_name(qt) << " blocks " << nb << " T " << T << " row " << t << ": " << acc[t] << " vs " << e;
        }
      }
}

}  // namespace
