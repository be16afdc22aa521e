// Sampler: greedy, each filter's kept set on hand-made distributions, the filter order, empirical
// frequencies against the expected distribution, the repetition penalty, determinism and parameter errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/sampler.hpp"
#include "flashkit/error.hpp"

using flashkit::engine::apply_repetition_penalty;
using flashkit::engine::Sampler;
using flashkit::engine::SamplerParams;
using flashkit::engine::TokenProb;

namespace {

std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double v : p) l.push_back(static_cast<float>(std::log(v)));
  return l;
}

std::set<int32_t> kept(const std::vector<TokenProb>& d) {
  std::set<int32_t> s;
  for (auto& t : d) s.insert(t.token);
  return s;
}

SamplerParams params(float temperature, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

// Reference distribution, straight from the definitions, in double with full sorts.
std::map<int32_t, double> reference(const std::vector<float>& logits, const SamplerParams& p) {
  const size_t n = logits.size();
  std::vector<double> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<double>(logits[i]) / p.temperature;
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  std::vector<bool> keep(n, true);
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    const double kth = x[order[p.top_k - 1]];
    for (size_t i = 0; i < n; ++i) keep[i] = x[i] >= kth;
  }
  auto probs = [&]() {
    double mx = -INFINITY, s = 0;
    for (size_t i = 0; i < n; ++i)
      if (keep[i]) mx = std::max(mx, x[i]);
    std::vector<double> pr(n, 0.0);
    for (size_t i = 0; i < n; ++i)
      if (keep[i]) s += (pr[i] = std::exp(x[i] - mx));
    for (auto& v : pr) v /= s;
    return pr;
  };
  if (p.top_p < 1.0f) {
    auto pr = probs();
    double before = 0;
    bool stop = false;
    for (size_t j = 0; j < n; ++j) {
      const int32_t t = order[j];
      if (!keep[t]) continue;
      if (stop || (j > 0 && before >= p.top_p)) {
        keep[t] = false;
        stop = true;
        continue;
      }
      before += pr[t];
    }
  }
  if (p.min_p > 0.0f) {
    auto pr = probs();
    const double mx = *std::max_element(pr.begin(), pr.end());
    for (size_t i = 0; i < n; ++i)
      if (keep[i] && pr[i] < p.min_p * mx) keep[i] = false;
  }
  auto pr = probs();
  std::map<int32_t, double> out;
  for (size_t i = 0; i < n; ++i)
    if (keep[i]) out[static_cast<int32_t>(i)] = pr[i];
  return out;
}

// Pearson chi-square of observed counts against expected probabilities.
double chi_square(const std::map<int32_t, int64_t>& counts, const std::map<int32_t, double>& expected, int64_t n) {
  double chi = 0;
  for (auto& [tok, p] : expected) {
    const double e = p * static_cast<double>(n);
    const auto it = counts.find(tok);
    const double o = it == counts.end() ? 0.0 : static_cast<double>(it->second);
    chi += (o - e) * (o - e) / e;
  }
  return chi;
}

// Critical value well beyond the 1e-6 tail for up to 9 degrees of freedom (chi2(9) at 1e-6 is ~ 42.9):
// a correct sampler with a fixed seed passes by a wide margin; a wrong distribution blows far past it.
constexpr double kChiBound = 45.0;

std::map<int32_t, int64_t> draw(Sampler& s, const std::vector<float>& logits, int64_t n,
                                const std::vector<int32_t>& history = {}) {
  std::map<int32_t, int64_t> counts;
  for (int64_t i = 0; i < n; ++i) ++counts[s.sample(logits, history)];
  return counts;
}

const std::vector<double> kP = {0.4, 0.3, 0.15, 0.1, 0.05};

}  // namespace

TEST(Sampler, GreedyIsArgmaxFirstIndexOnTies) {
  Sampler s(params(0.0f));
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 3.0f, -1.0f, 2.0f}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{1.0f, 5.0f, 5.0f, 5.0f}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{-INFINITY, -7.0f, -INFINITY}), 1);
  auto d = s.distribution(std::vector<float>{0.0f, 2.0f, 2.0f});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].token, 1);
  EXPECT_EQ(d[0].prob, 1.0f);
}

