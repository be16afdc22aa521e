// The Model / Session thread contract (include/flashkit/engine.hpp, "Threads"): several threads generating on their
// own sessions of one Model get exactly what each gets alone; dropping the Model while sessions run is safe; a
// session that cannot fit in memory is refused before anything is allocated; thread counts are bounded.
#include "flashkit/tuning.hpp"
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "fixture.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"

namespace {

using flashkit::testing::kTestData;

const std::string kLlama = kTestData + "/models/tiny-llama";

flashkit::LoadOptions f32() {
  flashkit::LoadOptions o;
  o.dtype = "f32";
  return o;
}

std::vector<int32_t> greedy(flashkit::Session& s, std::vector<int32_t> prompt, int64_t n) {
  flashkit::GenerateOptions g;
  g.max_new_tokens = n;
  g.stop_at_eos = false;
  return flashkit::generate(s, prompt, g).tokens;
}

}  // namespace

TEST(EngineThreads, SessionsOfOneModelOnSeveralThreads) {
  auto model = flashkit::Model::load(kLlama, f32());
  constexpr int kThreads = 6;
  std::vector<std::vector<int32_t>> prompts, alone(kThreads), got(kThreads);
  for (int t = 0; t < kThreads; ++t) prompts.push_back({1, 17 + t, 40, 3 * t + 2, 9});
  for (int t = 0; t < kThreads; ++t) {
    auto s = model->new_session();
    alone[size_t(t)] = greedy(*s, prompts[size_t(t)], 12);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {  // sessions created, used and destroyed concurrently
        auto s = model->new_session();
        got[size_t(t)] = greedy(*s, prompts[size_t(t)], 12);
        if (got[size_t(t)] != alone[size_t(t)]) return;
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(got[size_t(t)], alone[size_t(t)]) << "thread " << t;
}

TEST(EngineThreads, DroppingTheModelWhileSessionsRunIsSafe) {
  auto model = flashkit::Model::load(kLlama, f32());
  auto s1 = model->new_session();
  auto s2 = model->new_session();
  const std::vector<int32_t> want = greedy(*s1, {1, 2, 3}, 8);
  s1->reset();
  std::vector<int32_t> a, b;
  std::thread t1([&] { a = greedy(*s1, {1, 2, 3}, 8); });
  std::thread t2([&] { b = greedy(*s2, {1, 2, 3}, 8); });
  model.reset();  // the last outside reference: the sessions keep the weights and backend alive
  t1.join();
  t2.join();
  EXPECT_EQ(a, want);
  EXPECT_EQ(b, want);
}

TEST(EngineThreads, ThreadCountsAreBounded) {
  flashkit::LoadOptions o = f32();
  o.threads = 100000;  // once a SIGSEGV inside the OpenMP runtime
  try {
    flashkit::Model::load(kLlama, o);
    ADD_FAILURE() << "threads = 100000 was accepted";
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("threads: expected 0 (the default) or 1.." +
                                         std::to_string(flashkit::max_threads())),
              std::string::npos)
        << e.what();
  }
  EXPECT_LE(flashkit::max_threads(), 1024);
  EXPECT_GE(flashkit::max_threads(), 1);
}

TEST(EngineThreads, SessionMemoryIsCheckedBeforeAllocating) {
  flashkit::LoadOptions o = f32();
  o.max_context = 4096;
  flashkit::Tuning t = flashkit::default_tuning();
  t.max_workspace_bytes = 1000000;  // 1 MB: less than tiny-llama's 4096-token KV cache
  o.tuning = t;
  try {
    flashkit::Model::load(kLlama, o);
    ADD_FAILURE() << "a session beyond the memory limit was accepted";
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("max_context"), std::string::npos) << e.what();
  }
  o.tuning.reset();
  EXPECT_NO_THROW(flashkit::Model::load(kLlama, o));
}
