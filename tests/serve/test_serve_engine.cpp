// serve::Engine on the tiny transformers fixtures: continuous batching with chunked prompts, preemption and prefix
// caching must give every request the tokens flashkit::generate gives it on a session of its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "engine/paged.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/serve.hpp"
#include "serve/block_pool.hpp"

namespace {

namespace fs = std::filesystem;
using flashkit::Model;
using namespace flashkit::serve;

const std::string kModels = std::string(FLASHKIT_TEST_DATA) + "/models";

struct Job {
  std::vector<int32_t> prompt;
  int64_t max_tokens;
  float temperature = 0;
  uint64_t seed = 0;
};

std::vector<int32_t> alone(Model& m, const Job& j, bool stop_at_eos) {
  auto s = m.new_session();
  flashkit::GenerateOptions g;
  g.max_new_tokens = j.max_tokens;
  g.temperature = j.temperature;
  g.seed = j.seed;
  g.stop_at_eos = stop_at_eos;
  return flashkit::generate(*s, j.prompt, g).tokens;
}

std::vector<Job> make_jobs(int n, int64_t vocab, unsigned seed, const std::vector<int32_t>& shared_prefix = {}) {
  std::mt19937 rng(seed);
  const int64_t lens[] = {1, 3, 16, 17, 40, 70, 5, 129, 31, 2, 64, 90};
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    Job j;
    j.prompt = shared_prefix;
    const int64_t L = lens[i % 12];
    for (int64_t t = 0; t < L; ++t) j.prompt.push_back(int32_t(rng() % uint32_t(vocab)));
    j.max_tokens = 4 + (i * 7) % 29;
    jobs.push_back(j);
  }
  return jobs;
}

// Submits the jobs (the second half after a few steps, while the first half runs) and steps until done.
std::vector<std::vector<int32_t>> run_engine(Engine& e, const std::vector<Job>& jobs, bool stop_at_eos,
                                             std::vector<RequestResult>* results = nullptr) {
  std::vector<std::vector<int32_t>> out(jobs.size());
  std::vector<RequestResult> res(jobs.size());
  auto submit = [&](size_t i) {
    Request r;
    r.prompt = jobs[i].prompt;
    r.max_tokens = jobs[i].max_tokens;
    r.sampling.temperature = jobs[i].temperature;
    r.sampling.seed = jobs[i].seed;
    r.stop_at_eos = stop_at_eos;
    r.on_token = [&out, i](int32_t t) {
      out[i].push_back(t);
      return true;
    };
    r.on_done = [&res, i](const RequestResult& x) { res[i] = x; };
    e.submit(std::move(r));
  };
  const size_t half = jobs.size() / 2;
  for (size_t i = 0; i < half; ++i) submit(i);
  for (int k = 0; k < 3; ++k) e.step();
  for (size_t i = half; i < jobs.size(); ++i) submit(i);
  e.wait_idle();
  for (auto& r : res) EXPECT_NE(r.finish_reason, "error") << r.error;
  if (results) *results = res;
  return out;
}

int64_t bytes_for_blocks(const Model& m, int64_t blocks, int64_t block_size) {
  return flashkit::engine::paged_kv_bytes_per_token(m) * block_size * blocks;
}

struct ModelCase {
  const char* name;
  bool stop_at_eos;
  int64_t block_size;
};

class ServeIdentity : public ::testing::TestWithParam<ModelCase> {};

// Many requests of different lengths at once, prompts longer than the step budget (chunked), a KV pool too small for
// all of them (preemption by recomputation), and two sampled requests: each gets the tokens it gets alone.
TEST_P(ServeIdentity, ConcurrentRequestsMatchGenerateAlone) {
  const ModelCase mc = GetParam();
  auto model = Model::load(kModels + "/" + mc.name, {.dtype = "f32", .threads = 1, .max_context = 512});
  auto jobs = make_jobs(12, model->info().vocab_size, 7);
  jobs[3].temperature = 0.8f, jobs[3].seed = 11;
  jobs[8].temperature = 1.0f, jobs[8].seed = 5;
  EngineOptions o;
  o.background = false;
  o.block_size = mc.block_size;
  o.max_step_tokens = 48;
  o.max_running = 8;
  o.kv_memory = bytes_for_blocks(*model, 192 / mc.block_size + 2, mc.block_size);  // ~ one long request and a bit
  auto e = Engine::create(model, o);
  std::vector<RequestResult> res;
  const auto got = run_engine(*e, jobs, mc.stop_at_eos, &res);
  for (size_t i = 0; i < jobs.size(); ++i)
    EXPECT_EQ(got[i], alone(*model, jobs[i], mc.stop_at_eos)) << "request " << i << " prompt " << jobs[i].prompt.size();
  const EngineStats st = e->stats();
  EXPECT_GT(st.preemptions, 0) << "the pool was meant to be too small for all requests at once";
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.running + st.waiting, 0);
  EXPECT_EQ(st.requests_finished, int64_t(jobs.size()));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ServeIdentity,
                         ::testing::Values(ModelCase{"tiny-llama", false, 16}, ModelCase{"tiny-gemma3", false, 16},
                                           ModelCase{"tiny-gemma3", true, 5}, ModelCase{"tiny-llama", true, 7}),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n + "_bs" + std::to_string(info.param.block_size) + (info.param.stop_at_eos ? "_eos" : "");
                         });

