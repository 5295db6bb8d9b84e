// Several sequences decoded in one forward step: each gets, within rounding, the logits it gets alone.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/cpu.h"
#include "minigpt/error.h"
#include "minigpt/session.h"
#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

using test::expect_error;

// |got - want| <= rel * max |want| over the row, rel 1e-5 by default: F32 sums of the same products in
// another order (the batched GEMV and attention tasks group them differently from the single-sequence ones).
void expect_rows_close(std::span<const float> got, std::span<const float> want, const std::string& what,
                       float rel = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  float scale = 0.0f;
  for (float v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * scale) << what << ", logit " << i;
  }
}

Config small_config() {
  Config c;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_embd = 64;
  c.n_inner = 256;
  c.n_ctx = 64;
  c.n_vocab = 97;
  return c;
}

// small_config()'s random model on 2 threads, and its vocabulary size.
std::pair<std::shared_ptr<const Model>, int64_t> small_model() {
  const Config c = small_config();
  return {Model::random(c, LoadOptions::threads(2)), c.n_vocab};
}
// Options for n_seq sequences of n_ctx positions.
SessionOptions seq_options(int64_t n_seq, int64_t n_ctx) {
  SessionOptions so;
  so.n_seq = n_seq;
  so.n_ctx = n_ctx;
  return so;
}

std::vector<int32_t> ids(int64_t n, int64_t seed, int64_t vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t((seed * 31 + i * 17 + i * i) % vocab);
  return v;
}

// Four sequences with histories of different lengths, then ONE step that appends to each a different
// number of tokens (decode and prefill runs mixed), against each sequence run alone in its own session.
void check_batched_step(DType dtype) {
  const Config c = small_config();
  LoadOptions lo;
  lo.n_threads = 2;
  lo.weight_dtype = dtype;
  const auto model = Model::random(c, lo);
  const int64_t V = c.n_vocab;
  // BF16 weights in BF16 arithmetic (test::bf16_arithmetic): a run of one row is the F32 GEMV, of several the
  // BF16 one (activations rounded to 8 bits: 2^-9 relative each, 2^-8 of sum |w x| per product), so rows
  // differ by that rounding through three layers: measured 2.2e-3 of the row's largest logit, bound 1e-2;
  // a row of the wrong sequence or position differs by the whole scale.
  const float rel = test::bf16_arithmetic(*model) ? 1e-2f : 1e-5f;
  const std::vector<int64_t> history = {5, 0, 17, 9};  // positions before the step
  const std::vector<int64_t> appended = {1, 3, 1, 6};  // tokens each appends in the step
  const std::vector<int64_t> order = {2, 0, 3, 1};     // the order the step lists them in

  SessionOptions so;
  so.n_seq = 4;
  so.n_ctx = 32;
  Session batched(model, so);
  for (int64_t q = 0; q < 4; ++q) {
    if (history[size_t(q)] > 0) batched.eval(ids(history[size_t(q)], q, V), q);
  }
  std::vector<std::vector<int32_t>> next(4);
  std::vector<Session::SeqTokens> step;
  for (int64_t q : order) {
    next[size_t(q)] = ids(appended[size_t(q)], 100 + q, V);
    step.push_back({q, next[size_t(q)]});
  }
  const auto got = batched.eval_batch(step);
  ASSERT_EQ(got.size(), size_t(4 * V));
  // Each sequence alone, in its own session: the same history, the same appended tokens.
  std::vector<std::unique_ptr<Session>> alone;
  for (size_t e = 0; e < order.size(); ++e) {
    const int64_t q = order[e];
    EXPECT_EQ(batched.n_past(q), history[size_t(q)] + appended[size_t(q)]);
    SessionOptions one;
    one.n_ctx = 32;
    alone.push_back(std::make_unique<Session>(model, one));
    if (history[size_t(q)] > 0) alone.back()->eval(ids(history[size_t(q)], q, V));
    const auto want = alone.back()->eval(next[size_t(q)]);
    expect_rows_close(got.subspan(e * size_t(V), size_t(V)), want,
                      std::string(dtype_name(dtype)) + " sequence " + std::to_string(q), rel);
  }
  // Then a pure decode step (one token each, in the order 0..3) continues every sequence as alone.
  std::vector<std::vector<int32_t>> one_token(4);
  step.clear();
  for (int64_t q = 0; q < 4; ++q) {
    one_token[size_t(q)] = {int32_t((q * 7 + 3) % V)};
    step.push_back({q, one_token[size_t(q)]});
  }
  const auto got2 = batched.eval_batch(step);
  for (size_t e = 0; e < order.size(); ++e) {
    const int64_t q = order[e];
    const auto want = alone[e]->eval(one_token[size_t(q)]);
    expect_rows_close(got2.subspan(size_t(q * V), size_t(V)), want,
                      std::string(dtype_name(dtype)) + " decode step, sequence " + std::to_string(q), rel);
  }
}

