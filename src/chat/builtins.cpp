#include "chat/builtins.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <limits>

#include "chat/text.hpp"
#include "core/utf8.hpp"
#include "flashkit/error.hpp"

namespace flashkit::chat::jinja {

// ================================================================================================
// Operators
// ================================================================================================
namespace {

[[noreturn]] void integer_overflow(Pos p) { error_at(p, "integer overflow (integers are 64-bit here)"); }

void require_defined(const Value& v, Pos p) {
  if (v.is_undefined())
    error_at(p, v.str().empty() ? std::string("value is undefined") : "'" + v.str() + "' is undefined");
}

// Python's a // b and a % b on int64 (b != 0): rounded toward minus infinity, remainder with b's sign.
// Written so no intermediate overflows; only INT64_MIN // -1 has no int64 result.
int64_t floordiv(int64_t a, int64_t b, Pos p) {
  if (a == std::numeric_limits<int64_t>::min() && b == -1) integer_overflow(p);
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;  // |b| >= 2 here, so q is far from INT64_MIN
  return q;
}
int64_t pymod(int64_t a, int64_t b) {
  if (b == -1) return 0;  // a % -1 would trap on INT64_MIN; the answer is always 0
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
int64_t checked_pow(int64_t base, int64_t exp, Pos p) {
  int64_t r = 1;
  while (exp > 0) {
    if ((exp & 1) && __builtin_mul_overflow(r, base, &r)) integer_overflow(p);
    exp >>= 1;
    // When bits remain, the result has base^2 as a factor: if squaring overflows, so does the result.
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) integer_overflow(p);
  }
  return r;
}

uint64_t saturating_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}

}  // namespace

Value binary_arith(const std::string& op, const Value& a, const Value& b, Context& ctx, Pos p) {
  Budget& budget = ctx.budget;
  if (op == "~") {
    std::string s = to_str(a, budget, p);
    const std::string t = to_str(b, budget, p);
    budget.check_string(s.size() + t.size(), p);
    return Value(std::move(s += t));
  }
  require_defined(a, p);
  require_defined(b, p);
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      budget.check_string(a.str().size() + b.str().size(), p);
      return Value(a.str() + b.str());
    }
    if (a.is_list() && b.is_list()) {
      budget.check_list(a.list().size() + b.list().size(), p);
      List l = a.list();
      l.insert(l.end(), b.list().begin(), b.list().end());
      return Value(std::move(l));
    }
  }
  if (op == "*") {
    const Value* seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
    const Value* n = seq == &a ? &b : &a;
    if (seq && is_intlike(*n)) {
      uint64_t k = static_cast<uint64_t>(std::max<int64_t>(0, num_i(*n)));
      // An empty sequence repeated is empty however large k is: the size checks below pass for it (0 bytes), so
      // the loop must not run k times ('' * 10**12 took minutes; found by the fuzzer).
      if (seq->is_string() ? seq->str().empty() : seq->list().empty()) k = 0;
      if (seq->is_string()) {
        budget.check_string(saturating_mul(seq->str().size(), k), p);  // before allocating anything
        std::string s;
        s.reserve(seq->str().size() * k);
        for (uint64_t i = 0; i < k; ++i) s += seq->str();
        return Value(std::move(s));
      }
      budget.check_list(saturating_mul(seq->list().size(), k), p);
      List l;
      l.reserve(seq->list().size() * k);
      for (uint64_t i = 0; i < k; ++i) l.insert(l.end(), seq->list().begin(), seq->list().end());
      return Value(std::move(l));
    }
  }
  if (!numeric(a) || !numeric(b))
    error_at(p, "unsupported operand type(s) for " + op + ": '" + kind_name(a) + "' and '" + kind_name(b) + "'");
  const bool ints = is_intlike(a) && is_intlike(b);
  const int64_t x = ints ? num_i(a) : 0, y = ints ? num_i(b) : 0;
  int64_t r = 0;
  if (op == "+") {
    if (!ints) return Value(num_d(a) + num_d(b));
    if (__builtin_add_overflow(x, y, &r)) integer_overflow(p);
    return Value(r);
  }
  if (op == "-") {
    if (!ints) return Value(num_d(a) - num_d(b));
    if (__builtin_sub_overflow(x, y, &r)) integer_overflow(p);
    return Value(r);
  }
  if (op == "*") {
    if (!ints) return Value(num_d(a) * num_d(b));
    if (__builtin_mul_overflow(x, y, &r)) integer_overflow(p);
    return Value(r);
  }
  if (op == "/") {
    if (num_d(b) == 0.0) error_at(p, "division by zero");
    return Value(num_d(a) / num_d(b));
  }
  if (op == "//") {
    if (num_d(b) == 0.0) error_at(p, "integer division or modulo by zero");
    return ints ? Value(floordiv(x, y, p)) : Value(std::floor(num_d(a) / num_d(b)));
  }
  if (op == "%") {
    if (num_d(b) == 0.0) error_at(p, "integer division or modulo by zero");
    if (ints) return Value(pymod(x, y));
    const double m = std::fmod(num_d(a), num_d(b));
    return Value(m != 0.0 && ((m < 0) != (num_d(b) < 0)) ? m + num_d(b) : m);
  }
  if (op == "**") {
    if (ints && y >= 0) return Value(checked_pow(x, y, p));
    return Value(std::pow(num_d(a), num_d(b)));
  }
  error_at(p, "unknown operator " + op);
}

