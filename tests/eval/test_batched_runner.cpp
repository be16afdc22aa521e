// The batched eval path (serve::Engine: continuous batching, prefix cache) against the Session loop on the shipped
// model: every sample's greedy generation is the same token for token, the prefix cache serves the filler that the
// samples of a cell share, and run_eval's cells agree between batch 1 and batch 4.
#include <gtest/gtest.h>

#include <filesystem>

#include "eval/runner.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/serve.hpp"
#include "flashkit/tokenizer.hpp"

using namespace flashkit;
using namespace flashkit::eval;

namespace {

const std::string kModel = std::string(FLASHKIT_REPO) + "/models/target";

struct Shipped {
  std::shared_ptr<Model> model;
  Tokenizer tokenizer;
};

Shipped& shipped() {
  static Shipped s{Model::load(kModel), Tokenizer::from_dir(kModel)};
  return s;
}

bool have_model() { return std::filesystem::exists(kModel + "/model.safetensors"); }

}  // namespace

TEST(EvalBatched, SameGenerationsAsTheSessionLoopAndTheFillerIsCached) {
  if (!have_model()) GTEST_SKIP() << "models/target is not present";
  auto& m = shipped();
  const Encoder encode = [&](const std::string& t) { return m.tokenizer.encode(t, true); };
  std::vector<Sample> samples;
  for (const char* task : {"passkey", "niah_multikey", "vt", "cwe"})
    for (int64_t i = 0; i < 3; ++i) samples.push_back(make_text_sample({task, 250 + 37 * i, 0.5, 7, i}, encode));
  // Three samples of one (passkey, depth 1) cell: the same filler up to the needle at the end.
  std::vector<Sample> cell;
  for (int64_t i = 0; i < 3; ++i) cell.push_back(make_text_sample({"passkey", 300, 1.0, 7, i}, encode));

  serve::EngineOptions eo;
  eo.max_running = 4;  // fewer than the samples: admission between steps is exercised too
  eo.max_step_tokens = 96;  // prompts in several chunks
  eo.background = false;
  auto engine = serve::Engine::create(m.model, eo);
  const auto batched = run_text_samples(*engine, m.tokenizer, samples);
  ASSERT_EQ(batched.size(), samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    const SampleOutcome one = run_sample(*m.model, &m.tokenizer, samples[i]);
    EXPECT_EQ(batched[i].generation, one.generation) << samples[i].task << " sample " << i;
    EXPECT_EQ(batched[i].generated_tokens, one.generated_tokens) << i;
    EXPECT_GT(one.generated_tokens, 0) << i;
    EXPECT_EQ(batched[i].prompt_tokens, one.prompt_tokens) << i;
    EXPECT_DOUBLE_EQ(batched[i].score, one.score) << i;
  }
  // The cell's later samples find (most of) the filler cached by its first.
  const auto cell_out = run_text_samples(*engine, m.tokenizer, cell);
  for (size_t i = 0; i < cell.size(); ++i) {
    if (i > 0) EXPECT_GT(cell_out[i].cached_tokens, int64_t(cell[i].ids.size()) * 3 / 4) << i;
    EXPECT_EQ(cell_out[i].generation, run_sample(*m.model, &m.tokenizer, cell[i]).generation) << i;
  }
}

TEST(EvalBatched, RunEvalCellsAgreeBetweenBatchOneAndFour) {
  if (!have_model()) GTEST_SKIP() << "models/target is not present";
  auto& m = shipped();
  EvalConfig c;
  c.tasks = {"passkey", "cwe"};
  c.lengths = {240, 300};
  c.depths = {0.0, 1.0};
  c.samples = 3;
  c.seed = 11;
  c.batch = 1;
  const EvalRun loop = run_eval(*m.model, &m.tokenizer, c);
  c.batch = 4;
  const EvalRun batched = run_eval(*m.model, &m.tokenizer, c);
  EXPECT_FALSE(loop.batched);
  EXPECT_TRUE(batched.batched);
  EXPECT_EQ(loop.prefix_hit_tokens, 0);
  EXPECT_GT(batched.prefix_hit_tokens, 0);
  ASSERT_EQ(loop.cells.size(), batched.cells.size());
  ASSERT_EQ(loop.cells.size(), 6u);  // passkey: 2 lengths x 2 depths; cwe: 2 lengths
  for (size_t i = 0; i < loop.cells.size(); ++i) {
    const auto &a = loop.cells[i], &b = batched.cells[i];
    EXPECT_EQ(a.task, b.task);
    EXPECT_EQ(a.length, b.length);
    EXPECT_EQ(a.n, 3);
    EXPECT_EQ(b.n, 3);
    EXPECT_DOUBLE_EQ(a.score_sum, b.score_sum) << i;
    EXPECT_EQ(a.prompt_tokens, b.prompt_tokens) << i;
    EXPECT_EQ(a.generated_tokens, b.generated_tokens) << i;
    EXPECT_GT(b.seconds, 0);
  }
  const auto j = results_json("target", c, batched);
  EXPECT_EQ(j["batch"], 4);
  EXPECT_EQ(j["batched"], true);
  EXPECT_EQ(j["prefix_hit_tokens"], batched.prefix_hit_tokens);
}

TEST(EvalBatched, ACellLargerThanAGroupRunsInGroupsWithTheSameResult) {
  if (!have_model()) GTEST_SKIP() << "models/target is not present";
  auto& m = shipped();
  EvalConfig c;
  c.tasks = {"passkey"};
  c.lengths = {200};
  c.depths = {1.0};
  c.samples = 34;  // batch 2: groups of 32, so two groups
  c.seed = 5;
  c.batch = 2;
  const EvalRun batched = run_eval(*m.model, &m.tokenizer, c);
  c.batch = 1;
  const EvalRun loop = run_eval(*m.model, &m.tokenizer, c);
  ASSERT_EQ(batched.cells.size(), 1u);
  const auto &a = loop.cells[0], &b = batched.cells[0];
  EXPECT_EQ(b.n, 34);
  EXPECT_EQ(a.n, 34);
  EXPECT_DOUBLE_EQ(a.score_sum, b.score_sum);
  EXPECT_EQ(a.prompt_tokens, b.prompt_tokens);
  EXPECT_EQ(a.generated_tokens, b.generated_tokens);
  // The second group's leader finds the haystack that the first group computed.
  EXPECT_GT(b.cached_tokens, (b.prompt_tokens / 34) * 33 / 2);
}
