// The safetensors parser, config.json reading and the model loader, on good and bad input.
#include <cstring>

#include "minigpt/model.h"
#include "minigpt/model_source.h"
#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

using test::expect_error;
using test::TempDir;
namespace fs = std::filesystem;

// A safetensors image with a hand-made header (so that the header can be wrong) and `data_bytes` of data.
std::string make_image(const std::string& header, size_t data_bytes) {
  std::string s(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(n >> (8 * i));
  s += header;
  s.append(data_bytes, '\x01');
  return s;
}

std::shared_ptr<SafeTensorsFile> open_image(const TempDir& tmp, const std::string& image) {
  const auto p = tmp / "x.safetensors";
  test::write_file(p, image);
  return SafeTensorsFile::open(p);
}

TEST(SafeTensors, RoundTripsWhatItWrites) {
  TempDir tmp;
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {f32_to_bf16(1.5f), f32_to_bf16(-2.25f)};
  std::vector<int32_t> c = {7};
  write_safetensors(tmp / "t.safetensors",
                    {{"a", StDtype::F32, {2, 3}, a.data()},
                     {"b", StDtype::BF16, {2}, b.data()},
                     {"c", StDtype::I32, {}, c.data()}},
                    {{"k", "v"}});
  auto f = SafeTensorsFile::open(tmp / "t.safetensors");
  ASSERT_EQ(f->tensors().size(), 3u);
  const SafeTensor* ta = f->find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, StDtype::F32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  float got_a[6];
  f->read(*ta, got_a);
  EXPECT_EQ(std::memcmp(got_a, a.data(), 24), 0);
  const SafeTensor* tb = f->find("b");
  uint16_t got_b[2];
  f->read(*tb, got_b);
  float out[2];
  convert_to_f32(out, got_b, DType::BF16, 2);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.25f);
  EXPECT_EQ(f->find("c")->shape.size(), 0u);
  EXPECT_EQ(f->find("c")->numel(), 1);
  EXPECT_EQ(f->metadata().at("k"), "v");
  EXPECT_EQ(f->find("nope"), nullptr);
  // The header is padded to 8 bytes so that the data of an F32 tensor starts aligned.
  const std::string raw = test::read_file(tmp / "t.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST(SafeTensors, FileShorterThanTheLengthField) {
  TempDir tmp;
  expect_error([&] { open_image(tmp, std::string("\x05\x00\x00", 3)); }, ErrorKind::Format,
               {"x.safetensors", "truncated"});
  expect_error([&] { open_image(tmp, ""); }, ErrorKind::Format, {"x.safetensors", "truncated"});
}

TEST(SafeTensors, HeaderLengthLargerThanTheFile) {
  TempDir tmp;
  std::string img = make_image("{}", 0);
  img[0] = char(0xff);
  img[3] = char(0x7f);
  expect_error([&] { open_image(tmp, img); }, ErrorKind::Format,
               {"x.safetensors", "header length", "exceeds the file size"});
  // 2^60: an error, not an allocation attempt.
  std::string huge(8, '\0');
  huge[7] = char(0x10);
  expect_error([&] { open_image(tmp, huge + "{}"); }, ErrorKind::Format, {"exceeds the file size"});
}

TEST(SafeTensors, TruncatedData) {
  TempDir tmp;
  std::vector<float> a(16, 1.0f);
  write_safetensors(tmp / "t.safetensors", {{"w", StDtype::F32, {16}, a.data()}});
  std::string raw = test::read_file(tmp / "t.safetensors");
  raw.resize(raw.size() - 5);
  expect_error([&] { open_image(tmp, raw); }, ErrorKind::Format,
               {"x.safetensors", "tensor 'w'", "past the end"});
}

TEST(SafeTensors, HeaderNotJson) {
  TempDir tmp;
  expect_error([&] { open_image(tmp, make_image("{\"a\": [1, 2", 0)); }, ErrorKind::Format,
               {"x.safetensors", "not valid JSON"});
  expect_error([&] { open_image(tmp, make_image("hello", 0)); }, ErrorKind::Format,
               {"not a safetensors file"});
}

TEST(SafeTensors, OffsetsOutOfRange) {
  TempDir tmp;
  expect_error(
      [&] { open_image(tmp, make_image(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8)); },
      ErrorKind::Format, {"tensor 'w'", "past the end"});
  expect_error(
      [&] { open_image(tmp, make_image(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", 16)); },
      ErrorKind::Format, {"tensor 'w'", "end 0 < begin 16"});
  expect_error(
      [&] { open_image(tmp, make_image(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[-4,12]}})", 16)); },
      ErrorKind::Format, {"tensor 'w'", "non-negative"});
  expect_error(
      [&] {
        open_image(
            tmp,
            make_image(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,18446744073709551615]}})", 16));
      },
      ErrorKind::Format, {"tensor 'w'", "past the end"});
}

TEST(SafeTensors, SizeDisagreesWithShape) {
  TempDir tmp;
  expect_error(
      [&] { open_image(tmp, make_image(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", 16)); },
      ErrorKind::Format, {"tensor 'w'", "cover 16 bytes", "need 12"});
  expect_error(
      [&] {
        open_image(
            tmp,
            make_image(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,16]}})",
                       16));
      },
      ErrorKind::Format, {"tensor 'w'", "too many elements"});
}

TEST(SafeTensors, OverlappingTensors) {
  TempDir tmp;
  expect_error(
      [&] {
        open_image(tmp, make_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                                        "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                   12));
      },
      ErrorKind::Format, {"'a' and 'b' overlap"});
}

TEST(SafeTensors, DataNotCovered) {
  TempDir tmp;
  expect_error(
      [&] {
        open_image(tmp, make_image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                                        "b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                   12));
      },
      ErrorKind::Format, {"gap before 'b'"});
  expect_error(
      [&] { open_image(tmp, make_image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12)); },
      ErrorKind::Format, {"8 bytes after the last tensor"});
}

TEST(SafeTensors, UnknownDtypeAndBadEntries) {
  TempDir tmp;
  expect_error(
      [&] { open_image(tmp, make_image(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4)); },
      ErrorKind::Format, {"tensor 'w'", "unknown dtype 'F33'"});
  expect_error([&] { open_image(tmp, make_image(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4)); },
               ErrorKind::Format, {"tensor 'w'", "dtype"});
  expect_error(
      [&] { open_image(tmp, make_image(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4)); },
      ErrorKind::Format, {"tensor 'w'", "shape dimension"});
  expect_error(
      [&] { open_image(tmp, make_image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4)); },
      ErrorKind::Format, {"tensor 'w'", "data_offsets"});
  expect_error([&] { open_image(tmp, make_image(R"({"__metadata__":{"a":1}})", 0)); }, ErrorKind::Format,
               {"__metadata__"});
  expect_error([&] { open_image(tmp, make_image("[1,2]", 0)); }, ErrorKind::Format,
               {"not a safetensors file"});
}

// --- config.json ---------------------------------------------------------------------------

const char* kGoodConfig =
    R"({"model_type":"gpt2","n_layer":2,"n_head":2,"n_embd":16,"n_positions":24,"vocab_size":40})";

TEST(Config, DefaultsAsTransformers) {
  Config c = parse_config(kGoodConfig, "config.json");
  EXPECT_EQ(c.n_inner, 64);
  EXPECT_EQ(c.n_ctx, 24);
  EXPECT_FLOAT_EQ(c.layer_norm_epsilon, 1e-5f);
  EXPECT_EQ(c.activation, Activation::GeluTanh);
  EXPECT_TRUE(c.scale_attn_weights);
  EXPECT_FALSE(c.scale_attn_by_inverse_layer_idx);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.position_encoding, PositionEncoding::Learned);
  // What config_to_json writes reads back the same.
  c.n_inner = 20;
  c.activation = Activation::Relu;
  c.activation_name = "relu";
  c.position_encoding = PositionEncoding::Sinusoidal;
  Config d = parse_config(config_to_json(c), "x");
  EXPECT_EQ(d.n_inner, 20);
  EXPECT_EQ(d.activation, Activation::Relu);
  EXPECT_EQ(d.position_encoding, PositionEncoding::Sinusoidal);
}

