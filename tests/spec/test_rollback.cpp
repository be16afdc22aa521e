// The engine side of speculative decoding: Session::truncate (rollback, also across a sliding-window ring's wrap),
// Session::forward_all_logits (a chain verification step: every row bitwise equal to the decode step at its
// position) and Session::forward_tree / accept_tree_path (token trees: every node's row bitwise equal to decoding its
// root-to-node path), on random-weight models of every architecture and the transformers fixtures.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "flashkit/error.hpp"
#include "spec_fixture.hpp"

namespace {

using namespace flashkit;
using namespace flashkit::spectest;

struct Case {
  std::string name;
  std::function<std::shared_ptr<Model>()> load;
};

// Keeps the RandomModel's config file alive for the model's lifetime.
std::shared_ptr<Model> keep(RandomModel r) {
  auto file = std::shared_ptr<ConfigFile>(std::move(r.file));
  auto m = r.model;
  return std::shared_ptr<Model>(m.get(), [m, file](Model*) {});
}

std::vector<Case> cases() {
  return {
      {"llama_f32", [] { return keep(random_model(llama_config(64), 11)); }},
      {"llama_bf16", [] { return keep(random_model(llama_config(64), 12, "bf16")); }},
      {"gemma3_window4_f32", [] { return keep(random_model(gemma3_config(48, 4), 13)); }},
      {"gemma3_window5_bf16_chunk3", [] { return keep(random_model(gemma3_config(48, 5), 14, "bf16", 0, 3)); }},
      {"qwen3_f32", [] { return keep(random_model(qwen3_config(40), 15)); }},
      {"tiny_llama_fixture", [] { return fixture_model("tiny-llama"); }},
      {"tiny_gemma3_fixture", [] { return fixture_model("tiny-gemma3"); }},
  };
}

bool same_row(std::span<const float> a, const float* b) { return std::memcmp(a.data(), b, a.size_bytes()) == 0; }

class Rollback : public ::testing::TestWithParam<size_t> {};

// Verification steps of random length with random rollbacks against plain decoding of the kept tokens. The steps run
// well past a ring's capacity (window + kv_ring_slack), so the rollbacks cross the ring's wrap.
TEST_P(Rollback, VerifyStepsMatchDecodeBitwise) {
  const Case c = cases()[GetParam()];
  auto m = c.load();
  const int64_t V = m->info().vocab_size;
  std::mt19937 g(7 + unsigned(GetParam()));
  auto ref = m->new_session(), s = m->new_session();
  const auto prompt = random_ids(g, V, 13);
  ref->prefill(prompt);
  s->prefill(prompt);
  ASSERT_TRUE(same_row(ref->logits(), s->logits().data()));
  // kv_ring_slack 16 allows steps of 17 rows on rings (global layers: up to the verification rows, 64); a prefill
  // chunk below that bounds a step (the chunk-3 case: 3 rows).
  const bool ring = c.name.find("gemma3") != std::string::npos, chunk3 = c.name.find("chunk3") != std::string::npos;
  ASSERT_EQ(s->max_verify_rows(), chunk3 ? 3 : ring ? 17 : 64);
  const int max_k = std::min(20, int(s->max_verify_rows()) - 1);
  for (int step = 0; step < 24; ++step) {
    const int k = int(g() % unsigned(max_k + 1));
    const auto toks = random_ids(g, V, k + 1);
    const int64_t pos0 = s->position();
    s->forward_all_logits(toks);
    ASSERT_EQ(s->position(), pos0 + k + 1);
    const std::vector<float> rows = s->all_logits();
    const int a = int(g() % unsigned(k + 1));  // keep toks[0..a]
    for (int i = 0; i <= a; ++i) {
      ref->decode(toks[size_t(i)]);
      ASSERT_TRUE(same_row(ref->logits(), rows.data() + i * V))
          << c.name << ": step " << step << " (k = " << k << ") row " << i << " differs from the decode step";
    }
    s->truncate(pos0 + a + 1);
    ASSERT_EQ(s->position(), ref->position());
  }
  // Plain decode steps after the rollbacks agree too.
  for (int i = 0; i < 5; ++i) {
    const int32_t t = random_ids(g, V, 1)[0];
    ref->decode(t);
    s->decode(t);
    ASSERT_TRUE(same_row(ref->logits(), s->logits().data())) << c.name << ": decode " << i << " after rollbacks";
  }
}

// Token trees: each node's row equals decoding its path; the accepted path then continues like plain decoding.
TEST_P(Rollback, TreeStepsMatchDecodeBitwise) {
  const Case c = cases()[GetParam()];
  auto m = c.load();
  const int64_t V = m->info().vocab_size;
  std::mt19937 g(70 + unsigned(GetParam()));
  auto ref = m->new_session(), s = m->new_session();
  ASSERT_TRUE(s->supports_tree());
  const auto prompt = random_ids(g, V, 11);
  ref->prefill(prompt);
  s->prefill(prompt);
  std::vector<int32_t> kept;  // tokens after the prompt both sessions hold
  for (int step = 0; step < 10; ++step) {
    const int n = 1 + int(g() % unsigned(s->max_verify_rows()));
    std::vector<int32_t> parents(size_t(n), -1), toks = random_ids(g, V, n);
    for (int t = 1; t < n; ++t) {
      // Bounded depth (kv_ring_slack) with bushy trees: parents among the first rows.
      int pa;
      do pa = int(g() % unsigned(t));
      while (pa > 0 && g() % 2);
      parents[size_t(t)] = pa;
    }
    const int64_t pos0 = s->position();
    s->forward_tree(toks, parents);
    ASSERT_EQ(s->position(), pos0);
    const std::vector<float> rows = s->all_logits();
    auto path_of = [&](int t) {
      std::vector<int32_t> p;
      for (int a = t; a >= 0; a = parents[size_t(a)]) p.insert(p.begin(), a);
      return p;
    };
    for (int t = 0; t < n; ++t) {
      ref->truncate(pos0);
      for (int32_t node : path_of(t)) ref->decode(toks[size_t(node)]);
      ASSERT_TRUE(same_row(ref->logits(), rows.data() + t * V))
          << c.name << ": step " << step << ", node " << t << " of " << n << " differs from decoding its path";
    }
    const auto path = path_of(int(g() % unsigned(n)));
    s->accept_tree_path(path);
    ref->truncate(pos0);
    for (int32_t node : path) ref->decode(toks[size_t(node)]);
    ASSERT_EQ(s->position(), ref->position());
  }
  for (int i = 0; i < 4; ++i) {
    const int32_t t = random_ids(g, V, 1)[0];
    ref->decode(t);
    s->decode(t);
    ASSERT_TRUE(same_row(ref->logits(), s->logits().data())) << c.name << ": decode " << i << " after tree steps";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Rollback, ::testing::Range<size_t>(0, 7),
                         [](const auto& info) { return cases()[info.param].name; });

template <typename F>
void expect_error(F&& f, std::vector<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << " lacks " << n;
  }
}

TEST(Rollback, BadArgumentsAreNamed) {
  auto rm = random_model(gemma3_config(48, 4), 3);
  auto s = rm.model->new_session();
  std::mt19937 g(1);
  s->prefill(random_ids(g, 48, 10));
  expect_error([&] { s->truncate(11); }, {"truncate", "new_length 11", "position() = 10"});
  expect_error([&] { s->truncate(-1); }, {"truncate", "-1"});
  expect_error([&] { s->accept_tree_path(std::vector<int32_t>{0}); }, {"accept_tree_path", "forward_tree first"});
  expect_error([&] { s->forward_tree(std::vector<int32_t>{5, 6}, std::vector<int32_t>{-1}); },
               {"parents has 1 entries", "2"});
  expect_error([&] { s->forward_tree(std::vector<int32_t>{5, 6}, std::vector<int32_t>{0, 0}); },
               {"parents[0] = 0", "-1"});
  expect_error([&] { s->forward_tree(std::vector<int32_t>{5, 6, 7}, std::vector<int32_t>{-1, 0, 2}); },
               {"parents[2] = 2"});
  expect_error([&] { s->forward_tree(std::vector<int32_t>(200, 5), std::vector<int32_t>(200, -1)); }, {"200 nodes"});
  expect_error([&] { s->forward_tree(std::vector<int32_t>{5, 99}, std::vector<int32_t>{-1, 0}); }, {"token id 99"});
  // A rejected call leaves the session as it was.
  EXPECT_EQ(s->position(), 10);
  s->forward_tree(std::vector<int32_t>{5, 6, 7}, std::vector<int32_t>{-1, 0, 0});
  expect_error([&] { s->accept_tree_path(std::vector<int32_t>{1}); }, {"start at the root"});
  expect_error([&] { s->accept_tree_path(std::vector<int32_t>{0, 1, 2}); }, {"nodes[2] = 2", "not a child"});
  s->accept_tree_path(std::vector<int32_t>{0, 2});
  EXPECT_EQ(s->position(), 12);
  // Any other step discards a pending tree.
  s->forward_tree(std::vector<int32_t>{5, 6}, std::vector<int32_t>{-1, 0});
  s->decode(9);
  expect_error([&] { s->accept_tree_path(std::vector<int32_t>{0, 1}); }, {"forward_tree first"});
  EXPECT_EQ(s->position(), 13);
  s->truncate(12);
  // Far past the ring (window 4 + slack 16 = 20 rows): rolling back beyond what the ring still holds is refused.
  for (int i = 0; i < 40; ++i) s->decode(7);
  EXPECT_EQ(s->position(), 52);
  expect_error([&] { s->truncate(20); }, {"cannot roll back to 20", "oldest reachable length is 35"});
  s->truncate(35);  // the oldest reachable: positions 32..34 (its window) are still in the ring
  s->truncate(0);   // back to empty always works
  EXPECT_EQ(s->position(), 0);
}

TEST(Rollback, GlobalLayersRollBackAnywhere) {
  auto rm = random_model(llama_config(64), 5);
  auto a = rm.model->new_session(), b = rm.model->new_session();
  std::mt19937 g(2);
  const auto ids = random_ids(g, 64, 40);
  a->prefill(ids);
  a->truncate(3);
  const std::vector<int32_t> tail(ids.begin() + 3, ids.begin() + 9);
  a->prefill(tail);
  b->prefill(std::vector<int32_t>(ids.begin(), ids.begin() + 3));
  b->prefill(tail);
  // Not bitwise: a's first rows came from a 40-row prefill (GEMM), b's from a 3-row one (GEMV).
  const auto x = a->logits(), y = b->logits();
  double d = 0, n = 0;
  for (size_t i = 0; i < x.size(); ++i) d += (x[i] - y[i]) * (x[i] - y[i]), n += y[i] * y[i];
  EXPECT_LT(std::sqrt(d / n), 1e-5);
}

}  // namespace