TEST(Batch, FourSequencesInOneStepMatchEachAloneF32) { check_batched_step(DType::F32); }
TEST(Batch, FourSequencesInOneStepMatchEachAloneBF16) { check_batched_step(DType::BF16); }
TEST(Batch, FourSequencesInOneStepMatchEachAloneF16) { check_batched_step(DType::F16); }

// The block's description (config.h) is what the forward pass runs: a GPT-NeoX-shaped random model whose
// blocks have RMS norms and adjacent-pair rotary (Llama's, less the gated MLP no family's weights describe
// yet) gives other logits than its LayerNorm / rotate_half twin on the same weights, and the same logits,
// within rounding, whether its tokens come in one prefill step or one by one through the KV cache (the rope
// at each position, the norms on one row and on many), sequential and parallel residual alike.
TEST(Batch, RmsNormAndAdjacentRotaryBlocksDecodeAsTheyPrefill) {
  for (bool parallel : {true, false}) {
    Config c = small_config();
    c.arch = "gpt_neox";
    c.position_encoding = PositionEncoding::Rotary;
    c.rotary_dim = 8;  // of head_dim 16: the rest of each head passes through
    c.parallel_residual = parallel;
    c.tie_word_embeddings = false;
    Config r = c;
    r.norm = NormKind::Rms;
    r.rope_layout = RopeLayout::AdjacentPairs;
    const auto layer = Model::random(c, LoadOptions::threads(2)),
               rms = Model::random(r, LoadOptions::threads(2));
    const int64_t V = c.n_vocab, n = 12;
    const auto tokens = ids(n, 3, V);
    Session prefill(rms);
    const auto all = prefill.eval_all(tokens);
    const std::vector<float> want(all.begin(), all.end());
    Session twin(layer);
    const auto other = twin.eval_all(tokens);
    float most = 0.0f;
    for (size_t i = 0; i < want.size(); ++i) most = std::max(most, std::fabs(want[i] - other[i]));
    EXPECT_GT(most, 1e-3f) << "parallel=" << parallel << ": the block's kinds changed nothing";
    Session one(rms);
    for (int64_t t = 0; t < n; ++t) {
      const auto got = one.eval(std::span<const int32_t>(&tokens[size_t(t)], 1));
      expect_rows_close(got, std::span<const float>(want).subspan(size_t(t * V), size_t(V)),
                        "parallel=" + std::to_string(parallel) + " token " + std::to_string(t));
    }
  }
}

// Entries asking for every row's logits (the server's prompt logprobs) get them, mixed with entries that
// get only their last row, each as eval_all gives them alone.
TEST(Batch, AllLogitsEntriesGetEveryRow) {
  const auto [model, V] = small_model();
  Session batched(model, seq_options(3, 32));
  batched.eval(ids(4, 9, V), 2);
  const auto a = ids(5, 1, V), b = ids(1, 2, V), d = ids(3, 3, V);
  const std::vector<Session::SeqTokens> step = {{0, a, true}, {1, b, false}, {2, d, true}};
  const auto got = batched.eval_batch(step);
  ASSERT_EQ(got.size(), size_t((5 + 1 + 3) * V));
  SessionOptions one;
  one.n_ctx = 32;
  Session s0(model, one), s1(model, one), s2(model, one);
  const auto want0 = s0.eval_all(a);
  expect_rows_close(got.subspan(0, size_t(5 * V)), want0, "sequence 0, every row");
  expect_rows_close(got.subspan(size_t(5 * V), size_t(V)), s1.eval(b), "sequence 1, last row");
  s2.eval(ids(4, 9, V));
  expect_rows_close(got.subspan(size_t(6 * V), size_t(3 * V)), s2.eval_all(d), "sequence 2, every row");
}

// Bad batches are refused before anything runs, and leave every sequence as it was.
TEST(Batch, BadBatchesAreRefusedAndChangeNothing) {
  const Config c = test::tiny_config();
  const auto model = Model::random(c, LoadOptions::threads(1));
  SessionOptions so;
  so.n_seq = 2;
  so.n_ctx = 7;
  so.max_batch = 6;
  Session s(model, so);
  const std::vector<int32_t> two = {1, 2}, three = {1, 2, 3}, five = {1, 2, 3, 4, 5}, bad = {1, 40};
  s.eval(three, 1);
  using B = std::vector<Session::SeqTokens>;
  expect_error(
      [&] {
        s.eval_batch(B{{0, three}, {2, three}});
      },
      ErrorKind::Argument, {"sequence 2", "[0, 2)"});
  expect_error(
      [&] {
        s.eval_batch(B{{0, three}, {0, three}});
      },
      ErrorKind::Argument, {"sequence 0 appears twice"});
  expect_error(
      [&] {
        s.eval_batch(B{{0, three}, {1, five}});
      },
      ErrorKind::Argument, {"context overflow", "sequence 1"});
  expect_error(
      [&] {
        s.eval_batch(B{{0, five}, {1, two}});
      },
      ErrorKind::Argument, {"7 tokens exceed", "batch of 6"});
  expect_error([&] { s.eval_batch(B{{0, bad}}); }, ErrorKind::Argument, {"token id 40", "vocabulary"});
  expect_error([&] { s.eval_batch(B{}); }, ErrorKind::Argument, {"no sequences"});
  expect_error([&] { s.eval(three, -1); }, ErrorKind::Argument, {"sequence -1"});
  EXPECT_EQ(s.n_past(0), 0);
  EXPECT_EQ(s.n_past(1), 3);
  s.reset(1);
  EXPECT_EQ(s.n_past(1), 0);
}

