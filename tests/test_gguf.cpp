// The GGUF reader against what the `gguf` package (llama.cpp's Python library) reads from the same files
// (tools/reference/make_gguf_reference.py), and against broken files: every truncation, hostile counts and
// sizes.
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "test_util.h"

namespace minigpt {
namespace {

using json = nlohmann::json;

std::string type_name(GgufType t) {
  static const std::map<GgufType, std::string> names = {
      {GgufType::U8, "uint8"},    {GgufType::I8, "int8"},    {GgufType::U16, "uint16"},
      {GgufType::I16, "int16"},   {GgufType::U32, "uint32"}, {GgufType::I32, "int32"},
      {GgufType::F32, "float32"}, {GgufType::BOOL, "bool"},  {GgufType::STRING, "string"},
      {GgufType::ARRAY, "array"}, {GgufType::U64, "uint64"}, {GgufType::I64, "int64"},
      {GgufType::F64, "float64"}};
  return names.at(t);
}

TEST(Gguf, ReadsWhatTheGgufPackageReads) {
  const json expected = json::parse(test::read_file(test::gguf_fixtures() / "expected.json"));
  for (const char* file : {"mixed.gguf", "aligned64.gguf"}) {
    SCOPED_TRACE(file);
    const json& e = expected[file];
    auto f = GgufFile::open(test::gguf_fixtures() / file);
    EXPECT_EQ(f->version(), e["version"].get<uint32_t>());
    EXPECT_EQ(f->alignment(), e["alignment"].get<uint64_t>());
    EXPECT_EQ(f->data_offset(), e["data_offset"].get<uint64_t>());
    ASSERT_EQ(f->metadata().size(), e["metadata"].size());
    for (const auto& [key, m] : e["metadata"].items()) {
      SCOPED_TRACE(key);
      const GgufValue* v = f->find_value(key);
      ASSERT_NE(v, nullptr);
      EXPECT_EQ(type_name(v->type), m["type"].get<std::string>());
      const json& want = m["value"];
      switch (v->type) {
        case GgufType::STRING:
          EXPECT_EQ(v->s, want.get<std::string>());
          break;
        case GgufType::F32:
        case GgufType::F64:
          EXPECT_EQ(v->f, want.get<double>());
          break;
        case GgufType::BOOL:
          EXPECT_EQ(v->i != 0, want.get<bool>());
          break;
        case GgufType::ARRAY:
          EXPECT_EQ(type_name(v->elem), m["elem"].get<std::string>());
          if (v->elem == GgufType::STRING) {
            ASSERT_EQ(v->strings.size(), want.size());
            for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(v->strings[i], want[i].get<std::string>());
          } else if (v->elem == GgufType::ARRAY) {  // [[1, 2], [3]]
            ASSERT_EQ(v->items.size(), 2u);
            EXPECT_EQ(v->items[0].ints.size(), 2u);
            EXPECT_EQ(v->items[1].ints.size(), 1u);
            EXPECT_EQ(v->items[1].ints[0], 3);
          } else {
            ASSERT_EQ(v->ints.size(), want.size());
            for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(v->ints[i], want[i].get<int64_t>());
          }
          break;
        default:
          EXPECT_EQ(v->i, want.get<int64_t>());
      }
    }
    ASSERT_EQ(f->tensors().size(), e["tensors"].size());
    for (size_t i = 0; i < f->tensors().size(); ++i) {
      const GgufTensor& t = f->tensors()[i];
      const json& w = e["tensors"][i];
      SCOPED_TRACE(t.name);
      EXPECT_EQ(t.name, w["name"].get<std::string>());
      EXPECT_EQ(uint32_t(t.type), w["type_id"].get<uint32_t>());
      EXPECT_EQ(std::string(ggml_type_info(uint32_t(t.type))->name), w["type"].get<std::string>());
      EXPECT_EQ(t.ne, w["ne"].get<std::vector<int64_t>>());
      EXPECT_EQ(t.offset, w["offset"].get<uint64_t>());
      EXPECT_EQ(t.nbytes, w["nbytes"].get<uint64_t>());
      std::vector<uint8_t> bytes(t.nbytes);
      f->read(t, bytes.data());
      EXPECT_EQ(test::fnv1a64_hex({reinterpret_cast<const char*>(bytes.data()), bytes.size()}),
                w["fnv1a64"].get<std::string>());
      EXPECT_EQ(f->find(t.name), &t);
    }
    EXPECT_EQ(f->get_int("gpt2.context_length"), 64);
    EXPECT_EQ(f->get_string("general.architecture"), "gpt2");
    EXPECT_NEAR(*f->get_float("gpt2.attention.layer_norm_epsilon"), 1e-5, 1e-12);
    EXPECT_EQ(f->get_int("no.such.key"), std::nullopt);
    test::expect_error([&] { f->get_int("general.architecture"); }, ErrorKind::Format,
                       {"general.architecture", "string, not an integer"});
  }
}

// Version 2 has the layout of version 3 (3 added big-endian files, told apart by the version's bytes).
TEST(Gguf, Version2ReadsAsVersion3) {
  std::string bytes = test::read_file(test::gguf_fixtures() / "mixed.gguf");
  bytes[4] = 2;
  auto f = GgufFile::from_memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "v2.gguf");
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->tensors().size(), 8u);
}