// The background thread: requests submitted from several threads at once.
TEST(ServeEngine, BackgroundThreadAndConcurrentSubmitters) {
  auto model = Model::load(kModels + "/tiny-llama", {.dtype = "f32", .threads = 1, .max_context = 256});
  const auto jobs = make_jobs(16, model->info().vocab_size, 3);
  auto e = Engine::create(model, {.max_step_tokens = 64, .max_running = 6});
  std::vector<std::vector<int32_t>> out(jobs.size());
  std::vector<std::string> reason(jobs.size());
  std::vector<std::thread> th;
  for (size_t i = 0; i < jobs.size(); ++i)
    th.emplace_back([&, i] {
      Request r;
      r.prompt = jobs[i].prompt;
      r.max_tokens = jobs[i].max_tokens;
      r.sampling.temperature = 0;
      r.stop_at_eos = false;
      r.on_token = [&out, i](int32_t t) {
        out[i].push_back(t);
        return true;
      };
      r.on_done = [&reason, i](const RequestResult& x) { reason[i] = x.finish_reason; };
      e->submit(std::move(r));
    });
  for (auto& t : th) t.join();
  e->wait_idle();
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(reason[i], "length");
    EXPECT_EQ(out[i], alone(*model, jobs[i], false)) << "request " << i;
  }
}

