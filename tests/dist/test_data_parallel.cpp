// Data-parallel training with thread ranks against one rank with the same global batch: the losses agree within
// f32 summation noise, the ZeRO-1 shards cover the parameter arena exactly once, the sharded AdamW moments are
// gathered into the same checkpoint, a run resumes bit-identically, and bad --dp values are refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "flashkit/error.hpp"
#include "flashkit/train.hpp"
#include "model/weights.hpp"
#include "train/data.hpp"
#include "train/data_parallel.hpp"
#include "train/random.hpp"

namespace {

namespace fs = std::filesystem;
namespace tr = flashkit::train;
using nlohmann::json;

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("flashkit_dp_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write_corpus(const fs::path& file, int64_t vocab, int64_t n, uint64_t seed) {
  tr::Rng r(seed, 1);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& x : ids) x = int32_t(r.below(uint64_t(vocab)));
  tr::write_token_file(file, ids, vocab);
}

// A small Llama-style model, global batch 6 (splits into 1, 2, 3 and 6 ranks), 2 micro-batches per step.
tr::Recipe recipe(const fs::path& dir, const std::string& out, int64_t steps) {
  const json model = {{"model_type", "llama"},      {"vocab_size", 48},           {"hidden_size", 16},
                      {"intermediate_size", 40},    {"num_hidden_layers", 2},      {"num_attention_heads", 2},
                      {"num_key_value_heads", 1},   {"head_dim", 8},               {"rms_norm_eps", 1e-5},
                      {"rope_theta", 10000.0},      {"max_position_embeddings", 64}, {"tie_word_embeddings", false}};
  const json j = {{"model", model},
                  {"data", {{"train", (dir / "train.bin").string()}, {"val", (dir / "val.bin").string()}}},
                  {"train",
                   {{"steps", steps}, {"batch_size", 6}, {"seq_len", 16}, {"grad_accum", 2}, {"lr", 3e-3},
                    {"warmup_steps", 2}, {"weight_decay", 0.01}, {"seed", 11}}},
                  {"eval", {{"interval", 0}, {"batches", 2}}},
                  {"log", {{"interval", 1}}},
                  {"output", {{"dir", (dir / out).string()}}},
                  {"threads", 2}};
  const fs::path f = dir / (out + ".json");
  std::ofstream(f) << j.dump(2);
  return tr::load_recipe(f);
}

struct RunResult {
  std::vector<double> losses;
  double val = -1;
  tr::TrainResult result;
};

RunResult run(const fs::path& dir, const std::string& out, int dp, int64_t steps, int64_t stop_at = 0,
        const fs::path& resume = {}) {
  RunResult res;
  tr::TrainOptions o;
  o.quiet = true;
  o.data_parallel = dp;
  o.stop_at = stop_at;
  o.resume = resume;
  o.grad_bucket_elems = 1000;  // several buckets, the last one short
  o.on_report = [&](const tr::StepReport& rep) {
    res.losses.push_back(rep.loss);
    if (rep.val_loss >= 0) res.val = rep.val_loss;
  };
  res.result = tr::train(recipe(dir, out, steps), o);
  return res;
}

std::vector<float> tensor(const fs::path& checkpoint, const char* name) {
  const auto st = flashkit::model::open_safetensors(checkpoint / "state.safetensors");
  const auto t = st->get(name);
  const float* p = static_cast<const float*>(t.data);
  return std::vector<float>(p, p + t.numel());
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(double(a[i]) - b[i]));
    den = std::max(den, std::fabs(double(b[i])));
  }
  return num / std::max(den, 1e-30);
}

}  // namespace

