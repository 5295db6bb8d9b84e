// Sampling and generation against transformers (processors.json, greedy.json from
// tools/reference/make_sampler_reference.py), and the generation loop's own guarantees.
#include <nlohmann/json.hpp>

#include "minigpt/generate.h"
#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

using json = nlohmann::json;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

json load_json(const std::string& file) {
  return json::parse(test::read_file(test::source_dir() / "tests" / "fixtures" / "generate" / file));
}

// -inf exactly where transformers has it; finite scores equal to float rounding.
void expect_scores(std::span<const float> got, const json& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (want[i].is_null()) {
      EXPECT_EQ(got[i], kNegInf) << what << " index " << i;
    } else {
      const float w = want[i].get<float>();
      EXPECT_NEAR(got[i], w, 1e-6 * std::max(1.0f, std::fabs(w))) << what << " index " << i;
    }
  }
}

TEST(Sampler, EachProcessorMatchesTransformers) {
  const json j = load_json("processors.json");
  ASSERT_GT(j["single"].size(), 20u);
  for (const auto& c : j["single"]) {
    std::vector<float> s = c["scores"].get<std::vector<float>>();
    const auto ids = c["input_ids"].get<std::vector<int32_t>>();
    const std::string name = c["processor"];
    const double p = c["param"];
    if (name == "repetition_penalty") processors::repetition_penalty(s, ids, float(p));
    if (name == "temperature") processors::temperature(s, float(p));
    if (name == "top_k") processors::top_k(s, int64_t(p));
    if (name == "top_p") processors::top_p(s, float(p));
    if (name == "min_p") processors::min_p(s, float(p));
    expect_scores(s, c["expected"], name + " " + std::to_string(p));
  }
}

// A GenerationConfig's sampling settings as the fixtures give them (transformers' defaults where left out;
// top_k's as the fixture's config had it).
SamplingParams params_of(const json& cfg, int64_t top_k) {
  SamplingParams p;
  p.temperature = cfg.value("temperature", 1.0f);
  p.top_k = cfg.value("top_k", top_k);
  p.top_p = cfg.value("top_p", 1.0f);
  p.min_p = cfg.value("min_p", 0.0f);
  p.repetition_penalty = cfg.value("repetition_penalty", 1.0f);
  return p;
}

TEST(Sampler, ProcessorChainInTransformersOrder) {
  const json j = load_json("processors.json");
  for (const auto& c : j["chains"]) {
    const json& cfg = c["config"];
    SamplingParams p = params_of(cfg, 50);
    const auto scores = c["scores"].get<std::vector<float>>();
    const auto ids = c["input_ids"].get<std::vector<int32_t>>();
    Sampler sampler(p, int64_t(scores.size()));
    expect_scores(sampler.process(scores, ids), c["expected"], cfg.dump());
  }
}

std::vector<std::pair<int32_t, float>> logit_bias(const json& j) {
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& e : j) out.emplace_back(e[0].get<int32_t>(), e[1].is_null() ? kNegInf : e[1].get<float>());
  return out;
}

// The logit bias, the OpenAI API's presence and frequency penalties (over the generated ids only) and the
// repetition penalty over the last n ids (--repeat-last-n) in the chain transformers builds around them
// (penalties.json, tools/reference/make_penalty_reference.py).
TEST(Sampler, BiasAndOpenAIPenaltiesInTransformersOrder) {
  const json j = load_json("penalties.json");
  ASSERT_GE(j["chains"].size(), 18u);
  for (const auto& c : j["chains"]) {
    SamplingParams p = params_of(c["config"], 0);
    p.repeat_last_n = c.value("repeat_last_n", int64_t(-1));
    p.presence_penalty = c["presence_penalty"];
    p.frequency_penalty = c["frequency_penalty"];
    p.logit_bias = logit_bias(c["logit_bias"]);
    const auto scores = c["scores"].get<std::vector<float>>();
    auto history = c["prompt"].get<std::vector<int32_t>>();
    const auto generated = c["generated"].get<std::vector<int32_t>>();
    history.insert(history.end(), generated.begin(), generated.end());
    Sampler sampler(p, int64_t(scores.size()));
    const std::string what = c["order"].dump() + " " + c.value("logit_bias", json()).dump();
    expect_scores(sampler.process(scores, history, generated), c["expected"], what);
    // Called again, the same: the counts are left zero between calls
    expect_scores(sampler.process(scores, history, generated), c["expected"], what + " (again)");
  }
}

