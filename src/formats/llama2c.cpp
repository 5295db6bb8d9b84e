#include "formats/llama2c.h"

#include <cstring>

#include "io/io.h"
#include "minigpt/error.h"

namespace minigpt {
namespace {

// The caps of config.json's fields (src/arch/config.cpp), so that a llama2.c file loads iff the same model
// would as a directory.
constexpr int64_t kMaxDim = int64_t(1) << 20;
constexpr int64_t kMaxVocab = int64_t(1) << 24;
constexpr int64_t kMaxLayers = 4096;
// Within the caps no size below overflows: the largest arrays are L x hidden x dim and V x dim elements of
// 4 bytes, the rotary tables seq_len x dim.
static_assert(kMaxLayers * kMaxDim * kMaxDim * 4 * 8 < (int64_t(1) << 62) &&
              kMaxVocab * kMaxDim * 4 * 2 < (int64_t(1) << 62));

constexpr uint64_t kLegacyHeaderBytes = 7 * sizeof(int32_t);
constexpr uint64_t kHeaderBytes = 256;

int32_t get_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The seven int32 of the model at `p`, each checked; "" when they are a model, else what is wrong.
std::string read_params(const uint8_t* p, bool legacy, Llama2cHeader& h) {
  struct Field {
    const char* name;
    int64_t max;
    int64_t* dst;
  };
  const Field fields[] = {{"dim", kMaxDim, &h.dim},
                          {"hidden_dim", kMaxDim, &h.hidden_dim},
                          {"n_layers", kMaxLayers, &h.n_layers},
                          {"n_heads", kMaxDim, &h.n_heads},
                          {"n_kv_heads", kMaxDim, &h.n_kv_heads},
                          {"vocab_size", kMaxVocab, &h.vocab_size},
                          {"max_seq_len", kMaxDim, &h.seq_len}};
  for (int i = 0; i < 7; ++i) {
    int64_t v = get_i32(p + 4 * i);
    if (legacy && fields[i].dst == &h.vocab_size) {
      h.shared_classifier = v > 0;  // the legacy format's flag: negative = an unshared classifier follows
      v = v < 0 ? -v : v;
    }
    if (v < 1 || v > fields[i].max) {
      return std::string(fields[i].name) + " = " + std::to_string(v) + " is out of range [1, " +
             std::to_string(fields[i].max) + "]";
    }
    *fields[i].dst = v;
  }
  if (h.dim % h.n_heads != 0) {
    return "dim = " + std::to_string(h.dim) + " is not divisible by n_heads = " + std::to_string(h.n_heads);
  }
  if (h.head_size() % 2 != 0) {
    return "the head size dim / n_heads = " + std::to_string(h.head_size()) +
           " is odd (rotary positions rotate pairs of dimensions)";
  }
  if (h.n_kv_heads > h.n_heads || h.n_heads % h.n_kv_heads != 0) {
    return "n_kv_heads = " + std::to_string(h.n_kv_heads) +
           " does not divide n_heads = " + std::to_string(h.n_heads);
  }
  return "";
}

// The tensors of a checked header in file order from its header's end; returns the offset after the last.
uint64_t layout(const Llama2cHeader& h, std::vector<Llama2cTensor>& out) {
  const int64_t L = h.n_layers, D = h.dim, F = h.hidden_dim, KV = h.kv_dim(), V = h.vocab_size;
  const bool q8 = h.version == 2;
  uint64_t offset = h.header_bytes;
  // One array, stacked over the layers or not; `quant`: int8 values then their scales (version 2's).
  auto add = [&](const char* name, std::vector<int64_t> shape, bool stacked, bool quant) {
    uint64_t numel = 1;
    for (int64_t d : shape) numel *= uint64_t(d);
    for (int64_t l = 0; l < (stacked ? L : 1); ++l) {
      Llama2cTensor t{name, stacked ? l : -1, shape, offset, 0, 0, 0};
      if (quant) {
        t.nbytes = numel;
        t.n_scales = numel / uint64_t(h.group_size);
        t.scale_offset = offset + numel;
        offset += numel + 4 * t.n_scales;
      } else {
        t.nbytes = 4 * numel;
        offset += t.nbytes;
      }
      out.push_back(std::move(t));
    }
  };
  auto matrices = [&](bool quant) {
    add("wq", {D, D}, true, quant);
    add("wk", {KV, D}, true, quant);
    add("wv", {KV, D}, true, quant);
    add("wo", {D, D}, true, quant);
  };
  auto ffn = [&](bool quant) {
    add("w1", {F, D}, true, quant);
    add("w2", {D, F}, true, quant);
    add("w3", {F, D}, true, quant);
  };
  if (h.version == 0) {
    add("token_embedding_table", {V, D}, false, false);
    add("rms_att_weight", {D}, true, false);
    matrices(false);
    add("rms_ffn_weight", {D}, true, false);
    ffn(false);
    add("rms_final_weight", {D}, false, false);
    offset += 2 * uint64_t(h.seq_len) * uint64_t(h.head_size() / 2) * 4;  // freq_cis_real, freq_cis_imag
  } else {
    add("rms_att_weight", {D}, true, false);
    add("rms_ffn_weight", {D}, true, false);
    add("rms_final_weight", {D}, false, false);
    add("token_embedding_table", {V, D}, false, q8);
    matrices(q8);
    ffn(q8);
  }
  if (!h.shared_classifier) add("wcls", {V, D}, false, q8);
  return offset;
}

}  // namespace

int64_t Llama2cTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool probe_llama2c_legacy(const uint8_t* head, size_t n, uint64_t file_size, uint64_t* implied) {
  *implied = 0;
  if (n < kLegacyHeaderBytes) return false;
  Llama2cHeader h;
  h.header_bytes = kLegacyHeaderBytes;
  if (!read_params(head, true, h).empty()) return false;
  std::vector<Llama2cTensor> tensors;
  *implied = layout(h, tensors);
  return *implied == file_size;
}

Error llama2c_no_tokenizer_error(const std::filesystem::path& path) {
  return Error(ErrorKind::Unsupported,
               path.string() +
                   ": a llama2.c checkpoint carries no tokenizer; give its vocabulary "
                   "as the tokenizer (llama2.c's tokenizer.bin, run.c's -z)");
}

std::shared_ptr<Llama2cFile> Llama2cFile::open(const std::filesystem::path& path) {
  std::shared_ptr<Llama2cFile> f(new Llama2cFile());
  f->bytes_ = ByteSource::open_file(path);
  f->parse(f->bytes_.size());
  return f;
}

std::shared_ptr<Llama2cFile> Llama2cFile::from_memory(const uint8_t* bytes, size_t size, std::string source) {
  std::shared_ptr<Llama2cFile> f(new Llama2cFile());
  f->bytes_ = ByteSource::in_memory(bytes, size, std::move(source));
  f->parse(size);
  return f;
}

void Llama2cFile::read(const Llama2cTensor& t, float* dst) const {
  if (!t.quantized()) {
    bytes_.fetch(dst, t.nbytes, t.offset);
    return;
  }
  std::vector<int8_t> q(size_t(t.nbytes));
  bytes_.fetch(q.data(), t.nbytes, t.offset);
  const std::vector<float> scales = read_scales(t);
  const size_t gs = size_t(header_.group_size);
  for (size_t i = 0; i < q.size(); ++i) dst[i] = float(q[i]) * scales[i / gs];
}

std::vector<float> Llama2cFile::read_scales(const Llama2cTensor& t) const {
  std::vector<float> s(size_t(t.n_scales));
  bytes_.fetch(s.data(), 4 * t.n_scales, t.scale_offset);
  return s;
}

void Llama2cFile::parse(uint64_t file_size) {
  auto fail = [&](ErrorKind kind, const std::string& what) { throw Error(kind, path() + ": " + what); };
  uint8_t raw[kHeaderBytes] = {};
  if (file_size < kLegacyHeaderBytes) {
    fail(ErrorKind::Format, "truncated: " + std::to_string(file_size) +
                                " bytes, shorter than a llama2.c checkpoint's header (28 bytes)");
  }
  bytes_.fetch(raw, std::min<uint64_t>(file_size, kHeaderBytes), 0);
  Llama2cHeader& h = header_;
  std::string bad;
  if (uint32_t(get_i32(raw)) == kLlama2cMagic) {
    if (file_size < kHeaderBytes) {
      fail(ErrorKind::Format, "truncated: " + std::to_string(file_size) +
                                  " bytes, shorter than llama2.c's 256-byte header (magic \"ak42\")");
    }
    h.version = get_i32(raw + 4);
    if (h.version != 1 && h.version != 2) {
      fail(ErrorKind::Unsupported,
           "llama2.c checkpoint version " + std::to_string(h.version) +
               " is unknown (export.py writes 0, 1 = float32 and 2 = Q8_0; all are read)");
    }
    h.header_bytes = kHeaderBytes;
    bad = read_params(raw + 8, false, h);
    if (bad.empty() && raw[36] > 1) bad = "shared_classifier = " + std::to_string(raw[36]) + " is not 0 or 1";
    h.shared_classifier = raw[36] == 1;
    if (bad.empty() && h.version == 2) {
      h.group_size = get_i32(raw + 37);
      // Every quantized tensor has dim as a factor, so it is whole groups (of its values in file order).
      if (h.group_size < 1 || h.dim % h.group_size != 0) {
        bad = "group size " + std::to_string(h.group_size) +
              " does not divide dim = " + std::to_string(h.dim) + " (export.py halves it until it does)";
      }
    }
  } else {
    h.version = 0;
    h.header_bytes = kLegacyHeaderBytes;
    bad = read_params(raw, true, h);
  }
  if (!bad.empty()) {
    fail(ErrorKind::Format, "llama2.c header (version " + std::to_string(h.version) + "): " + bad);
  }
  const uint64_t end = layout(h, tensors_);
  if (file_size != end) {
    const std::string implied =
        "the header implies " + std::to_string(end) + " (version " + std::to_string(h.version) + ": dim " +
        std::to_string(h.dim) + ", hidden_dim " + std::to_string(h.hidden_dim) + ", n_layers " +
        std::to_string(h.n_layers) + ", n_heads " + std::to_string(h.n_heads) + ", n_kv_heads " +
        std::to_string(h.n_kv_heads) + ", vocab_size " + std::to_string(h.vocab_size) + ", max_seq_len " +
        std::to_string(h.seq_len) + (h.shared_classifier ? ", shared" : ", unshared") + " classifier" +
        (h.version == 2 ? ", group size " + std::to_string(h.group_size) : std::string()) + ")";
    fail(ErrorKind::Format, std::to_string(file_size) + " bytes, but " + implied +
                                (file_size < end ? "; truncated?" : "; extra bytes after the weights"));
  }
}

}  // namespace minigpt
