#include "chat/value.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "chat/text.hpp"
#include "core/utf8.hpp"
#include "flashkit/error.hpp"

namespace flashkit::chat::jinja {

// ================================================================================================
// Value, Dict, CallArgs
// ================================================================================================
Value Value::undefined(std::string name) {
  Value v;
  v.s_ = std::move(name);
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::none;
  return v;
}
Value::Value(bool b) : kind_(Kind::boolean), b_(b) {}
Value::Value(int64_t v) : kind_(Kind::integer), i_(v) {}
Value::Value(double v) : kind_(Kind::floating), f_(v) {}
Value::Value(std::string s) : kind_(Kind::string), s_(std::move(s)) {}
Value::Value(List l) : kind_(Kind::list) {
  int deepest = 0;
  for (const auto& x : l) deepest = std::max(deepest, x.depth());
  depth_ = deepest + 1;
  list_ = std::make_shared<const List>(std::move(l));
}
Value Value::tuple(List l) {
  Value v(std::move(l));
  v.tuple_ = true;
  return v;
}
Value Value::dict() {
  Value v;
  v.kind_ = Kind::dict;
  v.dict_ = std::make_shared<Dict>();
  return v;
}
Value Value::namespace_() {
  Value v = dict();
  v.dict_->is_namespace = true;
  return v;
}
Value Value::function(Function f, std::string name, int captured_depth) {
  Value v;
  v.kind_ = Kind::function;
  v.depth_ = captured_depth + 1;
  v.func_ = std::make_shared<Function>(std::move(f));
  v.s_ = std::move(name);
  return v;
}
bool Value::is_namespace() const { return kind_ == Kind::dict && dict_->is_namespace; }
int Value::depth() const {
  return kind_ == Kind::list || kind_ == Kind::function ? depth_ : kind_ == Kind::dict ? dict_->depth : 0;
}

Value Value::get(std::string_view key) const {
  if (kind_ != Kind::dict) return undefined(std::string(key));
  const Value* p = dict_->find(key);
  return p ? *p : undefined(std::string(key));
}
void Value::set(std::string key, Value v) {
  if (kind_ == Kind::dict) dict_->set(std::move(key), std::move(v));
}

void Value::clear_dict() {
  if (kind_ != Kind::dict) return;
  const auto items = std::move(dict_->items);  // freed here, after the dict is already empty
  dict_->items.clear();
  dict_->depth = 1;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::undefined:
    case Kind::none:
      return false;
    case Kind::boolean:
      return b_;
    case Kind::integer:
      return i_ != 0;
    case Kind::floating:
      return f_ != 0.0;
    case Kind::string:
      return !s_.empty();
    case Kind::list:
      return !list_->empty();
    case Kind::dict:
      return dict_->is_namespace || !dict_->items.empty();
    case Kind::function:
      return true;
  }
  return false;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
Value* Dict::find(std::string_view key) {
  for (auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
void Dict::set(std::string key, Value v) {
  // Only grows: a namespace stored into itself gets deeper with each such store, so the render refuses the
  // cycle (too deep) after a while.
  depth = std::max(depth, v.depth() + 1);
  if (Value* p = find(key))
    *p = std::move(v);
  else
    items.emplace_back(std::move(key), std::move(v));
}

Value CallArgs::arg(size_t i, std::string_view name) const {
  if (i < positional.size()) return positional[i];
  for (const auto& kv : keyword)
    if (kv.first == name) return kv.second;
  return Value::undefined(std::string(name));
}
bool CallArgs::has(size_t i, std::string_view name) const {
  if (i < positional.size()) return true;
  for (const auto& kv : keyword)
    if (kv.first == name) return true;
  return false;
}

// ================================================================================================
// JSON in
// ================================================================================================
namespace {
template <class J>
Value from_json_impl(const J& j, int depth, int max_depth) {
  if (depth > max_depth)
    fail(Status::invalid_argument, "chat template: JSON value nested deeper than " + std::to_string(max_depth));
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();  // past int64: the nearest float (no big ints here)
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value(static_cast<int64_t>(u)) : Value(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& x : j) l.push_back(from_json_impl(x, depth + 1, max_depth));
      return Value(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      Value d = Value::dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), from_json_impl(it.value(), depth + 1, max_depth));
      return d;
    }
    default:
      return Value::undefined();
  }
}
}  // namespace

Value from_json(const nlohmann::ordered_json& j, int max_depth) { return from_json_impl(j, 0, max_depth); }
Value from_json(const nlohmann::json& j, int max_depth) { return from_json_impl(j, 0, max_depth); }

