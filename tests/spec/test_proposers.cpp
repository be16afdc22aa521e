// Units of src/spec: n-gram candidates, the token tree, the acceptance rules on their own (many draws from fixed
// p and q, no model) and the adaptive-K step model.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <random>

#include "engine/sampler.hpp"
#include "spec/accept.hpp"
#include "spec/adaptive.hpp"
#include "spec/ngram.hpp"
#include "spec/tree.hpp"

namespace {

using namespace flashkit;
using namespace flashkit::spec;
using V = std::vector<int32_t>;

TEST(Ngram, LongestMostRecentMatchFirst) {
  //              0  1  2  3  4  5  6  7  8  9 10 11
  const V h = {5, 6, 7, 8, 1, 6, 7, 9, 2, 3, 6, 7};
  // Suffix "6 7": matches at 5..6 (then 9 2 3) and 1..2 (then 8 1 6); most recent first.
  auto c = ngram_candidates(h, 2, 3, 4);
  ASSERT_GE(c.size(), 2u);
  EXPECT_EQ(c[0], (V{9, 2, 3}));
  EXPECT_EQ(c[1], (V{8, 1, 6}));
  // Width 1: only the best.
  EXPECT_EQ(ngram_candidates(h, 2, 3, 1), (std::vector<V>{{9, 2, 3}}));
  // max_tokens caps the continuation; a match near the end continues as an overlapping copy (periodic text).
  EXPECT_EQ(ngram_candidates(h, 2, 1, 1)[0], (V{9}));
  const V r = {1, 2, 1, 2, 1, 2};
  EXPECT_EQ(ngram_candidates(r, 2, 5, 1)[0], (V{1, 2, 1, 2, 1}));  // "1 2" at 2..3, then "1 2", then the copy itself
  const V a = {4, 7, 7, 7};
  EXPECT_EQ(ngram_candidates(a, 3, 3, 1)[0], (V{7, 7, 7}));  // "7 7" at 1..2, followed by "7" and its own copy
  // Falls back to shorter n-grams: "4" occurs once before.
  const V s = {4, 8, 9, 3, 3, 4};
  EXPECT_EQ(ngram_candidates(s, 3, 2, 1)[0], (V{8, 9}));
  // Nothing to match.
  EXPECT_TRUE(ngram_candidates(V{1, 2, 3}, 3, 4, 2).empty());
  EXPECT_TRUE(ngram_candidates(V{1}, 3, 4, 2).empty());
  EXPECT_TRUE(ngram_candidates(V{}, 3, 4, 2).empty());
}

TEST(Ngram, DistinctCandidatesAndPrefixes) {
  const V h = {1, 2, 3, 1, 2, 3, 1, 2, 4, 1, 2};
  const auto c = ngram_candidates(h, 2, 2, 8);
  // After "1 2": {4, 1} (most recent), {3, 1} (twice: once), nothing else.
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0], (V{4, 1}));
  EXPECT_EQ(c[1], (V{3, 1}));
}

TEST(TokenTree, TrieFlattening) {
  TokenTree t(7);
  EXPECT_EQ(t.insert(V{1, 2, 3}, 100), 3);
  EXPECT_EQ(t.insert(V{1, 2, 4}, 100), 1);
  EXPECT_EQ(t.insert(V{5}, 100), 1);
  EXPECT_EQ(t.insert(V{1, 2}, 100), 0);
  EXPECT_EQ(t.token, (V{7, 1, 2, 3, 4, 5}));
  EXPECT_EQ(t.parent, (V{-1, 0, 1, 2, 2, 0}));
  EXPECT_EQ(t.children[2], (V{3, 4}));
  EXPECT_EQ(t.child(0, 5), 5);
  EXPECT_EQ(t.child(0, 9), -1);
  EXPECT_FALSE(t.is_chain());
  EXPECT_EQ(t.depth(), 3);
  TokenTree c(1);
  c.insert(V{2, 3, 4, 5}, 3);  // node budget
  EXPECT_EQ(c.size(), 3);
  EXPECT_TRUE(c.is_chain());
}

Dist make(const std::vector<float>& p) {
  std::vector<engine::TokenProb> tp;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0) tp.push_back({int32_t(i), p[i]});
  Dist d;
  d.assign(tp, int64_t(p.size()));
  return d;
}

double chi2(const std::vector<float>& p, const std::vector<int64_t>& c, int64_t n) {
  double s = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * double(n);
    if (e > 0) s += (c[i] - e) * (c[i] - e) / e;
    else if (c[i] > 0) s += 1e9;
  }
  return s;
}

// Draws x ~ q, applies the rule; the result must follow p (6 cells: chi2 with 5 df, 1e-6 tail ~ 35).
TEST(AcceptRules, DraftRuleReproducesP) {
  const std::vector<float> p = {0.05f, 0.4f, 0.0f, 0.25f, 0.2f, 0.1f}, q = {0.3f, 0.1f, 0.2f, 0.1f, 0.0f, 0.3f};
  const Dist P = make(p), Q = make(q);
  engine::SamplerParams sp;
  engine::Sampler rng(sp);
  const int64_t n = 200000;
  std::vector<int64_t> exact(6, 0), wrong(6, 0);
  int64_t acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t x = Q.sample(rng.next_uniform());
    const Verdict v = accept_draft(P, Q, x, rng, AcceptRule::exact);
    acc += v.accepted;
    exact[size_t(v.token)] += 1;
    wrong[size_t(accept_draft(P, Q, x, rng, AcceptRule::always_accept).token)] += 1;
  }
  EXPECT_LT(chi2(p, exact, n), 35.0);
  EXPECT_GT(chi2(p, wrong, n), 1000.0);
  // Acceptance rate = sum min(p, q) = 0.05 + 0.1 + 0 + 0.1 + 0 + 0.1 = 0.35.
  EXPECT_NEAR(double(acc) / double(n), 0.35, 0.01);
}

