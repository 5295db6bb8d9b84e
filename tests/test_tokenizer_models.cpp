// SentencePiece BPE (tokenizer.model, llama2.c's tokenizer.bin, tokenizer.json with Prepend / Replace or
// Metaspace and byte_fallback), Llama 3's and Qwen2's byte-level BPE (Split pre-tokenizers, ignore_merges,
// NFC), and llama.cpp's GPT-NeoX vocabulary, against the ids and texts of sentencepiece, llama2.c's own
// encode() and Hugging Face tokenizers (tools/reference/make_spm_llama3_qwen2_tokenizers.py): equal, no
// tolerance.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "minigpt/error.h"
#include "minigpt/tokenizer.h"
#include "tokenizer_test_util.h"

using minigpt::StreamDecoder;
using minigpt::Tokenizer;
using namespace minigpt::test;

namespace {

const std::filesystem::path kSpmDir = kFixtures / "spm";

std::string models_ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (auto id : ids) s += std::to_string(id) + " ";
  return s;
}

// The text of a golden.json "unicode" block, as the script builds it: for each code point c (surrogates
// skipped), "a" c "1" c "!" c " " c "'" c "\n".
std::string models_block_text(uint32_t lo, uint32_t hi) {
  std::string text;
  for (uint32_t cp = lo; cp < hi; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string c = encode_cp(cp);
    text += "a" + c + "1" + c + "!" + c + " " + c + "'" + c + "\n";
  }
  return text;
}

// Every corpus case: `key` ids (and `decoded_key`'s text, when given) from the tokenizer.
void expect_cases(const Tokenizer& t, const nlohmann::json& cases, const std::string& key,
                  const std::string& decoded_key) {
  size_t compared = 0;
  for (const auto& c : cases) {
    if (!c.contains(key) || c[key].is_null()) continue;
    ++compared;
    const std::string text = c["text"];
    SCOPED_TRACE(c["name"].get<std::string>() + " (" + key + ")");
    const auto ids = t.encode(text);
    EXPECT_EQ(ids, c[key].get<std::vector<int32_t>>()) << models_ids_text(ids);
    if (!decoded_key.empty()) {
      EXPECT_EQ(t.decode(ids), c[decoded_key].get<std::string>());
    }
  }
  EXPECT_GT(compared, 400u) << key;
}

// Every Unicode scalar, in the blocks of the golden file: the ids' count and hash, and their decoding's hash.
void expect_unicode(const Tokenizer& t, const nlohmann::json& blocks) {
  for (const auto& b : blocks) {
    const uint32_t lo = b["lo"], hi = b["hi"];
    const std::string text = models_block_text(lo, hi);
    const auto ids = t.encode(text);
    EXPECT_EQ(ids.size(), b["n_ids"].get<size_t>()) << "block U+" << std::hex << lo;
    EXPECT_EQ(fnv1a64(ids), b["ids_fnv1a64"].get<std::string>()) << "block U+" << std::hex << lo;
    EXPECT_EQ(fnv1a64_hex(t.decode(ids)), b["decoded_fnv1a64"].get<std::string>())
        << "block U+" << std::hex << lo;
  }
}

const nlohmann::json& spm_golden() {
  static const nlohmann::json j = read_json(kSpmDir / "golden.json");
  return j;
}

}  // namespace

TEST(TokenizerModels, SentencepieceModelMatchesSentencepiece) {
  const Tokenizer t = Tokenizer::load(kSpmDir / "tokenizer.model");
  EXPECT_TRUE(t.sentencepiece());
  EXPECT_EQ(t.n_vocab(), 2000);
  expect_cases(t, spm_golden()["cases"], "sentencepiece", "sentencepiece_decoded");
  expect_unicode(t, spm_golden()["unicode"]["sentencepiece"]);
}

// A directory with tokenizer.model and no tokenizer.json reads it.
TEST(TokenizerModels, DirectoryWithTokenizerModel) {
  TempDir dir;
  dir.write("tokenizer.model", read_file(kSpmDir / "tokenizer.model"));
  EXPECT_EQ(Tokenizer::load(dir.path()).encode("Hello world"),
            Tokenizer::load(kSpmDir / "tokenizer.model").encode("Hello world"));
}

// llama2.c's tokenizer.bin of the same model: sentencepiece's ids, and llama2.c's encode() (run.c) gives the
// same on every text a C string can hold.
TEST(TokenizerModels, Llama2cTokenizerBinMatchesSentencepieceAndRunC) {
  const Tokenizer t = Tokenizer::load(kSpmDir / "tokenizer.bin");
  EXPECT_TRUE(t.sentencepiece());
  EXPECT_EQ(t.n_vocab(), 2000);
  expect_cases(t, spm_golden()["cases"], "sentencepiece", "sentencepiece_decoded");
  expect_cases(t, spm_golden()["cases"], "llama2c", "");
  expect_unicode(t, spm_golden()["unicode"]["sentencepiece"]);
  EXPECT_EQ(t.decode(std::vector<int32_t>{1}), "<s>");
}

TEST(TokenizerModels, SentencepieceTokenizerJsonLegacyMatchesTokenizers) {
  const Tokenizer t = Tokenizer::load(kSpmDir / "legacy");
  EXPECT_TRUE(t.sentencepiece());
  expect_cases(t, spm_golden()["cases"], "legacy", "legacy_decoded");
  expect_unicode(t, spm_golden()["unicode"]["legacy"]);
}