Value unary_minus(const Value& v, Pos p) {
  if (!is_intlike(v)) return Value(-num_d(v));
  if (num_i(v) == std::numeric_limits<int64_t>::min()) integer_overflow(p);
  return Value(-num_i(v));
}

// ================================================================================================
// str and dict methods
// ================================================================================================
int64_t to_int_arg(const Value& v, int64_t dflt, Pos p) {
  if (v.is_undefined() || v.is_none()) return dflt;
  if (!is_intlike(v)) error_at(p, "expected an integer argument, got " + kind_name(v));
  return num_i(v);
}

List py_split(const std::string& s, const Value& sep, int64_t maxsplit, Budget& budget, Pos p) {
  List out;
  auto push = [&](std::string piece) {
    budget.check_items(out.size() + 1, p);
    budget.charge(1, p);
    out.emplace_back(std::move(piece));
  };
  if (sep.is_undefined() || sep.is_none()) {
    const auto cps = decode(s);
    size_t i = 0;
    while (true) {
      while (i < cps.size() && py_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = cps.size();
        while (e > i && py_space(cps[e - 1])) --e;
        push(encode(cps, i, e));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !py_space(cps[j])) ++j;
      push(encode(cps, i, j));
      i = j;
    }
    return out;
  }
  if (!sep.is_string()) error_at(p, "split separator must be a string");
  const std::string& d = sep.str();
  if (d.empty()) error_at(p, "empty separator");
  size_t start = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    const size_t f = s.find(d, start);
    if (f == std::string::npos) break;
    push(s.substr(start, f - start));
    start = f + d.size();
  }
  push(s.substr(start));
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                       Budget& budget, Pos p) {
  const uint64_t limit = count < 0 ? std::numeric_limits<uint64_t>::max() : static_cast<uint64_t>(count);
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every character
    const auto cps = decode(s);
    const uint64_t n = std::min<uint64_t>(limit, cps.size() + 1);
    budget.check_string(s.size() + saturating_mul(n, to.size()), p);
    uint64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (done < n) {
        out += to;
        ++done;
      }
      if (i < cps.size()) append_utf8(out, cps[i]);
    }
    return out;
  }
  uint64_t n = 0;  // occurrences to replace, counted first so the result's size is known before building it
  for (size_t f = s.find(from); f != std::string::npos && n < limit; f = s.find(from, f + from.size())) ++n;
  if (to.size() > from.size()) budget.check_string(s.size() + saturating_mul(n, to.size() - from.size()), p);
  size_t start = 0;
  for (uint64_t done = 0; done < n; ++done) {
    const size_t f = s.find(from, start);
    out.append(s, start, f - start);
    out += to;
    start = f + from.size();
  }
  out.append(s, start, std::string::npos);
  return out;
}

