// `generate --prompt-cache FILE`: a second run whose prompt begins with the first's evaluates only the rest
// and gives the tokens a run without the file gives; a file of another model, a truncated or a corrupt one
// is refused in one line, and left as it was.
#include <nlohmann/json.hpp>

#include "io/io.h"
#include "minigpt/error.h"
#include "minigpt/tokenizer.h"
#include "model/random_weights.h"
#include "run/prompt_file.h"
#include "test_util.h"

namespace minigpt {
namespace {

using json = nlohmann::json;

std::string shipped() { return (test::source_dir() / "models" / "shakespeare-char").string(); }

struct CliRun {
  int status = 0;
  std::vector<int32_t> ids;
  json summary;
  std::string err;
};

CliRun generate_json(const std::string& model, const std::string& prompt, const std::string& extra) {
  const auto r =
      test::run_cli("generate -m " + model + " -p '" + prompt + "' --temperature 0 -n 16 --json " + extra);
  CliRun out{r.status, {}, {}, r.err};
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (j.contains("summary")) {
      out.summary = j["summary"];
    } else {
      out.ids.push_back(j["id"].get<int32_t>());
    }
  }
  return out;
}

const std::string kP = "ROMEO:\nBut soft, what light through yonder window breaks?\nIt is the east, and ";
const std::string kMore = "Juliet is the sun.\nArise, fair sun";

TEST(PromptCacheFile, ASecondRunEvaluatesOnlyTheNewSuffixAndGivesTheSameTokens) {
  test::TempDir tmp;
  const std::string file = (tmp / "p.cache").string();
  const Tokenizer tok = Tokenizer::load(shipped());
  const int64_t n1 = int64_t(tok.encode(kP).size()), n2 = int64_t(tok.encode(kP + kMore).size());

  const CliRun first = generate_json(shipped(), kP, "--prompt-cache " + file);
  ASSERT_EQ(first.status, 0) << first.err;
  EXPECT_EQ(first.summary["prompt_tokens_restored"], 0);
  ASSERT_TRUE(std::filesystem::exists(file));
  EXPECT_EQ(first.ids, generate_json(shipped(), kP, "").ids);

  const CliRun second = generate_json(shipped(), kP + kMore, "--prompt-cache " + file);
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_EQ(second.summary["prompt_tokens_restored"], n1);
  EXPECT_NE(
      second.err.find(std::to_string(n1) + " of the prompt's " + std::to_string(n2) + " tokens restored"),
      std::string::npos)
      << second.err;
  const CliRun plain = generate_json(shipped(), kP + kMore, "");
  EXPECT_EQ(plain.summary["prompt_tokens_restored"], 0);
  EXPECT_EQ(second.ids, plain.ids);

  // The file now holds the longer prompt; the same prompt again restores all but its last token, and
  // --prompt-cache-ro leaves the file as it is.
  const std::string before = test::read_file(file);
  const CliRun shorter = generate_json(shipped(), kP, "--prompt-cache " + file + " --prompt-cache-ro");
  ASSERT_EQ(shorter.status, 0) << shorter.err;
  EXPECT_EQ(shorter.summary["prompt_tokens_restored"], n1 - 1);
  EXPECT_EQ(shorter.ids, first.ids);
  EXPECT_EQ(test::read_file(file), before);
}

TEST(PromptCacheFile, AnotherModelsFileIsRefusedNamingBoth) {
  test::TempDir tmp;
  const std::string file = (tmp / "p.cache").string();
  ASSERT_EQ(generate_json(shipped(), kP, "--prompt-cache " + file).status, 0);
  const std::string before = test::read_file(file);
  Config c = test::tiny_config();
  c.n_vocab = 256;
  c.n_ctx = 128;
  const auto other = tmp / "other";
  write_random_model(other, c);
  for (const char* f : {"vocab.json", "merges.txt"}) {
    std::filesystem::copy_file(test::source_dir() / "tests" / "fixtures" / "tokenizer" / "bytelevel" / f,
                               other / f);
  }
  const CliRun r = generate_json(other.string(), "ROMEO:", "--prompt-cache " + file);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("made for shakespeare-char (gpt2, 4 layers"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not for other (gpt2, 2 layers"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.ids.empty());
  EXPECT_EQ(test::read_file(file), before);
}

TEST(PromptCacheFile, ATruncatedOrCorruptFileIsRefused) {
  test::TempDir tmp;
  const std::string file = (tmp / "p.cache").string();
  ASSERT_EQ(generate_json(shipped(), kP, "--prompt-cache " + file).status, 0);
  const std::string whole = test::read_file(file);
  struct Case {
    std::string bytes, says;
  };
  std::string flipped = whole;
  flipped[flipped.size() - 100] ^= 0x10;  // a value of the keys and values
  for (const Case& c :
       std::vector<Case>{{whole.substr(0, whole.size() - 1), "truncated"},
                         {whole.substr(0, 40), "shorter than its 64-byte header"},
                         {whole + "x", "trailing bytes"},
                         {flipped, "checksum does not match"},
                         {"not a cache file at all, but long enough for a header of 64 bytes...",
                          "does not begin with MGPTPCF1"}}) {
    test::write_file(file, c.bytes);
    const CliRun r = generate_json(shipped(), kP + kMore, "--prompt-cache " + file);
    EXPECT_NE(r.status, 0) << c.says;
    EXPECT_NE(r.err.find(file + ": not a usable prompt cache file: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_TRUE(r.ids.empty()) << c.says;
    EXPECT_EQ(test::read_file(file), c.bytes) << c.says;
  }
}

// The reader on bytes in memory (what fuzz_prompt_file runs): every field checked before it is used.
TEST(PromptCacheFile, TheReaderChecksEveryField) {
  PromptFileModel m;
  m.identity = 42;
  m.name = "m";
  m.position_bytes = 8;
  m.n_vocab = 10;
  test::TempDir tmp;
  const auto path = tmp / "f";
  const std::vector<int32_t> tokens = {1, 2, 3};
  std::vector<char> kv(24);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = char(i);
  write_prompt_file(path, m, tokens, kv);
  const std::string bytes = test::read_file(path);
  auto parse = [](const std::string& b, int64_t n) {
    const ByteSource src = ByteSource::in_memory(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "mem");
    const PromptFileHeader h = read_prompt_file_header(src);
    return read_prompt_file_body(src, h, n);
  };
  const PromptFileBody body = parse(bytes, 2);
  EXPECT_EQ(body.tokens, std::vector<int32_t>({1, 2}));
  EXPECT_EQ(body.kv, std::vector<char>(kv.begin(), kv.begin() + 16));
  std::string out_of_vocab = bytes;
  out_of_vocab[kPromptFileHeaderBytes + 1] = 10;  // the first token (after the 1-byte name): 10 >= n_vocab
  test::expect_error([&] { parse(out_of_vocab, 3); }, ErrorKind::Format, {"mem", "token 0 is 10"});
  std::string huge = bytes;
  huge[40 + 7] = 1;  // n_tokens 2^56 + 3
  test::expect_error([&] { parse(huge, 3); }, ErrorKind::Format, {"mem", "n_tokens"});
  PromptFileHeader h;
  h.model = m;
  PromptFileModel other = m;
  other.identity = 43;
  other.name = "n";
  test::expect_error([&] { check_prompt_file_model(h, other, "f"); }, ErrorKind::Argument,
                     {"f: the prompt cache was made for m, not for n"});
}

// The fuzz target's seeds (tools/make_fuzz_corpus.py writes the layout and checksum again, in Python) are
// files the reader takes whole.
TEST(PromptCacheFile, TheFuzzSeedsAreValidFiles) {
  const auto dir = test::source_dir() / "tests" / "fuzz" / "corpus" / "fuzz_prompt_file";
  int seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string b = test::read_file(e.path());
    const ByteSource src =
        ByteSource::in_memory(reinterpret_cast<const uint8_t*>(b.data()), b.size(), e.path().string());
    const PromptFileHeader h = read_prompt_file_header(src);
    const PromptFileBody body = read_prompt_file_body(src, h, h.n_tokens);
    EXPECT_EQ(h.model.identity, 42u);
    EXPECT_EQ(h.model.name, "m (gpt2)");
    EXPECT_EQ(body.kv.size(), body.tokens.size() * h.model.position_bytes);
    ++seen;
  }
  EXPECT_EQ(seen, 3);
}

}  // namespace
}  // namespace minigpt
