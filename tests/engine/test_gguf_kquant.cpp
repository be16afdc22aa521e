// A GGUF whose matrices mix every block-quantized type (tests/data/gguf/tiny-qwen3-kquant.gguf, written by
// tools/model/make_kquant_fixture.py: a Qwen3 with q/k norms): on the CPU `auto` keeps the blocks and the GEMV
// expands them per block; its logits must equal those of the same weights dequantized to f32 at load (dtype f32)
// up to summation order, in prefill (GEMM path) and decode (GEMV path), fused q/k/v of three different types.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "fixture.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/runtime.hpp"

namespace {

using flashkit::testing::kTestData;
using flashkit::testing::rel_err;

const std::string kFile = std::string(kTestData) + "/gguf/tiny-qwen3-kquant.gguf";

TEST(GgufKQuant, KeptBlocksEqualDequantizedWeights) {
  flashkit::LoadOptions f32;
  f32.dtype = "f32";
  auto q = flashkit::Model::load(kFile), d = flashkit::Model::load(kFile, f32);
  EXPECT_EQ(q->info().architecture, "qwen3");
  EXPECT_EQ(q->info().weight_dtype, "q4_k");  // layer 0's q_proj
  EXPECT_EQ(d->info().weight_dtype, "f32");
  std::vector<int32_t> prompt;
  for (int i = 0; i < 13; ++i) prompt.push_back(int32_t((i * 37 + 5) % 64));
  auto sq = q->new_session(), sd = d->new_session();
  sq->prefill(prompt, true);
  sd->prefill(prompt, true);
  const auto& lq = sq->all_logits();
  double norm = 0;
  for (float v : lq) {
    ASSERT_TRUE(std::isfinite(v));
    norm += double(v) * v;
  }
  EXPECT_GT(norm, 0);
  EXPECT_LT(rel_err(lq.data(), sd->all_logits().data(), int64_t(lq.size())), 1e-5);
  for (int32_t t : {5, 6, 63}) {
    sq->decode(t);
    sd->decode(t);
    EXPECT_LT(rel_err(sq->logits().data(), sd->logits().data(), int64_t(sq->logits().size())), 1e-5) << t;
  }
}

// CUDA keeps the blocks too (q/k/v of three types: one GEMV per segment) with bf16 activations: its logits follow
// the CPU's f32 ones within bf16 rounding. Skips without a CUDA device.
TEST(GgufKQuant, CudaFollowsCpu) {
  if (flashkit::cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device";
  flashkit::LoadOptions f32, gpu;
  f32.dtype = "f32";
  gpu.device = "cuda";
  auto c = flashkit::Model::load(kFile, f32), g = flashkit::Model::load(kFile, gpu);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 13; ++i) prompt.push_back(int32_t((i * 37 + 5) % 64));
  auto sc = c->new_session(), sg = g->new_session();
  sc->prefill(prompt, true);
  sg->prefill(prompt, true);
  EXPECT_LT(rel_err(sg->all_logits().data(), sc->all_logits().data(), int64_t(sc->all_logits().size())), 3e-2);
  sc->decode(7);
  sg->decode(7);
  EXPECT_LT(rel_err(sg->logits().data(), sc->logits().data(), int64_t(sc->logits().size())), 3e-2);
}

}  // namespace
