#include "chat/parser.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "chat/limits.hpp"
#include "chat/text.hpp"

namespace flashkit::chat::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_template() {
    std::string end;
    Body b = parse_body({}, end);
    return b;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == Tok::op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == Tok::name && cur().value == n; }
  Token next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::text:
        return "template text";
      case Tok::var_begin:
        return "'{{'";
      case Tok::var_end:
        return "'}}'";
      case Tok::block_begin:
        return "'{%'";
      case Tok::block_end:
        return "'%}'";
      case Tok::name:
        return "'" + t.value + "'";
      case Tok::string:
        return "string literal";
      case Tok::integer:
      case Tok::floating:
        return "number " + t.value;
      case Tok::op:
        return "'" + t.value + "'";
      case Tok::eof:
        return "end of template";
    }
    return "?";
  }
  [[noreturn]] void unexpected(const std::string& expected) const {
    error_at(cur().pos, "expected " + expected + ", got " + describe(cur()));
  }
  void expect_op(const char* op) {
    if (!is_op(op)) unexpected(std::string("'") + op + "'");
    next();
  }
  void expect_block_end() {
    if (cur().type != Tok::block_end) unexpected("'%}'");
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::name) unexpected("a name");
    return next().value;
  }

  template <class T>
  std::unique_ptr<T> node(Pos p) {
    auto n = std::make_unique<T>();
    n->pos = p;
    return n;
  }

  // A finished expression node: one level above its tallest child. Chains (a + b + c, x|f|g, a.b.c) grow
  // the tree without recursing here, so the height is checked on every node, not just on recursion.
  static int height(const ExprP& e) { return e ? e->height : 0; }
  template <class T>
  static std::unique_ptr<T> sealed(std::unique_ptr<T> n, int tallest_child) {
    n->height = tallest_child + 1;
    if (n->height > kMaxTemplateNesting) nesting_error(n->pos, kMaxTemplateNesting);
    return n;
  }

  // Counts the parser's own recursion (statements in statements, parenthesised and bracketed expressions,
  // `not not ...`, `- - ...`): kMaxTemplateNesting levels at most.
  struct Nest {
    Parser& ps;
    Nest(Parser& p, Pos at) : ps(p) {
      if (ps.depth_ >= kMaxTemplateNesting) nesting_error(at, kMaxTemplateNesting);
      ++ps.depth_;
    }
    ~Nest() { --ps.depth_; }
  };

  // Parses statements until a block tag whose keyword is in `stops` (consumed: '{%' and the keyword; the
  // caller parses the rest of that tag). `end` receives the keyword ("" at end of template).
  Body parse_body(const std::vector<std::string>& stops, std::string& end) {
    const Nest nest(*this, cur().pos);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::eof) {
        if (!stops.empty()) {
          std::string list;
          for (const auto& s : stops) list += (list.empty() ? "'" : " or '") + s + "'";
          error_at(t.pos, "unexpected end of template, expected " + list);
        }
        end.clear();
        return body;
      }
      if (t.type == Tok::text) {
        auto n = node<TextS>(t.pos);
        n->text = t.value;
        body.push_back(std::move(n));
        next();
        continue;
      }
      if (t.type == Tok::var_begin) {
        next();
        auto n = node<OutS>(t.pos);
        n->e = parse_tuple_expr();
        if (cur().type != Tok::var_end) unexpected("'}}'");
        next();
        body.push_back(std::move(n));
        continue;
      }
      if (t.type == Tok::block_begin) {
        next();
        if (cur().type != Tok::name) unexpected("a statement name");
        const std::string kw = cur().value;
        if (std::find(stops.begin(), stops.end(), kw) != stops.end()) {
          next();
          end = kw;
          return body;
        }
        if (kw.rfind("end", 0) == 0 || kw == "elif" || kw == "else") {
          std::string list;
          for (const auto& s : stops) list += (list.empty() ? "'" : " or '") + s + "'";
          error_at(cur().pos, "unexpected '" + kw + "'" + (list.empty() ? std::string() : ", expected " + list));
        }
        body.push_back(parse_statement());
        continue;
      }
      unexpected("template text, '{{' or '{%'");
    }
  }

  StmtP parse_statement() {
    const Token kw = next();
    const std::string& k = kw.value;
    if (k == "if") {
      auto n = node<IfS>(kw.pos);
      ExprP cond = parse_expression();
      expect_block_end();
      while (true) {
        std::string end;
        Body b = parse_body({"elif", "else", "endif"}, end);
        n->branches.emplace_back(std::move(cond), std::move(b));
        if (end == "elif") {
          cond = parse_expression();
          expect_block_end();
          continue;
        }
        if (end == "else") {
          expect_block_end();
          n->otherwise = parse_body({"endif"}, end);
        }
        expect_block_end();
        return n;
      }
    }
    if (k == "for") {
      auto n = node<ForS>(kw.pos);
      const bool paren = is_op("(");
      if (paren) next();
      n->targets.push_back(expect_name());
      while (is_op(",")) {
        next();
        if (paren && is_op(")")) break;
        n->targets.push_back(expect_name());
      }
      if (paren) expect_op(")");
      if (!is_name("in")) unexpected("'in'");
      next();
      n->iter = parse_tuple_expr(false);
      if (is_name("if")) {
        next();
        n->filter = parse_expression();
      }
      if (is_name("recursive")) error_at(cur().pos, "recursive loops are not supported");
      expect_block_end();
      std::string end;
      n->body = parse_body({"else", "endfor"}, end);
      if (end == "else") {
        expect_block_end();
        n->otherwise = parse_body({"endfor"}, end);
      }
      expect_block_end();
      return n;
    }
    if (k == "set") {
      const Pos p = kw.pos;
      std::vector<std::string> targets{expect_name()};
      bool ns_attr = false;
      if (is_op(".")) {
        next();
        targets.push_back(expect_name());
        ns_attr = true;
      } else {
        while (is_op(",")) {
          next();
          targets.push_back(expect_name());
        }
      }
      if (is_op("=")) {
        next();
        auto n = node<SetS>(p);
        n->targets = std::move(targets);
        n->ns_attr = ns_attr;
        n->value = parse_tuple_expr();
        expect_block_end();
        return n;
      }
      if (ns_attr || targets.size() != 1) unexpected("'='");
      expect_block_end();
      auto n = node<SetBlockS>(p);
      n->name = targets[0];
      std::string end;
      n->body = parse_body({"endset"}, end);
      expect_block_end();
      return n;
    }
    if (k == "macro") {
      auto n = node<MacroS>(kw.pos);
      n->name = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        std::string pname = expect_name();
        ExprP dflt;
        if (is_op("=")) {
          next();
          dflt = parse_expression();
        }
        n->params.emplace_back(std::move(pname), std::move(dflt));
        if (!is_op(")")) expect_op(",");
      }
      next();
      expect_block_end();
      std::string end;
      n->body = parse_body({"endmacro"}, end);
      if (cur().type == Tok::name) next();  // {% endmacro name %}
      expect_block_end();
      return n;
    }
    if (k == "break" || k == "continue") {
      auto n = node<FlowS>(kw.pos);
      n->flow = k == "break" ? Flow::brk : Flow::cont;
      expect_block_end();
      return n;
    }
    if (k == "generation") {
      auto n = node<BlockS>(kw.pos);
      expect_block_end();
      std::string end;
      n->body = parse_body({"endgeneration"}, end);
      expect_block_end();
      return n;
    }
    if (k == "filter") {
      auto n = node<FilterBlockS>(kw.pos);
      while (true) {
        std::string name = expect_name();
        ArgsE args;
        if (is_op("(")) args = parse_call_args();
        n->chain.emplace_back(std::move(name), std::move(args));
        if (!is_op("|")) break;
        next();
      }
      expect_block_end();
      std::string end;
      n->body = parse_body({"endfilter"}, end);
      expect_block_end();
      return n;
    }
    error_at(kw.pos, "unknown or unsupported tag '" + k + "'");
  }

  // expression [, expression ...] -> tuple (list) when there is a comma.
  ExprP parse_tuple_expr(bool with_condexpr = true) {
    const Pos p = cur().pos;
    ExprP first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto l = node<ListE>(p);
    l->tuple = true;
    l->items.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (cur().type == Tok::block_end || cur().type == Tok::var_end || is_op(")")) break;
      l->items.push_back(parse_expression(with_condexpr));
    }
    int tallest = 0;
    for (const auto& e : l->items) tallest = std::max(tallest, height(e));
    return sealed(std::move(l), tallest);
  }

  ExprP parse_expression(bool with_condexpr = true) {
    const Pos p = cur().pos;
    const Nest nest(*this, p);
    ExprP e = parse_or();
    while (with_condexpr && is_name("if")) {
      next();
      auto c = node<CondE>(p);
      c->then = std::move(e);
      c->cond = parse_or();
      if (is_name("else")) {
        next();
        c->otherwise = parse_expression();
      }
      const int tallest = std::max({height(c->then), height(c->cond), height(c->otherwise)});
      e = sealed(std::move(c), tallest);
    }
    return e;
  }
  ExprP parse_or() {
    ExprP l = parse_and();
    while (is_name("or")) {
      const Pos p = cur().pos;
      next();
      auto n = node<AndOrE>(p);
      n->is_and = false;
      n->l = std::move(l);
      n->r = parse_and();
      const int tallest = std::max(height(n->l), height(n->r));
      l = sealed(std::move(n), tallest);
    }
    return l;
  }
  ExprP parse_and() {
    ExprP l = parse_not();
    while (is_name("and")) {
      const Pos p = cur().pos;
      next();
      auto n = node<AndOrE>(p);
      n->l = std::move(l);
      n->r = parse_not();
      const int tallest = std::max(height(n->l), height(n->r));
      l = sealed(std::move(n), tallest);
    }
    return l;
  }
  ExprP parse_not() {
    if (is_name("not")) {
      const Pos p = cur().pos;
      next();
      const Nest nest(*this, p);
      auto n = node<NotE>(p);
      n->e = parse_not();
      const int tallest = height(n->e);
      return sealed(std::move(n), tallest);
    }
    return parse_compare();
  }
  ExprP parse_compare() {
    const Pos p = cur().pos;
    ExprP first = parse_math1();
    std::unique_ptr<CompareE> cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                    cur().value == ">" || cur().value == "<=" || cur().value == ">=")) {
        op = next().value;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == Tok::name && peek().value == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node<CompareE>(p);
        cmp->first = std::move(first);
      }
      cmp->rest.emplace_back(op, parse_math1());
    }
    if (!cmp) return first;
    int tallest = height(cmp->first);
    for (const auto& [op, e] : cmp->rest) tallest = std::max(tallest, height(e));
    return sealed(std::move(cmp), tallest);
  }
  ExprP bin(const std::string& op, ExprP l, ExprP r, Pos p) {
    auto n = node<BinE>(p);
    n->op = op;
    n->l = std::move(l);
    n->r = std::move(r);
    const int tallest = std::max(height(n->l), height(n->r));
    return sealed(std::move(n), tallest);
  }
  ExprP parse_math1() {
    ExprP l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token t = next();
      l = bin(t.value, std::move(l), parse_concat(), t.pos);
    }
    return l;
  }
  ExprP parse_concat() {
    ExprP l = parse_math2();
    while (is_op("~")) {
      const Token t = next();
      l = bin("~", std::move(l), parse_math2(), t.pos);
    }
    return l;
  }
  ExprP parse_math2() {
    ExprP l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token t = next();
      l = bin(t.value, std::move(l), parse_pow(), t.pos);
    }
    return l;
  }
  ExprP parse_pow() {
    ExprP l = parse_unary();
    while (is_op("**")) {
      const Token t = next();
      l = bin("**", std::move(l), parse_unary(), t.pos);
    }
    return l;
  }
  ExprP parse_unary(bool with_filter = true) {
    ExprP n;
    if (is_op("-") || is_op("+")) {
      const Token t = next();
      const Nest nest(*this, t.pos);
      auto u = node<NegE>(t.pos);
      u->negate = t.value == "-";
      u->e = parse_unary(false);
      const int tallest = height(u->e);
      n = sealed(std::move(u), tallest);
    } else {
      n = parse_primary();
    }
    n = parse_postfix(std::move(n));
    if (with_filter) n = parse_filter_expr(std::move(n));
    return n;
  }
  ExprP parse_primary() {
    const Token t = cur();
    if (t.type == Tok::name) {
      next();
      auto lit = node<LiteralE>(t.pos);
      if (t.value == "true" || t.value == "True") {
        lit->v = Value(true);
        return lit;
      }
      if (t.value == "false" || t.value == "False") {
        lit->v = Value(false);
        return lit;
      }
      if (t.value == "none" || t.value == "None") {
        lit->v = Value::none();
        return lit;
      }
      auto n = node<NameE>(t.pos);
      n->name = t.value;
      return n;
    }
    if (t.type == Tok::string) {
      std::string s;
      while (cur().type == Tok::string) s += next().value;  // adjacent literals concatenate
      auto lit = node<LiteralE>(t.pos);
      lit->v = Value(std::move(s));
      return lit;
    }
    if (t.type == Tok::integer || t.type == Tok::floating) {
      next();
      auto lit = node<LiteralE>(t.pos);
      if (t.type == Tok::integer) {
        lit->v = Value(integer_literal(t));
      } else {
        lit->v = Value(std::strtod(t.value.c_str(), nullptr));
      }
      return lit;
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        next();
        auto l = node<ListE>(t.pos);
        l->tuple = true;
        return l;
      }
      ExprP e = parse_expression();
      if (is_op(",")) {
        auto l = node<ListE>(t.pos);
        l->tuple = true;
        l->items.push_back(std::move(e));
        while (is_op(",")) {
          next();
          if (is_op(")")) break;
          l->items.push_back(parse_expression());
        }
        int tallest = 0;
        for (const auto& x : l->items) tallest = std::max(tallest, height(x));
        e = sealed(std::move(l), tallest);
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto l = node<ListE>(t.pos);
      while (!is_op("]")) {
        l->items.push_back(parse_expression());
        if (!is_op("]")) expect_op(",");
      }
      next();
      int tallest = 0;
      for (const auto& x : l->items) tallest = std::max(tallest, height(x));
      return sealed(std::move(l), tallest);
    }
    if (is_op("{")) {
      next();
      auto d = node<DictE>(t.pos);
      while (!is_op("}")) {
        ExprP k = parse_expression();
        expect_op(":");
        ExprP v = parse_expression();
        d->items.emplace_back(std::move(k), std::move(v));
        if (!is_op("}")) expect_op(",");
      }
      next();
      int tallest = 0;
      for (const auto& [k, v] : d->items) tallest = std::max({tallest, height(k), height(v)});
      return sealed(std::move(d), tallest);
    }
    unexpected("an expression");
  }
  ExprP parse_postfix(ExprP n) {
    while (true) {
      if (is_op(".")) {
        const Token t = next();
        if (cur().type == Tok::integer) {
          auto it = node<ItemE>(t.pos);
          auto lit = node<LiteralE>(cur().pos);
          lit->v = Value(integer_literal(next()));
          it->obj = std::move(n);
          it->key = std::move(lit);
          const int tallest = height(it->obj);
          n = sealed(std::move(it), tallest);
          continue;
        }
        auto a = node<AttrE>(t.pos);
        a->obj = std::move(n);
        a->name = expect_name();
        const int tallest = height(a->obj);
        n = sealed(std::move(a), tallest);
      } else if (is_op("[")) {
        const Token t = next();
        ExprP start, stop, step;
        bool is_slice = false;
        if (!is_op(":")) start = parse_expression();
        if (is_op(":")) {
          is_slice = true;
          next();
          if (!is_op("]") && !is_op(":")) stop = parse_expression();
          if (is_op(":")) {
            next();
            if (!is_op("]")) step = parse_expression();
          }
        }
        expect_op("]");
        if (is_slice) {
          auto s = node<SliceE>(t.pos);
          s->obj = std::move(n);
          s->a = std::move(start);
          s->b = std::move(stop);
          s->c = std::move(step);
          const int tallest = std::max({height(s->obj), height(s->a), height(s->b), height(s->c)});
          n = sealed(std::move(s), tallest);
        } else {
          auto it = node<ItemE>(t.pos);
          it->obj = std::move(n);
          it->key = std::move(start);
          const int tallest = std::max(height(it->obj), height(it->key));
          n = sealed(std::move(it), tallest);
        }
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        return n;
      }
    }
  }
  ArgsE parse_call_args() {
    expect_op("(");
    ArgsE a;
    while (!is_op(")")) {
      if (cur().type == Tok::name && peek().type == Tok::op && peek().value == "=") {
        std::string k = next().value;
        next();
        a.keyword.emplace_back(std::move(k), parse_expression());
      } else {
        if (!a.keyword.empty()) unexpected("a keyword argument (positional after keyword)");
        a.positional.push_back(parse_expression());
      }
      if (!is_op(")")) expect_op(",");
    }
    next();
    return a;
  }
  ExprP parse_call(ExprP callee) {
    const Pos p = cur().pos;
    auto c = node<CallE>(p);
    c->callee = std::move(callee);
    c->args = parse_call_args();
    const int tallest = std::max(height(c->callee), c->args.height());
    return sealed(std::move(c), tallest);
  }
  std::string dotted_name() {
    std::string name = expect_name();
    while (is_op(".")) {
      next();
      name += "." + expect_name();
    }
    return name;
  }
  ExprP parse_filter_expr(ExprP n) {
    while (true) {
      if (is_op("|")) {
        const Token t = next();
        auto f = node<FilterE>(t.pos);
        f->base = std::move(n);
        f->name = dotted_name();
        if (is_op("(")) f->args = parse_call_args();
        const int tallest = std::max(height(f->base), f->args.height());
        n = sealed(std::move(f), tallest);
      } else if (is_name("is")) {
        const Token t = next();
        auto te = node<TestE>(t.pos);
        te->base = std::move(n);
        if (is_name("not")) {
          next();
          te->negated = true;
        }
        if (cur().type == Tok::name && (cur().value == "none" || cur().value == "true" || cur().value == "false" ||
                                        cur().value == "None" || cur().value == "True" || cur().value == "False")) {
          te->name = ascii_lower(next().value);
        } else {
          te->name = dotted_name();
        }
        if (is_op("(")) {
          te->args = parse_call_args();
        } else if ((cur().type == Tok::name || cur().type == Tok::string || cur().type == Tok::integer ||
                    cur().type == Tok::floating || is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) error_at(cur().pos, "you cannot chain multiple tests with 'is'");
          te->args.positional.push_back(parse_postfix(parse_primary()));
        }
        const int tallest = std::max(height(te->base), te->args.height());
        n = sealed(std::move(te), tallest);
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        return n;
      }
    }
  }

  // Digits of an integer token (the lexer guarantees only digits); past int64 is an error (no big ints here).
  static int64_t integer_literal(const Token& t) {
    errno = 0;
    const long long v = std::strtoll(t.value.c_str(), nullptr, 10);
    if (errno == ERANGE) error_at(t.pos, "integer literal out of range");
    return static_cast<int64_t>(v);
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(std::vector<Token> tokens) { return Parser(std::move(tokens)).parse_template(); }

}  // namespace flashkit::chat::jinja
