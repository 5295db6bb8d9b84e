// Writing the output: the tensors' order and types (the converter's, or llama-quantize's from
// quant_policy.cpp), the checks that need no tensor data, the metadata as each tool leaves it, and the
// tensors converted, quantized on threads and written through GgufWriter. See convert/gguf_convert.h; the
// llama.cpp code each part follows is named where it is reproduced (convert_hf_to_gguf.py's
// conversion/base.py, src/llama-quant.cpp).
#include <algorithm>
#include <exception>
#include <thread>

#include "convert/gguf_convert.h"
#include "convert/source.h"
#include "convert/util.h"
#include "cpu/sysinfo.h"
#include "formats/gguf_writer.h"
#include "minigpt/error.h"
#include "quant/quant.h"
#include "quant/quantize.h"

namespace minigpt {

namespace fs = std::filesystem;
using convert::block_size;
using convert::ends_with;
using convert::is_quantized;
using convert::shape_str;
using convert::Source;
using convert::SourceTensor;
using convert::type_name;

namespace {

// The value of `key` replaced in place; a new key appended, unless only_if_present.
void set_kv(convert::Kv& kv, const std::string& key, GgufValue v, bool only_if_present = false) {
  for (auto& [k, old] : kv) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  if (!only_if_present) kv.emplace_back(key, std::move(v));
}

// The output may not be one of the files being read, a directory, or in a directory that does not exist.
void check_output(const fs::path& out, const Source& s) {
  if (out.empty()) throw Error(ErrorKind::Argument, "the output path is empty");
  const fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  std::error_code ec;
  if (!fs::exists(parent, ec)) {
    throw Error(ErrorKind::Io, out.string() + ": the directory '" + parent.string() + "' does not exist");
  }
  if (!fs::is_directory(parent, ec)) {
    throw Error(ErrorKind::Io, out.string() + ": '" + parent.string() + "' is not a directory");
  }
  if (fs::is_directory(out, ec)) {
    throw Error(ErrorKind::Io, out.string() + ": is a directory (give the output file's name)");
  }
  if (!fs::exists(out, ec)) return;
  for (const fs::path& f : s.files) {
    if (fs::equivalent(out, f, ec)) {
      throw Error(ErrorKind::Argument, out.string() + ": is the input file '" + f.string() +
                                           "' (it is read while the output is written: write elsewhere)");
    }
  }
}

// Quantizes `rows` rows of `cols` values on up to `threads` threads (each row on its own: the bytes do not
// depend on the split).
void quantize_rows(GgmlType type, const float* src, uint8_t* dst, int64_t rows, int64_t cols, int threads) {
  const uint64_t row_bytes = quantized_size(type, cols);
  const int64_t n_threads = std::max<int64_t>(1, std::min<int64_t>(threads, rows * cols / 65536 + 1));
  if (n_threads <= 1) {
    quantize(type, src, dst, rows * cols);
    return;
  }
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(
      static_cast<size_t>(n_threads));  // rethrown here: on a thread, std::terminate
  for (int64_t t = 0; t < n_threads; ++t) {
    const int64_t r0 = rows * t / n_threads, r1 = rows * (t + 1) / n_threads;
    if (r1 > r0) {
      pool.emplace_back([=, &errors] {
        try {
          quantize(type, src + r0 * cols, dst + uint64_t(r0) * row_bytes, (r1 - r0) * cols);
        } catch (...) {
          errors[size_t(t)] = std::current_exception();
        }
      });
    }
  }
  for (auto& th : pool) th.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// What llama-quantize reads of the model's hyperparameters for its choice of types, from the metadata it
// would load: head_count_kv defaults to head_count (llama_model_loader), a per-layer array gives its first.
QuantModel quant_model(const Source& s) {
  auto find = [&](const std::string& key) -> const GgufValue* {
    for (const auto& [k, v] : s.metadata)
      if (k == key) return &v;
    return nullptr;
  };
  auto first_int = [](const GgufValue* v) -> int64_t {
    if (v == nullptr) return 0;
    if (v->type != GgufType::ARRAY) return v->i;
    return v->ints.empty() ? 0 : v->ints[0];
  };
  QuantModel m;
  m.n_layer = s.n_layer;
  const GgufValue* arch = find("general.architecture");
  const std::string a = arch != nullptr && arch->type == GgufType::STRING ? arch->s : "";
  const int64_t n_head = first_int(find(a + ".attention.head_count"));
  const GgufValue* kv = find(a + ".attention.head_count_kv");
  const int64_t n_head_kv = kv != nullptr ? first_int(kv) : n_head;
  m.n_gqa = n_head_kv > 0 ? n_head / n_head_kv : 0;
  // LLM_TYPE_70B as the architectures' load_hparams set it (the only model type the choice reads)
  m.is_70b = s.n_layer == 80 && ((a == "llama" && n_head != n_head_kv) || a == "qwen2");
  return m;
}

}  // namespace

GgufWriteSummary write_gguf(const fs::path& in, const fs::path& out, const GgufWriteOptions& o) {
  std::error_code ec;
  if (!fs::exists(in, ec)) throw Error(ErrorKind::Io, in.string() + ": no such file or directory");
  Source s;
  if (fs::is_directory(in, ec)) {
    s = convert::read_hf(in);
  } else {
    if (o.converter) {
      throw Error(ErrorKind::Argument, in.string() +
                                           ": convert takes a Hugging Face model directory (config.json + "
                                           "model.safetensors); use quantize for a GGUF file");
    }
    if (!fs::is_regular_file(in, ec))
      throw Error(ErrorKind::Io, in.string() + ": not a regular file or a directory");
    s = convert::read_gguf_source(in);
  }
  check_output(out, s);

  GgufPreset preset = o.preset;
  if (preset == GgufPreset::Auto) preset = s.auto_type == GgmlType::BF16 ? GgufPreset::BF16 : GgufPreset::F16;
  const GgufPresetInfo& info = preset_info(preset);
  if (o.converter && o.overrides.any()) {
    throw Error(ErrorKind::Argument, "convert takes no type overrides (quantize does)");
  }
  if (o.converter && is_quantized(info.default_type)) {
    throw Error(ErrorKind::Argument,
                std::string("convert writes f32, f16 or bf16, not ") + info.name + " (use quantize)");
  }

  // The order and types of the output's tensors.
  std::vector<size_t> order(s.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (!o.converter) {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return llama_tensor_less(s.tensors[a].name, s.tensors[b].name);
    });
  }
  std::vector<TypeChoice> choices;
  if (o.converter) {
    // conversion/base.py prepare_tensors: 1-D tensors, norms, position_embd and anything not ending in
    // .weight stay F32; the rest take --outtype.
    for (size_t i : order) {
      const SourceTensor& t = s.tensors[i];
      const bool keep = t.ne.size() <= 1 || ends_with(t.name, "_norm.weight") ||
                        t.name == "position_embd.weight" || !ends_with(t.name, ".weight");
      choices.push_back({keep ? GgmlType::F32 : info.default_type, ""});
    }
  } else {
    std::vector<TensorSpec> specs;
    for (size_t i : order) specs.push_back({s.tensors[i].name, s.tensors[i].ne, s.tensors[i].type});
    choices = choose_types(preset, specs, quant_model(s), o.overrides);
  }
  GgufWriteSummary sum;
  sum.preset = preset;
  for (size_t k = 0; k < order.size(); ++k) {
    const SourceTensor& t = s.tensors[order[k]];
    const GgmlType to = choices[k].type;
    if (to == t.type) continue;
    if (is_quantized(t.type) && !o.allow_requantize) {
      throw Error(ErrorKind::Argument, s.where + ": tensor '" + t.name + "' is already " + type_name(t.type) +
                                           "; requantizing it to " + type_name(to) +
                                           " loses precision twice (allow_requantize does it anyway, as "
                                           "llama-quantize's --allow-requantize)");
    }
    if (!can_dequantize(t.type)) {
      throw Error(ErrorKind::Unsupported, s.where + ": tensor '" + t.name + "' is " + type_name(t.type) +
                                              ", which minigpt cannot read back to requantize");
    }
    if (!can_quantize(to)) {
      throw Error(ErrorKind::Unsupported,
                  std::string("minigpt cannot write ") + type_name(to) + " (tensor '" + t.name + "')");
    }
    if (t.ne[0] % block_size(to) != 0) {
      // Only a type named by --token-embedding-type / --output-tensor-type gets here (the preset's own
      // choices fall back); llama-quantize goes on and corrupts its heap.
      throw Error(ErrorKind::Argument, s.where + ": tensor '" + t.name + "' has rows of " +
                                           std::to_string(t.ne[0]) + " values, not a multiple of " +
                                           std::to_string(block_size(to)) + " (" + type_name(to) +
                                           "'s block): it cannot be " + type_name(to));
    }
  }

