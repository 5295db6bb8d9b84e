// The CPU backend's host memory: the weight arena's buffers are zero-filled, aligned, disjoint and outlive
// the arena, and a model's small matrices end up in memory the kernel may back with 2 MB pages.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cpu/cpu.h"
#include "cpu/host_memory.h"
#include "minigpt/backend.h"

namespace minigpt {
namespace {

using cpu::WeightArena;

TEST(WeightArena, BuffersAreZeroFilledAlignedAndDisjoint) {
  WeightArena arena;
  // Sizes around the cache line, up to and past the share that gets a buffer of its own, and enough of
  // them to fill more than one slab.
  const size_t sizes[] = {0,        1,        63,       64,       65,    1000,     576 * 576 * 2, 3u << 20,
                          5u << 20, 7u << 20, 8u << 20, 9u << 20, 12345, 2u << 20, 6u << 20,      100};
  std::vector<std::unique_ptr<Buffer>> bufs;
  for (int round = 0; round < 3; ++round) {
    for (size_t n : sizes) {
      auto b = arena.alloc(n);
      ASSERT_EQ(b->bytes(), n);
      ASSERT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 64, 0u) << n << " bytes";
      const auto* p = static_cast<const unsigned char*>(b->data());
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(p[i], 0) << "byte " << i << " of " << n;
      std::memset(b->data(), int(bufs.size() % 251) + 1, n);
      bufs.push_back(std::move(b));
    }
  }
  // Each still holds its own pattern: no buffer overlaps another.
  for (size_t j = 0; j < bufs.size(); ++j) {
    const auto* p = static_cast<const unsigned char*>(bufs[j]->data());
    for (size_t i = 0; i < bufs[j]->bytes(); ++i) ASSERT_EQ(p[i], int(j % 251) + 1) << "buffer " << j;
  }
}

// A model's buffers may outlive the backend that made them (ASan reports a use after free otherwise).
TEST(WeightArena, BuffersOutliveTheArena) {
  std::unique_ptr<Buffer> b;
  {
    WeightArena arena;
    b = arena.alloc(4096);
    auto other = arena.alloc(100);
  }
  std::memset(b->data(), 7, b->bytes());
  EXPECT_EQ(static_cast<unsigned char*>(b->data())[4095], 7);
}

// The line "THPeligible: N" of the mapping of /proc/self/smaps that holds `p`; -1 where there is none.
int thp_eligible(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (line.find(':') > line.find(' ') && (head >> std::hex >> lo >> dash >> hi) && dash == '-') {
      inside = a >= lo && a < hi;  // a mapping's first line: "lo-hi perms ..."
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

// In a buffer of its own, a matrix under 2 MB would never be advised into 2 MB pages (cpu::WeightArena says
// what that costs).
TEST(WeightArena, SmallMatricesOfAModelMayHave2MbPages) {
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  if (mode.find("[madvise]") == std::string::npos && mode.find("[always]") == std::string::npos)
    GTEST_SKIP() << "transparent huge pages are off here (" << (mode.empty() ? "no THP" : mode) << ")";
  std::ifstream probe("/proc/self/smaps");
  std::string all((std::istreambuf_iterator<char>(probe)), std::istreambuf_iterator<char>());
  if (all.find("THPeligible:") == std::string::npos)
    GTEST_SKIP() << "this kernel's /proc/self/smaps has no THPeligible lines";
  auto be = make_cpu_backend(1);
  const int64_t n = 576;
  std::vector<float> w(size_t(n * n), 0.5f);
  std::vector<std::unique_ptr<Buffer>> keep;
  for (DType dt : {DType::F32, DType::BF16}) {
    HostLinear h;
    h.w = make_tensor(w.data(), DType::F32, Device::Host, n, n);
    h.order = MatrixOrder::OutIn;
    h.n_in = h.n_out = n;
    h.stored = WeightFormat::plain(DType::F32);
    const Linear l = be->prepare_linear(h, WeightFormat::plain(dt), keep);
    EXPECT_EQ(thp_eligible(l.w.data), 1) << dtype_name(dt) << " 576 x 576";
  }
}

}  // namespace
}  // namespace minigpt