TEST(TokenizerModels, SentencepieceTokenizerJsonMetaspaceMatchesTokenizers) {
  const Tokenizer t = Tokenizer::load(kSpmDir / "metaspace");
  EXPECT_TRUE(t.sentencepiece());
  expect_cases(t, spm_golden()["cases"], "metaspace", "metaspace_decoded");
  expect_unicode(t, spm_golden()["unicode"]["metaspace"]);
}

TEST(TokenizerModels, Llama3MatchesTokenizers) {
  const Tokenizer t = Tokenizer::load(kFixtures / "llama3");
  EXPECT_FALSE(t.gpt2_split());
  const auto golden = read_json(kFixtures / "llama3" / "golden.json");
  expect_cases(t, golden["cases"], "ids", "decoded");
  expect_unicode(t, golden["unicode"]);
}

TEST(TokenizerModels, Qwen2MatchesTokenizers) {
  const Tokenizer t = Tokenizer::load(kFixtures / "qwen2");
  EXPECT_TRUE(t.has_normalizer());
  const auto golden = read_json(kFixtures / "qwen2" / "golden.json");
  expect_cases(t, golden["cases"], "ids", "decoded");
  expect_unicode(t, golden["unicode"]);
}

// llama.cpp's GPT-NeoX vocabulary lacks the symbols of bytes 0xC0, 0xC1 and 0xF5..0xFF, which valid UTF-8
// never needs: it loads, and gives tokenizers' ids over the same tokens and merges on the corpus.
TEST(TokenizerModels, GptNeoxVocabularyOfLlamaCppMatchesTokenizers) {
  const Tokenizer t = Tokenizer::load(kFixtureRoot / "ggml-vocab" / "ggml-vocab-gpt-neox.gguf");
  const auto golden = read_json(kFixtureRoot / "ggml-vocab" / "gpt-neox.corpus.json");
  expect_cases(t, golden["cases"], "ids", "decoded");
}

// Streaming each tokenizer's ids one by one gives decode()'s text (from the start of a text: the dummy prefix
// dropped), and every piece it emits is whole UTF-8.
TEST(TokenizerModels, StreamDecodingNeverSplitsACharacter) {
  for (const auto& path : {kSpmDir / "tokenizer.model", kSpmDir / "tokenizer.bin", kSpmDir / "legacy",
                           kFixtures / "llama3", kFixtures / "qwen2"}) {
    const Tokenizer t = Tokenizer::load(path);
    size_t split_seen = 0;
    for (const auto& c : spm_golden()["cases"]) {
      const std::string text = c["text"];
      const auto ids = t.encode(text);
      StreamDecoder dec(t, /*text_start=*/true);
      std::string streamed;
      for (int32_t id : ids) {
        const std::string piece = dec.push(id);
        EXPECT_EQ(minigpt::utf8_sanitize(piece), piece) << path;
        if (piece.empty()) ++split_seen;
        streamed += piece;
      }
      streamed += dec.flush();
      EXPECT_EQ(streamed, t.decode(ids)) << path << " " << c["name"];
    }
    EXPECT_GT(split_seen, 0u) << path << ": no character was split across tokens";
  }
}

// A reply streamed after its prompt keeps its leading space: only the start of a text has the dummy prefix.
TEST(TokenizerModels, StreamDecodingKeepsAContinuationsSpace) {
  const Tokenizer t = Tokenizer::load(kSpmDir / "tokenizer.model");
  const auto ids = t.encode("Hello world");
  ASSERT_GE(ids.size(), 2u);
  StreamDecoder dec(t);
  std::string s;
  for (int32_t id : ids) s += dec.push(id);
  EXPECT_EQ(s, " Hello world");
  EXPECT_EQ(t.decode(ids), "Hello world");
}

// A cut or malformed tokenizer.bin / tokenizer.model is refused in one line naming the file.
TEST(TokenizerModels, BadSentencepieceFilesAreRefused) {
  const std::string bin = read_file(kSpmDir / "tokenizer.bin");
  TempDir dir;
  dir.write("cut.bin", bin.substr(0, bin.size() - 3));
  expect_error([&] { Tokenizer::load(dir / "cut.bin"); }, minigpt::ErrorKind::Format,
               {"cut.bin", "not a llama2.c tokenizer.bin", "truncated?"});
  const std::string model = read_file(kSpmDir / "tokenizer.model");
  dir.write("cut.model", model.substr(0, model.size() / 2));
  expect_error([&] { Tokenizer::load(dir / "cut.model"); }, minigpt::ErrorKind::Format,
               {"cut.model", "not a sentencepiece model"});
  dir.write("junk.model",
            std::string("\x0A\x07\x0A\x05hello\x12\x02\x18\x01", 13));  // a piece, a UNIGRAM trainer_spec
  expect_error([&] { Tokenizer::load(dir / "junk.model"); }, minigpt::ErrorKind::Unsupported,
               {"junk.model", "model type UNIGRAM is not supported"});
}

// The beginning and end of text a file names: sentencepiece's <s> / </s>, a GGUF file's ids.
TEST(TokenizerModels, BosAndEosAreTheFiles) {
  for (const auto& path : {kSpmDir / "tokenizer.model", kSpmDir / "tokenizer.bin",
                           kFixtureRoot / "ggml-vocab" / "ggml-vocab-llama-spm.gguf"}) {
    const Tokenizer t = Tokenizer::load(path);
    EXPECT_EQ(t.bos_id(), 1) << path;
    EXPECT_EQ(t.eos_id(), 2) << path;
  }
  const Tokenizer llama3 = Tokenizer::load(kFixtureRoot / "ggml-vocab" / "ggml-vocab-llama-bpe.gguf");
  EXPECT_EQ(llama3.bos_id(), 128000);
  EXPECT_EQ(llama3.eos_id(), 128001);
}
