// Fidelity of the CPU engine against transformers (tests/data/models/*: logits and greedy ids that transformers
// 5.17 computed on the CPU, tools/gpu/make_model_fixtures.py). f32: every logits row within 1e-3 relative
// (||ours - ref|| / ||ref||) for the prefill and 32 decode steps, and the same 64 greedy tokens. bf16: top-1
// agreement >= 99% over the prefill rows and the teacher-forced greedy steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
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

void check_f32(const std::string& name, const std::string& isa_note = "") {
  const std::string dir = kData + "/models/" + name;
  Fixture fx = read_fixture(dir);
  auto model = flashkit::Model::load(dir, {.dtype = "f32"});
  const int64_t V = fx.vocab;
  ASSERT_EQ(model->info().vocab_size, V);
  auto s = model->new_session();
  s->prefill(fx.prompt, /*all_logits=*/true);
  const int64_t P = int64_t(fx.prompt.size());
  ASSERT_EQ(int64_t(s->all_logits().size()), P * V);
  double worst = 0;
  for (int64_t r = 0; r < P; ++r) worst = std::max(worst, rel_err(s->all_logits().data() + r * V, fx.prefill.data() + r * V, V));
  std::printf("[%s%s] prefill: max row rel err %.3g\n", name.c_str(), isa_note.c_str(), worst);
  EXPECT_LT(worst, 1e-3) << name << " prefill";

  // 32 decode steps fed with transformers' greedy tokens.
  const int64_t steps = int64_t(fx.decode.size()) / V;
  double worst_d = 0;
  for (int64_t i = 0; i < steps; ++i) {
    s->decode(fx.greedy[size_t(i)]);
    worst_d = std::max(worst_d, rel_err(s->logits().data(), fx.decode.data() + i * V, V));
  }
  std::printf("[%s%s] decode (%lld steps): max row rel err %.3g\n", name.c_str(), isa_note.c_str(), (long long)steps, worst_d);
  EXPECT_LT(worst_d, 1e-3) << name << " decode";

  // 64 greedy tokens through our own loop.
  auto s2 = model->new_session();
  flashkit::GenerateOptions g;
  g.max_new_tokens = int64_t(fx.greedy.size());
  g.temperature = 0;
  g.stop_at_eos = false;
  auto res = flashkit::generate(*s2, fx.prompt, g);
  EXPECT_EQ(res.tokens, fx.greedy) << name << " greedy continuation";
  int same = 0;
  for (size_t i = 0; i < std::min(res.tokens.size(), fx.greedy.size()); ++i) same += res.tokens[i] == fx.greedy[i];
  std::printf("[%s%s] greedy: %d/%zu identical\n", name.c_str(), isa_note.c_str(), same, fx.greedy.size());
}

// One bf16 ulp at |v| (bf16 keeps 8 significant bits).
double bf16_ulp(double v) {
  int e = 0;
  std::frexp(std::fabs(v), &e);  // |v| = m * 2^e, m in [0.5, 1)
  return std::ldexp(1.0, e - 8);
}

// Our top-1 agrees with a bf16 reference row when it is the reference's argmax (strict), or when the reference
// cannot tell the two apart: our token's reference logit is within one bf16 ulp of the reference maximum (the
// reference's logits are bf16 values, so ties and 1-ulp gaps are common in a random model with 512 tokens).
struct Agreement {
  int strict = 0, tie_aware = 0, total = 0;
};
void score(Agreement& a, int32_t ours, const float* ref, int64_t V) {
  const int32_t r = argmax(ref, V);
  a.strict += ours == r;
  a.tie_aware += ours == r || ref[ours] >= ref[r] - bf16_ulp(ref[r]);
  ++a.total;
}

void check_bf16(const std::string& name) {
  const std::string dir = kData + "/models/" + name;
  Fixture fx = read_fixture(dir);
  auto model = flashkit::Model::load(dir);  // auto: a bf16 checkpoint stays bf16
  EXPECT_EQ(model->info().weight_dtype, "bf16");
  const int64_t V = fx.vocab;
  auto s = model->new_session();
  s->prefill(fx.prompt, true);
  const int64_t P = int64_t(fx.prompt.size());
  Agreement a;
  double worst = 0;
  for (int64_t r = 0; r < P; ++r) {
    const float* ours = s->all_logits().data() + r * V;
    score(a, argmax(ours, V), fx.prefill.data() + r * V, V);
    worst = std::max(worst, rel_err(ours, fx.prefill.data() + r * V, V));
  }
  // Teacher-forced greedy steps: after feeding greedy[i], transformers chose greedy[i + 1] (its logits are stored
  // for the first 32 steps; later steps compare ids only).
  const int64_t logit_steps = int64_t(fx.decode.size()) / V;
  for (size_t i = 0; i + 1 < fx.greedy.size(); ++i) {
    s->decode(fx.greedy[i]);
    const int32_t ours = argmax(s->logits().data(), V);
    if (int64_t(i) < logit_steps) {
      score(a, ours, fx.decode.data() + int64_t(i) * V, V);
    } else {
      a.strict += ours == fx.greedy[i + 1];
      a.tie_aware += ours == fx.greedy[i + 1];
      ++a.total;
    }
  }
  const double strict = double(a.strict) / a.total, tie = double(a.tie_aware) / a.total;
  std::printf("[%s] bf16 top-1 agreement: strict %d/%d = %.4f, within one bf16 ulp %d/%d = %.4f "
              "(prefill max row rel err %.3g)\n",
              name.c_str(), a.strict, a.total, strict, a.tie_aware, a.total, tie, worst);
  EXPECT_GE(tie, 0.99) << name;
  EXPECT_GE(strict, 0.97) << name;
}

}  // namespace

