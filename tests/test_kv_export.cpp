// A sequence's keys and values exported to host memory and imported again (Session::read_kv / write_kv, the
// prompt caches' path): a session that evaluates a prompt, exports it, forgets it, imports it and goes on
// gives exactly the logits of a session that never stopped.
#include <gtest/gtest.h>

#include <vector>

#include "cpu/cpu.h"
#include "minigpt/error.h"
#include "minigpt/session.h"
#include "test_util.h"

namespace minigpt {
namespace {

using test::expect_error;

Config gqa_config() {
  Config c;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 64;
  c.n_inner = 128;
  c.n_ctx = 64;
  c.n_vocab = 97;
  return c;
}

std::vector<int32_t> ids(int64_t n, int64_t seed, int64_t vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t((seed * 31 + i * 17 + i * i) % vocab);
  return v;
}

// The logits of each of `tail`'s tokens decoded one at a time.
std::vector<float> decode(Session& s, const std::vector<int32_t>& tail, int64_t seq) {
  std::vector<float> out;
  for (int32_t t : tail) {
    const auto l = s.eval(std::span<const int32_t>(&t, 1), seq);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

void round_trip(const Config& c, DType kv_dtype) {
  LoadOptions lo;
  lo.backend = make_cpu_backend(2, kv_dtype);
  const auto model = Model::random(c, lo);
  SessionOptions so;
  so.n_seq = 2;
  so.n_ctx = 48;
  Session whole(model, so), cut(model, so);
  ASSERT_TRUE(cut.exports_kv());
  const auto prompt = ids(21, 3, c.n_vocab), tail = ids(6, 4, c.n_vocab);
  whole.eval(prompt);
  const std::vector<float> want = decode(whole, tail, 0);

  cut.eval(prompt);
  const size_t pb = cut.kv_position_bytes();
  EXPECT_EQ(pb, size_t(c.n_layer * 2 * c.kv_heads() * (c.n_embd / c.n_head)) * dtype_size(kv_dtype));
  std::vector<char> host(21 * pb);
  // In two pieces: any run of positions is a contiguous piece of the export.
  cut.read_kv(0, 0, 8, host.data());
  cut.read_kv(0, 8, 13, host.data() + 8 * pb);
  cut.reset();
  cut.eval(ids(30, 9, c.n_vocab), 0);  // something else there first
  cut.keep(0, 0);
  cut.write_kv(0, 0, 13, host.data());
  EXPECT_EQ(cut.n_past(0), 13);
  cut.write_kv(0, 13, 8, host.data() + 13 * pb);
  EXPECT_EQ(cut.n_past(0), 21);
  EXPECT_EQ(decode(cut, tail, 0), want) << "imported into the same sequence";
  // Into another sequence, from the first positions of the export.
  cut.write_kv(1, 0, 21, host.data());
  EXPECT_EQ(decode(cut, tail, 1), want) << "imported into another sequence";
}

TEST(KvExport, ARoundTripGoesOnExactlyAsAnUninterruptedSession) { round_trip(gqa_config(), DType::F32); }

TEST(KvExport, ARoundTripOfA16BitCacheIsExactToo) {
  round_trip(gqa_config(), DType::F16);
  Config mha = gqa_config();
  mha.n_kv_head = 0;
  round_trip(mha, DType::BF16);
}

TEST(KvExport, PositionsOutsideTheSequenceAreRefused) {
  const Config c = gqa_config();
  const auto model = Model::random(c, LoadOptions::threads(1));
  SessionOptions so;
  so.n_ctx = 16;
  Session s(model, so);
  s.eval(ids(5, 1, c.n_vocab));
  std::vector<char> host(20 * s.kv_position_bytes());
  expect_error([&] { s.read_kv(0, 2, 4, host.data()); }, ErrorKind::Argument,
               {"read_kv: positions [2, 6)", "holds 5"});
  expect_error([&] { s.write_kv(0, 6, 1, host.data()); }, ErrorKind::Argument,
               {"write_kv: positions [6, 7)", "holds 5"});
  expect_error([&] { s.write_kv(0, 0, 17, host.data()); }, ErrorKind::Argument, {"write_kv", "of 16"});
  expect_error([&] { s.read_kv(1, 0, 1, host.data()); }, ErrorKind::Argument, {"sequence 1"});
  EXPECT_EQ(s.n_past(0), 5);
}

// A windowed layer that keeps only a ring of its last positions holds too little of a long prefix: such a
// session does not export (the caches are off for it), and says so when asked.
TEST(KvExport, ASessionWithARingDoesNotExport) {
  Config c = gqa_config();
  c.sliding_window = 4;
  c.n_ctx = 256;
  const auto model = Model::random(c, LoadOptions::threads(1));
  SessionOptions so;
  so.max_batch = 8;
  Session s(model, so);
  ASSERT_GT(s.kv_cache().ring_capacity(0), 0);
  EXPECT_FALSE(s.exports_kv());
  s.eval(ids(5, 1, c.n_vocab));
  std::vector<char> host(5 * s.kv_position_bytes());
  expect_error([&] { s.read_kv(0, 0, 5, host.data()); }, ErrorKind::Unsupported, {"cannot be exported"});
  // Without a ring (a window as long as the context), it does.
  so.max_batch = 512;
  EXPECT_TRUE(Session(model, so).exports_kv());
}

}  // namespace
}  // namespace minigpt
