// The architecture descriptions: what the loader, inspect and random models read.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "arch/arch.h"
#include "formats/safetensors.h"
#include "minigpt/error.h"
#include "minigpt/model.h"
#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

using test::expect_error;
using test::TempDir;

TEST(Arch, Gpt2DescribesEveryTensorOnceWithItsShape) {
  Config c = test::tiny_config();
  const arch::Architecture* a = arch::find("gpt2");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(arch::find("falcon"), nullptr);
  const auto descs = a->tensors(c);
  std::set<std::string> names;
  std::set<std::pair<int, int64_t>> roles;
  for (const auto& d : descs) {
    ASSERT_FALSE(d.names.empty());
    for (const auto& n : d.names) EXPECT_TRUE(names.insert(n).second) << n << " appears twice";
    if (d.role != arch::Role::Ignored) {
      EXPECT_TRUE(roles.insert({int(d.role), d.layer}).second) << d.names[0];
    }
    if (d.role != arch::Role::Ignored && !d.optional) {
      EXPECT_FALSE(d.shape.empty()) << d.names[0];
    }
  }
  // 2 + 12 per layer + 2 + the LM head (optional when tied); q | k | v of n_head heads each.
  EXPECT_EQ(roles.size(), size_t(2 + 12 * c.n_layer + 2 + 1));
  for (const auto& d : descs) {
    if (d.role == arch::Role::AttnQkv) {
      EXPECT_EQ(d.shape, (std::vector<int64_t>{16, 48}));
    }
    if (d.role == arch::Role::Output) {
      EXPECT_TRUE(d.optional);  // tied
    }
  }
  c.tie_word_embeddings = false;
  for (const auto& d : a->tensors(c)) {
    if (d.role == arch::Role::Output) {
      EXPECT_FALSE(d.optional);
    }
  }
  c.position_encoding = PositionEncoding::Sinusoidal;
  for (const auto& d : a->tensors(c)) EXPECT_NE(d.role, arch::Role::PosEmbd);
}

TEST(Arch, GgufNamesAreLlamaCpps) {
  EXPECT_EQ(arch::gguf_name(arch::Role::TokenEmbd, -1), "token_embd.weight");
  EXPECT_EQ(arch::gguf_name(arch::Role::AttnQkvBias, 3), "blk.3.attn_qkv.bias");
  EXPECT_EQ(arch::gguf_name(arch::Role::FfnDown, 0), "blk.0.ffn_down.weight");
  EXPECT_EQ(arch::gguf_name(arch::Role::OutputNorm, -1), "output_norm.weight");
  EXPECT_EQ(arch::gguf_name(arch::Role::Output, -1), "output.weight");
}

// What generic code (the converter, the loaders, random models) asks the table instead of naming a family.
TEST(Arch, TheTableAnswersForTheFamilies) {
  EXPECT_EQ(Config{}.arch, "gpt2");  // the table's first
  EXPECT_EQ(std::string(arch::llmc_architecture().model_type), "gpt2");
  EXPECT_EQ(
      arch::gguf_writable_model_types(),
      "gpt2, gpt_neox, gpt_bigcode, llama, mistral, qwen2, qwen3, gemma3_text, gemma2, smollm3 and phi3");
  EXPECT_EQ(arch::known_gguf_archs_phrase(),
            "gpt2, gptneox, starcoder, llama, qwen2, qwen3, gemma3, gemma2, smollm3 and phi3");
  for (const char* m : {"gpt2", "gpt_neox", "gpt_bigcode"}) {
    const arch::Architecture* a = arch::find(m);
    ASSERT_NE(a, nullptr) << m;
    EXPECT_TRUE(a->has_gguf()) << m;
    EXPECT_NE(a->check_gguf_form, nullptr) << m;
    EXPECT_NE(a->write_gguf, nullptr) << m;
    EXPECT_NE(a->gguf_tensor_name, nullptr) << m;
    EXPECT_EQ(arch::find_gguf(a->gguf_arch), a) << m;
    // Every key a family writes is its own (prefixed by its GGUF name) or general.file_type.
    Config c = test::tiny_config();
    c.arch = m;
    arch::GgufKv kv;
    a->write_gguf(c, nlohmann::json::object(), "config.json", kv);
    EXPECT_FALSE(kv.empty()) << m;
    for (const auto& [key, value] : kv) {
      EXPECT_TRUE(key.rfind(std::string(a->gguf_arch) + ".", 0) == 0 || key == "general.file_type") << key;
    }
  }
  const arch::Architecture* opt = arch::find("opt");
  ASSERT_NE(opt, nullptr);
  EXPECT_FALSE(opt->has_gguf());
  EXPECT_EQ(opt->write_gguf, nullptr);

  const std::optional<Config> medium = arch::published_shape("gpt2-medium");
  ASSERT_TRUE(medium.has_value());
  EXPECT_EQ(medium->arch, "gpt2");
  EXPECT_EQ(medium->n_layer, 24);
  EXPECT_EQ(medium->n_head, 16);
  EXPECT_EQ(medium->n_embd, 1024);
  EXPECT_EQ(medium->n_inner, 4096);
  EXPECT_FALSE(arch::published_shape("gpt5").has_value());
  EXPECT_EQ(arch::published_shape_names(), "gpt2, gpt2-medium, gpt2-large, gpt2-xl, distilgpt2");
}

