// Tensor parallelism with ranks in processes (engine/tp_remote.cpp): rank 0's leader model broadcasts every Session /
// PagedRunner call, the other ranks replay it (follow_tp_leader). The protocol does not care which communicator
// carries it, so these CPU tests run the ranks as threads over the "threads" communicator, exactly as processes over
// NCCL would run them: same rank models, same calls, same collectives in the same order. They must give bitwise the
// thread-rank model's logits (tp_model.cpp drives the same rank models), and at world size 1 ("single") bitwise the
// plain model's. Also: the choice between threads and processes (tp_uses_processes) as a pure function.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dist/comm.hpp"
#include "engine/paged.hpp"
#include "engine/tp.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/serve.hpp"

namespace {

namespace fs = std::filesystem;
namespace dist = flashkit::dist;
namespace engine = flashkit::engine;

const fs::path kRoot = FLASHKIT_SOURCE_DIR;
const fs::path kTiny = kRoot / "tests" / "data" / "models" / "tiny-llama";

flashkit::LoadOptions tiny_options() {
  flashkit::LoadOptions lo;
  lo.max_context = 96;
  lo.prefill_chunk = 16;  // a 23-token prompt runs in two chunks
  lo.threads = 1;
  return lo;
}

// A leader over n ranks whose followers are threads (standing in for processes).
struct RemoteJob {
  std::vector<std::shared_ptr<dist::Communicator>> comms;
  std::vector<std::thread> followers;
  std::vector<std::string> follower_errors;
  std::shared_ptr<flashkit::Model> leader;