namespace {

Value make_method(const Value& self, const std::string& name, Pos p) {
  // Bound methods hold `self`: the function value is as deep as self, so chains through them stay bounded.
  auto bind = [&](std::function<Value(const Value&, CallArgs&)> f) {
    Value s = self;
    return Value::function([s, f](CallArgs& a) { return f(s, a); }, name, self.depth());
  };
  if (self.is_string()) {
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool l = name != "rstrip", r = name != "lstrip";
      return bind([l, r](const Value& s, CallArgs& a) {
        const Value c = a.arg(0, "chars");
        const std::string* chars = c.is_string() ? &c.str() : nullptr;
        return Value(py_strip(s.str(), chars, l, r));
      });
    }
    if (name == "startswith" || name == "endswith") {
      const bool start = name == "startswith";
      return bind([start, p](const Value& s, CallArgs& a) {
        const Value x = a.arg(0, "prefix");
        List cands = x.is_list() ? x.list() : List{x};
        for (const auto& c : cands) {
          if (!c.is_string()) error_at(p, "startswith/endswith argument must be a string");
          const std::string& t = c.str();
          if (t.size() <= s.str().size() && (start ? s.str().compare(0, t.size(), t) == 0
                                                   : s.str().compare(s.str().size() - t.size(), t.size(), t) == 0))
            return Value(true);
        }
        return Value(false);
      });
    }
    if (name == "split")
      return bind([p](const Value& s, CallArgs& a) {
        return Value(py_split(s.str(), a.arg(0, "sep"), to_int_arg(a.arg(1, "maxsplit"), -1, p), *a.budget, p));
      });
    if (name == "splitlines")
      return bind([p](const Value& s, CallArgs& a) {
        List out;
        const std::string& t = s.str();
        size_t start = 0;
        for (size_t i = 0; i < t.size(); ++i)
          if (t[i] == '\n') {
            a.budget->check_items(out.size() + 1, p);
            out.emplace_back(t.substr(start, i - start));
            start = i + 1;
          }
        if (start < t.size()) out.emplace_back(t.substr(start));
        a.budget->charge(out.size(), p);
        return Value(std::move(out));
      });
    if (name == "upper") return bind([](const Value& s, CallArgs&) { return Value(ascii_upper(s.str())); });
    if (name == "lower") return bind([](const Value& s, CallArgs&) { return Value(ascii_lower(s.str())); });
    if (name == "title") return bind([](const Value& s, CallArgs&) { return Value(py_title(s.str())); });
    if (name == "capitalize") return bind([](const Value& s, CallArgs&) { return Value(py_capitalize(s.str())); });
    if (name == "replace")
      return bind([p](const Value& s, CallArgs& a) {
        const Value from = a.arg(0, "old"), to = a.arg(1, "new");
        if (!from.is_string() || !to.is_string()) error_at(p, "replace() arguments must be strings");
        return Value(py_replace(s.str(), from.str(), to.str(), to_int_arg(a.arg(2, "count"), -1, p), *a.budget, p));
      });
    if (name == "find" || name == "rfind" || name == "count")
      return bind([name, p](const Value& s, CallArgs& a) {
        const Value x = a.arg(0, "sub");
        if (!x.is_string()) error_at(p, name + "() argument must be a string");
        if (name == "count") {
          int64_t n = 0;
          if (x.str().empty()) return Value(static_cast<int64_t>(count_code_points(s.str()) + 1));
          for (size_t f = s.str().find(x.str()); f != std::string::npos; f = s.str().find(x.str(), f + x.str().size()))
            ++n;
          return Value(n);
        }
        const size_t f = name == "find" ? s.str().find(x.str()) : s.str().rfind(x.str());
        if (f == std::string::npos) return Value(static_cast<int64_t>(-1));
        return Value(static_cast<int64_t>(count_code_points(std::string_view(s.str()).substr(0, f))));
      });
    if (name == "join")
      return bind([p](const Value& s, CallArgs& a) {
        std::string out;
        bool first = true;
        for (const auto& x : iterate(a.arg(0, "iterable"), *a.budget, p)) {
          const std::string piece = to_str(x, *a.budget, p);
          const size_t more = (first ? 0 : s.str().size()) + piece.size();
          a.budget->check_size(out.size() + more, p);
          a.budget->charge_bytes(more, p);
          if (!first) out += s.str();
          out += piece;
          first = false;
        }
        return Value(std::move(out));
      });
    if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum")
      return bind([name](const Value& s, CallArgs&) {
        if (s.str().empty()) return Value(false);
        for (char c : s.str()) {
          const auto u = static_cast<unsigned char>(c);
          const bool ok = name == "isdigit"   ? std::isdigit(u)
                          : name == "isalpha" ? std::isalpha(u)
                          : name == "isspace" ? std::isspace(u)
                                              : std::isalnum(u);
          if (!ok) return Value(false);
        }
        return Value(true);
      });
    return Value::undefined(name);
  }
  if (self.is_dict() && !self.is_namespace()) {
    if (name == "get")
      return bind([](const Value& d, CallArgs& a) {
        const Value k = a.arg(0, "key");
        const Value* v = k.is_string() ? d.dict_ref().find(k.str()) : nullptr;
        if (v) return *v;
        return a.has(1, "default") ? a.arg(1, "default") : Value::none();
      });
    if (name == "items" || name == "keys" || name == "values")
      return bind([name, p](const Value& d, CallArgs& a) {
        a.budget->charge(d.dict_ref().items.size(), p);
        List out;
        for (const auto& [k, v] : d.dict_ref().items) {
          if (name == "items")
            out.push_back(Value::tuple(List{Value(k), v}));
          else if (name == "keys")
            out.emplace_back(k);
          else
            out.push_back(v);
        }
        return Value(std::move(out));
      });
  }
  return Value::undefined(name);
}

