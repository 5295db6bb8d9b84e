// The Python package's extension module (minigpt._minigpt): Model, Tokenizer, Session and generation over
// minigpt's public API (include/minigpt/minigpt.h) alone, as cli/ is. Python sees what the CLI does, with its
// defaults and its one-line messages:
// - compute runs with the GIL released (two threads on two models run in parallel); a model's steps are
//   serialized by its own mutex, so two threads may also share one model;
// - generation runs one token per step (minigpt::Generation) and checks for signals between steps with the
//   GIL held, so Ctrl-C stops it within one token (KeyboardInterrupt);
// - minigpt::Error becomes minigpt.Error or the subclass of its kind, with the same message;
// - logits and attention maps are numpy arrays over memory the library wrote into directly;
// - chat() renders the model's chat template (minigpt/chat.h) as `minigpt chat` does, and a JSON Schema or
//   GBNF grammar constrains generation through one GrammarCompiler per model (minigpt/constraint.h).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "minigpt/chat.h"
#include "minigpt/minigpt.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace minigpt::python {
namespace {

// --- exceptions ---------------------------------------------------------------------------------------

// minigpt.Error and one subclass per ErrorKind, made once at import (owned by the module).
struct ErrorClasses {
  PyObject* base = nullptr;
  PyObject* by_kind[8] = {};
};
ErrorClasses g_errors;

PyObject* error_class(ErrorKind k) {
  const auto i = size_t(k);
  return i < std::size(g_errors.by_kind) && g_errors.by_kind[i] ? g_errors.by_kind[i] : g_errors.base;
}

// A Python exception raised inside a callback that runs with the GIL released: unwinds the C++ frames
// above it; the Python error is already set.
struct PythonErrorSet {};

void make_error_classes(nb::module_& m) {
  g_errors.base = PyErr_NewExceptionWithDoc(
      "minigpt.Error",
      "Every failure minigpt reports: a one-line message naming the file, tensor, field or argument "
      "(the message the minigpt command prints after 'minigpt: error: '). `kind` names the subclass's kind.",
      PyExc_Exception, nullptr);
  m.attr("Error") = nb::steal(g_errors.base);
  nb::setattr(m.attr("Error"), "kind", nb::none());
  struct Sub {
    ErrorKind kind;
    const char* name;
    const char* kind_name;
    PyObject* extra;  // a built-in class it also derives from, so that `except ValueError` / OSError works
    const char* doc;
  };
  const Sub subs[] = {
      {ErrorKind::Io, "IoError", "io", PyExc_OSError, "A file could not be opened, mapped or read."},
      {ErrorKind::Format, "FormatError", "format", nullptr,
       "A file is malformed (truncated, bad header, bad offsets, not JSON, bad UTF-8...)."},
      {ErrorKind::Config, "ConfigError", "config", nullptr, "config.json is inconsistent or lacks a field."},
      {ErrorKind::Shape, "ShapeError", "shape", nullptr,
       "A tensor's dtype or shape disagrees with what the config implies."},
      {ErrorKind::Argument, "ArgumentError", "argument", PyExc_ValueError,
       "A bad value: a token id outside the vocabulary, a context overflow, an option out of range."},
      {ErrorKind::Unsupported, "UnsupportedError", "unsupported", nullptr,
       "Valid input this build does not handle (another model_type, no CUDA device...)."},
      {ErrorKind::Device, "DeviceError", "device", nullptr,
       "A device call failed at run time (CUDA or cuBLAS error, out of device memory)."},
      {ErrorKind::Numeric, "NumericError", "numeric", nullptr,
       "The computation produced NaN or Inf (logits that cannot be sampled from)."},
  };
  for (const Sub& s : subs) {
    PyObject* bases = s.extra ? PyTuple_Pack(2, g_errors.base, s.extra) : PyTuple_Pack(1, g_errors.base);
    const std::string qualified = std::string("minigpt.") + s.name;
    PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), s.doc, bases, nullptr);
    Py_DECREF(bases);
    if (cls == nullptr) throw nb::python_error();
    g_errors.by_kind[size_t(s.kind)] = cls;
    m.attr(s.name) = nb::steal(cls);
    nb::setattr(m.attr(s.name), "kind", nb::str(s.kind_name));
  }
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(error_class(e.kind()), e.what());
    } catch (const PythonErrorSet&) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "minigpt: interrupted");
    }
  });
}

// Runs the Python signal handlers (Ctrl-C's KeyboardInterrupt) from code that holds the GIL; throws
// nb::python_error when one raised.
void check_signals() {
  if (PyErr_CheckSignals() != 0) throw nb::python_error();
}

// The same from code running with the GIL released (a callback between perplexity windows).
void check_signals_released() {
  nb::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw PythonErrorSet{};
}

// --- token ids in -------------------------------------------------------------------------------------

