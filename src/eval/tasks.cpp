// Task names and the id-level MQAR generator (tasks.hpp); the text tasks are in text_tasks.cpp.
#include "eval/tasks.hpp"

#include <algorithm>

#include "eval/haystack.hpp"
#include "flashkit/error.hpp"

namespace flashkit::eval {

const std::vector<std::string>& task_names() {
  static const std::vector<std::string> names = {"passkey",         "niah_single", "niah_multikey",
                                                 "niah_multivalue", "vt",          "cwe",
                                                 "mqar"};
  return names;
}

bool is_task(const std::string& task) {
  const auto& n = task_names();
  return std::find(n.begin(), n.end(), task) != n.end();
}

bool task_has_depth(const std::string& task) { return is_task(task) && task != "cwe"; }

int64_t answer_budget(const std::string& task) {
  if (task == "niah_multivalue" || task == "vt" || task == "cwe") return 40;  // several answers in one line
  if (task == "mqar") return 6;
  return 12;
}

Sample make_id_mqar_sample(const SampleSpec& spec, int64_t vocab_size) {
  if (vocab_size < 16) fail(Status::invalid_argument, "id-level mqar needs a vocabulary of at least 16 ids");
  const int64_t n = (spec.length - 2) / 4;
  if (n < 1)
    fail(Status::invalid_argument,
         "--lengths: " + std::to_string(spec.length) + " tokens is too short for id-level mqar (at least 6)");
  // The layout of prepare-data --synthetic mqar (src/train/data.cpp), so that models trained on it are evaluated on
  // what they saw: BOS, SEP at vocab-3, vocab-2; keys from the lower half of the content ids, values from the upper.
  const int32_t bos = int32_t(vocab_size - 3), sep = int32_t(vocab_size - 2);
  const int64_t content = vocab_size - 3, half = content / 2;
  if (n > half)
    fail(Status::invalid_argument, "--lengths: " + std::to_string(spec.length) + " tokens needs " + std::to_string(n) +
                                       " distinct keys, more than the " + std::to_string(half) + " of this vocabulary");
  Rng rng(mix_seed(spec.seed, 0x3A9, uint64_t(spec.length), uint64_t(spec.index)));
  std::vector<int32_t> keys, vals;
  std::vector<char> used(size_t(half), 0);
  while (int64_t(keys.size()) < n) {
    const int64_t k = int64_t(rng.below(uint64_t(half)));
    if (!used[size_t(k)]) used[size_t(k)] = 1, keys.push_back(int32_t(k));
  }
  for (int64_t i = 0; i < n; ++i) vals.push_back(int32_t(half + int64_t(rng.below(uint64_t(content - half)))));
  Sample s;
  s.task = "mqar";
  s.length = spec.length;
  s.ids.push_back(bos);
  for (int64_t i = 0; i < n; ++i) s.ids.push_back(keys[size_t(i)]), s.ids.push_back(vals[size_t(i)]);
  s.ids.push_back(sep);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(rng.below(uint64_t(i + 1)))]);
  for (int64_t i : order) {
    s.query_positions.push_back(int64_t(s.ids.size()));
    s.query_values.push_back(vals[size_t(i)]);
    s.ids.push_back(keys[size_t(i)]);
    s.ids.push_back(vals[size_t(i)]);
  }
  return s;
}

}  // namespace flashkit::eval