// Every prefix of a valid file that cuts into its header or tensor data is refused with Error(Format),
// never read past its end (the padding after the last tensor may go).
TEST(Gguf, EveryTruncationIsAFormatError) {
  const std::string bytes = test::read_file(test::gguf_fixtures() / "mixed.gguf");
  uint64_t data_end = 0;
  const auto file = GgufFile::open(test::gguf_fixtures() / "mixed.gguf");  // held: tensors() is the file's
  for (const auto& t : file->tensors()) data_end = std::max(data_end, t.offset + t.nbytes);
  ASSERT_GT(data_end, bytes.size() - 64);
  for (size_t n = 0; n < data_end; ++n) {
    std::vector<uint8_t> copy(bytes.begin(),
                              bytes.begin() + long(n));  // exactly n bytes: ASan sees overreads
    try {
      GgufFile::from_memory(copy.data(), copy.size(), "cut.gguf");
      ADD_FAILURE() << "a file cut to " << n << " bytes was accepted";
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::Format) << n << ": " << e.what();
    }
  }
}

// Builds a GGUF image field by field.
struct Builder {
  std::string b;
  template <typename T>
  Builder& put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Builder& str(const std::string& s) {
    put<uint64_t>(s.size());
    b += s;
    return *this;
  }
  Builder& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b += "GGUF";
    return put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  }
  // A tensor info: name, dims, type, offset.
  Builder& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(uint32_t(ne.size()));
    for (uint64_t d : ne) put<uint64_t>(d);
    return put<uint32_t>(type).put<uint64_t>(offset);
  }
  Builder& pad(size_t align = 32) {
    while (b.size() % align) b += '\0';
    return *this;
  }
};

void expect_refused(const std::string& bytes, ErrorKind kind, const std::vector<std::string>& needles) {
  std::vector<uint8_t> copy(bytes.begin(), bytes.end());
  test::expect_error([&] { GgufFile::from_memory(copy.data(), copy.size(), "bad.gguf"); }, kind, needles);
}

TEST(Gguf, HostileHeadersAreRefused) {
  using K = ErrorKind;
  expect_refused("GGML\3\0\0\0", K::Format, {"bad.gguf", "no \"GGUF\" magic"});
  expect_refused(Builder().header(0, 0, 1).b, K::Unsupported, {"version 1"});
  expect_refused(Builder().header(0, 0, 4).b, K::Format, {"version 4"});
  expect_refused(Builder().header(0, 0, 0x03000000).b, K::Format, {"big-endian"});
  expect_refused(Builder().header(uint64_t(1) << 62, 0).b, K::Format, {"tensors cannot fit"});
  expect_refused(Builder().header(0, ~uint64_t(0)).b, K::Format, {"metadata entries cannot fit"});
  // A key longer than the file, a string value of 2^62 bytes, an unknown value type.
  expect_refused(Builder().header(0, 1).put<uint64_t>(1000).b + std::string(16, 'x'), K::Format,
                 {"truncated", "metadata key"});
  expect_refused(Builder().header(0, 1).str("k").put<uint32_t>(8).put<uint64_t>(uint64_t(1) << 62).b,
                 K::Format, {"string value", "longer than the limit"});
  expect_refused(Builder().header(0, 1).str("k").put<uint32_t>(13).b, K::Format,
                 {"'k'", "unknown value type 13"});
  // An array whose count the file cannot hold; a bool of 2; arrays nested too deep; a duplicated key.
  expect_refused(
      Builder().header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(5).put<uint64_t>(~uint64_t(0) / 2).b,
      K::Format, {"does not fit"});
  expect_refused(Builder().header(0, 1).str("k").put<uint32_t>(7).put<uint8_t>(2).b, K::Format,
                 {"bool value of 2"});
  {
    Builder nest;
    nest.header(0, 1).str("k").put<uint32_t>(9);
    for (int i = 0; i < 6; ++i) nest.put<uint32_t>(9).put<uint64_t>(1);
    expect_refused(nest.b, K::Format, {"nested deeper"});
  }
  expect_refused(Builder()
                     .header(0, 2)
                     .str("k")
                     .put<uint32_t>(0)
                     .put<uint8_t>(1)
                     .str("k")
                     .put<uint32_t>(0)
                     .put<uint8_t>(1)
                     .b,
                 K::Format, {"'k' appears twice"});
  // Alignment not a power of two, or not a u32.
  expect_refused(Builder().header(0, 1).str("general.alignment").put<uint32_t>(4).put<uint32_t>(48).b,
                 K::Format, {"general.alignment"});
  expect_refused(Builder().header(0, 1).str("general.alignment").put<uint32_t>(10).put<uint64_t>(64).b,
                 K::Format, {"general.alignment"});
}