// Python-style index normalisation; returns false when out of range.
bool norm_index(int64_t& i, size_t n) {
  if (i < 0) i += static_cast<int64_t>(n);
  return i >= 0 && static_cast<size_t>(i) < n;
}

}  // namespace

// ================================================================================================
// Attribute, item and slice access
// ================================================================================================
Value get_attr(const Value& obj, const std::string& name, Pos p) {
  if (obj.is_undefined())
    error_at(p, (obj.str().empty() ? std::string("value") : "'" + obj.str() + "'") + " is undefined (while reading ." +
                    name + ")");
  if (obj.is_namespace()) return obj.get(name);
  if (obj.is_dict()) {
    Value m = make_method(obj, name, p);
    if (!m.is_undefined()) return m;
    return obj.get(name);
  }
  return make_method(obj, name, p);
}

Value subscript(const Value& obj, const Value& key, Pos p) {
  if (obj.is_undefined())
    error_at(p,
             (obj.str().empty() ? std::string("value") : "'" + obj.str() + "'") + " is undefined (while subscripting)");
  if (obj.is_dict()) {
    if (key.is_string()) {
      const Value* v = obj.dict_ref().find(key.str());
      if (v) return *v;
      return get_attr(obj, key.str(), p);
    }
    return Value::undefined();
  }
  if ((obj.is_list() || obj.is_string()) && is_intlike(key)) {
    int64_t i = num_i(key);
    if (obj.is_list()) {
      if (!norm_index(i, obj.list().size())) return Value::undefined();
      return obj.list()[static_cast<size_t>(i)];
    }
    const auto cps = decode(obj.str());
    if (!norm_index(i, cps.size())) return Value::undefined();
    return Value(encode(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1));
  }
  if (key.is_string()) return get_attr(obj, key.str(), p);
  return Value::undefined();
}

Value slice(const Value& obj, const Value& a, const Value& b, const Value& c, Context& ctx, Pos p) {
  require_defined(obj, p);
  auto opt = [&](const Value& v) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!is_intlike(v)) error_at(p, "slice indices must be integers or none");
    return num_i(v);
  };
  const int64_t step = opt(c).value_or(1);
  if (step == 0) error_at(p, "slice step cannot be zero");
  std::vector<uint32_t> cps;
  const bool is_str = obj.is_string();
  if (!is_str && !obj.is_list()) error_at(p, "cannot slice a " + kind_name(obj));
  if (is_str) cps = decode(obj.str());
  const int64_t n = is_str ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(obj.list().size());
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x = x < -n ? -n - 1 : x + n;  // (no overflow for x near INT64_MIN)
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t start = clamp(opt(a), step > 0 ? 0 : n - 1), stop = clamp(opt(b), step > 0 ? n : -1);
  // Item count first, in unsigned arithmetic: start + k * step never overflows (|step| may be 2^63).
  const uint64_t span = step > 0 ? (start < stop ? static_cast<uint64_t>(stop - start) : 0)
                                 : (start > stop ? static_cast<uint64_t>(start - stop) : 0);
  const uint64_t stride = step > 0 ? static_cast<uint64_t>(step) : uint64_t{0} - static_cast<uint64_t>(step);
  const uint64_t count = span == 0 ? 0 : (span - 1) / stride + 1;
  ctx.budget.charge(count, p);
  List items;
  std::vector<uint32_t> out_cps;
  for (uint64_t k = 0; k < count; ++k) {
    const uint64_t offset = k * stride;  // < span <= n + 1
    const auto i = static_cast<size_t>(step > 0 ? start + static_cast<int64_t>(offset)
                                                : start - static_cast<int64_t>(offset));
    if (is_str)
      out_cps.push_back(cps[i]);
    else
      items.push_back(obj.list()[i]);
  }
  return is_str ? Value(encode(out_cps)) : Value(std::move(items));
}