// A sequence of ids (a list, a tuple, a 1-D numpy array of any integer type) as int32; an id outside
// int32 is kept outside the vocabulary (the session then names it), never wrapped into it.
std::vector<int32_t> to_ids(nb::handle obj) {
  std::vector<int32_t> ids;
  auto narrow = [](long long v) -> int32_t {
    if (v < std::numeric_limits<int32_t>::min()) return std::numeric_limits<int32_t>::min();
    if (v > std::numeric_limits<int32_t>::max()) return std::numeric_limits<int32_t>::max();
    return int32_t(v);
  };
  nb::ndarray<nb::ro, nb::ndim<1>, nb::device::cpu> a;
  if (!nb::isinstance<nb::str>(obj) && nb::try_cast(obj, a, false)) {
    const nb::dlpack::dtype t = a.dtype();
    if (t.code == uint8_t(nb::dlpack::dtype_code::Int) || t.code == uint8_t(nb::dlpack::dtype_code::UInt)) {
      ids.reserve(a.shape(0));
      const auto* base = static_cast<const uint8_t*>(a.data());
      const int64_t stride = a.stride(0) * int64_t(t.bits / 8);
      for (size_t i = 0; i < a.shape(0); ++i) {
        const uint8_t* p = base + int64_t(i) * stride;
        long long v = 0;
        const bool sign = t.code == uint8_t(nb::dlpack::dtype_code::Int);
        switch (t.bits) {
          case 8:
            v = sign ? *reinterpret_cast<const int8_t*>(p) : *p;
            break;
          case 16:
            v = sign ? *reinterpret_cast<const int16_t*>(p) : *reinterpret_cast<const uint16_t*>(p);
            break;
          case 32:
            v = sign ? *reinterpret_cast<const int32_t*>(p) : *reinterpret_cast<const uint32_t*>(p);
            break;
          default: {
            const uint64_t u = *reinterpret_cast<const uint64_t*>(p);
            v = sign ? static_cast<long long>(u) : static_cast<long long>(std::min<uint64_t>(u, INT64_MAX));
          }
        }
        ids.push_back(narrow(v));
      }
      return ids;
    }
    throw nb::type_error("token ids: an array of an integer type is needed");
  }
  if (nb::isinstance<nb::str>(obj) || nb::isinstance<nb::bytes>(obj) || !PySequence_Check(obj.ptr()))
    throw nb::type_error("token ids: a sequence of int is needed");
  const Py_ssize_t n = PySequence_Size(obj.ptr());
  if (n < 0) throw nb::python_error();
  ids.reserve(size_t(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    nb::object item = nb::steal(PySequence_GetItem(obj.ptr(), i));
    if (!item.is_valid()) throw nb::python_error();
    if (!PyIndex_Check(item.ptr()) || PyBool_Check(item.ptr()))
      throw nb::type_error(("token ids: item " + std::to_string(i) + " is not an int").c_str());
    int overflow = 0;
    nb::object index = nb::steal(PyNumber_Index(item.ptr()));
    if (!index.is_valid()) throw nb::python_error();
    const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    ids.push_back(overflow > 0   ? std::numeric_limits<int32_t>::max()
                  : overflow < 0 ? std::numeric_limits<int32_t>::min()
                                 : narrow(v));
  }
  return ids;
}

// --- arrays out ---------------------------------------------------------------------------------------

using FloatArray = nb::ndarray<nb::numpy, float>;

// A float32 array of `shape` over memory allocated here, freed when numpy lets go of it: the library writes
// into it directly.
struct OwnedFloats {
  std::unique_ptr<float[]> data;
  nb::capsule owner;
  explicit OwnedFloats(size_t n) : data(new float[n]) {}
  FloatArray array(std::initializer_list<size_t> shape) {
    float* p = data.release();
    owner = nb::capsule(p, [](void* q) noexcept { delete[] static_cast<float*>(q); });
    return FloatArray(p, shape.size(), shape.begin(), owner);
  }
};

// --- the model ----------------------------------------------------------------------------------------

// dtype / cache_type (--dtype / --cache-type): "f32", "f16", "bf16" (and "stored" = as in the file, nullopt),
// with CLI11's message for another value, naming the keyword where the CLI names its flag.
std::optional<DType> dtype_of(const std::string& s, const char* keyword, bool stored) {
  if (s == "f32") return DType::F32;
  if (s == "f16") return DType::F16;
  if (s == "bf16") return DType::BF16;
  if (stored && s == "stored") return std::nullopt;
  throw Error(ErrorKind::Argument,
              std::string(keyword) + ": " + s + " not in {f32,f16,bf16" + (stored ? ",stored}" : "}"));
}

class PyTokenizer {
 public:
  explicit PyTokenizer(std::shared_ptr<const Tokenizer> t) : t_(std::move(t)) {}
  static PyTokenizer load(const std::string& path) {
    return PyTokenizer(std::make_shared<const Tokenizer>(Tokenizer::load(std::filesystem::path(path))));
  }
  const Tokenizer& get() const { return *t_; }

  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens, bool special) const {
    return add_special_tokens ? t_->encode_with_specials(text, special) : t_->encode(text, special);
  }
  std::string decode(nb::handle ids, bool skip_special_tokens) const {
    std::vector<int32_t> v = to_ids(ids);
    if (skip_special_tokens) {
      v.erase(std::remove_if(v.begin(), v.end(),
                             [&](int32_t id) { return id >= 0 && id < t_->n_vocab() && t_->is_special(id); }),
              v.end());
    }
    // Bytes that end inside a character become U+FFFD, as tokenizers' decode gives them.
    return utf8_sanitize(t_->decode(v));
  }
  nb::bytes token_bytes(int32_t id) const {
    check_id(id);
    const std::string b = t_->token_bytes(id);
    return nb::bytes(b.data(), b.size());
  }
  std::string token_symbol(int32_t id) const {
    check_id(id);
    return t_->token_symbol(id);
  }
  bool is_special(int32_t id) const {
    check_id(id);
    return t_->is_special(id);
  }
  int32_t n_vocab() const { return t_->n_vocab(); }
  std::optional<int32_t> eos_id() const { return t_->eos_id(); }
  std::optional<int32_t> bos_id() const { return t_->bos_id(); }

 private:
  void check_id(int32_t id) const {
    if (id < 0 || id >= t_->n_vocab()) {
      throw Error(ErrorKind::Argument, "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                           std::to_string(t_->n_vocab()) + ")");
    }
  }
  std::shared_ptr<const Tokenizer> t_;
};

// What a Python Model holds: the loaded model, its tokenizer (or why there is none: a model directory without
// tokenizer files can still give logits of ids), its generation defaults, and sessions to reuse.
struct ModelState {
  std::string path;
  std::shared_ptr<const Model> model;
  std::optional<ModelSource> source;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::optional<Error> tokenizer_error;
  std::string backend;
  // A model's steps run one at a time (a backend's ops are not all safe to interleave across threads).
  std::mutex compute;

  // generation_config.json (or a GGUF file's general.sampling.*), read on first use.
  std::mutex defaults_mu;
  std::optional<GenerationDefaults> defaults;
  std::optional<Error> defaults_error;

  // Sessions of the default context, reset and reused by generate() and logits(): a KV cache of the
  // model's context is allocated once, not per call.
  std::mutex pool_mu;
  std::vector<std::unique_ptr<Session>> pool;
  static constexpr size_t kPoolMax = 4;

  // Structured output's compiler for this model's vocabulary, made on first use (its tokenizer table takes
  // a fraction of a second on a large vocabulary); it caches each grammar it compiles by its text.
  std::mutex grammars_mu;
  std::unique_ptr<GrammarCompiler> grammars;

  // The chat template, read on first use of chat().
  std::mutex chat_mu;
  std::optional<ChatFormat> chat;
  std::optional<Error> chat_error;

  const Tokenizer& tok() const {
    if (tokenizer_error) throw *tokenizer_error;
    return *tokenizer;
  }
  // Called with the GIL released.
  const GrammarCompiler& grammar_compiler() {
    const Tokenizer& t = tok();
    std::lock_guard<std::mutex> lock(grammars_mu);
    if (!grammars) grammars = std::make_unique<GrammarCompiler>(t, model->config().n_vocab);
    return *grammars;
  }
  const ChatFormat& chat_format() {
    const Tokenizer& t = tok();
    std::lock_guard<std::mutex> lock(chat_mu);
    if (!chat && !chat_error) {
      try {
        chat = ChatFormat::load(*source, t);
        if (!chat) {
          chat_error = Error(ErrorKind::Argument,
                             path +
                                 ": the model has no chat template (no chat_template.jinja, no chat_template "
                                 "in its tokenizer_config.json or GGUF metadata): use generate()");
        }
      } catch (const Error& e) {
        chat_error = e;
      }
    }
    if (chat_error) throw *chat_error;
    return *chat;
  }
  const GenerationDefaults& generation_defaults() {
    std::lock_guard<std::mutex> lock(defaults_mu);
    if (!defaults && !defaults_error) {
      try {
        defaults = read_generation_defaults(*source);
      } catch (const Error& e) {
        defaults_error = e;
      }
    }
    if (defaults_error) throw *defaults_error;
    return *defaults;
  }
  int64_t default_ctx() const { return context_size(std::nullopt, model->config().n_ctx); }
};

// A session borrowed from the model's pool for one call, given back (or dropped) at the end.
class SessionLease {
 public:
  SessionLease(std::shared_ptr<ModelState> m, int64_t n_ctx) : m_(std::move(m)) {
    if (n_ctx == m_->default_ctx()) {
      std::lock_guard<std::mutex> lock(m_->pool_mu);
      if (!m_->pool.empty()) {
        s_ = std::move(m_->pool.back());
        m_->pool.pop_back();
      }
      pooled_ = true;
    }
    if (!s_) {
      SessionOptions so;
      so.n_ctx = n_ctx;
      s_ = std::make_unique<Session>(m_->model, so);
    }
  }
  ~SessionLease() {
    if (!pooled_ || !s_) return;
    std::lock_guard<std::mutex> lock(m_->pool_mu);
    if (m_->pool.size() < ModelState::kPoolMax) m_->pool.push_back(std::move(s_));
  }
  SessionLease(const SessionLease&) = delete;
  SessionLease& operator=(const SessionLease&) = delete;
  Session& operator*() const { return *s_; }
  Session* operator->() const { return s_.get(); }

 private:
  std::shared_ptr<ModelState> m_;
  std::unique_ptr<Session> s_;
  bool pooled_ = false;
};

// --- generation ---------------------------------------------------------------------------------------

struct PyToken {
  int32_t id = 0;
  std::string text;
  std::optional<double> logprob;
  std::vector<std::pair<int32_t, double>> top_logprobs;
};

