// Speculative decoding (minigpt/speculative.h): the output is plain decoding's, token for token, for every
// family, both draft sources and k from 1 to 8; sampled output keeps the model's distribution (a chi-square
// test that fails when the accept rule is broken); drafts of another vocabulary are refused.
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "cpu/cpu.h"
#include "minigpt/generate.h"
#include "minigpt/model.h"
#include "minigpt/registry.h"
#include "minigpt/session.h"
#include "minigpt/speculative.h"
#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

using test::expect_error;
using test::fixture_dir;
using test::TempDir;

// One fixture per family (and the layer kinds that make a cut-back cache delicate: a sliding window shorter
// than the test sequence, a ring of windowed layers, NoPE layers).
const char* const kFamilies[] = {"tiny",        "bigcode-mqa",    "neox-parallel",       "opt-prenorm",
                                 "llama-gqa62", "mistral-window", "qwen2-bias",          "qwen3-headdim",
                                 "gemma3-swa",  "gemma2-window",  "phi3-longrope-short", "smollm3-nope"};

// 50 prompts of random ids, each with a repeated stretch so that prompt lookup finds n-grams to draft from.
std::vector<std::vector<int32_t>> prompts(int64_t n_vocab, int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, int32_t(n_vocab - 1));
  std::vector<std::vector<int32_t>> out;
  for (int64_t i = 0; i < count; ++i) {
    std::vector<int32_t> p(size_t(4 + i % 9));
    for (auto& t : p) t = id(rng);
    const std::vector<int32_t> again(p.begin(), p.begin() + ptrdiff_t(p.size() / 2 + 1));
    p.insert(p.end(), again.begin(), again.end());
    out.push_back(std::move(p));
  }
  return out;
}

GenerateOptions greedy(int64_t n) {
  GenerateOptions o;
  o.max_new_tokens = n;
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  return o;
}

// For each family: plain greedy tokens, then the same prompts with prompt lookup and with the model's own
// F16 copy drafting, k = 1 + prompt % 8. Greedy means equal tokens, so any difference is a failure.
TEST(Speculative, GreedyEqualsPlainForEveryFamilyBothSourcesAndK1To8) {
  for (const char* family : kFamilies) {
    SCOPED_TRACE(family);
    auto model = Model::load(fixture_dir(family));
    LoadOptions lo;
    lo.weight_dtype = DType::F16;
    auto draft = Model::load(fixture_dir(family), lo);
    const int64_t n_ctx = std::min<int64_t>(model->config().n_ctx, 64);
    SessionOptions so;
    so.n_ctx = n_ctx;
    Session session(model, so);
    int64_t drafted = 0, accepted = 0;
    const auto ps = prompts(model->config().n_vocab, 50, 7);
    for (size_t i = 0; i < ps.size(); ++i) {
      GenerateOptions o = greedy(std::min<int64_t>(24, n_ctx - int64_t(ps[i].size())));
      const GenerateResult plain = generate(session, nullptr, ps[i], o);
      for (const bool lookup : {true, false}) {
        GenerateOptions s = o;
        s.speculative.draft_max = 1 + int64_t(i % 8);
        s.speculative.draft_min = 1;
        if (lookup) {
          s.speculative.prompt_lookup = true;
        } else {
          s.speculative.draft_model = draft;
        }
        const GenerateResult r = generate(session, nullptr, ps[i], s);
        ASSERT_EQ(r.tokens, plain.tokens) << "prompt " << i << (lookup ? ", prompt lookup" : ", draft model")
                                          << ", k " << s.speculative.draft_max;
        EXPECT_EQ(int64_t(r.tokens.size()) - 1, r.decode_steps + r.accepted);
        drafted += r.drafted;
        accepted += r.accepted;
      }
    }
    // The drafts were verified, not skipped: some were drafted and some kept.
    EXPECT_GT(drafted, 0);
    EXPECT_GT(accepted, 0);
  }
}

