// Parses tokenizer.json in one SAX pass: everything becomes an nlohmann::json tree except model.vocab and
// model.merges (most of the file: 262k entries and 514k merges for Gemma 3), which go straight into flat
// vectors. That halves the load time against building the full tree first.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace flashkit::tok {

struct TokenizerJson {
  nlohmann::json tree;  // the document without model.vocab / model.merges
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  bool has_vocab = false, has_merges = false;
};

// Throws flashkit::Error (invalid_argument) naming the byte offset of a syntax error.
TokenizerJson parse_tokenizer_json(std::string_view text);

}  // namespace flashkit::tok
