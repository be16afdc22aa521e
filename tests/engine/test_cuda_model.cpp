// The whole engine on the CUDA backend against transformers (tests/data/models/*, computed by transformers on the
// CPU) and against the CPU backend. The CUDA backend stores matrices in bf16 (and, loaded as bf16 here, keeps a bf16
// KV cache and bf16 prefill intermediates), so the f32 fixtures are checked with a bf16-sized bound (prefill logits
// within a few 1e-2 relative) and the bf16 fixtures by top-1 agreement; decode runs
// teacher-forced on transformers' greedy ids (each step's argmax against the next greedy id), with CUDA graphs on
// and off (which must agree to rounding). Skips when no CUDA device is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fixture.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"

namespace {

using namespace flashkit::testing;
const std::string& kData = kTestData;

bool have_cuda() {
  if (flashkit::cuda_device_count() <= 0) return false;
  try {
    flashkit::LoadOptions o;
    o.device = "cuda";
    o.random_weights = true;
    flashkit::Model::load(kData + "/models/tiny-llama", o);
    return true;
  } catch (const flashkit::Error& e) {
    if (e.status() == flashkit::Status::unsupported) return false;
    throw;
  }
}

struct Run {
  std::vector<float> prefill;               // [P, V]
  std::vector<std::vector<float>> decode;   // teacher-forced steps
};

Run run_model(const std::string& dir, const Fixture& ex, const std::string& device, const char* graphs) {
  flashkit::LoadOptions o;
  o.device = device;
  o.dtype = "bf16";
  o.tuning = flashkit::default_tuning();
  if (graphs) o.tuning->cuda_graphs = std::string(graphs) != "0";
  auto model = flashkit::Model::load(dir, o);
  auto s = model->new_session();
  Run r;
  s->prefill(ex.prompt, /*all_logits=*/true);
  r.prefill = s->all_logits();
  for (size_t i = 0; i + 1 < ex.greedy.size(); ++i) {
    s->decode(ex.greedy[i]);
    r.decode.emplace_back(s->logits().begin(), s->logits().end());
  }
  return r;
}

void check_fixture(const std::string& name, bool f32_fixture) {
  const std::string dir = kData + "/models/" + name;
  const Fixture ex = read_fixture(dir);
  const int64_t V = ex.vocab, P = int64_t(ex.prompt.size());
  const Run g = run_model(dir, ex, "cuda", "1");
  const Run e = run_model(dir, ex, "cuda", "0");
  const Run c = run_model(dir, ex, "cpu", nullptr);
  ASSERT_EQ(int64_t(g.prefill.size()), P * V);

  double worst = 0, worst_cpu = 0;
  int agree = 0, agree_tie = 0;
  for (int64_t r = 0; r < P; ++r) {
    worst = std::max(worst, rel_err(g.prefill.data() + r * V, ex.prefill.data() + r * V, V));
    worst_cpu = std::max(worst_cpu, rel_err(g.prefill.data() + r * V, c.prefill.data() + r * V, V));
    const int32_t ours = argmax(g.prefill.data() + r * V, V), ref = argmax(ex.prefill.data() + r * V, V);
    agree += ours == ref;
    // Tie-aware: the reference cannot tell our token from its own when their reference logits are within one bf16
    // ulp of each other (ties and 1-ulp gaps are common in these tiny random models).
    const float rmax = ex.prefill[size_t(r * V + ref)];
    int e2 = 0;
    std::frexp(std::fabs(double(rmax)), &e2);
    agree_tie += ours == ref || double(ex.prefill[size_t(r * V + ours)]) >= double(rmax) - std::ldexp(1.0, e2 - 8);
  }
  std::printf("[%s] prefill: max row rel err vs transformers %.3g, vs cpu backend %.3g, top-1 %d/%lld (within one "
              "bf16 ulp %d)\n", name.c_str(), worst, worst_cpu, agree, (long long)P, agree_tie);
  // Prefill runs with bf16 intermediates (qkv, attention output, gate|up, activation: activation_dtype bf16 for
  // bf16 weights, as transformers computes bf16 models), the CPU backend with f32 ones. Emulating the roundings on
  // the CPU backend, the max-row error of tiny-gemma3 (hidden 64: a few rows dominated by few logits) moved from
  // 0.024 / 0.014 (vs transformers f32 / vs the CPU) with f32 intermediates to 0.027 / 0.020 (mean over rows 0.012 ->
  // 0.014), and rounding every activation including the residual stream, as transformers bf16 does, gives the same
  // band (0.024 / 0.017, mean 0.015); the GPU measured ~10% above the emulation before. Hence 4e-2 / 3e-2 (were
  // 3e-2 / 2e-2 with f32 intermediates); tiny-llama stays below 1e-2 either way.
  if (f32_fixture) EXPECT_LT(worst, 4e-2) << "prefill logits (f32 checkpoint stored in bf16 on the GPU)";
  EXPECT_GE(agree_tie, int(0.95 * double(P))) << "prefill top-1 agreement, within one bf16 ulp";
  EXPECT_GE(agree, int(0.90 * double(P))) << "prefill top-1 agreement, strict";
  EXPECT_LT(worst_cpu, 3e-2) << "prefill logits vs the CPU backend (bf16 weights on both)";

  int dagree = 0;
  double worst_ge = 0, worst_dec = 0;
  const int64_t steps = int64_t(g.decode.size());
  for (int64_t i = 0; i < steps; ++i) {
    dagree += argmax(g.decode[size_t(i)].data(), V) == ex.greedy[size_t(i + 1)];
    worst_ge = std::max(worst_ge, rel_err(g.decode[size_t(i)].data(), e.decode[size_t(i)].data(), V));
    if (i < int64_t(ex.decode.size()) / V)
      worst_dec = std::max(worst_dec, rel_err(g.decode[size_t(i)].data(), ex.decode.data() + i * V, V));
  }
  std::printf("[%s] decode: top-1 %d/%lld vs transformers' greedy ids, graph vs eager %.3g, logits vs transformers %.3g\n",
              name.c_str(), dagree, (long long)steps, worst_ge, worst_dec);
  EXPECT_GE(dagree, int(0.9 * double(steps))) << "teacher-forced greedy agreement";
  EXPECT_LT(worst_ge, 1e-5) << "CUDA graph replay vs eager";
  if (f32_fixture) EXPECT_LT(worst_dec, 3e-2) << "decode logits";
}

TEST(CudaEngineModel, TinyLlama) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  check_fixture("tiny-llama", true);
}
TEST(CudaEngineModel, TinyLlamaBf16) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  check_fixture("tiny-llama-bf16", false);
}
TEST(CudaEngineModel, TinyGemma3) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  check_fixture("tiny-gemma3", true);
}
TEST(CudaEngineModel, TinyGemma3Bf16) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  check_fixture("tiny-gemma3-bf16", false);
}

}  // namespace

