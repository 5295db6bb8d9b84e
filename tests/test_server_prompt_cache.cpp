// The server's host prompt cache (--cache-ram, src/server/prompt_cache.h): the keys and values of a freed
// slot's prefix kept in host memory in blocks, so that a later prompt sharing it starts from it in any slot,
// after its slot went to another conversation; its bytes stay within the limit; 0 turns it off. The text and
// logprobs are those of the same request with the cache off.
#include <gtest/gtest.h>

#include "server_test_util.h"

namespace minigpt {
namespace {

using namespace server_test;

constexpr int64_t kBlock = 16;

int64_t metric_of(const ServerFixture& f, const std::string& name) {
  auto r = f.client().Get("/metrics");
  if (!r) return -1;
  const auto at = r->body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stoll(r->body.substr(at + name.size() + 2));
}

server::ServerOptions cache_options(int64_t n_parallel, size_t cache_ram) {
  server::ServerOptions o = default_options();
  o.n_parallel = n_parallel;
  o.cache_ram = cache_ram;
  o.cache_block = kBlock;
  return o;
}

json complete(const ServerFixture& f, const std::string& prompt, bool cache = true) {
  return post_json(
      f, "/v1/completions",
      {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"logprobs", 1}, {"cache_prompt", cache}});
}

int64_t cached(const json& r) { return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(); }

// The same text, and logprobs within 1e-4: the cached keys and values came from another step (other rows
// beside them), F32 sums grouped differently (the bound of the slot cache's test).
void expect_same(const json& a, const json& b, const std::string& what) {
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]) << what;
  const json& la = a["choices"][0]["logprobs"]["token_logprobs"];
  const json& lb = b["choices"][0]["logprobs"]["token_logprobs"];
  ASSERT_EQ(la.size(), lb.size()) << what;
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_NEAR(la[i].get<double>(), lb[i].get<double>(), 1e-4) << what << " token " << i;
  }
}

int64_t n_tokens(const std::string& s) { return int64_t(shipped_model().tok.encode(s).size()); }

// What the host cache gives a prompt of n tokens that it holds whole: its whole blocks, but not the last
// token (its logits pick the first generated one).
int64_t from_blocks(int64_t n) { return std::min(n / kBlock * kBlock, n - 1); }

const std::string kP1 = "ROMEO:\nIs the day so young?\nBENVOLIO:\nBut new struck nine, and so good morrow.\n";
const std::string kP2 = "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo? Deny thy father.\n";
const std::string kP3 = "MERCUTIO:\nNay, gentle Romeo, we must have you dance, and then away.\n";

// One slot: the second prompt takes it, and the first comes back from the host cache.
TEST(ServerPromptCache, APrefixComesBackFromTheHostCacheAfterItsSlotWasTaken) {
  ServerFixture f(cache_options(1, size_t(64) << 20));
  const json a = complete(f, kP1);
  EXPECT_EQ(cached(a), 0);
  const json b = complete(f, kP2);  // evicts kP1 from the only slot
  EXPECT_EQ(cached(b), 0);
  const json a2 = complete(f, kP1);
  EXPECT_EQ(cached(a2), from_blocks(n_tokens(kP1)));
  const json off = complete(f, kP1, false);
  EXPECT_EQ(cached(off), 0);
  expect_same(a2, off, "kP1 from the host cache");
  // A longer prompt that begins with kP1: its blocks of kP1 (the slot now holds kP1 too, under cache_prompt
  // false: the same prefix, so the slot's own is as long).
  const json b2 = complete(f, kP2 + "ROMEO:\n");
  EXPECT_GE(cached(b2), n_tokens(kP2) / kBlock * kBlock);
  expect_same(b2, complete(f, kP2 + "ROMEO:\n", false), "kP2 and more from the host cache");
  EXPECT_EQ(metric_of(f, "minigpt_prompt_cache_hits_total"), 2);
  EXPECT_GT(metric_of(f, "minigpt_prompt_cache_bytes"), 0);
  EXPECT_EQ(metric_of(f, "minigpt_prompt_cache_max_bytes"), int64_t(64) << 20);
  EXPECT_EQ(metric_of(f, "minigpt_prompt_cache_tokens_total"), cached(a2) + cached(b2));
}

