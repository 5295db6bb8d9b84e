#include "formats/llmc.h"

#include <cstring>

#include "io/io.h"
#include "minigpt/error.h"

namespace minigpt {
namespace {

constexpr uint64_t kHeaderBytes = 256 * sizeof(int32_t);

// The caps of config.json's fields (src/arch/config.cpp), so that an llm.c file loads iff the same model
// would as a directory.
constexpr int64_t kMaxDim = int64_t(1) << 20;
constexpr int64_t kMaxVocab = int64_t(1) << 24;
constexpr int64_t kMaxLayers = 4096;
// Within the caps no size below overflows: the largest arrays are Vp x C and L x 4C x C elements of 4 bytes.
static_assert(kMaxVocab * kMaxDim * 4 < (int64_t(1) << 62) &&
              kMaxLayers * 4 * kMaxDim * kMaxDim * 4 < (int64_t(1) << 62));

int32_t get_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// A parameter's extent along one axis: the header's V, maxT or C, or a multiple of C; None: no second axis.
enum class Dim { None, V, T, C, C3, C4 };

struct Param {
  const char* name;
  bool stacked;    // one slice per layer
  Dim rows, cols;  // [out, in] per layer, as fill_in_parameter_sizes gives them
};
// File order (train_gpt2.py's write_tensors, train_gpt2.c's fill_in_parameter_sizes); wte is V of its Vp
// rows, the rest padding.
constexpr Param kParams[] = {
    {"wte", false, Dim::V, Dim::C},     {"wpe", false, Dim::T, Dim::C},
    {"ln1w", true, Dim::C, Dim::None},  {"ln1b", true, Dim::C, Dim::None},
    {"qkvw", true, Dim::C3, Dim::C},    {"qkvb", true, Dim::C3, Dim::None},
    {"attprojw", true, Dim::C, Dim::C}, {"attprojb", true, Dim::C, Dim::None},
    {"ln2w", true, Dim::C, Dim::None},  {"ln2b", true, Dim::C, Dim::None},
    {"fcw", true, Dim::C4, Dim::C},     {"fcb", true, Dim::C4, Dim::None},
    {"fcprojw", true, Dim::C, Dim::C4}, {"fcprojb", true, Dim::C, Dim::None},
    {"lnfw", false, Dim::C, Dim::None}, {"lnfb", false, Dim::C, Dim::None},
};

}  // namespace

Error llmc_no_tokenizer_error(const std::filesystem::path& path) {
  return Error(ErrorKind::Unsupported,
               path.string() +
                   ": an llm.c checkpoint carries no tokenizer minigpt can encode with; "
                   "give a tokenizer directory (GPT-2's vocab.json + merges.txt)");
}

std::shared_ptr<LlmcFile> LlmcFile::open(const std::filesystem::path& path) {
  std::shared_ptr<LlmcFile> f(new LlmcFile());
  f->bytes_ = ByteSource::open_file(path);
  f->parse(f->bytes_.size());
  return f;
}

std::shared_ptr<LlmcFile> LlmcFile::from_memory(const uint8_t* bytes, size_t size, std::string source) {
  std::shared_ptr<LlmcFile> f(new LlmcFile());
  f->bytes_ = ByteSource::in_memory(bytes, size, std::move(source));
  f->parse(size);
  return f;
}

void LlmcFile::read(const LlmcTensor& t, void* dst) const { bytes_.fetch(dst, t.nbytes, t.offset); }

void LlmcFile::parse(uint64_t file_size) {
  auto fail = [&](ErrorKind kind, const std::string& what) { throw Error(kind, path() + ": " + what); };
  if (file_size < kHeaderBytes) {
    fail(ErrorKind::Format, "truncated: " + std::to_string(file_size) + " bytes, shorter than llm.c's " +
                                std::to_string(kHeaderBytes) + "-byte header");
  }
  uint8_t raw[kHeaderBytes];
  bytes_.fetch(raw, kHeaderBytes, 0);
  auto field = [&](int i) { return get_i32(raw + 4 * i); };

  const int32_t magic = field(0);
  if (magic == kLlmcStateMagic) {
    fail(ErrorKind::Unsupported,
         "an llm.c debug state file (magic 20240327, train_gpt2.py's write_state), not a "
         "model checkpoint (magic 20240326, write_model)");
  }
  if (magic == kLlmcTokenizerMagic) {
    fail(ErrorKind::Unsupported,
         "an llm.c tokenizer file (magic 20240328), not a model checkpoint: it can only decode; give the "
         "checkpoint as the model and GPT-2's vocab.json + merges.txt as its tokenizer");
  }
  if (magic != kLlmcMagic) {
    fail(ErrorKind::Format, "not an llm.c checkpoint (magic " + std::to_string(magic) + ", expected " +
                                std::to_string(kLlmcMagic) + ")");
  }
  const int32_t version = field(1);
  if (version == 1 || version == 2 || version == 4) {
    const char* what = version == 1   ? "F32 parameters, vocabulary not padded"
                       : version == 2 ? "BF16 with F32 layer norms at the end, vocabulary not padded"
                                      : "BF16 with F32 layer norms at the end";
    fail(ErrorKind::Unsupported, "llm.c checkpoint version " + std::to_string(version) + " (" + what +
                                     ", an older layout) is not read; export it again with the current "
                                     "train_gpt2.py (version 3 = F32 and 5 = BF16 are read)");
  }
  if (version != 3 && version != 5) {
    fail(ErrorKind::Format, "llm.c checkpoint version " + std::to_string(version) +
                                (version > 0xffff || version < 0 ? " (a big-endian file?)" : "") +
                                " is unknown (3 = F32 and 5 = BF16 are read)");
  }
  LlmcHeader& h = header_;
  h.version = version;
  // Each field checked before any size is computed from it.
  auto dim = [&](int i, const char* name, const char* what, int64_t max) {
    const int64_t v = field(i);
    if (v < 1 || v > max) {
      fail(ErrorKind::Format, "header[" + std::to_string(i) + "] " + name + " (" + what + ") = " +
                                  std::to_string(v) + " is out of range [1, " + std::to_string(max) + "]");
    }
    return v;
  };
  h.max_t = dim(2, "maxT", "the positions", kMaxDim);
  h.n_vocab = dim(3, "V", "the vocabulary", kMaxVocab);
  h.n_layer = dim(4, "L", "the layers", kMaxLayers);
  h.n_head = dim(5, "NH", "the heads", kMaxDim);
  h.n_embd = dim(6, "C", "the channels", kMaxDim);
  h.n_vocab_padded = dim(7, "Vp", "the padded vocabulary", kMaxVocab);
  if (h.n_vocab > h.n_vocab_padded) {
    fail(ErrorKind::Format, "header V = " + std::to_string(h.n_vocab) + " is larger than Vp = " +
                                std::to_string(h.n_vocab_padded) + " (the padded vocabulary, wte's rows)");
  }
  if (h.n_embd % h.n_head != 0) {
    fail(ErrorKind::Format,
         "header C = " + std::to_string(h.n_embd) + " is not divisible by NH = " + std::to_string(h.n_head));
  }

  const int64_t L = h.n_layer, C = h.n_embd;
  const uint64_t es = st_dtype_size(dtype());
  uint64_t offset = kHeaderBytes;
  for (const Param& p : kParams) {
    auto extent = [&](Dim d) -> int64_t {
      switch (d) {
        case Dim::V:
          return h.n_vocab;
        case Dim::T:
          return h.max_t;
        case Dim::C:
          return C;
        case Dim::C3:
          return 3 * C;
        case Dim::C4:
          return 4 * C;
        case Dim::None:
          break;
      }
      return 0;
    };
    std::vector<int64_t> shape = {extent(p.rows)};
    if (p.cols != Dim::None) shape.push_back(extent(p.cols));
    uint64_t numel = 1;
    for (int64_t d : shape) numel *= uint64_t(d);
    const uint64_t nbytes = numel * es;
    for (int64_t l = 0; l < (p.stacked ? L : 1); ++l) {
      const int64_t layer = p.stacked ? l : -1;
      tensors_.push_back({p.name, layer, shape, offset, nbytes});
      offset += nbytes;
    }
    if (p.rows == Dim::V) offset += uint64_t(h.n_vocab_padded - h.n_vocab) * uint64_t(C) * es;
  }
  if (file_size != offset) {
    const uint64_t params = (offset - kHeaderBytes) / es;
    const std::string implied =
        "the header implies " + std::to_string(offset) + " (1024 + " + std::to_string(params) +
        " parameters x " + std::to_string(es) + " bytes: maxT " + std::to_string(h.max_t) + ", V " +
        std::to_string(h.n_vocab) + ", Vp " + std::to_string(h.n_vocab_padded) + ", L " + std::to_string(L) +
        ", NH " + std::to_string(h.n_head) + ", C " + std::to_string(C) + ")";
    fail(ErrorKind::Format, std::to_string(file_size) + " bytes, but " + implied +
                                (file_size < offset ? "; truncated?" : "; extra bytes after the parameters"));
  }
}

}  // namespace minigpt