// The draws are plain decoding's: with the same seed, sampling with every processor gives the same tokens.
TEST(Speculative, SampledEqualsPlainWithTheSameSeed) {
  auto model = Model::load(fixture_dir("llama-gqa62"));
  Session session(model);
  const auto ps = prompts(model->config().n_vocab, 10, 11);
  for (size_t i = 0; i < ps.size(); ++i) {
    GenerateOptions o;
    o.max_new_tokens = 20;
    o.ignore_eos = true;
    o.sampling.temperature = 0.7f;
    o.sampling.top_k = 20;
    o.sampling.top_p = 0.9f;
    o.sampling.repetition_penalty = 1.1f;
    o.sampling.seed = 1000 + i;
    const GenerateResult plain = generate(session, nullptr, ps[i], o);
    o.speculative.prompt_lookup = true;
    o.speculative.draft_min = 1;
    const GenerateResult r = generate(session, nullptr, ps[i], o);
    EXPECT_EQ(r.tokens, plain.tokens) << "prompt " << i;
  }
}

// Drafts these tokens, always: a proposal the model often disagrees with.
class FixedDrafter : public Drafter {
 public:
  explicit FixedDrafter(std::vector<int32_t> d) : d_(std::move(d)) {}
  void draft(int64_t, std::span<const int32_t>, int64_t k, std::vector<int32_t>& out) override {
    out.assign(d_.begin(), d_.begin() + std::min<ptrdiff_t>(k, ptrdiff_t(d_.size())));
  }

 private:
  std::vector<int32_t> d_;
};

// P(X > x) for X ~ chi-square with `df` degrees of freedom: the regularised upper incomplete gamma
// Q(df / 2, x / 2), by its series below a + 1 and its continued fraction above (Numerical Recipes, 6.2).
double chi_square_sf(double x, double df) {
  const double a = df / 2, z = x / 2;
  if (z <= 0) return 1.0;
  const double lg = std::lgamma(a);
  if (z < a + 1) {
    double sum = 1 / a, term = sum;
    for (int n = 1; n < 1000; ++n) {
      term *= z / (a + n);
      sum += term;
      if (term < sum * 1e-15) break;
    }
    return 1 - sum * std::exp(-z + a * std::log(z) - lg);
  }
  double b = z + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    c = b + an / c;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::abs(del - 1) < 1e-15) break;
  }
  return std::exp(-z + a * std::log(z) - lg) * h;
}

// The p-value of a chi-square test that two samples of categories come from one distribution (a 2 x m
// contingency table; categories with fewer than 10 observations in both samples together are pooled).
double homogeneity_p(const std::map<std::vector<int32_t>, int64_t>& a,
                     const std::map<std::vector<int32_t>, int64_t>& b) {
  std::map<std::vector<int32_t>, std::pair<double, double>> cells;
  for (const auto& [k, n] : a) cells[k].first += double(n);
  for (const auto& [k, n] : b) cells[k].second += double(n);
  std::vector<std::pair<double, double>> table;
  std::pair<double, double> pooled{0, 0};
  for (const auto& [k, c] : cells) {
    if (c.first + c.second < 10) {
      pooled.first += c.first, pooled.second += c.second;
    } else {
      table.push_back(c);
    }
  }
  if (pooled.first + pooled.second > 0) table.push_back(pooled);
  double na = 0, nb = 0;
  for (const auto& c : table) na += c.first, nb += c.second;
  double x2 = 0;
  for (const auto& [ca, cb] : table) {
    const double col = ca + cb, ea = col * na / (na + nb), eb = col * nb / (na + nb);
    x2 += (ca - ea) * (ca - ea) / ea + (cb - eb) * (cb - eb) / eb;
  }
  return chi_square_sf(x2, double(table.size() - 1));
}

// The rule without its comparison: every draft is taken as if the model had sampled it, so each row after the
// first is read whatever was sampled before it. What a broken verifier would do; the test below must see it.
bool broken_step(Session& session, Generator& gen, Drafter& drafter) {
  std::vector<int32_t> d;
  drafter.draft(0, gen.history(), std::min<int64_t>(2, gen.remaining() - 1), d);
  std::vector<int32_t> step{gen.next()};
  step.insert(step.end(), d.begin(), d.end());
  const int64_t V = session.model().config().n_vocab;
  const std::span<const float> rows = session.eval_all(step);
  bool going = true;
  for (size_t i = 0; i <= d.size() && going; ++i) going = gen.push(rows.subspan(i * size_t(V), size_t(V)));
  return going;
}

