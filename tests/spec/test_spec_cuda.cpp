// Speculative decoding on the CUDA backend (skipped without a GPU): chain verification steps against decode steps,
// bitwise, and greedy speculative output against plain greedy decoding on the same device. Verification steps are
// decode-exact on CUDA (Backend::StepShape::decode_exact): the linear layers stay on the GEMV (whose per-row
// accumulation order does not depend on the row count) and attention runs the decode kernel once per row, so every
// verification row is bitwise the decode step at its position. The greedy test still reports the baseline's logit
// margin at a first difference, should one appear. Token trees fall back to a chain on CUDA (supports_tree() is
// false): the tree proposer must still match.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "flashkit/runtime.hpp"
#include "spec_fixture.hpp"

namespace {

using namespace flashkit;
using namespace flashkit::spectest;

std::shared_ptr<Model> cuda_model(const std::string& name) {
  LoadOptions o;
  o.device = "cuda";
  return Model::load(kModels + "/" + name, o);
}

bool same_row(std::span<const float> a, const float* b) { return std::memcmp(a.data(), b, a.size_bytes()) == 0; }

// Both failed on the H200 (run s7-4) while verification rows ran the multi-row kernels (cuBLAS, flash attention).
TEST(SpecCuda, VerifyRowsMatchDecodeSteps) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const char* name : {"tiny-llama", "tiny-gemma3", "tiny-gemma3-bf16"}) {
    auto m = cuda_model(name);
    const int64_t V = m->info().vocab_size;
    EXPECT_FALSE(m->new_session()->supports_tree());
    std::mt19937 g(3);
    auto ref = m->new_session(), s = m->new_session();
    const auto prompt = random_ids(g, V, 12);
    ref->prefill(prompt);
    s->prefill(prompt);
    for (int step = 0; step < 12; ++step) {
      const int k = int(g() % 9);
      const auto toks = random_ids(g, V, k + 1);
      const int64_t pos0 = s->position();
      s->forward_all_logits(toks);
      const std::vector<float> rows = s->all_logits();
      const int a = int(g() % unsigned(k + 1));
      for (int i = 0; i <= a; ++i) {
        ref->decode(toks[size_t(i)]);
        EXPECT_TRUE(same_row(ref->logits(), rows.data() + i * V)) << name << " step " << step << " row " << i;
      }
      s->truncate(pos0 + a + 1);
    }
  }
}

TEST(SpecCuda, GreedyMatchesPlainDecoding) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const char* name : {"tiny-llama", "tiny-gemma3"}) {
    auto m = cuda_model(name), dm = cuda_model(name);
    const int64_t V = m->info().vocab_size;
    std::mt19937 g(11);
    for (int i = 0; i < 6; ++i) {
      const auto prompt = i % 2 ? repetitive_ids(g, V, 20) : random_ids(g, V, 9);
      GenerateOptions go;
      go.temperature = 0;
      go.max_new_tokens = 40;
      go.stop_at_eos = false;
      auto b = m->new_session();
      const auto base = generate(*b, prompt, go);
      for (int mode = 0; mode < 3; ++mode) {
        GenerateOptions so = go;
        auto s = m->new_session(), d = dm->new_session();
        if (mode == 0) so.speculative.draft = d.get(), so.speculative.draft_tokens = 4;
        if (mode == 1) so.speculative.lookup = 3, so.speculative.draft_tokens = 0;
        if (mode == 2) so.speculative.lookup = 2, so.speculative.tree_width = 4;
        const auto r = generate(*s, prompt, so);
        size_t first = 0;
        while (first < r.tokens.size() && first < base.tokens.size() && r.tokens[first] == base.tokens[first]) ++first;
        std::string why;
        if (first < base.tokens.size()) {  // the baseline's top-2 margin where they part
          auto ref = m->new_session();
          ref->prefill(prompt);
          if (first > 0) ref->prefill(std::span<const int32_t>(base.tokens.data(), first));
          std::vector<float> l(ref->logits().begin(), ref->logits().end());
          std::sort(l.begin(), l.end(), std::greater<float>());
          why = " (baseline top-2 logit margin there: " + std::to_string(l[0] - l[1]) + ")";
        }
        EXPECT_EQ(r.tokens, base.tokens) << name << " mode " << mode << ": first difference at " << first << why;
      }
    }
  }
}