  // Everything checked: the notes, then the tensors as they are written.
  for (size_t k = 0; k < order.size(); ++k) {
    if (choices[k].fallback.empty()) continue;
    ++sum.n_fallback;
    if (o.log) o.log(s.tensors[order[k]].name + ": " + choices[k].fallback);
  }

  GgufWriter w;
  convert::Kv kv = s.metadata;
  if (s.gguf) {
    // llama-quantize: every key of the input, the quantization version and file type set, split keys gone.
    std::erase_if(kv, [](const auto& e) {
      return e.first == "split.no" || e.first == "split.count" || e.first == "split.tensors.count";
    });
  }
  if (o.converter) {
    // The converter's own keys in place (general.file_type only where the family writes one: write_gguf).
    set_kv(kv, "general.quantization_version", gguf_u32(2));
    set_kv(kv, "general.file_type", gguf_u32(info.file_type), /*only_if_present=*/true);
  } else {
    // llama-quantize (gguf_set_val_u32: the key removed, then appended): these two last, in this order.
    std::erase_if(kv, [](const auto& e) {
      return e.first == "general.quantization_version" || e.first == "general.file_type";
    });
    kv.emplace_back("general.quantization_version", gguf_u32(2));
    kv.emplace_back("general.file_type", gguf_u32(info.file_type));
  }
  for (auto& [key, v] : kv) w.set(key, std::move(v));

