// tokenizer/jinja/parser.cpp — see parser.h. The grammar follows Jinja's own parser:
//   expression := or ('if' or ('else' expression)?)*
//   or := and ('or' and)* ; and := not ('and' not)* ; not := 'not' not | compare
//   compare := math1 (('=='|'!='|'<'|'<='|'>'|'>='|'in'|'not' 'in') math1)*
//   math1 := concat (('+'|'-') concat)* ; concat := math2 ('~' math2)*
//   math2 := pow (('*'|'/'|'//'|'%') pow)* ; pow := unary ('**' unary)*
//   unary := ('-'|'+') unary-without-filters | primary, then postfix (. [] ()), then
//            filters/tests (| name(args), is [not] name args)
#include "tokenizer/jinja/parser.h"

#include <algorithm>

#include <fmt/format.h>

#include "tokenizer/jinja/lexer.h"

namespace hs::jinja {

namespace {

constexpr int kMaxDepth = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  std::shared_ptr<const Program> run() {
    auto prog = std::make_shared<Program>();
    std::string end;
    prog->body = subparse({}, &end);
    return prog;
  }

 private:
  // --- token helpers ---------------------------------------------------------------------------
  const Token& cur() const { return t_[i_]; }
  const Token& look(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().type == TokType::kOp && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == TokType::kName && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokType::kData: return "template data";
      case TokType::kVarBegin: return "'{{'";
      case TokType::kVarEnd: return "end of print statement '}}'";
      case TokType::kBlockBegin: return "'{%'";
      case TokType::kBlockEnd: return "end of statement block '%}'";
      case TokType::kName: return "'" + t.text + "'";
      case TokType::kString: return "string";
      case TokType::kInt:
      case TokType::kFloat: return "number " + t.text;
      case TokType::kOp: return "'" + t.text + "'";
      case TokType::kEof: return "end of template";
    }
    return "token";
  }

  [[noreturn]] void error(const std::string& msg, int line = 0) const {
    int l = line ? line : cur().line;
    fail(StatusCode::kInvalidArgument, fmt::format("jinja syntax error at line {}: {}", l, msg), l);
  }
  [[noreturn]] void unsupported(const std::string& what, int line) const {
    fail(StatusCode::kUnsupported, fmt::format("jinja: unsupported {} at line {}", what, line), line);
  }

  void expect_op(std::string_view op) {
    if (!skip_op(op)) error(fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  std::string expect_name() {
    if (cur().type != TokType::kName) error(fmt::format("expected a name, got {}", describe(cur())));
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().type != TokType::kBlockEnd) error(fmt::format("expected end of statement block, got {}", describe(cur())));
    advance();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxDepth) p_->error("template nesting is too deep");
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };

  static ExprPtr make(ExprOp op, int line) {
    auto e = std::make_unique<Expr>();
    e->op = op;
    e->line = line;
    return e;
  }

  // --- statements ------------------------------------------------------------------------------
  Body subparse(const std::vector<std::string>& ends, std::string* which_end) {
    DepthGuard guard(this);
    Body body;
    while (true) {
      const Token& tok = cur();
      switch (tok.type) {
        case TokType::kData: {
          auto s = std::make_unique<Stmt>();
          s->op = StmtOp::kData;
          s->line = tok.line;
          s->text = tok.text;
          body.push_back(std::move(s));
          advance();
          break;
        }
        case TokType::kVarBegin: {
          int line = tok.line;
          advance();
          auto s = std::make_unique<Stmt>();
          s->op = StmtOp::kOutput;
          s->line = line;
          s->exprs.push_back(parse_tuple(true, {}, false));
          if (cur().type != TokType::kVarEnd) error(fmt::format("expected end of print statement, got {}", describe(cur())));
          advance();
          body.push_back(std::move(s));
          break;
        }
        case TokType::kBlockBegin: {
          advance();
          if (cur().type != TokType::kName) error(fmt::format("tag name expected, got {}", describe(cur())));
          if (std::find(ends.begin(), ends.end(), cur().text) != ends.end()) {
            *which_end = cur().text;
            advance();
            return body;
          }
          body.push_back(parse_statement());
          expect_block_end();
          break;
        }
        case TokType::kEof:
          if (!ends.empty()) {
            std::string want;
            for (const auto& e : ends) want += (want.empty() ? "" : " or ") + ("'" + e + "'");
            error(fmt::format("unexpected end of template, expected {}", want));
          }
          return body;
        default:
          error(fmt::format("unexpected {}", describe(tok)));
      }
    }
  }

  StmtPtr new_stmt(StmtOp op, int line) {
    auto s = std::make_unique<Stmt>();
    s->op = op;
    s->line = line;
    return s;
  }

