// Greedy decoding where the logits are (generate()'s device argmax, src/engine/model.cpp): the tokens equal the
// sampler's choice on downloaded logits (FLASHKIT_DEVICE_ARGMAX=0, and a hand-written prefill / decode / Sampler
// loop, the definition), ties follow the sampler's rules (greedy: lowest id; top_k = 1: a seeded draw among the
// tied ids), logits() after device-greedy steps is the row (downloaded on demand), and the backends' argmax op
// follows the sampler's tie and validity rules. On the CPU backend in CI; the CUDA variants skip without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend.hpp"
#include "engine/sampler.hpp"
#include "fixture.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"

namespace fs = std::filesystem;

namespace {

using flashkit::testing::kTestData;
using flashkit::testing::rel_err;
const std::string kModels = kTestData + "/models";

bool have_cuda() {
  if (flashkit::cuda_device_count() <= 0) return false;
  try {
    flashkit::engine::make_cuda_backend({});
    return true;
  } catch (const flashkit::Error& e) {
    if (e.status() == flashkit::Status::unsupported) return false;
    throw;
  }
}

std::vector<int32_t> prompt_of(const std::string& dir) {
  std::ifstream f(dir + "/expected.json");
  return nlohmann::json::parse(f)["prompt_ids"].get<std::vector<int32_t>>();
}

struct Out {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // session.logits() afterwards
};

// generate() on a new session of m (a model loaded with Tuning::device_argmax on or off: without_device_argmax).
Out run_generate(flashkit::Model& m, const std::vector<int32_t>& prompt, const flashkit::GenerateOptions& g) {
  auto s = m.new_session();
  Out o;
  o.tokens = flashkit::generate(*s, prompt, g).tokens;
  o.logits.assign(s->logits().begin(), s->logits().end());
  return o;
}

// The same model loaded with the device argmax off (Tuning::device_argmax; FLASHKIT_DEVICE_ARGMAX=0 at a front end).
std::shared_ptr<flashkit::Model> without_device_argmax(const std::string& dir, flashkit::LoadOptions lo) {
  lo.tuning = flashkit::default_tuning();
  lo.tuning->device_argmax = false;
  return flashkit::Model::load(dir, lo);
}

// The definition: prefill, then the sampler on each downloaded row.
Out run_by_hand(flashkit::Model& m, const std::vector<int32_t>& prompt, const flashkit::GenerateOptions& g) {
  flashkit::engine::SamplerParams sp;
  sp.temperature = g.temperature, sp.top_k = g.top_k, sp.top_p = g.top_p, sp.min_p = g.min_p,
  sp.repetition_penalty = g.repetition_penalty, sp.seed = g.seed;
  flashkit::engine::Sampler sampler(sp);
  auto s = m.new_session();
  std::vector<int32_t> history = prompt;
  s->prefill(prompt);
  Out o;
  int32_t tok = sampler.sample(s->logits(), history);
  while (true) {
    o.tokens.push_back(tok);
    history.push_back(tok);
    if (int64_t(o.tokens.size()) >= g.max_new_tokens) break;
    s->decode(tok);
    tok = sampler.sample(s->logits(), history);
  }
  o.logits.assign(s->logits().begin(), s->logits().end());
  return o;
}

void expect_same(const Out& fast, const Out& ref, bool bitwise, const std::string& what) {
  EXPECT_EQ(fast.tokens, ref.tokens) << what;
  ASSERT_EQ(fast.logits.size(), ref.logits.size()) << what;
  if (bitwise) EXPECT_EQ(fast.logits, ref.logits) << what << ": logits() after generate()";
  else EXPECT_LT(rel_err(fast.logits.data(), ref.logits.data(), int64_t(ref.logits.size())), 1e-6) << what;
}

flashkit::GenerateOptions greedy_opts(int64_t n) {
  flashkit::GenerateOptions g;
  g.max_new_tokens = n;
  g.temperature = 0.0f;
  g.stop_at_eos = false;
  return g;
}

void greedy_matches_sampler(const std::string& device) {
  for (const char* name : {"tiny-llama", "tiny-gemma3", "tiny-llama-bf16", "tiny-gemma3-bf16"}) {
    SCOPED_TRACE(std::string(name) + " on " + device);
    const std::string dir = kModels + "/" + name;
    flashkit::LoadOptions lo;
    lo.device = device;
    auto m = flashkit::Model::load(dir, lo), m_off = without_device_argmax(dir, lo);
    const auto prompt = prompt_of(dir);
    const auto g = greedy_opts(48);
    const Out fast = run_generate(*m, prompt, g), slow = run_generate(*m_off, prompt, g);
    const Out hand = run_by_hand(*m, prompt, g);
    ASSERT_EQ(fast.tokens.size(), 48u);
    // The same backend computes the same logits either way (on CUDA through a different graph of the same kernels).
    expect_same(fast, slow, device == "cpu", "device argmax vs FLASHKIT_DEVICE_ARGMAX=0");
    expect_same(fast, hand, device == "cpu", "device argmax vs prefill/decode/Sampler");
  }
}

}  // namespace

