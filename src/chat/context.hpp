// A render in progress: variable scopes, the clock for strftime_now, the render budget and the evaluation
// nesting. One Context per Template::render call; everything in it dies with the render.
#pragma once
#include <ctime>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/budget.hpp"
#include "chat/value.hpp"

namespace flashkit::chat::jinja {

struct Context {
  explicit Context(const RenderLimits& limits) : budget(limits) {}
  ~Context();  // empties the namespaces (below) so reference cycles through them are freed
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  std::vector<std::unordered_map<std::string, Value>> scopes;  // [0] = globals + render variables
  std::optional<std::time_t> now;
  Budget budget;
  int eval_depth = 0;  // evaluations in flight (RenderLimits::max_eval_depth)
  // Every namespace this render made. A namespace is the one mutable value, so `ns.x = ns` or a chain of
  // namespaces can form cycles or arbitrarily deep chains that reference counting alone would leak, or free
  // by deep recursion; emptying them one by one at the end frees them flat.
  std::vector<Value> namespaces;

  Value lookup(const std::string& name) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value::undefined(name);
  }
  void assign(const std::string& name, Value v) { scopes.back()[name] = std::move(v); }
};

struct ScopeGuard {
  Context& ctx;
  explicit ScopeGuard(Context& c) : ctx(c) { ctx.scopes.emplace_back(); }
  ~ScopeGuard() { ctx.scopes.pop_back(); }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
};

}  // namespace flashkit::chat::jinja
