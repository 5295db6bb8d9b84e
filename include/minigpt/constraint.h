// Structured output: generation constrained to a language (a JSON Schema, any JSON object, a GBNF grammar).
// Before each sampling step a sequence's Constraint says which tokens may come next, and the Generator
// (generate.h) sets the others' logits to -inf on the host, so it acts the same for every model family and
// backend; the sampled token is then given back to it. The end-of-text ids are allowed only where the
// grammar may end. A Grammar is compiled once for a tokenizer and shared; each sequence (one of a batch
// included) starts its own Constraint from it. The engine is xgrammar (src/run/xgrammar_constraint.cpp;
// docs/structured-output.md says why).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace minigpt {

class Tokenizer;

// The words of a token bitmask over `n_vocab` ids: bit i % 32 of word i / 32 is token i's.
inline size_t bitmask_words(int64_t n_vocab) { return size_t((n_vocab + 31) / 32); }

// One sequence's place in a grammar.
class Constraint {
 public:
  virtual ~Constraint() = default;
  // Sets the bits of the tokens that may come next (bitmask_words(n_vocab) words) and clears the others'.
  virtual void fill_allowed(std::span<uint32_t> bitmask) = 0;
  // Takes the token sampled next; Error(Argument) for one fill_allowed() did not allow.
  virtual void accept(int32_t id) = 0;
  // The grammar has ended (an end-of-text id was accepted, or, with none to end on, its text is complete):
  // generation stops.
  virtual bool finished() const = 0;
};

// A grammar compiled for one vocabulary.
class Grammar {
 public:
  struct Impl;
  explicit Grammar(std::shared_ptr<const Impl> impl);
  ~Grammar();
  // A fresh Constraint at the grammar's start. `eos_ids`: the ids that end generation, allowed where the
  // grammar may end; none: generation ends as soon as the grammar's text is complete.
  std::unique_ptr<Constraint> start(std::span<const int64_t> eos_ids) const;

 private:
  std::shared_ptr<const Impl> impl_;
};

// Compiles grammars for a model's vocabulary: `tokenizer`'s tokens (their bytes; special tokens are never
// allowed, the end-of-text ids only as Grammar::start() says) in a vocabulary of `n_vocab` ids (the model's
// logits; ids past the tokenizer's are never allowed). Compiled grammars are cached by their text.
class GrammarCompiler {
 public:
  GrammarCompiler(const Tokenizer& tokenizer, int64_t n_vocab);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // Any JSON object (the OpenAI API's response_format json_object, `--json`).
  std::shared_ptr<const Grammar> json_object() const;
  // JSON that validates against `schema` (a JSON Schema's text). Error(Argument) "json_schema: ..." for one
  // that is not JSON or not a schema the engine supports, and for one with a keyword the engine would not
  // enforce, named with where it is (docs/structured-output.md lists them): such a keyword is never ignored.
  std::shared_ptr<const Grammar> json_schema(std::string_view schema) const;
  // The language of a GBNF grammar (llama.cpp's format; the rule `root` is the start). Error(Argument)
  // "grammar: ..." for one that does not parse.
  std::shared_ptr<const Grammar> gbnf(std::string_view grammar) const;
  // xgrammar's structural tag (its JSON: free text with constrained parts, e.g. a tool call's JSON once the
  // model opens it). Error(Argument) "structural_tag: ..." for one that does not parse.
  std::shared_ptr<const Grammar> structural_tag(std::string_view tag) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace minigpt
