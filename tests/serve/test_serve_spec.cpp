// n-gram speculative decoding inside serve::Engine (EngineOptions::spec_lookup): greedy output must stay the tokens
// flashkit::generate gives a request alone, with proposals actually accepted; rejected rows must roll the paged cache
// back (blocks all free when idle, only accepted tokens in the prefix cache), also under preemption; with
// temperature > 0 the commit rule must keep the target distribution (chi-square on a 6-token vocabulary).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/paged.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/serve.hpp"
#include "serve/scheduler.hpp"

namespace {

using flashkit::Model;
using namespace flashkit::serve;

const std::string kModels = std::string(FLASHKIT_TEST_DATA) + "/models";

struct Job {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 24;
  float temperature = 0;
  uint64_t seed = 0;
};

std::vector<int32_t> alone(Model& m, const Job& j) {
  auto s = m.new_session();
  flashkit::GenerateOptions g;
  g.max_new_tokens = j.max_tokens;
  g.temperature = j.temperature;
  g.seed = j.seed;
  g.stop_at_eos = false;
  return flashkit::generate(*s, j.prompt, g).tokens;
}

// Prompts that repeat a random phrase (what n-gram lookup feeds on) and a few plain random ones.
std::vector<Job> repetitive_jobs(int n, int64_t vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    Job j;
    const int period = 3 + i % 5, reps = i % 4 == 3 ? 1 : 2 + i % 3;
    std::vector<int32_t> phrase;
    for (int t = 0; t < period; ++t) phrase.push_back(int32_t(rng() % uint32_t(vocab)));
    for (int r = 0; r < reps; ++r) j.prompt.insert(j.prompt.end(), phrase.begin(), phrase.end());
    j.prompt.push_back(phrase[0]);
    j.max_tokens = 12 + (i * 5) % 23;
    jobs.push_back(j);
  }
  return jobs;
}

std::vector<std::vector<int32_t>> run_engine(Engine& e, const std::vector<Job>& jobs, std::vector<RequestResult>* res) {
  std::vector<std::vector<int32_t>> out(jobs.size());
  res->assign(jobs.size(), {});
  for (size_t i = 0; i < jobs.size(); ++i) {
    Request r;
    r.prompt = jobs[i].prompt;
    r.max_tokens = jobs[i].max_tokens;
    r.sampling.temperature = jobs[i].temperature;
    r.sampling.seed = jobs[i].seed;
    r.stop_at_eos = false;
    r.on_token = [&out, i](int32_t t) {
      out[i].push_back(t);
      return true;
    };
    r.on_done = [res, i](const RequestResult& x) { (*res)[i] = x; };
    e.submit(std::move(r));
  }
  e.wait_idle();
  for (auto& r : *res) EXPECT_NE(r.finish_reason, "error") << r.error;
  return out;
}

int64_t bytes_for_blocks(const Model& m, int64_t blocks, int64_t block_size) {
  return flashkit::engine::paged_kv_bytes_per_token(m) * block_size * blocks;
}

struct SpecCase {
  const char* model;
  int spec_tokens;     // 0: adaptive
  int64_t kv_blocks;   // 0: plenty; else a pool small enough to preempt
};

class ServeSpec : public ::testing::TestWithParam<SpecCase> {};

// (1) greedy identity with accepted proposals, (2) rollback: pool all free when idle, (4) preemption while
// speculating (small pool).
TEST_P(ServeSpec, GreedyOutputMatchesGenerateAlone) {
  const SpecCase sc = GetParam();
  auto model = Model::load(kModels + "/" + sc.model, {.dtype = "f32", .threads = 1, .max_context = 256});
  const auto jobs = repetitive_jobs(10, model->info().vocab_size, 5);
  EngineOptions o;
  o.background = false;
  o.block_size = 4;  // small blocks: speculation crosses block boundaries and rolls back over them
  o.max_step_tokens = 64;
  o.max_running = 8;
  o.spec_lookup = 3;
  o.spec_tokens = sc.spec_tokens;
  o.spec_max_batch = 8;  // speculate with several sequences in the batch (the CPU default is 1)
  if (sc.kv_blocks > 0) o.kv_memory = bytes_for_blocks(*model, sc.kv_blocks, o.block_size);
  auto e = Engine::create(model, o);
  std::vector<RequestResult> res;
  const auto got = run_engine(*e, jobs, &res);
  int64_t proposed = 0, accepted = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(got[i], alone(*model, jobs[i])) << "request " << i;
    EXPECT_EQ(res[i].completion_tokens, int64_t(got[i].size()));
    EXPECT_LE(res[i].spec_accepted, res[i].spec_proposed);
    EXPECT_LE(res[i].spec_emitted, res[i].spec_accepted + res[i].spec_steps);
    proposed += res[i].spec_proposed;
    accepted += res[i].spec_accepted;
  }
  EXPECT_GT(proposed, 0);
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, proposed) << "some proposals were meant to be rejected (rollback)";
  const EngineStats st = e->stats();
  EXPECT_EQ(st.spec_proposed, proposed);
  EXPECT_EQ(st.spec_accepted, accepted);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.kv_blocks_free, st.kv_blocks_total);
  if (sc.kv_blocks > 0) EXPECT_GT(st.preemptions, 0) << "the pool was meant to be too small for all requests at once";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ServeSpec,
                         ::testing::Values(SpecCase{"tiny-llama", 4, 0}, SpecCase{"tiny-gemma3", 3, 0},
                                           SpecCase{"tiny-llama", 0, 0}, SpecCase{"tiny-llama", 5, 40},
                                           SpecCase{"tiny-gemma3", 4, 40}),
                         [](const auto& info) {
                           std::string n = info.param.model;
                           for (auto& c : n)
                             if (c == '-') c = '_';
                           return n + "_k" + std::to_string(info.param.spec_tokens) +
                                  (info.param.kv_blocks ? "_preempt" : "");
                         });