struct PyGenerateResult {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<int32_t> prompt_ids;
  std::vector<PyToken> tokens;
  std::string stop_reason;
  std::optional<std::string> stop;
  uint64_t seed = 0;
  int64_t prompt_dropped = 0;
  int64_t slides = 0;
  double prefill_seconds = 0, first_token_seconds = 0, decode_seconds = 0;
  int64_t decode_steps = 0, drafted = 0, accepted = 0;

  std::optional<std::vector<double>> logprobs() const {
    if (tokens.empty() || !tokens[0].logprob) return std::nullopt;
    std::vector<double> v;
    for (const PyToken& t : tokens) v.push_back(t.logprob.value_or(0.0));
    return v;
  }
};

// One generate() call: a leased session, the Generation over it, and what its callbacks collected.
struct GenerateRun {
  std::shared_ptr<ModelState> m;
  std::shared_ptr<ModelState> draft;  // speculative=<a Model>: its steps run inside ours
  SessionLease session;
  const Tokenizer* tok = nullptr;
  bool want_logprobs = false;
  std::string pending_text;  // text emitted since the stream last returned
  std::vector<PyToken> tokens;
  std::unique_ptr<Generation> gen;
  uint64_t seed = 0;
  bool finished = false;

  GenerateRun(std::shared_ptr<ModelState> model, int64_t n_ctx)
      : m(model), session(std::move(model), n_ctx) {}

  // One step with the GIL released and the model's compute held, and the draft model's too when it is
  // another (its steps run inside ours, and another thread may be generating with it).
  bool step() {
    nb::gil_scoped_release release;
    if (draft && draft != m) {
      std::scoped_lock lock(m->compute, draft->compute);
      return gen->step();
    }
    std::lock_guard<std::mutex> lock(m->compute);
    return gen->step();
  }
  PyGenerateResult result() const {
    const GenerateResult& r = gen->result();
    PyGenerateResult out;
    out.text = r.text;
    out.ids = r.tokens;
    out.prompt_ids = r.prompt;
    out.tokens = tokens;
    out.stop_reason = stop_reason_name(r.reason);
    if (r.reason == StopReason::Stop) out.stop = r.stop;
    out.seed = seed;
    out.prompt_dropped = r.prompt_dropped;
    out.slides = r.slides;
    out.prefill_seconds = r.prefill_seconds;
    out.first_token_seconds = r.first_token_seconds;
    out.decode_seconds = r.decode_seconds;
    out.decode_steps = r.decode_steps;
    out.drafted = r.drafted;
    out.accepted = r.accepted;
    return out;
  }
};

struct GenerateArgs {
  nb::object prompt;
  std::optional<int64_t> max_new_tokens;
  std::optional<float> temperature;
  std::optional<int64_t> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<int64_t> repeat_last_n;
  float presence_penalty = 0, frequency_penalty = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  std::string context_overflow;
  std::optional<int64_t> ctx_size;
  bool special = false;
  bool show_special = false;
  std::optional<int64_t> logprobs;
  // At most one (the Python side checks): a JSON Schema's text, a GBNF grammar, any JSON object.
  std::optional<std::string> json_schema;
  std::optional<std::string> grammar;
  bool json_object = false;
  // Speculative decoding (--prompt-lookup, --draft-model and their bounds): at most one source.
  bool prompt_lookup = false;
  std::shared_ptr<ModelState> draft;
  int64_t draft_max = 8, draft_min = 0, lookup_ngram_min = 1, lookup_ngram_max = 4;
  // chat(): `prompt` is the conversation, a JSON array of messages (the Python side's json.dumps).
  bool chat = false;
};

// The grammar generate() or chat() is asked to follow, compiled by the model's GrammarCompiler (with the
// GIL released: a schema's compile takes a fraction of a second on a large vocabulary); null when none is.
// The engine's refusal is Error(Argument) "json_schema: ..." or "grammar: ...", which names the keyword.
std::shared_ptr<const Grammar> compile_grammar(ModelState& m, const GenerateArgs& a) {
  if (!a.json_schema && !a.grammar && !a.json_object) return nullptr;
  nb::gil_scoped_release release;
  const GrammarCompiler& compiler = m.grammar_compiler();
  if (a.json_schema) return compiler.json_schema(*a.json_schema);
  if (a.grammar) return compiler.gbnf(*a.grammar);
  return compiler.json_object();
}

// chat()'s prompt, as `minigpt chat` makes one turn's (cli/cmd_chat.cpp): the conversation rendered by the
// model's template with the assistant's turn opened, tokenized as apply_chat_template(tokenize=True) does
// (the template writes the special tokens; none is added, those in the text are recognised).
std::vector<int32_t> chat_prompt(ModelState& m, const std::string& messages, int64_t n_ctx) {
  const ChatFormat& format = m.chat_format();
  const std::string text = format.render(messages, /*add_generation_prompt=*/true);
  std::vector<int32_t> ids;
  try {
    ids = m.tok().encode(text, /*allow_special=*/true);
  } catch (const Error& e) {
    throw Error(e.kind(), std::string("messages: ") + e.what());
  }
  if (ids.empty()) {
    throw Error(ErrorKind::Argument,
                "messages: the chat template rendered an empty prompt: there is nothing to reply to");
  }
  if (int64_t(ids.size()) >= n_ctx) {
    throw Error(ErrorKind::Argument,
                "messages: the conversation is " + std::to_string(ids.size()) +
                    " tokens, and the context of " + std::to_string(n_ctx) + " has room for " +
                    std::to_string(n_ctx - 1) + " and a reply" +
                    (n_ctx < m.model->config().n_ctx ? " (ctx_size enlarges the context)" : ""));
  }
  return ids;
}

