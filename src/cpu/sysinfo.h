// What the machine is and how fast it reads memory: the roofline a decode step is measured against.
#pragma once

#include <cstddef>
#include <string>

namespace minigpt {

std::string cpu_model_name();  // from /proc/cpuinfo; "unknown" elsewhere
// The CPUs this process may run on: its affinity mask (taskset, a container's cpuset), which can be fewer
// than the machine has; at least 1. The default thread count.
int cpu_count();

// STREAM-like read bandwidth in GB/s (1e9 bytes/s): `n_threads` threads sum disjoint parts of a buffer of
// `bytes` (far larger than the last-level cache) with wide loads, each pass the faster of two reads (four
// plain sequential streams per thread; one stream prefetched as the quantized GEMVs prefetch); the median of
// `reps` passes after one untimed pass that also faults the pages in.
double measure_read_bandwidth(int n_threads, size_t bytes = size_t(1) << 30, int reps = 5);

// The same measurement again and again over one buffer allocated (and faulted in) once: for taking the
// bandwidth between the repetitions of a benchmark, so that a roofline is computed against what the memory
// gave at that time on a machine shared with others.
class BandwidthProbe {
 public:
  explicit BandwidthProbe(size_t bytes = size_t(256) << 20);
  ~BandwidthProbe();
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;
  // GB/s of n_threads threads reading the whole buffer: the best of three passes of each of two reads (four
  // plain sequential streams per thread; one stream prefetched as the quantized GEMVs prefetch).
  double measure(int n_threads);

  // Seconds that n_threads threads take to read `bytes` of the buffer (at most half of it: more throws
  // std::invalid_argument; 0 where the buffer could not be allocated), from where the
  // last call stopped (wrapping to the start), as four plain streams per thread or, with `prefetch`, one
  // stream prefetched as the quantized GEMVs prefetch. The clock runs from the release of the started
  // threads to the last one's end. For a read the size of a decode step's, taken right after the step: on
  // a machine whose bandwidth changes within a fraction of a second, the step and the read then see the
  // same memory (see `bench --paired-probe`).
  double read_seconds(size_t bytes, int n_threads, bool prefetch);

 private:
  float* buf_ = nullptr;
  size_t n_ = 0;
  size_t pos_ = 0;  // in floats: where read_seconds starts next
};

}  // namespace minigpt
