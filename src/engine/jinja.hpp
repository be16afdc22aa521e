// A Jinja2 subset interpreter, sufficient for the chat templates Hugging Face checkpoints carry
// (Gemma 2/3, Llama 3.x, Qwen2.5/3 and the like), configured the way transformers configures jinja2 for
// apply_chat_template: trim_blocks, lstrip_blocks, loop controls, an immutable sandbox (no mutating list/dict
// methods), default (non-strict) undefined values.
//
// Supported: {{ }}, {% if/elif/else %}, {% for a[, b] in x [if cond] %} with else and loop.* (index,
// index0, revindex, revindex0, first, last, length, previtem, nextitem, cycle), {% set %} (names, tuples,
// namespace attributes, block set), {% macro %}, {% break/continue %}, {% generation %}, {# #}, whitespace
// control (-/+), literals (strings with Python escapes, ints, floats, booleans, none, lists, tuples, dicts),
// + - * / // % ** ~, comparisons (chained), and/or/not, in/not in, `if else` expressions, attribute,
// subscript and slice access, filters and tests (see jinja.cpp), string/dict methods, and the globals range,
// namespace, dict, raise_exception, strftime_now.
//
// Errors (syntax, type, raise_exception) throw flashkit::Error(invalid_argument) whose message carries
// "line L, column C" of the template position; raise_exception's message is included verbatim.
#pragma once
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flashkit::engine::jinja {

class Value;
using List = std::vector<Value>;
struct Dict;
struct CallArgs;
using Function = std::function<Value(CallArgs&)>;

class Value {
 public:
  enum class Kind { undefined, none, boolean, integer, floating, string, list, dict, function };

  Value() = default;  // undefined
  static Value undefined(std::string name = {});
  static Value none();
  Value(bool b);
  Value(int v) : Value(static_cast<int64_t>(v)) {}
  Value(int64_t v);
  Value(double v);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  Value(List l);
  static Value tuple(List l);  // a list that prints as a Python tuple
  static Value dict();         // empty dict
  static Value namespace_();   // empty namespace (attributes assignable)
  static Value function(Function f, std::string name);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_list() const { return kind_ == Kind::list; }
  bool is_dict() const { return kind_ == Kind::dict; }
  bool is_number() const { return kind_ == Kind::integer || kind_ == Kind::floating; }
  bool is_namespace() const;
  bool is_tuple() const { return tuple_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_double() const { return kind_ == Kind::integer ? static_cast<double>(i_) : f_; }
  const std::string& str() const { return s_; }  // string payload, or the undefined value's name
  const List& list() const { return *list_; }
  List& list_mut() { return *list_; }
  const Dict& dict_ref() const { return *dict_; }
  Dict& dict_mut() { return *dict_; }
  const Function& func() const { return *func_; }

  // Dict helpers (no-ops / undefined on non-dicts).
  Value get(std::string_view key) const;
  void set(std::string key, Value v);

  bool truthy() const;

 private:
  Kind kind_ = Kind::undefined;
  bool b_ = false;
  bool tuple_ = false;
  int64_t i_ = 0;
  double f_ = 0.0;
  std::string s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> func_;
};

// Insertion-ordered string-keyed map (Python dict order).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(std::string key, Value v);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // Argument i by position or by name (undefined when absent).
  Value arg(size_t i, std::string_view name) const;
  bool has(size_t i, std::string_view name) const;
};

// JSON (nlohmann) -> Value. Use ordered_json to keep the document's key order (Python dicts keep insertion
// order, and templates iterating a dict or dumping it with tojson show it); plain json objects are sorted.
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

// Python-style renderings used by the interpreter: str(v) and json.dumps(v, ensure_ascii=False, indent=...).
std::string to_str(const Value& v);
std::string to_json(const Value& v, int indent = -1, bool sort_keys = false);
std::string to_json(const Value& v, int indent, bool sort_keys, std::string_view item_sep, std::string_view key_sep);

class Template {
 public:
  struct Options {
    bool trim_blocks = true;
    bool lstrip_blocks = true;
    bool keep_trailing_newline = false;
  };
  // Parses the template; throws flashkit::Error with line/column on syntax errors.
  explicit Template(std::string_view source, Options options);
  explicit Template(std::string_view source) : Template(source, Options{}) {}
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with the given variables (a dict Value; later keys override globals). Globals available to every
  // template: range, namespace, dict, raise_exception, strftime_now (clock: now, or the current time).
  std::string render(const Value& variables, std::optional<std::time_t> now = std::nullopt) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashkit::engine::jinja