// An integer keyword's range, with the CLI's message for its flag (cli/common.cpp's in_range).
void check_range(const char* keyword, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    throw Error(ErrorKind::Argument, std::string(keyword) + ": " + std::to_string(v) + " is outside [" +
                                         std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
}

// speculative=, draft_max, draft_min, lookup_ngram_min and lookup_ngram_max, as `minigpt generate` reads
// --prompt-lookup, --draft-model and the flags of those names (cli/speculative_flags.cpp): each bound in the
// CLI's range, then SpeculativeOptions::validate() (draft_min <= draft_max); a draft model of another
// vocabulary refused naming both sizes. The bounds are checked whether or not speculative= is given.
SpeculativeOptions speculative_options(const ModelState& m, const GenerateArgs& a) {
  check_range("draft_max", a.draft_max, 1, 64);
  check_range("draft_min", a.draft_min, 0, 64);
  check_range("lookup_ngram_min", a.lookup_ngram_min, 1, 64);
  check_range("lookup_ngram_max", a.lookup_ngram_max, 1, 64);
  if (a.lookup_ngram_max < a.lookup_ngram_min) {
    // validate() names its field, ngram_max; here the keyword.
    throw Error(ErrorKind::Argument, "lookup_ngram_max: must be in [" + std::to_string(a.lookup_ngram_min) +
                                         ", 64], got " + std::to_string(a.lookup_ngram_max));
  }
  SpeculativeOptions s;
  s.prompt_lookup = a.prompt_lookup;
  s.draft_max = a.draft_max;
  s.draft_min = a.draft_min;
  s.ngram_min = a.lookup_ngram_min;
  s.ngram_max = a.lookup_ngram_max;
  if (a.draft) {
    const int64_t draft_vocab = a.draft->model->config().n_vocab, vocab = m.model->config().n_vocab;
    if (draft_vocab != vocab) {
      throw Error(ErrorKind::Argument, "speculative: " + a.draft->path + " has a vocabulary of " +
                                           std::to_string(draft_vocab) + " tokens, the model " +
                                           std::to_string(vocab) +
                                           " tokens: a draft must share the model's vocabulary");
    }
    s.draft_model = a.draft->model;
  }
  s.validate();
  return s;
}

// As `minigpt generate` prepares a run from its flags (cli/cmd_generate.cpp): the prompt encoded with the
// template's special tokens, the model's generation defaults for what is not given, the context, -n -1.
std::unique_ptr<GenerateRun> start_generation(const std::shared_ptr<ModelState>& m, const GenerateArgs& a) {
  const Config& c = m->model->config();
  GenerateOptions g;
  ContextOverflow overflow = ContextOverflow::Error;
  if (a.context_overflow == "truncate") {
    overflow = ContextOverflow::Truncate;
  } else if (a.context_overflow == "slide") {
    overflow = ContextOverflow::Slide;
  } else if (a.context_overflow != "error") {
    throw Error(ErrorKind::Argument,
                "context_overflow: " + a.context_overflow + " not in {error,truncate,slide}");
  }
  const bool text_prompt = nb::isinstance<nb::str>(a.prompt);
  const Tokenizer* tok = nullptr;
  std::vector<int32_t> prompt;
  const int64_t n_ctx = context_size(a.ctx_size, c.n_ctx);
  if (a.chat) {
    tok = &m->tok();
    prompt = chat_prompt(*m, nb::cast<std::string>(a.prompt), n_ctx);
  } else if (text_prompt) {
    tok = &m->tok();
    const std::string text = nb::cast<std::string>(a.prompt);
    try {
      // An empty prompt stays empty, so that generation starts from the model's BOS.
      prompt = text.empty() ? std::vector<int32_t>() : tok->encode_with_specials(text, a.special);
    } catch (const Error& e) {
      throw Error(e.kind(), std::string("prompt: ") + e.what());
    }
  } else {
    prompt = to_ids(a.prompt);
    if (!m->tokenizer_error) tok = m->tokenizer.get();  // text of the ids when there is a tokenizer
  }
  if (a.max_new_tokens) {
    g.max_new_tokens = *a.max_new_tokens;
  } else if (a.chat) {
    // A reply runs until its end-of-turn token or the context is full unless max_new_tokens (or the model's)
    // bounds it, as `minigpt chat`'s and the chat API's replies do.
    g.max_new_tokens = n_ctx;
  }
  if (a.temperature) g.sampling.temperature = *a.temperature;
  if (a.top_k) g.sampling.top_k = *a.top_k;
  if (a.top_p) g.sampling.top_p = *a.top_p;
  if (a.min_p) g.sampling.min_p = *a.min_p;
  if (a.repetition_penalty) g.sampling.repetition_penalty = *a.repetition_penalty;
  if (a.repeat_last_n) g.sampling.repeat_last_n = *a.repeat_last_n;
  g.sampling.presence_penalty = a.presence_penalty;
  g.sampling.frequency_penalty = a.frequency_penalty;
  g.sampling.logit_bias = a.logit_bias;
  g.stop = a.stop;
  g.ignore_eos = a.ignore_eos;
  g.skip_special = !a.show_special;  // chat(): a sampled <|im_start|> is no part of the reply's text
  const GenerationDefaults& defaults = m->generation_defaults();
  const auto given = [&a](const char* name) {
    const std::string n = name;
    if (n == "temperature") return a.temperature.has_value();
    if (n == "top_k") return a.top_k.has_value();
    if (n == "top_p") return a.top_p.has_value();
    if (n == "min_p") return a.min_p.has_value();
    if (n == "repetition_penalty") return a.repetition_penalty.has_value();
    if (n == "repeat_last_n") return a.repeat_last_n.has_value();
    if (n == "max_new_tokens") return a.max_new_tokens.has_value();
    return false;
  };
  if (a.chat) {
    // A conversation's prompt grows each turn: the model's max_length gives no length (as in `minigpt chat`).
    apply_generation_defaults(g, defaults, given);
    g.eos_token_ids = m->chat_format().stop_ids(c, g.eos_token_ids);
  } else {
    apply_generation_defaults(g, defaults, given, int64_t(prompt.size()));
  }
  const uint64_t seed =
      a.seed ? *a.seed : uint64_t(std::random_device{}()) * 0x100000001ull ^ std::random_device{}();
  g.sampling.seed = seed;
  g.overflow = overflow;
  g.logprobs = a.logprobs.has_value();
  g.top_logprobs = a.logprobs.value_or(0);
  // The library's check (validate_options) names its field, top_logprobs; here the keyword.
  if (a.logprobs && (*a.logprobs < 0 || *a.logprobs > c.n_vocab)) {
    throw Error(ErrorKind::Argument, "logprobs: must be in [0, " + std::to_string(c.n_vocab) + "], got " +
                                         std::to_string(*a.logprobs));
  }
  g.max_new_tokens = a.chat && g.max_new_tokens == -1
                         ? n_ctx
                         : resolve_max_new_tokens(g.max_new_tokens, int64_t(prompt.size()), n_ctx);
  g.speculative = speculative_options(*m, a);
  validate_options(g, c, tok);
  g.grammar = compile_grammar(*m, a);

  auto run = std::make_unique<GenerateRun>(m, n_ctx);
  run->draft = a.draft;
  run->tok = tok;
  run->seed = seed;
  run->want_logprobs = g.logprobs;
  GenerateCallbacks cb;
  GenerateRun* r = run.get();
  cb.on_token = [r](const GeneratedToken& t) {
    PyToken p;
    p.id = t.id;
    p.text = t.text;
    if (r->want_logprobs) p.logprob = t.logprob;
    p.top_logprobs = t.top;
    r->tokens.push_back(std::move(p));
  };
  cb.on_text = [r](std::string_view t) { r->pending_text.append(t); };
  {
    nb::gil_scoped_release release;
    run->gen = std::make_unique<Generation>(*run->session, tok, std::move(prompt), g, std::move(cb));
  }
  return run;
}

// `stream=True`: an iterator of text pieces, one or more tokens each (text is held back while it may be the
// start of a stop string, and never ends inside a character).
class GenerateStream {
 public:
  explicit GenerateStream(std::unique_ptr<GenerateRun> run) : run_(std::move(run)) {}
  std::string next() {
    if (!run_ || run_->finished) throw nb::stop_iteration();
    bool ended = false;
    try {
      while (run_->pending_text.empty()) {
        if (!run_->step()) {
          ended = true;
          break;
        }
        check_signals();
      }
    } catch (...) {
      // A failed or interrupted generation ends here; the model stays usable.
      if (!run_->gen->done()) run_->gen->cancel();
      finish();
      throw;
    }
    if (ended) {
      finish();  // what the end released (text held back for a stop string) is this piece
      if (run_->pending_text.empty()) throw nb::stop_iteration();
    }
    return std::exchange(run_->pending_text, std::string());
  }
  // Ends the generation (StopReason "cancelled" when it was still running) and gives the session back.
  void close() {
    if (!run_ || run_->finished) return;
    if (!run_->gen->done()) run_->gen->cancel();
    finish();
    run_->pending_text.clear();
  }
  std::optional<PyGenerateResult> result() const {
    if (!run_ || !run_->finished) return std::nullopt;
    return result_;
  }

 private:
  void finish() {
    run_->finished = true;
    result_ = run_->result();
  }
  std::unique_ptr<GenerateRun> run_;
  PyGenerateResult result_;
};

PyGenerateResult generate_all(std::unique_ptr<GenerateRun> run) {
  try {
    while (run->step()) check_signals();
  } catch (...) {
    if (!run->gen->done()) run->gen->cancel();
    throw;
  }
  return run->result();
}

// --- sessions -----------------------------------------------------------------------------------------

class PySession {
 public:
  PySession(std::shared_ptr<ModelState> m, std::optional<int64_t> ctx_size) : m_(std::move(m)) {
    SessionOptions so;
    so.n_ctx = context_size(ctx_size, m_->model->config().n_ctx);
    nb::gil_scoped_release release;
    s_ = std::make_unique<Session>(m_->model, so);
  }
  nb::object eval(nb::handle ids_obj, bool all_logits) {
    const std::vector<int32_t> ids = to_ids(ids_obj);
    const size_t V = size_t(m_->model->config().n_vocab);
    if (all_logits) {
      if (ids.empty()) throw Error(ErrorKind::Argument, "eval: no tokens");
      OwnedFloats out(ids.size() * V);
      {
        nb::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(m_->compute);
        s_->eval_all(ids, std::span<float>(out.data.get(), ids.size() * V));
      }
      history_.insert(history_.end(), ids.begin(), ids.end());
      FloatArray a = out.array({ids.size(), V});
      last_ = nb::cast(a);
      // The last row is the session's logits now.
      last_ = last_[nb::int_(ids.size() - 1)];
      return nb::cast(a);
    }
    OwnedFloats out(V);
    {
      nb::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(m_->compute);
      const std::span<const float> l = s_->eval(ids);
      std::copy(l.begin(), l.end(), out.data.get());
    }
    history_.insert(history_.end(), ids.begin(), ids.end());
    last_ = nb::cast(out.array({V}));
    return last_;
  }
  nb::object logits() const { return last_; }
  void reset() {
    {
      nb::gil_scoped_release release;  // waiting for another thread's step on the model
      std::lock_guard<std::mutex> lock(m_->compute);
      s_->reset();
    }
    history_.clear();
    last_ = nb::none();
  }
  void keep(int64_t n) {
    {
      nb::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(m_->compute);
      s_->keep(0, n);
    }
    history_.resize(size_t(n));
    last_ = nb::none();
  }
  int64_t n_past() const { return s_->n_past(); }
  int64_t n_ctx() const { return s_->n_ctx(); }
  const std::vector<int32_t>& tokens() const { return history_; }

 private:
  std::shared_ptr<ModelState> m_;
  std::unique_ptr<Session> s_;
  std::vector<int32_t> history_;
  nb::object last_ = nb::none();
};

// --- perplexity ---------------------------------------------------------------------------------------

struct PyPerplexity {
  double ppl = 0, ppl_error = 0, nll_mean = 0, nll_stderr = 0;
  int64_t n_tokens = 0, n_scored = 0, n_windows = 0, n_evaluated = 0, n_ctx = 0;
  std::optional<int64_t> stride;
  std::string recipe;
  double seconds = 0;
};

// --- the Python Model ---------------------------------------------------------------------------------

GenerateArgs args_from(const nb::dict& options, bool chat);

class PyModel {
 public:
  PyModel(const std::string& path, const std::string& dtype, int threads, const std::string& backend,
          int device, const std::optional<std::string>& cache_type,
          const std::optional<std::string>& tokenizer, const std::string& bf16_math) {
    // As `minigpt generate -m PATH --dtype D -t N --backend B --device I --cache-type C --tokenizer T`
    // (cli/common.cpp's load_options), in the CLI's order (the flags first, then the path), with its
    // messages (CLI11's for a value outside a set), naming the keyword where the CLI names its flag.
    if (threads < 0 || threads > 1024)
      throw Error(ErrorKind::Argument, "threads: " + std::to_string(threads) + " is outside [0, 1024]");
    if (device < 0 || device > 1024)
      throw Error(ErrorKind::Argument, "device: " + std::to_string(device) + " is outside [0, 1024]");
    LoadOptions lo;
    lo.n_threads = threads;
    lo.weight_dtype = dtype_of(dtype, "dtype", true);
    BackendOptions bo;
    bo.n_threads = threads;
    bo.device = device;
    if (cache_type) bo.kv_dtype = dtype_of(*cache_type, "cache_type", false);
    if (bf16_math == "f32") {
      bo.bf16_math = Bf16Math::F32;
    } else if (bf16_math == "bf16") {
      bo.bf16_math = Bf16Math::Bf16;
    } else if (bf16_math != "auto") {
      throw Error(ErrorKind::Argument, "bf16_math: " + bf16_math + " not in {auto,f32,bf16}");  // CLI11's
    }
    if (find_backend(backend) == nullptr) {
      std::string names;
      for (const BackendInfo& b : backends()) names += (names.empty() ? "" : ", ") + b.name;
      throw Error(ErrorKind::Argument,
                  "backend: unknown backend '" + backend + "' (this build has: " + names + ")");
    }
    if (tokenizer && tokenizer->empty()) throw Error(ErrorKind::Argument, "tokenizer: the path is empty");
    auto m = std::make_shared<ModelState>();
    m->path = path;
    {
      nb::gil_scoped_release release;
      m->source.emplace(ModelSource::open(path));
      lo.backend = make_backend(backend, bo);
      m->backend = backend;
      m->model = Model::load(*m->source, lo);
      try {
        m->tokenizer = std::make_shared<const Tokenizer>(
            Tokenizer::load_for_model(*m->source, m->model->config().n_vocab, tokenizer.value_or("")));
      } catch (const Error& e) {
        m->tokenizer_error = e;  // raised where text is needed: ids alone need no tokenizer
      }
    }
    m_ = std::move(m);
  }

  PyTokenizer tokenizer() const {
    m_->tok();
    return PyTokenizer(m_->tokenizer);
  }
  bool has_tokenizer() const { return !m_->tokenizer_error; }

  nb::object generate(nb::object prompt, std::optional<int64_t> max_new_tokens, const nb::dict& options,
                      bool stream, bool chat) {
    GenerateArgs a = args_from(options, chat);
    a.prompt = std::move(prompt);
    a.max_new_tokens = max_new_tokens;
    a.chat = chat;
    auto run = start_generation(m_, a);
    if (stream) return nb::cast(GenerateStream(std::move(run)));
    return nb::cast(generate_all(std::move(run)));
  }

  FloatArray logits(nb::handle ids_obj) {
    const std::vector<int32_t> ids = to_ids(ids_obj);
    const size_t V = size_t(m_->model->config().n_vocab);
    if (ids.empty()) throw Error(ErrorKind::Argument, "eval: no tokens");
    OwnedFloats out(ids.size() * V);
    {
      nb::gil_scoped_release release;
      const int64_t n_ctx = std::max<int64_t>(
          m_->default_ctx(), std::min<int64_t>(int64_t(ids.size()), m_->model->config().n_ctx));
      SessionLease s(m_, n_ctx);
      std::lock_guard<std::mutex> lock(m_->compute);
      s->reset();
      s->eval_all(ids, std::span<float>(out.data.get(), ids.size() * V));
    }
    return out.array({ids.size(), V});
  }

  FloatArray attention(nb::handle input, bool special) {
    std::vector<int32_t> ids;
    if (nb::isinstance<nb::str>(input)) {
      const std::string text = nb::cast<std::string>(input);
      if (text.empty()) throw Error(ErrorKind::Argument, "prompt: the prompt is empty");
      try {
        ids = m_->tok().encode_with_specials(text, special);
      } catch (const Error& e) {
        throw Error(e.kind(), std::string("prompt: ") + e.what());
      }
      const int64_t n_ctx = m_->model->config().n_ctx;
      if (int64_t(ids.size()) > n_ctx) {
        throw Error(ErrorKind::Argument, "prompt: " + std::to_string(ids.size()) +
                                             " tokens, more than the model's context of " +
                                             std::to_string(n_ctx));
      }
    } else {
      ids = to_ids(input);
    }
    auto maps = std::make_unique<AttentionMaps>();
    {
      nb::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(m_->compute);
      *maps = attention_maps(m_->model, ids);
    }
    const size_t shape[4] = {size_t(maps->n_layer), size_t(maps->n_head), size_t(maps->n_tokens),
                             size_t(maps->n_tokens)};
    float* data = maps->probs.data();
    nb::capsule owner(maps.release(), [](void* p) noexcept { delete static_cast<AttentionMaps*>(p); });
    return FloatArray(data, 4, shape, owner);
  }

  PyPerplexity perplexity(nb::handle input, std::optional<int64_t> ctx_size, std::optional<int64_t> stride,
                          std::optional<int64_t> chunks, int64_t batch_size) {
    // The checks `minigpt perplexity` makes before reading anything (cli/cmd_perplexity.cpp).
    if (stride && chunks) throw Error(ErrorKind::Argument, "stride and chunks are two recipes: pick one");
    if (stride && *stride < 1)
      throw Error(ErrorKind::Argument, "stride must be at least 1, not " + std::to_string(*stride));
    if (chunks && *chunks < 1)
      throw Error(ErrorKind::Argument, "chunks must be at least 1, not " + std::to_string(*chunks));
    if (batch_size < 1 || batch_size > 65536) {
      throw Error(ErrorKind::Argument,
                  "batch_size: " + std::to_string(batch_size) + " is outside [1, 65536]");
    }
    const int64_t n_ctx = context_size(ctx_size, m_->model->config().n_ctx);
    PerplexityOptions po;
    po.n_ctx = n_ctx;
    if (stride) {
      po.recipe = PerplexityRecipe::Stride;
      po.stride = *stride;
    } else {
      po.recipe = PerplexityRecipe::Chunks;
      if (chunks) po.max_chunks = *chunks;
    }
    std::vector<int32_t> tokens;
    if (nb::isinstance<nb::str>(input)) {
      const std::string text = nb::cast<std::string>(input);
      tokens = perplexity_tokens(m_->tok(), text, po);
    } else {
      tokens = to_ids(input);
    }
    perplexity_windows(int64_t(tokens.size()), n_ctx, po);  // refused before any work
    PerplexityResult r;
    try {
      nb::gil_scoped_release release;
      SessionOptions so;
      so.n_ctx = n_ctx;
      so.max_batch = std::min(batch_size, n_ctx);
      Session session(m_->model, so);
      std::unique_lock<std::mutex> lock(m_->compute);
      r = minigpt::perplexity(session, tokens, po, {}, [&lock](int64_t, int64_t) {
        // Between windows: other threads' steps on this model, and Ctrl-C.
        lock.unlock();
        check_signals_released();
        lock.lock();
      });
    } catch (const PythonErrorSet&) {
      throw nb::python_error();
    }
    PyPerplexity out;
    out.ppl = r.ppl;
    out.ppl_error = r.ppl_error;
    out.nll_mean = r.nll_mean;
    out.nll_stderr = r.nll_stderr;
    out.n_tokens = int64_t(tokens.size());
    out.n_scored = r.n_scored;
    out.n_windows = r.n_windows;
    out.n_evaluated = r.n_evaluated;
    out.n_ctx = n_ctx;
    out.recipe = stride ? "stride" : "chunks";
    if (stride) out.stride = po.stride;
    out.seconds = r.seconds;
    return out;
  }

  PySession session(std::optional<int64_t> ctx_size) { return PySession(m_, ctx_size); }

  nb::dict config() const {
    const Config& c = m_->model->config();
    nb::dict d;
    d["arch"] = c.arch;
    d["n_layer"] = c.n_layer;
    d["n_head"] = c.n_head;
    d["n_kv_head"] = c.kv_heads();
    d["n_embd"] = c.n_embd;
    d["n_ctx"] = c.n_ctx;
    d["n_vocab"] = c.n_vocab;
    d["n_inner"] = c.n_inner;
    d["bos_token_id"] = c.bos_token_id;
    d["eos_token_id"] = c.eos_token_id;
    return d;
  }
  const std::string& path() const { return m_->path; }
  const std::shared_ptr<ModelState>& state() const { return m_; }
  const std::string& backend() const { return m_->backend; }
  int64_t n_params() const { return m_->model->n_params(); }
  std::string repr() const {
    const Config& c = m_->model->config();
    return "minigpt.Model('" + m_->path + "', arch='" + c.arch + "', n_layer=" + std::to_string(c.n_layer) +
           ", n_embd=" + std::to_string(c.n_embd) + ", n_vocab=" + std::to_string(c.n_vocab) + ", backend='" +
           m_->backend + "')";
  }

 private:
  std::shared_ptr<ModelState> m_;
};

std::vector<std::pair<int32_t, float>> logit_bias_from(nb::handle obj) {
  std::vector<std::pair<int32_t, float>> out;
  if (obj.is_none()) return out;
  if (!nb::isinstance<nb::dict>(obj)) throw nb::type_error("logit_bias: a dict {token id: bias} is needed");
  for (auto [k, v] : nb::borrow<nb::dict>(obj)) {
    const int64_t id = nb::cast<int64_t>(k);
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      throw Error(ErrorKind::Argument, "logit_bias: token id " + std::to_string(id) + " is out of range");
    out.emplace_back(int32_t(id), nb::cast<float>(v));
  }
  return out;
}

// seed (--seed): an int in [0, 2^64), as the CLI reads it.
std::optional<uint64_t> seed_from(nb::handle obj) {
  if (obj.is_none()) return std::nullopt;
  if (!PyIndex_Check(obj.ptr()) || PyBool_Check(obj.ptr())) throw nb::type_error("seed: an int is needed");
  nb::object i = nb::steal(PyNumber_Index(obj.ptr()));
  if (!i.is_valid()) throw nb::python_error();
  const std::string text = nb::cast<std::string>(nb::str(i));
  if (text.front() == '-') throw Error(ErrorKind::Argument, "seed: must be >= 0, got " + text);
  const unsigned long long v = PyLong_AsUnsignedLongLong(i.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    throw Error(ErrorKind::Argument, "seed: " + text + " is outside [0, 18446744073709551615]");
  }
  return uint64_t(v);
}

// speculative= (--prompt-lookup, --draft-model): None, "prompt_lookup", or a Model to draft with.
void speculative_from(nb::handle obj, GenerateArgs& a) {
  if (obj.is_none()) return;
  if (nb::isinstance<nb::str>(obj)) {
    const std::string s = nb::cast<std::string>(obj);
    if (s != "prompt_lookup") {
      throw Error(ErrorKind::Argument,
                  "speculative: " + s + " not in {prompt_lookup} (or a minigpt.Model to draft with)");
    }
    a.prompt_lookup = true;
    return;
  }
  PyModel* draft = nullptr;
  if (!nb::try_cast(obj, draft) || draft == nullptr)
    throw nb::type_error("speculative: 'prompt_lookup' or a minigpt.Model (the draft) is needed");
  a.draft = draft->state();
}

std::vector<std::string> stop_from(nb::handle obj) {
  if (obj.is_none()) return {};
  if (nb::isinstance<nb::str>(obj)) return {nb::cast<std::string>(obj)};
  return nb::cast<std::vector<std::string>>(obj);
}

// A keyword's value as T; a value of another type is the TypeError naming the keyword.
template <class T>
T keyword(nb::handle v, const char* name, const char* needed) {
  T out{};
  if (!nb::try_cast(v, out)) throw nb::type_error((std::string(name) + ": " + needed + " is needed").c_str());
  return out;
}
template <class T>
std::optional<T> optional_keyword(nb::handle v, const char* name, const char* needed) {
  if (v.is_none()) return std::nullopt;
  return keyword<T>(v, name, needed);
}

// generate()'s and chat()'s keywords (_model.py's GenerateOptions and ChatOptions), from the dict of those
// given; one the call does not take is the TypeError Python gives for an unexpected keyword.
GenerateArgs args_from(const nb::dict& options, bool chat) {
  GenerateArgs a;
  a.context_overflow = "error";
  for (auto [k, v] : options) {
    const std::string name = nb::cast<std::string>(k);
    const char* n = name.c_str();
    if (name == "temperature") {
      a.temperature = optional_keyword<float>(v, n, "a float");
    } else if (name == "top_k") {
      a.top_k = optional_keyword<int64_t>(v, n, "an int");
    } else if (name == "top_p") {
      a.top_p = optional_keyword<float>(v, n, "a float");
    } else if (name == "min_p") {
      a.min_p = optional_keyword<float>(v, n, "a float");
    } else if (name == "repetition_penalty") {
      a.repetition_penalty = optional_keyword<float>(v, n, "a float");
    } else if (name == "repeat_last_n") {
      a.repeat_last_n = optional_keyword<int64_t>(v, n, "an int");
    } else if (name == "presence_penalty") {
      a.presence_penalty = keyword<float>(v, n, "a float");
    } else if (name == "frequency_penalty") {
      a.frequency_penalty = keyword<float>(v, n, "a float");
    } else if (name == "logit_bias") {
      a.logit_bias = logit_bias_from(v);
    } else if (name == "seed") {
      a.seed = seed_from(v);
    } else if (name == "stop") {
      a.stop = stop_from(v);
    } else if (name == "ignore_eos") {
      a.ignore_eos = keyword<bool>(v, n, "a bool");
    } else if (name == "ctx_size") {
      a.ctx_size = optional_keyword<int64_t>(v, n, "an int");
    } else if (name == "logprobs") {
      a.logprobs = optional_keyword<int64_t>(v, n, "an int");
    } else if (name == "json_schema") {
      a.json_schema = optional_keyword<std::string>(v, n, "a schema's JSON text");
    } else if (name == "grammar") {
      a.grammar = optional_keyword<std::string>(v, n, "a str (a GBNF grammar)");
    } else if (name == "json_object") {
      a.json_object = keyword<bool>(v, n, "a bool");
    } else if (name == "speculative") {
      speculative_from(v, a);
    } else if (name == "draft_max") {
      a.draft_max = keyword<int64_t>(v, n, "an int");
    } else if (name == "draft_min") {
      a.draft_min = keyword<int64_t>(v, n, "an int");
    } else if (name == "lookup_ngram_min") {
      a.lookup_ngram_min = keyword<int64_t>(v, n, "an int");
    } else if (name == "lookup_ngram_max") {
      a.lookup_ngram_max = keyword<int64_t>(v, n, "an int");
    } else if (!chat && name == "context_overflow") {
      a.context_overflow = keyword<std::string>(v, n, "a str");
    } else if (!chat && name == "special") {
      a.special = keyword<bool>(v, n, "a bool");
    } else if (!chat && name == "show_special") {
      a.show_special = keyword<bool>(v, n, "a bool");
    } else {
      throw nb::type_error(
          (std::string(chat ? "chat" : "generate") + "() got an unexpected keyword argument '" + name + "'")
              .c_str());
    }
  }
  return a;
}

}  // namespace
}  // namespace minigpt::python

