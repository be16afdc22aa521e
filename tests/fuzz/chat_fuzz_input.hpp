// What the chat-template fuzzer does with one input, shared with the replay test (tests/chat/
// test_chat_fuzz_corpus.cpp): parse the bytes as a chat template and render a fixed conversation (system, user,
// assistant with a tool call, tool result, user; two tools; fixed clock) under a tight render budget, so each
// input runs in milliseconds. flashkit::Error is the accepted failure; anything else (another exception, a
// crash, a sanitizer report, a hang) is a bug.
#pragma once
#include <cstdint>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "chat/chat_template.hpp"
#include "chat/limits.hpp"

namespace fk_fuzz {

inline flashkit::chat::RenderLimits chat_fuzz_limits() {
  flashkit::chat::RenderLimits l;
  l.max_steps = 200'000;
  l.max_output_bytes = size_t{1} << 20;
  l.max_list_items = size_t{1} << 14;
  return l;
}

// Returns the rendered text; throws flashkit::Error when the template is bad or exceeds the limits.
inline std::string render_fuzz_template(std::string_view text) {
  using json = nlohmann::ordered_json;
  static const json messages = json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is the weather in Paris? \u00e9\u4e2d"},
    {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
     "tool_calls": [{"type": "function", "id": "c1",
                     "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
    {"role": "tool", "name": "get_weather", "tool_call_id": "c1", "content": "{\"temp\": 21.5}"},
    {"role": "user", "content": "Thanks!\n  Bye."}
  ])");
  static const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather forecast",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                    "required": ["city"]}}},
    {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}}
  ])");
  flashkit::chat::ChatTemplate tmpl(text);
  flashkit::chat::ChatTemplateOptions o;
  o.add_generation_prompt = true;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  o.now = std::time_t{1753000000};
  o.limits = chat_fuzz_limits();
  o.extra.emplace_back("tools", flashkit::chat::jinja::from_json(tools));
  o.extra.emplace_back("date_string", flashkit::chat::jinja::Value("26 Jul 2024"));
  o.extra.emplace_back("enable_thinking", flashkit::chat::jinja::Value(true));
  return tmpl.render_json(messages, o);
}

}  // namespace fk_fuzz
