#include "tokenizer/tokenizer_pre.h"

namespace minigpt::tokenizer_detail {
namespace {

constexpr std::string_view kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen35 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Not formatted: clang-format splits these lines of multi-byte characters anew on every run.
// clang-format off
// DeepSeek's letters, CJK and punctuation classes, as its tokenizer.json spells them.
constexpr std::string_view kDeepseekLetters =
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-"
    "ἕἘ-"
    "Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-"
    "ꞎꭰ-"
    "ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";
// clang-format on
constexpr std::string_view kDeepseekPunct = "\\s?[!-/:-~！-／：-～‘-‟　-。]+";
constexpr std::string_view kDeepseekCjk = "[一-龥ࠀ-一가-퟿]+";
// tokenizers' Punctuation (Rust's is_ascii_punctuation || is_punctuation), contiguous.
constexpr std::string_view kPunctuationRun = "[\\p{P}!-/:-@\\[-`{-~]+";

const std::vector<TokenizerPre>& table() {
  // names, splits, byte splits, NFC, ignore_merges
  static const std::vector<TokenizerPre> t = {
      {{"gpt-2", "default", "phi-2", "olmo", "jais", "jina-es", "jina-de", "gigachat", "jina-v2-es",
        "jina-v2-de", "mellum", "exaone4"},
       {kGpt2Split},
       {},
       false,
       false},
      {{"mpt"}, {kGpt2Split}, {}, true, false},
      {{"starcoder", "refact", "smollm", "codeshell", "exaone", "minerva-7b"},
       {"\\p{N}", kGpt2Split},
       {},
       false,
       false},
      {{"command-r"}, {"\\p{N}", kGpt2Split}, {}, true, false},
      {{"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "dbrx", "smaug-bpe"},
       {kLlama3},
       {},
       false,
       true},
      {{"qwen2", "deepseek-r1-qwen", "megrez"}, {kQwen2}, {}, true, false},
      {{"qwen35"}, {kQwen35}, {}, false, false},
      {{"deepseek-llm"},
       {"[\\r\\n]", kDeepseekLetters, kDeepseekPunct, "\\s+$", kDeepseekCjk, "\\p{N}+"},
       {},
       false,
       false},
      {{"deepseek-coder"},
       {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kDeepseekCjk, "\\p{N}"},
       {},
       false,
       false},
      {{"falcon"}, {kPunctuationRun, kGpt2Split}, {"digits+", "[0-9][0-9][0-9]"}, false, false},
  };
  return t;
}

}  // namespace

const TokenizerPre* find_tokenizer_pre(std::string_view name) {
  for (const TokenizerPre& p : table())
    for (std::string_view n : p.names)
      if (n == name) return &p;
  return nullptr;
}

std::string tokenizer_pre_names() {
  std::string out;
  for (const TokenizerPre& p : table())
    for (std::string_view n : p.names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

}  // namespace minigpt::tokenizer_detail
