// minigpt quantize IN OUT.gguf --type T: a Hugging Face directory (GPT-2, GPT-NeoX, gpt_bigcode) or a GGUF
// file to a GGUF file with llama-quantize's tensor types for preset T; minigpt convert HF_DIR OUT.gguf:
// convert_hf_to_gguf.py's output (f32, f16 or bf16). Both write through src/convert/gguf_convert.h.
#include <cctype>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "common.h"
#include "convert/gguf_convert.h"
#include "io/io.h"
#include "minigpt/error.h"
#include "quant/quantize.h"

namespace minigpt::cli {
namespace {

struct QuantizeOptions {
  std::string in, out, type;
  bool allow_requantize = false;
  std::string output_tensor_type, token_embedding_type;
  std::vector<std::string> tensor_types;
  bool pure = false, leave_output_tensor = false;
  int threads = 0;
};

// A --output-tensor-type / --token-embedding-type value: a ggml type minigpt writes.
GgmlType writable_type(const std::string& flag, const std::string& name) {
  static const char kWritable[] =
      "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k";
  const auto t = parse_ggml_type(name);
  if (!t) throw UsageError(flag + " '" + name + "' is not a ggml type (" + kWritable + ")");
  if (!can_quantize(*t)) {
    throw Error(ErrorKind::Unsupported, flag + " '" + name + "': minigpt does not write " +
                                            std::string(ggml_type_info(uint32_t(*t))->name) + " (" +
                                            kWritable + ")");
  }
  return *t;
}

void log_line(const std::string& s) {
  std::fprintf(stderr, "%s\n", s.c_str());
  std::fflush(stderr);
}

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / (1024.0 * 1024.0));
  return buf;
}

void print_summary(const GgufWriteSummary& s, const std::string& out) {
  const double n = double(std::max<int64_t>(1, s.n_elements));
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "%s: %s, %lld tensors, %lld values: tensor data %s (%.2f bits per weight) -> %s (%.2f bits per "
      "weight); file %s%s",
      out.c_str(), preset_info(s.preset).name, (long long)s.n_tensors, (long long)s.n_elements,
      mib(s.bytes_in).c_str(), double(s.bytes_in) * 8 / n, mib(s.bytes_out).c_str(),
      double(s.bytes_out) * 8 / n, mib(s.file_bytes).c_str(),
      s.n_fallback ? (", " + std::to_string(s.n_fallback) + " tensor(s) fell back").c_str() : "");
  log_line(buf);
}

bool registered_quantize = register_command(
    "quantize",
    "Write a GGUF file quantized as llama-quantize would (from a Hugging Face directory or a GGUF file)",
    [](CLI::App& app) -> std::function<int()> {
      auto o = std::make_shared<QuantizeOptions>();
      app.add_option("input", o->in,
                     "Hugging Face directory (config.json + safetensors; the families the converter writes "
                     "are listed in docs/convert.md) or GGUF file")
          ->required();
      app.add_option("output", o->out, "The GGUF file to write")->required();
      app.add_option("--type", o->type, "Preset: " + preset_names())->required();
      app.add_flag(
          "--allow-requantize", o->allow_requantize,
          "Requantize tensors that are already quantized (dequantized first; precision is lost twice)");
      app.add_option("--output-tensor-type", o->output_tensor_type,
                     "ggml type for output.weight, and for a tied token_embd.weight (llama-quantize's flag)");
      app.add_option("--token-embedding-type", o->token_embedding_type,
                     "ggml type for token_embd.weight, tied or not (llama-quantize's flag)");
      app.add_option("--tensor-type", o->tensor_types,
                     "NAME=TYPE: tensors whose name contains NAME (a regular expression) get TYPE; the first "
                     "match wins; may be repeated (llama-quantize's flag)");
      app.add_flag("--pure", o->pure,
                   "No mixtures: every quantized tensor at the preset's type (llama-quantize's flag)");
      app.add_flag("--leave-output-tensor", o->leave_output_tensor,
                   "Keep output.weight's type (llama-quantize's flag; a tied head has no output.weight)");
      app.add_option("-t,--threads", o->threads, kThreadsHelp)->check(in_range(0, 1024));
      return [o]() {
        const auto preset = parse_preset(o->type);
        if (!preset) {
          throw UsageError("--type '" + o->type + "' is not a preset (" + preset_names() + ")");
        }
        GgufWriteOptions w;
        w.preset = *preset;
        w.allow_requantize = o->allow_requantize;
        if (!o->output_tensor_type.empty()) {
          w.overrides.output_tensor_type = writable_type("--output-tensor-type", o->output_tensor_type);
        }
        if (!o->token_embedding_type.empty()) {
          w.overrides.token_embedding_type = writable_type("--token-embedding-type", o->token_embedding_type);
        }
        for (const std::string& arg : o->tensor_types) {
          const size_t eq = arg.find('=');
          if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
            throw UsageError("--tensor-type '" + arg + "' is not NAME=TYPE (e.g. attn_qkv=q8_0)");
          }
          std::string name = arg.substr(0, eq);
          for (char& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));  // as llama-quantize
          w.overrides.tensor_types.emplace_back(name,
                                                writable_type("--tensor-type " + name, arg.substr(eq + 1)));
        }
        w.overrides.pure = o->pure;
        w.overrides.leave_output_tensor = o->leave_output_tensor;
        w.threads = o->threads;
        w.log = log_line;
        print_summary(write_gguf(o->in, o->out, w), o->out);
        return 0;
      };
    });

bool registered_convert = register_command(
    "convert",
    "Write a Hugging Face directory as GGUF, as llama.cpp's convert_hf_to_gguf.py does (f32, f16 or bf16)",
    [](CLI::App& app) -> std::function<int()> {
      auto o = std::make_shared<QuantizeOptions>();
      o->type = "auto";
      app.add_option("input", o->in,
                     "Hugging Face directory (config.json + safetensors; the families the converter writes "
                     "are listed "
                     "in docs/convert.md)")
          ->required();
      app.add_option("output", o->out, "The GGUF file to write")->required();
      app.add_option(
          "--outtype", o->type,
          "f32, f16, bf16, or auto (the default, as the converter's: the checkpoint's 16-bit type, F16 "
          "for an F32 one)");
      app.add_option("-t,--threads", o->threads, kThreadsHelp)->check(in_range(0, 1024));
      return [o]() {
        GgufWriteOptions w;
        w.converter = true;
        const auto preset = parse_preset(o->type);
        if (o->type == "auto") {
          w.preset = GgufPreset::Auto;
        } else if (preset == GgufPreset::F32 || preset == GgufPreset::F16 || preset == GgufPreset::BF16) {
          w.preset = *preset;
        } else {
          throw UsageError("--outtype '" + o->type +
                           "' is not one of f32, f16, bf16, auto (quantize writes the others)");
        }
        w.threads = o->threads;
        w.log = log_line;
        print_summary(write_gguf(o->in, o->out, w), o->out);
        return 0;
      };
    });

}  // namespace
}  // namespace minigpt::cli