// A one-row step that asks for every row's logits runs a different op sequence than a decode step; it must not
// be captured as (or replay) the decode graph. Token-by-token prefill with all_logits, then decode: each step's
// logits must match the eager run (review finding: the graph key once ignored all_logits).
TEST(CudaEngineModel, OneRowAllLogitsStepsDoNotReplayTheDecodeGraph) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  const std::string dir = kData + "/models/tiny-llama-bf16";
  const Fixture ex = read_fixture(dir);
  const int64_t V = ex.vocab;
  auto run = [&](const char* graphs) {
    flashkit::LoadOptions o;
    o.device = "cuda";
    o.dtype = "bf16";
    o.tuning = flashkit::default_tuning();
    o.tuning->cuda_graphs = std::string(graphs) != "0";
    auto model = flashkit::Model::load(dir, o);
    auto s = model->new_session();
    std::vector<std::vector<float>> rows;
    for (int32_t t : ex.prompt) {  // one row at a time, all logits
      s->prefill(std::vector<int32_t>{t}, /*all_logits=*/true);
      rows.emplace_back(s->all_logits().begin(), s->all_logits().end());
    }
    for (size_t i = 0; i < 8; ++i) {
      s->decode(ex.greedy[i]);
      rows.emplace_back(s->logits().begin(), s->logits().end());
    }
    return rows;
  };
  const auto g = run("1"), e = run("0");
  ASSERT_EQ(g.size(), e.size());
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(int64_t(g[i].size()), V) << "row " << i;
    EXPECT_LT(rel_err(g[i].data(), e[i].data(), V), 1e-5) << "step " << i << " (graphs on vs off)";
  }
}

// The backend picks the cache and intermediate dtypes: a bf16-weight CUDA model keeps its KV cache and its prefill
// intermediates in bf16 (f32 weights keep both f32; the CPU backend is f32 throughout). Decode then reads a bf16
// cache (prefill already attended bf16 keys), so teacher-forced decode logits must stay within the bound the prefill
// uses against the CPU backend (bf16 weights on both, f32 activations and cache on the CPU).
TEST(CudaEngineModel, Bf16WeightsGetABf16CacheAndDecodeMatchesTheCpu) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  for (const char* name : {"tiny-llama-bf16", "tiny-gemma3-bf16"}) {
    const std::string dir = kData + "/models/" + name;
    const Fixture ex = read_fixture(dir);
    const int64_t V = ex.vocab;
    for (const char* dt : {"bf16", "f32"}) {
      flashkit::LoadOptions o;
      o.device = "cuda";
      o.dtype = dt;
      auto m = flashkit::Model::load(dir, o);
      EXPECT_EQ(m->info().kv_dtype, dt) << name;
      EXPECT_EQ(m->info().activation_dtype, dt) << name;
    }
    const ::Run g = run_model(dir, ex, "cuda", "1");
    const ::Run c = run_model(dir, ex, "cpu", nullptr);
    double worst = 0;
    int agree = 0;
    for (size_t i = 0; i < g.decode.size(); ++i) {
      worst = std::max(worst, rel_err(g.decode[i].data(), c.decode[i].data(), V));
      agree += argmax(g.decode[i].data(), V) == argmax(c.decode[i].data(), V);
    }
    std::printf("[%s] bf16 cache: decode vs cpu backend max row rel err %.3g, top-1 %d/%zu\n", name, worst, agree,
                g.decode.size());
    EXPECT_LT(worst, 2e-2) << name << ": decode logits vs the CPU backend";
    EXPECT_GE(agree, int(0.9 * double(g.decode.size()))) << name;
  }
}
