// GGUF block-quantized weights computed as they are on CUDA (issue 22 item 5): a tiny random Llama per type
// (quant_gguf_model.hpp: Q8_0, Q4_0, Q4_K, Q5_K, Q6_K matrices; quantized embeddings tied to the lm_head, or an f32
// embedding with a separate quantized output) on CUDA against the CPU on the same blocks (the CPU keeps them too and
// computes in f32): prefill logits (the dequantized-panel + cuBLAS path, T > 8), a 5-row prefill (the GEMV with
// bf16 operands, T <= 8), decode steps (the GEMV, T = 1), greedy generation over 16 tokens (CUDA graphs and the
// device argmax), and the memory report: the device holds about the file's bytes, not the bf16 size. The CUDA tests
// skip without a device; the CPU one checks the test model itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "fixture.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/runtime.hpp"
#include "quant_gguf_model.hpp"

namespace {

using fk_test::QType;
using flashkit::testing::rel_err;

struct Case {
  const char* name;
  fk_test::QuantModelSpec spec;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  std::vector<Case> c;
  auto add = [&](const char* name, QType t, bool quant_embedding, bool tied, QType out) {
    fk_test::QuantModelSpec s;
    s.type = t, s.quant_embedding = quant_embedding, s.tied = tied, s.output = out;
    s.seed = uint32_t(c.size() + 11);
    c.push_back({name, s});
  };
  add("q8_0", QType::q8_0, true, true, QType::q8_0);      // quantized embedding, tied
  add("q4_0", QType::q4_0, true, true, QType::q4_0);
  add("q4_k", QType::q4_k, true, false, QType::q6_k);     // Q6_K output, as llama.cpp's Q4_K_M files
  add("q5_k", QType::q5_k, false, false, QType::q8_0);    // f32 embedding, Q8_0 output
  add("q6_k", QType::q6_k, true, true, QType::q6_k);
  return c;
}

std::string lower(const char* s) {
  std::string r(s);
  for (char& ch : r) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return r;
}

std::vector<int32_t> prompt_of(int64_t n, int64_t vocab) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(int32_t((i * 37 + 5) % vocab));
  return p;
}

class CudaGgufQuant : public ::testing::TestWithParam<Case> {};

// The CPU half alone (runs everywhere): the written file loads with its blocks kept and gives finite logits.
TEST_P(CudaGgufQuant, CpuKeepsTheBlocks) {
  const Case& c = GetParam();
  fk_test::TempGguf file(c.spec, c.name);
  auto m = flashkit::Model::load(file.path);
  EXPECT_EQ(m->info().weight_dtype, lower(fk_test::qtype_name(c.spec.type)));
  EXPECT_EQ(m->info().device_weight_bytes, 0);  // the CPU reports no device memory
  auto s = m->new_session();
  s->prefill(prompt_of(11, c.spec.vocab));
  double norm = 0;
  for (float v : s->logits()) {
    ASSERT_TRUE(std::isfinite(v));
    norm += double(v) * v;
  }
  EXPECT_GT(norm, 0);
}

