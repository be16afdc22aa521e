// The interpreter: evaluates the syntax tree (ast.hpp) against a Context, and the Template front door.
#include <algorithm>

#include "chat/ast.hpp"
#include "chat/builtins.hpp"
#include "chat/context.hpp"
#include "chat/jinja.hpp"
#include "chat/parser.hpp"
#include "flashkit/error.hpp"

namespace flashkit::chat::jinja {

Context::~Context() {
  for (auto& ns : namespaces) ns.clear_dict();
}

// ================================================================================================
// The one door into a node: budget, nesting, value depth
// ================================================================================================
Value Expr::eval(Context& ctx) const {
  const DepthGuard guard(ctx.eval_depth, ctx.budget.limits().max_eval_depth, pos);
  ctx.budget.charge(1, pos);
  Value v = eval_impl(ctx);
  ctx.budget.check_value_depth(v.depth(), pos);
  if (v.is_string()) ctx.budget.check_string(v.str().size(), pos);  // strings are copied by value: pay for it
  return v;
}

Flow Stmt::exec(Context& ctx, std::string& out) const {
  const DepthGuard guard(ctx.eval_depth, ctx.budget.limits().max_eval_depth, pos);
  ctx.budget.charge(1, pos);
  return exec_impl(ctx, out);
}

Flow exec_body(const Body& body, Context& ctx, std::string& out) {
  for (const auto& s : body) {
    const Flow f = s->exec(ctx, out);
    if (f != Flow::normal) return f;
  }
  return Flow::normal;
}

namespace {

// Appends rendered text, within the output limit.
void emit(Context& ctx, std::string& out, std::string_view text, Pos p) {
  ctx.budget.check_size(out.size() + text.size(), p);
  ctx.budget.charge_bytes(text.size(), p);
  out += text;
}

}  // namespace

// ================================================================================================
// Expressions
// ================================================================================================
Value LiteralE::eval_impl(Context&) const { return v; }

Value NameE::eval_impl(Context& ctx) const { return ctx.lookup(name); }

Value ListE::eval_impl(Context& ctx) const {
  List l;
  l.reserve(items.size());
  for (const auto& e : items) l.push_back(e->eval(ctx));
  return tuple ? Value::tuple(std::move(l)) : Value(std::move(l));
}

Value DictE::eval_impl(Context& ctx) const {
  Value d = Value::dict();
  for (const auto& [k, v] : items) {
    const Value key = k->eval(ctx);
    d.set(key.is_string() ? key.str() : to_str(key, ctx.budget, pos), v->eval(ctx));
  }
  return d;
}

Value AttrE::eval_impl(Context& ctx) const { return get_attr(obj->eval(ctx), name, pos); }

Value ItemE::eval_impl(Context& ctx) const {
  const Value o = obj->eval(ctx);
  return subscript(o, key->eval(ctx), pos);
}

Value SliceE::eval_impl(Context& ctx) const {
  auto ev = [&](const ExprP& e) { return e ? e->eval(ctx) : Value::none(); };
  const Value o = obj->eval(ctx);
  const Value x = ev(a), y = ev(b), z = ev(c);
  return slice(o, x, y, z, ctx, pos);
}

CallArgs ArgsE::eval(Context& ctx) const {
  CallArgs a;
  for (const auto& e : positional) a.positional.push_back(e->eval(ctx));
  for (const auto& [k, e] : keyword) a.keyword.emplace_back(k, e->eval(ctx));
  return a;
}

int ArgsE::height() const {
  int h = 0;
  for (const auto& e : positional) h = std::max(h, e->height);
  for (const auto& [k, e] : keyword) h = std::max(h, e->height);
  return h;
}

Value CallE::eval_impl(Context& ctx) const {
  const Value f = callee->eval(ctx);
  CallArgs a = args.eval(ctx);
  return call_function(f, a, ctx, pos);
}

Value FilterE::eval_impl(Context& ctx) const {
  const Value v = base->eval(ctx);
  CallArgs a = args.eval(ctx);
  return run_filter(name, v, a, ctx, pos);
}

Value TestE::eval_impl(Context& ctx) const {
  const Value v = base->eval(ctx);
  CallArgs a = args.eval(ctx);
  return Value(run_test(name, v, a, ctx, pos) != negated);
}

Value NotE::eval_impl(Context& ctx) const { return Value(!e->eval(ctx).truthy()); }

Value NegE::eval_impl(Context& ctx) const {
  const Value v = e->eval(ctx);
  if (!numeric(v)) error_at(pos, "bad operand type for unary " + std::string(negate ? "-" : "+") + ": " + kind_name(v));
  if (!negate) return v;
  return unary_minus(v, pos);
}

Value BinE::eval_impl(Context& ctx) const {
  const Value a = l->eval(ctx);
  return binary_arith(op, a, r->eval(ctx), ctx, pos);
}

Value AndOrE::eval_impl(Context& ctx) const {
  Value a = l->eval(ctx);
  if (is_and ? !a.truthy() : a.truthy()) return a;
  return r->eval(ctx);
}

Value CompareE::eval_impl(Context& ctx) const {
  Value a = first->eval(ctx);
  for (const auto& [op, e] : rest) {
    Value b = e->eval(ctx);
    bool ok;
    if (op == "==")
      ok = equal(a, b, ctx.budget, pos);
    else if (op == "!=")
      ok = !equal(a, b, ctx.budget, pos);
    else if (op == "in")
      ok = contains(b, a, ctx.budget, pos);
    else if (op == "not in")
      ok = !contains(b, a, ctx.budget, pos);
    else {
      const int c = compare(a, b, ctx.budget, pos);
      ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!ok) return Value(false);
    a = std::move(b);
  }
  return Value(true);
}

Value CondE::eval_impl(Context& ctx) const {
  if (cond->eval(ctx).truthy()) return then->eval(ctx);
  return otherwise ? otherwise->eval(ctx) : Value::undefined();
}

// ================================================================================================
// Statements
// ================================================================================================
Flow TextS::exec_impl(Context& ctx, std::string& out) const {
  emit(ctx, out, text, pos);
  return Flow::normal;
}

Flow OutS::exec_impl(Context& ctx, std::string& out) const {
  emit(ctx, out, to_str(e->eval(ctx), ctx.budget, pos), pos);
  return Flow::normal;
}

Flow IfS::exec_impl(Context& ctx, std::string& out) const {
  for (const auto& [c, b] : branches)
    if (c->eval(ctx).truthy()) return exec_body(b, ctx, out);
  return exec_body(otherwise, ctx, out);
}

namespace {

void assign_targets(Context& ctx, const std::vector<std::string>& targets, const Value& v, Pos p) {
  if (targets.size() == 1) {
    ctx.assign(targets[0], v);
    return;
  }
  const List items = iterate(v, ctx.budget, p);
  if (items.size() != targets.size())
    error_at(p, "cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) +
                    " names");
  for (size_t i = 0; i < targets.size(); ++i) ctx.assign(targets[i], items[i]);
}

}  // namespace

Flow ForS::exec_impl(Context& ctx, std::string& out) const {
  const Value seq = iter->eval(ctx);
  if (seq.is_none()) error_at(pos, "'NoneType' object is not iterable");
  List items = iterate(seq, ctx.budget, pos);
  ScopeGuard scope(ctx);
  if (filter) {
    List kept;
    for (const auto& it : items) {
      assign_targets(ctx, targets, it, pos);
      if (filter->eval(ctx).truthy()) kept.push_back(it);
    }
    items = std::move(kept);
  }
  const Value outer_loop = ctx.lookup("loop");
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    ctx.budget.charge(1, pos);
    Value loop = Value::dict();
    loop.set("index0", Value(i));
    loop.set("index", Value(i + 1));
    loop.set("revindex", Value(n - i));
    loop.set("revindex0", Value(n - i - 1));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(i == n - 1));
    loop.set("length", Value(n));
    loop.set("depth", Value(static_cast<int64_t>(1)));
    loop.set("depth0", Value(static_cast<int64_t>(0)));
    loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("previtem"));
    loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("nextitem"));
    const Pos p = pos;
    loop.set("cycle", Value::function(
                          [i, p](CallArgs& a) {
                            if (a.positional.empty()) error_at(p, "loop.cycle needs at least one argument");
                            return a.positional[static_cast<size_t>(i) % a.positional.size()];
                          },
                          "cycle"));
    ctx.assign("loop", loop);
    assign_targets(ctx, targets, items[static_cast<size_t>(i)], pos);
    const Flow f = exec_body(body, ctx, out);
    if (f == Flow::brk) break;
  }
  if (n == 0) {
    ctx.assign("loop", outer_loop);
    return exec_body(otherwise, ctx, out);
  }
  return Flow::normal;
}

