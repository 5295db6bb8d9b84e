// What the machine is and how fast it reads memory: the roofline a decode step is measured against.
#pragma once

#include <cstddef>
#include <string>

namespace minigpt {

std::string cpu_model_name();  // from /proc/cpuinfo; "unknown" elsewhere
int cpu_count();

// STREAM-like read bandwidth in GB/s (1e9 bytes/s): `n_threads` threads sum disjoint parts of a buffer of
// `bytes` (far larger than the last-level cache) with wide loads; the median of `reps` passes after one
// untimed pass that also faults the pages in.
double measure_read_bandwidth(int n_threads, size_t bytes = size_t(1) << 30, int reps = 5);

}  // namespace minigpt
