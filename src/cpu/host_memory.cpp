#include "cpu/host_memory.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace minigpt::cpu {
namespace {

// `bytes` (a multiple of `align`) aligned to `align`, advised into 2 MB pages when `huge`; not yet touched.
void* allocate(size_t bytes, size_t align, bool huge) {
  void* p = std::aligned_alloc(align, bytes);
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (huge) ::madvise(p, bytes, MADV_HUGEPAGE);  // advice only: failure leaves 4 KB pages
#else
  (void)huge;
#endif
  return p;
}

}  // namespace

HostBuffer::HostBuffer(size_t bytes) : bytes_(bytes) {
  const bool huge = bytes >= kHugePage;
  const size_t align = huge ? kHugePage : 64;
  const size_t rounded = bytes == 0 ? 64 : (bytes + align - 1) / align * align;
  data_ = allocate(rounded, align, huge);
  std::memset(data_, 0, rounded);
}

HostBuffer::~HostBuffer() { std::free(data_); }

// Pages of a slab are touched (and so committed) only as buffers are carved from it.
struct WeightArena::Slab {
  void* data;
  explicit Slab(size_t bytes) : data(allocate(bytes, kHugePage, true)) {}
  ~Slab() { std::free(data); }
  Slab(const Slab&) = delete;
  Slab& operator=(const Slab&) = delete;
};

namespace {

class SlabBuffer final : public Buffer {
 public:
  SlabBuffer(std::shared_ptr<void> slab, void* data, size_t bytes)
      : slab_(std::move(slab)), data_(data), bytes_(bytes) {}
  void* data() override { return data_; }
  size_t bytes() const override { return bytes_; }
  Device device() const override { return Device::Host; }

 private:
  std::shared_ptr<void> slab_;  // keeps the slab alive
  void* data_;
  size_t bytes_;
};

}  // namespace

std::unique_ptr<Buffer> WeightArena::alloc(size_t bytes) {
  if (bytes >= kSlabBytes / 4) return std::make_unique<HostBuffer>(bytes);
  const size_t rounded = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!slab_ || kSlabBytes - used_ < rounded) {
    slab_ = std::make_shared<Slab>(kSlabBytes);
    used_ = 0;
  }
  void* p = static_cast<char*>(slab_->data) + used_;
  used_ += rounded;
  std::memset(p, 0, rounded);
  return std::make_unique<SlabBuffer>(std::shared_ptr<void>(slab_, slab_.get()), p, bytes);
}

}  // namespace minigpt::cpu