// Random models are built from the description: a model written to disk loads back with the same
// tensors, and the config round-trips through config.json.
TEST(Arch, RandomModelsFollowTheDescription) {
  const Config c = test::tiny_config();
  size_t described = 0;
  for (const auto& d : arch::find("gpt2")->tensors(c)) described += d.optional ? 0 : 1;
  EXPECT_EQ(random_tensors(c).size(), described);
  TempDir tmp;
  write_random_model(tmp.path(), c);
  const auto f = SafeTensorsFile::open(tmp / "model.safetensors");
  EXPECT_EQ(f->tensors().size(), described);
  const Config back = load_config(tmp / "config.json");
  EXPECT_EQ(back.arch, "gpt2");
  EXPECT_EQ(back.n_kv_head, back.n_head);
  EXPECT_FALSE(back.parallel_residual);
}

// inspect() checks what load() checks, without reading a weight.
TEST(Arch, InspectRefusesWhatLoadRefuses) {
  TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());
  const ModelSummary s = Model::inspect(tmp.path());
  EXPECT_EQ(s.n_params, Model::load(tmp.path(), LoadOptions::threads(1))->n_params());
  test::rewrite_weights(tmp.path(), [](auto& w, auto&) {
    std::erase_if(w, [](const SafeTensorWrite& t) { return t.name == "h.1.mlp.c_fc.bias"; });
  });
  expect_error([&] { Model::inspect(tmp.path()); }, ErrorKind::Shape,
               {"missing tensor 'h.1.mlp.c_fc.bias'", "[64]"});
  expect_error([&] { Model::load(tmp.path(), LoadOptions::threads(1)); }, ErrorKind::Shape,
               {"missing tensor 'h.1.mlp.c_fc.bias'", "[64]"});
}

// Both spellings of a tensor in one checkpoint is ambiguous, never a silent pick.
TEST(Arch, BothSpellingsOfATensorAreRefused) {
  TempDir tmp;
  write_random_model(tmp.path(), test::tiny_config());
  test::rewrite_weights(tmp.path(), [](auto& w, auto&) {
    for (const SafeTensorWrite& t : std::vector<SafeTensorWrite>(w)) {
      if (t.name == "ln_f.bias") {
        SafeTensorWrite copy = t;
        copy.name = "transformer.ln_f.bias";
        w.push_back(copy);
      }
    }
  });
  expect_error([&] { Model::inspect(tmp.path()); }, ErrorKind::Format,
               {"'ln_f.bias' and 'transformer.ln_f.bias'", "output_norm_bias"});
}