  StmtPtr parse_statement() {
    const std::string tag = cur().text;
    int line = cur().line;
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "call") return parse_call_block();
    if (tag == "filter") return parse_filter_block();
    if (tag == "with") return parse_with();
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) error(fmt::format("'{}' outside of a loop", tag));
      advance();
      return new_stmt(tag == "break" ? StmtOp::kBreak : StmtOp::kContinue, line);
    }
    if (tag == "generation") {  // transformers' assistant-mask extension: renders its body
      advance();
      auto s = new_stmt(StmtOp::kScope, line);
      s->bodies.push_back(parse_body({"endgeneration"}));
      return s;
    }
    static const char* kKnownUnsupported[] = {"include", "import", "from", "extends", "block",
                                              "autoescape", "do", "trans", "pluralize", "print"};
    for (const char* k : kKnownUnsupported) {
      if (tag == k) unsupported(fmt::format("statement '{{% {} %}}'", tag), line);
    }
    if (tag.rfind("end", 0) == 0 || tag == "else" || tag == "elif") {
      error(fmt::format("unexpected '{{% {} %}}' with no open block to close", tag), line);
    }
    unsupported(fmt::format("statement '{{% {} %}}'", tag), line);
  }

  // Parses `%}` body `{% <end>`, leaving the cursor after the end tag's name.
  Body parse_body(const std::vector<std::string>& ends, std::string* which = nullptr) {
    expect_block_end();
    std::string end;
    Body b = subparse(ends, &end);
    if (which) *which = end;
    return b;
  }

  StmtPtr parse_if() {
    auto s = new_stmt(StmtOp::kIf, cur().line);
    advance();
    while (true) {
      s->exprs.push_back(parse_tuple(false, {}, false));
      std::string which;
      s->bodies.push_back(parse_body({"elif", "else", "endif"}, &which));
      if (which == "elif") continue;
      if (which == "else") s->bodies.push_back(parse_body({"endif"}));
      return s;
    }
  }

  // Names for `for`/`set`/`with` targets: `a` or `a, b` (optionally parenthesized).
  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    bool paren = skip_op("(");
    while (true) {
      names.push_back(expect_name());
      if (!skip_op(",")) break;
      if (cur().type != TokType::kName) break;
    }
    if (paren) expect_op(")");
    return names;
  }

  StmtPtr parse_for() {
    auto s = new_stmt(StmtOp::kFor, cur().line);
    advance();
    s->targets = parse_targets();
    if (!skip_name("in")) error(fmt::format("expected 'in', got {}", describe(cur())));
    s->exprs.push_back(parse_tuple(false, {"recursive"}, false));
    s->exprs.push_back(skip_name("if") ? parse_expression(true) : nullptr);
    if (is_name("recursive")) unsupported("recursive for loop", s->line);
    ++loop_depth_;
    std::string which;
    s->bodies.push_back(parse_body({"endfor", "else"}, &which));
    --loop_depth_;
    if (which == "else") s->bodies.push_back(parse_body({"endfor"}));
    else s->bodies.emplace_back();
    return s;
  }

  StmtPtr parse_set() {
    int line = cur().line;
    advance();
    if (cur().type == TokType::kName && look().type == TokType::kOp && look().text == ".") {
      auto s = new_stmt(StmtOp::kSetAttr, line);
      s->text = expect_name();
      advance();  // '.'
      s->attr = expect_name();
      expect_op("=");
      s->exprs.push_back(parse_tuple(true, {}, false));
      return s;
    }
    std::vector<std::string> targets = parse_targets();
    if (skip_op("=")) {
      auto s = new_stmt(StmtOp::kSet, line);
      s->targets = std::move(targets);
      s->exprs.push_back(parse_tuple(true, {}, false));
      return s;
    }
    if (targets.size() != 1) error("a block set needs a single target name", line);
    auto s = new_stmt(StmtOp::kSetBlock, line);
    s->targets = std::move(targets);
    s->exprs.push_back(is_op("|") ? parse_filter_chain(nullptr, false) : nullptr);
    s->bodies.push_back(parse_body({"endset"}));
    return s;
  }

  void parse_signature(Stmt* s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s->targets.empty()) expect_op(",");
      if (is_op(")")) break;
      s->targets.push_back(expect_name());
      if (skip_op("=")) {
        s->exprs.push_back(parse_expression(true));
      } else {
        bool has_defaults = std::any_of(s->exprs.begin(), s->exprs.end(), [](const ExprPtr& e) { return e != nullptr; });
        if (has_defaults) error("non-default argument follows default argument");
        s->exprs.push_back(nullptr);
      }
    }
    expect_op(")");
  }

  StmtPtr parse_macro() {
    auto s = new_stmt(StmtOp::kMacro, cur().line);
    advance();
    s->text = expect_name();
    parse_signature(s.get());
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->bodies.push_back(parse_body({"endmacro"}));
    loop_depth_ = saved;
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = new_stmt(StmtOp::kCallBlock, cur().line);
    advance();
    auto sig = new_stmt(StmtOp::kMacro, s->line);
    if (is_op("(")) parse_signature(sig.get());
    ExprPtr call = parse_expression(true);
    if (call->op != ExprOp::kCall) error("expected a macro call after '{% call %}'", s->line);
    s->targets = std::move(sig->targets);
    s->exprs.push_back(std::move(call));
    for (auto& d : sig->exprs) s->exprs.push_back(std::move(d));
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->bodies.push_back(parse_body({"endcall"}));
    loop_depth_ = saved;
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = new_stmt(StmtOp::kFilterBlock, cur().line);
    advance();
    s->exprs.push_back(parse_filter_chain(nullptr, true));
    s->bodies.push_back(parse_body({"endfilter"}));
    return s;
  }

  StmtPtr parse_with() {
    auto s = new_stmt(StmtOp::kWith, cur().line);
    advance();
    while (cur().type != TokType::kBlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(expect_name());
      expect_op("=");
      s->exprs.push_back(parse_expression(true));
    }
    s->bodies.push_back(parse_body({"endwith"}));
    return s;
  }

  // --- expressions -----------------------------------------------------------------------------
  bool is_tuple_end(const std::vector<std::string>& extra_end) const {
    TokType t = cur().type;
    if (t == TokType::kVarEnd || t == TokType::kBlockEnd || t == TokType::kEof || is_op(")")) return true;
    return t == TokType::kName && std::find(extra_end.begin(), extra_end.end(), cur().text) != extra_end.end();
  }

  ExprPtr parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end, bool explicit_parens) {
    int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) error(fmt::format("expected an expression, got {}", describe(cur())));
    }
    auto e = make(ExprOp::kTuple, line);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(this);
    if (!with_condexpr) return parse_or();
    int line = cur().line;
    ExprPtr e = parse_or();
    while (skip_name("if")) {
      auto c = make(ExprOp::kCond, line);
      ExprPtr cond = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_expression(true) : nullptr;
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(otherwise));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(ExprOp op, ExprPtr a, ExprPtr b, int line, std::string name = {}) {
    auto e = make(op, line);
    e->name = std::move(name);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      int line = cur().line;
      advance();
      e = binary(ExprOp::kOr, std::move(e), parse_and(), line);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      int line = cur().line;
      advance();
      e = binary(ExprOp::kAnd, std::move(e), parse_not(), line);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(this);
      auto e = make(ExprOp::kNot, cur().line);
      advance();
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == TokType::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                         cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && look().type == TokType::kName && look().text == "in") {
        op = "notin";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprOp::kCompare, line);
        cmp->args.push_back(std::move(first));
      }
      cmp->cmp_ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      int line = cur().line;
      advance();
      e = binary(ExprOp::kBinary, std::move(e), parse_concat(), line, op);
    }
    return e;
  }

  ExprPtr parse_concat() {
    int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(ExprOp::kConcat, line);
    e->args.push_back(std::move(first));
    while (skip_op("~")) e->args.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      int line = cur().line;
      advance();
      e = binary(ExprOp::kBinary, std::move(e), parse_pow(), line, op);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      int line = cur().line;
      advance();
      e = binary(ExprOp::kBinary, std::move(e), parse_unary(true), line, "**");
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make(is_op("-") ? ExprOp::kNeg : ExprOp::kPos, cur().line);
      advance();
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    int line = tok.line;
    switch (tok.type) {
      case TokType::kName: {
        auto e = make(ExprOp::kLiteral, line);
        const std::string& n = tok.text;
        if (n == "true" || n == "True") e->literal = Value(true);
        else if (n == "false" || n == "False") e->literal = Value(false);
        else if (n == "none" || n == "None") e->literal = Value::none();
        else {
          e->op = ExprOp::kName;
          e->name = n;
        }
        advance();
        return e;
      }
      case TokType::kString: {
        std::string s;
        while (cur().type == TokType::kString) {  // adjacent literals concatenate
          s += cur().text;
          advance();
        }
        auto e = make(ExprOp::kLiteral, line);
        e->literal = Value(std::move(s));
        return e;
      }
      case TokType::kInt: {
        auto e = make(ExprOp::kLiteral, line);
        e->literal = Value(tok.int_value);
        advance();
        return e;
      }
      case TokType::kFloat: {
        auto e = make(ExprOp::kLiteral, line);
        e->literal = Value(tok.float_value);
        advance();
        return e;
      }
      case TokType::kOp:
        if (tok.text == "(") {
          advance();
          ExprPtr e = parse_tuple(true, {}, true);
          expect_op(")");
          return e;
        }
        if (tok.text == "[") {
          advance();
          auto e = make(ExprOp::kList, line);
          while (!is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("]")) break;
            e->args.push_back(parse_expression(true));
          }
          expect_op("]");
          return e;
        }
        if (tok.text == "{") {
          advance();
          auto e = make(ExprOp::kDict, line);
          while (!is_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("}")) break;
            e->args.push_back(parse_expression(true));
            expect_op(":");
            e->args.push_back(parse_expression(true));
          }
          expect_op("}");
          return e;
        }
        break;
      default:
        break;
    }
    error(fmt::format("unexpected {}", describe(tok)));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        int line = cur().line;
        advance();
        if (cur().type == TokType::kName) {
          auto g = make(ExprOp::kGetattr, line);
          g->name = cur().text;
          advance();
          g->args.push_back(std::move(e));
          e = std::move(g);
        } else if (cur().type == TokType::kInt) {
          auto key = make(ExprOp::kLiteral, line);
          key->literal = Value(cur().int_value);
          advance();
          e = binary(ExprOp::kGetitem, std::move(e), std::move(key), line);
        } else {
          error("expected name or number after '.'");
        }
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    int line = cur().line;
    advance();  // '['
    std::vector<ExprPtr> parts;
    bool slice = false;
    ExprPtr slice_parts[3];
    while (!is_op("]")) {
      if (!parts.empty() || slice) {
        expect_op(",");
        unsupported("multi-dimensional subscript", line);
      }
      // parse_subscribed: expr | [expr] ':' [expr] [':' [expr]]
      ExprPtr first;
      if (!is_op(":")) {
        first = parse_expression(true);
        if (!is_op(":")) {
          parts.push_back(std::move(first));
          continue;
        }
      }
      slice = true;
      advance();  // ':'
      slice_parts[0] = std::move(first);
      if (!is_op("]") && !is_op(",") && !is_op(":")) slice_parts[1] = parse_expression(true);
      if (skip_op(":")) {
        if (!is_op("]") && !is_op(",")) slice_parts[2] = parse_expression(true);
      }
    }
    expect_op("]");
    if (slice) {
      auto e = make(ExprOp::kSlice, line);
      e->args.push_back(std::move(obj));
      for (auto& p : slice_parts) e->args.push_back(std::move(p));
      return e;
    }
    if (parts.empty()) error("empty subscript", line);
    return binary(ExprOp::kGetitem, std::move(obj), std::move(parts[0]), line);
  }

  void parse_call_args(Expr* e) {
    expect_op("(");
    bool need_comma = false;
    while (!is_op(")")) {
      if (need_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) unsupported("'*args' / '**kwargs' call syntax", cur().line);
      if (cur().type == TokType::kName && look().type == TokType::kOp && look().text == "=") {
        e->kw_names.push_back(cur().text);
        advance();
        advance();
        e->kw_values.push_back(parse_expression(true));
      } else {
        if (!e->kw_names.empty()) error("positional argument follows keyword argument");
        e->args.push_back(parse_expression(true));
      }
      need_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(ExprOp::kCall, cur().line);
    e->args.push_back(std::move(callee));
    parse_call_args(e.get());
    return e;
  }

  std::string parse_dotted_name() {
    std::string n = expect_name();
    while (skip_op(".")) n += "." + expect_name();
    return n;
  }

  // `| f(args) | g` applied to `subject` (null: the enclosing block's content).
  ExprPtr parse_filter_chain(ExprPtr subject, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) advance();
      start_inline = false;
      int line = cur().line;
      std::string name = parse_dotted_name();
      if (!is_known_filter(name)) unsupported(fmt::format("filter '{}'", name), line);
      auto f = make(ExprOp::kFilter, line);
      f->name = name;
      f->args.push_back(std::move(subject));
      if (is_op("(")) parse_call_args(f.get());
      subject = std::move(f);
    }
    return subject;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(std::move(e), false);
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_test(ExprPtr subject) {
    int line = cur().line;
    advance();  // 'is'
    bool negated = skip_name("not");
    std::string name = parse_dotted_name();
    if (!is_known_test(name)) unsupported(fmt::format("test '{}'", name), line);
    auto t = make(ExprOp::kTest, line);
    t->name = name;
    t->args.push_back(std::move(subject));
    const Token& c = cur();
    if (is_op("(")) {
      parse_call_args(t.get());
    } else if ((c.type == TokType::kName || c.type == TokType::kString || c.type == TokType::kInt ||
                c.type == TokType::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) error("you cannot chain multiple tests with 'is'");
      t->args.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return t;
    auto n = make(ExprOp::kNot, line);
    n->args.push_back(std::move(t));
    return n;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

std::shared_ptr<const Program> parse_program(std::string_view source) {
  return Parser(tokenize(source)).run();
}

}  // namespace hs::jinja