// keep(seq, n): the sequence goes on from its first n positions as if only they had been evaluated (the
// server's prompt cache); n beyond what it holds is refused and changes nothing.
TEST(Batch, KeepingAPrefixGoesOnFromIt) {
  const auto [model, V] = small_model();
  const SessionOptions so = seq_options(1, 32);
  Session s(model, so), fresh(model, so);
  const auto all = ids(12, 4, V);
  const std::span<const int32_t> head(all.data(), 5), tail(all.data() + 5, 4);
  s.eval(all);
  s.keep(0, 5);
  EXPECT_EQ(s.n_past(0), 5);
  const auto rows = s.eval_all(tail);
  const std::vector<float> got(rows.begin(), rows.end());
  fresh.eval(head);
  expect_rows_close(got, fresh.eval_all(tail), "after keep(5)");
  expect_error([&] { s.keep(0, 10); }, ErrorKind::Argument, {"keep: 10 positions", "holds 9"});
  expect_error([&] { s.keep(0, -1); }, ErrorKind::Argument, {"keep: -1"});
  expect_error([&] { s.keep(1, 0); }, ErrorKind::Argument, {"sequence 1"});
  EXPECT_EQ(s.n_past(0), 9);
}

// A sequence that takes a copy of another's first positions goes on from them as if it had evaluated them
// (what n > 1 choices of one prompt do); its own earlier positions are forgotten, the source is untouched.
TEST(Batch, CopyingAPrefixGoesOnFromIt) {
  const auto [model, V] = small_model();
  const SessionOptions so = seq_options(3, 32);
  Session s(model, so), fresh(model, so);
  ASSERT_TRUE(s.can_copy());
  const auto all = ids(12, 5, V), other = ids(7, 6, V);
  const std::span<const int32_t> head(all.data(), 6), tail(all.data() + 6, 4);
  s.eval(all, 0);
  s.eval(other, 2);  // something else in the destination first
  s.copy_prefix(0, 2, 6);
  EXPECT_EQ(s.n_past(2), 6);
  EXPECT_EQ(s.n_past(0), 12);
  const auto rows = s.eval_all(tail, 2);
  const std::vector<float> got(rows.begin(), rows.end());
  fresh.eval(head);
  expect_rows_close(got, fresh.eval_all(tail), "after copy_prefix(0, 2, 6)");
  // The source goes on unchanged.
  const auto next = s.eval(std::span<const int32_t>(other.data(), 1), 0);
  const std::vector<float> got0(next.begin(), next.end());
  Session whole(model, so);
  whole.eval(all);
  expect_rows_close(got0, whole.eval(std::span<const int32_t>(other.data(), 1)), "the source after the copy");
  expect_error([&] { s.copy_prefix(0, 1, 14); }, ErrorKind::Argument,
               {"copy_prefix: 14 positions", "holds 13"});
  expect_error([&] { s.copy_prefix(3, 1, 1); }, ErrorKind::Argument, {"sequence 3"});
  expect_error([&] { s.copy_prefix(0, -1, 1); }, ErrorKind::Argument, {"sequence -1"});
}

// The KV cache is the backend's: sized from the context asked for, per sequence.
TEST(Batch, TheCacheHoldsWhatTheSessionAsksFor) {
  const Config c = test::tiny_config();
  const auto model = Model::random(c, LoadOptions::threads(1));
  SessionOptions so;
  so.n_seq = 3;
  so.n_ctx = 10;
  Session s(model, so);
  EXPECT_EQ(s.kv_cache().spec().n_seq, 3);
  EXPECT_EQ(s.kv_cache().spec().n_ctx, 10);
  EXPECT_EQ(s.kv_cache().spec().n_kv_head, c.n_head);
  // K and V of every layer, sequence and position (the CPU pads the positions a little).
  const size_t at_least = size_t(2 * c.n_layer * 3 * 10 * c.n_embd) * sizeof(float);
  EXPECT_GE(s.kv_cache().bytes(), at_least);
  EXPECT_LT(s.kv_cache().bytes(), 4 * at_least);
}

}  // namespace
}  // namespace minigpt