// (2) What a speculating request published must be right: a second request whose prompt is the first one's prompt
// and output hits those blocks (output tokens included) and continues exactly as generate does alone.
TEST(ServeSpecCache, PublishedBlocksHoldOnlyAcceptedTokens) {
  auto model = Model::load(kModels + "/tiny-llama", {.dtype = "f32", .threads = 1, .max_context = 256});
  auto e = Engine::create(model, {.block_size = 4, .max_step_tokens = 64, .background = false, .spec_lookup = 2,
                                  .spec_tokens = 6, .spec_max_batch = 8});
  const auto jobs = repetitive_jobs(4, model->info().vocab_size, 13);
  std::vector<RequestResult> res;
  const auto first = run_engine(*e, jobs, &res);
  std::vector<Job> again;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job j = jobs[i];
    j.prompt.insert(j.prompt.end(), first[i].begin(), first[i].end());
    j.max_tokens = 10;
    again.push_back(j);
  }
  const auto second = run_engine(*e, again, &res);
  for (size_t i = 0; i < again.size(); ++i) {
    EXPECT_EQ(second[i], alone(*model, again[i])) << "request " << i;
    // Every full block but the one holding the last prompt token comes from the cache, generated tokens included.
    EXPECT_EQ(res[i].cached_tokens, (int64_t(again[i].prompt.size()) - 1) / 4 * 4) << "request " << i;
  }
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST(ServeSpecOptions, BadValuesNameTheOption) {
  auto model = Model::load(kModels + "/tiny-llama", {.dtype = "f32", .threads = 1, .max_context = 64});
  auto expect_bad = [&](EngineOptions o, const char* what) {
    o.background = false;
    try {
      Engine::create(model, o);
      ADD_FAILURE() << "accepted " << what;
    } catch (const flashkit::Error& err) {
      EXPECT_NE(std::string(err.what()).find(what), std::string::npos) << err.what();
    }
  };
  expect_bad({.spec_lookup = -1}, "spec_lookup");
  expect_bad({.spec_lookup = 65}, "spec_lookup");
  expect_bad({.spec_lookup = 2, .spec_tokens = -1}, "spec_tokens");
  expect_bad({.spec_lookup = 2, .spec_tokens = 65}, "spec_tokens");
  expect_bad({.spec_lookup = 2, .spec_max_tokens = 0}, "spec_max_tokens");
  expect_bad({.spec_lookup = 2, .spec_max_batch = -1}, "spec_max_batch");
  expect_bad({.spec_lookup = 2, .spec_max_batch = 4097}, "spec_max_batch");
}

// ---- (3) the commit rule with temperature > 0, on the scheduler alone with made-up logits ----

// Log-probabilities as logits (a zero probability masks the token).
std::vector<float> logits_of(const std::vector<float>& p) {
  std::vector<float> l;
  for (float x : p) l.push_back(x > 0 ? std::log(x) : -INFINITY);
  return l;
}

double chi2(const std::vector<float>& p, const std::vector<int64_t>& c, int64_t n) {
  double s = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * double(n);
    if (e > 0) s += (double(c[i]) - e) * (double(c[i]) - e) / e;
    else if (c[i] > 0) s += 1e9;
  }
  return s;
}

SchedulerConfig tiny_config(int64_t spec_max_batch) {
  SchedulerConfig cfg;
  cfg.block_size = 4;
  cfg.num_blocks = 16;
  cfg.max_step_tokens = 16;
  cfg.max_running = 4;
  cfg.max_blocks_per_seq = 8;
  cfg.max_context = 32;
  cfg.prefix_caching = false;
  cfg.spec_lookup = 2;
  cfg.spec_tokens = 2;
  cfg.spec_max_batch = spec_max_batch;
  return cfg;
}