TEST(Config, LegacyNCtxAndNullInner) {
  Config c = parse_config(
      R"({"model_type":"gpt2","n_layer":1,"n_head":1,"n_embd":8,"n_ctx":10,"vocab_size":5,"n_inner":null,"activation_function":"gelu"})",
      "c");
  EXPECT_EQ(c.n_ctx, 10);
  EXPECT_EQ(c.n_inner, 32);
  EXPECT_EQ(c.activation, Activation::GeluErf);
}

TEST(Config, BadConfigs) {
  expect_error([] { parse_config("{not json", "dir/config.json"); }, ErrorKind::Config,
               {"dir/config.json", "not valid JSON"});
  expect_error(
      [] {
        parse_config(R"({"model_type":"gpt2","n_head":2,"n_embd":16,"n_positions":24,"vocab_size":40})",
                     "c.json");
      },
      ErrorKind::Config, {"c.json", "missing field 'n_layer'"});
  expect_error(
      [] {
        parse_config(
            R"({"model_type":"gpt2","n_layer":2,"n_head":3,"n_embd":16,"n_positions":24,"vocab_size":40})",
            "c.json");
      },
      ErrorKind::Config, {"c.json", "n_embd (16) is not divisible by n_head (3)"});
  expect_error([] { parse_config(R"({"model_type":"falcon","n_layer":2})", "c.json"); },
               ErrorKind::Unsupported, {"c.json", "model_type 'falcon'"});
  expect_error([] { parse_config(R"({"n_layer":2})", "c.json"); }, ErrorKind::Config,
               {"missing field 'model_type'"});
  expect_error(
      [] {
        parse_config(
            R"({"model_type":"gpt2","n_layer":"2","n_head":2,"n_embd":16,"n_positions":24,"vocab_size":40})",
            "c");
      },
      ErrorKind::Config, {"'n_layer' must be an integer"});
  expect_error(
      [] {
        parse_config(
            R"({"model_type":"gpt2","n_layer":-1,"n_head":2,"n_embd":16,"n_positions":24,"vocab_size":40})",
            "c");
      },
      ErrorKind::Config, {"'n_layer' = -1 is out of range"});
  expect_error(
      [] {
        parse_config(R"({"model_type":"gpt2","n_layer":2,"n_head":2,"n_embd":16,"vocab_size":40})", "c");
      },
      ErrorKind::Config, {"missing field 'n_positions'"});
  expect_error(
      [] {
        parse_config(
            R"({"model_type":"gpt2","n_layer":2,"n_head":2,"n_embd":16,"n_positions":24,"vocab_size":40,"activation_function":"swiglu"})",
            "c");
      },
      ErrorKind::Unsupported, {"activation_function 'swiglu'"});
  expect_error(
      [] {
        parse_config(
            R"({"model_type":"gpt2","n_layer":2,"n_head":2,"n_embd":16,"n_positions":24,"vocab_size":40,"position_embedding_type":"rotary"})",
            "c");
      },
      ErrorKind::Unsupported, {"position_embedding_type 'rotary'"});
  expect_error([] { parse_config("[1]", "c"); }, ErrorKind::Config, {"not a JSON object"});
}

