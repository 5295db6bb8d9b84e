// GPT-2 tokenizer against golden ids from Hugging Face tokenizers
// (tools/reference/make_tokenizer_reference.py).
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "minigpt/error.h"
#include "minigpt/tokenizer.h"
#include "tokenizer_test_util.h"

using minigpt::Error;
using minigpt::ErrorKind;
using minigpt::StreamDecoder;
using minigpt::Tokenizer;
using namespace minigpt::test;

namespace {

// Loading is ~0.1 s; share one of each kind between the tests of a process.
const Tokenizer& gpt2_json() {
  static const Tokenizer t = Tokenizer::load(kGpt2Dir);  // prefers tokenizer.json
  return t;
}

const Tokenizer& gpt2_vocab_merges() {
  static const Tokenizer t = [] {
    TempDir dir;
    dir.write("vocab.json", read_file(kGpt2Dir / "vocab.json"));
    dir.write("merges.txt", read_file(kGpt2Dir / "merges.txt"));
    return Tokenizer::load(dir.path());
  }();
  return t;
}

const nlohmann::json& corpus() {
  static const nlohmann::json j = read_json(kFixtures / "corpus.json");
  return j;
}

std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (auto id : ids) s += std::to_string(id) + " ";
  return s;
}

bool is_valid_utf8(const std::string& s) { return minigpt::utf8_sanitize(s) == s; }

}  // namespace