TEST(DeviceGreedy, GenerateMatchesTheSamplerCpu) { greedy_matches_sampler("cpu"); }
TEST(DeviceGreedy, GenerateMatchesTheSamplerCuda) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  greedy_matches_sampler("cuda");
}

namespace {

// tiny-llama with an lm_head that is zero except rows 3 and 200: every logit but two is exactly 0, so a step's
// maximum is unique (one of the two is positive) or a many-way tie at 0 (both negative). Greedy must then pick id 0
// (the lowest), top_k = 1 a seeded draw among the tied ids through the sampler.
struct TiedHeadModel {
  fs::path dir;
  TiedHeadModel() {
    dir = fs::temp_directory_path() / ("flashkit_tied_head_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir);
    for (auto& e : fs::directory_iterator(kModels + "/tiny-llama")) fs::copy_file(e.path(), dir / e.path().filename());
    bool found = false;
    for (auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() != ".safetensors") continue;
      std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
      uint64_t hlen = 0;
      f.read(reinterpret_cast<char*>(&hlen), 8);
      std::string header(size_t(hlen), '\0');
      f.read(header.data(), std::streamsize(hlen));
      const auto h = nlohmann::json::parse(header);
      if (!h.contains("lm_head.weight")) continue;
      const auto& t = h["lm_head.weight"];
      EXPECT_EQ(t["dtype"], "F32");
      const int64_t rows = t["shape"][0], cols = t["shape"][1];
      const int64_t begin = t["data_offsets"][0];
      std::vector<float> w(size_t(rows * cols));
      f.seekg(std::streamoff(8 + hlen + begin));
      f.read(reinterpret_cast<char*>(w.data()), std::streamsize(w.size() * 4));
      for (int64_t r = 0; r < rows; ++r)
        if (r != 3 && r != 200)
          for (int64_t c = 0; c < cols; ++c) w[size_t(r * cols + c)] = 0.0f;
      f.seekp(std::streamoff(8 + hlen + begin));
      f.write(reinterpret_cast<const char*>(w.data()), std::streamsize(w.size() * 4));
      found = true;
    }
    EXPECT_TRUE(found) << "no lm_head.weight in the tiny-llama fixture";
  }
  ~TiedHeadModel() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

void ties_follow_the_sampler(const std::string& device) {
  TiedHeadModel tm;
  flashkit::LoadOptions lo;
  lo.device = device;
  auto m = flashkit::Model::load(tm.dir, lo), m_off = without_device_argmax(tm.dir, lo);
  const auto prompt = prompt_of(kModels + "/tiny-llama");
  const bool bitwise = device == "cpu";
  {
    SCOPED_TRACE("greedy");
    const auto g = greedy_opts(40);
    const Out fast = run_generate(*m, prompt, g);
    expect_same(fast, run_generate(*m_off, prompt, g), bitwise, "vs FLASHKIT_DEVICE_ARGMAX=0");
    expect_same(fast, run_by_hand(*m, prompt, g), bitwise, "vs the sampler");
    int zeros = 0;
    for (int32_t t : fast.tokens) {
      EXPECT_TRUE(t == 0 || t == 3 || t == 200) << t;
      zeros += t == 0;
    }
    std::printf("[tied head, %s] greedy: %d of %zu steps tied\n", device.c_str(), zeros, fast.tokens.size());
    EXPECT_GT(zeros, 0) << "no tie at all: the test lost its point";
  }
  {
    SCOPED_TRACE("top_k 1");
    flashkit::GenerateOptions g = greedy_opts(40);
    g.temperature = 0.7f;
    g.top_k = 1;
    g.seed = 5;
    const Out fast = run_generate(*m, prompt, g);
    expect_same(fast, run_generate(*m_off, prompt, g), bitwise, "vs FLASHKIT_DEVICE_ARGMAX=0");
    expect_same(fast, run_by_hand(*m, prompt, g), bitwise, "vs the sampler");
    int unique = 0, drawn = 0;
    for (int32_t t : fast.tokens) (t == 3 || t == 200 ? unique : drawn) += 1;
    std::printf("[tied head, %s] top_k 1: %d unique maxima, %d draws among ties\n", device.c_str(), unique, drawn);
    EXPECT_GT(unique, 0) << "no unique maximum: the device path was not taken";
    EXPECT_GT(drawn, 1) << "no draws among ties";
  }
}

}  // namespace

TEST(DeviceGreedy, TiesFollowTheSamplerCpu) { ties_follow_the_sampler("cpu"); }
TEST(DeviceGreedy, TiesFollowTheSamplerCuda) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  ties_follow_the_sampler("cuda");
}