// --- the model loader ----------------------------------------------------------------------

using test::rewrite_weights;

TEST(Loader, LoadsARandomModel) {
  TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());
  auto m = Model::load(tmp.path(), LoadOptions::threads(1));
  EXPECT_EQ(m->config().n_layer, 2);
  // wte + wpe + 2 layers + ln_f
  const int64_t C = 16, F = 64;
  const int64_t per_layer = 2 * C + C * 3 * C + 3 * C + C * C + C + 2 * C + C * F + F + F * C + C;
  EXPECT_EQ(m->n_params(), 40 * C + 24 * C + 2 * per_layer + 2 * C);
}

TEST(Loader, DirectoryProblems) {
  TempDir tmp;
  expect_error([&] { Model::load(tmp / "nope"); }, ErrorKind::Io,
               {(tmp / "nope").string() + ": no such file or directory"});
  expect_error([&] { Model::load(tmp.path()); }, ErrorKind::Io, {"no config.json"});
  test::write_file(tmp / "config.json", config_to_json(test::tiny_config()));
  expect_error([&] { Model::load(tmp.path()); }, ErrorKind::Io, {"no model.safetensors"});
  test::write_file(tmp / "pytorch_model.bin", "x");
  expect_error([&] { Model::load(tmp.path()); }, ErrorKind::Io, {"pytorch_model.bin"});
  test::write_file(tmp / "config.json", "{oops");
  expect_error([&] { Model::load(tmp.path()); }, ErrorKind::Config, {"config.json", "not valid JSON"});
  expect_error(
      [&] { Model::load(tmp / "config.json"); }, ErrorKind::Io,
      {"config.json: one file of a Hugging Face model, whose directory (with config.json) is the model"});
}