// Shared prefixes: later requests take the earlier ones' full blocks from the cache (hits counted, cached_tokens
// reported) and still produce their solo tokens; a multi-turn follow-up reuses the previous turn's blocks.
TEST(ServeEngine, PrefixCacheHitsGiveIdenticalOutput) {
  auto model = Model::load(kModels + "/tiny-gemma3", {.dtype = "f32", .threads = 1, .max_context = 512});
  std::mt19937 rng(5);
  std::vector<int32_t> prefix(53);
  for (auto& t : prefix) t = int32_t(rng() % 512);
  const auto jobs = make_jobs(6, 512, 9, prefix);
  auto e = Engine::create(model, {.block_size = 16, .max_step_tokens = 64, .background = false});
  std::vector<RequestResult> res;
  // First one alone (fills the cache), then the rest.
  auto got0 = run_engine(*e, {jobs[0]}, false, &res);
  EXPECT_EQ(res[0].cached_tokens, 0);
  const int64_t hits0 = e->stats().prefix_hit_blocks;
  auto got = run_engine(*e, std::vector<Job>(jobs.begin() + 1, jobs.end()), false, &res);
  EXPECT_EQ(got0[0], alone(*model, jobs[0], false));
  for (size_t i = 1; i < jobs.size(); ++i) {
    EXPECT_EQ(got[i - 1], alone(*model, jobs[i], false)) << "request " << i;
    EXPECT_EQ(res[i - 1].cached_tokens, 48) << "three full blocks of the 53-token prefix";
  }
  EXPECT_GE(e->stats().prefix_hit_blocks - hits0, 3 * 5);
  EXPECT_GT(e->stats().prefix_miss_blocks, 0);

  // Multi-turn: the follow-up prompt is the first turn (prompt + reply) plus more tokens.
  Job turn2 = jobs[0];
  turn2.prompt.insert(turn2.prompt.end(), got0[0].begin(), got0[0].end());
  for (int i = 0; i < 9; ++i) turn2.prompt.push_back(int32_t(rng() % 512));
  auto got2 = run_engine(*e, {turn2}, false, &res);
  EXPECT_EQ(res[0].cached_tokens, (int64_t(jobs[0].prompt.size() + got0[0].size()) - 1) / 16 * 16);
  EXPECT_EQ(got2[0], alone(*model, turn2, false));

  // After a reset nothing is found.
  e->reset_prefix_cache();
  auto again = run_engine(*e, {jobs[1]}, false, &res);
  EXPECT_EQ(res[0].cached_tokens, 0);
  EXPECT_EQ(again[0], got[0]);
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST(ServeEngine, PrefixCachingOffFindsNothing) {
  auto model = Model::load(kModels + "/tiny-llama", {.dtype = "f32", .threads = 1, .max_context = 256});
  auto jobs = make_jobs(2, 512, 1);
  jobs[1] = jobs[0];
  auto e = Engine::create(model, {.prefix_caching = false, .background = false});
  std::vector<RequestResult> res;
  run_engine(*e, jobs, false, &res);
  EXPECT_EQ(res[1].cached_tokens, 0);
  EXPECT_EQ(e->stats().prefix_hit_blocks, 0);
}

// Cancelling a running request ends it with "cancelled" and gives its blocks back.
TEST(ServeEngine, CancelFreesBlocks) {
  auto model = Model::load(kModels + "/tiny-llama", {.dtype = "f32", .threads = 1, .max_context = 256});
  auto e = Engine::create(model, {.prefix_caching = false, .background = false});
  std::string reason;
  int64_t n = 0;
  Request r;
  r.prompt = std::vector<int32_t>(40, 7);
  r.max_tokens = 200;
  r.stop_at_eos = false;
  r.on_token = [&](int32_t) { return ++n < 1000; };
  r.on_done = [&](const RequestResult& x) { reason = x.finish_reason; };
  const uint64_t id = e->submit(std::move(r));
  for (int i = 0; i < 5; ++i) e->step();
  EXPECT_GT(e->stats().kv_blocks_used, 0);
  e->cancel(id);
  e->step();
  EXPECT_EQ(reason, "cancelled");
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
  EXPECT_EQ(e->stats().requests_cancelled, 1);
  // on_token returning false ends a request with "stop".
  Request s;
  s.prompt = {1, 2, 3};
  s.max_tokens = 50;
  s.stop_at_eos = false;
  int64_t k = 0;
  s.on_token = [&](int32_t) { return ++k < 3; };
  s.on_done = [&](const RequestResult& x) { reason = x.finish_reason; };
  e->submit(std::move(s));
  e->wait_idle();
  EXPECT_EQ(reason, "stop");
  EXPECT_EQ(k, 3);
}

TEST(ServeEngine, BadRequestsAreRejectedWithTheirField) {
  auto model = Model::load(kModels + "/tiny-llama", {.dtype = "f32", .threads = 1, .max_context = 128});
  auto e = Engine::create(model, {.kv_memory = bytes_for_blocks(*model, 4, 16), .background = false});
  auto expect_bad = [&](Request r, const std::string& what) {
    try {
      e->submit(std::move(r));
      ADD_FAILURE() << "accepted: " << what;
    } catch (const flashkit::Error& err) {
      EXPECT_EQ(err.status(), flashkit::Status::invalid_argument);
      EXPECT_NE(std::string(err.what()).find(what), std::string::npos) << err.what();
    }
  };
  Request r;
  expect_bad(r, "prompt: empty");
  r.prompt = {1, 512};
  expect_bad(r, "outside the vocabulary");
  r.prompt = {1, 2};
  r.max_tokens = 0;
  expect_bad(r, "max_tokens");
  r.max_tokens = 4;
  r.sampling.top_p = 0;
  expect_bad(r, "top_p");
  r.sampling.top_p = 1;
  r.prompt.assign(129, 3);
  expect_bad(r, "context");
  r.prompt.assign(60, 3);
  r.max_tokens = 10;
  expect_bad(r, "KV blocks");
  EXPECT_THROW(Engine::create(model, {.block_size = 0}), flashkit::Error);
  EXPECT_THROW(Engine::create(model, {.kv_memory = 10}), flashkit::Error);
}

// ---- prefix-cache invalidation: what is in the key ----

TEST(PrefixCache, KeysIncludeTheModelIdentity) {
  BlockPool pool(8, 4, /*salt=*/111);
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  int32_t a = pool.allocate(), b = pool.allocate();
  const uint64_t ka = pool.publish(a, 0, std::span(toks).subspan(0, 4));
  pool.publish(b, ka, std::span(toks).subspan(4, 4));
  pool.release(a);
  pool.release(b);
  std::vector<uint64_t> keys;
  auto hit = pool.match(toks, 2, &keys);
  EXPECT_EQ(hit, (std::vector<int32_t>{a, b}));
  for (int32_t x : hit) pool.release(x);
  EXPECT_EQ(pool.stats().hit_blocks, 2);
  // Another model (salt): nothing, and the old entries are gone for good.
  pool.set_salt(222);
  EXPECT_TRUE(pool.match(toks, 2, nullptr).empty());
  pool.set_salt(111);
  EXPECT_TRUE(pool.match(toks, 2, nullptr).empty());
  EXPECT_EQ(pool.stats().miss_blocks, 4);  // two lookups, two blocks missed each
  EXPECT_EQ(pool.stats().free, 8);
}

TEST(PrefixCache, SameTokensAfterADifferentPrefixMiss) {
  BlockPool pool(8, 2, 5);
  const std::vector<int32_t> x = {1, 2, 3, 4}, y = {9, 9, 3, 4};
  int32_t a = pool.allocate(), b = pool.allocate();
  const uint64_t ka = pool.publish(a, 0, std::span(x).subspan(0, 2));
  pool.publish(b, ka, std::span(x).subspan(2, 2));
  EXPECT_TRUE(pool.match(y, 2, nullptr).empty());  // block 2 is the same tokens, but its prefix differs
  EXPECT_EQ(pool.match(x, 2, nullptr).size(), 2u);
}

TEST(PrefixCache, RefcountsAndLruEviction) {
  BlockPool pool(3, 2, 1);
  const std::vector<int32_t> t1 = {1, 1}, t2 = {2, 2}, t3 = {3, 3};
  int32_t a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  EXPECT_EQ(pool.allocate(), -1);
  pool.publish(a, 0, t1);
  pool.publish(b, 0, t2);
  pool.publish(c, 0, t3);
  pool.retain(b);  // shared by two sequences
  pool.release(a);
  pool.release(b);
  pool.release(c);
  EXPECT_EQ(pool.available(), 2);  // a, c evictable; b still referenced
  auto m = pool.match(t3, 1, nullptr);  // touching c makes a the least recently used
  ASSERT_EQ(m.size(), 1u);
  pool.release(c);
  EXPECT_EQ(pool.allocate(), a);  // evicts a
  EXPECT_TRUE(pool.match(t1, 1, nullptr).empty());
  EXPECT_EQ(pool.stats().evictions, 1);
  pool.release(b);
  EXPECT_EQ(pool.match(t2, 1, nullptr).size(), 1u);
  pool.release(a);  // the reference the allocate above handed out
  EXPECT_THROW(pool.release(a), flashkit::Error) << "a second release of a free block";
}

// The identity changes with the weights dtype, the checkpoint files (a touched file) and random-weight seeds.
TEST(PrefixCache, ModelIdentityTracksWhatChangesBlocks) {
  const fs::path dir = fs::temp_directory_path() / ("fk_serve_ident_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (auto& f : fs::directory_iterator(kModels + "/tiny-llama")) fs::copy_file(f.path(), dir / f.path().filename());
  auto m1 = Model::load(dir, {.dtype = "f32", .threads = 1});
  auto m1b = Model::load(dir, {.dtype = "f32", .threads = 1});
  auto m2 = Model::load(dir, {.dtype = "bf16", .threads = 1});
  const std::string i1 = flashkit::engine::model_identity(*m1);
  EXPECT_EQ(i1, flashkit::engine::model_identity(*m1b));
  EXPECT_NE(i1, flashkit::engine::model_identity(*m2));
  const fs::path shard = dir / "model-00002-of-00003.safetensors";
  fs::last_write_time(shard, fs::last_write_time(shard) + std::chrono::seconds(5));
  auto m3 = Model::load(dir, {.dtype = "f32", .threads = 1});
  EXPECT_NE(i1, flashkit::engine::model_identity(*m3));
  auto r1 = Model::load(kModels + "/tiny-llama", {.random_weights = true, .random_seed = 1});
  auto r2 = Model::load(kModels + "/tiny-llama", {.random_weights = true, .random_seed = 2});
  EXPECT_NE(flashkit::engine::model_identity(*r1), flashkit::engine::model_identity(*r2));
  fs::remove_all(dir);
}

}  // namespace

namespace {
// stats() after wait_idle() (background thread) must include the requests that just finished: the engine counts a
// request off only after the step that finished it has published its statistics (it used to count it off inside the
// step, so wait_idle could return before the last request showed up as finished).
TEST(ServeEngine, StatsAreCurrentWhenWaitIdleReturns) {
  auto model = flashkit::Model::load(kModels + "/tiny-llama", {.dtype = "f32", .threads = 1, .max_context = 64});
  auto e = Engine::create(model, {.max_step_tokens = 32, .max_running = 2});
  for (int i = 1; i <= 200; ++i) {
    Request r;
    r.prompt = {1, 2, 3};
    r.max_tokens = 1;
    e->submit(std::move(r));
    e->wait_idle();
    const EngineStats st = e->stats();
    ASSERT_EQ(st.requests_finished, i);
    ASSERT_EQ(st.running + st.waiting, 0);
  }
}
}  // namespace
