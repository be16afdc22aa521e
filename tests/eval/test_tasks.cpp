// The task generators: deterministic per seed, lengths in the model's own tokens, needles at their depth, the
// id-level MQAR layout of prepare-data --synthetic mqar, and clear errors for lengths too short.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "eval/haystack.hpp"
#include "eval/tasks.hpp"
#include "flashkit/error.hpp"
#include "flashkit/tokenizer.hpp"

using namespace flashkit;
using namespace flashkit::eval;

namespace {

const Tokenizer& shipped_tokenizer() {
  static const Tokenizer tok = Tokenizer::from_dir(std::string(FLASHKIT_REPO) + "/models/tokenizer");
  return tok;
}

Encoder model_encoder() {
  return [](const std::string& s) { return shipped_tokenizer().encode(s, true); };
}

// One id per byte: exact, fast lengths for the determinism checks.
Encoder byte_encoder() {
  return [](const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); };
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(EvalTasks, SameSeedSameSampleOtherSeedOther) {
  for (const auto& task : task_names()) {
    const SampleSpec spec{task, 600, 0.5, 7, 3};
    const Sample a = make_text_sample(spec, byte_encoder()), b = make_text_sample(spec, byte_encoder());
    EXPECT_EQ(a.prompt, b.prompt) << task;
    EXPECT_EQ(a.answers, b.answers) << task;
    SampleSpec other = spec;
    other.seed = 8;
    EXPECT_NE(make_text_sample(other, byte_encoder()).prompt, a.prompt) << task;
    other = spec;
    other.index = 4;
    EXPECT_NE(make_text_sample(other, byte_encoder()).prompt, a.prompt) << task;
    ASSERT_FALSE(a.answers.empty()) << task;
    for (const auto& ans : a.answers) EXPECT_NE(a.prompt.find(ans), std::string::npos) << task << " " << ans;
  }
}

TEST(EvalTasks, SamplesOfALengthShareTheHaystackBeforeTheirNeedles) {
  auto common = [](const std::string& a, const std::string& b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
  };
  const Sample a = make_text_sample({"passkey", 900, 1.0, 7, 0}, byte_encoder());
  const Sample b = make_text_sample({"passkey", 900, 1.0, 7, 1}, byte_encoder());
  const Sample c = make_text_sample({"niah_single", 900, 0.5, 7, 0}, byte_encoder());
  const size_t needle = a.prompt.find("The pass key is");
  ASSERT_NE(needle, std::string::npos);
  EXPECT_GT(needle, a.prompt.size() * 3 / 4);  // depth 1: the needle ends the haystack
  EXPECT_GE(common(a.prompt, b.prompt), needle - 40);  // within the last sentence before it
  EXPECT_NE(a.answers, b.answers);
  // Another task at the same length: the same sentences after its own instruction.
  const std::string first_sentence = a.prompt.substr(a.prompt.find('\n') + 1, 30);
  EXPECT_NE(c.prompt.find(first_sentence), std::string::npos) << first_sentence;
  // Another length: another haystack.
  const Sample d = make_text_sample({"passkey", 901, 1.0, 7, 0}, byte_encoder());
  EXPECT_LT(common(a.prompt, d.prompt), needle / 2);
}

TEST(EvalTasks, LengthIsMeasuredInTheModelsTokensAndFilled) {
  for (const auto& task : task_names())
    for (int64_t length : {256, 457}) {
      const Sample s = make_text_sample({task, length, 0.25, 1, 0}, model_encoder());
      const int64_t used = int64_t(s.ids.size()) + s.max_new_tokens;
      EXPECT_LE(used, length) << task;
      // The filler stops within one unit (a sentence, a list word or a pair: < 24 tokens) of the length.
      EXPECT_GT(used, length - 24) << task << " " << length;
      EXPECT_EQ(s.ids, shipped_tokenizer().encode(s.prompt, true)) << task;
    }
}

TEST(EvalTasks, NeedleSitsAtItsDepth) {
  double previous = -1;
  for (double depth : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const Sample s = make_text_sample({"passkey", 2000, depth, 3, 0}, byte_encoder());
    const size_t at = s.prompt.find("The pass key is");
    const size_t start = s.prompt.find('\n') + 1, end = s.prompt.rfind('\n');
    ASSERT_NE(at, std::string::npos);
    const double rel = double(at - start) / double(end - start);
    EXPECT_NEAR(rel, depth, 0.06) << depth;
    EXPECT_GT(rel, previous);
    previous = rel;
  }
}

TEST(EvalTasks, MultiKeyAndMultiValueNeedles) {
  const Sample mk = make_text_sample({"niah_multikey", 1500, 0.5, 2, 0}, byte_encoder());
  EXPECT_EQ(mk.answers.size(), 1u);
  size_t needles = 0;
  for (size_t p = mk.prompt.find("special magic numbers for"); p != std::string::npos;
       p = mk.prompt.find("special magic numbers for", p + 1))
    ++needles;
  EXPECT_EQ(needles, 4u);
  const Sample mv = make_text_sample({"niah_multivalue", 1500, 0.5, 2, 0}, byte_encoder());
  EXPECT_EQ(mv.answers.size(), 4u);
  EXPECT_TRUE(mv.all_answers);
  const Sample vt = make_text_sample({"vt", 1500, 0.0, 2, 0}, byte_encoder());
  EXPECT_EQ(vt.answers.size(), 4u);
  EXPECT_NE(vt.prompt.find("VAR " + vt.answers[1] + " = VAR " + vt.answers[0]), std::string::npos);
}

TEST(EvalTasks, CommonWordsAreTheMostFrequent) {
  const Sample s = make_text_sample({"cwe", 800, -1, 5, 0}, byte_encoder());
  ASSERT_EQ(s.answers.size(), 5u);
  auto count = [&](const std::string& w) {
    size_t n = 0;
    const std::string item = ". " + w + " ";
    for (size_t p = s.prompt.find(item); p != std::string::npos; p = s.prompt.find(item, p + 1)) ++n;
    return n;
  };
  for (const auto& w : s.answers) EXPECT_GE(count(w), 4u) << w;
  EXPECT_EQ(s.depth, -1);
}

TEST(EvalTasks, TooShortLengthNamesTheOption) {
  const std::string m = message_of([] { make_text_sample({"niah_single", 20, 0.5, 1, 0}, model_encoder()); });
  EXPECT_NE(m.find("--lengths"), std::string::npos) << m;
  EXPECT_NE(m.find("niah_single"), std::string::npos) << m;
  EXPECT_NE(message_of([] { make_text_sample({"passkey", 500, 1.5, 1, 0}, byte_encoder()); }).find("--depths"),
            std::string::npos);
  EXPECT_NE(message_of([] { make_id_mqar_sample({"mqar", 5, -1, 1, 0}, 64); }).find("--lengths"), std::string::npos);
  EXPECT_NE(message_of([] { make_id_mqar_sample({"mqar", 400, -1, 1, 0}, 64); }).find("distinct keys"),
            std::string::npos);
}

TEST(EvalTasks, IdMqarHasTheTrainingLayout) {
  const int64_t vocab = 64, length = 61;
  const Sample s = make_id_mqar_sample({"mqar", length, -1, 9, 2}, vocab);
  const int64_t n = (length - 2) / 4;
  ASSERT_EQ(int64_t(s.ids.size()), 4 * n + 2);
  EXPECT_EQ(s.ids[0], vocab - 3);
  EXPECT_EQ(s.ids[size_t(2 * n + 1)], vocab - 2);
  const int64_t half = (vocab - 3) / 2;
  ASSERT_EQ(int64_t(s.query_positions.size()), n);
  std::vector<int32_t> keys;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t k = s.ids[size_t(1 + 2 * i)], v = s.ids[size_t(2 + 2 * i)];
    EXPECT_LT(k, half);
    EXPECT_GE(v, half);
    EXPECT_LT(v, vocab - 3);
    keys.push_back(k);
  }
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::unique(keys.begin(), keys.end()), keys.end());  // distinct keys
  for (size_t q = 0; q < s.query_positions.size(); ++q) {
    const int64_t p = s.query_positions[q];
    EXPECT_EQ(s.ids[size_t(p + 1)], s.query_values[q]);
    // The query's value is the one paired with this key in the context.
    for (int64_t i = 0; i < n; ++i)
      if (s.ids[size_t(1 + 2 * i)] == s.ids[size_t(p)]) EXPECT_EQ(s.ids[size_t(2 + 2 * i)], s.query_values[q]);
  }
  EXPECT_EQ(make_id_mqar_sample({"mqar", length, -1, 9, 2}, vocab).ids, s.ids);
  EXPECT_NE(make_id_mqar_sample({"mqar", length, -1, 10, 2}, vocab).ids, s.ids);
}
