// Filters ({{ x | name(args) }}) and tests ({{ x is name(args) }}): the subset of jinja2's builtins that chat
// templates use. Every filter that builds a string or list checks its size against the render budget before
// building it, and pays for the items it visits.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>

#include "chat/builtins.hpp"
#include "chat/text.hpp"

namespace flashkit::chat::jinja {
namespace {

using TestFn = std::function<bool(const Value&, CallArgs&, Context&, Pos)>;
using FilterFn = std::function<Value(const Value&, CallArgs&, Context&, Pos)>;

[[noreturn]] void integer_overflow(Pos p) { error_at(p, "integer overflow (integers are 64-bit here)"); }

// ---------- tests ----------
const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> t = [] {
    std::map<std::string, TestFn> m;
    auto kind_test = [](std::function<bool(const Value&)> ok) {
      return [ok](const Value& v, CallArgs&, Context&, Pos) { return ok(v); };
    };
    m["defined"] = kind_test([](const Value& v) { return !v.is_undefined(); });
    m["undefined"] = kind_test([](const Value& v) { return v.is_undefined(); });
    m["none"] = kind_test([](const Value& v) { return v.is_none(); });
    m["boolean"] = kind_test([](const Value& v) { return v.kind() == Value::Kind::boolean; });
    m["true"] = kind_test([](const Value& v) { return v.kind() == Value::Kind::boolean && v.as_bool(); });
    m["false"] = kind_test([](const Value& v) { return v.kind() == Value::Kind::boolean && !v.as_bool(); });
    m["integer"] = kind_test([](const Value& v) { return v.kind() == Value::Kind::integer; });
    m["float"] = kind_test([](const Value& v) { return v.kind() == Value::Kind::floating; });
    m["number"] = kind_test([](const Value& v) { return numeric(v); });
    m["string"] = kind_test([](const Value& v) { return v.is_string(); });
    m["mapping"] = kind_test([](const Value& v) { return v.is_dict(); });
    m["iterable"] = kind_test([](const Value& v) {
      return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
    });
    m["sequence"] = kind_test([](const Value& v) { return v.is_string() || v.is_list() || v.is_dict(); });
    m["callable"] = kind_test([](const Value& v) { return v.kind() == Value::Kind::function; });
    m["sameas"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      const Value o = a.arg(0, "other");
      if (v.kind() != o.kind()) return false;
      // Python identity: None/True/False are singletons; small ints and short strings are interned.
      if (v.is_none() || v.kind() == Value::Kind::boolean || v.kind() == Value::Kind::integer || v.is_string())
        return equal(v, o, ctx.budget, p);
      return false;
    };
    auto cmp = [](std::function<bool(int)> ok) {
      return [ok](const Value& v, CallArgs& a, Context& ctx, Pos p) {
        return ok(compare(v, a.arg(0, "other"), ctx.budget, p));
      };
    };
    m["eq"] = m["equalto"] = m["=="] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      return equal(v, a.arg(0, "other"), ctx.budget, p);
    };
    m["ne"] = m["!="] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      return !equal(v, a.arg(0, "other"), ctx.budget, p);
    };
    m["lt"] = m["lessthan"] = m["<"] = cmp([](int c) { return c < 0; });
    m["le"] = m["<="] = cmp([](int c) { return c <= 0; });
    m["gt"] = m["greaterthan"] = m[">"] = cmp([](int c) { return c > 0; });
    m["ge"] = m[">="] = cmp([](int c) { return c >= 0; });
    m["in"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      return contains(a.arg(0, "seq"), v, ctx.budget, p);
    };
    m["odd"] = [](const Value& v, CallArgs&, Context&, Pos p) {
      if (!is_intlike(v)) error_at(p, "odd test needs an integer");
      return num_i(v) % 2 != 0;
    };
    m["even"] = [](const Value& v, CallArgs&, Context&, Pos p) {
      if (!is_intlike(v)) error_at(p, "even test needs an integer");
      return num_i(v) % 2 == 0;
    };
    m["divisibleby"] = [](const Value& v, CallArgs& a, Context&, Pos p) {
      const Value n = a.arg(0, "num");
      if (!is_intlike(v) || !is_intlike(n) || num_i(n) == 0) error_at(p, "divisibleby needs non-zero integers");
      return num_i(n) == -1 || num_i(v) % num_i(n) == 0;  // INT64_MIN % -1 would trap
    };
    m["lower"] = kind_test([](const Value& v) { return v.is_string() && ascii_lower(v.str()) == v.str(); });
    m["upper"] = kind_test([](const Value& v) { return v.is_string() && ascii_upper(v.str()) == v.str(); });
    return m;
  }();
  return t;
}