// Sampling with temperature (and a repetition penalty with greedy) needs the whole row: those runs are unchanged.
TEST(DeviceGreedy, SamplingAndPenaltiesKeepTheHostPath) {
  const std::string dir = kModels + "/tiny-gemma3-bf16";
  auto m = flashkit::Model::load(dir);
  const auto prompt = prompt_of(dir);
  flashkit::GenerateOptions g = greedy_opts(24);
  g.repetition_penalty = 1.3f;
  expect_same(run_generate(*m, prompt, g), run_by_hand(*m, prompt, g), true, "greedy + repetition penalty");
  g.repetition_penalty = 1.0f;
  g.temperature = 0.9f;
  g.top_k = 40;
  g.seed = 11;
  expect_same(run_generate(*m, prompt, g), run_by_hand(*m, prompt, g), true, "top-k 40 sampling");
}

// A session used by generate() stays a normal session: logits() is the last row, and decode / prefill continue.
TEST(DeviceGreedy, SessionAfterDeviceGreedySteps) {
  const std::string dir = kModels + "/tiny-llama";
  auto m = flashkit::Model::load(dir);
  flashkit::LoadOptions off;  // the same model with the device argmax off (Tuning, per model)
  off.tuning = flashkit::default_tuning();
  off.tuning->device_argmax = false;
  auto m_off = flashkit::Model::load(dir, off);
  const auto prompt = prompt_of(dir);
  auto a = m->new_session(), b = m_off->new_session();
  const auto ra = flashkit::generate(*a, prompt, greedy_opts(10));
  EXPECT_THROW(a->decode(-1), flashkit::Error);  // checked before anything runs: the last row is kept
  const auto rb = flashkit::generate(*b, prompt, greedy_opts(10));
  EXPECT_EQ(ra.tokens, rb.tokens);
  EXPECT_EQ(a->position(), b->position());
  const std::vector<float> la(a->logits().begin(), a->logits().end());
  EXPECT_EQ(la, std::vector<float>(b->logits().begin(), b->logits().end()));
  EXPECT_EQ(la, std::vector<float>(a->logits().begin(), a->logits().end())) << "a second logits() call";
  a->decode(ra.tokens.back());
  b->decode(rb.tokens.back());
  EXPECT_EQ(std::vector<float>(a->logits().begin(), a->logits().end()),
            std::vector<float>(b->logits().begin(), b->logits().end()));
}

// Which steps take the device path: the profile counts the argmax ops (one per decode step of a greedy run, none
// when sampling or with FLASHKIT_DEVICE_ARGMAX=0).
TEST(DeviceGreedy, GreedyStepsRunTheArgmaxOp) {
  const std::string dir = kModels + "/tiny-llama";
  flashkit::LoadOptions lo;
  lo.profile = true;
  auto m = flashkit::Model::load(dir, lo), m_off = without_device_argmax(dir, lo);
  const auto prompt = prompt_of(dir);
  auto count = [&](const flashkit::GenerateOptions& g, bool device) {
    flashkit::Model& model = device ? *m : *m_off;
    model.op_times().clear();
    run_generate(model, prompt, g);
    return std::make_pair(model.op_times().calls["argmax"], model.op_times().calls["logits.download"]);
  };
  auto g = greedy_opts(12);
  EXPECT_EQ(count(g, true), std::make_pair(int64_t(11), int64_t(1)));  // 11 decode steps; the prompt's row
  EXPECT_EQ(count(g, false), std::make_pair(int64_t(0), int64_t(12)));
  g.temperature = 0.5f;
  EXPECT_EQ(count(g, true), std::make_pair(int64_t(0), int64_t(12)));
}