// ================================================================================================
// Printing: str(), repr(), json.dumps
// ================================================================================================
namespace {

// Appends to a string that must stay within the output limit; pays for what it appends.
struct BoundedOut {
  std::string& out;
  Budget& budget;
  Pos pos;
  void reserve_more(size_t n) { budget.check_size(out.size() + n, pos); }
  void append(std::string_view s) {
    reserve_more(s.size());
    budget.charge_bytes(s.size(), pos);
    out += s;
  }
  void append(size_t n, char c) {
    reserve_more(n);
    budget.charge_bytes(n, pos);
    out.append(n, c);
  }
};

void repr_into(BoundedOut& o, const Value& v, int level);

void str_into(BoundedOut& o, const Value& v, int level) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return;
    case Value::Kind::none:
      return o.append("None");
    case Value::Kind::boolean:
      return o.append(v.as_bool() ? "True" : "False");
    case Value::Kind::integer:
      return o.append(std::to_string(v.as_int()));
    case Value::Kind::floating:
      return o.append(float_repr(v.as_double()));
    case Value::Kind::string:
      return o.append(v.str());
    case Value::Kind::list:
    case Value::Kind::dict:
      return repr_into(o, v, level);
    case Value::Kind::function:
      return o.append("<function " + v.str() + ">");
  }
}

void repr_into(BoundedOut& o, const Value& v, int level) {
  o.budget.check_value_depth(level, o.pos);
  o.budget.charge(1, o.pos);
  switch (v.kind()) {
    case Value::Kind::string:
      o.reserve_more(v.str().size());
      return o.append(py_repr_str(v.str()));
    case Value::Kind::list: {
      o.append(v.is_tuple() ? "(" : "[");
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i) o.append(", ");
        repr_into(o, v.list()[i], level + 1);
      }
      if (v.is_tuple()) return o.append(v.list().size() == 1 ? ",)" : ")");
      return o.append("]");
    }
    case Value::Kind::dict: {
      if (v.is_namespace()) return o.append("<Namespace>");
      o.append("{");
      bool first = true;
      for (const auto& [k, x] : v.dict_ref().items) {
        if (!first) o.append(", ");
        o.append(py_repr_str(k));
        o.append(": ");
        repr_into(o, x, level + 1);
        first = false;
      }
      return o.append("}");
    }
    default:
      return str_into(o, v, level);
  }
}

struct JsonSeps {
  std::string_view item, key;
};

void json_into(BoundedOut& o, const Value& v, int indent, bool sort_keys, int level, const JsonSeps& seps) {
  o.budget.check_value_depth(level, o.pos);
  o.budget.charge(1, o.pos);
  auto newline = [&](int lv) {
    o.append("\n");
    // indent * lv cannot overflow: indent was checked against the output limit, lv <= max_value_depth
    o.append(static_cast<size_t>(indent) * static_cast<size_t>(lv), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::none:
      return o.append("null");
    case Value::Kind::boolean:
      return o.append(v.as_bool() ? "true" : "false");
    case Value::Kind::integer:
      return o.append(std::to_string(v.as_int()));
    case Value::Kind::floating: {
      const double d = v.as_double();
      return o.append(std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_repr(d));
    }
    case Value::Kind::string: {
      o.reserve_more(v.str().size() + 2);
      std::string s;
      json_string(s, v.str());
      return o.append(s);
    }
    case Value::Kind::list: {
      const auto& l = v.list();
      if (l.empty()) return o.append("[]");
      o.append("[");
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) o.append(seps.item);
        if (indent >= 0) newline(level + 1);
        json_into(o, l[i], indent, sort_keys, level + 1, seps);
      }
      if (indent >= 0) newline(level);
      return o.append("]");
    }
    case Value::Kind::dict: {
      const auto& items = v.dict_ref().items;
      if (items.empty()) return o.append("{}");
      std::vector<size_t> order(items.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      if (sort_keys)
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return items[a].first < items[b].first; });
      o.append("{");
      for (size_t i = 0; i < order.size(); ++i) {
        if (i) o.append(seps.item);
        if (indent >= 0) newline(level + 1);
        std::string key;
        json_string(key, items[order[i]].first);
        o.append(key);
        o.append(seps.key);
        json_into(o, items[order[i]].second, indent, sort_keys, level + 1, seps);
      }
      if (indent >= 0) newline(level);
      return o.append("}");
    }
    case Value::Kind::undefined:
      error_at(o.pos, "tojson of an undefined value" + (v.str().empty() ? std::string() : " ('" + v.str() + "')"));
    case Value::Kind::function:
      error_at(o.pos, "tojson of a function");
  }
}

}  // namespace

std::string to_str(const Value& v, Budget& b, Pos p) {
  if (v.is_string()) {  // the common case: no copy through BoundedOut
    b.charge_bytes(v.str().size(), p);
    return v.str();
  }
  std::string out;
  BoundedOut o{out, b, p};
  str_into(o, v, 0);
  return out;
}

std::string repr(const Value& v, Budget& b, Pos p) {
  std::string out;
  BoundedOut o{out, b, p};
  repr_into(o, v, 0);
  return out;
}

std::string to_json(const Value& v, int indent, bool sort_keys, std::string_view item_sep, std::string_view key_sep,
                    Budget& b, Pos p) {
  std::string out;
  BoundedOut o{out, b, p};
  if (indent > 0) o.reserve_more(static_cast<size_t>(indent));  // an indent past the limit fails before any work
  json_into(o, v, indent, sort_keys, 0, JsonSeps{item_sep, key_sep});
  return out;
}

std::string to_str(const Value& v) {
  Budget b;
  return to_str(v, b, Pos{});
}

