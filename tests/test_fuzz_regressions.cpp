// Inputs the fuzz targets (tests/fuzz/) found or that guard what they check: each must be refused with one
// minigpt::Error naming the file and the field, never crash, read outside the input, or allocate from it.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "formats/gguf.h"
#include "id_list.h"
#include "minigpt/model.h"
#include "minigpt/tokenizer.h"
#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

using test::expect_error;

// An exact-size heap copy, so that ASan reports a read one byte past the end.
std::vector<uint8_t> image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> v(8 + header.size() + data_bytes, 1);
  for (int i = 0; i < 8; ++i) v[size_t(i)] = uint8_t(uint64_t(header.size()) >> (8 * i));
  std::copy(header.begin(), header.end(), v.begin() + 8);
  return v;
}

// Parses `v` and reads the last byte of every tensor: a parser that lets a tensor end past the data makes
// this an out-of-bounds read (an ASan report in the sanitizer build).
void parse_and_touch(const std::vector<uint8_t>& v) {
  auto f = SafeTensorsFile::from_memory(v.data(), v.size(), "x.safetensors");
  unsigned sum = 0;
  for (const auto& t : f->tensors())
    if (t.nbytes) sum += t.data[t.nbytes - 1];
  ADD_FAILURE() << "accepted (sum " << sum << ")";
}

// fuzz_gguf: a tensor of 2^62 + 16 F32 values would "take" 64 bytes, its byte count (numel x 4) wrapping past
// 2^64, a tensor whose size disagrees with its shape. The fuzzer's input, then the smallest such file: one
// 1-D F32 tensor and its 64 bytes.
TEST(FuzzRegressions, GgufTensorBytesThatWrapAreRefused) {
  const std::string crash =
      test::read_file(test::source_dir() / "tests/fuzz/regressions/gguf_nbytes_wrap.gguf");
  ASSERT_FALSE(crash.empty());
  expect_error(
      [&] {
        GgufFile::from_memory(reinterpret_cast<const uint8_t*>(crash.data()), crash.size(), "crash.gguf");
      },
      ErrorKind::Format, {"crash.gguf", "values is larger than 2^64 bytes"});
  std::string f;
  const auto u32 = [&](uint32_t v) { f.append(reinterpret_cast<const char*>(&v), 4); };
  const auto u64 = [&](uint64_t v) { f.append(reinterpret_cast<const char*>(&v), 8); };
  f += "GGUF";
  u32(3);
  u64(1);  // tensors
  u64(0);  // metadata
  u64(1);
  f += "x";
  u32(1);                         // dimensions
  u64((uint64_t(1) << 62) + 16);  // x 4 bytes = 2^64 + 64
  u32(0);                         // F32
  u64(0);                         // offset
  f.resize(32 * ((f.size() + 31) / 32) + 64, '\0');
  expect_error(
      [&] { GgufFile::from_memory(reinterpret_cast<const uint8_t*>(f.data()), f.size(), "wrap.gguf"); },
      ErrorKind::Format,
      {"wrap.gguf", "tensor 'x' of 4611686018427387920 F32 values is larger than 2^64 bytes"});
}

TEST(FuzzRegressions, ConfigNumberOverflow) {
  // fuzz_config: a number nlohmann cannot hold (json::out_of_range) is not valid JSON, not an uncaught throw.
  const std::string crash =
      test::read_file(test::source_dir() / "tests/fuzz/regressions/config_number_overflow.json");
  ASSERT_FALSE(crash.empty());
  expect_error([&] { parse_config(crash, "config.json"); }, ErrorKind::Config,
               {"config.json", "not valid JSON"});
  expect_error([&] { parse_config(R"({"model_type":"gpt2","n_layer":1e999})", "config.json"); },
               ErrorKind::Config, {"config.json", "not valid JSON"});
}