// Random-weight models of each architecture on CUDA (f32 and bf16 weights, a sliding window whose ring wraps, q/k
// norms): verification steps of random length up to max_verify_rows() (so GEMV launches of 9..16 rows and a split
// into two launches at 17) with random rollbacks, every row bitwise the decode step; with and without fusion and
// CUDA graphs (the verification steps are captured per (session, T) like decode steps).
std::shared_ptr<Model> cuda_random(const json& cfg, uint64_t seed, const std::string& dtype, bool fuse_and_graphs,
                                   std::shared_ptr<ConfigFile>& file) {
  file = std::make_shared<ConfigFile>(cfg);
  LoadOptions o;
  o.device = "cuda";
  o.dtype = dtype;
  o.random_weights = true;
  o.random_seed = seed;
  Tuning t = default_tuning();
  t.cuda_fuse = t.cuda_graphs = fuse_and_graphs;
  o.tuning = t;
  return Model::load(file->path(), o);
}

TEST(SpecCuda, RandomVerifyStepsAndRollbacksBitwise) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  struct Case {
    const char* name;
    json cfg;
    const char* dtype;
  };
  json wide = llama_config(96);
  wide["hidden_size"] = 64, wide["intermediate_size"] = 136, wide["head_dim"] = 16;
  const std::vector<Case> cases = {{"llama_f32", llama_config(64), "f32"},
                                   {"llama_bf16", wide, "bf16"},
                                   {"gemma3_window4_f32", gemma3_config(48, 4), "f32"},
                                   {"gemma3_window5_bf16", gemma3_config(48, 5), "bf16"},
                                   {"qwen3_f32", qwen3_config(40), "f32"}};
  unsigned seed = 0;
  for (const Case& c : cases) {
    for (bool fast : {true, false}) {
      std::shared_ptr<ConfigFile> file;
      auto m = cuda_random(c.cfg, 21 + seed, c.dtype, fast, file);
      const std::string what = std::string(c.name) + (fast ? "" : " (unfused, no graphs)");
      const int64_t V = m->info().vocab_size;
      std::mt19937 g(5 + seed++);
      auto ref = m->new_session(), s = m->new_session();
      const auto prompt = random_ids(g, V, 7 + int(g() % 9));
      ref->prefill(prompt);
      s->prefill(prompt);
      const int max_k = std::min(16, int(s->max_verify_rows()) - 1);
      for (int step = 0; step < 16; ++step) {
        // Repeat some step sizes so their captured graphs are replayed. The last two steps have the most rows a
        // step may have (slack + 1 with a ring), at positions >= prompt + 14 > window + slack: a wrapped ring.
        const int k = step >= 14 ? max_k : step % 4 == 3 ? 3 : int(g() % unsigned(max_k + 1));
        const auto toks = random_ids(g, V, k + 1);
        const int64_t pos0 = s->position();
        s->forward_all_logits(toks);
        const std::vector<float> rows = s->all_logits();
        const int a = int(g() % unsigned(k + 1));
        for (int i = 0; i <= a; ++i) {
          ref->decode(toks[size_t(i)]);
          ASSERT_TRUE(same_row(ref->logits(), rows.data() + i * V))
              << what << ": step " << step << " (k = " << k << ") row " << i << " differs from the decode step";
        }
        s->truncate(pos0 + a + 1);
      }
      for (int i = 0; i < 3; ++i) {
        const int32_t t = random_ids(g, V, 1)[0];
        ref->decode(t);
        s->decode(t);
        ASSERT_TRUE(same_row(ref->logits(), s->logits().data())) << what << ": decode " << i << " after rollbacks";
      }
    }
  }
}

// Verification steps run as CUDA graphs with their per-row attention launches (Model::graph_counts): the first chain
// step of a row count is captured, repeats replay it, none runs eagerly -- on a plain model and on a wrapped ring.
TEST(SpecCuda, VerifyStepsReplayGraphs) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  json wide = llama_config(96);  // bf16 weights, as the shipped models: every linear of the step on the GEMV
  wide["hidden_size"] = 64, wide["intermediate_size"] = 136, wide["head_dim"] = 16;
  const std::pair<const char*, json> cases[] = {{"llama_bf16", wide}, {"gemma3_window5_bf16", gemma3_config(48, 5)}};
  for (const auto& [name, cfg] : cases) {
    std::shared_ptr<ConfigFile> file;
    auto m = cuda_random(cfg, 7, "bf16", true, file);
    const int64_t V = m->info().vocab_size;
    std::mt19937 g(3);
    auto s = m->new_session();
    s->prefill(random_ids(g, V, 30));  // past window + slack (21): the ring has wrapped
    const Model::GraphCounts c0 = m->graph_counts();
    for (int rep = 0; rep < 3; ++rep) {
      const int64_t pos0 = s->position();
      s->forward_all_logits(random_ids(g, V, 5));
      s->truncate(pos0 + 2);
    }
    const Model::GraphCounts c1 = m->graph_counts();
    EXPECT_EQ(c1.captured - c0.captured, 1) << name;
    EXPECT_EQ(c1.replayed - c0.replayed, 2) << name;
    EXPECT_EQ(c1.eager - c0.eager, 0) << name;
  }
}

}  // namespace