// Temperature 1 (top-k 4, so that 20,000 runs fill each cell of the 3-token joint distribution): the first 3
// sampled tokens with speculation follow plain decoding's distribution (other seeds than plain's: two
// independent samples), and a broken accept rule is told apart by the same test.
TEST(Speculative, SampledDistributionMatchesPlainAndABrokenRuleFailsTheTest) {
  TempDir tmp;
  Config c = test::tiny_config();
  write_random_model(tmp.path(), c);
  auto model = Model::load(tmp.path());
  Session session(model);
  const std::vector<int32_t> prompt{3, 17, 5};
  GenerateOptions o;
  o.max_new_tokens = 3;
  o.ignore_eos = true;
  o.sampling.temperature = 1.0f;
  o.sampling.top_k = 4;
#if MINIGPT_TEST_ASAN
  const int64_t runs = 4000;  // the sanitizers' build checks the memory; the Release build, the statistics
#else
  const int64_t runs = 20000;
#endif
  auto drafter = std::make_shared<FixedDrafter>(std::vector<int32_t>{7, 7});
  SpeculativeOptions so;
  so.draft_max = 2;
  so.draft_min = 2;
  std::map<std::vector<int32_t>, int64_t> plain, spec, broken;
  for (int64_t i = 0; i < runs; ++i) {
    o.sampling.seed = uint64_t(i);
    ++plain[generate(session, nullptr, prompt, o).tokens];
    for (const bool right : {true, false}) {
      o.sampling.seed = uint64_t(runs + i);
      session.reset();
      Generator gen(c, nullptr, o, prompt);
      Speculator speculator(drafter, so);
      bool going = gen.push(session.eval(prompt));
      while (going) going = right ? speculator.step(session, 0, gen) : broken_step(session, gen, *drafter);
      ++(right ? spec : broken)[gen.result().tokens];
    }
  }
  const double p_spec = homogeneity_p(plain, spec), p_broken = homogeneity_p(plain, broken);
  EXPECT_GT(p_spec, 0.01) << "speculative sampling differs from plain sampling";
  EXPECT_LT(p_broken, 0.01) << "the test cannot tell a broken accept rule apart";
  // The fixed draft was kept in some runs and refused in others: both branches of the rule ran.
  int64_t with_draft = 0;
  for (const auto& [toks, n] : spec) with_draft += toks.size() > 1 && toks[1] == 7 ? n : 0;
  EXPECT_GT(with_draft, 0);
  EXPECT_LT(with_draft, runs);
}

// A speculative step's queries are computed as decode computes each alone, bit for bit: a run of 9 queries at
// depths past 512 (where decode cuts a query's keys into chunks for the threads) against 9 decode steps, with
// 2 KV heads (so a lone decode step has fewer heads than threads x 4 and splits, a step of 9 would not).
TEST(Speculative, AttentionOfAStepsQueriesEqualsEachAloneBitForBit) {
  auto be = make_backend("cpu", BackendOptions{2, 0, std::nullopt, Bf16Math::Auto});
  const int64_t H = 4, Hkv = 2, D = 64, KV = Hkv * D, T = 9;
  for (const int64_t pos0 : {5, 700}) {
    const int64_t S = pos0 + T;
    const auto q = test::randn(size_t(T * H * D), 1), k = test::randn(size_t(S * KV), 2),
               v = test::randn(size_t(S * KV), 3);
    auto view = [](const std::vector<float>& x, int64_t rows, int64_t cols) {
      return make_tensor(const_cast<float*>(x.data()), DType::F32, Device::Host, rows, cols);
    };
    const std::vector<int32_t> no_ids(size_t(S), 0);
    const auto cache = be->make_kv_cache(KvCacheSpec{1, Hkv, D, S, 1});
    const SeqRun before{0, 0, pos0, 0};
    be->store_kv(*cache, 0, view(k, pos0, KV), view(v, pos0, KV), Step{no_ids.data(), pos0, {&before, 1}});
    std::vector<float> alone(size_t(T * H * D)), together(size_t(T * H * D));
    for (int64_t t = 0; t < T; ++t) {  // decode: store one key, attend one query
      const SeqRun run{0, 0, 1, pos0 + t};
      const Step step{no_ids.data(), 1, {&run, 1}};
      be->store_kv(*cache, 0, view(k, S, KV).row_slice(pos0 + t, 1), view(v, S, KV).row_slice(pos0 + t, 1),
                   step);
      be->attention(view(alone, T, H * D).row_slice(t, 1), view(q, T, H * D).row_slice(t, 1), *cache, 0, step,
                    H, 0.125f);
    }
    const SeqRun run{0, 0, T, pos0};  // the same keys stored again, then the 9 queries in one step
    const Step step{no_ids.data(), T, {&run, 1}};
    be->store_kv(*cache, 0, view(k, S, KV).row_slice(pos0, T), view(v, S, KV).row_slice(pos0, T), step);
    be->attention(view(together, T, H * D), view(q, T, H * D), *cache, 0, step, H, 0.125f);
    EXPECT_EQ(0, std::memcmp(alone.data(), together.data(), alone.size() * sizeof(float)))
        << "depth " << pos0;
  }
}

