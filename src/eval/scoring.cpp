// Exact-match scoring (scoring.hpp).
#include "eval/scoring.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

#include "flashkit/error.hpp"

namespace flashkit::eval {

namespace {

bool word_char(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (unsigned char c : s) {
    if (word_char(c)) {
      cur += char(c);
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

}  // namespace

double score_text(const Sample& sample, const std::string& generation) {
  if (sample.answers.empty()) fail(Status::invalid_argument, "score_text: the sample has no answers");
  const std::vector<std::string> w = words(generation);
  if (!sample.all_answers) return !w.empty() && w.front() == sample.answers.front() ? 1.0 : 0.0;
  int64_t found = 0;
  for (const auto& a : sample.answers) found += std::find(w.begin(), w.end(), a) != w.end();
  return double(found) / double(sample.answers.size());
}

double score_ids(const Sample& sample, std::span<const int32_t> predicted) {
  if (predicted.size() != sample.query_values.size())
    fail(Status::invalid_argument, "score_ids: " + std::to_string(predicted.size()) + " predictions for " +
                                       std::to_string(sample.query_values.size()) + " queries");
  if (predicted.empty()) return 0;
  int64_t right = 0;
  for (size_t i = 0; i < predicted.size(); ++i) right += predicted[i] == sample.query_values[i];
  return double(right) / double(predicted.size());
}

}  // namespace flashkit::eval