TEST(Sampler, GreedyOnLargeRandomVocab) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> l(262144);
  for (auto& v : l) v = nd(rng);
  const auto want = std::max_element(l.begin(), l.end()) - l.begin();
  Sampler g(params(0.0f));
  EXPECT_EQ(g.sample(l), want);
}

TEST(Sampler, TopK1IsGreedy) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  Sampler g(params(0.0f));
  for (float temp : {0.3f, 1.0f, 2.5f}) {
    SamplerParams p = params(temp, 1);
    p.seed = 99;
    Sampler s(p);
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> l(1000);
      for (auto& v : l) v = nd(rng);
      EXPECT_EQ(s.sample(l), g.sample(l));
    }
  }
}

TEST(Sampler, NoFiltersKeepsEverything) {
  Sampler s(params(1.0f));
  auto d = s.distribution(log_probs(kP));
  ASSERT_EQ(d.size(), kP.size());
  for (size_t i = 0; i < d.size(); ++i) {
    EXPECT_EQ(d[i].token, static_cast<int32_t>(i));
    EXPECT_NEAR(d[i].prob, kP[i], 1e-6);
  }
}

TEST(Sampler, TopKKeepsKLargestAndTies) {
  auto l = log_probs(kP);
  {
    Sampler s(params(1.0f, 2));
    auto d = s.distribution(l);
    EXPECT_EQ(kept(d), (std::set<int32_t>{0, 1}));
    EXPECT_NEAR(d[0].prob, 0.4 / 0.7, 1e-6);
    EXPECT_NEAR(d[1].prob, 0.3 / 0.7, 1e-6);
  }
  {
    Sampler s(params(1.0f, 100));  // k beyond the vocabulary: no-op
    EXPECT_EQ(s.distribution(l).size(), 5u);
  }
  {
    // transformers keeps every token tied with the k-th largest logit.
    Sampler s(params(1.0f, 2));
    EXPECT_EQ(kept(s.distribution(std::vector<float>{3.0f, 1.0f, 2.0f, 2.0f, 0.0f})), (std::set<int32_t>{0, 2, 3}));
  }
}

TEST(Sampler, TopPKeepsSmallestSetReachingP) {
  auto l = log_probs(kP);  // 0.4 0.3 0.15 0.1 0.05 -> cumulative 0.4 0.7 0.85 0.95 1.0
  const std::vector<std::pair<float, std::set<int32_t>>> cases = {
      {0.05f, {0}},       {0.35f, {0}},         {0.45f, {0, 1}},          {0.65f, {0, 1}},
      {0.72f, {0, 1, 2}}, {0.9f, {0, 1, 2, 3}}, {0.97f, {0, 1, 2, 3, 4}}, {1.0f, {0, 1, 2, 3, 4}},
  };
  for (auto& [tp, want] : cases) {
    Sampler s(params(1.0f, 0, tp));
    auto d = s.distribution(l);
    EXPECT_EQ(kept(d), want) << "top_p=" << tp;
    double mass = 0;
    for (int32_t t : want) mass += kP[t];
    EXPECT_NEAR(d[0].prob, 0.4 / mass, 1e-6) << "top_p=" << tp;
  }
}

TEST(Sampler, TopPAlwaysKeepsOneToken) {
  Sampler s(params(1.0f, 0, 1e-6f));
  auto d = s.distribution(std::vector<float>{0.0f, 5.0f, 4.9f});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].token, 1);
}

TEST(Sampler, MinPRelativeToMaxProb) {
  auto l = log_probs(kP);
  const std::vector<std::pair<float, std::set<int32_t>>> cases = {
      {0.1f, {0, 1, 2, 3, 4}},  // threshold 0.04
      {0.2f, {0, 1, 2, 3}},     // 0.08
      {0.3f, {0, 1, 2}},        // 0.12
      {0.5f, {0, 1}},           // 0.2
      {0.8f, {0}},              // 0.32
  };
  for (auto& [mp, want] : cases) {
    Sampler s(params(1.0f, 0, 1.0f, mp));
    EXPECT_EQ(kept(s.distribution(l)), want) << "min_p=" << mp;
  }
}

TEST(Sampler, TemperatureScalesLogits) {
  auto l = log_probs(kP);
  for (float temp : {0.5f, 2.0f}) {
    Sampler s(params(temp));
    auto d = s.distribution(l);
    double z = 0;
    for (double p : kP) z += std::pow(p, 1.0 / temp);
    for (auto& t : d) EXPECT_NEAR(t.prob, std::pow(kP[t.token], 1.0 / temp) / z, 1e-6) << "T=" << temp;
  }
}