Flow SetS::exec_impl(Context& ctx, std::string&) const {
  Value v = value->eval(ctx);
  if (ns_attr) {
    Value ns = ctx.lookup(targets[0]);
    if (!ns.is_namespace()) error_at(pos, "cannot assign attribute on non-namespace object '" + targets[0] + "'");
    ns.set(targets[1], std::move(v));  // namespaces are shared: this updates every reference
    ctx.budget.check_value_depth(ns.depth(), pos);
  } else {
    assign_targets(ctx, targets, v, pos);
  }
  return Flow::normal;
}

Flow SetBlockS::exec_impl(Context& ctx, std::string&) const {
  std::string captured;
  exec_body(body, ctx, captured);
  ctx.assign(name, Value(std::move(captured)));
  return Flow::normal;
}

Flow FilterBlockS::exec_impl(Context& ctx, std::string& out) const {
  std::string captured;
  exec_body(body, ctx, captured);
  Value v(std::move(captured));
  for (const auto& [name, args] : chain) {
    CallArgs a = args.eval(ctx);
    v = run_filter(name, v, a, ctx, pos);
  }
  emit(ctx, out, to_str(v, ctx.budget, pos), pos);
  return Flow::normal;
}

Flow FlowS::exec_impl(Context&, std::string&) const { return flow; }

