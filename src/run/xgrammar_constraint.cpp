// constraint.h with xgrammar: its TokenizerInfo built from minigpt's Tokenizer, its GrammarCompiler for
// JSON Schema and GBNF, a GrammarMatcher per sequence.
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "json_schema_check.h"
#include "minigpt/constraint.h"
#include "minigpt/error.h"
#include "minigpt/tokenizer.h"
#include "xgrammar_log.h"

namespace minigpt {

struct Grammar::Impl {
  xgrammar::CompiledGrammar compiled;
  int64_t n_vocab;
};

struct GrammarCompiler::Impl {
  int64_t n_vocab;
  // xgrammar's compiler caches by the grammar's text; it is thread-safe, as a server's requests need.
  std::optional<xgrammar::GrammarCompiler> compiler;
};

namespace {

// xgrammar's errors (XGRAMMAR_CHECK's LogFatalError) read "[hh:mm:ss] /path/file.cc:123: message": the
// message alone, on one line.
std::string xgrammar_message(const std::exception& e) {
  std::string s = e.what();
  if (!s.empty() && s[0] == '[') {
    const size_t file = s.find("] ");
    const size_t line = file == std::string::npos ? file : s.find(": ", file + 2);
    if (line != std::string::npos) s = s.substr(line + 2);
  }
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

class XgrammarConstraint final : public Constraint {
 public:
  XgrammarConstraint(const xgrammar::CompiledGrammar& g, std::vector<int> stop, int64_t n_vocab)
      // No stop tokens (xgrammar refuses an empty override; the vocabulary's list is empty): the matcher
      // ends as soon as the grammar's text is complete.
      : matcher_(g, stop.empty() ? std::nullopt : std::optional<std::vector<int>>(stop),
                 /*terminate_without_stop_token=*/stop.empty()),
        n_vocab_(n_vocab) {}

  void fill_allowed(std::span<uint32_t> bitmask) override {
    if (bitmask.size() < bitmask_words(n_vocab_))
      throw Error(ErrorKind::Argument, "Constraint::fill_allowed: the bitmask is too short");
    int64_t shape[1] = {int64_t(bitmask.size())};
    DLTensor t{};
    t.data = bitmask.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = xgrammar::GetBitmaskDLType();
    t.shape = shape;
    // The mask is left whole when the matcher has ended (false); finished() tells the caller first.
    if (!matcher_.FillNextTokenBitmask(&t)) std::fill(bitmask.begin(), bitmask.end(), ~uint32_t(0));
  }

  void accept(int32_t id) override {
    if (!matcher_.AcceptToken(id)) {
      throw Error(ErrorKind::Argument, "the grammar does not allow token " + std::to_string(id) +
                                           " here (it was not in its mask)");
    }
  }

  bool finished() const override { return matcher_.IsTerminated(); }

 private:
  xgrammar::GrammarMatcher matcher_;
  int64_t n_vocab_;
};

std::shared_ptr<const Grammar> wrap(xgrammar::CompiledGrammar g, int64_t n_vocab) {
  return std::make_shared<const Grammar>(
      std::make_shared<const Grammar::Impl>(Grammar::Impl{std::move(g), n_vocab}));
}

}  // namespace

Grammar::Grammar(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
Grammar::~Grammar() = default;

std::unique_ptr<Constraint> Grammar::start(std::span<const int64_t> eos_ids) const {
  std::vector<int> stop;
  for (const int64_t id : eos_ids)
    if (id >= 0 && id < impl_->n_vocab) stop.push_back(int(id));
  return std::make_unique<XgrammarConstraint>(impl_->compiled, std::move(stop), impl_->n_vocab);
}

GrammarCompiler::GrammarCompiler(const Tokenizer& tokenizer, int64_t n_vocab)
    : impl_(std::make_unique<Impl>()) {
  if (n_vocab < tokenizer.n_vocab()) {
    throw Error(ErrorKind::Argument, "GrammarCompiler: the vocabulary of " + std::to_string(n_vocab) +
                                         " ids is smaller than the tokenizer's " +
                                         std::to_string(tokenizer.n_vocab()));
  }
  impl_->n_vocab = n_vocab;
  // Each id's bytes, as the stream decoder gives them (VocabType::RAW: xgrammar takes them as they are, so
  // byte-level BPE, sentencepiece with byte fallback and character-level vocabularies are all the same to
  // it). An empty string is xgrammar's mark of a special token, never allowed: the special tokens, and ids
  // no token has.
  std::vector<std::string> vocab(size_t(tokenizer.n_vocab()));
  for (int32_t id = 0; id < tokenizer.n_vocab(); ++id) {
    if (tokenizer.is_special(id)) continue;
    try {
      vocab[size_t(id)] = tokenizer.token_bytes(id);
    } catch (const Error&) {
      // an id no token has
    }
  }
  // The end-of-text ids are each Constraint's (Grammar::start()), not the vocabulary's.
  xgrammar::TokenizerInfo info(vocab, xgrammar::VocabType::RAW, int(n_vocab), std::vector<int32_t>{});
  const int threads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  // The cache of compiled grammars is bounded (least recently used out first): a server compiles whatever
  // schemas its clients send.
  constexpr int64_t kCacheBytes = int64_t(256) << 20;
  impl_->compiler.emplace(info, threads, /*cache_enabled=*/true, kCacheBytes);
}

GrammarCompiler::~GrammarCompiler() = default;

// Whitespace between JSON tokens: any, at most 20 characters in a row (llama.cpp's schema grammars allow a
// space, or newlines and 20 of indentation), so that a model cannot spend its tokens on whitespace alone.
constexpr int kMaxWhitespace = 20;

std::shared_ptr<const Grammar> GrammarCompiler::json_object() const {
  try {
    // Not strict: any properties, of any type.
    return wrap(impl_->compiler->CompileJSONSchema(R"({"type": "object"})", true, std::nullopt, std::nullopt,
                                                   /*strict_mode=*/false, kMaxWhitespace),
                impl_->n_vocab);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Argument, "json_object: " + xgrammar_message(e));
  }
}

std::shared_ptr<const Grammar> GrammarCompiler::json_schema(std::string_view schema) const {
  // A keyword xgrammar would leave unenforced is refused, never ignored: the output must validate.
  if (const std::string why = unenforced_keyword(schema); !why.empty())
    throw Error(ErrorKind::Argument, "json_schema: " + why);
  // Strict, as llama.cpp's converter and OpenAI's strict schemas: an object has the properties its schema
  // names and no others unless additionalProperties says so.
  const std::string text(schema);
  try {
    // What the converter drops it says in a warning (each names the keyword). Converted here, uncached,
    // since the compiler's cache would answer a second request for the schema without converting it again.
    XgrammarWarningCapture capture;
    (void)xgrammar::Grammar::FromJSONSchema(text, true, std::nullopt, std::nullopt, /*strict_mode=*/true,
                                            kMaxWhitespace);
    if (!capture.warnings().empty()) {
      throw Error(ErrorKind::Argument, "json_schema: not supported: " + capture.warnings().front());
    }
    return wrap(impl_->compiler->CompileJSONSchema(text, true, std::nullopt, std::nullopt,
                                                   /*strict_mode=*/true, kMaxWhitespace),
                impl_->n_vocab);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Argument, "json_schema: " + xgrammar_message(e));
  }
}

std::shared_ptr<const Grammar> GrammarCompiler::gbnf(std::string_view grammar) const {
  try {
    return wrap(impl_->compiler->CompileGrammar(std::string(grammar), "root"), impl_->n_vocab);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Argument, "grammar: " + xgrammar_message(e));
  }
}

std::shared_ptr<const Grammar> GrammarCompiler::structural_tag(std::string_view tag) const {
  try {
    return wrap(impl_->compiler->CompileStructuralTag(std::string(tag)), impl_->n_vocab);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Argument, "structural_tag: " + xgrammar_message(e));
  }
}

}  // namespace minigpt
