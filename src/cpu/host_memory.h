// Host memory of the CPU backend: buffers of their own (activations, the KV cache, large weights) and an
// arena that carves a model's smaller matrices out of slabs in 2 MB pages.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>

#include "minigpt/tensor.h"

namespace minigpt::cpu {

// The size of a transparent huge page, where the kernel gives them.
constexpr size_t kHugePage = size_t(2) << 20;

// Zero-filled host memory, 64-byte aligned (whole cache lines, aligned vector loads). From kHugePage up,
// 2 MB aligned and advised into 2 MB pages (THP "madvise" mode): a decode step streams hundreds of MB, and
// with 4 KB pages every 4 KB of it is a TLB miss.
class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(size_t bytes);
  ~HostBuffer() override;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* data() override { return data_; }
  size_t bytes() const override { return bytes_; }
  Device device() const override { return Device::Host; }

 private:
  void* data_;
  size_t bytes_;
};

// A model's weights, in slabs of kSlabBytes in 2 MB pages: most matrices of a small model are under 2 MB
// (SmolLM2-135M: 210 of its 211), and each in an allocation of its own sat in 4 KB pages, where a decode
// step's stream through it takes a TLB miss every 4 KB. Measured (SmolLM2-135M Q8_0, 2 threads, 4
// interleaved rounds, bench/results/2026-11-29-weight-pages.md): decode at 85-86% of the read paired with
// each step in buffers of their own, 87-90% carved from slabs. Allocations of kSlabBytes / 4 or more get a
// HostBuffer of their own. A slab lives until the last buffer carved from it is freed; nothing is freed
// back into a slab (a model's weights live and die together). Thread-safe.
class WeightArena {
 public:
  static constexpr size_t kSlabBytes = size_t(32) << 20;

  // Zero-filled, 64-byte aligned.
  std::unique_ptr<Buffer> alloc(size_t bytes);

 private:
  struct Slab;
  std::mutex mutex_;
  std::shared_ptr<Slab> slab_;  // the one being carved
  size_t used_ = 0;             // bytes of it carved
};

}  // namespace minigpt::cpu