Flow BlockS::exec_impl(Context& ctx, std::string& out) const { return exec_body(body, ctx, out); }

Flow MacroS::exec_impl(Context& ctx, std::string&) const {
  Context* c = &ctx;
  const MacroS* self = this;
  ctx.assign(name, Value::function(
                       [c, self](CallArgs& a) {
                         if (a.positional.size() > self->params.size())
                           error_at(self->pos, "macro '" + self->name + "' takes " +
                                                   std::to_string(self->params.size()) + " arguments");
                         // A recursive macro nests evaluations: the same limit as any nesting.
                         const DepthGuard guard(c->eval_depth, c->budget.limits().max_eval_depth, self->pos);
                         ScopeGuard scope(*c);
                         for (size_t i = 0; i < self->params.size(); ++i) {
                           const auto& [pname, dflt] = self->params[i];
                           Value v = a.arg(i, pname);
                           if (v.is_undefined() && !a.has(i, pname) && dflt) v = dflt->eval(*c);
                           c->assign(pname, v);
                         }
                         std::string out;
                         exec_body(self->body, *c, out);
                         return Value(std::move(out));
                       },
                       name));
  return Flow::normal;
}

// ================================================================================================
// Template
// ================================================================================================
struct Template::Impl {
  Body body;
};

Template::Template(std::string_view source, Options options) : impl_(std::make_unique<Impl>()) {
  impl_->body = parse(lex(source, options));
}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Value& variables, std::optional<std::time_t> now,
                             const RenderLimits& limits) const {
  Context ctx(limits);
  ctx.now = now;
  ctx.scopes.emplace_back();
  install_globals(ctx.scopes[0], ctx);
  if (variables.is_dict())
    for (const auto& [k, v] : variables.dict_ref().items) ctx.scopes[0][k] = v;
  ctx.scopes.emplace_back();  // template-level assignments
  std::string out;
  exec_body(impl_->body, ctx, out);
  return out;
}

}  // namespace flashkit::chat::jinja