TEST(Sampler, LogitBiasTakesTheLastBiasOfATokenAndRefusesBadOnes) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.logit_bias = {{2, kNegInf}, {0, 5.0f}, {2, 0.5f}, {0, kNegInf}};  // 2: +0.5 (3.5), 0: never
  Sampler s(p, 3);
  EXPECT_EQ(s.sample(logits, {}), 2);
  const auto got = s.process(logits, {});
  EXPECT_EQ(got[0], kNegInf);
  EXPECT_EQ(got[1], 2.0f);
  EXPECT_EQ(got[2], 3.5f);
  const auto refused = [](std::vector<std::pair<int32_t, float>> bias, int64_t vocab,
                          const std::string& needle) {
    SamplingParams q;
    q.logit_bias = std::move(bias);
    test::expect_error([&] { Sampler(q, vocab); }, ErrorKind::Argument, {"logit_bias: " + needle});
  };
  refused({{3, 1.0f}}, 3, "token id 3 is not in the vocabulary [0, 3)");
  refused({{-1, 1.0f}}, 3, "token id -1 is negative");
  refused({{1, INFINITY}}, 3, "the bias of token 1 must be finite or -inf, got inf");
  refused({{1, std::nanf("")}}, 3, "the bias of token 1 must be finite or -inf, got nan");
  refused({{0, kNegInf}, {1, kNegInf}, {2, kNegInf}}, 3, "every token of the vocabulary is -inf");
  SamplingParams q;
  q.presence_penalty = INFINITY;
  test::expect_error([&] { q.validate(); }, ErrorKind::Argument,
                     {"presence_penalty: must be a finite number"});
  q.presence_penalty = 0;
  q.frequency_penalty = std::nanf("");
  test::expect_error([&] { q.validate(); }, ErrorKind::Argument,
                     {"frequency_penalty: must be a finite number"});
}