TEST(AcceptRules, PointMassCandidatesReproduceP) {
  const std::vector<float> p = {0.1f, 0.3f, 0.15f, 0.05f, 0.4f};
  const Dist P = make(p);
  engine::SamplerParams sp;
  engine::Sampler rng(sp);
  const int64_t n = 200000;
  for (const V& cands : {V{1}, V{4, 2}, V{3, 0, 1}, V{2, 2}, V{0, 1, 2, 3, 4}}) {
    std::vector<int64_t> c(5, 0);
    int64_t acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      int which = -1;
      const Verdict v = accept_candidates(P, cands, rng, AcceptRule::exact, &which);
      c[size_t(v.token)] += 1;
      if (v.accepted) {
        ++acc;
        EXPECT_EQ(cands[size_t(which)], v.token);
      }
    }
    EXPECT_LT(chi2(p, c, n), 30.0) << "candidates " << cands.size();
    double pm = 0;  // acceptance = mass of the distinct candidates
    for (int32_t t = 0; t < 5; ++t)
      if (std::find(cands.begin(), cands.end(), t) != cands.end()) pm += p[size_t(t)];
    EXPECT_NEAR(double(acc) / double(n), pm, 0.01);
  }
}

// Step times of a launch-bound target: verification of T rows 10 ms + 0.5 ms per row; a plain step 10.5 ms. The
// model under test chooses K; `accepted(k)` says how much of a k-proposal the target takes.
template <typename F>
std::vector<int> drive(StepModel& m, int steps, double draft_s, F accepted) {
  std::vector<int> ks;
  for (int i = 0; i < steps; ++i) {
    const int k = m.next_k();
    ks.push_back(k);
    if (k == 0) m.update(0, 0, 0.0, 0.0105, 1);
    else m.update(k, accepted(k, i), draft_s * k, 0.010 + 0.0005 * (k + 1), k + 1);
  }
  return ks;
}

TEST(StepModel, GrowsOnFullAcceptanceShrinksOnEarlyRejection) {
  StepModel m(4, 8, true);
  EXPECT_EQ(m.next_k(), 4);
  // Cheap drafts, verification cost growing slowly with T: everything accepted -> K climbs to the cap (after one
  // plain step that measures t_plain).
  const auto up = drive(m, 30, 0.001, [](int k, int) { return k; });
  EXPECT_EQ(std::count(up.begin(), up.end(), 0), 1) << "one calibration step";
  EXPECT_EQ(m.next_k(), 8);
  EXPECT_GT(m.acceptance(), 0.9);
  // Then the first token is rejected every time: once the acceptance estimate has decayed (~40 speculative steps),
  // one speculative row no longer pays for itself (1 token per 12 ms against 10.5 ms plain), so K goes to 0, with
  // one probe step in 17.
  const auto down = drive(m, 120, 0.001, [](int, int) { return 0; });
  EXPECT_EQ(m.next_k(), 0);
  EXPECT_LT(m.acceptance(), 0.1);
  const auto tail = std::vector<int>(down.end() - 51, down.end());
  EXPECT_GE(std::count(tail.begin(), tail.end(), 0), 51 - 3) << "probes only";
  EXPECT_GE(std::count(tail.begin(), tail.end(), 1), 2) << "it keeps probing";
  // Fixed K never moves, not even after plain steps.
  StepModel f(3, 3, false);
  f.update(3, 0, 0.01, 0.01, 4);
  f.update(0, 0, 0.0, 0.001, 1);
  EXPECT_EQ(f.next_k(), 3);
}

TEST(StepModel, PlainStepsWhenDraftsCostMoreThanTheyBring) {
  // Drafts as costly as a target step, 70% acceptance: no K pays (k = 1: 1.7 tokens per 21 ms vs 1 per 10.5 ms).
  StepModel e(4, 8, true);
  const auto ks = drive(e, 170, 0.010, [](int k, int i) { return (i % 10 < 7) ? k : k / 2; });
  const auto tail = std::vector<int>(ks.begin() + 30, ks.end());
  const double spec_share = double(tail.size() - size_t(std::count(tail.begin(), tail.end(), 0))) / double(tail.size());
  EXPECT_LE(spec_share, 1.0 / 17 + 0.01) << "at most the probes";
  // The drafts get cheap (a regime change): the next probe sees it and speculation comes back within a probe period.
  const auto back = drive(e, 40, 0.0002, [](int k, int) { return k; });
  EXPECT_GT(e.next_k(), 0);
  EXPECT_GT(std::count_if(back.begin() + 20, back.end(), [](int k) { return k > 0; }), 15);
}

}  // namespace