// Variants the forward pass does not compute yet are refused by name, not run wrongly.
TEST(Arch, UnimplementedVariantsAreRefused) {
  Config c = test::tiny_config();
  c.position_encoding = PositionEncoding::Rotary;
  c.rotary_dim = 0;
  expect_error([&] { c.validate("cfg"); }, ErrorKind::Config, {"cfg", "rotary dimensions per head (0)"});
  c.rotary_dim = c.head_dim() + 2;
  expect_error([&] { c.validate("cfg"); }, ErrorKind::Config, {"cfg", "must be even and in [2, head_dim"});
  c.rotary_dim = 2;
  c.rope_theta = 1.0f;
  expect_error([&] { c.validate("cfg"); }, ErrorKind::Config, {"rotary base (rope_theta)"});
  c = test::tiny_config();
  c.n_kv_head = 3;  // n_head 2
  expect_error([&] { c.validate("cfg"); }, ErrorKind::Config, {"n_kv_head"});
  c.n_kv_head = 0;
  c.arch = "falcon";
  expect_error([&] { c.validate("cfg"); }, ErrorKind::Unsupported,
               {"architecture 'falcon'", "\"gpt2\", \"gpt_neox\", \"opt\", \"gpt_bigcode\", \"llama\""});
}

// Phi-3's config.json: fused projections, partial rotary dimensions and LongRoPE (rope_parameters or the
// older rope_scaling, the top-level original_max_position_embeddings first, the attention factor from the
// contexts' ratio where not given); what it cannot be is refused in one line naming the key.
TEST(Arch, Phi3ReadsLongRopeAndRefusesBadFactors) {
  const nlohmann::json base =
      nlohmann::json::parse(test::read_file(test::fixture_dir("phi3-partial-tied") / "config.json"));
  const Config c = parse_config(base.dump(), "config.json");
  EXPECT_EQ(c.arch, "phi3");
  EXPECT_EQ(c.rotary_dim, 12);  // int(16 * 0.75)
  EXPECT_EQ(c.ffn, FfnKind::Gated);
  EXPECT_EQ(c.ffn_up_width(), 256);
  EXPECT_EQ(c.rope_scaling.kind, RopeScalingKind::LongRope);
  EXPECT_EQ(c.rope_scaling.original_context, 16);
  EXPECT_EQ(c.rope_scaling.long_factor.size(), 6u);
  EXPECT_FLOAT_EQ(c.rope_scaling.attention_factor, float(std::sqrt(1 + std::log(8.0) / std::log(16.0))));
  // The short table is 1 / (short_factor * theta^(2i / d)), the long one with long_factor.
  const std::vector<float> s = c.rope_inv_freq(), l = c.rope_inv_freq(true);
  ASSERT_EQ(s.size(), 6u);
  EXPECT_FLOAT_EQ(s[5], 1.0f / (1.6f * std::pow(10000.0f, 10.0f / 12.0f)));
  EXPECT_FLOAT_EQ(l[5], 1.0f / (8.0f * std::pow(10000.0f, 10.0f / 12.0f)));
  // config.json written back reads as the same model.
  const Config back = parse_config(config_to_json(c), "back.json");
  EXPECT_EQ(back.rotary_dim, c.rotary_dim);
  EXPECT_EQ(back.rope_scaling.short_factor, c.rope_scaling.short_factor);
  EXPECT_EQ(back.rope_scaling.long_factor, c.rope_scaling.long_factor);
  EXPECT_EQ(back.rope_scaling.original_context, 16);
  EXPECT_EQ(back.rope_scaling.attention_factor, c.rope_scaling.attention_factor);
  EXPECT_EQ(back.tie_word_embeddings, true);

  // transformers 4's rope_scaling with type "su", the factor given: attention factor from it.
  nlohmann::json old = base;
  old["rope_scaling"] = old["rope_parameters"];
  old.erase("rope_parameters");
  old["rope_scaling"].erase("rope_type");
  old["rope_scaling"]["type"] = "su";
  old["rope_scaling"]["factor"] = 4.0;
  const Config su = parse_config(old.dump(), "config.json");
  EXPECT_EQ(su.rope_scaling.kind, RopeScalingKind::LongRope);
  EXPECT_FLOAT_EQ(su.rope_scaling.attention_factor, float(std::sqrt(1 + std::log(4.0) / std::log(16.0))));

  auto bad = [&](const std::function<void(nlohmann::json&)>& edit, ErrorKind kind,
                 std::vector<std::string> parts) {
    nlohmann::json j = base;
    edit(j);
    expect_error([&] { parse_config(j.dump(), "config.json"); }, kind, parts);
  };
  bad([](auto& j) { j["rope_parameters"]["long_factor"].erase(0); }, ErrorKind::Config,
      {"config.json: rope_scaling.long_factor has 5 values for 6 rotary pairs"});
  bad([](auto& j) { j["rope_parameters"]["short_factor"][2] = -1.0; }, ErrorKind::Config,
      {"config.json: rope_scaling.short_factor[2] = -1", "is not a finite number > 0"});
  bad([](auto& j) { j["rope_parameters"]["short_factor"][1] = 1e300; }, ErrorKind::Config,
      {"rope_scaling.short_factor[1] = inf is not a finite number > 0"});
  bad([](auto& j) { j["rope_parameters"]["long_factor"] = "8"; }, ErrorKind::Config,
      {"rope_parameters.long_factor must be a list of numbers"});
  bad([](auto& j) { j["rope_parameters"].erase("short_factor"); }, ErrorKind::Config,
      {"rope_parameters (longrope) needs 'short_factor'"});
  bad([](auto& j) { j["rope_parameters"]["rope_type"] = "yarn"; }, ErrorKind::Unsupported,
      {"rope_type 'yarn' is not supported for phi3"});
  bad([](auto& j) { j["rope_parameters"]["partial_rotary_factor"] = 0.7; }, ErrorKind::Config,
      {"rotary dimensions per head (11) must be even"});
}

}  // namespace
}  // namespace minigpt

