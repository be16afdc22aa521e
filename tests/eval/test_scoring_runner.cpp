// Scoring rules, the configuration checks, and the runner's plumbing on a fake model that solves id-level MQAR
// exactly (so any position or argmax slip shows as accuracy below 1).
#include <gtest/gtest.h>

#include "eval/runner.hpp"
#include "eval/scoring.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"

using namespace flashkit;
using namespace flashkit::eval;

namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Logits peak at the id that followed the last earlier occurrence of the current token: perfect associative recall.
class RecallSession : public Session {
 public:
  RecallSession(const Model& m, int64_t vocab, bool wrong) : m_(m), vocab_(vocab), wrong_(wrong) {}
  void prefill(std::span<const int32_t> t, bool all) override {
    for (int32_t id : t) ids_.push_back(id);
    all_.assign(size_t(ids_.size() * vocab_), 0.0f);
    for (size_t p = 0; p < ids_.size(); ++p) {
      all_[p * size_t(vocab_) + size_t((p * 7) % size_t(vocab_))] = 0.5f;  // a decoy below the answer
      for (size_t q = p; q-- > 0;)
        if (ids_[q] == ids_[p] && q + 1 < ids_.size()) {
          all_[p * size_t(vocab_) + size_t(ids_[q + 1] + (wrong_ ? 1 : 0)) % size_t(vocab_)] = 1.0f;
          break;
        }
    }
    last_.assign(all_.end() - vocab_, all_.end());
    if (!all) all_.clear();
  }
  void decode(int32_t t) override { prefill(std::span<const int32_t>(&t, 1), false); }
  std::span<const float> logits() const override { return last_; }
  const std::vector<float>& all_logits() const override { return all_; }
  int64_t position() const override { return int64_t(ids_.size()); }
  int64_t max_context() const override { return 1 << 20; }
  void reset() override { ids_.clear(); }
  const Model& model() const override { return m_; }

 private:
  const Model& m_;
  int64_t vocab_;
  bool wrong_;
  std::vector<int32_t> ids_;
  std::vector<float> all_, last_;
};

class RecallModel : public Model {
 public:
  RecallModel(int64_t vocab, bool wrong) : wrong_(wrong) {
    info_.vocab_size = vocab;
    info_.max_context = 512;
  }
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<Session> new_session() override {
    return std::make_unique<RecallSession>(*this, info_.vocab_size, wrong_);
  }
  OpTimes& op_times() override { return times_; }

 private:
  ModelInfo info_;
  OpTimes times_;
  bool wrong_;
};

}  // namespace

TEST(EvalScoring, FirstWordExactMatch) {
  Sample s;
  s.answers = {"68492"};
  EXPECT_EQ(score_text(s, " 68492. Remember it."), 1.0);
  EXPECT_EQ(score_text(s, ": 68492\n"), 1.0);
  EXPECT_EQ(score_text(s, " 684921"), 0.0);  // a longer number is not the answer
  EXPECT_EQ(score_text(s, " the key is 68492"), 0.0);
  EXPECT_EQ(score_text(s, ""), 0.0);
}

TEST(EvalScoring, AllAnswersCountsWholeWords) {
  Sample s;
  s.answers = {"ABCDE", "FGHIJ", "123", "xyz"};
  s.all_answers = true;
  EXPECT_EQ(score_text(s, " ABCDE, FGHIJ, 123 and xyz"), 1.0);
  EXPECT_EQ(score_text(s, " ABCDE FGHIJ 1234"), 0.5);
  EXPECT_EQ(score_text(s, "nothing"), 0.0);
}

TEST(EvalScoring, IdsFraction) {
  Sample s;
  s.query_values = {5, 6, 7, 8};
  const std::vector<int32_t> p = {5, 0, 7, 8};
  EXPECT_EQ(score_ids(s, p), 0.75);
  EXPECT_NE(message_of([&] { score_ids(s, std::vector<int32_t>{1}); }).find("predictions"), std::string::npos);
}

