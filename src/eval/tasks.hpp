// RULER-style synthetic long-context tasks (docs/eval.md). Every sample is a pure function of
// (seed, task, length, depth, index) and of the model's tokenizer: its length is measured in the model's own tokens.
//
// Text tasks (a model with a tokenizer): passkey, niah_single, niah_multikey, niah_multivalue, vt (variable
// tracking), cwe (common-words extraction), mqar (associative recall in words). The prompt plus the answer budget
// (max_new_tokens) is at most `length` tokens; the filler is as long as fits. Scoring is exact string match of the
// greedy generation (scoring.hpp).
// Id-level mqar (a model without a tokenizer, trained on `prepare-data --synthetic mqar`): the training format
// [BOS] k1 v1 .. kn vn [SEP] then every pair again in a seeded order; every query's value is scored teacher-forced.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace flashkit::eval {

// Token ids of a prompt text, BOS included when the model uses one.
using Encoder = std::function<std::vector<int32_t>(const std::string&)>;

struct Sample {
  std::string task;
  int64_t length = 0;            // the requested length (prompt + answer budget)
  double depth = -1;             // needle depth in [0, 1]; -1 for tasks without one (cwe, mqar)
  std::string prompt;            // text tasks
  std::vector<int32_t> ids;      // the prompt's tokens (both kinds)
  std::vector<std::string> answers;  // text tasks: every answer must appear in the generation
  bool all_answers = false;          // score: the fraction of answers found (else: the first answer at the start)
  int64_t max_new_tokens = 0;        // text tasks: generation budget
  std::vector<int64_t> query_positions;  // id mqar: position of each query key (its value follows at +1)
  std::vector<int32_t> query_values;
};

// Every task name, in the order of docs/eval.md; task_has_depth(): whether its needle depth is swept (not cwe).
const std::vector<std::string>& task_names();
bool task_has_depth(const std::string& task);
bool is_task(const std::string& task);
// Tokens kept for the answer of a text task (the prompt gets length minus this).
int64_t answer_budget(const std::string& task);

struct SampleSpec {
  std::string task;
  int64_t length = 0;
  double depth = -1;
  uint64_t seed = 1;
  int64_t index = 0;
};

// A text task's sample; invalid_argument naming the task when even an empty haystack does not fit `length`.
Sample make_text_sample(const SampleSpec& spec, const Encoder& encode);
// An id-level MQAR sample for a model of `vocab_size` ids (BOS, SEP = vocab-3, vocab-2; keys below half the content
// ids, values above); n = (length - 2) / 4 pairs (>= 1, else invalid_argument).
Sample make_id_mqar_sample(const SampleSpec& spec, int64_t vocab_size);

}  // namespace flashkit::eval