TEST(Sampler, FilterOrderFollowsTransformers) {
  auto l = log_probs(kP);
  // top-p sees the distribution renormalised after top-k: with k=4 the mass above token 2 is 0.7/0.95 =
  // 0.737 >= 0.72, so token 2 goes; without top-k it is 0.7 < 0.72 and token 2 stays.
  EXPECT_EQ(kept(Sampler(params(1.0f, 4, 0.72f)).distribution(l)), (std::set<int32_t>{0, 1}));
  EXPECT_EQ(kept(Sampler(params(1.0f, 0, 0.72f)).distribution(l)), (std::set<int32_t>{0, 1, 2}));
  // min-p applies after temperature: T=0.5 squares the probabilities, ratios to the max become
  // 1, 0.5625, 0.14, 0.0625, 0.0156 -> min_p 0.1 keeps 3 tokens (all 5 at T=1: ratios >= 0.125).
  EXPECT_EQ(kept(Sampler(params(0.5f, 0, 1.0f, 0.1f)).distribution(l)), (std::set<int32_t>{0, 1, 2}));
  EXPECT_EQ(kept(Sampler(params(1.0f, 0, 1.0f, 0.1f)).distribution(l)), (std::set<int32_t>{0, 1, 2, 3, 4}));
  // top-k before temperature would not matter (monotone), but top-p after temperature does: T=2 flattens
  // the distribution so top_p=0.6 needs three tokens instead of two.
  EXPECT_EQ(kept(Sampler(params(1.0f, 0, 0.6f)).distribution(l)), (std::set<int32_t>{0, 1}));
  EXPECT_EQ(kept(Sampler(params(2.0f, 0, 0.6f)).distribution(l)), (std::set<int32_t>{0, 1, 2}));
}

TEST(Sampler, MatchesReferenceOnRandomLogits) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.0f, 2.5f);
  const SamplerParams combos[] = {
      params(1.0f),
      params(0.7f, 40),
      params(1.0f, 0, 0.9f),
      params(0.8f, 0, 0.95f, 0.05f),
      params(1.3f, 64, 0.8f, 0.02f),
      params(0.6f, 0, 1.0f, 0.1f),
      params(1.0f, 5000, 0.5f),
  };
  for (const auto& p : combos) {
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<float> l(3000 + 1000 * trial);
      for (auto& v : l) v = nd(rng);
      auto want = reference(l, p);
      auto got = Sampler(p).distribution(l);
      ASSERT_EQ(got.size(), want.size()) << "T=" << p.temperature << " k=" << p.top_k << " p=" << p.top_p
                                         << " min_p=" << p.min_p;
      for (auto& t : got) {
        ASSERT_TRUE(want.count(t.token)) << t.token;
        EXPECT_NEAR(t.prob, want[t.token], 1e-5 + 1e-4 * want[t.token]);
      }
      for (size_t i = 1; i < got.size(); ++i) EXPECT_GE(got[i - 1].prob, got[i].prob);
    }
  }
}

TEST(Sampler, FrequenciesMatchDistribution) {
  auto l = log_probs(kP);
  constexpr int64_t N = 200000;
  const SamplerParams combos[] = {params(1.0f),
                                  params(0.7f),
                                  params(1.5f, 4),
                                  params(1.0f, 0, 0.8f),
                                  params(1.0f, 0, 1.0f, 0.2f),
                                  params(1.2f, 4, 0.9f, 0.1f)};
  uint64_t seed = 1;
  for (auto p : combos) {
    p.seed = seed++;
    Sampler s(p);
    const auto want = reference(l, p);
    const auto counts = draw(s, l, N);
    for (auto& [tok, c] : counts) EXPECT_TRUE(want.count(tok)) << "drew filtered token " << tok;
    const double chi = chi_square(counts, want, N);
    EXPECT_LT(chi, kChiBound) << "T=" << p.temperature << " k=" << p.top_k << " p=" << p.top_p << " min_p=" << p.min_p;
  }
}