TEST(EvalRunner, ValidateNamesTheOption) {
  EvalConfig c;
  c.tasks = {"passkey"};
  c.lengths = {256};
  EXPECT_NO_THROW(validate(c, 512, true));
  auto with = [&](auto edit) {
    EvalConfig d = c;
    edit(d);
    return message_of([&] { validate(d, 512, true); });
  };
  EXPECT_NE(with([](EvalConfig& d) { d.tasks = {"needle"}; }).find("--task: unknown task \"needle\""),
            std::string::npos);
  EXPECT_NE(with([](EvalConfig& d) { d.samples = 0; }).find("--samples"), std::string::npos);
  const std::string ctx = with([](EvalConfig& d) { d.lengths = {256, 1024}; });
  EXPECT_NE(ctx.find("--lengths: 1024 tokens exceeds the model's context of 512"), std::string::npos) << ctx;
  EXPECT_NE(with([](EvalConfig& d) { d.depths = {0.5, -0.1}; }).find("--depths"), std::string::npos);
  EXPECT_NE(message_of([&] { validate(c, 512, false); }).find("no tokenizer"), std::string::npos);
  EXPECT_NE(with([](EvalConfig& d) { d.batch = -1; }).find("--batch: must be in [1, 4096] (or 0: by backend), got -1"),
            std::string::npos);
  EXPECT_NO_THROW(validate([&] { EvalConfig d = c; d.batch = 0; return d; }(), 512, true));
  EvalConfig ids = c;
  ids.tasks = {"mqar"};
  EXPECT_NO_THROW(validate(ids, 512, false));
}

TEST(EvalRunner, DefaultBatchIsTheEngineForModelsWithAKVCache) {
  // Prompt chunks through the flash kernel on the CPU and CUDA alike, at any length.
  EXPECT_EQ(default_batch(/*has_kv_cache=*/true), 8);
  // Mamba: the engine runs a Session per sequence anyway.
  EXPECT_EQ(default_batch(false), 1);
}

TEST(EvalRunner, PerfectRecallModelScoresOneAndAWrongOneZero) {
  EvalConfig c;
  c.tasks = {"mqar"};
  c.lengths = {30, 101};
  c.samples = 3;
  RecallModel good(64, false), bad(64, true);
  int64_t calls = 0;
  const EvalRun run = run_eval(good, nullptr, c, [&](const CellResult&, int64_t done, int64_t total) {
    EXPECT_EQ(done, ++calls);
    EXPECT_EQ(total, 2);
  });
  EXPECT_FALSE(run.batched);  // id-level mqar: a Session each
  const auto& cells = run.cells;
  ASSERT_EQ(cells.size(), 2u);
  for (const auto& cell : cells) {
    EXPECT_EQ(cell.n, 3);
    EXPECT_DOUBLE_EQ(cell.accuracy(), 1.0);
    EXPECT_EQ(cell.depth, -1);
  }
  for (const auto& cell : run_eval(bad, nullptr, c).cells) EXPECT_DOUBLE_EQ(cell.accuracy(), 0.0);
  const auto j = results_json("fake", c, run);
  EXPECT_EQ(j["cells"].size(), 2u);
  EXPECT_TRUE(j["cells"][0]["depth"].is_null());
  EXPECT_EQ(j["cells"][1]["length"], 101);
  EXPECT_DOUBLE_EQ(j["cells"][1]["accuracy"].get<double>(), 1.0);
}

TEST(EvalRunner, ALengthTooShortFailsBeforeAnyCellRuns) {
  EvalConfig c;
  c.tasks = {"mqar"};
  c.lengths = {30, 4};  // 4 tokens hold no pair
  RecallModel good(64, false);
  int64_t calls = 0;
  const std::string m =
      message_of([&] { run_eval(good, nullptr, c, [&](const CellResult&, int64_t, int64_t) { ++calls; }); });
  EXPECT_NE(m.find("--lengths: 4 tokens is too short"), std::string::npos) << m;
  EXPECT_EQ(calls, 0);
}
