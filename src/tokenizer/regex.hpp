// The regexes of tokenizer.json (written for Oniguruma, the engine of Hugging Face's Rust tokenizers),
// compiled with PCRE2 in UTF + UCP mode with JIT. The pattern is first rewritten so that the two engines
// agree on what the models' patterns use: \s / \S are the White_Space property, (?i:...) folds ASCII
// letters only, `.` excludes only \n.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flashkit::tok {

class Regex {
 public:
  explicit Regex(const std::string& oniguruma_pattern);  // throws flashkit::Error on a bad pattern
  Regex(Regex&&) noexcept;
  ~Regex();
  // Non-overlapping, non-empty matches of valid UTF-8 `text`, left to right, as [begin, end) byte offsets.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  const std::string& translated() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The pattern rewrite on its own (exposed for tests).
std::string translate_oniguruma(const std::string& pattern);

}  // namespace flashkit::tok
