// Chat templates and the Jinja interpreter: real Gemma / Llama / Qwen templates rendered byte for byte as
// transformers renders them (tests/data/chat/expected.json, from tools/chat/render_expected.py), feature
// cases checked against jinja2's output, and the C++-only behaviour (errors with positions, strftime_now,
// tokenizer_config helpers).
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.hpp"
#include "chat/jinja.hpp"
#include "flashkit/error.hpp"

using flashkit::chat::ChatMessage;
using flashkit::chat::ChatTemplate;
using flashkit::chat::ChatTemplateOptions;
using flashkit::chat::render_chat_template;
namespace jinja = flashkit::chat::jinja;
using json = nlohmann::ordered_json;

namespace {

const std::string kDir = std::string(FLASHKIT_TEST_DATA) + "/chat/";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const json& expected() {
  static const json j = json::parse(read_file(kDir + "expected.json"));
  return j;
}

std::string render(const std::string& tmpl, const json& vars = json::object()) {
  return jinja::Template(tmpl).render(jinja::from_json(vars));
}

std::string error_of(const std::string& tmpl, const json& vars = json::object()) {
  try {
    render(tmpl, vars);
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::invalid_argument);
    return e.what();
  }
  return "<no error>";
}

// First differing byte, for readable failures.
std::string diff(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  return "first difference at byte " + std::to_string(i) + ": want ..." +
         json(want.substr(i > 20 ? i - 20 : 0, 60)).dump() + " got ..." +
         json(got.substr(i > 20 ? i - 20 : 0, 60)).dump();
}

ChatTemplateOptions options_of(const json& c) {
  ChatTemplateOptions o;
  o.add_generation_prompt = c["add_generation_prompt"].get<bool>();
  o.bos_token = c["bos_token"].get<std::string>();
  o.eos_token = c["eos_token"].get<std::string>();
  for (auto it = c["extra"].begin(); it != c["extra"].end(); ++it)
    o.extra.emplace_back(it.key(), jinja::from_json(it.value()));
  return o;
}

}  // namespace

