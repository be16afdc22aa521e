// The interpreter's builtins: operators (+ - * / // % ** ~, unary minus) with Python's semantics on int64
// and double, attribute / item / slice access, the str and dict methods templates call, function calls,
// filters and tests (filters.cpp), and the globals (range, namespace, dict, raise_exception, strftime_now).
//
// Integers are int64: an operation whose exact result does not fit (Python would give a big int) is an
// "integer overflow" error, never a wrapped value or a crash.
#pragma once
#include <string>
#include <unordered_map>

#include "chat/context.hpp"
#include "chat/value.hpp"

namespace flashkit::chat::jinja {

// raise_exception(msg): carried up to the call site, which adds the template position.
struct RaisedError {
  std::string message;
};

Value binary_arith(const std::string& op, const Value& a, const Value& b, Context& ctx, Pos p);
Value unary_minus(const Value& v, Pos p);
Value get_attr(const Value& obj, const std::string& name, Pos p);
Value subscript(const Value& obj, const Value& key, Pos p);
Value slice(const Value& obj, const Value& a, const Value& b, const Value& c, Context& ctx, Pos p);
Value call_function(const Value& f, CallArgs& args, Context& ctx, Pos p);

// Filters and tests by name; an unknown name is an error at p.
Value run_filter(const std::string& name, const Value& v, CallArgs& args, Context& ctx, Pos p);
bool run_test(const std::string& name, const Value& v, CallArgs& args, Context& ctx, Pos p);

// Python str.split(sep=None, maxsplit=-1).
List py_split(const std::string& s, const Value& sep, int64_t maxsplit, Budget& budget, Pos p);
// Python str.replace; the result's size is checked against the output limit before it is built.
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                       Budget& budget, Pos p);
// An integer argument (bool counts), `dflt` when absent or none.
int64_t to_int_arg(const Value& v, int64_t dflt, Pos p);
// "a.b.0.c" applied to v, as jinja2's attribute= arguments.
Value attr_path(const Value& v, const std::string& path, Context& ctx, Pos p);

void install_globals(std::unordered_map<std::string, Value>& globals, Context& ctx);

}  // namespace flashkit::chat::jinja