NB_MODULE(_minigpt, m) {
  using namespace minigpt;
  using namespace minigpt::python;
  m.doc() = "minigpt's extension module: use the minigpt package, which re-exports what is here.";
  make_error_classes(m);

  nb::class_<PyTokenizer>(
      m, "Tokenizer",
      "A byte-level BPE tokenizer, as Hugging Face `tokenizers` encodes (include/minigpt/tokenizer.h). "
      "Immutable; safe to share between threads.")
      .def_static("load", &PyTokenizer::load, "path"_a,
                  "Loads the tokenizer of a model directory (tokenizer.json, or vocab.json + merges.txt) or "
                  "of a GGUF file.")
      .def("encode", &PyTokenizer::encode, "text"_a, nb::kw_only(), "add_special_tokens"_a = true,
           "special"_a = false,
           "The ids of `text`, with the special tokens tokenizer.json's template puts around it (a BOS) "
           "unless add_special_tokens=False, as `tokenizers`' encode() and `minigpt tokenize`. "
           "special=True recognises special tokens such as <|endoftext|> written in the text.")
      .def("decode", &PyTokenizer::decode, "ids"_a, nb::kw_only(), "skip_special_tokens"_a = false,
           "The text of `ids`; bytes that do not form whole characters become U+FFFD.")
      .def("token_bytes", &PyTokenizer::token_bytes, "id"_a, "The bytes one token stands for.")
      .def("token_symbol", &PyTokenizer::token_symbol, "id"_a,
           "The token as the vocabulary spells it ('Ġworld').")
      .def("is_special", &PyTokenizer::is_special, "id"_a,
           "Whether the token is an added token marked special (<|endoftext|>).")
      .def_prop_ro("n_vocab", &PyTokenizer::n_vocab, "The number of ids.")
      .def("__len__", &PyTokenizer::n_vocab)
      .def_prop_ro(
          "eos_id", &PyTokenizer::eos_id,
          "The file's end of text (a GGUF file's tokenizer.ggml.eos_token_id, SentencePiece's </s>), else "
          "<|endoftext|>'s id when the vocabulary has it; token_symbol(eos_id) names it.")
      .def_prop_ro(
          "bos_id", &PyTokenizer::bos_id,
          "The file's beginning of text (a GGUF file's tokenizer.ggml.bos_token_id, SentencePiece's <s>), "
          "else eos_id; token_symbol(bos_id) names it.");

  nb::class_<PyToken>(m, "Token", "One generated token.")
      .def_ro("id", &PyToken::id, "The token id.")
      .def_ro("text", &PyToken::text, "The text it released (empty while a character is incomplete).")
      .def_ro("logprob", &PyToken::logprob,
              "log p(id) under the model's distribution before any sampling filter (None without logprobs=).")
      .def_ro("top_logprobs", &PyToken::top_logprobs,
              "The logprobs= most likely (id, logprob) pairs, most likely first.")
      .def("__repr__", [](const PyToken& t) {
        return "minigpt.Token(id=" + std::to_string(t.id) +
               ", text=" + nb::cast<std::string>(nb::repr(nb::str(t.text.c_str(), t.text.size()))) + ")";
      });

  nb::class_<PyGenerateResult>(m, "GenerateResult", "What generate() returns (stream=False).")
      .def_ro("text", &PyGenerateResult::text, "The generated text, cut before a stop string (no prompt).")
      .def_ro("ids", &PyGenerateResult::ids, "The generated ids (an ending EOS not included).")
      .def_ro("prompt_ids", &PyGenerateResult::prompt_ids,
              "The prompt as evaluated (BOS for an empty one; truncated with context_overflow).")
      .def_ro("tokens", &PyGenerateResult::tokens,
              "Each token handed out (those before a stop string), with its text and logprobs.")
      .def_prop_ro("logprobs", &PyGenerateResult::logprobs,
                   "Each token's logprob, with logprobs=; else None.")
      .def_ro("stop_reason", &PyGenerateResult::stop_reason,
              "Why generation ended: 'length', 'eos', 'stop', 'context' or 'cancelled'.")
      .def_ro("stop", &PyGenerateResult::stop, "The stop string that ended generation, if one did.")
      .def_ro("seed", &PyGenerateResult::seed, "The sampling seed (the one drawn when none was given).")
      .def_ro("prompt_dropped", &PyGenerateResult::prompt_dropped,
              "Prompt ids context_overflow='truncate' removed from the front.")
      .def_ro("slides", &PyGenerateResult::slides, "Times context_overflow='slide' moved the window.")
      .def_ro("prefill_seconds", &PyGenerateResult::prefill_seconds, "Evaluating the prompt.")
      .def_ro("first_token_seconds", &PyGenerateResult::first_token_seconds,
              "From the start to the first sampled token.")
      .def_ro("decode_seconds", &PyGenerateResult::decode_seconds, "From the first sampled token to the end.")
      .def_ro("decode_steps", &PyGenerateResult::decode_steps,
              "Forward steps of the model after the prompt's: one per token after the first, fewer with "
              "speculative= (each step yields 1 + its accepted drafts).")
      .def_ro("drafted", &PyGenerateResult::drafted, "Tokens speculative= drafted (0 without it).")
      .def_ro("accepted", &PyGenerateResult::accepted,
              "Drafted tokens the model kept (each one a token that took no step of its own).")
      .def("__repr__", [](const PyGenerateResult& r) {
        return "minigpt.GenerateResult(text=" +
               nb::cast<std::string>(nb::repr(nb::str(r.text.c_str(), r.text.size()))) + ", ids=<" +
               std::to_string(r.ids.size()) + " ids>, stop_reason='" + r.stop_reason + "')";
      });

  nb::class_<GenerateStream>(
      m, "GenerateStream",
      "What generate(stream=True) returns: an iterator of text pieces. `result` is the "
      "GenerateResult once it is exhausted (or closed).")
      .def("__iter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__next__", &GenerateStream::next)
      .def("close", &GenerateStream::close, "Ends the generation now (stop_reason 'cancelled').")
      .def_prop_ro("result", &GenerateStream::result,
                   "The GenerateResult once the stream has ended; else None.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def(
          "__exit__", [](GenerateStream& s, nb::handle, nb::handle, nb::handle) { s.close(); },
          "exc_type"_a.none(), "exc"_a.none(), "tb"_a.none());

  nb::class_<PyPerplexity>(m, "PerplexityResult",
                           "What perplexity() returns, as `minigpt perplexity --json`.")
      .def_ro("ppl", &PyPerplexity::ppl, "exp(mean NLL).")
      .def_ro("ppl_error", &PyPerplexity::ppl_error, "ppl x the mean NLL's standard error (llama.cpp's).")
      .def_ro("nll_mean", &PyPerplexity::nll_mean, "Nats per scored token.")
      .def_ro("nll_stderr", &PyPerplexity::nll_stderr, "The mean NLL's standard error.")
      .def_ro("n_tokens", &PyPerplexity::n_tokens, "Tokens of the text (with the template's special ones).")
      .def_ro("n_scored", &PyPerplexity::n_scored, "Tokens scored.")
      .def_ro("n_windows", &PyPerplexity::n_windows, "Chunks or windows evaluated.")
      .def_ro("n_evaluated", &PyPerplexity::n_evaluated, "Tokens run through the model.")
      .def_ro("n_ctx", &PyPerplexity::n_ctx, "The chunk / window length.")
      .def_ro("stride", &PyPerplexity::stride, "The stride (recipe 'stride'); else None.")
      .def_ro("recipe", &PyPerplexity::recipe, "'chunks' (llama.cpp's) or 'stride' (transformers').")
      .def_ro("seconds", &PyPerplexity::seconds, "Wall time of the evaluation.")
      .def("__repr__", [](const PyPerplexity& p) {
        return "minigpt.PerplexityResult(ppl=" + std::to_string(p.ppl) + ", recipe='" + p.recipe +
               "', n_scored=" + std::to_string(p.n_scored) + ")";
      });

  nb::class_<PySession>(
      m, "Session", "One run's KV cache over a model: eval() appends tokens and gives logits, step by step.")
      .def("eval", &PySession::eval, "ids"_a, nb::kw_only(), "all_logits"_a = false,
           "Appends `ids` to the sequence and returns the logits of the last one (float32 [n_vocab]), or "
           "with all_logits=True those of every appended token ([len(ids), n_vocab]).")
      .def_prop_ro("logits", &PySession::logits,
                   "The logits after the last eval() (float32 [n_vocab]); None before.")
      .def("reset", &PySession::reset, "Forgets every token (keeps the memory).")
      .def("keep", &PySession::keep, "n"_a,
           "Keeps the first n positions and forgets the rest (0 <= n <= n_past).")
      .def_prop_ro("n_past", &PySession::n_past, "Tokens in the cache.")
      .def_prop_ro("n_ctx", &PySession::n_ctx, "Positions the cache holds.")
      .def_prop_ro("tokens", &PySession::tokens, "The ids in the cache, in order.");

  nb::class_<PyModel>(
      m, "Model",
      "A loaded model: a Hugging Face directory, a GGUF file or an llm.c checkpoint (any path "
      "`minigpt -m` takes). Immutable after load; safe to share between threads.")
      .def(
          nb::init<const std::string&, const std::string&, int, const std::string&, int,
                   const std::optional<std::string>&, const std::optional<std::string>&,
                   const std::string&>(),
          "path"_a, nb::kw_only(), "dtype"_a = "stored", "threads"_a = 0, "backend"_a = "cpu", "device"_a = 0,
          "cache_type"_a = nb::none(), "tokenizer"_a = nb::none(), "bf16_math"_a = "auto",
          "Loads `path` as `minigpt -m PATH` does. dtype: 'f32', 'f16', 'bf16' or 'stored' (--dtype); "
          "threads: "
          "CPU threads, 0 = all cores (-t); backend: 'cpu' or 'cuda' (--backend) and its device (--device); "
          "cache_type: the KV cache's dtype (--cache-type); tokenizer: a directory whose tokenizer to use "
          "(--tokenizer; an llm.c checkpoint has none); bf16_math: 'f32', 'bf16' or 'auto', how BF16 weights "
          "are multiplied (--bf16-math).")
      .def_prop_ro("tokenizer", &PyModel::tokenizer,
                   "The model's tokenizer; raises the error that loading it gave when it has none.")
      .def_prop_ro("has_tokenizer", &PyModel::has_tokenizer, "Whether a tokenizer was loaded.")
      .def("_generate", &PyModel::generate, "prompt"_a, "max_new_tokens"_a.none(), "options"_a, "stream"_a,
           "chat"_a,
           "generate() and chat() (python/minigpt/_model.py): `options` holds their keywords, a schema as "
           "its JSON text; with chat=True `prompt` is the conversation as a JSON array of messages.")
      .def("logits", &PyModel::logits, "ids"_a,
           "The logits of every token of `ids` (float32 [len(ids), n_vocab]), from an empty context.")
      .def("attention", &PyModel::attention, "text_or_ids"_a, nb::kw_only(), "special"_a = false,
           "The attention probabilities of every layer and head (float32 [n_layer, n_head, T, T], zero above "
           "the diagonal), as transformers' output_attentions=True: a text is encoded with the template's "
           "special tokens, as `minigpt attention -p`.")
      .def("perplexity", &PyModel::perplexity, "text_or_ids"_a, nb::kw_only(),
           "ctx_size"_a.none() = nb::none(), "stride"_a.none() = nb::none(), "chunks"_a.none() = nb::none(),
           "batch_size"_a = 512,
           "Perplexity as `minigpt perplexity`: llama.cpp's chunks of ctx_size (the second half of each "
           "scored; "
           "at most `chunks` of them), or with stride= transformers' strided windows.")
      .def("session", &PyModel::session, nb::kw_only(), "ctx_size"_a.none() = nb::none(),
           "A Session (a KV cache of ctx_size positions: default the model's context, at most 4096; 0 = all "
           "of it) for step-by-step evaluation.")
      .def_prop_ro("config", &PyModel::config, "The model's hyperparameters.")
      .def_prop_ro("path", &PyModel::path, "The path it was loaded from.")
      .def_prop_ro("backend", &PyModel::backend, "The backend it runs on.")
      .def_prop_ro("n_params", &PyModel::n_params, "Parameters (a tied head counted once).")
      .def("__repr__", &PyModel::repr);

  m.def(
      "backends",
      []() {
        std::vector<std::pair<std::string, std::string>> out;
        for (const BackendInfo& b : backends()) {
          std::string why;
          out.emplace_back(b.name, b.available(&why) ? std::string() : why);
        }
        return out;
      },
      "The backends of this build: (name, why it cannot run here; empty when it can).");
}