// select/reject/selectattr/rejectattr.
Value select_impl(const Value& v, CallArgs& a, Context& ctx, Pos p, bool attr, bool keep_if) {
  List out;
  size_t argi = 0;
  std::string attribute;
  if (attr) {
    const Value at = a.arg(0, "attribute");
    if (!at.is_string()) error_at(p, "selectattr/rejectattr need an attribute name");
    attribute = at.str();
    argi = 1;
  }
  std::string test;
  CallArgs targs;
  if (argi < a.positional.size()) {
    if (!a.positional[argi].is_string()) error_at(p, "test name must be a string");
    test = a.positional[argi].str();
    targs.positional.assign(a.positional.begin() + static_cast<ptrdiff_t>(argi) + 1, a.positional.end());
  }
  for (const auto& item : iterate(v, ctx.budget, p)) {
    const Value x = attr ? attr_path(item, attribute, ctx, p) : item;
    const bool ok = test.empty() ? x.truthy() : run_test(test, x, targs, ctx, p);
    if (ok == keep_if) out.push_back(item);
  }
  return Value(std::move(out));
}

// The int filter on a float: Python's int() of it, or (past int64, where Python has big ints) an error.
Value float_to_int(double d, const Value& dflt, Pos p) {
  if (std::isnan(d)) return dflt;  // int(nan) raises ValueError, which jinja2's filter turns into the default
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) integer_overflow(p);
  return Value(static_cast<int64_t>(d));
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = [] {
    std::map<std::string, FilterFn> m;
    // A filter of one string: fn(str(v)).
    auto text_filter = [](std::string (*fn)(const std::string&)) {
      return [fn](const Value& v, CallArgs&, Context& ctx, Pos p) { return Value(fn(to_str(v, ctx.budget, p))); };
    };
    m["trim"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      const Value c = a.arg(0, "chars");
      const std::string* chars = c.is_string() ? &c.str() : nullptr;
      return Value(py_strip(to_str(v, ctx.budget, p), chars, true, true));
    };
    m["length"] = m["count"] = [](const Value& v, CallArgs&, Context&, Pos p) {
      return Value(static_cast<int64_t>(py_len(v, p)));
    };
    m["upper"] = text_filter([](const std::string& s) { return ascii_upper(s); });
    m["lower"] = text_filter([](const std::string& s) { return ascii_lower(s); });
    m["capitalize"] = text_filter(py_capitalize);
    m["title"] = text_filter(py_title);
    m["string"] = text_filter([](const std::string& s) { return s; });
    m["safe"] = m["e"] = m["escape"] = [](const Value& v, CallArgs&, Context&, Pos) { return v; };
    m["tojson"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      const Value ind = a.arg(1, "indent");
      const int64_t indent64 = ind.is_undefined() || ind.is_none() ? -1 : to_int_arg(ind, -1, p);
      // An indent past the output limit could never be printed: refuse it before it reaches an int.
      if (indent64 > 0) ctx.budget.check_size(static_cast<uint64_t>(indent64), p);
      const int indent = indent64 < 0 ? -1 : static_cast<int>(indent64);
      const Value sk = a.arg(3, "sort_keys");
      const Value seps = a.arg(2, "separators");
      if (seps.is_list()) {
        if (seps.list().size() != 2 || !seps.list()[0].is_string() || !seps.list()[1].is_string())
          error_at(p, "tojson separators must be an (item_separator, key_separator) pair of strings");
        return Value(to_json(v, indent, sk.truthy(), seps.list()[0].str(), seps.list()[1].str(), ctx.budget, p));
      }
      return Value(to_json(v, indent, sk.truthy(), indent >= 0 ? "," : ", ", ": ", ctx.budget, p));
    };
    m["default"] = m["d"] = [](const Value& v, CallArgs& a, Context&, Pos) {
      const bool boolean = a.arg(1, "boolean").truthy();
      if (v.is_undefined() || (boolean && !v.truthy()))
        return a.has(0, "default_value") ? a.arg(0, "default_value") : Value("");
      return v;
    };
    m["first"] = [](const Value& v, CallArgs&, Context& ctx, Pos p) {
      if (v.is_list()) return v.list().empty() ? Value::undefined() : v.list().front();
      const List l = iterate(v, ctx.budget, p);
      return l.empty() ? Value::undefined() : l.front();
    };
    m["last"] = [](const Value& v, CallArgs&, Context& ctx, Pos p) {
      if (v.is_list()) return v.list().empty() ? Value::undefined() : v.list().back();
      const List l = iterate(v, ctx.budget, p);
      return l.empty() ? Value::undefined() : l.back();
    };
    m["join"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      const Value sep_v = a.arg(0, "d");
      const Value attr = a.arg(1, "attribute");
      const std::string sep = sep_v.is_undefined() ? "" : to_str(sep_v, ctx.budget, p);
      std::string out;
      bool first = true;
      for (const auto& x : iterate(v, ctx.budget, p)) {
        const std::string piece = to_str(attr.is_string() ? attr_path(x, attr.str(), ctx, p) : x, ctx.budget, p);
        const size_t more = (first ? 0 : sep.size()) + piece.size();
        ctx.budget.check_size(out.size() + more, p);
        ctx.budget.charge_bytes(more, p);
        if (!first) out += sep;
        out += piece;
        first = false;
      }
      return Value(std::move(out));
    };
    m["replace"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      Budget& b = ctx.budget;
      return Value(py_replace(to_str(v, b, p), to_str(a.arg(0, "old"), b, p), to_str(a.arg(1, "new"), b, p),
                              to_int_arg(a.arg(2, "count"), -1, p), b, p));
    };
    m["int"] = [](const Value& v, CallArgs& a, Context&, Pos p) {
      const Value dflt = a.has(0, "default") ? a.arg(0, "default") : Value(static_cast<int64_t>(0));
      if (is_intlike(v)) return Value(num_i(v));
      if (v.kind() == Value::Kind::floating) return float_to_int(v.as_double(), dflt, p);
      if (v.is_string()) {
        const std::string t = py_strip(v.str(), nullptr, true, true);
        char* end = nullptr;
        errno = 0;
        const long long x = std::strtoll(t.c_str(), &end, 10);
        if (!t.empty() && end && *end == '\0') {
          if (errno == ERANGE) integer_overflow(p);
          return Value(static_cast<int64_t>(x));
        }
        const double d = std::strtod(t.c_str(), &end);
        if (!t.empty() && end && *end == '\0') return float_to_int(d, dflt, p);
      }
      return dflt;
    };
    m["float"] = [](const Value& v, CallArgs& a, Context&, Pos) {
      if (numeric(v)) return Value(num_d(v));
      if (v.is_string()) {
        const std::string t = py_strip(v.str(), nullptr, true, true);
        char* end = nullptr;
        const double d = std::strtod(t.c_str(), &end);
        if (!t.empty() && end && *end == '\0') return Value(d);
      }
      return a.has(0, "default") ? a.arg(0, "default") : Value(0.0);
    };
    m["abs"] = [](const Value& v, CallArgs&, Context&, Pos p) {
      if (is_intlike(v)) {
        if (num_i(v) == std::numeric_limits<int64_t>::min()) integer_overflow(p);
        return Value(num_i(v) < 0 ? -num_i(v) : num_i(v));
      }
      if (numeric(v)) return Value(std::fabs(num_d(v)));
      error_at(p, "abs of a " + kind_name(v));
    };
    m["round"] = [](const Value& v, CallArgs& a, Context&, Pos p) {
      if (!numeric(v)) error_at(p, "round of a " + kind_name(v));
      const int64_t prec = to_int_arg(a.arg(0, "precision"), 0, p);
      const Value method = a.arg(1, "method");
      const double f = std::pow(10.0, static_cast<double>(prec));
      const double x = num_d(v) * f;
      const std::string mth = method.is_string() ? method.str() : "common";
      const double r = mth == "ceil" ? std::ceil(x) : mth == "floor" ? std::floor(x) : std::round(x);
      return Value(r / f);
    };
    m["items"] = [](const Value& v, CallArgs&, Context& ctx, Pos p) {
      if (v.is_undefined()) return Value(List{});
      if (!v.is_dict()) error_at(p, "items filter needs a mapping, got " + kind_name(v));
      ctx.budget.charge(v.dict_ref().items.size(), p);
      List out;
      for (const auto& [k, x] : v.dict_ref().items) out.push_back(Value::tuple(List{Value(k), x}));
      return Value(std::move(out));
    };
    m["dictsort"] = [](const Value& v, CallArgs&, Context& ctx, Pos p) {
      if (!v.is_dict()) error_at(p, "dictsort needs a mapping");
      auto items = v.dict_ref().items;
      ctx.budget.charge(items.size() * 16, p);  // n log n comparisons
      std::stable_sort(items.begin(), items.end(),
                       [](const auto& a, const auto& b) { return ascii_lower(a.first) < ascii_lower(b.first); });
      List out;
      for (const auto& [k, x] : items) out.push_back(Value::tuple(List{Value(k), x}));
      return Value(std::move(out));
    };
    m["list"] = [](const Value& v, CallArgs&, Context& ctx, Pos p) { return Value(iterate(v, ctx.budget, p)); };
    m["reverse"] = [](const Value& v, CallArgs&, Context& ctx, Pos p) {
      if (v.is_string()) {
        auto cps = decode(v.str());
        std::reverse(cps.begin(), cps.end());
        return Value(encode(cps));
      }
      List l = iterate(v, ctx.budget, p);
      std::reverse(l.begin(), l.end());
      return Value(std::move(l));
    };
    m["unique"] = [](const Value& v, CallArgs&, Context& ctx, Pos p) {
      List out;
      for (const auto& x : iterate(v, ctx.budget, p))
        if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y, ctx.budget, p); }))
          out.push_back(x);
      return Value(std::move(out));
    };
    m["sort"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      List l = iterate(v, ctx.budget, p);
      const bool rev = a.arg(0, "reverse").truthy();
      const Value attr = a.arg(2, "attribute");
      std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) {
        const Value xa = attr.is_string() ? attr_path(x, attr.str(), ctx, p) : x;
        const Value ya = attr.is_string() ? attr_path(y, attr.str(), ctx, p) : y;
        return rev ? compare(ya, xa, ctx.budget, p) < 0 : compare(xa, ya, ctx.budget, p) < 0;
      });
      return Value(std::move(l));
    };
    m["min"] = [](const Value& v, CallArgs&, Context& ctx, Pos p) {
      const List l = iterate(v, ctx.budget, p);
      if (l.empty()) return Value::undefined();
      return *std::min_element(l.begin(), l.end(),
                               [&](const Value& x, const Value& y) { return compare(x, y, ctx.budget, p) < 0; });
    };
    m["max"] = [](const Value& v, CallArgs&, Context& ctx, Pos p) {
      const List l = iterate(v, ctx.budget, p);
      if (l.empty()) return Value::undefined();
      return *std::max_element(l.begin(), l.end(),
                               [&](const Value& x, const Value& y) { return compare(x, y, ctx.budget, p) < 0; });
    };
    m["sum"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      Value acc = a.has(1, "start") ? a.arg(1, "start") : Value(static_cast<int64_t>(0));
      const Value attr = a.arg(0, "attribute");
      for (const auto& x : iterate(v, ctx.budget, p))
        acc = binary_arith("+", acc, attr.is_string() ? attr_path(x, attr.str(), ctx, p) : x, ctx, p);
      return acc;
    };
    m["select"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      return select_impl(v, a, ctx, p, false, true);
    };
    m["reject"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      return select_impl(v, a, ctx, p, false, false);
    };
    m["selectattr"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      return select_impl(v, a, ctx, p, true, true);
    };
    m["rejectattr"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      return select_impl(v, a, ctx, p, true, false);
    };
    m["map"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      List out;
      const Value attr = a.arg(99, "attribute");
      if (attr.is_string()) {
        const Value dflt = a.arg(99, "default");
        for (const auto& x : iterate(v, ctx.budget, p)) {
          Value y = attr_path(x, attr.str(), ctx, p);
          out.push_back(y.is_undefined() && !dflt.is_undefined() ? dflt : y);
        }
        return Value(std::move(out));
      }
      if (a.positional.empty() || !a.positional[0].is_string()) error_at(p, "map needs a filter name or attribute=");
      const std::string fname = a.positional[0].str();
      CallArgs fargs;
      fargs.positional.assign(a.positional.begin() + 1, a.positional.end());
      for (const auto& x : iterate(v, ctx.budget, p)) out.push_back(run_filter(fname, x, fargs, ctx, p));
      return Value(std::move(out));
    };
    m["indent"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      const Value w = a.arg(0, "width");
      std::string pad;
      if (w.is_string()) {
        pad = w.str();
      } else {
        const int64_t width = to_int_arg(w, 4, p);  // Python: ' ' * negative == ''
        if (width > 0) ctx.budget.check_size(static_cast<uint64_t>(width), p);
        pad.assign(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
      }
      const bool first = a.arg(1, "first").truthy(), blank = a.arg(2, "blank").truthy();
      const std::string s = to_str(v, ctx.budget, p);
      const size_t lines = static_cast<size_t>(std::count(s.begin(), s.end(), '\n')) + 1;
      // Every line may get the pad: the result's size bound is checked before building it.
      ctx.budget.check_string(s.size() + lines * pad.size(), p);
      std::string out;
      size_t start = 0;
      bool is_first = true;
      while (start <= s.size()) {
        const size_t nl = s.find('\n', start);
        const std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
        if ((!is_first || first) && (blank || !py_strip(line, nullptr, true, true).empty())) out += pad;
        out += line;
        if (nl == std::string::npos) break;
        out += '\n';
        start = nl + 1;
        is_first = false;
      }
      return Value(std::move(out));
    };
    m["wordcount"] = [](const Value& v, CallArgs&, Context& ctx, Pos p) {
      return Value(static_cast<int64_t>(py_split(to_str(v, ctx.budget, p), Value::none(), -1, ctx.budget, p).size()));
    };
    m["batch"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      const int64_t n = to_int_arg(a.arg(0, "linecount"), 1, p);
      if (n <= 0) error_at(p, "batch size must be positive");
      List out, cur;
      for (const auto& x : iterate(v, ctx.budget, p)) {
        cur.push_back(x);
        if (static_cast<int64_t>(cur.size()) == n) {
          out.emplace_back(std::move(cur));
          cur.clear();
        }
      }
      if (!cur.empty()) out.emplace_back(std::move(cur));
      return Value(std::move(out));
    };
    return m;
  }();
  return table;
}

}  // namespace

bool run_test(const std::string& name, const Value& v, CallArgs& args, Context& ctx, Pos p) {
  const auto& t = tests();
  const auto it = t.find(name);
  if (it == t.end()) error_at(p, "no test named '" + name + "'");
  args.budget = &ctx.budget;
  args.pos = p;
  return it->second(v, args, ctx, p);
}

Value run_filter(const std::string& name, const Value& v, CallArgs& args, Context& ctx, Pos p) {
  const auto& f = filters();
  const auto it = f.find(name);
  if (it == f.end()) error_at(p, "no filter named '" + name + "'");
  args.budget = &ctx.budget;
  args.pos = p;
  return it->second(v, args, ctx, p);
}

Value attr_path(const Value& v, const std::string& path, Context& ctx, Pos p) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    ctx.budget.charge(1, p);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    if (digits) {
      errno = 0;
      const long long i = std::strtoll(part.c_str(), nullptr, 10);  // past int64: no such item
      cur = errno == ERANGE ? Value::undefined() : subscript(cur, Value(static_cast<int64_t>(i)), p);
    } else {
      cur = cur.is_undefined() ? cur : subscript(cur, Value(part), p);
    }
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

}  // namespace flashkit::chat::jinja