TEST(DataParallel, Zero1ShardsCoverTheArenaExactlyOnce) {
  for (int64_t arena : {1, 15, 16, 17, 1000, 12345}) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
      std::vector<int> hits(size_t(arena), 0);
      const int64_t len = ranks == 1 ? arena : tr::zero1_shard_len(arena, ranks);
      EXPECT_GE(len * ranks, arena);
      if (ranks > 1) EXPECT_EQ(len % 16, 0);
      for (int r = 0; r < ranks; ++r) {
        const tr::Range s = tr::zero1_shard(arena, ranks, r);
        EXPECT_LE(s.size(), len);
        for (int64_t i = s.begin; i < s.end; ++i) ++hits[size_t(i)];
      }
      for (int64_t i = 0; i < arena; ++i) ASSERT_EQ(hits[size_t(i)], 1) << "arena " << arena << " ranks " << ranks;
    }
    std::vector<int> hits(size_t(arena), 0);
    for (const tr::Range& b : tr::grad_buckets(arena, 7))
      for (int64_t i = b.begin; i < b.end; ++i) ++hits[size_t(i)];
    for (int64_t i = 0; i < arena; ++i) ASSERT_EQ(hits[size_t(i)], 1);
  }
  EXPECT_THROW(tr::zero1_shard(10, 2, 2), flashkit::Error);
  EXPECT_THROW(tr::grad_buckets(10, 0), flashkit::Error);
}

TEST(DataParallel, ThreadRanksMatchOneRankWithTheSameGlobalBatch) {
  const fs::path dir = temp_dir("match");
  write_corpus(dir / "train.bin", 48, 6000, 1);
  write_corpus(dir / "val.bin", 48, 1000, 2);
  const RunResult one = run(dir, "dp1", 1, 6);
  ASSERT_EQ(one.losses.size(), 6u);
  const auto p1 = tensor(one.result.checkpoint_dir, "params");
  const auto m1 = tensor(one.result.checkpoint_dir, "adam_m");
  for (int dp : {2, 3}) {
    const RunResult r = run(dir, "dp" + std::to_string(dp), dp, 6);
    ASSERT_EQ(r.losses.size(), one.losses.size());
    // Stated tolerance: the ranks' partial gradients are summed in another order than one rank's, an f32
    // rounding difference (~1e-7 relative) that six AdamW steps amplify only slightly.
    for (size_t s = 0; s < one.losses.size(); ++s)
      EXPECT_NEAR(r.losses[s], one.losses[s], 1e-4 * one.losses[s]) << "dp " << dp << " step " << s + 1;
    EXPECT_NEAR(r.val, one.val, 1e-4 * one.val) << "dp " << dp;
    EXPECT_LT(max_rel(tensor(r.result.checkpoint_dir, "params"), p1), 1e-3) << "dp " << dp;
    EXPECT_LT(max_rel(tensor(r.result.checkpoint_dir, "adam_m"), m1), 1e-3) << "dp " << dp;  // the gathered shards
    EXPECT_TRUE(fs::exists(r.result.model_dir / "model.safetensors"));
  }
  fs::remove_all(dir);
}

TEST(DataParallel, AResumedRunIsBitIdentical) {
  const fs::path dir = temp_dir("resume");
  write_corpus(dir / "train.bin", 48, 6000, 3);
  write_corpus(dir / "val.bin", 48, 1000, 4);
  const RunResult whole = run(dir, "whole", 2, 4);
  run(dir, "parts", 2, 4, 2);
  const RunResult rest = run(dir, "parts", 2, 4, 0, dir / "parts");
  ASSERT_EQ(rest.losses.size(), 2u);
  EXPECT_EQ(rest.losses[1], whole.losses[3]);
  EXPECT_EQ(tensor(rest.result.checkpoint_dir, "params"), tensor(whole.result.checkpoint_dir, "params"));
  EXPECT_EQ(tensor(rest.result.checkpoint_dir, "adam_v"), tensor(whole.result.checkpoint_dir, "adam_v"));
  fs::remove_all(dir);
}

