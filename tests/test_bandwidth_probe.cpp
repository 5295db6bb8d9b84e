// The bandwidth probe's paired read (bench --paired-probe): a read within half the buffer is timed, a
// larger one is refused rather than shortened (a shorter read than asked for would give a wrong rate).
#include <gtest/gtest.h>

#include <stdexcept>

#include "cpu/sysinfo.h"

namespace minigpt {
namespace {

TEST(BandwidthProbe, AReadOfMoreThanHalfTheBufferIsRefused) {
  BandwidthProbe probe(size_t(1) << 20);
  const size_t half = size_t(512) << 10;
  EXPECT_GT(probe.read_seconds(half, 2, false), 0.0);
  EXPECT_GT(probe.read_seconds(half, 1, true), 0.0);
  EXPECT_THROW(probe.read_seconds(half + 256, 2, false), std::invalid_argument);
  EXPECT_THROW(probe.read_seconds(size_t(1) << 20, 1, true), std::invalid_argument);
}

}  // namespace
}  // namespace minigpt
