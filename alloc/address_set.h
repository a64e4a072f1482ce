// The sampled-address set: which pointers in the sampled arena are still tracked.
//
// A lock-free hash set of 8-way buckets, each one cache line: an address lives only in
// its own bucket, so insert, erase and lookup each touch exactly one line. An insert into
// a full bucket fails; the caller counts it as a dropped free (that allocation's free can
// no longer be reported, so leak figures become upper bounds and say so).
//
// False positives: the range check in front of this set (sampled_heap.h) is only a filter;
// a pointer in the range that is not in the set (memory the arena reused for an unsampled
// realloc, say) finds no entry here and produces no FreeEvent. Only an address inserted by
// a sampled allocation and not yet erased can ever match, so a FreeEvent is never wrong.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "alloc/ring.h"  // prefetch_for_write

namespace d9::alloc {

class AddressSet {
 public:
  static constexpr int kWays = 8;

  // Maps `buckets` (rounded up to a power of two) zeroed buckets. False on failure.
  bool init(size_t buckets) {
    size_t n = 1;
    while (n < buckets) n <<= 1;
    void* mem = mmap(nullptr, n * sizeof(Bucket), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) return false;
    buckets_ = static_cast<Bucket*>(mem);
    mask_ = n - 1;
    return true;
  }

  bool insert(uint64_t addr) {
    Bucket& b = bucket(addr);
    // No plain load first: on a page never touched, a read would map the zero page and
    // the write then copy it (two faults); the CAS faults it in once.
    for (auto& slot : b.slots) {
      uint64_t empty = 0;
      if (slot.compare_exchange_strong(empty, addr, std::memory_order_release)) return true;
    }
    return false;
  }

  // Removes addr; true if it was present.
  bool erase(uint64_t addr) {
    Bucket& b = bucket(addr);
    for (auto& slot : b.slots) {
      uint64_t expected = addr;
      if (slot.load(std::memory_order_relaxed) == addr &&
          slot.compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) {
        return true;
      }
    }
    return false;
  }

  // Starts loading addr's bucket ahead of an insert or erase.
  void prefetch(uint64_t addr) const { prefetch_for_write(&bucket(addr)); }

  bool contains(uint64_t addr) const {
    const Bucket& b = bucket(addr);
    for (const auto& slot : b.slots) {
      if (slot.load(std::memory_order_acquire) == addr) return true;
    }
    return false;
  }

  // Forgets every entry (fork child).
  void clear() {
    if (buckets_) madvise(buckets_, (mask_ + 1) * sizeof(Bucket), MADV_DONTNEED);
  }

 private:
  struct alignas(64) Bucket {
    std::atomic<uint64_t> slots[kWays];
  };
  static_assert(sizeof(Bucket) == 64, "one bucket, one cache line");

  Bucket& bucket(uint64_t addr) const {
    // Allocations are at least 16-byte aligned: drop those bits, then mix (Fibonacci).
    return buckets_[((addr >> 4) * 0x9E3779B97F4A7C15ULL >> 20) & mask_];
  }

  Bucket* buckets_ = nullptr;
  uint64_t mask_ = 0;
};

}  // namespace d9::alloc
