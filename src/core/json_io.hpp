// Every JSON file flashkit reads goes through here (config.json, tokenizer.json, tokenizer_config.json,
// generation_config.json, safetensors headers and index files, GGUF side files): the text is bounded in size,
// its nesting depth is checked by a flat scan *before* any parser or tree walker sees it (nlohmann's tree copies,
// comparisons and our Sequence parsers recurse per level, so 50,000 nested arrays would overflow the stack), and
// every parse error becomes flashkit::Error(invalid_argument) naming the file.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/limits.hpp"

namespace flashkit::json_io {

// Throws invalid_argument "<where>: JSON nested deeper than <max_depth> levels (at byte N)" when more than
// max_depth arrays/objects are open at once. Strings (and escapes in them) are skipped; anything else malformed
// is left to the parser.
void check_depth(std::string_view text, const std::string& where, int max_depth = limits::kMaxJsonDepth);

// check_depth, then a plain (non-callback) nlohmann parse; errors name `where` and say "invalid JSON".
nlohmann::json parse(std::string_view text, const std::string& where, int max_depth = limits::kMaxJsonDepth);

// The bytes of a regular file of at most max_bytes; throws invalid_argument naming the path otherwise (missing,
// a directory or FIFO, too large, unreadable).
std::string read_file(const std::filesystem::path& path, uint64_t max_bytes);

// read_file + parse, `where` being the path.
nlohmann::json read_json_file(const std::filesystem::path& path, uint64_t max_bytes = limits::kMaxConfigFileBytes,
                              int max_depth = limits::kMaxJsonDepth);

}  // namespace flashkit::json_io
