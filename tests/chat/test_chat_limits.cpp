// Hostile templates (tokenizer_config.json is untrusted input): deep nesting, integer edge cases, unbounded
// work and huge allocations must each end in a clear flashkit::Error -- never a crash, a hang, a wrapped
// integer or gigabytes allocated. The limits are chat/limits.hpp; docs/chat-templates.md documents them.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "chat/chat_template.hpp"
#include "chat/jinja.hpp"
#include "chat/limits.hpp"
#include "flashkit/error.hpp"

namespace jinja = flashkit::chat::jinja;
using flashkit::chat::kMaxTemplateNesting;
using flashkit::chat::RenderLimits;
using json = nlohmann::ordered_json;

namespace {

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::string render(const std::string& tmpl, const RenderLimits& limits = {}, const json& vars = json::object()) {
  return jinja::Template(tmpl).render(jinja::from_json(vars), std::nullopt, limits);
}

// The message of the flashkit::Error that parsing or rendering raises ("<no error>" when none; any other
// exception fails the test).
std::string error_of(const std::string& tmpl, const RenderLimits& limits = {}, const json& vars = json::object()) {
  try {
    render(tmpl, limits, vars);
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::invalid_argument);
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-flashkit exception: " << e.what();
    return e.what();
  }
  return "<no error>";
}

#define EXPECT_ERROR_HAS(tmpl, part)                                                            \
  do {                                                                                          \
    const std::string what_ = error_of(tmpl);                                                   \
    EXPECT_NE(what_.find(part), std::string::npos) << "template: " << std::string(tmpl).substr(0, 80) \
                                                   << "\nerror: " << what_;                     \
  } while (0)

const std::string kTooDeep = "nesting deeper than " + std::to_string(kMaxTemplateNesting);

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Nesting: each of these overflowed the stack (parse, render or freeing the tree) a few thousand levels deep.
// ---------------------------------------------------------------------------------------------------------
TEST(ChatLimits, DeeplyNestedTemplatesAreRefusedAtParseTime) {
  const int n = 5000;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"parentheses", "{{ " + repeat("(", n) + "1" + repeat(")", n) + " }}"},
      {"if", repeat("{% if true %}", n) + "x" + repeat("{% endif %}", n)},
      {"for", repeat("{% for x in [1] %}", n) + "x" + repeat("{% endfor %}", n)},
      {"not", "{{ " + repeat("not ", n) + "1 }}"},
      {"unary minus", "{{ " + repeat("-", n) + "1 }}"},
      {"chained +", "{{ 1" + repeat(" + 1", n) + " }}"},
      {"chained ~", "{{ 'a'" + repeat(" ~ 'a'", n) + " }}"},
      {"chained filters", "{{ 'a'" + repeat("|string", n) + " }}"},
      {"chained attributes", "{{ x" + repeat(".a", n) + " }}"},
      {"chained calls", "{{ f" + repeat("()", n) + " }}"},
      {"list literals", "{{ " + repeat("[", n) + repeat("]", n) + " }}"},
      {"dict literals", "{{ " + repeat("{'a': ", n) + "1" + repeat("}", n) + " }}"},
      {"conditional expressions", "{{ 1" + repeat(" if x else 1", n) + " }}"},
      {"set blocks", repeat("{% set a %}", n) + repeat("{% endset %}", n)},
  };
  for (const auto& [name, tmpl] : cases) {
    SCOPED_TRACE(name);
    const std::string e = error_of(tmpl);
    EXPECT_NE(e.find(kTooDeep), std::string::npos) << e;
    EXPECT_NE(e.find("line 1, column"), std::string::npos) << e;
  }
}

