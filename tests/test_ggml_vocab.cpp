// llama.cpp's vocabulary-only GGUF files of real models' tokenizers, with its own test vectors
// (models/ggml-vocab-NAME.gguf, .gguf.inp, .gguf.out; copied into tests/fixtures/ggml-vocab/ under
// llama.cpp's MIT licence). The .out ids come from each model's Hugging Face tokenizer
// (convert_hf_to_gguf_update.py), and llama.cpp's tests/test-tokenizer-0.cpp checks its own tokenizer against
// them with add_special = false and parse_special = false: minigpt's encode(text) (allow_special = false)
// must give them exactly.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "minigpt/error.h"
#include "minigpt/tokenizer.h"
#include "test_util.h"

namespace fs = std::filesystem;
using minigpt::Tokenizer;

namespace {

struct GgmlVocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// As test-tokenizer-0.cpp reads them: the texts separated by "\n__ggml_vocab_test__\n", one line of ids per
// text (space-separated, stripped).
std::vector<GgmlVocabCase> read_ggml_vocab_cases(const fs::path& gguf) {
  const std::string inp = minigpt::test::read_file(gguf.string() + ".inp");
  const std::string out = minigpt::test::read_file(gguf.string() + ".out");
  std::vector<std::string> texts;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<GgmlVocabCase> cases;
  std::istringstream lines(out);
  std::string line;
  for (size_t i = 0; std::getline(lines, line); ++i) {
    GgmlVocabCase c;
    if (i < texts.size()) c.text = texts[i];
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), texts.size()) << gguf << ": .inp and .out hold different numbers of tests";
  return cases;
}

std::string ggml_ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

// Every text of one vocabulary: the ids, and decode() giving the text back where the reference decodes
// losslessly (byte-level BPE always; SentencePiece drops the dummy prefix's space, which a text's own leading
// space shares, so only texts that do not start with a space are compared).
void expect_llama_cpp_ids(const fs::path& gguf) {
  const Tokenizer t = Tokenizer::load(gguf);
  size_t failed = 0;
  for (const GgmlVocabCase& c : read_ggml_vocab_cases(gguf)) {
    std::vector<int32_t> ids;
    try {
      ids = t.encode(c.text);
    } catch (const minigpt::Error& e) {
      ADD_FAILURE() << gguf.filename() << ": " << e.what() << " on \"" << c.text << "\"";
      continue;
    }
    if (ids != c.ids) {
      ++failed;
      ADD_FAILURE() << gguf.filename() << ": \"" << c.text << "\"\n  llama.cpp " << ggml_ids_text(c.ids)
                    << "\n  minigpt   " << ggml_ids_text(ids);
      continue;
    }
    if (!t.sentencepiece() || (!c.text.empty() && c.text[0] != ' ')) {
      EXPECT_EQ(t.decode(ids), c.text) << gguf.filename();
    }
  }
  EXPECT_EQ(failed, 0u) << gguf.filename();
}

const fs::path& ggml_vocab_dir() {
  static const fs::path d = minigpt::test::source_dir() / "tests" / "fixtures" / "ggml-vocab";
  return d;
}

// The vocabularies of llama.cpp's models/ that minigpt refuses, each with the line it says why (matched as a
// substring of the error).
const std::map<std::string, std::string>& refused_vocabularies() {
  static const std::map<std::string, std::string> m = {
      {"ggml-vocab-bert-bge.gguf", "tokenizer.ggml.model 'bert' is not supported"},
      {"ggml-vocab-gemma-4.gguf", "tokenizer.ggml.model 'gemma4' is not supported"},
      {"ggml-vocab-nomic-bert-moe.gguf", "tokenizer.ggml.model 't5' is not supported"},
  };
  return m;
}

}  // namespace

class GgmlVocab : public testing::TestWithParam<std::string> {};

TEST_P(GgmlVocab, GivesLlamaCppIds) {
  expect_llama_cpp_ids(ggml_vocab_dir() / ("ggml-vocab-" + GetParam() + ".gguf"));
}

INSTANTIATE_TEST_SUITE_P(LlamaCppVectors, GgmlVocab,
                         testing::Values("deepseek-coder", "deepseek-llm", "falcon", "gpt-2", "llama-bpe",
                                         "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact",
                                         "starcoder"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// Every vocabulary of llama.cpp's models/ folder where it is at hand (MINIGPT_LLAMA_CPP_MODELS, or the copy
// bench/peer.sh unpacks), those over the fixtures' size limit (command-r, 10.9 MB) included: each with
// vectors gives llama.cpp's ids or is refused with its one line; each without vectors loads or is refused so.
TEST(GgmlVocab, EveryVocabularyOfLlamaCpp) {
  const char* env = std::getenv("MINIGPT_LLAMA_CPP_MODELS");
  const char* home = std::getenv("HOME");
  const fs::path dir =
      env ? fs::path(env) : fs::path(home ? home : "/nonexistent") / ".cache/minigpt-peer/llama.cpp/models";
  if (!fs::is_directory(dir)) GTEST_SKIP() << dir << " is not here (set MINIGPT_LLAMA_CPP_MODELS)";
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("ggml-vocab-") || !name.ends_with(".gguf")) continue;
    ++n;
    SCOPED_TRACE(name);
    if (const auto r = refused_vocabularies().find(name); r != refused_vocabularies().end()) {
      minigpt::test::expect_error([&] { Tokenizer::load(e.path()); }, minigpt::ErrorKind::Unsupported,
                                  {r->second});
      continue;
    }
    if (fs::exists(e.path().string() + ".out")) {
      expect_llama_cpp_ids(e.path());
    } else {
      EXPECT_NO_THROW(Tokenizer::load(e.path()));
    }
  }
  EXPECT_GE(n, 19u);  // the 19 of llama_cpp_python 0.3.36
}

// falcon's vocabulary lacks the symbols of some control characters (0x03, ...) and StarCoder's those of 0xF1
// (planes 4 to 7): they load, and a text that needs such a byte is refused naming it (tokenizers drops it).
TEST(GgmlVocab, AByteTheVocabularyLacksIsRefusedWhenNeeded) {
  const Tokenizer falcon = Tokenizer::load(ggml_vocab_dir() / "ggml-vocab-falcon.gguf");
  EXPECT_FALSE(falcon.encode("abc\n").empty());
  minigpt::test::expect_error(
      [&] {
        falcon.encode(
            "a\x03"
            "b");
      },
      minigpt::ErrorKind::Argument, {"needs byte 0x03"});
  const Tokenizer starcoder = Tokenizer::load(ggml_vocab_dir() / "ggml-vocab-starcoder.gguf");
  minigpt::test::expect_error([&] { starcoder.encode("x\xF1\x80\x80\x80"); }, minigpt::ErrorKind::Argument,
                              {"needs byte 0xF1"});
}