// The CPU backend's argmax op: the sampler's greedy rules, plus the validity and uniqueness flags.
TEST(DeviceGreedy, CpuArgmaxOpRules) {
  using flashkit::engine::ArgmaxResult;
  auto be = flashkit::engine::make_cpu_backend({});
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto run = [&](std::vector<float> v) {
    flashkit::engine::Tensor t = be->alloc(flashkit::DType::f32, 1, int64_t(v.size()));
    be->upload(t, v.data(), v.size() * 4);
    be->argmax(t);
    const ArgmaxResult r = be->argmax_result();
    be->free(t);
    return r;
  };
  auto big = [](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    std::mt19937 g(3);
    std::uniform_real_distribution<float> d(-5, 5);
    for (auto& x : v) x = d(g);
    return v;
  };
  std::vector<float> v = big(262144);
  v[200001] = 9.0f;
  ArgmaxResult r = run(v);
  EXPECT_TRUE(r.valid && r.unique);
  EXPECT_EQ(r.index, 200001);
  v[7] = 9.0f;
  r = run(v);
  EXPECT_EQ(r.index, 7);
  EXPECT_FALSE(r.unique);
  std::vector<float> z(13, -1.0f);
  z[9] = 0.0f, z[4] = -0.0f;  // +0 == -0: one value, the first index wins
  r = run(z);
  EXPECT_EQ(r.index, 4);
  EXPECT_FALSE(r.unique);
  z[2] = nan;
  EXPECT_FALSE(run(z).valid);
  z[2] = inf;
  EXPECT_FALSE(run(z).valid);
  EXPECT_FALSE(run(std::vector<float>(5, -inf)).valid);
  std::vector<float> w(5, -inf);
  w[3] = -1e30f;
  r = run(w);
  EXPECT_TRUE(r.valid && r.unique);
  EXPECT_EQ(r.index, 3);
  r = run({2.0f});
  EXPECT_EQ(r.index, 0);
  // Against the sampler's greedy choice on odd sizes.
  flashkit::engine::Sampler greedy({.temperature = 0.0f});
  for (int64_t n : {1, 3, 5, 4099, 128256}) {
    auto u = big(n);
    u[size_t(n - 1)] = 6.0f;  // the max in the vector tail
    if (n > 3) u[size_t(n / 3)] = 6.0f;
    EXPECT_EQ(run(u).index, greedy.sample(u)) << n;
  }
}

// ---- the model's cache and activation dtypes on the CPU (the CUDA choices are in test_cuda_model.cpp)
TEST(DeviceGreedy, CpuKeepsF32CacheAndActivations) {
  for (const char* dt : {"auto", "bf16", "f32"}) {
    flashkit::LoadOptions lo;
    lo.dtype = dt;
    auto m = flashkit::Model::load(kModels + "/tiny-gemma3-bf16", lo);
    EXPECT_EQ(m->info().kv_dtype, "f32") << dt;
    EXPECT_EQ(m->info().activation_dtype, "f32") << dt;
  }
}

// CUDA: a session that mixes logits decode steps (one graph), device-greedy steps (another graph) and one-row
// all-logits prefills must give, step for step, what the same calls give with graphs off.
TEST(DeviceGreedy, CudaDecodeAndGreedyGraphsStaySeparate) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  const std::string dir = kModels + "/tiny-gemma3-bf16";
  const auto prompt = prompt_of(dir);
  auto run = [&](const char* graphs) {
    flashkit::LoadOptions lo;
    lo.device = "cuda";
    lo.tuning = flashkit::default_tuning();
    lo.tuning->cuda_graphs = std::string(graphs) != "0";
    auto m = flashkit::Model::load(dir, lo);
    auto s = m->new_session();
    std::vector<std::vector<float>> rows;
    std::vector<int32_t> toks;
    s->prefill(prompt);
    int32_t t = 5;
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 3; ++i) {
        s->decode(t);
        rows.emplace_back(s->logits().begin(), s->logits().end());
        t = int32_t((t * 7 + 3) % 512);
      }
      const auto r = flashkit::generate(*s, std::vector<int32_t>{t}, greedy_opts(6));
      toks.insert(toks.end(), r.tokens.begin(), r.tokens.end());
      rows.emplace_back(s->logits().begin(), s->logits().end());
      s->prefill(std::vector<int32_t>{r.tokens.back()}, /*all_logits=*/true);
      rows.emplace_back(s->all_logits().begin(), s->all_logits().end());
    }
    return std::make_pair(toks, rows);
  };
  const auto g = run("1"), e = run("0");
  EXPECT_EQ(g.first, e.first);
  ASSERT_EQ(g.second.size(), e.second.size());
  for (size_t i = 0; i < g.second.size(); ++i)
    EXPECT_LT(rel_err(g.second[i].data(), e.second[i].data(), int64_t(e.second[i].size())), 1e-5) << "row " << i;
}