TEST(Sampler, DrawsOnlyWhatTheFiltersKeepAndFollowsTheDistribution) {
  std::vector<float> logits = {0.0f, std::log(3.0f), -5.0f, std::log(6.0f), -9.0f};
  SamplingParams p;
  p.top_k = 3;  // keeps ids 0, 1, 3 with probabilities 0.1, 0.3, 0.6
  p.seed = 42;
  Sampler s(p, 5);
  std::vector<int> count(5);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++count[size_t(s.sample(logits, {}))];
  EXPECT_EQ(count[2] + count[4], 0);
  // Binomial standard deviations are <= 0.0035 here: 0.02 is more than five of them.
  EXPECT_NEAR(count[0] / double(n), 0.1, 0.02);
  EXPECT_NEAR(count[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(count[3] / double(n), 0.6, 0.02);
}

TEST(Sampler, BadParameters) {
  auto check = [](auto set, const std::string& needle) {
    SamplingParams p;
    set(p);
    test::expect_error([&] { p.validate(); }, ErrorKind::Argument, {needle});
  };
  check([](SamplingParams& p) { p.top_p = 1.5f; }, "top_p: ");
  check([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p: ");
  check([](SamplingParams& p) { p.temperature = -1.0f; }, "temperature: ");
  check([](SamplingParams& p) { p.temperature = std::nanf(""); }, "temperature: ");
  check([](SamplingParams& p) { p.top_k = -3; }, "top_k: ");
  check([](SamplingParams& p) { p.min_p = 2.0f; }, "min_p: ");
  check([](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty: ");
  // Infinity is refused, and the message says why (it said "must be >= 0", which inf is).
  check([](SamplingParams& p) { p.temperature = INFINITY; }, "temperature: must be a finite number >= 0");
  check([](SamplingParams& p) { p.repetition_penalty = INFINITY; },
        "repetition_penalty: must be a finite number > 0");
}

std::shared_ptr<const Model> fixture(const std::string& name, int threads = 2) {
  return Model::load(test::fixture_dir(name), LoadOptions::threads(threads));
}

GenerateOptions greedy(int64_t n) {
  GenerateOptions o;
  o.max_new_tokens = n;
  o.sampling.temperature = 0.0f;
  return o;
}

TEST(Generate, GreedyEqualsTransformersGenerate) {
  const json j = load_json("greedy.json");
  ASSERT_EQ(j["cases"].size(), 6u);
  for (const auto& c : j["cases"]) {
    Session s(fixture(c["model"]));
    const auto want = c["generated"].get<std::vector<int32_t>>();
    auto r = generate(s, nullptr, c["prompt"].get<std::vector<int32_t>>(), greedy(int64_t(want.size())));
    EXPECT_EQ(r.tokens, want) << c["model"];
    EXPECT_EQ(r.reason, StopReason::Length);
  }
}

// The shipped model's greedy text with the penalties and biases (its plain greedy text repeats itself, so
// every setting changes the tokens): transformers' generate() with the same settings.
TEST(Generate, PenaltiesAndBiasEqualTransformersGenerate) {
  const json j = load_json("penalties.json");
  ASSERT_EQ(j["greedy"].size(), 7u);
  auto model = Model::load(test::source_dir() / "models" / "shakespeare-char", LoadOptions::threads(2));
  std::vector<int32_t> plain;
  for (const auto& c : j["greedy"]) {
    const auto want = c["generated"].get<std::vector<int32_t>>();
    GenerateOptions o = greedy(int64_t(want.size()));
    o.sampling.presence_penalty = c["presence_penalty"];
    o.sampling.frequency_penalty = c["frequency_penalty"];
    o.sampling.repetition_penalty = c["repetition_penalty"];
    o.sampling.repeat_last_n = c["repeat_last_n"];
    o.sampling.logit_bias = logit_bias(c["logit_bias"]);
    Session s(model);
    auto r = generate(s, nullptr, c["prompt"].get<std::vector<int32_t>>(), o);
    EXPECT_EQ(r.tokens, want) << c.dump().substr(0, 120);
    if (plain.empty()) {
      plain = want;
    } else {
      EXPECT_NE(want, plain) << "a setting that changes nothing tests nothing";
    }
  }
}

TEST(Generate, TopK1IsGreedyAndASeedReproducesOnAnyThreadCount) {
  auto m1 = fixture("tiny", 1), m2 = fixture("tiny", 2);
  const std::vector<int32_t> prompt = {5, 17, 200};
  Session a(m2);
  const auto want = generate(a, nullptr, prompt, greedy(40)).tokens;
  GenerateOptions k1;
  k1.max_new_tokens = 40;
  k1.sampling.top_k = 1;
  k1.sampling.seed = 7;
  EXPECT_EQ(generate(a, nullptr, prompt, k1).tokens, want);

  GenerateOptions o;
  o.max_new_tokens = 40;
  o.sampling.temperature = 1.2f;
  o.sampling.top_k = 0;
  o.sampling.seed = 1234;
  Session s1(m1), s2(m2);
  const auto x = generate(s1, nullptr, prompt, o).tokens;
  EXPECT_EQ(generate(s2, nullptr, prompt, o).tokens, x);  // 2 threads, same seed
  EXPECT_EQ(generate(s1, nullptr, prompt, o).tokens, x);  // again
  o.sampling.seed = 1235;
  EXPECT_NE(generate(s1, nullptr, prompt, o).tokens, x);  // another seed, another text
  EXPECT_NE(x, want);
}

// A random byte-level model (vocab 256) written to a temp dir, so that tokens are text.
struct ByteModel {
  test::TempDir dir;
  std::shared_ptr<const Model> model;
  Tokenizer tok = Tokenizer::byte_level();
  explicit ByteModel(int64_t eos = -1, int64_t n_ctx = 24) {
    Config c = test::tiny_config();
    c.n_vocab = 256;
    c.n_ctx = n_ctx;
    c.eos_token_id = eos;
    c.bos_token_id = 10;
    write_random_model(dir.path(), c);
    model = Model::load(dir.path(), LoadOptions::threads(1));
  }
};

TEST(Generate, StopStringsCutTheTextAndStreamingShowsNothingPastThem) {
  ByteModel bm;
  Session s(bm.model);
  const std::vector<int32_t> prompt = {'a', 'b'};
  const auto full = generate(s, &bm.tok, prompt, greedy(20));
  // Random weights emit bytes that are not UTF-8 too (shown as U+FFFD): take three whole characters.
  std::vector<size_t> starts;
  for (size_t i = 0; i < full.text.size(); ++i) {
    if ((uint8_t(full.text[i]) & 0xC0) != 0x80) starts.push_back(i);
  }
  ASSERT_GE(starts.size(), 12u);
  const std::string stop = full.text.substr(starts[7], starts[10] - starts[7]);  // spans three tokens or more
  GenerateOptions o = greedy(20);
  o.stop = {"\x01never\x02", stop};
  std::string streamed;
  auto r = generate(s, &bm.tok, prompt, o, {nullptr, [&](std::string_view t) { streamed += t; }, nullptr});
  EXPECT_EQ(r.reason, StopReason::Stop);
  EXPECT_EQ(r.text, full.text.substr(0, full.text.find(stop)));
  EXPECT_EQ(streamed, r.text);
  // Without a stop, the streamed text is the whole text.
  streamed.clear();
  auto r2 = generate(s, &bm.tok, prompt, greedy(20),
                     {nullptr, [&](std::string_view t) { streamed += t; }, nullptr});
  EXPECT_EQ(streamed, full.text);
  EXPECT_EQ(r2.reason, StopReason::Length);
  o.stop = {""};
  test::expect_error([&] { generate(s, &bm.tok, prompt, o); }, ErrorKind::Argument, {"stop: "});
}

TEST(Generate, EosEndsGenerationUnlessIgnored) {
  std::vector<int32_t> full;
  {
    ByteModel bm;
    Session s(bm.model);
    full = generate(s, &bm.tok, {'x'}, greedy(12)).tokens;
  }
  // Same weights (the generator is counter-based), now with the 6th generated token as EOS.
  const int32_t eos = full[5];
  const size_t first = size_t(std::find(full.begin(), full.end(), eos) - full.begin());
  ByteModel bm(eos);
  Session s(bm.model);
  auto r = generate(s, &bm.tok, {'x'}, greedy(12));
  EXPECT_EQ(r.reason, StopReason::Eos);
  EXPECT_EQ(r.tokens, std::vector<int32_t>(full.begin(), full.begin() + long(first)));
  GenerateOptions o = greedy(12);
  o.ignore_eos = true;
  EXPECT_EQ(generate(s, &bm.tok, {'x'}, o).tokens, full);
}

TEST(Generate, MaxNewTokensEmptyPromptAndBadValues) {
  ByteModel bm;
  Session s(bm.model);
  auto r = generate(s, &bm.tok, {}, greedy(5));
  EXPECT_EQ(r.prompt, std::vector<int32_t>{10});  // BOS from config.json
  EXPECT_EQ(r.tokens.size(), 5u);
  GenerateOptions o = greedy(0);
  test::expect_error([&] { generate(s, &bm.tok, {1}, o); }, ErrorKind::Argument, {"max_new_tokens: "});
  o = greedy(-5);
  test::expect_error([&] { generate(s, &bm.tok, {1}, o); }, ErrorKind::Argument, {"max_new_tokens: "});
  // Generated text is UTF-8, so a stop string that is not could never match: refused, not ignored.
  o = greedy(3);
  o.stop = {"ok", std::string("a\xe2\x82", 3)};
  test::expect_error([&] { generate(s, &bm.tok, {1}, o); }, ErrorKind::Argument,
                     {"stop: ", "not valid UTF-8 at byte offset 1"});
  // A model without BOS cannot start from nothing.
  Session t(fixture("tiny"));
  test::expect_error([&] { generate(t, nullptr, {}, greedy(3)); }, ErrorKind::Argument, {"no BOS token"});
}

TEST(Generate, ContextOverflowModes) {
  ByteModel bm;  // n_ctx 24
  Session s(bm.model);
  std::vector<int32_t> long_prompt(30);
  for (size_t i = 0; i < long_prompt.size(); ++i) long_prompt[i] = int32_t('a' + i % 26);
  test::expect_error([&] { generate(s, &bm.tok, long_prompt, greedy(4)); }, ErrorKind::Argument,
                     {"30 tokens, longer than the model's context of 24"});

  GenerateOptions o = greedy(4);
  o.overflow = ContextOverflow::Truncate;
  auto r = generate(s, &bm.tok, long_prompt, o);
  EXPECT_EQ(r.prompt, std::vector<int32_t>(long_prompt.end() - 20, long_prompt.end()));  // room for 4 new
  EXPECT_EQ(r.tokens, generate(s, &bm.tok, r.prompt, greedy(4)).tokens);

  // Default: generation stops when the context is full (4 + 20 evaluated, the 21st sampled).
  const std::vector<int32_t> prompt = {'q', 'r', 's', 't'};
  r = generate(s, &bm.tok, prompt, greedy(40));
  EXPECT_EQ(r.reason, StopReason::Context);
  EXPECT_EQ(r.tokens.size(), 21u);

  // Slide: the last 12 tokens are evaluated again at positions 0..11 and generation goes on. What follows
  // the slide is what a fresh session generates from those 12 tokens.
  o = greedy(30);
  o.overflow = ContextOverflow::Slide;
  auto slid = generate(s, &bm.tok, prompt, o);
  EXPECT_EQ(slid.reason, StopReason::Length);
  EXPECT_EQ(slid.tokens.size(), 30u);
  EXPECT_EQ(slid.slides, 1);
  EXPECT_EQ(std::vector<int32_t>(slid.tokens.begin(), slid.tokens.begin() + 21), r.tokens);
  std::vector<int32_t> history = prompt;
  history.insert(history.end(), slid.tokens.begin(), slid.tokens.begin() + 21);
  const std::vector<int32_t> kept(history.end() - 12, history.end());
  const auto after = generate(s, &bm.tok, kept, greedy(9)).tokens;
  EXPECT_EQ(std::vector<int32_t>(slid.tokens.begin() + 21, slid.tokens.end()), after);
}

TEST(Generate, LogprobsComeFromTheRawDistribution) {
  auto m = fixture("tiny-untied");
  Session s(m);
  GenerateOptions o = greedy(3);
  o.top_logprobs = 4;
  std::vector<GeneratedToken> toks;
  const std::vector<int32_t> prompt = {1, 2, 3};
  generate(s, nullptr, prompt, o, {[&](const GeneratedToken& t) { toks.push_back(t); }, nullptr, nullptr});
  ASSERT_EQ(toks.size(), 3u);
  Session ref(m);
  auto logits = ref.eval(prompt);
  double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
  for (float v : logits) sum += std::exp(double(v) - mx);
  EXPECT_NEAR(toks[0].logprob, double(logits[size_t(toks[0].id)]) - mx - std::log(sum), 1e-9);
  ASSERT_EQ(toks[0].top.size(), 4u);
  EXPECT_EQ(toks[0].top[0].first, toks[0].id);  // greedy picks the most likely
  for (size_t i = 1; i < 4; ++i) EXPECT_LE(toks[0].top[i].second, toks[0].top[i - 1].second);
}

}  // namespace
}  // namespace minigpt