TEST(FuzzRegressions, TokenizerJsonFieldsOfTheWrongType) {
  // fuzz_tokenizer_load: a "type" that is not a string makes json's value("type", "") throw a type_error,
  // which must become a format error (not "internal error", exit 3). The fuzzer's input, then the smallest.
  const std::string crash =
      test::read_file(test::source_dir() / "tests/fuzz/regressions/tokenizer_model_type_null.bin");
  ASSERT_FALSE(crash.empty());
  expect_error([&] { Tokenizer::from_tokenizer_json(crash.substr(1)); }, ErrorKind::Format,
               {"tokenizer.json", "model is not an object with a string \"type\""});
  for (const char* type : {"null", "1", "[]", "{}"}) {
    expect_error([&] { Tokenizer::from_tokenizer_json(std::string(R"({"model":{"type":)") + type + "}}"); },
                 ErrorKind::Format, {"tokenizer.json", "model is not an object with a string \"type\""});
  }
  // The decoder's type only tells a character-level BPE apart: any other value is not one.
  expect_error(
      [&] {
        Tokenizer::from_tokenizer_json(
            R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":null,"decoder":{"type":7}})");
      },
      ErrorKind::Unsupported, {"tokenizer.json", "no pre_tokenizer"});
}

// quantize's tokenizer_config.json: a malformed added_tokens_decoder entry is one line naming the file and
// the entry (not "internal error: stoll" or a json type_error, exit 3).
TEST(FuzzRegressions, TokenizerConfigAddedTokensAreChecked) {
  test::TempDir tmp;
  for (const char* f : {"config.json", "model.safetensors", "vocab.json", "merges.txt"})
    std::filesystem::copy_file(test::source_dir() / "models" / "shakespeare-char" / f, tmp / f);
  for (const auto& [tc, says] : std::vector<std::pair<std::string, std::string>>{
           {R"({"added_tokens_decoder": {"x": {"content": "a"}}})",
            "added_tokens_decoder[\"x\"]: the key is not a token id"},
           {R"({"added_tokens_decoder": {"99999999999": {"content": "a"}}})", "the key is not a token id"},
           {R"({"added_tokens_decoder": {"5": {"content": 7}}})",
            "added_tokens_decoder[\"5\"]: no string \"content\""},
           {R"({"added_tokens_decoder": {"5": []}})", "no string \"content\""},
           {R"({"added_tokens_decoder": {"5": {"content": "a", "special": "yes"}}})",
            "\"special\" is not true or false"},
       }) {
    test::write_file(tmp / "tokenizer_config.json", tc);
    const auto r =
        test::run_cli("quantize " + tmp.path().string() + " " + (tmp / "q.gguf").string() + " --type q8_0");
    EXPECT_EQ(r.status, 1) << tc << ": " << r.err;
    EXPECT_NE(r.err.find("tokenizer_config.json: added_tokens_decoder["), std::string::npos)
        << tc << ": " << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << tc << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(tmp / "q.gguf"));
  }
}

TEST(FuzzRegressions, LayerNormEpsilonOutOfFloatRange) {
  const std::string base =
      R"({"model_type":"gpt2","n_layer":1,"n_head":1,"n_embd":2,"n_positions":4,"vocab_size":3,)";
  for (const char* eps : {"1e300", "-1e300", "1e-300", "0"})
    expect_error([&] { parse_config(base + "\"layer_norm_epsilon\":" + eps + "}", "config.json"); },
                 ErrorKind::Config, {"config.json", "layer_norm_epsilon must be in (0, 1]"});
}

TEST(FuzzRegressions, SafetensorsNumberOverflowInHeader) {
  expect_error(
      [&] { parse_and_touch(image(R"({"w":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}})", 4)); },
      ErrorKind::Format, {"x.safetensors", "not valid JSON"});
}

