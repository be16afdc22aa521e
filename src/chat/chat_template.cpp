#include "chat/chat_template.hpp"

#include <nlohmann/json.hpp>

#include "flashkit/error.hpp"

namespace flashkit::chat {
namespace {

jinja::Value variables(jinja::Value messages, const ChatTemplateOptions& o) {
  jinja::Value v = jinja::Value::dict();
  v.set("messages", std::move(messages));
  v.set("tools", jinja::Value::none());
  v.set("documents", jinja::Value::none());
  v.set("add_generation_prompt", jinja::Value(o.add_generation_prompt));
  v.set("bos_token", jinja::Value(o.bos_token));
  v.set("eos_token", jinja::Value(o.eos_token));
  for (const auto& [k, x] : o.extra) v.set(k, x);
  return v;
}

jinja::Value message_list(const std::vector<ChatMessage>& messages) {
  jinja::List l;
  l.reserve(messages.size());
  for (const auto& m : messages) {
    jinja::Value d = jinja::Value::dict();
    d.set("role", jinja::Value(m.role));
    d.set("content", jinja::Value(m.content));
    l.push_back(std::move(d));
  }
  return jinja::Value(std::move(l));
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view jinja_template) : tmpl_(jinja_template) {}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options) const {
  return tmpl_.render(variables(message_list(messages), options), options.now, options.limits);
}

std::string ChatTemplate::render_json(const nlohmann::ordered_json& messages,
                                      const ChatTemplateOptions& options) const {
  if (!messages.is_array()) fail(Status::invalid_argument, "chat template: messages must be a JSON array");
  jinja::Value list = jinja::from_json(messages, options.limits.max_value_depth);
  return tmpl_.render(variables(std::move(list), options), options.now, options.limits);
}

std::string ChatTemplate::render_json(const nlohmann::json& messages, const ChatTemplateOptions& options) const {
  if (!messages.is_array()) fail(Status::invalid_argument, "chat template: messages must be a JSON array");
  jinja::Value list = jinja::from_json(messages, options.limits.max_value_depth);
  return tmpl_.render(variables(std::move(list), options), options.now, options.limits);
}

std::string render_chat_template(std::string_view jinja_template, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, std::string_view bos_token, std::string_view eos_token) {
  ChatTemplateOptions o;
  o.add_generation_prompt = add_generation_prompt;
  o.bos_token = std::string(bos_token);
  o.eos_token = std::string(eos_token);
  return ChatTemplate(jinja_template).render(messages, o);
}

std::string render_chat_template(std::string_view jinja_template, const std::vector<ChatMessage>& messages,
                                 const ChatTemplateOptions& options) {
  return ChatTemplate(jinja_template).render(messages, options);
}

std::string chat_template_from_config(const nlohmann::json& config, std::string_view name) {
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null())
    fail(Status::invalid_argument, "tokenizer_config.json has no chat_template");
  const auto& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    std::string names;
    for (const auto& e : t) {
      if (!e.is_object() || !e.contains("name") || !e.contains("template")) continue;
      if (e["name"].is_string() && e["name"].get<std::string>() == name && e["template"].is_string())
        return e["template"].get<std::string>();
      if (e["name"].is_string()) names += (names.empty() ? "" : ", ") + e["name"].get<std::string>();
    }
    fail(Status::invalid_argument,
         "tokenizer_config.json: no chat template named '" + std::string(name) + "' (has: " + names + ")");
  }
  fail(Status::invalid_argument, "tokenizer_config.json: chat_template must be a string or a list of {name, template}");
}

std::string special_token_text(const nlohmann::json& token) {
  if (token.is_string()) return token.get<std::string>();
  if (token.is_object() && token.contains("content") && token["content"].is_string())
    return token["content"].get<std::string>();
  return {};
}

}  // namespace flashkit::chat
