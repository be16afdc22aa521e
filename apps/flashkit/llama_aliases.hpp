// llama.cpp's multi-letter single-dash options, which CLI11 cannot name (its short names are one letter).
#pragma once
#include <string>
#include <vector>

namespace flashkit::cli {

// The arguments with llama.cpp's spellings made flashkit's: -ngl -> --n-gpu-layers, and `generate ... -cnv`
// (conversation mode) -> `chat ...`. Other arguments are kept as they are, in order.
std::vector<std::string> rewrite_llama_aliases(int argc, const char* const* argv);

}  // namespace flashkit::cli