TEST(ChatLimits, NestingBelowTheLimitStillWorks) {
  const int n = kMaxTemplateNesting - 50;
  EXPECT_EQ(render("{{ " + repeat("(", n) + "7" + repeat(")", n) + " }}"), "7");
  EXPECT_EQ(render("{{ 0" + repeat(" + 1", n) + " }}"), std::to_string(n));
  EXPECT_EQ(render(repeat("{% if true %}", n) + "x" + repeat("{% endif %}", n)), "x");
  EXPECT_EQ(render("{{ " + repeat("[", n) + repeat("]", n) + "|length }}"), "1");
  EXPECT_EQ(render("{{ " + repeat("-", n) + "1 }}"), n % 2 ? "-1" : "1");
}

TEST(ChatLimits, DeepValuesAreRefusedWhenBuilt) {
  // Lists in lists built by a loop: printing, tojson and freeing would recurse once per level.
  const std::string build =
      "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}";
  const std::string too_deep = "nesting deeper than " + std::to_string(RenderLimits{}.max_value_depth);
  EXPECT_ERROR_HAS(build + "{{ ns.x }}", too_deep);
  EXPECT_ERROR_HAS(build + "{{ ns.x|tojson }}", too_deep);
  EXPECT_ERROR_HAS(build + "{{ ns.x == ns.x }}", too_deep);
  // The same through dicts, and through bound methods that hold their dict.
  EXPECT_ERROR_HAS("{% set ns = namespace(d={}) %}{% for i in range(5000) %}{% set ns.d = {'a': ns.d} %}{% endfor %}",
                   too_deep);
  EXPECT_ERROR_HAS("{% set ns = namespace(d={}) %}{% for i in range(5000) %}{% set ns.d = dict(a=ns.d.get) %}"
                   "{% endfor %}",
                   too_deep);
  // A namespace stored into itself: a cycle, refused once it looks too deep; printing it never recurses.
  EXPECT_ERROR_HAS("{% set ns = namespace() %}{% for i in range(1000) %}{% set ns.x = ns %}{% endfor %}", too_deep);
  EXPECT_ERROR_HAS("{% set ns = namespace() %}{% set ns.x = ns %}{{ ns|tojson }}", too_deep);
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.x = ns %}{{ ns }}"), "<Namespace>");
}

TEST(ChatLimits, LongChainsOfNamespacesAreFreedWithoutRecursion) {
  // Each namespace points at the next: the chain is as deep as the loop is long, yet every store looks shallow.
  // Freeing it by reference counting would recurse 400k levels; the render empties its namespaces one by one.
  const std::string tmpl =
      "{% set head = namespace(next=none) %}{% set st = namespace(tail=head) %}"
      "{% for i in range(200000) %}{% set n = namespace(next=none) %}{% set t = st.tail %}{% set t.next = n %}"
      "{% set st.tail = n %}{% endfor %}done";
  EXPECT_EQ(render(tmpl), "done");
}

TEST(ChatLimits, RecursiveMacrosStopAtTheEvaluationDepth) {
  const std::string e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(e.find("nesting deeper than " + std::to_string(RenderLimits{}.max_eval_depth)), std::string::npos) << e;
  // A few levels of recursion (templates that render nested JSON schemas do this) are fine.
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}({{ f(n - 1) }}){% endif %}{% endmacro %}{{ f(20) }}"),
            repeat("(", 20) + repeat(")", 20));
}

TEST(ChatLimits, DeepJsonMessagesAreRefused) {
  const json deep = json::parse(repeat("[", 5000) + repeat("]", 5000));
  const json messages = json::array({json{{"role", "user"}, {"content", deep}}});
  flashkit::chat::ChatTemplate t("{{ messages }}");
  try {
    t.render_json(messages, {});
    ADD_FAILURE() << "no error";
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than"), std::string::npos) << e.what();
  }
  EXPECT_THROW(jinja::from_json(deep), flashkit::Error);
}