// JSON nested 100,000 deep (copying or printing such a value recurses once per level and would overflow the
// stack): refused while parsing, in every JSON a model directory holds and in a safetensors header.
TEST(FuzzRegressions, DeeplyNestedJsonIsRefused) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string bounded = std::string(200, '[') + std::string(200, ']');
  expect_error([&] { parse_config(R"({"model_type":"gpt2","x":)" + deep + "}", "config.json"); },
               ErrorKind::Config, {"config.json", "not valid JSON", "nesting deeper than 256 levels"});
  // 200 levels parse (the config is refused for what it lacks, not for its nesting)
  expect_error([&] { parse_config(R"({"model_type":"gpt2","x":)" + bounded + "}", "config.json"); },
               ErrorKind::Config, {"config.json", "n_layer"});
  expect_error([&] { parse_and_touch(image(R"({"__metadata__":)" + deep + "}", 4)); }, ErrorKind::Format,
               {"x.safetensors", "nesting deeper than 256 levels"});
  expect_error([&] { Tokenizer::from_tokenizer_json(R"({"model":)" + deep + "}"); }, ErrorKind::Format,
               {"tokenizer.json", "nesting deeper than 256 levels"});
  test::TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());
  test::write_file(tmp / "model.safetensors.index.json", R"({"weight_map":)" + deep + "}");
  std::filesystem::remove(tmp / "model.safetensors");
  expect_error([&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Format,
               {"model.safetensors.index.json", "nesting deeper than 256 levels"});
}

TEST(FuzzRegressions, IndexJsonNumberOverflow) {
  test::TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());
  test::write_file(tmp / "model.safetensors.index.json", R"({"weight_map": {"wte.weight": 1e999}})");
  std::filesystem::remove(tmp / "model.safetensors");
  expect_error([&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Format,
               {"model.safetensors.index.json", "not valid JSON"});
}

TEST(FuzzRegressions, TensorEndingOneBytePastTheData) {
  // The offset check's boundary: [0, 4] over 4 bytes is fine, [1, 5] over 4 bytes is one past the end.
  const std::vector<uint8_t> ok = image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
  EXPECT_NO_THROW(SafeTensorsFile::from_memory(ok.data(), ok.size(), "ok"));
  expect_error(
      [&] { parse_and_touch(image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})", 4)); },
      ErrorKind::Format, {"x.safetensors", "tensor 'w'", "past the end"});
  expect_error([&] { parse_and_touch(image(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 0)); },
               ErrorKind::Format, {"x.safetensors", "tensor 'w'", "past the end"});
}

TEST(FuzzRegressions, HugeSizesAreErrorsNotAllocations) {
  // A header length of 2^60, and a tensor of 2^60 elements: refused before anything is allocated.
  std::vector<uint8_t> v = image("{}", 0);
  v[7] = 0x10;  // header length 2^60
  expect_error([&] { parse_and_touch(v); }, ErrorKind::Format,
               {"x.safetensors", "header length", "exceeds the file size"});
  expect_error(
      [&] {
        parse_and_touch(image(R"({"w":{"dtype":"F32","shape":[1048576,1048576],"data_offsets":[0,4]}})", 4));
      },
      ErrorKind::Format, {"tensor 'w'", "cover 4 bytes"});
  expect_error(
      [&] {
        parse_and_touch(
            image(R"({"w":{"dtype":"F64","shape":[1152921504606846976],"data_offsets":[0,8]}})", 8));
      },
      ErrorKind::Format, {"tensor 'w'", "too many elements"});
}