// Two slots: a prefix that neither slot holds any more goes from the host cache into each of them.
TEST(ServerPromptCache, EachSlotTakesASharedPrefixFromTheHostCache) {
  ServerFixture f(cache_options(2, size_t(64) << 20));
  const std::string prefix = kP1 + kP2.substr(0, 20);
  complete(f, prefix + "a");  // slot 0
  complete(f, kP2);           // slot 1
  complete(f, kP3);           // slot 0: the prefix is in no slot now
  const int64_t hits0 = metric_of(f, "minigpt_prompt_cache_hits_total");
  const json b = complete(f, prefix + "b");  // slot 1, the least recently used
  EXPECT_EQ(cached(b), n_tokens(prefix) / kBlock * kBlock);
  EXPECT_EQ(metric_of(f, "minigpt_prompt_cache_hits_total"), hits0 + 1);
  complete(f, "KING:\n" + kP2);  // slot 0
  complete(f, "KING:\n" + kP3);  // slot 1: the prefix is in no slot again
  const int64_t hits1 = metric_of(f, "minigpt_prompt_cache_hits_total");
  const json c = complete(f, prefix + "c");  // slot 0
  EXPECT_EQ(cached(c), n_tokens(prefix) / kBlock * kBlock);
  EXPECT_EQ(metric_of(f, "minigpt_prompt_cache_hits_total"), hits1 + 1);
  expect_same(b, complete(f, prefix + "b", false), "prefix + b");
  expect_same(c, complete(f, prefix + "c", false), "prefix + c");
}

// A limit of a few blocks: the least recently used go, the bytes held never exceed it, and the most recent
// prefixes are still there.
TEST(ServerPromptCache, EvictionKeepsTheBytesWithinTheLimit) {
  // 4 layers x (K + V) x 128 floats a position: 4 KiB, 64 KiB a block of 16.
  const size_t block_bytes = size_t(kBlock) * 4 * 2 * 128 * 4;
  // Each prompt and its 11 evaluated completion tokens: 5 blocks (kP1), 4 (kP2, kP3). Two of them fit.
  const size_t limit = 8 * block_bytes;
  ServerFixture f(cache_options(1, limit));
  for (const std::string& p : {kP1, kP2, kP3}) {
    complete(f, p);
    const int64_t held = metric_of(f, "minigpt_prompt_cache_bytes");
    EXPECT_GT(held, 0);
    EXPECT_LE(held, int64_t(limit)) << "after " << p;
  }
  EXPECT_EQ(cached(complete(f, kP2)), from_blocks(n_tokens(kP2)));  // the slot held kP3
  // The least recently used, kP1, went (its deepest block first, for kP2's; the rest for kP3's).
  const json a = complete(f, kP1);
  EXPECT_EQ(cached(a), 0);
  EXPECT_EQ(metric_of(f, "minigpt_prompt_cache_hits_total"), 1);
  EXPECT_LE(metric_of(f, "minigpt_prompt_cache_bytes"), int64_t(limit));
}

// --cache-ram 0: only the slot's own prefix.
TEST(ServerPromptCache, ZeroTurnsItOff) {
  ServerFixture f(cache_options(1, 0));
  complete(f, kP1);
  EXPECT_EQ(cached(complete(f, kP1)), n_tokens(kP1) - 1);  // the slot's own
  complete(f, kP2);
  EXPECT_EQ(cached(complete(f, kP1)), 0);
  EXPECT_EQ(metric_of(f, "minigpt_prompt_cache_hits_total"), 0);
  EXPECT_EQ(metric_of(f, "minigpt_prompt_cache_bytes"), 0);
  EXPECT_EQ(metric_of(f, "minigpt_prompt_cache_max_bytes"), 0);
}

}  // namespace
}  // namespace minigpt