namespace minigpt {
namespace {

// The new families' config.json, wrong in each key they add: refused in one line naming the key (the
// fixture's own config.json, one field changed).
TEST(Arch, BlockFamilyKeysOutOfShapeAreRefusedByName) {
  auto fixture = [](const char* name) {
    return nlohmann::json::parse(test::read_file(test::fixture_dir(name) / "config.json"));
  };
  auto refused = [](const nlohmann::json& j, ErrorKind kind, std::vector<std::string> words) {
    test::expect_error([&] { parse_config(j.dump(), "config.json").validate("config.json"); }, kind,
                       std::move(words));
  };
  nlohmann::json g = fixture("gemma3-swa");
  g["layer_types"].erase(0);
  refused(g, ErrorKind::Config, {"config.json", "layer_types must be a list of num_hidden_layers = 6"});
  g = fixture("gemma3-swa");
  g["layer_types"][2] = "chunked_attention";
  refused(g, ErrorKind::Config, {"layer_types[2] is 'chunked_attention'"});
  g = fixture("gemma3-swa");
  g["sliding_window"] = 0;
  refused(g, ErrorKind::Config, {"sliding_window must be >= 1"});
  g = fixture("gemma3-swa");
  g["rope_parameters"]["sliding_attention"]["rope_type"] = "yarn";
  refused(g, ErrorKind::Unsupported, {"rope_parameters.sliding_attention", "rope_type 'yarn'"});
  g = fixture("gemma2-softcap");
  g["attn_logit_softcapping"] = -1;
  refused(g, ErrorKind::Config, {"attn_logit_softcapping must be in (0, 1e6]"});
  g = fixture("gemma3-swa");
  g["use_bidirectional_attention"] = true;
  refused(g, ErrorKind::Unsupported, {"use_bidirectional_attention"});
  nlohmann::json s = fixture("smollm3-nope");
  s["no_rope_layers"] = {1, 1, 1};
  refused(s, ErrorKind::Config, {"no_rope_layers must be a list of num_hidden_layers = 8"});
  s = fixture("smollm3-nope");
  s["no_rope_layers"][0] = 2;
  refused(s, ErrorKind::Config, {"no_rope_layers must hold 0 or 1, got 2"});
}

}  // namespace
}  // namespace minigpt