TEST(FuzzRegressions, OverlapAndDuplicateSpans) {
  expect_error(
      [&] {
        parse_and_touch(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                                  "b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                              4));
      },
      ErrorKind::Format, {"'a' and 'b' overlap"});
}

TEST(FuzzRegressions, TokenizerInMemoryEqualsLoad) {
  test::TempDir tmp;
  std::string vocab = "{";
  for (int b = 33; b < 127; ++b) {
    std::string sym(1, char(b));
    if (sym == "\"" || sym == "\\") sym = "\\" + sym;
    vocab += "\"" + sym + "\":" + std::to_string(b - 33) + ",";
  }
  vocab.back() = '}';
  // Too few byte symbols (no space): an error naming the file, from memory as from disk.
  expect_error([&] { Tokenizer::from_vocab_merges(vocab, "", "v.json", "m.txt"); }, ErrorKind::Format,
               {"m.txt", "lacks the symbol of byte 32"});
  test::write_file(tmp / "vocab.json", vocab);
  test::write_file(tmp / "merges.txt", "");
  expect_error([&] { Tokenizer::load(tmp.path()); }, ErrorKind::Format,
               {"merges.txt", "lacks the symbol of byte 32"});
  expect_error([&] { Tokenizer::from_tokenizer_json("{\"model\": 1e999}"); }, ErrorKind::Format,
               {"tokenizer.json", "not valid JSON"});
}

// fuzz_tokenizer_load: two added tokens with one id ("café" and "é!", 50262): taking the file's ids, "café"
// would encode to 50262, which decodes to "é!". Such a file's ids are not taken: the two get their own ids,
// as tokenizers gives them (TokenizerFamilies.AddedTokenIdsAreTheReferencesNotTheFiles), and each
// round-trips; the same token listed twice is one token. Two added tokens at one id remain an error where the
// ids are the file's (GGUF: by position, so it cannot happen there).
TEST(FuzzRegressions, AddedTokensSharingAnIdRoundTrip) {
  auto with_added = [](std::vector<std::pair<std::string, int>> added) {
    nlohmann::json j = nlohmann::json::parse(
        test::read_file(test::source_dir() / "tests" / "fixtures" / "gpt2-tokenizer" / "tokenizer.json"));
    for (const auto& [content, id] : added) {
      j["added_tokens"].push_back({{"id", id},
                                   {"content", content},
                                   {"special", false},
                                   {"normalized", false},
                                   {"lstrip", false},
                                   {"rstrip", false},
                                   {"single_word", false}});
    }
    return j.dump();
  };
  const Tokenizer shared = Tokenizer::from_tokenizer_json(with_added({{"café", 50262}, {"é!", 50262}}));
  const auto cafe = shared.encode("café"), bang = shared.encode("é!");
  ASSERT_EQ(cafe.size(), 1u);
  ASSERT_EQ(bang.size(), 1u);
  EXPECT_NE(cafe, bang);
  EXPECT_EQ(shared.decode(cafe), "café");
  EXPECT_EQ(shared.decode(bang), "é!");
  EXPECT_EQ(shared.decode(shared.encode("a café é!")), "a café é!");
  const Tokenizer twice = Tokenizer::from_tokenizer_json(with_added({{"café", 50262}, {"café", 50262}}));
  EXPECT_EQ(twice.n_vocab(), shared.n_vocab() - 1);
  EXPECT_EQ(twice.encode("café").size(), 1u);
  EXPECT_EQ(twice.decode(twice.encode("a café")), "a café");
  expect_error(
      [&] {
        Tokenizer::from_tokenizer_json(with_added({{"x", -1}}));
      },
      ErrorKind::Format, {"tokenizer.json", "added token \"x\": id -1 is not in [0, 2^32)"});
}

TEST(FuzzRegressions, IdList) {
  EXPECT_EQ(cli::parse_ids(" 15496\t995\n0 2147483647 "), (std::vector<int32_t>{15496, 995, 0, 2147483647}));
  EXPECT_TRUE(cli::parse_ids("").empty());
  for (const char* bad : {"2147483648", "-1", "12a", "99999999999", "1e3", "+5", "\xff", "[[1]]", "1;2"})
    expect_error([&] { cli::parse_ids(bad); }, ErrorKind::Argument, {"--decode", "is not a token id"});
  // transformers' spelling: commas, optionally the whole list in brackets.
  const std::vector<int32_t> three{15496, 11, 995};
  for (const char* good : {"[15496, 11, 995]", "15496,11,995", " [ 15496 ,11,\n995 ] ", "15496 11, 995"})
    EXPECT_EQ(cli::parse_ids(good), three) << good;
  EXPECT_TRUE(cli::parse_ids(" [ ] ").empty());
  struct Bad {
    const char* text;
    const char* says;
  };
  for (const Bad& b : std::vector<Bad>{{"1,,2", "',' with no id before it at byte offset 2"},
                                       {"1, 2,", "',' with no id after it at byte offset 4"},
                                       {",1", "',' before the first id at byte offset 0"},
                                       {"[1, 2", "'[' without its closing ']' at byte offset 0"},
                                       {" 1, 2]", "']' without an opening '[' at byte offset 5"},
                                       {"[", "'[' without its closing ']'"}})
    expect_error([&] { cli::parse_ids(b.text); }, ErrorKind::Argument, {"--decode", b.says});
}

}  // namespace
}  // namespace minigpt
