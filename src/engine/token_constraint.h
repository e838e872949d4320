// engine/token_constraint.h — what the engine needs of a grammar: a per-step token mask.
//
// A request may carry a TokenGrammar (response_format, a forced tool call): compiled once by
// the server (src/grammar/, xgrammar underneath), immutable, shared by the request's choices.
// Each choice's Sequence starts its own TokenConstraint from it, which the engine asks, before
// sampling a row, to forbid every token the grammar does not allow next (their logits become
// -inf), and tells, after sampling, which token was chosen. The engine knows no grammar type:
// this header is the whole contract. Cost: one mask per sampled row (a bitmask over the
// vocabulary filled by the grammar engine, then one pass over the row), measured by
// bench/bench_grammar.cpp; a request without a grammar pays nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace hs {

// One choice's position in its grammar. Called from one thread at a time (the engine thread
// or the pool thread sampling that row).
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets logits[t] = -inf for every token t the grammar forbids next (at least one token,
  // possibly only the end-of-generation tokens, stays allowed).
  virtual void mask(std::span<float> logits) = 0;
  // Advances past `token`; false if the grammar does not allow it (the mask was not applied).
  virtual bool accept(int32_t token) = 0;
  // The grammar is complete and accepted an end-of-generation token.
  virtual bool terminated() const = 0;
};

// A compiled grammar. Thread-safe: start() may be called from any thread.
class TokenGrammar {
 public:
  virtual ~TokenGrammar() = default;
  virtual std::unique_ptr<TokenConstraint> start() const = 0;
};

}  // namespace hs
