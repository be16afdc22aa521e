// The lexer: template source -> tokens. Text between tags, {{ }} / {% %} delimiters with their whitespace
// control (-/+, trim_blocks, lstrip_blocks), names, numbers, string literals (Python escapes) and operators.
// Comments are dropped here. Every token carries its line and column for error messages.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "chat/diagnostics.hpp"

namespace flashkit::chat::jinja {

// How jinja2 is configured (transformers: trim_blocks and lstrip_blocks on).
struct TemplateOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

enum class Tok { text, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct Token {
  Tok type;
  std::string value;
  Pos pos;
};

std::vector<Token> lex(std::string_view source, const TemplateOptions& options);

}  // namespace flashkit::chat::jinja
