// Limits that keep a hostile chat template (tokenizer_config.json is untrusted input) from crashing or
// exhausting the process: every one is checked before the work or the allocation it guards, and exceeding one
// throws flashkit::Error(invalid_argument) with the template position. Real templates stay far below them.
#pragma once
#include <cstddef>
#include <cstdint>

namespace flashkit::chat {

// Parser: the deepest nesting of a template, counted both as statements inside statements ({% if %} in
// {% for %} ...) and as the height of one expression tree (parentheses, brackets, `not`, unary minus, and each
// link of a chain such as a + b + c or x|f|g). Parsing, evaluation and destruction of the tree all recurse
// once per level, so this bounds their stack use. Real templates nest under 30; CPython's own parser stops at
// 200 nested parentheses.
inline constexpr int kMaxTemplateNesting = 200;

// Render-time budget. The defaults suit a chat REPL or a server rendering untrusted templates; callers may
// pass tighter (the fuzzer does) or looser ones.
struct RenderLimits {
  // Work units: one per expression evaluated and statement executed, one per loop iteration and per list item
  // a builtin visits or produces (range, `*`, filters), and one per 256 bytes of string a step produces.
  // 10M units is about a second of work on one core; 1000 messages of 2 KB each (~500k tokens) through the
  // Llama 3.1, Gemma 3 or Qwen3 template cost ~100k.
  uint64_t max_steps = 10'000'000;
  // The rendered text and any one string built on the way. A prompt is text for a model's context window;
  // 16 MiB is ~4M tokens, far beyond any context, and small enough to allocate safely.
  size_t max_output_bytes = size_t{16} << 20;
  // Items of any one list built on the way (range, `*`, `+`, split, a string's characters, ...). An item takes
  // ~110 bytes, so 256k items is ~28 MiB; real templates build lists of a few messages or tools.
  size_t max_list_items = size_t{1} << 18;
  // Nesting of values (lists in lists, dicts in dicts, including JSON messages) and of evaluations in flight
  // (each macro call adds its body's nesting). Printing, comparing and freeing a value recurse once per level.
  int max_value_depth = 200;
  int max_eval_depth = 1000;
};

}  // namespace flashkit::chat
