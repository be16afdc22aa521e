// serve::Engine on a model without a KV cache (a tiny random Mamba checkpoint): each running request has an engine
// Session of its own (serve/session_core.hpp). Concurrent requests must get exactly what flashkit::generate gives
// each alone; max_running bounds the sessions, a cancelled request frees its slot; no KV blocks, no prefix cache.
// ServeMambaCuda runs the same on the CUDA backend (interleaved sessions, each with its CUDA-graph decode steps);
// it skips without a CUDA device (CI has none; tools/gpu/mambaserve.sh runs it on the H200).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "engine/paged.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/runtime.hpp"
#include "flashkit/serve.hpp"
#include "mamba_checkpoint.hpp"

namespace {

namespace fs = std::filesystem;
using flashkit::Model;
using namespace flashkit::serve;

constexpr int64_t kVocab = 60;

// A random MambaForCausalLM checkpoint with Hugging Face tensor names, written once per process.
fs::path tiny_mamba_dir() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("flashkit_serve_mamba_" + std::to_string(::getpid()));
    fk_test::TinyMamba m;
    m.vocab = kVocab, m.hidden = 32, m.d_state = 4, m.layers = 2, m.conv = 4, m.dt_rank = 2, m.seed = 11;
    m.extra_config = ", \"eos_token_id\": 0";
    fk_test::write_tiny_mamba(d, m);
    return d;
  }();
  return dir;
}

std::shared_ptr<Model> load_mamba() {
  return Model::load(tiny_mamba_dir(), {.dtype = "f32", .threads = 1, .max_context = 256});
}

struct Job {
  std::vector<int32_t> prompt;
  int64_t max_tokens;
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

std::vector<Job> make_jobs() {
  std::mt19937 rng(5);
  const int64_t lens[] = {1, 9, 40, 3, 17, 70, 2};
  std::vector<Job> jobs;
  for (size_t i = 0; i < std::size(lens); ++i) {
    Job j;
    for (int64_t t = 0; t < lens[i]; ++t) j.prompt.push_back(int32_t(rng() % kVocab));
    j.max_tokens = 3 + int64_t(i * 5 % 13);
    jobs.push_back(j);
  }
  jobs[4].temperature = 0.8f;  // one sampled request: the same sampler stream over the same logits
  jobs[4].seed = 42;
  return jobs;
}

// Submits all jobs (half of them after a few steps when stepping by hand) and waits until every one is done.
std::vector<std::vector<int32_t>> run_engine(Engine& e, const std::vector<Job>& jobs, bool by_hand) {
  std::vector<std::vector<int32_t>> out(jobs.size());
  std::vector<RequestResult> res(jobs.size());
  auto submit = [&](size_t i) {
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
    r.on_done = [&res, i](const RequestResult& x) { res[i] = x; };
    e.submit(std::move(r));
  };
  const size_t half = by_hand ? jobs.size() / 2 : jobs.size();
  for (size_t i = 0; i < half; ++i) submit(i);
  if (by_hand) {
    for (int k = 0; k < 2; ++k) e.step();
    EXPECT_LE(e.stats().running, e.options().max_running);
  }
  for (size_t i = half; i < jobs.size(); ++i) submit(i);
  e.wait_idle();
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(res[i].finish_reason, "length") << i << ": " << res[i].error;
    EXPECT_EQ(res[i].completion_tokens, jobs[i].max_tokens) << i;
    EXPECT_EQ(res[i].prompt_tokens, int64_t(jobs[i].prompt.size())) << i;
  }
  return out;
}

TEST(ServeMamba, ConcurrentRequestsMatchGenerateAlone) {
  auto model = load_mamba();
  ASSERT_FALSE(flashkit::engine::has_kv_cache(*model));
  const std::vector<Job> jobs = make_jobs();
  std::vector<std::vector<int32_t>> want;
  for (const Job& j : jobs) want.push_back(alone(*model, j));
  for (bool by_hand : {true, false}) {
    // max_running 3 < 7 requests: the rest queue and are admitted as slots free up.
    auto e = Engine::create(model, {.max_running = 3, .background = !by_hand});
    EXPECT_EQ(e->options().kv_memory, 0);
    EXPECT_FALSE(e->options().prefix_caching);
    const auto got = run_engine(*e, jobs, by_hand);
    for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(got[i], want[i]) << "request " << i << " by_hand " << by_hand;
    const EngineStats st = e->stats();
    EXPECT_EQ(st.kv_blocks_total, 0);
    EXPECT_EQ(st.kv_blocks_used, 0);
    EXPECT_EQ(st.prefix_hit_blocks + st.prefix_miss_blocks, 0);
    EXPECT_EQ(st.requests_finished, int64_t(jobs.size()));
    EXPECT_EQ(st.running + st.waiting, 0);
    int64_t prompt = 0, gen = 0;
    for (const Job& j : jobs) prompt += int64_t(j.prompt.size()), gen += j.max_tokens;
    EXPECT_EQ(st.prompt_tokens, prompt);
    EXPECT_EQ(st.generation_tokens, gen);
    EXPECT_EQ(flashkit::serve::default_kv_memory(*model, e->options()), 0);
  }
}