  RemoteJob(const fs::path& dir, const flashkit::LoadOptions& lo, int n) {
    if (n == 1) {
      comms.push_back(dist::make_single_rank());
    } else {
      for (auto& c : dist::make_thread_ranks(n)) comms.push_back(std::move(c));
    }
    follower_errors.resize(size_t(n));
    for (int r = 1; r < n; ++r)
      followers.emplace_back([this, dir, lo, r] {
        try {
          auto m = engine::load_rank_model(dir, lo, *comms[size_t(r)]);
          engine::follow_tp_leader(*m, *comms[size_t(r)]);
        } catch (const std::exception& e) {
          follower_errors[size_t(r)] = e.what();
        }
      });
    leader = engine::make_tp_leader(engine::load_rank_model(dir, lo, *comms[0]), comms[0]);
  }
  // The sessions are gone by now (declared after the job): dropping the leader sends the followers `stop`.
  ~RemoteJob() {
    leader.reset();
    for (auto& t : followers) t.join();
    for (const auto& e : follower_errors) EXPECT_EQ(e, "");
  }
};

std::vector<std::vector<int32_t>> prompts(int64_t vocab) {
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> ps;
  for (int len : {1, 6, 23, 80}) {  // 80 ids: a command longer than the first broadcast (64 words)
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back(int32_t(rng() % uint32_t(vocab)));
    ps.push_back(p);
  }
  return ps;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

flashkit::GenerateOptions greedy(int64_t n) {
  flashkit::GenerateOptions g;
  g.max_new_tokens = n;
  g.temperature = 0;
  g.stop_at_eos = false;
  return g;
}

// Prefill, decode and greedy generation through `got` give bitwise the logits and the tokens of `want`.
void expect_bitwise(flashkit::Model& got, flashkit::Model& want, const std::string& what) {
  const int64_t V = want.info().vocab_size;
  for (const auto& p : prompts(V)) {
    auto a = want.new_session(), b = got.new_session();
    a->prefill(p);
    b->prefill(p);
    EXPECT_TRUE(same_bits(b->logits(), a->logits())) << what << ": prefill of " << p.size();
    for (int s = 0; s < 3; ++s) {
      const int32_t t = int32_t((p.back() + 37 * s) % V);
      a->decode(t);
      b->decode(t);
      EXPECT_TRUE(same_bits(b->logits(), a->logits())) << what << ": decode step " << s;
    }
    EXPECT_EQ(b->position(), a->position());
    a->reset();
    b->reset();
    EXPECT_EQ(flashkit::generate(*b, p, greedy(10)).tokens, flashkit::generate(*a, p, greedy(10)).tokens)
        << what << ": prompt of " << p.size();
  }
}

TEST(TpNcclProtocol, TwoRemoteRanksMatchThreadRanksBitwise) {
  auto lo = tiny_options();
  RemoteJob job(kTiny, lo, 2);
  EXPECT_EQ(job.leader->info().tp, 2);
  lo.tp = 2;
  auto threads = flashkit::Model::load(kTiny, lo);
  expect_bitwise(*job.leader, *threads, "2 remote ranks vs 2 thread ranks");
  lo.tp = 1;
  auto one = flashkit::Model::load(kTiny, lo);
  for (const auto& p : prompts(one->info().vocab_size)) {
    auto a = one->new_session(), b = job.leader->new_session();
    EXPECT_EQ(flashkit::generate(*b, p, greedy(10)).tokens, flashkit::generate(*a, p, greedy(10)).tokens);
  }
}

// World size 1 (what one GPU runs through NCCL): the leader adds the command stream and nothing else.
TEST(TpNcclProtocol, WorldSizeOneIsBitwiseThePlainModel) {
  auto lo = tiny_options();
  RemoteJob job(kTiny, lo, 1);
  EXPECT_EQ(job.leader->info().tp, 1);
  auto plain = flashkit::Model::load(kTiny, lo);
  expect_bitwise(*job.leader, *plain, "world size 1 vs plain");
}

// Speculative decoding (n-gram lookup: truncate and multi-row verification steps), interleaved sessions, and a bad
// argument that every rank refuses alike: the ranks stay in step.
TEST(TpNcclProtocol, SpeculationInterleavedSessionsAndBadArgumentsStayInStep) {
  auto lo = tiny_options();
  RemoteJob job(kTiny, lo, 2);
  lo.tp = 1;
  auto one = flashkit::Model::load(kTiny, lo);
  const std::vector<int32_t> p = {5, 9, 14, 5, 9, 14, 5, 9, 14, 5, 9};  // repeats: lookup proposes
  auto g = greedy(16);
  auto want = flashkit::generate(*one->new_session(), p, g).tokens;
  g.speculative.lookup = 2;
  {
    auto s1 = job.leader->new_session(), s2 = job.leader->new_session();
    s1->prefill(std::vector<int32_t>{1, 2, 3});
    EXPECT_THROW(s2->prefill(std::vector<int32_t>{1, int32_t(one->info().vocab_size)}), flashkit::Error);
    EXPECT_THROW(s1->truncate(99), flashkit::Error);
    EXPECT_EQ(flashkit::generate(*s2, p, g).tokens, want);
    s1->reset();
    EXPECT_EQ(flashkit::generate(*s1, p, greedy(16)).tokens, want);
  }
  auto s3 = job.leader->new_session();  // sessions dropped and made again
  EXPECT_EQ(flashkit::generate(*s3, p, g).tokens, want);
}

// flashkit serve over remote ranks: batched, chunked paged steps mirrored through the leader's paged runner.
TEST(TpNcclProtocol, ServingThroughTheLeaderMatchesOneRank) {
  auto lo = tiny_options();
  std::vector<std::vector<int32_t>> out;
  std::vector<std::vector<int32_t>> ps = prompts(512);
  ps.push_back({7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7});
  {
    RemoteJob job(kTiny, lo, 2);
    EXPECT_NE(engine::model_identity(*job.leader).find("tp=2;"), std::string::npos);
    flashkit::serve::EngineOptions eo;
    eo.background = false;
    eo.max_step_tokens = 16;  // the 23-token prompt is chunked
    eo.kv_memory = engine::paged_kv_bytes_per_token(*job.leader) * 16 * 24;
    auto e = flashkit::serve::Engine::create(job.leader, eo);
    out.resize(ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
      flashkit::serve::Request r;
      r.prompt = ps[i];
      r.max_tokens = 5 + int64_t(i);
      r.sampling.temperature = 0;
      r.stop_at_eos = false;
      r.on_token = [&out, i](int32_t t) {
        out[i].push_back(t);
        return true;
      };
      e->submit(std::move(r));
    }
    while (e->step()) {
    }
  }
  lo.tp = 1;
  auto one = flashkit::Model::load(kTiny, lo);
  for (size_t i = 0; i < ps.size(); ++i)
    EXPECT_EQ(out[i], flashkit::generate(*one->new_session(), ps[i], greedy(5 + int64_t(i))).tokens) << i;
}

TEST(TpNcclProtocol, LeaderAndFollowerRefuseTheWrongRank) {
  auto comms = dist::make_thread_ranks(2);
  auto lo = tiny_options();
  std::shared_ptr<dist::Communicator> c1 = std::move(comms[1]);
  EXPECT_THROW(engine::make_tp_leader(flashkit::Model::load(kTiny, lo), c1), flashkit::Error);
  EXPECT_THROW(engine::follow_tp_leader(*flashkit::Model::load(kTiny, lo), *comms[0]), flashkit::Error);
}

// ---- where the ranks run (FLASHKIT_TP_BACKEND: 0 auto, 1 threads, 2 nccl) ----

std::string error_of(int tp, const std::string& dev, int backend, bool launched, bool nccl, int gpus) {
  try {
    engine::tp_uses_processes(tp, dev, backend, launched, nccl, gpus);
  } catch (const flashkit::Error& e) {
    return e.what();
  }
  return "";
}

TEST(TpNcclChoice, AutoTakesProcessesOnlyWhenTheyCanRun) {
  using engine::tp_uses_processes;
  EXPECT_TRUE(tp_uses_processes(2, "cuda", 0, false, true, 2));
  EXPECT_TRUE(tp_uses_processes(2, "cuda:1", 0, false, true, 3));
  EXPECT_FALSE(tp_uses_processes(2, "cuda:1", 0, false, true, 2));  // one GPU from index 1: threads share it
  EXPECT_FALSE(tp_uses_processes(2, "cuda", 0, false, true, 1));
  EXPECT_FALSE(tp_uses_processes(2, "cuda", 0, false, false, 2));  // no NCCL: threads
  EXPECT_FALSE(tp_uses_processes(1, "cuda", 0, false, true, 8));   // one rank: the plain model
  EXPECT_FALSE(tp_uses_processes(4, "cpu", 0, false, true, 8));
  EXPECT_FALSE(tp_uses_processes(2, "cuda", 1, false, true, 2));  // threads forced
}

TEST(TpNcclChoice, ForcedProcessesRunOrSayWhyNot) {
  using engine::tp_uses_processes;
  EXPECT_TRUE(tp_uses_processes(1, "cuda", 2, false, true, 1));  // --tp 1 through NCCL on one GPU
  EXPECT_TRUE(tp_uses_processes(2, "cuda", 0, true, true, 2));   // a launched rank
  EXPECT_NE(error_of(1, "cpu", 2, false, true, 1).find("--tp 1: ranks in processes need --device cuda"),
            std::string::npos);
  EXPECT_NE(error_of(2, "cuda", 2, false, false, 2).find("--tp 2: NCCL communicator not built"), std::string::npos);
  EXPECT_NE(error_of(3, "cuda", 2, false, true, 2).find("--tp 3: device cuda with 3 ranks needs CUDA devices 0..2, "
                                                        "this machine has 2"),
            std::string::npos);
  EXPECT_NE(error_of(2, "cuda", 1, true, true, 2).find("FLASHKIT_TP_BACKEND=threads"), std::string::npos);
  EXPECT_NE(error_of(0, "cuda", 2, false, true, 2).find("--tp 0"), std::string::npos);
}

}  // namespace