namespace {

// kv_ring_slack 0: rings of exactly the window (decode reads every slot); rollback of one position only, and
// speculative generation is refused. Same logits as with slack up to summation order.
TEST(Rollback, RingWithoutSlack) {
  ConfigFile f(gemma3_config(48, 4));
  LoadOptions o;
  o.random_weights = true;
  o.threads = 1;
  o.kv_ring_slack = 0;
  auto m0 = Model::load(f.path(), o);
  o.kv_ring_slack = 16;
  auto m16 = Model::load(f.path(), o);
  auto a = m0->new_session(), b = m16->new_session();
  EXPECT_EQ(a->max_verify_rows(), 1);
  std::mt19937 g(4);
  const auto ids = random_ids(g, 48, 40);
  a->prefill(std::span<const int32_t>(ids.data(), 5));
  b->prefill(std::span<const int32_t>(ids.data(), 5));
  for (size_t i = 5; i < ids.size(); ++i) {
    a->decode(ids[i]);
    b->decode(ids[i]);
    const auto x = a->logits(), y = b->logits();
    double d = 0, n = 0;
    for (size_t j = 0; j < x.size(); ++j) d += (x[j] - y[j]) * (x[j] - y[j]), n += y[j] * y[j];
    ASSERT_LT(std::sqrt(d / n), 1e-5) << "decode " << i;
  }
  expect_error([&] { a->truncate(38); }, {"cannot roll back to 38", "kv_ring_slack 0", "oldest reachable length is 39"});
  a->truncate(39);
  GenerateOptions go;
  go.temperature = 0;
  go.speculative.lookup = 2;
  auto c = m0->new_session();
  expect_error([&] { generate(*c, ids, go); }, {"verifies at most one row per step"});
  LoadOptions bad = o;
  bad.kv_ring_slack = -1;
  expect_error([&] { Model::load(f.path(), bad); }, {"kv_ring_slack must be in [0, 1024], got -1"});
}

}  // namespace