TEST(ChatTemplate, RealTemplatesMatchTransformersByteForByte) {
  const auto& cases = expected()["cases"];
  ASSERT_GE(cases.size(), 100u);
  std::map<std::string, ChatTemplate> parsed;
  size_t rendered = 0, raised = 0;
  for (const auto& c : cases) {
    const std::string name = c["template"].get<std::string>();
    if (!parsed.count(name)) parsed.emplace(name, ChatTemplate(read_file(kDir + name)));
    const ChatTemplate& t = parsed.at(name);
    const std::string label = name + "/" + c["conversation"].get<std::string>() +
                              " add_generation_prompt=" + c["add_generation_prompt"].dump() +
                              " extra=" + c["extra"].dump();
    SCOPED_TRACE(label);
    const ChatTemplateOptions o = options_of(c);
    if (c.contains("error")) {
      try {
        t.render_json(c["messages"], o);
        ADD_FAILURE() << "expected the template to raise: " << c["error"];
      } catch (const flashkit::Error& e) {
        EXPECT_NE(std::string(e.what()).find(c["error"].get<std::string>()), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("line "), std::string::npos) << e.what();
      }
      ++raised;
      continue;
    }
    const std::string want = c["output"].get<std::string>();
    const std::string got = t.render_json(c["messages"], o);
    EXPECT_EQ(got, want) << diff(want, got);
    // The role/content API gives the same bytes whenever the messages carry nothing else.
    bool plain = true;
    std::vector<ChatMessage> msgs;
    for (const auto& m : c["messages"]) {
      plain = plain && m.size() == 2 && m["content"].is_string();
      if (plain) msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    if (plain) {
      EXPECT_EQ(t.render(msgs, o), want);
    }
    ++rendered;
  }
  EXPECT_GE(raised, 10u);
  RecordProperty("rendered", static_cast<int>(rendered));
}

TEST(ChatTemplate, EveryTemplateFileHasCases) {
  std::set<std::string> names;
  for (const auto& c : expected()["cases"]) names.insert(c["template"].get<std::string>());
  for (const char* n : {"gemma3.jinja", "gemma2.jinja", "llama3.jinja", "llama3.1.jinja", "llama3.2.jinja",
                        "qwen2.5.jinja", "qwen3.jinja"})
    EXPECT_TRUE(names.count(n)) << n;
}

TEST(ChatTemplate, CorpusOfRealTemplatesMatchesJinja2) {
  // ~100 chat templates of many model families (corpus_templates.json), two conversations each.
  const json corpus = json::parse(read_file(kDir + "corpus_templates.json"));
  std::vector<std::string> templates;  // by index (a model name can occur more than once)
  for (const auto& e : corpus["templates"]) templates.push_back(e["template"].get<std::string>());
  const auto& cases = expected()["corpus"];
  ASSERT_GE(cases.size(), 150u);
  ChatTemplateOptions base;
  base.bos_token = expected()["corpus_kwargs"]["bos_token"].get<std::string>();
  base.eos_token = expected()["corpus_kwargs"]["eos_token"].get<std::string>();
  base.extra.emplace_back("date_string", jinja::Value(expected()["corpus_kwargs"]["date_string"].get<std::string>()));
  size_t matched = 0;
  for (const auto& c : cases) {
    const std::string model = c["model"].get<std::string>();
    SCOPED_TRACE(model + "/" + c["conversation"].get<std::string>());
    ChatTemplateOptions o = base;
    o.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    const json& messages = expected()["corpus_conversations"][c["conversation"].get<std::string>()];
    std::string got;
    try {
      got = ChatTemplate(templates.at(c["index"].get<size_t>())).render_json(messages, o);
    } catch (const flashkit::Error& e) {
      EXPECT_TRUE(c.contains("error")) << "threw: " << e.what();
      continue;
    }
    if (c.contains("error")) {
      ADD_FAILURE() << "jinja2 raised (" << c["error"] << ") but the interpreter rendered";
      continue;
    }
    const std::string want = c["output"].get<std::string>();
    EXPECT_EQ(got, want) << diff(want, got);
    matched += got == want;
  }
  RecordProperty("matched", static_cast<int>(matched));
}

TEST(ChatTemplate, FeatureCasesMatchJinja2) {
  const auto& cases = expected()["features"];
  ASSERT_GE(cases.size(), 30u);
  for (const auto& c : cases) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name + ": " + c["template"].get<std::string>());
    if (c.contains("error")) {
      EXPECT_NE(error_of(c["template"].get<std::string>(), c["variables"]), "<no error>");
      continue;
    }
    std::string got;
    try {
      got = render(c["template"].get<std::string>(), c["variables"]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
      continue;
    }
    const std::string want = c["output"].get<std::string>();
    EXPECT_EQ(got, want) << diff(want, got);
  }
}

TEST(ChatTemplate, SimpleApiGemma3) {
  const std::string t = read_file(kDir + "gemma3.jinja");
  const std::vector<ChatMessage> msgs = {{"system", "Be terse."}, {"user", "  Hi  "}};
  EXPECT_EQ(render_chat_template(t, msgs, true, "<bos>", "<eos>"),
            "<bos><start_of_turn>user\nBe terse.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(render_chat_template(t, msgs, false, "<bos>", "<eos>"),
            "<bos><start_of_turn>user\nBe terse.\n\nHi<end_of_turn>\n");
}

TEST(ChatTemplate, RaiseExceptionCarriesMessageAndPosition) {
  const std::string t = read_file(kDir + "gemma3.jinja");
  try {
    render_chat_template(t, {{"user", "a"}, {"user", "b"}}, true, "<bos>", "<eos>");
    FAIL() << "no error";
  } catch (const flashkit::Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("Conversation roles must alternate user/assistant/user/assistant/..."), std::string::npos) << w;
    EXPECT_NE(w.find("line 19"), std::string::npos) << w;  // the raise_exception call in gemma3.jinja
    EXPECT_EQ(e.status(), flashkit::Status::invalid_argument);
  }
}

TEST(ChatTemplate, Llama32UsesStrftimeNowWithoutDateString) {
  const std::string t = read_file(kDir + "llama3.2.jinja");
  ChatTemplateOptions o;
  o.bos_token = "<|begin_of_text|>";
  o.now = 1753000000;  // 2025-07-20 (UTC); rendered in local time
  std::tm tm{};
  const std::time_t now = *o.now;
  localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%d %b %Y", &tm);
  const std::string out = ChatTemplate(t).render({{"user", "hi"}}, o);
  EXPECT_NE(out.find(std::string("Today Date: ") + buf + "\n"), std::string::npos) << out;
  o.extra.emplace_back("date_string", jinja::Value("01 Jan 2030"));
  EXPECT_NE(ChatTemplate(t).render({{"user", "hi"}}, o).find("Today Date: 01 Jan 2030\n"), std::string::npos);
}