TEST(Tokenizer, HelloWorld) {
  EXPECT_EQ(gpt2_json().encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(gpt2_vocab_merges().encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(gpt2_json().n_vocab(), 50257);
}

// vocab.json + merges.txt with a tokenizer_config.json beside them: its added_tokens_decoder (a non-special
// "[USER]" as 50257, a special "<|sep|>" with lstrip as 50258) as transformers' AutoTokenizer reads the
// folder (tools/reference/make_tokenizer_config_reference.py). Ignoring it, "[USER]" would come out as 3
// tokens and 50257 could not be decoded.
TEST(Tokenizer, VocabMergesTakeTheAddedTokensOfTokenizerConfig) {
  minigpt::test::TempDir tmp;
  const auto gpt2 = kGpt2Dir;
  const auto fixture = minigpt::test::source_dir() / "tests" / "fixtures" / "tokenizer" / "gpt2_config";
  for (const char* f : {"vocab.json", "merges.txt"}) std::filesystem::copy_file(gpt2 / f, tmp / f);
  std::filesystem::copy_file(fixture / "tokenizer_config.json", tmp / "tokenizer_config.json");
  const Tokenizer t = Tokenizer::load(tmp.path());
  const auto golden = minigpt::test::read_json(fixture / "golden.json");
  EXPECT_EQ(t.n_vocab(), golden["n_tokens"].get<int64_t>());
  for (const auto& c : golden["cases"]) {
    const std::string text = c["text"];
    EXPECT_EQ(t.encode(text, /*allow_special=*/true), c["ids"].get<std::vector<int32_t>>()) << text;
  }
  for (const auto& c : golden["decode"])
    EXPECT_EQ(t.decode(c["ids"].get<std::vector<int32_t>>()), c["text"].get<std::string>());
  // add_prefix_space true changes every word's first token: refused, as in tokenizer.json.
  auto cfg = minigpt::test::read_json(fixture / "tokenizer_config.json");
  cfg["add_prefix_space"] = true;
  minigpt::test::write_file(tmp / "tokenizer_config.json", cfg.dump());
  minigpt::test::expect_error(
      [&] { Tokenizer::load(tmp.path()); }, ErrorKind::Unsupported,
      {(tmp / "tokenizer_config.json").string() + ": add_prefix_space true is not supported"});
}

TEST(Tokenizer, CorpusMatchesHuggingFace) {
  for (const Tokenizer* t : {&gpt2_json(), &gpt2_vocab_merges()}) {
    for (const auto& c : corpus()) {
      std::string text = c["text"];
      SCOPED_TRACE(c["name"].get<std::string>());
      auto ids = t->encode(text);
      EXPECT_EQ(ids, ids_of(c["ids"])) << ids_text(ids);
      auto ids_special = t->encode(text, /*allow_special=*/true);
      EXPECT_EQ(ids_special, ids_of(c["ids_special"])) << ids_text(ids_special);
      EXPECT_EQ(t->decode(ids), text);
      EXPECT_EQ(t->decode(ids_special), text);
    }
  }
}

TEST(Tokenizer, PreTokensMatchHuggingFace) {
  for (const auto& c : corpus()) {
    std::string text = c["text"];
    std::vector<size_t> lengths;
    for (auto piece : gpt2_json().pre_tokenize(text)) lengths.push_back(piece.size());
    EXPECT_EQ(lengths, c["pieces"].get<std::vector<size_t>>()) << c["name"];
  }
}

// Every code point's class (whitespace, letter, number, other) decides pre-token boundaries; this
// proves PCRE2's Unicode tables and the spelled-out \s agree with the reference engine.
TEST(Tokenizer, PreTokenBoundariesOverUnicode) {
  for (const auto& block : read_json(kFixtures / "codepoints.json")) {
    uint32_t lo = block["lo"], hi = block["hi"];
    std::string text;
    for (uint32_t cp = lo; cp < hi; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      std::string c = encode_cp(cp);
      text += "a" + c + "1" + c + "!" + c + " " + c + "\n";
    }
    std::vector<uint32_t> lengths;
    for (auto piece : gpt2_json().pre_tokenize(text)) lengths.push_back(static_cast<uint32_t>(piece.size()));
    EXPECT_EQ(lengths.size(), block["pieces"].get<size_t>()) << "block U+" << std::hex << lo;
    EXPECT_EQ(fnv1a64(lengths), block["fnv1a64"].get<std::string>()) << "block U+" << std::hex << lo;
  }
}

TEST(Tokenizer, TinyShakespeare) {
  auto golden = read_json(kFixtures / "tinyshakespeare.json");
  std::string text = read_file(kFixtureRoot / golden["file"].get<std::string>());
  ASSERT_EQ(text.size(), 1115394u);
  auto ids = gpt2_json().encode(text);
  ASSERT_EQ(ids.size(), 338025u);
  ASSERT_EQ(ids.size(), golden["count"].get<size_t>());
  auto head = ids_of(golden["head"]), tail = ids_of(golden["tail"]);
  EXPECT_TRUE(std::equal(head.begin(), head.end(), ids.begin()));
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), ids.end() - tail.size()));
  size_t chunk = golden["chunk"];
  for (size_t i = 0, k = 0; i < ids.size(); i += chunk, ++k) {
    std::vector<int32_t> part(ids.begin() + i, ids.begin() + std::min(ids.size(), i + chunk));
    ASSERT_EQ(fnv1a64(part), golden["chunk_fnv1a64"][k].get<std::string>())
        << "first wrong chunk starts at id " << i;
  }
  EXPECT_EQ(fnv1a64(ids), golden["fnv1a64"].get<std::string>());
  EXPECT_EQ(gpt2_vocab_merges().encode(text), ids);
  EXPECT_EQ(gpt2_json().decode(ids), text);
}

// 100k copies of one character make one pre-token of 100k symbols: the heap merge keeps it fast.
TEST(Tokenizer, LongRepetitiveInputs) {
  for (const auto& c : read_json(kFixtures / "long.json")) {
    std::string unit = c["unit"], text;
    for (int i = 0; i < c["times"].get<int>(); ++i) text += unit;
    text += c["suffix"].get<std::string>();
    auto ids = gpt2_json().encode(text);
    SCOPED_TRACE(c["name"].get<std::string>());
    ASSERT_EQ(ids.size(), c["count"].get<size_t>());
    EXPECT_EQ(fnv1a64(ids), c["fnv1a64"].get<std::string>());
    auto head = ids_of(c["head"]);
    EXPECT_TRUE(std::equal(head.begin(), head.end(), ids.begin()));
    EXPECT_EQ(gpt2_json().decode(ids), text);
  }
}

TEST(Tokenizer, LoadersAgreeOnEveryToken) {
  const Tokenizer &a = gpt2_json(), &b = gpt2_vocab_merges();
  ASSERT_EQ(a.n_vocab(), b.n_vocab());
  for (int32_t id = 0; id < a.n_vocab(); ++id) {
    ASSERT_EQ(a.token_bytes(id), b.token_bytes(id)) << id;
    ASSERT_EQ(a.token_symbol(id), b.token_symbol(id)) << id;
  }
  EXPECT_EQ(a.special_id("<|endoftext|>"), 50256);
  EXPECT_EQ(b.special_id("<|endoftext|>"), 50256);
}

