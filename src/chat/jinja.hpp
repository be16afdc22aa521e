// A Jinja2 subset interpreter, sufficient for the chat templates Hugging Face checkpoints carry
// (Gemma 2/3, Llama 3.x, Qwen2.5/3 and the like), configured the way transformers configures jinja2 for
// apply_chat_template: trim_blocks, lstrip_blocks, loop controls, an immutable sandbox (no mutating list/dict
// methods), default (non-strict) undefined values. docs/chat-templates.md lists the subset and the limits.
//
// Supported: {{ }}, {% if/elif/else %}, {% for a[, b] in x [if cond] %} with else and loop.* (index,
// index0, revindex, revindex0, first, last, length, previtem, nextitem, cycle), {% set %} (names, tuples,
// namespace attributes, block set), {% macro %}, {% filter %}, {% break/continue %}, {% generation %}, {# #},
// whitespace control (-/+), literals (strings with Python escapes, ints, floats, booleans, none, lists, tuples,
// dicts), + - * / // % ** ~, comparisons (chained), and/or/not, in/not in, `if else` expressions, attribute,
// subscript and slice access, filters and tests (filters.cpp), string/dict methods (builtins.cpp), and the
// globals range, namespace, dict, raise_exception, strftime_now.
//
// The engine is split along its seams: value.hpp (the dynamic value), lexer, parser (ast.hpp), builtins and
// filters, render.cpp (the interpreter); limits.hpp holds every limit a hostile template runs into.
//
// Errors (syntax, type, limits, raise_exception) throw flashkit::Error(invalid_argument) whose message carries
// "line L, column C" of the template position; raise_exception's message is included verbatim.
#pragma once
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "chat/lexer.hpp"
#include "chat/limits.hpp"
#include "chat/value.hpp"

namespace flashkit::chat::jinja {

class Template {
 public:
  using Options = TemplateOptions;
  // Parses the template; throws flashkit::Error with line/column on syntax errors and on nesting deeper than
  // kMaxTemplateNesting.
  explicit Template(std::string_view source, Options options);
  explicit Template(std::string_view source) : Template(source, Options{}) {}
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with the given variables (a dict Value; later keys override globals). Globals available to every
  // template: range, namespace, dict, raise_exception, strftime_now (clock: now, or the current time).
  // Exceeding `limits` throws flashkit::Error before the work or allocation that would exceed them.
  std::string render(const Value& variables, std::optional<std::time_t> now = std::nullopt,
                     const RenderLimits& limits = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashkit::chat::jinja