std::unique_ptr<Sequence> tiny_sequence(uint64_t id, std::vector<int32_t> tokens, float temperature, uint64_t seed) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->prompt_len = int64_t(tokens.size());
  s->tokens = std::move(tokens);
  s->req.max_tokens = 8;
  flashkit::engine::SamplerParams sp;
  sp.temperature = temperature;
  sp.seed = seed;
  s->sampler = std::make_unique<flashkit::engine::Sampler>(sp);
  s->submitted = Clock::now();
  return s;
}

// Under load K drops to 0: with two sequences decoding and spec_max_batch 1 no proposal is planned; with 2 both
// sequences get theirs. And the engine resolves spec_max_batch 0 by backend (1 on the CPU).
TEST(ServeSpecPlan, SpeculationStopsWhenTooManySequencesDecode) {
  const int64_t V = 6;
  std::vector<float> forced(size_t(2 * V), -INFINITY);
  forced[3] = forced[size_t(V) + 3] = 0;  // both sequences' first token: 3
  for (int64_t max_batch : {1, 2}) {
    Scheduler sched(tiny_config(max_batch));
    sched.add(tiny_sequence(1, {1, 2, 3, 1, 2}, 0, 0));
    sched.add(tiny_sequence(2, {4, 2, 3, 4, 2}, 0, 0));
    StepPlan plan;
    ASSERT_TRUE(sched.schedule(plan));
    ASSERT_EQ(plan.logit_rows.size(), 2u);
    sched.commit(plan, forced.data(), V);
    ASSERT_TRUE(sched.schedule(plan));
    if (max_batch == 1) EXPECT_EQ(plan.tokens, (std::vector<int32_t>{3, 3}));
    else EXPECT_EQ(plan.tokens, (std::vector<int32_t>{3, 1, 2, 3, 4, 2}));
    EXPECT_EQ(plan.logit_rows.size(), plan.tokens.size());
  }
  auto model = Model::load(kModels + "/tiny-llama", {.dtype = "f32", .threads = 1, .max_context = 64});
  EXPECT_EQ(Engine::create(model, {.background = false, .spec_lookup = 2})->options().spec_max_batch, 1);
}

// The sequence 1 2 3 1 2 | 3 (the first step's token forced): the second step proposes "1 2" (the 2-gram "2 3"
// occurred before). Its first token must follow row 0's distribution p0 whatever the proposal (accepted with
// probability p0(1), else drawn from p0 without 1), and after an accepted 1 the next token follows row 1's p1.
TEST(ServeSpecCommit, SamplingKeepsTheTargetDistribution) {
  const std::vector<float> p0 = {0.1f, 0.3f, 0.15f, 0.05f, 0.4f, 0.0f}, p1 = {0.25f, 0.05f, 0.0f, 0.3f, 0.2f, 0.2f},
                           p2 = {0.2f, 0.2f, 0.2f, 0.2f, 0.1f, 0.1f};
  const int64_t V = 6;
  std::vector<float> rows = logits_of(p0);
  for (const auto* p : {&p1, &p2}) {
    const auto l = logits_of(*p);
    rows.insert(rows.end(), l.begin(), l.end());
  }
  std::vector<float> forced(size_t(V), -INFINITY);
  forced[3] = 0;
  const int64_t n = 20000;
  std::vector<int64_t> first(size_t(V), 0), after_accept(size_t(V), 0);
  int64_t accepted_first = 0, steps = 0;
  for (int64_t trial = 0; trial < n; ++trial) {
    Scheduler sched(tiny_config(1));
    auto s = tiny_sequence(1, {1, 2, 3, 1, 2}, 1.0f, uint64_t(trial) + 1);
    std::vector<int32_t> got;
    s->req.on_token = [&got](int32_t t) {
      got.push_back(t);
      return true;
    };
    sched.add(std::move(s));
    StepPlan plan;
    ASSERT_TRUE(sched.schedule(plan));
    ASSERT_EQ(plan.logit_rows.size(), 1u) << "the prompt step proposes nothing";
    sched.commit(plan, forced.data(), V);
    ASSERT_TRUE(sched.schedule(plan));
    ASSERT_EQ(plan.tokens, (std::vector<int32_t>{3, 1, 2})) << "the pending token, then the proposal 1 2";
    ASSERT_EQ(plan.logit_rows.size(), 3u);
    sched.commit(plan, rows.data(), V);
    ASSERT_GE(got.size(), 2u);
    first[size_t(got[1])] += 1;
    if (got[1] == 1) {
      ++accepted_first;
      ASSERT_GE(got.size(), 3u);
      after_accept[size_t(got[2])] += 1;
    }
    ++steps;
  }
  EXPECT_LT(chi2(p0, first, n), 30.0);
  EXPECT_LT(chi2(p1, after_accept, accepted_first), 30.0);
  EXPECT_NEAR(double(accepted_first) / double(n), 0.3, 0.015);
}

}  // namespace