TEST(Tokenizer, DecodeEverySingleId) {
  auto golden = read_json(kFixtures / "vocab_bytes.json");
  const Tokenizer& t = gpt2_json();
  ASSERT_EQ(t.n_vocab(), golden["n_vocab"].get<int32_t>());
  std::vector<uint32_t> seq;
  for (int32_t id = 0; id < t.n_vocab(); ++id) {
    std::string bytes = t.decode(std::vector<int32_t>{id});
    ASSERT_FALSE(bytes.empty()) << id;
    ASSERT_EQ(bytes, t.token_bytes(id));
    ASSERT_TRUE(is_valid_utf8(t.token_symbol(id))) << id;
    seq.push_back(static_cast<uint32_t>(bytes.size()));
    for (unsigned char ch : bytes) seq.push_back(ch);
  }
  EXPECT_EQ(fnv1a64(seq), golden["fnv1a64"].get<std::string>());
}

TEST(Tokenizer, DecodeRejectsUnknownIds) {
  const Tokenizer& t = gpt2_json();
  for (int32_t bad : {-1, 50257, 1 << 30}) {
    try {
      t.decode(std::vector<int32_t>{15496, bad});
      FAIL() << "no error for id " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Argument);
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
    }
    EXPECT_THROW(t.token_bytes(bad), Error);
  }
}

TEST(Tokenizer, SpecialTokensOnlyWhenAllowed) {
  const Tokenizer& t = gpt2_json();
  EXPECT_EQ(t.encode("<|endoftext|>", true), (std::vector<int32_t>{50256}));
  std::vector<int32_t> as_text = t.encode("<|endoftext|>");
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 50256), 0);
  EXPECT_EQ(t.decode(as_text), "<|endoftext|>");
  EXPECT_EQ(t.encode("a<|endoftext|>b", true), (std::vector<int32_t>{64, 50256, 65}));
  EXPECT_EQ(t.eos_id(), 50256);
  EXPECT_EQ(t.bos_id(), 50256);
  EXPECT_EQ(t.special_id("<|nope|>"), std::nullopt);
  EXPECT_EQ(t.token_bytes(50256), "<|endoftext|>");
}

TEST(Tokenizer, InvalidUtf8IsAnErrorNamingTheOffset) {
  const Tokenizer& t = gpt2_json();
  for (auto [text, offset] : std::vector<std::pair<std::string, size_t>>{{"abc\xff", 3},
                                                                         {"\xc3", 0},
                                                                         {"ok \xe2\x82", 3},
                                                                         {"\xed\xa0\x80", 0},
                                                                         {"x\xc0\xaf", 1},
                                                                         {"caf\xc3\xa9\x80", 5}}) {
    try {
      t.encode(text);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Argument);
      EXPECT_NE(std::string(e.what()).find("byte offset " + std::to_string(offset)), std::string::npos)
          << e.what();
    }
  }
}