TEST(Gguf, HostileTensorInfosAreRefused) {
  using K = ErrorKind;
  auto one = [](std::vector<uint64_t> ne, uint32_t type, uint64_t offset, size_t data_bytes) {
    Builder b;
    b.header(1, 0).tensor("w", std::move(ne), type, offset).pad();
    b.b.append(data_bytes, '\0');
    return b.b;
  };
  {  // the well-formed base case: an F32 [2, 8] matrix
    const std::string ok = one({8, 2}, 0, 0, 64);
    std::vector<uint8_t> copy(ok.begin(), ok.end());
    auto f = GgufFile::from_memory(copy.data(), copy.size(), "ok.gguf");
    ASSERT_EQ(f->tensors().size(), 1u);
    EXPECT_EQ(f->tensors()[0].shape(), (std::vector<int64_t>{2, 8}));
    EXPECT_EQ(f->tensors()[0].nbytes, 64u);
  }
  expect_refused(one({8, 2}, 0, 0, 63), K::Format, {"'w'", "past the end of the file"});
  expect_refused(one({8, 2}, 0, 32, 64), K::Format, {"'w'", "past the end"});
  expect_refused(one({8, 2}, 0, 4, 200), K::Format, {"not a multiple of the alignment 32"});
  expect_refused(one({8, 2}, 0, ~uint64_t(0) - 31, 64), K::Format, {"past the end"});
  expect_refused(one({8, 0}, 0, 0, 64), K::Format, {"dimension of 0"});
  expect_refused(one({uint64_t(1) << 40, uint64_t(1) << 40}, 0, 0, 64), K::Format, {"overflows"});
  expect_refused(one({~uint64_t(0)}, 0, 0, 64), K::Format, {"overflows"});
  expect_refused(one({8, 2}, 4, 0, 64), K::Format, {"unknown ggml type 4"});
  expect_refused(one({8, 2}, 99, 0, 64), K::Format, {"unknown ggml type 99"});
  expect_refused(one({16, 2}, 8, 0, 64), K::Format, {"not whole Q8_0 blocks of 32"});
  {  // two tensors sharing bytes: refused, as in safetensors files; side by side is fine
    auto two = [](uint64_t second) {
      Builder b;
      b.header(2, 0).tensor("a", {8, 2}, 0, 0).tensor("b", {8}, 0, second).pad();
      b.b.append(128, '\0');
      return b.b;
    };
    std::string ok = two(64);
    std::vector<uint8_t> copy(ok.begin(), ok.end());
    EXPECT_EQ(GgufFile::from_memory(copy.data(), copy.size(), "ok.gguf")->tensors().size(), 2u);
    expect_refused(two(32), K::Format, {"tensors 'a' and 'b' overlap"});
    expect_refused(two(0), K::Format, {"overlap"});
  }
  {
    Builder b;
    b.header(1, 0).str("w").put<uint32_t>(5);
    expect_refused(b.b + std::string(64, '\0'), K::Format, {"5 dimensions"});
  }
  {
    Builder b;
    b.header(2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad();
    b.b.append(64, '\0');
    expect_refused(b.b, K::Format, {"'w' appears twice"});
  }
  // A Q8_0 row of 32 is one 34-byte block.
  {
    const std::string ok = one({32, 3}, 8, 0, 102);
    std::vector<uint8_t> copy(ok.begin(), ok.end());
    EXPECT_EQ(GgufFile::from_memory(copy.data(), copy.size(), "q8.gguf")->tensors()[0].nbytes, 102u);
  }
}

TEST(Gguf, MissingOrNonRegularFilesAreIoErrors) {
  test::TempDir tmp;
  test::expect_error([&] { GgufFile::open(tmp / "missing.gguf"); }, ErrorKind::Io,
                     {"missing.gguf", "cannot open"});
  test::expect_error([&] { GgufFile::open(tmp.path()); }, ErrorKind::Io, {"not a regular file"});
}

}  // namespace
}  // namespace minigpt
