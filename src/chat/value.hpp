// The template engine's dynamic value: what a Python object is to jinja2 (undefined, None, bool, int, float,
// str, list/tuple, dict/namespace, callables), with Python's semantics for printing (str/repr), json.dumps,
// equality, ordering, len, iteration and `in`.
//
// Values nest (lists in lists, dicts in dicts); each list and dict knows its depth, so a render can refuse to
// build values deeper than RenderLimits::max_value_depth, and the recursive operations here (printing,
// comparing, freeing) never recurse further than that. The operations that take a Budget pay for their work.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/budget.hpp"
#include "chat/limits.hpp"

namespace flashkit::chat::jinja {

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
  // captured_depth: the depth of what the function holds (a bound method's object), so a chain of values
  // through functions is as deep as it looks.
  static Value function(Function f, std::string name, int captured_depth = 0);

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
  const Dict& dict_ref() const { return *dict_; }
  const Function& func() const { return *func_; }
  // Levels of lists/dicts/functions: 0 for scalars, 1 for a flat list or dict, ...
  int depth() const;

  // Dict helpers (no-ops / undefined on non-dicts).
  Value get(std::string_view key) const;
  void set(std::string key, Value v);
  // Empties a dict in place, for every reference (a render's teardown of its namespaces).
  void clear_dict();

  bool truthy() const;

 private:
  Kind kind_ = Kind::undefined;
  bool b_ = false;
  bool tuple_ = false;
  int depth_ = 0;  // lists and functions (a dict's depth lives in the shared Dict)
  int64_t i_ = 0;
  double f_ = 0.0;
  std::string s_;
  std::shared_ptr<const List> list_;  // lists are immutable (jinja2's sandbox): shared between copies
  std::shared_ptr<Dict> dict_;        // dicts too; only namespaces change, and every reference sees it
  std::shared_ptr<Function> func_;
};

// Insertion-ordered string-keyed map (Python dict order).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  int depth = 1;  // 1 + the deepest item's depth (an upper bound once an item is replaced)
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(std::string key, Value v);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  Budget* budget = nullptr;  // the render's budget and the call's position (set by call_function)
  Pos pos;
  // Argument i by position or by name (undefined when absent).
  Value arg(size_t i, std::string_view name) const;
  bool has(size_t i, std::string_view name) const;
};

// JSON (nlohmann) -> Value. Use ordered_json to keep the document's key order (Python dicts keep insertion
// order, and templates iterating a dict or dumping it with tojson show it); plain json objects are sorted.
// Documents nested deeper than max_depth are refused (flashkit::Error).
Value from_json(const nlohmann::ordered_json& j, int max_depth = RenderLimits{}.max_value_depth);
Value from_json(const nlohmann::json& j, int max_depth = RenderLimits{}.max_value_depth);

// Python-style renderings: str(v) and json.dumps(v, ensure_ascii=False, indent=...), under default limits.
std::string to_str(const Value& v);
std::string to_json(const Value& v, int indent = -1, bool sort_keys = false);
std::string to_json(const Value& v, int indent, bool sort_keys, std::string_view item_sep, std::string_view key_sep);

// ---- the interpreter's value operations (Python semantics), paying into a render's budget ----
std::string to_str(const Value& v, Budget& b, Pos p);
std::string repr(const Value& v, Budget& b, Pos p);
std::string to_json(const Value& v, int indent, bool sort_keys, std::string_view item_sep, std::string_view key_sep,
                    Budget& b, Pos p);

std::string kind_name(const Value& v);
inline bool numeric(const Value& v) {
  return v.kind() == Value::Kind::integer || v.kind() == Value::Kind::floating || v.kind() == Value::Kind::boolean;
}
inline bool is_intlike(const Value& v) { return v.kind() == Value::Kind::integer || v.kind() == Value::Kind::boolean; }
inline double num_d(const Value& v) {
  return v.kind() == Value::Kind::boolean ? (v.as_bool() ? 1.0 : 0.0) : v.as_double();
}
inline int64_t num_i(const Value& v) { return v.kind() == Value::Kind::boolean ? (v.as_bool() ? 1 : 0) : v.as_int(); }

bool equal(const Value& a, const Value& b, Budget& budget, Pos p);
// <0, 0, >0; errors for unorderable types.
int compare(const Value& a, const Value& b, Budget& budget, Pos p);
size_t py_len(const Value& v, Pos p);
// Items of an iterable (for loops, filters): list items, dict keys, string characters.
List iterate(const Value& v, Budget& budget, Pos p);
bool contains(const Value& container, const Value& item, Budget& budget, Pos p);

}  // namespace flashkit::chat::jinja