// A wrong path is named for what it is, first: a name that is nowhere, a file of no format read (with what
// it most likely is), a directory without config.json. The same words reach the CLI, the server and Python,
// which all open a model through ModelSource.
TEST(Loader, AWrongPathSaysWhatIsWrongWithIt) {
  TempDir tmp;
  auto message = [](const fs::path& p) {
    try {
      ModelSource::open(p);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Io) << e.what();
      return std::string(e.what());
    }
    ADD_FAILURE() << p << " opened";
    return std::string();
  };
  EXPECT_EQ(message(tmp / "nope.gguf"), (tmp / "nope.gguf").string() + ": no such file or directory");
  EXPECT_EQ(message(tmp / "no" / "dir"), (tmp / "no" / "dir").string() + ": no such file or directory");
  const std::string formats =
      "; minigpt reads a directory with config.json, a GGUF file, an llm.c or a llama2.c checkpoint: this "
      "file "
      "starts with neither \"GGUF\", llm.c's magic 20240326 nor llama2.c's \"ak42\", and is no llama2.c "
      "legacy "
      "checkpoint";
  test::write_file(tmp / "notes.txt", "these are not the weights you are looking for\n");
  EXPECT_EQ(message(tmp / "notes.txt"), (tmp / "notes.txt").string() + ": not a model" + formats);
  test::write_file(tmp / "model.gguf", "<!DOCTYPE html><html>a download's error page</html>");
  EXPECT_EQ(message(tmp / "model.gguf"),
            (tmp / "model.gguf").string() + ": not a GGUF file (an incomplete download?)" + formats);
  fs::create_directories(tmp / "hf");
  write_random_model(tmp / "hf", test::tiny_config());
  EXPECT_EQ(message(tmp / "hf" / "model.safetensors"),
            (tmp / "hf" / "model.safetensors").string() +
                ": one file of a Hugging Face model, whose directory (with config.json) is the model" +
                formats);
  test::write_file(tmp / "pytorch_model.bin", std::string("PK\x03\x04"
                                                          "archive/data.pkl"));
  EXPECT_EQ(
      message(tmp / "pytorch_model.bin"),
      (tmp / "pytorch_model.bin").string() +
          ": a zip archive (a PyTorch checkpoint?), which minigpt does not read (nanoGPT's ckpt.pt converts "
          "with tools/convert_nanogpt.py)" +
          formats);
  EXPECT_EQ(message("/dev/null"),
            "/dev/null: neither a regular file nor a directory (a model is a directory "
            "with config.json, or a GGUF, llm.c or llama2.c file)");
  // A directory opens; loading it says what it lacks.
  fs::create_directories(tmp / "empty");
  EXPECT_EQ(ModelSource::open(tmp / "empty").format(), ModelFormat::Directory);
  expect_error([&] { Model::load(tmp / "empty"); }, ErrorKind::Io,
               {(tmp / "empty").string() +
                ": no config.json (a model directory holds config.json and model.safetensors)"});
}

TEST(Loader, MissingTensor) {
  TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());
  rewrite_weights(tmp.path(), [](auto& w, auto&) {
    std::erase_if(w, [](const SafeTensorWrite& t) { return t.name == "h.1.mlp.c_fc.bias"; });
  });
  expect_error([&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Shape,
               {"model.safetensors", "missing tensor 'h.1.mlp.c_fc.bias'", "[64]"});
}