TEST_P(CudaGgufQuant, CudaFollowsCpuOnTheSameBlocks) {
  if (flashkit::cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  const Case& c = GetParam();
  const fk_test::QuantModelSpec& sp = c.spec;
  fk_test::TempGguf file(sp, c.name);
  flashkit::LoadOptions gpu;
  gpu.device = "cuda";
  auto cm = flashkit::Model::load(file.path), gm = flashkit::Model::load(file.path, gpu);
  ASSERT_EQ(gm->info().weight_dtype, lower(fk_test::qtype_name(sp.type)));
  EXPECT_EQ(gm->info().kv_dtype, "bf16");
  const int64_t V = sp.vocab;

  // Memory report: about the file's bytes (blocks as they are, f32 norms; the f32 embedding of the q5_k case is
  // converted to bf16), far below the bf16 size of the matrices; the prefill scratch is at most the largest matrix.
  const int64_t file_bytes = file.bytes(), dev = gm->info().device_weight_bytes;
  int64_t matrix_params = sp.layers * (sp.hidden * (sp.heads + 2 * sp.kv_heads) * sp.head_dim +
                                       sp.heads * sp.head_dim * sp.hidden + 3 * sp.hidden * sp.inter);
  matrix_params += sp.vocab * sp.hidden * (sp.tied ? 1 : 2);
  EXPECT_GT(dev, file_bytes * 8 / 10) << "device " << dev << " file " << file_bytes;
  EXPECT_LT(dev, file_bytes * 11 / 10) << "device " << dev << " file " << file_bytes;
  if (sp.type != QType::q8_0) EXPECT_LT(dev, matrix_params * 2 * 6 / 10) << "bf16 would be " << matrix_params * 2;
  else EXPECT_LT(dev, matrix_params * 2 * 7 / 10) << "bf16 would be " << matrix_params * 2;
  const int64_t largest = std::max({sp.vocab * sp.hidden, 2 * sp.inter * sp.hidden,
                                    (sp.heads + 2 * sp.kv_heads) * sp.head_dim * sp.hidden});
  EXPECT_GT(gm->info().device_scratch_bytes, 0);
  EXPECT_LE(gm->info().device_scratch_bytes, largest * 2 + 256);

  // Prefill of 13 rows (dequantized panels + cuBLAS), every row's logits.
  const std::vector<int32_t> prompt = prompt_of(13, V);
  auto cs = cm->new_session(), gs = gm->new_session();
  cs->prefill(prompt, true);
  gs->prefill(prompt, true);
  ASSERT_EQ(cs->all_logits().size(), gs->all_logits().size());
  EXPECT_LT(rel_err(gs->all_logits().data(), cs->all_logits().data(), int64_t(cs->all_logits().size())), 3e-2);
  // Decode steps (the GEMV, T = 1; the second and later ones replay the captured graph).
  for (int32_t t : {5, 6, 63, 17}) {
    cs->decode(t);
    gs->decode(t);
    EXPECT_LT(rel_err(gs->logits().data(), cs->logits().data(), V), 3e-2) << "token " << t;
  }
  // A 5-row prefill: the GEMV on several rows with bf16 activations.
  auto cs5 = cm->new_session(), gs5 = gm->new_session();
  const std::vector<int32_t> p5 = prompt_of(5, V);
  cs5->prefill(p5, true);
  gs5->prefill(p5, true);
  EXPECT_LT(rel_err(gs5->all_logits().data(), cs5->all_logits().data(), int64_t(cs5->all_logits().size())), 3e-2);

  // Unfused (FLASHKIT_CUDA_FUSE=0): the residual adds after the o / down GEMVs as their own kernels; same logits.
  flashkit::LoadOptions nofuse = gpu;
  nofuse.tuning = flashkit::default_tuning();
  nofuse.tuning->cuda_fuse = false;
  auto um = flashkit::Model::load(file.path, nofuse);
  auto us = um->new_session(), cs2 = cm->new_session();
  us->prefill(p5);
  cs2->prefill(p5);
  for (int32_t t : {9, 2}) {
    us->decode(t);
    cs2->decode(t);
    EXPECT_LT(rel_err(us->logits().data(), cs2->logits().data(), V), 3e-2) << "unfused, token " << t;
  }

  // Greedy generation of 16 tokens: the CPU's tokens, with its top-2 margins along its own sequence; CUDA must pick
  // the same ids up to the first step whose margin is too small for bf16 activations to be sure of the order.
  flashkit::GenerateOptions g;
  g.max_new_tokens = 16;
  g.stop_at_eos = false;
  auto cgen = cm->new_session(), ggen = gm->new_session();
  const std::vector<int32_t> cpu_ids = flashkit::generate(*cgen, p5, g).tokens;
  const std::vector<int32_t> gpu_ids = flashkit::generate(*ggen, p5, g).tokens;
  ASSERT_EQ(cpu_ids.size(), 16u);
  ASSERT_EQ(gpu_ids.size(), 16u);
  auto walk = cm->new_session();
  walk->prefill(p5);
  size_t sure = 0;
  for (; sure < cpu_ids.size(); ++sure) {
    std::vector<float> l(walk->logits().begin(), walk->logits().end());
    std::vector<float> sorted = l;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    float scale = 0;
    for (float v : l) scale = std::max(scale, std::fabs(v));
    if (sorted[0] - sorted[1] < 0.02f * scale) break;  // too close to call in bf16
    walk->decode(cpu_ids[sure]);
  }
  for (size_t i = 0; i < sure; ++i) ASSERT_EQ(gpu_ids[i], cpu_ids[i]) << "token " << i << " (margin allows " << sure << ")";
  if (sure < 4) std::printf("[note] %s: only %zu of 16 greedy tokens had a clear margin\n", c.name, sure);
}

INSTANTIATE_TEST_SUITE_P(EveryType, CudaGgufQuant, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