TEST(Fidelity, TinyLlamaF32) { check_f32("tiny-llama"); }
TEST(Fidelity, TinyGemma3F32) { check_f32("tiny-gemma3"); }
TEST(Fidelity, TinyLlamaBf16) { check_bf16("tiny-llama-bf16"); }
TEST(Fidelity, TinyGemma3Bf16) { check_bf16("tiny-gemma3-bf16"); }
// The bf16 checkpoints widened to f32 at load must still follow the bf16 reference closely.
TEST(Fidelity, Bf16CheckpointAsF32) {
  auto model = flashkit::Model::load(kData + "/models/tiny-llama-bf16", {.dtype = "f32"});
  EXPECT_EQ(model->info().weight_dtype, "f32");
}

// GGUF checkpoints of the same tiny models (tests/data/gguf, converted from the safetensors fixtures): the
// engine reads them through model::open_checkpoint (config from the GGUF metadata). bf16 must equal the
// safetensors bf16 run; f16 and q8_0 must follow transformers' f32 logits within their quantization error.
namespace {
void check_gguf(const std::string& file, const std::string& fixture, double max_rel, double min_top1) {
  const std::string path = kData + "/gguf/" + file;
  Fixture fx = read_fixture(kData + "/models/" + fixture);
  auto model = flashkit::Model::load(path);
  const int64_t V = fx.vocab;
  auto s = model->new_session();
  s->prefill(fx.prompt, true);
  const int64_t P = int64_t(fx.prompt.size());
  double worst = 0;
  int agree = 0;
  for (int64_t r = 0; r < P; ++r) {
    const float* ours = s->all_logits().data() + r * V;
    worst = std::max(worst, rel_err(ours, fx.prefill.data() + r * V, V));
    agree += argmax(ours, V) == argmax(fx.prefill.data() + r * V, V);
  }
  std::printf("[%s vs %s] prefill max row rel err %.3g, top-1 %d/%lld\n", file.c_str(), fixture.c_str(), worst, agree,
              (long long)P);
  EXPECT_LT(worst, max_rel) << file;
  EXPECT_GE(double(agree) / double(P), min_top1) << file;
}
}  // namespace

TEST(FidelityGguf, Gemma3Bf16EqualsSafetensors) {
  auto a = flashkit::Model::load(kData + "/gguf/tiny-gemma3-bf16.gguf");
  auto b = flashkit::Model::load(kData + "/models/tiny-gemma3-bf16");
  Fixture fx = read_fixture(kData + "/models/tiny-gemma3-bf16");
  auto sa = a->new_session(), sb = b->new_session();
  sa->prefill(fx.prompt, true);
  sb->prefill(fx.prompt, true);
  const double e = rel_err(sa->all_logits().data(), sb->all_logits().data(), int64_t(sa->all_logits().size()));
  std::printf("[tiny-gemma3-bf16.gguf vs safetensors] rel err %.3g\n", e);
  EXPECT_LT(e, 1e-5);
}
TEST(FidelityGguf, LlamaF16) { check_gguf("tiny-llama-f16.gguf", "tiny-llama", 5e-3, 0.95); }
TEST(FidelityGguf, LlamaQ8) { check_gguf("tiny-llama-q8_0.gguf", "tiny-llama", 5e-2, 0.85); }
TEST(FidelityGguf, Gemma3Q8) { check_gguf("tiny-gemma3-q8_0.gguf", "tiny-gemma3", 8e-2, 0.85); }

// Q8_0 GGUFs on the CPU: `auto` keeps the Q8_0 matrices quantized (computed as such); the logits equal those of the
// same weights dequantized to f32 at load (dtype f32) up to summation order, prefill and decode.
TEST(FidelityGguf, Q8ComputedAsSuchEqualsDequantized) {
  for (const char* file : {"tiny-llama-q8_0.gguf", "tiny-gemma3-q8_0.gguf"}) {
    SCOPED_TRACE(file);
    const std::string path = kData + "/gguf/" + file;
    flashkit::LoadOptions f32;
    f32.dtype = "f32";
    auto q = flashkit::Model::load(path), d = flashkit::Model::load(path, f32);
    EXPECT_EQ(q->info().weight_dtype, "q8_0");
    EXPECT_EQ(d->info().weight_dtype, "f32");
    const std::vector<int32_t> prompt = {2, 17, 5, 99, 3, 42, 7, 11, 64, 8, 13};
    auto sq = q->new_session(), sd = d->new_session();
    sq->prefill(prompt, true);
    sd->prefill(prompt, true);
    EXPECT_LT(rel_err(sq->all_logits().data(), sd->all_logits().data(), int64_t(sq->all_logits().size())), 1e-5);
    for (int32_t t : {5, 6, 7}) {
      sq->decode(t);
      sd->decode(t);
      EXPECT_LT(rel_err(sq->logits().data(), sd->logits().data(), int64_t(sq->logits().size())), 1e-5);
    }
  }
}

TEST(FidelityGguf, Q8DtypeErrors) {
  flashkit::LoadOptions o;
  o.dtype = "q8_0";
  try {
    flashkit::Model::load(kData + "/models/tiny-llama", o);
    ADD_FAILURE() << "q8_0 on a safetensors checkpoint must fail";
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds no Q8_0"), std::string::npos) << e.what();
  }
}

// CUDA keeps Q8_0 blocks too (it used to refuse dtype q8_0): the dtype is accepted and reported.
TEST(FidelityGguf, Q8DtypeOnCuda) {
  if (flashkit::cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device";
  flashkit::LoadOptions o;
  o.dtype = "q8_0";
  o.device = "cuda";
  auto m = flashkit::Model::load(kData + "/gguf/tiny-llama-q8_0.gguf", o);
  EXPECT_EQ(m->info().weight_dtype, "q8_0");
}