std::string to_json(const Value& v, int indent, bool sort_keys) {
  return to_json(v, indent, sort_keys, indent >= 0 ? "," : ", ", ": ");
}

std::string to_json(const Value& v, int indent, bool sort_keys, std::string_view item_sep, std::string_view key_sep) {
  Budget b;
  return to_json(v, indent, sort_keys, item_sep, key_sep, b, Pos{});
}

// ================================================================================================
// Comparison, length, iteration, membership
// ================================================================================================
std::string kind_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return "undefined";
    case Value::Kind::none:
      return "none";
    case Value::Kind::boolean:
      return "bool";
    case Value::Kind::integer:
      return "int";
    case Value::Kind::floating:
      return "float";
    case Value::Kind::string:
      return "string";
    case Value::Kind::list:
      return "list";
    case Value::Kind::dict:
      return v.is_namespace() ? "namespace" : "dict";
    case Value::Kind::function:
      return "function";
  }
  return "?";
}

namespace {

bool equal_at(const Value& a, const Value& b, Budget& budget, Pos p, int level) {
  budget.check_value_depth(level, p);
  budget.charge(1, p);
  if (numeric(a) && numeric(b)) {
    if (is_intlike(a) && is_intlike(b)) return num_i(a) == num_i(b);
    return num_d(a) == num_d(b);
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return true;
    case Value::Kind::string:
      budget.charge_bytes(a.str().size(), p);
      return a.str() == b.str();
    case Value::Kind::list: {
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i)
        if (!equal_at(a.list()[i], b.list()[i], budget, p, level + 1)) return false;
      return true;
    }
    case Value::Kind::dict: {
      const auto& x = a.dict_ref().items;
      const auto& y = b.dict_ref();
      if (x.size() != y.items.size()) return false;
      budget.charge(x.size() * x.size(), p);  // the lookups below are linear
      for (const auto& [k, v] : x) {
        const Value* o = y.find(k);
        if (!o || !equal_at(v, *o, budget, p, level + 1)) return false;
      }
      return true;
    }
    case Value::Kind::function:
      return &a.func() == &b.func();
    default:
      return false;
  }
}

int compare_at(const Value& a, const Value& b, Budget& budget, Pos p, int level) {
  budget.check_value_depth(level, p);
  budget.charge(1, p);
  if (numeric(a) && numeric(b)) {
    if (is_intlike(a) && is_intlike(b)) return num_i(a) < num_i(b) ? -1 : num_i(a) > num_i(b) ? 1 : 0;
    const double x = num_d(a), y = num_d(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    budget.charge_bytes(std::min(a.str().size(), b.str().size()), p);
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    const auto &x = a.list(), &y = b.list();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      const int c = compare_at(x[i], y[i], budget, p, level + 1);
      if (c) return c;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  error_at(p, "cannot compare " + kind_name(a) + " with " + kind_name(b));
}

}  // namespace

bool equal(const Value& a, const Value& b, Budget& budget, Pos p) { return equal_at(a, b, budget, p, 0); }
int compare(const Value& a, const Value& b, Budget& budget, Pos p) { return compare_at(a, b, budget, p, 0); }

size_t py_len(const Value& v, Pos p) {
  switch (v.kind()) {
    case Value::Kind::string:
      return count_code_points(v.str());
    case Value::Kind::list:
      return v.list().size();
    case Value::Kind::dict:
      return v.dict_ref().items.size();
    case Value::Kind::undefined:
      return 0;
    default:
      error_at(p, "object of type " + kind_name(v) + " has no length");
  }
}

List iterate(const Value& v, Budget& budget, Pos p) {
  switch (v.kind()) {
    case Value::Kind::list:
      budget.charge(v.list().size(), p);
      return v.list();
    case Value::Kind::dict: {
      budget.charge(v.dict_ref().items.size(), p);
      List out;
      for (const auto& kv : v.dict_ref().items) out.emplace_back(kv.first);
      return out;
    }
    case Value::Kind::string: {
      budget.check_list(count_code_points(v.str()), p);
      List out;
      for (size_t i = 0; i < v.str().size();) {
        std::string s;
        append_utf8(s, next_cp_lenient(v.str(), i));
        out.emplace_back(std::move(s));
      }
      return out;
    }
    case Value::Kind::undefined:
      return {};
    default:
      error_at(p, "'" + kind_name(v) + "' object is not iterable");
  }
}

bool contains(const Value& container, const Value& item, Budget& budget, Pos p) {
  switch (container.kind()) {
    case Value::Kind::string:
      if (!item.is_string()) error_at(p, "'in <string>' requires string as left operand, not " + kind_name(item));
      budget.charge_bytes(container.str().size(), p);
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::list:
      for (const auto& x : container.list())
        if (equal(x, item, budget, p)) return true;
      return false;
    case Value::Kind::dict:
      budget.charge(container.dict_ref().items.size(), p);
      return item.is_string() && container.dict_ref().find(item.str()) != nullptr;
    case Value::Kind::undefined:
      return false;
    default:
      error_at(p, "argument of type '" + kind_name(container) + "' is not iterable");
  }
}

}  // namespace flashkit::chat::jinja
