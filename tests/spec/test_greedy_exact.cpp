// Greedy speculative decoding reproduces plain greedy decoding token for token (and leaves the same cache), for
// every proposer (draft model with fixed and adaptive K, n-gram lookup, n-gram token trees, both together), on the
// transformers fixtures and random-weight models of every architecture, over many prompts.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "flashkit/error.hpp"
#include "spec_fixture.hpp"

namespace {

using namespace flashkit;
using namespace flashkit::spectest;

struct Proposer {
  std::string name;
  int draft_tokens = 4, max_draft = 8, lookup = 0, width = 1;
  bool draft = false;
};

const std::vector<Proposer>& proposers() {
  static const std::vector<Proposer> p = {
      {"draft_k1", 1, 8, 0, 1, true},        {"draft_k3", 3, 8, 0, 1, true},
      {"draft_k8", 8, 8, 0, 1, true},        {"draft_auto", 0, 8, 0, 1, true},
      {"ngram3_k4", 4, 8, 3, 1, false},      {"ngram1_k8", 8, 8, 1, 1, false},
      {"ngram_auto", 0, 6, 2, 1, false},     {"ngram_tree4", 5, 8, 3, 4, false},
      {"ngram_tree8_k3", 3, 8, 2, 8, false}, {"ngram_draft", 4, 8, 2, 1, true},
  };
  return p;
}

struct Pair {
  std::shared_ptr<Model> target, draft;
  std::vector<std::shared_ptr<ConfigFile>> files;
};

// Target and draft: the draft is another model of the same vocabulary (a bf16 copy of the fixture accepts most
// tokens, a random model few, the target itself all).
Pair make_pair(int which) {
  Pair p;
  auto rnd = [&](const json& cfg, uint64_t seed, const std::string& dt) {
    RandomModel r = random_model(cfg, seed, dt);
    p.files.push_back(std::shared_ptr<ConfigFile>(std::move(r.file)));
    return r.model;
  };
  switch (which) {
    case 0: p.target = fixture_model("tiny-llama"), p.draft = fixture_model("tiny-llama-bf16"); break;
    case 1: p.target = fixture_model("tiny-gemma3"), p.draft = fixture_model("tiny-gemma3-bf16"); break;
    case 2: p.target = fixture_model("tiny-gemma3-bf16"), p.draft = rnd(gemma3_config(512, 4), 3, "f32"); break;
    case 3: p.target = rnd(llama_config(64), 21, "f32"), p.draft = rnd(llama_config(64, 1), 22, "f32"); break;
    case 4: p.target = rnd(gemma3_config(48, 4), 23, "bf16"), p.draft = p.target; break;
    default: p.target = rnd(qwen3_config(40), 25, "f32"), p.draft = rnd(qwen3_config(40), 26, "bf16"); break;
  }
  return p;
}
const char* kPairNames[] = {"tiny_llama", "tiny_gemma3", "tiny_gemma3_bf16", "llama_random", "gemma3_random_self",
                            "qwen3_random"};

class GreedyExact : public ::testing::TestWithParam<int> {};

TEST_P(GreedyExact, EveryProposerMatchesPlainDecoding) {
  Pair pr = make_pair(GetParam());
  const int64_t V = pr.target->info().vocab_size;
  std::mt19937 g(100 + unsigned(GetParam()));
  int64_t accepted = 0, proposed = 0;
  for (int prompt_i = 0; prompt_i < 6; ++prompt_i) {
    const int len = 1 + int(g() % 36);
    const auto prompt = prompt_i % 2 ? repetitive_ids(g, V, len) : random_ids(g, V, len);
    GenerateOptions go;
    go.max_new_tokens = 24 + int(g() % 24);
    go.temperature = 0;
    go.stop_at_eos = prompt_i % 3 != 0;
    if (prompt_i == 5) go.repetition_penalty = 1.3f;
    auto base_s = pr.target->new_session();
    const GenerationResult base = generate(*base_s, prompt, go);
    for (const Proposer& p : proposers()) {
      SCOPED_TRACE(std::string(kPairNames[GetParam()]) + " / " + p.name + " / prompt " + ids_str(prompt));
      auto s = pr.target->new_session();
      std::unique_ptr<Session> d;
      GenerateOptions so = go;
      so.speculative.draft_tokens = p.draft_tokens;
      so.speculative.max_draft_tokens = p.max_draft;
      so.speculative.lookup = p.lookup;
      so.speculative.tree_width = p.width;
      if (p.draft) {
        d = pr.draft->new_session();
        so.speculative.draft = d.get();
      }
      const GenerationResult r = generate(*s, prompt, so);
      ASSERT_EQ(r.tokens, base.tokens);
      EXPECT_EQ(r.stop_reason, base.stop_reason);
      EXPECT_EQ(r.decode_steps, base.decode_steps);
      EXPECT_EQ(s->position(), base_s->position());
      EXPECT_LE(r.spec.accepted, r.spec.proposed);
      EXPECT_EQ(r.spec.emitted, int64_t(r.tokens.size()) - 1);
      accepted += r.spec.accepted, proposed += r.spec.proposed;
      // The cache is the one plain decoding leaves: the next step gives the same logits.
      auto ref = pr.target->new_session();
      ref->prefill(prompt);
      if (r.tokens.size() > 1) ref->prefill(std::span<const int32_t>(r.tokens.data(), r.tokens.size() - 1));
      s->decode(r.tokens.back());
      ref->decode(r.tokens.back());
      const auto a = s->logits(), b = ref->logits();
      double diff = 0;
      for (int64_t i = 0; i < V; ++i) diff = std::max(diff, double(std::abs(a[size_t(i)] - b[size_t(i)])));
      EXPECT_LT(diff, 1e-3);
    }
  }
  EXPECT_GT(accepted, 0) << "no proposal was ever accepted: the test does not exercise acceptance";
  EXPECT_LT(accepted, proposed) << "every proposal was accepted: the test does not exercise rejection";
}

INSTANTIATE_TEST_SUITE_P(Models, GreedyExact, ::testing::Range(0, 6),
                         [](const auto& info) { return std::string(kPairNames[info.param]); });

// Sessions that already hold text, and the context limit (stop reason "context" at the same token).
TEST(GreedyExactEdges, PrefixInCacheAndContextLimit) {
  auto rm = random_model(gemma3_config(48, 4), 31, "f32", /*ctx=*/60);
  auto dm = random_model(gemma3_config(48, 4), 32, "f32", /*ctx=*/60);
  std::mt19937 g(5);
  const auto pre = repetitive_ids(g, 48, 9), prompt = repetitive_ids(g, 48, 17);
  for (int lookup : {0, 2}) {
    GenerateOptions go;
    go.temperature = 0;
    go.max_new_tokens = 100;
    go.stop_at_eos = false;
    auto b = rm.model->new_session();
    b->prefill(pre);
    const GenerationResult base = generate(*b, prompt, go);
    ASSERT_EQ(base.stop_reason, "context");
    auto s = rm.model->new_session(), d = dm.model->new_session();
    s->prefill(pre);
    d->prefill(pre);
    go.speculative.lookup = lookup;
    go.speculative.draft = d.get();
    go.speculative.draft_tokens = 6;
    const GenerationResult r = generate(*s, prompt, go);
    EXPECT_EQ(r.tokens, base.tokens);
    EXPECT_EQ(r.stop_reason, "context");
    EXPECT_EQ(s->position(), b->position());
    EXPECT_LE(d->position(), s->position());
  }
}

TEST(GreedyExactEdges, StopsAtEosAndCallbackLikePlainDecoding) {
  auto rm = random_model(llama_config(64), 41);
  std::mt19937 g(9);
  const auto prompt = repetitive_ids(g, 64, 20);
  GenerateOptions go;
  go.temperature = 0;
  go.max_new_tokens = 40;
  go.stop_at_eos = false;
  auto b = rm.model->new_session();
  const auto base = generate(*b, prompt, go);
  ASSERT_GE(base.tokens.size(), 10u);
  // A stop id in the middle of an accepted run, and a callback that stops after 7 tokens.
  GenerateOptions st = go;
  st.stop_ids = {base.tokens[6]};
  st.speculative.lookup = 2;
  st.speculative.draft_tokens = 8;
  auto s = rm.model->new_session();
  const auto r = generate(*s, prompt, st);
  GenerateOptions st0 = st;
  st0.speculative = {};
  auto b2 = rm.model->new_session();
  const auto r0 = generate(*b2, prompt, st0);
  EXPECT_EQ(r.tokens, r0.tokens);
  EXPECT_EQ(r.stop_reason, "eos");
  EXPECT_EQ(s->position(), b2->position());
  int n = 0;
  auto s2 = rm.model->new_session();
  GenerateOptions cb = go;
  cb.speculative.lookup = 3;
  const auto r2 = generate(*s2, prompt, cb, [&](int32_t) { return ++n < 7; });
  EXPECT_EQ(r2.stop_reason, "callback");
  EXPECT_EQ(r2.tokens, std::vector<int32_t>(base.tokens.begin(), base.tokens.begin() + 7));
  EXPECT_EQ(s2->position(), int64_t(prompt.size()) + 6);
}

TEST(SpecOptions, BadOptionsAreNamed) {
  auto rm = random_model(llama_config(64), 51);
  auto big = random_model(llama_config(80), 52);
  auto s = rm.model->new_session();
  auto d = big.model->new_session();
  const std::vector<int32_t> prompt{3, 4, 5};
  auto expect = [&](auto edit, std::string needle) {
    GenerateOptions go;
    go.temperature = 0;
    go.speculative.lookup = 1;
    edit(go);
    if (needle.empty()) return;
    try {
      generate(*s, prompt, go);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect([](GenerateOptions& g) { g.speculative.draft_tokens = -1; }, "draft_tokens must be in [0, 64], got -1");
  expect([](GenerateOptions& g) { g.speculative.max_draft_tokens = 0; }, "max_draft_tokens");
  expect([](GenerateOptions& g) { g.speculative.lookup = 65; }, "lookup must be in [0, 64]");
  expect([](GenerateOptions& g) { g.speculative.tree_width = 0; }, "tree_width");
  expect([](GenerateOptions& g) { g.speculative.tree_width = 3, g.speculative.lookup = 0, g.speculative.draft_tokens = 2; },
         "");  // off (no proposer): plain decoding, no error expected -- see below
  expect([&](GenerateOptions& g) { g.speculative.draft = s.get(); }, "the draft session is the target session");
  expect([&](GenerateOptions& g) { g.speculative.draft = d.get(); }, "vocabulary (80) is larger than the target's (64)");
  auto d2 = rm.model->new_session();
  d2->prefill(prompt);
  expect([&](GenerateOptions& g) { g.speculative.draft = d2.get(); }, "draft session holds 3 tokens");
  expect([](GenerateOptions& g) { g.temperature = -1; }, "temperature");
  expect([&](GenerateOptions& g) { g.speculative.lookup = 2, g.speculative.tree_width = 3, g.speculative.draft = s.get(); },
         "the draft session is the target session");
  EXPECT_EQ(s->position(), 0);
}

}  // namespace
