// The shipped tokenizer's chat template (models/tokenizer/tokenizer_config.json, written by the BPE trainer)
// rendered by flashkit equals the renders in tests/data/chat/shipped_tokenizer.json (jinja2 as transformers sets
// it up; tools/gpu/train_hf_check.py checks transformers' apply_chat_template against the same file).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_template.hpp"
#include "flashkit/tokenizer.hpp"

namespace {

using nlohmann::json;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(ShippedTemplate, RendersAsTransformers) {
  const std::string data = std::string(FLASHKIT_TEST_DATA) + "/chat/shipped_tokenizer.json";
  const std::string tok_dir = std::string(FLASHKIT_TEST_DATA) + "/../../models/tokenizer";
  const json cases = json::parse(slurp(data));
  const flashkit::Tokenizer tok = flashkit::Tokenizer::from_dir(tok_dir);
  // The stored file was rendered from the tokenizer's own template: a retrained tokenizer must regenerate it.
  ASSERT_EQ(tok.chat_template(), cases.at("template").get<std::string>())
      << "regenerate with tools/gpu/train_hf_check.py --write-chat-cases";
  const flashkit::chat::ChatTemplate tmpl(tok.chat_template());
  flashkit::chat::ChatTemplateOptions o;
  o.bos_token = cases.at("bos_token").get<std::string>();
  o.eos_token = cases.at("eos_token").get<std::string>();
  ASSERT_GE(cases.at("cases").size(), 8u);
  for (const json& c : cases.at("cases")) {
    o.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    const nlohmann::ordered_json msgs = nlohmann::ordered_json::parse(c.at("messages").dump());
    EXPECT_EQ(tmpl.render_json(msgs, o), c.at("output").get<std::string>()) << c.at("name");
  }
}

}  // namespace
