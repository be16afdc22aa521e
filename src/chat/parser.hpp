// The parser: tokens -> syntax tree (ast.hpp), by recursive descent with jinja2's operator precedence. Trees
// nested deeper than kMaxTemplateNesting (limits.hpp) are refused with a clear error, so neither parsing nor
// evaluating nor freeing a hostile template can overflow the stack.
#pragma once
#include <vector>

#include "chat/ast.hpp"
#include "chat/lexer.hpp"

namespace flashkit::chat::jinja {

Body parse(std::vector<Token> tokens);

}  // namespace flashkit::chat::jinja