// A step's rows equal decode's, bit for bit: on quantized weights (activations quantized per row: a rounding
// moves with the tiniest difference, and greedy tokens with it) and on 16-bit and F32 ones. (At the AVX-512
// levels the 16-bit and F32 batch kernels sum in another order: there those rows differ in the last bits.)
TEST(Speculative, StepRowsEqualDecodeBitForBit) {
  const bool avx512 = cpu_info().kernel_level.rfind("avx512", 0) == 0 || cpu_info().kernel_level == "amx";
  for (const char* file : {"llama-gqa62-q4_k_m.gguf", "llama-gqa62-q4_0.gguf", "gemma3-linear-q4_k_m.gguf",
                           "llama-gqa62-f32.gguf", "llama-gqa62-f16", "qwen3-headdim-f32.gguf"}) {
    SCOPED_TRACE(file);
    const std::string f = file;
    const bool wide = f.find("q4") == std::string::npos;
    if (wide && avx512) {  // the quantized files came first and were checked
      GTEST_SKIP() << "at the " << cpu_info().kernel_level
                   << " level the 16-bit and F32 batch kernels sum in another order than decode's";
    }
    LoadOptions lo = LoadOptions::threads(2);
    if (f == "llama-gqa62-f16") lo.weight_dtype = DType::F16;
    auto model =
        Model::load(test::gguf_fixtures() / (f == "llama-gqa62-f16" ? "llama-gqa62-f32.gguf" : file), lo);
    const int64_t V = model->config().n_vocab, T = 9;
    const auto ids = prompts(V, 1, 3)[0];
    std::vector<int32_t> more(ids);
    for (int64_t i = 0; i < 40; ++i) more.push_back(int32_t((i * 37) % V));
    const std::vector<int32_t> head(more.begin(), more.end() - T), tail(more.end() - T, more.end());
    Session a(model), b(model);
    a.eval(head);
    b.eval(head);
    std::vector<float> alone;
    for (const int32_t t : tail) {
      const auto l = a.eval(std::span<const int32_t>(&t, 1));
      alone.insert(alone.end(), l.begin(), l.end());
    }
    const auto together = b.eval_all(tail);
    ASSERT_EQ(alone.size(), together.size());
    EXPECT_EQ(0, std::memcmp(alone.data(), together.data(), alone.size() * sizeof(float)));
  }
}

TEST(Speculative, PromptLookupDraftsWhatFollowedTheLatestLongestMatch) {
  PromptLookup lookup(1, 3);
  std::vector<int32_t> out;
  // The 3-gram 1 2 3 occurs twice before the end: the latest occurrence (followed by 5 1 2) wins.
  const std::vector<int32_t> h{1, 2, 3, 4, 9, 1, 2, 3, 5, 1, 2, 3};
  lookup.draft(0, h, 3, out);
  EXPECT_EQ(out, (std::vector<int32_t>{5, 1, 2}));
  // Only the 1-gram 3 recurs: what followed its latest occurrence, up to the end of the history.
  const std::vector<int32_t> g{3, 8, 6, 2, 3};
  lookup.draft(0, g, 8, out);
  EXPECT_EQ(out, (std::vector<int32_t>{8, 6, 2, 3}));
  // Nothing recurs: no draft.
  lookup.draft(0, std::vector<int32_t>{1, 2, 3}, 4, out);
  EXPECT_TRUE(out.empty());
}