TEST(DataParallel, BadDataParallelArgumentsAreNamed) {
  const fs::path dir = temp_dir("bad");
  write_corpus(dir / "train.bin", 48, 2000, 5);
  write_corpus(dir / "val.bin", 48, 500, 6);
  auto expect_error = [&](int dp, const char* needle, bool dump = false) {
    tr::TrainOptions o;
    o.quiet = true;
    o.data_parallel = dp;
    if (dump) o.dump_first_step = dir / "dump";
    try {
      tr::train(recipe(dir, "bad", 2), o);
      ADD_FAILURE() << "dp " << dp << " accepted";
    } catch (const flashkit::Error& e) {
      EXPECT_EQ(e.status(), flashkit::Status::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(0, "--dp): must be >= 1, got 0");
  expect_error(4, "(6) does not split into 4 equal shares");
  expect_error(2, "--dump-step1 needs --dp 1", true);
  EXPECT_FALSE(fs::exists(dir / "bad"));  // nothing written
  fs::remove_all(dir);
}

// The overlapped all-reduce (buckets handed to a communication thread as the backward finishes each layer) sums
// the same numbers as the one after the backward: bitwise the same run.
TEST(DataParallel, OverlappedGradientAllReduceIsBitIdenticalToTheSequentialOne) {
  const fs::path dir = temp_dir("overlap");
  write_corpus(dir / "train.bin", 48, 6000, 7);
  write_corpus(dir / "val.bin", 48, 1000, 8);
  for (int dp : {2, 3}) {
    std::vector<double> losses[2];
    std::vector<float> params[2];
    for (int overlap = 0; overlap < 2; ++overlap) {
      tr::TrainOptions o;
      o.quiet = true;
      o.data_parallel = dp;
      o.overlap_grad_comm = overlap == 1;
      o.grad_bucket_elems = 300;  // many buckets, several per layer, some spanning two layers' tensors
      o.on_report = [&](const tr::StepReport& rep) { losses[overlap].push_back(rep.loss); };
      const std::string out = "o" + std::to_string(dp) + std::to_string(overlap);
      const tr::TrainResult res = tr::train(recipe(dir, out, 4), o);
      params[overlap] = tensor(res.checkpoint_dir, "params");
    }
    EXPECT_EQ(losses[0], losses[1]) << "dp " << dp;
    EXPECT_EQ(params[0], params[1]) << "dp " << dp;
  }
  fs::remove_all(dir);
}

// The overlap itself: once every rank reports layer 1's gradients final, the buckets holding only layer 1 are
// all-reduced before finish_overlap() (while "the backward" still holds layer 0 and the embeddings).
TEST(DataParallel, BucketsOfAFinishedLayerAreReducedBeforeTheBackwardEnds) {
  tr::ParamTable table;
  table.add("model.layers.1.w", {130}, true);  // [0, 130)
  table.add("model.layers.0.w", {70}, true);   // [144, 214)
  table.add("model.embed_tokens.weight", {40}, false);  // [224, 264)
  const int64_t bucket = 64;  // buckets [0,64) [64,128) hold only layer 1; [128,192) is shared with layer 0
  auto comms = flashkit::dist::make_thread_ranks(2);
  std::vector<std::vector<float>> out(2);
  std::vector<std::size_t> early(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto be = tr::make_cpu_backend(flashkit::DType::f32, 1);
      tr::Mat grads = be->alloc(flashkit::DType::f32, 1, table.size());
      std::vector<float> init(size_t(table.size()), float(r + 1));
      be->upload(grads, init.data(), init.size() * 4);
      {
        tr::DataParallel dp(*comms[size_t(r)], *be, table, bucket);
        dp.begin_overlap(grads);
        dp.layer_done(1);
        const auto t0 = std::chrono::steady_clock::now();
        while (dp.buckets_reduced() < 2 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        early[size_t(r)] = dp.buckets_reduced();
        dp.layer_done(0);
        dp.finish_overlap();
      }
      out[size_t(r)].resize(size_t(table.size()));
      be->download(out[size_t(r)].data(), grads, out[size_t(r)].size() * 4);
      be->free(grads);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(early[size_t(r)], 2u) << "rank " << r;
    for (float x : out[size_t(r)]) ASSERT_EQ(x, 3.f);
  }
}
