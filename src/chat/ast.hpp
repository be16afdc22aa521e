// The template's syntax tree: expression nodes (evaluate to a Value) and statement nodes (append to the
// output). The parser (parser.cpp) builds it; the interpreter (render.cpp) implements eval/exec.
//
// Expr::eval and Stmt::exec are the one door into a node: they pay a step of the render budget, count the
// evaluation nesting, and refuse values nested deeper than the limits (limits.hpp) before handing over to the
// node's own eval_impl/exec_impl.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/diagnostics.hpp"
#include "chat/value.hpp"

namespace flashkit::chat::jinja {

struct Context;

struct Expr {
  Pos pos;
  int height = 1;  // levels of this expression tree, at most kMaxTemplateNesting (checked by the parser)
  virtual ~Expr() = default;
  Value eval(Context& ctx) const;

 protected:
  virtual Value eval_impl(Context& ctx) const = 0;
};
using ExprP = std::unique_ptr<Expr>;

enum class Flow { normal, brk, cont };

struct Stmt {
  Pos pos;
  virtual ~Stmt() = default;
  Flow exec(Context& ctx, std::string& out) const;

 protected:
  virtual Flow exec_impl(Context& ctx, std::string& out) const = 0;
};
using StmtP = std::unique_ptr<Stmt>;
using Body = std::vector<StmtP>;

Flow exec_body(const Body& body, Context& ctx, std::string& out);

// ---------- expressions ----------
struct LiteralE : Expr {
  Value v;
  Value eval_impl(Context& ctx) const override;
};
struct NameE : Expr {
  std::string name;
  Value eval_impl(Context& ctx) const override;
};
struct ListE : Expr {
  std::vector<ExprP> items;
  bool tuple = false;
  Value eval_impl(Context& ctx) const override;
};
struct DictE : Expr {
  std::vector<std::pair<ExprP, ExprP>> items;
  Value eval_impl(Context& ctx) const override;
};
struct AttrE : Expr {
  ExprP obj;
  std::string name;
  Value eval_impl(Context& ctx) const override;
};
struct ItemE : Expr {
  ExprP obj, key;
  Value eval_impl(Context& ctx) const override;
};
struct SliceE : Expr {
  ExprP obj, a, b, c;
  Value eval_impl(Context& ctx) const override;
};
struct ArgsE {
  std::vector<ExprP> positional;
  std::vector<std::pair<std::string, ExprP>> keyword;
  CallArgs eval(Context& ctx) const;
  int height() const;  // the tallest argument's
};
struct CallE : Expr {
  ExprP callee;
  ArgsE args;
  Value eval_impl(Context& ctx) const override;
};
struct FilterE : Expr {
  ExprP base;
  std::string name;
  ArgsE args;
  Value eval_impl(Context& ctx) const override;
};
struct TestE : Expr {
  ExprP base;
  std::string name;
  ArgsE args;
  bool negated = false;
  Value eval_impl(Context& ctx) const override;
};
struct NotE : Expr {
  ExprP e;
  Value eval_impl(Context& ctx) const override;
};
struct NegE : Expr {
  ExprP e;
  bool negate = true;
  Value eval_impl(Context& ctx) const override;
};
struct BinE : Expr {
  std::string op;
  ExprP l, r;
  Value eval_impl(Context& ctx) const override;
};
struct AndOrE : Expr {
  bool is_and = true;
  ExprP l, r;
  Value eval_impl(Context& ctx) const override;
};
struct CompareE : Expr {
  ExprP first;
  std::vector<std::pair<std::string, ExprP>> rest;
  Value eval_impl(Context& ctx) const override;
};
struct CondE : Expr {
  ExprP cond, then, otherwise;
  Value eval_impl(Context& ctx) const override;
};

// ---------- statements ----------
struct TextS : Stmt {
  std::string text;
  Flow exec_impl(Context& ctx, std::string& out) const override;
};
struct OutS : Stmt {  // {{ e }}
  ExprP e;
  Flow exec_impl(Context& ctx, std::string& out) const override;
};
struct IfS : Stmt {
  std::vector<std::pair<ExprP, Body>> branches;
  Body otherwise;
  Flow exec_impl(Context& ctx, std::string& out) const override;
};
struct ForS : Stmt {
  std::vector<std::string> targets;
  ExprP iter, filter;
  Body body, otherwise;
  Flow exec_impl(Context& ctx, std::string& out) const override;
};
struct SetS : Stmt {
  std::vector<std::string> targets;  // names, or {namespace, attribute} when ns_attr
  bool ns_attr = false;
  ExprP value;
  Flow exec_impl(Context& ctx, std::string& out) const override;
};
struct SetBlockS : Stmt {  // {% set x %}...{% endset %}
  std::string name;
  Body body;
  Flow exec_impl(Context& ctx, std::string& out) const override;
};
struct FilterBlockS : Stmt {  // {% filter f|g %}...{% endfilter %}
  std::vector<std::pair<std::string, ArgsE>> chain;
  Body body;
  Flow exec_impl(Context& ctx, std::string& out) const override;
};
struct FlowS : Stmt {  // break / continue
  Flow flow;
  Flow exec_impl(Context& ctx, std::string& out) const override;
};
struct BlockS : Stmt {  // {% generation %}: renders its body
  Body body;
  Flow exec_impl(Context& ctx, std::string& out) const override;
};
struct MacroS : Stmt {
  std::string name;
  std::vector<std::pair<std::string, ExprP>> params;
  Body body;
  Flow exec_impl(Context& ctx, std::string& out) const override;
};

}  // namespace flashkit::chat::jinja