  const int threads = o.threads > 0 ? o.threads : cpu_count();
  const size_t n = order.size();
  for (size_t k = 0; k < n; ++k) {
    const SourceTensor* t = &s.tensors[order[k]];
    const GgmlType to = choices[k].type;
    sum.n_tensors += 1;
    sum.n_elements += t->numel();
    sum.bytes_in += t->stored_bytes;
    sum.bytes_out += quantized_size(to, t->numel());
    auto log = o.log;
    // (built by appending: GCC 12's -Wrestrict misreads "[" + std::string&& once inlined here)
    std::string line = "[";
    line += std::to_string(k + 1) + "/" + std::to_string(n) + "] " + t->name + " " + shape_str(t->ne) + " " +
            t->stored_type + " -> " + type_name(to);
    w.add_tensor(t->name, to, t->ne, [t, to, threads, log, line](uint8_t* dst) {
      if (log) log(line);
      if (t->raw && to == t->type) {
        t->raw(dst);
        return;
      }
      std::vector<float> values(size_t(t->numel()));
      t->f32(values.data());
      const int64_t cols = t->ne[0];
      quantize_rows(to, values.data(), dst, t->numel() / cols, cols, threads);
    });
  }
  sum.file_bytes = w.write(out);
  return sum;
}

}  // namespace minigpt