TEST(ServeMamba, CancelFreesItsSlotAndStopsEndRequests) {
  auto model = load_mamba();
  auto e = Engine::create(model, {.max_running = 1, .background = false});
  std::string reason_a, reason_b;
  Request a;
  a.prompt = {4, 5, 6};
  a.max_tokens = 200;
  a.stop_at_eos = false;
  a.on_done = [&](const RequestResult& x) { reason_a = x.finish_reason; };
  const uint64_t id_a = e->submit(std::move(a));
  const Job jb{{7, 8, 9, 10}, 6};
  std::vector<int32_t> got_b;
  Request b;
  b.prompt = jb.prompt;
  b.max_tokens = jb.max_tokens;
  b.sampling.temperature = 0;  // greedy (a Request samples at temperature 1 by default)
  b.stop_at_eos = false;
  b.on_token = [&](int32_t t) {
    got_b.push_back(t);
    return true;
  };
  b.on_done = [&](const RequestResult& x) { reason_b = x.finish_reason; };
  e->submit(std::move(b));
  for (int i = 0; i < 4; ++i) e->step();
  EXPECT_EQ(e->stats().running, 1);  // a holds the only slot
  EXPECT_EQ(e->stats().waiting, 1);
  EXPECT_TRUE(got_b.empty());
  e->cancel(id_a);
  e->step();  // a ends; b is admitted into the freed slot
  EXPECT_EQ(reason_a, "cancelled");
  EXPECT_EQ(e->stats().requests_cancelled, 1);
  EXPECT_EQ(e->stats().waiting, 0);
  e->wait_idle();
  EXPECT_EQ(reason_b, "length");
  EXPECT_EQ(got_b, alone(*model, jb));

  // A stop id ends a request with "stop" (the id is passed on); so does on_token returning false.
  Request c;
  c.prompt = jb.prompt;
  c.max_tokens = 50;
  c.sampling.temperature = 0;
  c.stop_at_eos = false;
  c.stop_ids = {got_b[1]};
  std::vector<int32_t> got_c;
  std::string reason_c;
  c.on_token = [&](int32_t t) {
    got_c.push_back(t);
    return true;
  };
  c.on_done = [&](const RequestResult& x) { reason_c = x.finish_reason; };
  e->submit(std::move(c));
  e->wait_idle();
  EXPECT_EQ(reason_c, "stop");
  ASSERT_FALSE(got_c.empty());
  EXPECT_EQ(got_c.back(), got_b[1]);
  EXPECT_LE(got_c.size(), 2u);
  Request d;
  d.prompt = {1};
  d.max_tokens = 50;
  int64_t k = 0;
  d.on_token = [&](int32_t) { return ++k < 3; };
  std::string reason_d;
  d.on_done = [&](const RequestResult& x) { reason_d = x.finish_reason; };
  d.stop_at_eos = false;
  e->submit(std::move(d));
  e->wait_idle();
  EXPECT_EQ(reason_d, "stop");
  EXPECT_EQ(k, 3);
}

TEST(ServeMamba, ContextFullEndsWithLengthAndBadRequestsAreRefused) {
  auto model = Model::load(tiny_mamba_dir(), {.dtype = "f32", .threads = 1, .max_context = 8});
  auto e = Engine::create(model, {.background = false});
  Request r;
  r.prompt = {1, 2, 3, 4, 5, 6};
  r.max_tokens = 100;
  r.stop_at_eos = false;
  RequestResult res;
  r.on_done = [&](const RequestResult& x) { res = x; };
  e->submit(std::move(r));
  e->wait_idle();
  EXPECT_EQ(res.finish_reason, "length") << res.error;
  EXPECT_EQ(res.completion_tokens, 3);  // one from the prompt, one each from positions 6 and 7: the context is full
  Request bad;
  bad.prompt = std::vector<int32_t>(9, 1);
  EXPECT_THROW(e->submit(std::move(bad)), flashkit::Error);
  Request oov;
  oov.prompt = {int32_t(kVocab)};
  EXPECT_THROW(e->submit(std::move(oov)), flashkit::Error);
}

// n-gram speculation needs a KV cache to roll back (the paged path): a Mamba model refuses it, naming the option.
TEST(ServeMamba, SpeculationIsRefusedClearly) {
  auto model = load_mamba();
  try {
    Engine::create(model, {.background = false, .spec_lookup = 3});
    ADD_FAILURE() << "spec_lookup accepted for a model without a KV cache";
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("spec_lookup"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("KV cache"), std::string::npos) << e.what();
  }
}

TEST(ServeMambaCuda, ConcurrentGreedyRequestsMatchGenerateAlone) {
  if (flashkit::cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  auto model = Model::load(tiny_mamba_dir(), {.device = "cuda", .dtype = "f32", .max_context = 256});
  std::vector<Job> jobs = make_jobs();
  for (Job& j : jobs) j.temperature = 0;  // greedy: generate's device argmax and the engine's sampler agree
  std::vector<std::vector<int32_t>> want;
  for (const Job& j : jobs) want.push_back(alone(*model, j));
  for (bool by_hand : {true, false}) {
    auto e = Engine::create(model, {.max_running = 3, .background = !by_hand});
    const auto got = run_engine(*e, jobs, by_hand);
    for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(got[i], want[i]) << "request " << i << " by_hand " << by_hand;
    EXPECT_EQ(e->stats().kv_blocks_total, 0);
  }
}

}  // namespace
