// A bounded, lock-free, multi-producer single-consumer ring of fixed-size records.
//
// Producers (application threads on the sampled path, later signal handlers) never block:
// when every slot is taken the record is dropped and counted, and the writer reports the
// count. The consumer is the single d9 writer thread.
//
// Each slot carries a sequence number (Vyukov's bounded queue): slot i is free for the
// producer at position p when seq == p, and holds a published record for the consumer
// when seq == p + 1. Producers claim positions with one CAS; a producer that is
// interrupted between claim and publish only delays the consumer, never other producers.
//
// Memory comes from mmap once, at set-up, so the ring never calls the allocator it serves.
// Sequence numbers are stored relative to the slot index, so the zero pages of a fresh
// mapping already mean "free": a large ring costs resident memory only where it is used.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace d9 {

// PREFETCHW: the line arrives ready to be written, as no read prefetch can make it. CPUs
// without it (before Broadwell) execute it as a no-op.
inline void prefetch_for_write(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1);
#endif
}

class Ring {
 public:
  // Allocates `slots` (rounded up to a power of two) records of `record_size` bytes each.
  // Returns false when the memory cannot be mapped; the ring then drops everything.
  bool init(uint32_t slots, size_t record_size) {
    uint64_t n = 1;
    while (n < slots) n <<= 1;
    stride_ = (sizeof(Header) + record_size + 63) & ~size_t{63};
    void* mem =
        mmap(nullptr, stride_ * n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return false;
    base_ = static_cast<char*>(mem);
    mask_ = n - 1;
    record_size_ = record_size;
    return true;
  }

  // Forgets everything in flight (fork child: the producing threads no longer exist).
  void reset() {
    if (!base_) return;
    madvise(base_, stride_ * (mask_ + 1), MADV_DONTNEED);  // back to zero pages
    enqueue_.store(0, std::memory_order_relaxed);
    dequeue_ = 0;
    dropped_.store(0, std::memory_order_relaxed);
  }

  // Producer: reserves a slot and returns its record memory, or nullptr (counted) if full.
  void* try_claim(uint64_t* pos_out) {
    if (!base_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    uint64_t pos = enqueue_.load(std::memory_order_relaxed);
    for (;;) {
      Header* h = header(pos & mask_);
      // On the first lap no one has touched the slot yet (seq is 0, so it is free): not
      // reading it lets the record's first write fault its page in, rather than a read
      // mapping the zero page and the write then copying it (two faults a page).
      uint64_t seq = pos <= mask_ ? pos : h->seq.load(std::memory_order_acquire) + (pos & mask_);
      auto diff = static_cast<int64_t>(seq - pos);
      if (diff == 0) {
        if (enqueue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          *pos_out = pos;
          return h + 1;
        }
      } else if (diff < 0) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
      } else {
        pos = enqueue_.load(std::memory_order_relaxed);
      }
    }
  }

  // Producer: makes the record at `pos` visible to the consumer.
  void publish(uint64_t pos) {
    header(pos & mask_)->seq.store(pos + 1 - (pos & mask_), std::memory_order_release);
  }

  // Producer: takes ownership, ahead of time, of the first `lines` cache lines of the slot
  // the next claim will most likely take. The consumer touched them last, on another core:
  // a claim that finds them cold waits for them, and so do the record's stores.
  void prefetch_next(int lines) const {
    if (!base_) return;
    const char* slot =
        reinterpret_cast<const char*>(header(enqueue_.load(std::memory_order_relaxed) & mask_));
    for (int i = 0; i < lines && static_cast<size_t>(i) * 64 < stride_; ++i) {
      prefetch_for_write(slot + i * 64);
    }
  }

  // Consumer: the next published record, or nullptr if none is ready.
  const void* peek() const { return peek_at(0); }

  // Consumer: the record `k` places after peek()'s, or nullptr if it is not published yet.
  // Records stay in their slots, readable, until pop() frees them in order.
  const void* peek_at(uint64_t k) const {
    if (!base_ || k > mask_) return nullptr;
    uint64_t pos = dequeue_ + k;
    uint64_t i = pos & mask_;
    const Header* h = header(i);
    if (h->seq.load(std::memory_order_acquire) + i != pos + 1) return nullptr;
    return h + 1;
  }

  // Consumer: frees the record returned by peek() for producers.
  void pop() {
    uint64_t i = dequeue_ & mask_;
    header(i)->seq.store(dequeue_ + mask_ + 1 - i, std::memory_order_release);
    ++dequeue_;
  }

  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  // Positions claimed so far: with dropped(), every record offered since init or reset.
  uint64_t claimed() const { return enqueue_.load(std::memory_order_relaxed); }
  uint64_t capacity() const { return base_ ? mask_ + 1 : 0; }
  size_t record_size() const { return record_size_; }

 private:
  struct Header {
    std::atomic<uint64_t> seq;  // slot's sequence number minus its index; 0 in a fresh page
  };
  static_assert(std::atomic<uint64_t>::is_always_lock_free);
  // Header memory was constructed in reset(); the slots are laid out `stride_` apart.
  Header* header(uint64_t i) const { return reinterpret_cast<Header*>(base_ + i * stride_); }

  char* base_ = nullptr;
  uint64_t mask_ = 0;
  size_t stride_ = 0;
  size_t record_size_ = 0;
  alignas(64) std::atomic<uint64_t> enqueue_{0};
  alignas(64) uint64_t dequeue_ = 0;  // consumer only
  alignas(64) std::atomic<uint64_t> dropped_{0};
};

}  // namespace d9
