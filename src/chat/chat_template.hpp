// Chat templates: renders the Jinja chat template a Hugging Face checkpoint carries (tokenizer_config.json's
// `chat_template`) for a conversation, the way transformers' apply_chat_template does (tokenize=False):
// variables messages, add_generation_prompt, bos_token, eos_token, tools=None, documents=None, plus any
// extra keyword variables (date_string for Llama 3.1+, enable_thinking for Qwen3, ...); globals
// raise_exception and strftime_now. See chat/jinja.hpp and docs/chat-templates.md for the supported Jinja
// subset and the limits a render runs under (chat/limits.hpp).
#pragma once
#include <ctime>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja.hpp"
#include "chat/limits.hpp"

namespace flashkit::chat {

struct ChatMessage {
  std::string role, content;
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;
  // Extra template variables (override the defaults above), e.g. {"date_string", "26 Jul 2024"}.
  std::vector<std::pair<std::string, jinja::Value>> extra;
  // Clock for strftime_now (default: the current local time).
  std::optional<std::time_t> now;
  // Work, output size and nesting a render may use (chat/limits.hpp); exceeding them is a flashkit::Error.
  RenderLimits limits;
};

// A parsed chat template, for rendering many conversations (chat REPL) without re-parsing.
class ChatTemplate {
 public:
  explicit ChatTemplate(std::string_view jinja_template);  // throws flashkit::Error (line/column) on syntax errors
  std::string render(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options) const;
  // Messages as JSON objects ({"role", "content"} plus any fields a template reads: tool_calls,
  // reasoning_content, content parts as lists, ...).
  // Prefer ordered_json: it keeps each message's key order, as Python dicts do (plain json sorts keys).
  std::string render_json(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options) const;
  std::string render_json(const nlohmann::json& messages, const ChatTemplateOptions& options) const;

 private:
  jinja::Template tmpl_;
};

// One-shot rendering. Template errors and raise_exception (e.g. Gemma's "Conversation roles must alternate
// user/assistant/user/assistant/...") throw flashkit::Error(invalid_argument) carrying the template's message
// and the line/column.
std::string render_chat_template(std::string_view jinja_template, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, std::string_view bos_token, std::string_view eos_token);
std::string render_chat_template(std::string_view jinja_template, const std::vector<ChatMessage>& messages,
                                 const ChatTemplateOptions& options);

// tokenizer_config.json helpers.
// The chat template string: `chat_template` as a string, or, when it is a list of {name, template}, the one
// called `name` (transformers' default is "default"). Throws invalid_argument when there is none.
std::string chat_template_from_config(const nlohmann::json& tokenizer_config, std::string_view name = "default");
// A special token's text: "..." or {"content": "...", ...} (AddedToken); "" for null/absent.
std::string special_token_text(const nlohmann::json& token);

}  // namespace flashkit::chat
