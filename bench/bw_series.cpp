// How the machine's read bandwidth moves over time: back-to-back reads of MB megabytes each (through
// BandwidthProbe::read_seconds, the read `bench --paired-probe` pairs with each decode step), one GB/s
// figure per read, in order. On a shared virtual machine this shows the time scale on which a roofline's
// denominator changes.
// Usage: bw_series [MB] [COUNT] [THREADS]   (default: 16 MB, 400 reads, 2 threads)
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cpu/sysinfo.h"

int main(int argc, char** argv) {
  const size_t mb = argc > 1 ? size_t(std::atoll(argv[1])) : 16;
  const int count = argc > 2 ? std::atoi(argv[2]) : 400, threads = argc > 3 ? std::atoi(argv[3]) : 2;
  if (mb == 0 || mb > 4096 || count < 1 || threads < 1) {
    std::fprintf(stderr, "usage: bw_series [MB 1-4096] [COUNT >= 1] [THREADS >= 1]\n");
    return 2;
  }
  // Four times the read, and at least 256 MB: a read never finds its bytes in the last-level cache.
  minigpt::BandwidthProbe probe(std::max(size_t(256), 4 * mb) << 20);
  const size_t bytes = mb << 20;
  probe.read_seconds(bytes, threads, false);  // untimed: the first touch of the threads' stacks and TLB
  std::printf("# %zu MB per read, %d thread(s), GB/s of each read in order\n", mb, threads);
  for (int i = 0; i < count; ++i) {
    const double s = probe.read_seconds(bytes, threads, false);
    std::printf("%.0f%c", double(bytes) / s / 1e9, i % 25 == 24 || i == count - 1 ? '\n' : ' ');
  }
  return 0;
}