TEST(Loader, ShapeDisagreesWithConfig) {
  TempDir tmp;
  Config c = test::tiny_config();
  write_random_model(tmp.path(), c);
  c.n_inner = 32;  // the file still has 64
  test::write_file(tmp / "config.json", config_to_json(c));
  expect_error([&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Shape,
               {"model.safetensors", "tensor 'h.0.mlp.c_fc.weight'", "shape [16, 64]", "implies [16, 32]"});
}

TEST(Loader, WrongDtype) {
  TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());
  rewrite_weights(tmp.path(), [](auto& w, auto&) {
    for (auto& t : w) {
      if (t.name == "ln_f.bias") t.dtype = StDtype::I32;
    }
  });
  expect_error([&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Shape,
               {"tensor 'ln_f.bias'", "dtype I32"});
}

TEST(Loader, UnexpectedTensorAndLegacyBuffers) {
  TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());
  static const float scalar = -1e4f;
  rewrite_weights(tmp.path(), [](auto& w, auto&) {
    w.push_back({"h.0.attn.masked_bias", StDtype::F32, {}, &scalar});
  });
  EXPECT_NO_THROW(Model::load(tmp.path(), LoadOptions::threads(1)));  // legacy buffers are ignored
  rewrite_weights(tmp.path(), [](auto& w, auto&) {
    w.push_back({"h.2.ln_1.bias", StDtype::F32, {}, &scalar});
  });
  expect_error([&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Shape,
               {"unexpected tensor 'h.2.ln_1.bias'"});
}

TEST(Loader, UntiedWithoutLmHead) {
  TempDir tmp;
  Config c = test::tiny_config();
  write_random_model(tmp.path(), c);
  c.tie_word_embeddings = false;
  test::write_file(tmp / "config.json", config_to_json(c));
  expect_error([&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Shape,
               {"config.json", "lm_head.weight"});
}

TEST(Loader, BadShardIndex) {
  TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());
  std::filesystem::rename(tmp / "model.safetensors", tmp / "model-00001-of-00001.safetensors");
  test::write_file(tmp / "model.safetensors.index.json",
                   R"({"weight_map": {"wte.weight": "../../etc/passwd"}})");
  expect_error([&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Format,
               {"index.json", "not a plain file name"});
  test::write_file(tmp / "model.safetensors.index.json",
                   R"({"weight_map": {"wte.weight": "model-00002-of-00002.safetensors"}})");
  expect_error([&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Io,
               {"model-00002-of-00002.safetensors", "cannot open"});
  test::write_file(tmp / "model.safetensors.index.json",
                   R"({"weight_map": {"wpe.bias": "model-00001-of-00001.safetensors"}})");
  expect_error([&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Format,
               {"'wpe.bias' is not in"});
  test::write_file(tmp / "model.safetensors.index.json", R"({"metadata": {}})");
  expect_error([&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Format, {"weight_map"});
}

TEST(Loader, SinusoidalTable) {
  // PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(...), evaluated directly here in long double.
  const int64_t n = 50, d = 12;
  auto pe = sinusoidal_positions(n, d);
  ASSERT_EQ(pe.size(), size_t(n * d));
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t k = 0; k < d; ++k) {
      const long double i2 = (long double)(k - k % 2);
      const long double angle = (long double)p / powl(10000.0L, i2 / (long double)d);
      const long double want = k % 2 == 0 ? sinl(angle) : cosl(angle);
      EXPECT_NEAR(pe[size_t(p * d + k)], double(want), 1e-6) << "p=" << p << " k=" << k;
    }
  }
}

TEST(Loader, SinusoidalModelRefusesAWpeTensor) {
  TempDir tmp;
  Config c = test::tiny_config();
  write_random_model(tmp.path(), c);  // learned: has wpe
  c.position_encoding = PositionEncoding::Sinusoidal;
  test::write_file(tmp / "config.json", config_to_json(c));
  expect_error([&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Config,
               {"sinusoidal", "wpe.weight"});
}

}  // namespace
}  // namespace minigpt
