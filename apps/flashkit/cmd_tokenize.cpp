// flashkit tokenize | detokenize (placeholder until the tokenizer lands).
#include "commands.hpp"
namespace flashkit::cli {
void add_tokenize_commands(CLI::App&) {}
}  // namespace flashkit::cli