// Python's bytes.decode("utf-8", errors="replace") gives these (one U+FFFD per maximal subpart).
TEST(Tokenizer, Utf8SanitizeMatchesPythonReplace) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(minigpt::utf8_sanitize("\xe2\x82"), r);
  EXPECT_EQ(minigpt::utf8_sanitize("\xf0\x9f\x98"), r);
  EXPECT_EQ(minigpt::utf8_sanitize("\xed\xa0\x80"), r + r + r);
  EXPECT_EQ(minigpt::utf8_sanitize("\xc0\xaf"), r + r);
  EXPECT_EQ(minigpt::utf8_sanitize("a\xff"
                                   "b"),
            "a" + r + "b");
  EXPECT_EQ(minigpt::utf8_sanitize("\xe2\x82"
                                   "a"),
            r + "a");
  EXPECT_EQ(minigpt::utf8_sanitize("\xf4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(minigpt::utf8_sanitize("\xf0\x9f\x98\x80\x80"), "\xf0\x9f\x98\x80" + r);
}

TEST(StreamDecoder, HoldsSplitCharactersAndReassemblesText) {
  const Tokenizer& t = gpt2_json();
  int split_seen = 0;
  for (const auto& c : corpus()) {
    std::string text = c["text"];
    StreamDecoder dec(t);
    std::string out;
    for (int32_t id : ids_of(c["ids"])) {
      std::string piece = dec.push(id);
      EXPECT_TRUE(is_valid_utf8(piece));
      if (!is_valid_utf8(t.token_bytes(id))) ++split_seen;
      out += piece;
    }
    out += dec.flush();
    EXPECT_EQ(out, text) << c["name"];
  }
  EXPECT_GT(split_seen, 10);  // the corpus does split characters across tokens

  // "😀" is two tokens in GPT-2: nothing comes out until the character is whole.
  auto ids = t.encode("😀");
  ASSERT_EQ(ids.size(), 2u);
  StreamDecoder dec(t);
  EXPECT_EQ(dec.push(ids[0]), "");
  EXPECT_EQ(dec.push(ids[1]), "😀");
  EXPECT_EQ(dec.flush(), "");
  // Cut off mid-character: flush gives U+FFFD; then the decoder starts afresh.
  EXPECT_EQ(dec.push(ids[0]), "");
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.push(t.encode("a")[0]), "a");
}

TEST(StreamDecoder, RandomIdsGiveTheSanitizedWholeDecode) {
  const Tokenizer& t = gpt2_json();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> any_id(0, t.n_vocab() - 1);
  for (int round = 0; round < 300; ++round) {
    std::vector<int32_t> ids(1 + rng() % 20);
    for (auto& id : ids) id = any_id(rng);
    StreamDecoder dec(t);
    std::string out;
    for (int32_t id : ids) out += dec.push(id);
    out += dec.flush();
    ASSERT_EQ(out, minigpt::utf8_sanitize(t.decode(ids))) << ids_text(ids);
  }
}

// The three merge loops must agree: the obvious reference, the short-piece scan and the heap.
TEST(Tokenizer, MergeImplementationsAgree) {
  const Tokenizer& t = gpt2_json();
  std::mt19937 rng(11);
  std::string shakes = read_file(kShakespeare);
  const std::string alphabet = "etaoinshrdlu ETAOIN'.,\n";
  for (int round = 0; round < 3000; ++round) {
    std::string piece;
    size_t len = 1 + rng() % 48;
    if (round % 3 == 0) {
      piece = shakes.substr(rng() % (shakes.size() - len), len);
    } else if (round % 3 == 1) {
      for (size_t i = 0; i < len; ++i) piece += alphabet[rng() % alphabet.size()];
    } else {
      for (size_t i = 0; i < len; ++i) piece += static_cast<char>(rng() % 256);  // any bytes: BPE is bytewise
    }
    auto ref = t.bpe_for_test(piece, Tokenizer::BpeImpl::reference);
    ASSERT_EQ(t.bpe_for_test(piece, Tokenizer::BpeImpl::scan), ref) << piece;
    ASSERT_EQ(t.bpe_for_test(piece, Tokenizer::BpeImpl::heap), ref) << piece;
    ASSERT_EQ(t.decode(ref), piece);
  }
}

TEST(Tokenizer, FuzzRandomBytes) {
  const Tokenizer& t = gpt2_json();
  std::mt19937 rng(1234);
  int valid = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string s(rng() % 64, '\0');
    // Mostly ASCII with some high bytes, so that a fair share of the strings is valid UTF-8.
    for (auto& ch : s) ch = static_cast<char>(rng() % 4 ? rng() % 128 : 128 + rng() % 128);
    bool ok = is_valid_utf8(s);
    try {
      auto ids = t.encode(s, round % 2 == 0);
      ASSERT_TRUE(ok);
      ASSERT_EQ(t.decode(ids), s);
      ++valid;
    } catch (const Error& e) {
      ASSERT_FALSE(ok) << e.what();
      ASSERT_EQ(e.kind(), ErrorKind::Argument);
    }
  }
  // Random valid text: random code points of every plane.
  for (int round = 0; round < 2000; ++round) {
    std::string s;
    for (int i = rng() % 24; i > 0; --i) {
      uint32_t cp = rng() % 4 ? rng() % 0x3000 : rng() % 0x110000;
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = ' ';
      s += encode_cp(cp);
    }
    ASSERT_EQ(t.decode(t.encode(s)), s);
    ++valid;
  }
  EXPECT_GT(valid, 2100);  // all 2000 random code point strings and some of the byte strings
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  const Tokenizer& t = gpt2_json();
  std::string text;
  for (const auto& c : corpus()) text += c["text"].get<std::string>() + "\n";
  auto expected = t.encode(text);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 20; ++i) ok[k] += t.encode(text) == expected;
    });
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(ok[k], 20);
}

