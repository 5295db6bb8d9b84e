// StringTable and StringIdMap (include/minigpt/string_table.h) against the standard containers they stand
// in for: the same strings back, the same ids found, on keys a vocabulary has (empty, NUL bytes, UTF-8,
// a few hundred thousand of them).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "minigpt/string_table.h"

namespace minigpt {
namespace {

std::vector<std::string> random_keys(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> keys = {"", std::string("\0a", 2), "\xE2\x96\x81the", "<0x00>"};
  while (keys.size() < n) {
    std::string k(rng() % 24, '\0');
    for (char& c : k) c = char(rng() % 7 == 0 ? rng() % 256 : 'a' + rng() % 26);
    keys.push_back(k);
  }
  return keys;
}

TEST(StringTable, HoldsWhatWasPushed) {
  const std::vector<std::string> keys = random_keys(5000, 1);
  StringTable t;
  for (const std::string& k : keys) t.push_back(k);
  t.shrink_to_fit();
  ASSERT_EQ(t.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(t[i], keys[i]) << i;
  EXPECT_EQ(std::vector<std::string>(t.begin(), t.end()), keys);
  EXPECT_EQ(t.back(), keys.back());
  StringTable u;
  for (std::string_view s : t) u.push_back(s);
  EXPECT_TRUE(u == t);
  u.push_back("x");
  EXPECT_FALSE(u == t);
}

TEST(StringIdMap, FindsWhatAnUnorderedMapFinds) {
  const std::vector<std::string> keys = random_keys(300000, 2);
  StringIdMap m;
  std::unordered_map<std::string, int32_t> ref;
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool added = m.emplace(keys[i], int32_t(i));
    EXPECT_EQ(added, ref.emplace(keys[i], int32_t(i)).second) << i;  // the first id stays
  }
  ASSERT_EQ(m.size(), ref.size());
  for (const auto& [k, id] : ref) ASSERT_EQ(m.find(k), id);
  for (const std::string& k : random_keys(20000, 3)) ASSERT_EQ(m.find(k), ref.count(k) ? ref.at(k) : -1);
  for (size_t e = 0; e < m.size(); ++e) ASSERT_EQ(ref.at(std::string(m.key(e))), m.id(e));
  EXPECT_EQ(StringIdMap().find("a"), -1);
}

}  // namespace
}  // namespace minigpt