TEST(Sampler, ChiSquareBoundRejectsWrongDistributions) {
  // The bound has power: draws at T=1 tested against the T=1.1 distribution, against the distribution
  // without renormalising after top-k, and against a uniform one all fail it.
  auto l = log_probs(kP);
  constexpr int64_t N = 200000;
  SamplerParams p = params(1.0f);
  p.seed = 5;
  Sampler s(p);
  const auto counts = draw(s, l, N);
  EXPECT_LT(chi_square(counts, reference(l, params(1.0f)), N), kChiBound);
  EXPECT_GT(chi_square(counts, reference(l, params(1.1f)), N), kChiBound);
  std::map<int32_t, double> uniform;
  for (int32_t t = 0; t < 5; ++t) uniform[t] = 0.2;
  EXPECT_GT(chi_square(counts, uniform, N), kChiBound);
  std::map<int32_t, double> top2_unnormalised = {{0, 0.4}, {1, 0.3}, {2, 0.3}};  // mass of 2..4 lumped
  std::map<int32_t, int64_t> lumped = {{0, counts.at(0)}, {1, counts.at(1)}, {2, N - counts.at(0) - counts.at(1)}};
  EXPECT_LT(chi_square(lumped, top2_unnormalised, N), kChiBound);  // sanity of the lumping
  SamplerParams pk = params(1.0f, 2);
  pk.seed = 6;
  Sampler sk(pk);
  const auto ck = draw(sk, l, N);
  std::map<int32_t, double> no_renorm = {{0, 0.4}, {1, 0.3}};  // expected counts sum to 0.7 N: wrong
  EXPECT_GT(chi_square(ck, no_renorm, N), kChiBound);
  EXPECT_LT(chi_square(ck, reference(l, pk), N), kChiBound);
}

TEST(Sampler, RepetitionPenaltyMath) {
  std::vector<float> l = {2.0f, -2.0f, 1.0f, 0.5f, -0.5f};
  apply_repetition_penalty(l, std::vector<int32_t>{0, 1, 1, 4, 0}, 2.0f);
  EXPECT_EQ(l, (std::vector<float>{1.0f, -4.0f, 1.0f, 0.5f, -1.0f}));  // once per distinct id
  std::vector<float> m = {3.0f, -3.0f};
  apply_repetition_penalty(m, std::vector<int32_t>{0, 1}, 0.5f);  // < 1 encourages repeats
  EXPECT_EQ(m, (std::vector<float>{6.0f, -1.5f}));
  std::vector<float> z = {0.0f};
  apply_repetition_penalty(z, std::vector<int32_t>{0}, 3.0f);
  EXPECT_EQ(z[0], 0.0f);
  EXPECT_THROW(apply_repetition_penalty(z, std::vector<int32_t>{1}, 2.0f), flashkit::Error);
  EXPECT_THROW(apply_repetition_penalty(z, std::vector<int32_t>{-1}, 2.0f), flashkit::Error);
}

TEST(Sampler, RepetitionPenaltyInSamplerAndGreedy) {
  SamplerParams p = params(0.0f);
  p.repetition_penalty = 2.0f;
  Sampler g(p);
  const std::vector<float> l = {2.0f, 1.5f, -1.0f};
  EXPECT_EQ(g.sample(l), 0);                              // no history: plain argmax
  EXPECT_EQ(g.sample(l, std::vector<int32_t>{0}), 1);     // 2/2 = 1 < 1.5
  EXPECT_EQ(g.sample(l, std::vector<int32_t>{0, 1}), 0);  // 1 vs 0.75
  // The penalised logits feed the sampling filters.
  SamplerParams q = params(1.0f);
  q.repetition_penalty = 1.5f;
  auto d = Sampler(q).distribution(log_probs(kP), std::vector<int32_t>{0, 0, 3});
  const double l0 = std::log(0.4) * 1.5, l3 = std::log(0.1) * 1.5;  // negative logits are multiplied
  std::vector<double> e = {std::exp(l0), 0.3, 0.15, std::exp(l3), 0.05};
  const double z = std::accumulate(e.begin(), e.end(), 0.0);
  for (auto& t : d) EXPECT_NEAR(t.prob, e[t.token] / z, 1e-6);
  // The caller's logits are not modified.
  const std::vector<float> before = log_probs(kP);
  std::vector<float> copy = before;
  Sampler(q).sample(copy, std::vector<int32_t>{0, 1, 2});
  EXPECT_EQ(copy, before);
}