// ---------------------------------------------------------------------------------------------------------
// Integers: int64 arithmetic whose exact result does not fit is an error, never a trap or a wrapped value.
// ---------------------------------------------------------------------------------------------------------
TEST(ChatLimits, IntegerOverflowIsAnError) {
  const std::string min = "(-9223372036854775807 - 1)";
  for (const std::string& expr : std::vector<std::string>{min + " // -1", "9223372036854775807 + 1", min + " - 1", "4611686018427387904 * 2", "-" + min,
        "2 ** 63", "3 ** 1000000000000000", min + "|abs", "1e300|int", "'99999999999999999999'|int",
        "[1, 9223372036854775807]|sum(start=1)"}) {
    SCOPED_TRACE(expr);
    const std::string e = error_of("{{ " + expr + " }}");
    EXPECT_NE(e.find("integer overflow"), std::string::npos) << e;
  }
}

TEST(ChatLimits, IntegerEdgeCasesGivePythonsAnswers) {
  const std::string min = "(-9223372036854775807 - 1)";
  EXPECT_EQ(render("{{ " + min + " % -1 }}"), "0");  // was SIGFPE
  EXPECT_EQ(render("{{ " + min + " % 3 }}"), "1");
  EXPECT_EQ(render("{{ " + min + " // 3 }}"), "-3074457345618258603");
  EXPECT_EQ(render("{{ " + min + " // 1 }}"), "-9223372036854775808");
  EXPECT_EQ(render("{{ -7 // 2 }} {{ -7 % 2 }} {{ 7 % -2 }} {{ 7 // -2 }}"), "-4 1 -1 -4");
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 1 ** 1000000000000000 }} {{ 2 ** -1 }}"),
            "4611686018427387904 -9223372036854775808 1 0.5");
  EXPECT_EQ(render("{{ " + min + " is divisibleby(-1) }}"), "True");  // was SIGFPE
  EXPECT_EQ(render("{{ 'nan'|float|int }} {{ '12'|int }} {{ 2.9|int }}"), "0 12 2");
  // range() and slices near the int64 edges (the loop counter used to overflow).
  EXPECT_EQ(render("{% for i in range(9223372036854775806, 9223372036854775807, 100) %}{{ i }}{% endfor %}"),
            "9223372036854775806");
  EXPECT_EQ(render("{{ range(-9223372036854775807 - 1, 9223372036854775807, 9223372036854775807)|list }}"),
            "[-9223372036854775808, -1, 9223372036854775806]");
  EXPECT_EQ(render("{{ [1, 2, 3][1::9223372036854775807] }} {{ [1, 2, 3][::" + min + "] }}"), "[2] [3]");
  EXPECT_EQ(render("{{ 'abc'[-9223372036854775807:] }}{{ [1][" + min + ":] }}"), "abc[1]");
}

// ---------------------------------------------------------------------------------------------------------
// The render budget: work and size are checked before they are spent.
// ---------------------------------------------------------------------------------------------------------
TEST(ChatLimits, NestedLoopsRunOutOfSteps) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e =
      error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  EXPECT_NE(e.find("render budget exceeded"), std::string::npos) << e;
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  // Not a performance assertion: a generous bound that only a missing budget would break.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
  RenderLimits small;
  small.max_steps = 1000;
  EXPECT_NE(error_of("{% for i in range(900) %}{{ i }}{% endfor %}", small).find("render budget exceeded"),
            std::string::npos);
  EXPECT_EQ(render("{% for i in range(10) %}{{ i }}{% endfor %}", small), "0123456789");
}

