// tokenizer/jinja/ast.h — the parsed form of a template: expression and statement trees.
//
// Nodes are plain structs with a small op enum and generic child slots (documented per op
// below) rather than a class per node: the evaluator switches on `op`. A parsed Program is
// immutable and shared between renders (ChatTemplate copies share one pointer). Memory is
// proportional to the template source.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace hs::jinja {

enum class ExprOp : uint8_t {
  kLiteral,     // literal
  kName,        // name
  kList,        // args = items
  kTuple,       // args = items
  kDict,        // args = key0, value0, key1, value1, ...
  kGetattr,     // args[0] = object, name = attribute
  kGetitem,     // args[0] = object, args[1] = key
  kSlice,       // args[0] = object, args[1..3] = start, stop, step (each may be null)
  kCall,        // args[0] = callee, args[1..] = positional; kw_names/kw_values
  kFilter,      // args[0] = subject (null inside a filter/set block), args[1..] = positional; name
  kTest,        // args[0] = subject, args[1..] = positional; name
  kNeg,         // args[0]
  kPos,         // args[0]
  kNot,         // args[0]
  kAnd,         // args[0], args[1] (short-circuit)
  kOr,          // args[0], args[1] (short-circuit)
  kBinary,      // args[0] (name) args[1]: + - * / // % **
  kConcat,      // args = parts joined with ~
  kCompare,     // args[0] cmp_ops[0] args[1] cmp_ops[1] args[2] ... (chained like Python)
  kCond,        // args[0] = condition, args[1] = then, args[2] = else (may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprOp op = ExprOp::kLiteral;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::string> kw_names;
  std::vector<ExprPtr> kw_values;
  std::vector<std::string> cmp_ops;  // "==", "!=", "<", "<=", ">", ">=", "in", "notin"
};

enum class StmtOp : uint8_t {
  kData,         // text
  kOutput,       // exprs[0]
  kIf,           // exprs = conditions; bodies[i] per condition, plus bodies.back() = else if
                 // bodies.size() > exprs.size()
  kFor,          // targets; exprs[0] = iterable, exprs[1] = filter (may be null);
                 // bodies[0] = body, bodies[1] = else
  kSet,          // targets (several = tuple unpacking); exprs[0] = value
  kSetAttr,      // text = namespace variable, attr = attribute; exprs[0] = value
  kSetBlock,     // targets[0]; exprs[0] = filter chain (may be null); bodies[0]
  kMacro,        // text = name; targets = parameters; exprs = defaults (null when none); bodies[0]
  kCallBlock,    // targets = caller parameters; exprs[0] = call, exprs[1..] = caller defaults;
                 // bodies[0] = caller body
  kFilterBlock,  // exprs[0] = filter chain; bodies[0]
  kWith,         // targets; exprs = values; bodies[0]
  kScope,        // bodies[0] rendered in a child scope (`{% generation %}`)
  kBreak,
  kContinue,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  StmtOp op = StmtOp::kData;
  int line = 0;
  std::string text;
  std::string attr;
  std::vector<std::string> targets;
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
};

struct Program {
  Body body;
};

}  // namespace hs::jinja