TEST(Sampler, DeterministicForSeed) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> l(5000);
  for (auto& v : l) v = nd(rng);
  SamplerParams p = params(1.0f, 0, 0.95f);
  p.seed = 42;
  Sampler a(p), b(p);
  std::vector<int32_t> sa, sb;
  for (int i = 0; i < 200; ++i) {
    sa.push_back(a.sample(l));
    sb.push_back(b.sample(l));
  }
  EXPECT_EQ(sa, sb);
  p.seed = 43;
  Sampler c(p);
  std::vector<int32_t> sc;
  for (int i = 0; i < 200; ++i) sc.push_back(c.sample(l));
  EXPECT_NE(sa, sc);
  a.reseed(42);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(a.sample(l), sa[static_cast<size_t>(i)]);
  // Pin the PRNG stream so a change of generator is noticed (xoshiro256** seeded by splitmix64(0)).
  Sampler z(params(1.0f));
  const double u0 = z.next_uniform();
  EXPECT_GE(u0, 0.0);
  EXPECT_LT(u0, 1.0);
  Sampler z2(params(1.0f));
  EXPECT_EQ(z2.next_uniform(), u0);
}

TEST(Sampler, LargeVocabTopPIsFast) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> l(262144);
  for (auto& v : l) v = nd(rng);
  SamplerParams p = params(0.8f, 0, 0.9f, 0.0f);
  p.seed = 1;
  Sampler s(p);
  const auto d = s.distribution(l);
  const auto want = reference(l, p);
  EXPECT_EQ(d.size(), want.size());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    const int32_t t = s.sample(l);
    EXPECT_TRUE(want.count(t));
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 20;
  RecordProperty("ms_per_sample", std::to_string(ms));
  EXPECT_LT(ms, 200.0);  // generous: shared 2-core machine, Debug builds
}

TEST(Sampler, BadParamsNameTheParameter) {
  auto expect_error = [](SamplerParams p, const std::string& name) {
    try {
      Sampler s(p);
      ADD_FAILURE() << "no error for " << name;
    } catch (const flashkit::Error& e) {
      EXPECT_EQ(e.status(), flashkit::Status::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  SamplerParams p;
  p.temperature = -0.1f;
  expect_error(p, "temperature");
  p = {};
  p.temperature = NAN;
  expect_error(p, "temperature");
  p = {};
  p.top_p = 0.0f;
  expect_error(p, "top_p");
  p = {};
  p.top_p = 1.01f;
  expect_error(p, "top_p");
  p = {};
  p.top_p = NAN;
  expect_error(p, "top_p");
  p = {};
  p.min_p = 1.0f;
  expect_error(p, "min_p");
  p = {};
  p.min_p = -0.01f;
  expect_error(p, "min_p");
  p = {};
  p.min_p = NAN;
  expect_error(p, "min_p");
  p = {};
  p.top_k = -1;
  expect_error(p, "top_k");
  p = {};
  p.repetition_penalty = 0.0f;
  expect_error(p, "repetition_penalty");
  p = {};
  p.repetition_penalty = NAN;
  expect_error(p, "repetition_penalty");
  p = {};
  EXPECT_NO_THROW(flashkit::engine::validate(p));
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  EXPECT_NO_THROW(flashkit::engine::validate(p));
}

TEST(Sampler, BadLogitsThrow) {
  for (float temp : {0.0f, 1.0f}) {
    Sampler s(params(temp, 0, 0.9f));
    EXPECT_THROW(s.sample(std::vector<float>{0.0f, NAN, 1.0f}), flashkit::Error);
    EXPECT_THROW(s.distribution(std::vector<float>{NAN}), flashkit::Error);
    EXPECT_THROW(s.sample(std::vector<float>{0.0f, INFINITY}), flashkit::Error);
    EXPECT_THROW(s.sample(std::vector<float>{-INFINITY, -INFINITY}), flashkit::Error);
    EXPECT_THROW(s.sample(std::vector<float>{}), flashkit::Error);
    try {
      s.sample(std::vector<float>{0.0f, NAN});
    } catch (const flashkit::Error& e) {
      EXPECT_NE(std::string(e.what()).find("NaN"), std::string::npos);
    }
    // -inf masks a token.
    for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(std::vector<float>{-INFINITY, 0.0f, -INFINITY}), 1);
  }
}