TEST(Speculative, DraftOfAnotherVocabularyIsRefusedNamingBothSizes) {
  auto model = Model::load(fixture_dir("tiny"));
  auto other = Model::load(fixture_dir("llama-gqa62"));
  ASSERT_NE(model->config().n_vocab, other->config().n_vocab);
  GenerateOptions o = greedy(4);
  o.speculative.draft_model = other;
  Session session(model);
  expect_error(
      [&] {
        generate(session, nullptr, {1, 2, 3}, o);
      },
      ErrorKind::Argument,
      {"draft model", std::to_string(other->config().n_vocab), std::to_string(model->config().n_vocab)});
  o.speculative.prompt_lookup = true;
  expect_error([&] { generate(session, nullptr, {1, 2, 3}, o); }, ErrorKind::Argument, {"give one"});
  o.speculative.draft_model = nullptr;
  o.speculative.draft_max = 0;
  expect_error([&] { generate(session, nullptr, {1, 2, 3}, o); }, ErrorKind::Argument, {"draft_max"});
}

TEST(Speculative, CliPromptLookupAndDraftModelGiveThePlainText) {
  // The shipped model (no -m): a tokenizer, a small vocabulary.
  const std::string args = "generate -p 'ROMEO: ROMEO: ROMEO:' -n 48 --temperature 0 --ignore-eos --no-echo";
  const auto plain = test::run_cli(args);
  ASSERT_EQ(plain.status, 0) << plain.err;
  const auto lookup = test::run_cli(args + " --prompt-lookup --draft-max 4");
  ASSERT_EQ(lookup.status, 0) << lookup.err;
  EXPECT_EQ(lookup.out, plain.out);
  // The model drafting for its own F16 copy (the draft keeps its stored F32).
  const auto draft = test::run_cli(args + " --dtype f16 --draft-model " +
                                   (test::source_dir() / "models" / "shakespeare-char").string());
  const auto plain16 = test::run_cli(args + " --dtype f16");
  ASSERT_EQ(draft.status, 0) << draft.err;
  EXPECT_EQ(draft.out, plain16.out);
  const auto bad = test::run_cli(args + " --draft-model " + fixture_dir("tiny").string());
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("--draft-model"), std::string::npos) << bad.err;
  // Both vocabularies' sizes are named.
  for (const char* dir : {"models/shakespeare-char", "tests/fixtures/models/tiny"}) {
    const std::string n = std::to_string(Model::load(test::source_dir() / dir)->config().n_vocab);
    EXPECT_NE(bad.err.find(" " + n + " "), std::string::npos) << n << " not in: " << bad.err;
  }
}

// generate -i and chat over several turns: the same text with both draft sources as without.
TEST(Speculative, InteractiveAndChatTurnsGiveThePlainText) {
  const std::string shipped = (test::source_dir() / "models" / "shakespeare-char").string();
  const std::string turns = "ROMEO: ROMEO:\nJULIET: JULIET:\nROMEO:\n";
  const std::string gen = "generate -i -m " + shipped + " --temperature 0 -n 40 -r '\n\n'";
  const auto plain = test::run_cli(gen, turns);
  ASSERT_EQ(plain.status, 0) << plain.err;
  for (const std::string& flags :
       std::vector<std::string>{" --prompt-lookup --draft-min 1", " --draft-model " + shipped}) {
    const auto r = test::run_cli(gen + flags, turns);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, plain.out) << flags;
  }
  const std::string chat_model = fixture_dir("chatml-tiny").string();
  const std::string chat = "chat -m " + chat_model + " -t 1 --temperature 0 -n 24";
  const std::string lines = "hello hello hello\nagain again\n";
  const auto chat_plain = test::run_cli(chat, lines);
  ASSERT_EQ(chat_plain.status, 0) << chat_plain.err;
  for (const std::string& flags :
       std::vector<std::string>{" --prompt-lookup --draft-min 1", " --draft-model " + chat_model}) {
    const auto r = test::run_cli(chat + flags, lines);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, chat_plain.out) << flags;
  }
}

}  // namespace
}  // namespace minigpt