TEST(ByteLevel, BuiltInAndLoadedAgreeWithHuggingFace) {
  Tokenizer built = Tokenizer::byte_level();
  Tokenizer loaded = Tokenizer::load(kFixtures / "bytelevel");
  EXPECT_EQ(built.n_vocab(), 256);
  EXPECT_EQ(loaded.n_vocab(), 256);
  EXPECT_EQ(built.eos_id(), std::nullopt);
  for (const auto& c : read_json(kFixtures / "bytelevel" / "golden.json")) {
    std::string text = c["text"];
    auto golden = ids_of(c["ids"]);
    EXPECT_EQ(loaded.encode(text), golden) << text;
    EXPECT_EQ(built.encode(text), golden) << text;
    EXPECT_EQ(built.encode(text, true), golden) << text;  // no special tokens to recognise
    EXPECT_EQ(built.decode(golden), text);
  }
  for (int b = 0; b < 256; ++b) EXPECT_EQ(built.token_bytes(b), std::string(1, static_cast<char>(b)));
}

TEST(ByteLevel, EmptyMergesFileLoads) {
  TempDir dir;
  dir.write("vocab.json", read_file(kFixtures / "bytelevel" / "vocab.json"));
  dir.write("merges.txt", "");
  Tokenizer t = Tokenizer::load(dir.path());
  EXPECT_EQ(t.encode("hé"), (std::vector<int32_t>{'h', 0xC3, 0xA9}));
}

namespace {
void expect_load_error(const std::filesystem::path& dir, ErrorKind kind, const std::string& needle) {
  try {
    Tokenizer::load(dir);
    ADD_FAILURE() << "no error, expected one mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(TokenizerLoad, ClearErrors) {
  const std::string byte_vocab = read_file(kFixtures / "bytelevel" / "vocab.json");
  {
    TempDir dir;
    expect_load_error(dir.path(), ErrorKind::Io, dir.path().string());
  }
  {
    TempDir dir;
    dir.write("vocab.json", "{\"a\": 1,");
    dir.write("merges.txt", "");
    expect_load_error(dir.path(), ErrorKind::Format, "vocab.json");
  }
  {
    TempDir dir;
    dir.write("tokenizer.json", "[1, 2");
    expect_load_error(dir.path(), ErrorKind::Format, "tokenizer.json");
  }
  {
    TempDir dir;
    dir.write("vocab.json", byte_vocab);
    dir.write("merges.txt", "#version: 0.2\nh e\n");  // "he" is not in the vocabulary
    expect_load_error(dir.path(), ErrorKind::Format, "merge 2");
  }
  {
    TempDir dir;
    dir.write("vocab.json", byte_vocab);
    dir.write("merges.txt", "#version: 0.2\nhe\n");
    expect_load_error(dir.path(), ErrorKind::Format, "merges.txt");
  }
  {
    TempDir dir;
    dir.write("vocab.json", "{\"a\": -3}");
    dir.write("merges.txt", "");
    expect_load_error(dir.path(), ErrorKind::Format, "out of range");
  }
  {
    TempDir dir;
    dir.write("vocab.json", "{\"a\": 0}");
    dir.write("merges.txt", "");
    expect_load_error(dir.path(), ErrorKind::Format, "lacks the symbol of byte");
  }
  {
    TempDir dir;
    dir.write("tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
    expect_load_error(dir.path(), ErrorKind::Unsupported, "WordPiece");
  }
  {
    TempDir dir;
    dir.write(
        "tokenizer.json",
        R"({"normalizer": {"type": "NFKC"}, "pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {}}})");
    expect_load_error(dir.path(), ErrorKind::Unsupported, "normalizer 'NFKC' is not supported");
  }
}