Value call_function(const Value& f, CallArgs& args, Context& ctx, Pos p) {
  if (f.is_undefined())
    error_at(p,
             (f.str().empty() ? std::string("value") : "'" + f.str() + "'") + " is undefined (called as a function)");
  if (f.kind() != Value::Kind::function) error_at(p, "'" + kind_name(f) + "' object is not callable");
  args.budget = &ctx.budget;
  args.pos = p;
  try {
    return f.func()(args);
  } catch (const RaisedError& e) {
    fail(Status::invalid_argument, "chat template raised an exception: " + e.message + " (line " +
                                       std::to_string(p.line) + ", column " + std::to_string(p.col) + ")");
  }
}

// ================================================================================================
// Globals
// ================================================================================================
void install_globals(std::unordered_map<std::string, Value>& g, Context& ctx) {
  Context* c = &ctx;
  g["range"] = Value::function(
      [](CallArgs& a) {
        const Pos p = a.pos;
        int64_t start = 0, stop = 0, step = 1;
        if (a.positional.size() == 1) {
          stop = to_int_arg(a.positional[0], 0, p);
        } else if (a.positional.size() >= 2) {
          start = to_int_arg(a.positional[0], 0, p);
          stop = to_int_arg(a.positional[1], 0, p);
          if (a.positional.size() >= 3) step = to_int_arg(a.positional[2], 1, p);
        }
        if (step == 0) error_at(p, "range() step must not be zero");
        // Length first (128-bit: stop - start may not fit int64), checked before anything is allocated.
        const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
        const __int128 stride = step > 0 ? static_cast<__int128>(step) : -static_cast<__int128>(step);
        const __int128 count = span <= 0 ? 0 : (span - 1) / stride + 1;
        const uint64_t n = count > static_cast<__int128>(std::numeric_limits<uint64_t>::max())
                               ? std::numeric_limits<uint64_t>::max()
                               : static_cast<uint64_t>(count);
        a.budget->check_list(n, p);
        List out;
        out.reserve(n);
        for (uint64_t i = 0; i < n; ++i) out.emplace_back(static_cast<int64_t>(start + static_cast<__int128>(i) * step));
        return Value(std::move(out));
      },
      "range");
  auto make_dict = [c](bool ns) {
    return [ns, c](CallArgs& a) {
      Value d = ns ? Value::namespace_() : Value::dict();
      for (const auto& x : a.positional)
        if (x.is_dict())
          for (const auto& [k, v] : x.dict_ref().items) d.set(k, v);
      for (const auto& [k, v] : a.keyword) d.set(k, v);
      if (ns) c->namespaces.push_back(d);
      return d;
    };
  };
  g["namespace"] = Value::function(make_dict(true), "namespace");
  g["dict"] = Value::function(make_dict(false), "dict");
  g["raise_exception"] = Value::function(
      [](CallArgs& a) -> Value { throw RaisedError{to_str(a.arg(0, "message"), *a.budget, a.pos)}; },
      "raise_exception");
  g["strftime_now"] = Value::function(
      [c](CallArgs& a) {
        const std::string fmt = to_str(a.arg(0, "format"), *a.budget, a.pos);
        const std::time_t t = c->now ? *c->now : std::time(nullptr);
        std::tm tm{};
        localtime_r(&t, &tm);
        char buf[512];
        const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
        return Value(std::string(buf, n));
      },
      "strftime_now");
}

}  // namespace flashkit::chat::jinja