TEST(ChatLimits, HugeStringsAndListsFailBeforeAllocating) {
  const std::string out_limit = "output limit exceeded";
  const std::string list_limit = "list limit exceeded";
  EXPECT_ERROR_HAS("{{ 'x' * 100000000000 }}", out_limit);
  EXPECT_ERROR_HAS("{{ 100000000000 * 'xy' }}", out_limit);
  EXPECT_ERROR_HAS("{{ 'x' * 9223372036854775807 }}", out_limit);
  EXPECT_ERROR_HAS("{{ 'x' * 1e11 }}", "unsupported operand");  // a float count is a type error, as in Python
  EXPECT_ERROR_HAS("{{ 'a\nb'|indent(100000000000) }}", out_limit);
  EXPECT_ERROR_HAS("{{ 'a'|indent(1e11) }}", "integer argument");
  EXPECT_ERROR_HAS("{{ [1, [2]]|tojson(indent=1000000000) }}", out_limit);
  EXPECT_ERROR_HAS("{{ {'a': 1}|tojson(indent=9223372036854775807) }}", out_limit);
  EXPECT_ERROR_HAS("{{ [1] * 100000000000 }}", list_limit);
  EXPECT_ERROR_HAS("{{ range(100000000000)|length }}", list_limit);
  EXPECT_ERROR_HAS("{{ ('x' * 10000).replace('', 'y' * 10000) }}", out_limit);
  EXPECT_ERROR_HAS("{{ ('x' * 10000)|replace('x', 'y' * 10000) }}", out_limit);
  EXPECT_ERROR_HAS("{{ range(200000)|join('x' * 1000) }}", out_limit);
  EXPECT_ERROR_HAS("{{ ('x' * 100000).join(range(200)) }}", out_limit);
  EXPECT_ERROR_HAS("{% set s = 'x' * 10000000 %}{{ s ~ s }}", out_limit);
  EXPECT_ERROR_HAS("{{ ('a ' * 8000000).split() }}", list_limit);
  EXPECT_ERROR_HAS("{% for c in 'x' * 10000000 %}{% endfor %}", list_limit);
  // The rendered text as a whole.
  EXPECT_ERROR_HAS("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", out_limit);
  // Python's answer for a negative width: no indent at all.
  EXPECT_EQ(render("{{ 'a\nb'|indent(-5, true) }}"), "a\nb");
}

TEST(ChatLimits, CallersCanPassTheirOwnLimits) {
  flashkit::chat::ChatTemplate t(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}");
  std::vector<flashkit::chat::ChatMessage> msgs(50, {"user", "hello"});
  flashkit::chat::ChatTemplateOptions o;
  EXPECT_EQ(t.render(msgs, o).size(), 50 * std::string("<user>hello").size() + 3);
  o.limits.max_steps = 100;
  EXPECT_THROW(t.render(msgs, o), flashkit::Error);
  o.limits = {};
  o.limits.max_output_bytes = 100;
  try {
    t.render(msgs, o);
    ADD_FAILURE() << "no error";
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("output limit exceeded"), std::string::npos) << e.what();
  }
}

TEST(ChatLimits, BytesThatAreNotUtf8CountAsOneCharacterEach) {
  // Template text is UTF-8, but a checkpoint may carry anything: a stray byte (here a lone 0xFF, a truncated
  // sequence and an encoded surrogate) is one character, read as Latin-1 (core/utf8.hpp next_cp_lenient).
  EXPECT_EQ(render("{{ 'a\xff\xc3\xa9'|length }}"), "3");
  EXPECT_EQ(render("{{ 'a\xe2\x82'|length }} {{ '\xed\xa0\x80'|length }}"), "3 3");
  EXPECT_EQ(render("{{ 'a\xff'|reverse }}"), "\xc3\xbf" "a");
  EXPECT_EQ(render("{{ '\xff' }}"), "\xff");  // printed as is
}

// An empty string or list repeated any number of times is empty, at once: the size checks pass for 0 bytes, and the
// loop used to run k times ('' * 10**12 took minutes; the fuzzer's timeout, tests/data/fuzz/chat).
TEST(ChatLimits, EmptySequenceRepeatIsImmediate) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(render("[{{ '' * 1000000000000 }}]"), "[]");
  EXPECT_EQ(render("{{ ([] * 1000000000000)|length }}"), "0");
  EXPECT_EQ(render("{{ (1000000000000 * [])|length }}"), "0");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}