TEST(ChatTemplate, SyntaxErrorsReportLineAndColumn) {
  auto has = [](const std::string& what, const std::string& part) { return what.find(part) != std::string::npos; };
  std::string e = error_of("ok\n{% if x %}\nno end");
  EXPECT_TRUE(has(e, "endif")) << e;
  e = error_of("line1\n  {{ a + }}");
  EXPECT_TRUE(has(e, "line 2")) << e;
  EXPECT_TRUE(has(e, "column 10")) << e;
  e = error_of("{% frobnicate %}");
  EXPECT_TRUE(has(e, "frobnicate")) << e;
  e = error_of("{{ 'unterminated }}");
  EXPECT_TRUE(has(e, "unterminated")) << e;
  e = error_of("{{ x | nosuchfilter }}");
  EXPECT_TRUE(has(e, "nosuchfilter")) << e;
  e = error_of("{{ x is nosuchtest }}");
  EXPECT_TRUE(has(e, "nosuchtest")) << e;
  e = error_of("{% for x in y %}{% endif %}");
  EXPECT_TRUE(has(e, "endfor")) << e;
  e = error_of("\n\n   {{ 1 + 'a' }}");
  EXPECT_TRUE(has(e, "line 3")) << e;
  e = error_of("{{ none.attr }}{{ a.b.c }}");
  EXPECT_TRUE(has(e, "'a' is undefined")) << e;
  e = error_of("{% set x = 1 %}{% set x.y = 2 %}");
  EXPECT_TRUE(has(e, "namespace")) << e;
  e = error_of("{{ raise_exception('custom message') }}");
  EXPECT_TRUE(has(e, "custom message")) << e;
  EXPECT_TRUE(has(e, "line 1, column")) << e;
}

TEST(ChatTemplate, GenerationBlockRendersItsBody) {
  // transformers' {% generation %} extension (assistant-token masks): rendering is unaffected.
  EXPECT_EQ(render("{% for m in ms %}{% generation %}[{{ m }}]{% endgeneration %}{% endfor %}", {{"ms", {"a", "b"}}}),
            "[a][b]");
}

TEST(ChatTemplate, NamespaceIsSharedAcrossLoopScopes) {
  EXPECT_EQ(
      render("{% set ns = namespace(items=[]) %}{% for x in [1,2] %}{% set ns.items = ns.items + [x] %}{% endfor %}"
             "{{ ns.items }}"),
      "[1, 2]");
}

TEST(ChatTemplate, ValuesFromJsonAndToJson) {
  const json j = json::parse(R"({"b": [1, 2.5, "x", null, true], "a": {"nested": "é"}})");
  const jinja::Value v = jinja::from_json(j);
  EXPECT_EQ(jinja::to_json(v), R"({"b": [1, 2.5, "x", null, true], "a": {"nested": "é"}})");
  EXPECT_EQ(jinja::to_str(v), R"({'b': [1, 2.5, 'x', None, True], 'a': {'nested': 'é'}})");
}

TEST(ChatTemplate, TokenizerConfigHelpers) {
  using flashkit::chat::chat_template_from_config;
  using flashkit::chat::special_token_text;
  EXPECT_EQ(chat_template_from_config(json{{"chat_template", "{{ x }}"}}), "{{ x }}");
  const json listed = {{"chat_template", json::array({{{"name", "tool_use"}, {"template", "T"}},
                                                      {{"name", "default"}, {"template", "D"}}})}};
  EXPECT_EQ(chat_template_from_config(listed), "D");
  EXPECT_EQ(chat_template_from_config(listed, "tool_use"), "T");
  EXPECT_THROW(chat_template_from_config(listed, "rag"), flashkit::Error);
  EXPECT_THROW(chat_template_from_config(json{{"bos_token", "<s>"}}), flashkit::Error);
  EXPECT_EQ(special_token_text(json("<bos>")), "<bos>");
  EXPECT_EQ(special_token_text(json{{"content", "<s>"}, {"lstrip", false}}), "<s>");
  EXPECT_EQ(special_token_text(json(nullptr)), "");
}
