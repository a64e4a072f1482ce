// The writer's live set: sampled allocations not freed yet, by address. Open addressing
// with the entries in the table itself, so adding and removing one allocation per sample
// allocates nothing (a node-based map allocated and freed a node for each).
//
// An address usually holds one entry, but can briefly hold several incarnations: a free
// still in flight when a newer allocation at the same address arrives (see Collector). So
// entries of one address are not merged, and a removal picks among them by time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace d9::alloc {

class LiveMap {
 public:
  struct Live {
    uint64_t alloc_ts;
    uint64_t size;
    uint32_t tid;
    uint32_t stack;  // id in the collector's StackTable
  };

  void insert(uint64_t addr, const Live& live) {
    if ((used_ + 1) * 2 > slots_.size()) rehash();  // live + removed entries <= half
    for (size_t i = index(addr);; i = (i + 1) & mask_) {
      if (slots_[i].addr == kEmpty) {
        slots_[i] = {addr, live};
        ++used_;
        ++size_;
        return;
      }
    }
  }

  // Removes the newest entry of `addr` allocated before `ts` into *out. False if none.
  bool take_before(uint64_t addr, uint64_t ts, Live* out) {
    if (size_ == 0) return false;
    Slot* best = nullptr;
    for (size_t i = index(addr); slots_[i].addr != kEmpty; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.addr == addr && s.live.alloc_ts < ts &&
          (best == nullptr || s.live.alloc_ts > best->live.alloc_ts)) {
        best = &s;
      }
    }
    if (best == nullptr) return false;
    *out = best->live;
    best->addr = kRemoved;  // keeps the probe sequences through it intact
    --size_;
    return true;
  }

  size_t size() const { return size_; }

  // f(addr, live) for every entry, in no particular order.
  template <class F>
  void for_each(F f) const {
    for (const Slot& s : slots_) {
      if (s.addr != kEmpty && s.addr != kRemoved) f(s.addr, s.live);
    }
  }

  void clear() {
    slots_.assign(slots_.size(), Slot{});
    used_ = size_ = 0;
  }

 private:
  // Never a block's address: blocks are at least 16-byte aligned and not at 0.
  static constexpr uint64_t kEmpty = 0, kRemoved = 1;
  struct Slot {
    uint64_t addr = kEmpty;
    Live live{};
  };

  size_t index(uint64_t addr) const {
    return static_cast<size_t>(((addr >> 4) * 0x9e3779b97f4a7c15ULL) >> 32) & mask_;
  }

  // Grows (or, after many removals, just sweeps out removed entries) to twice the live
  // entries' need.
  void rehash() {
    size_t n = 64;
    while (n < size_ * 4 + 4) n *= 2;
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(n, Slot{});
    mask_ = n - 1;
    used_ = size_ = 0;
    for (const Slot& s : old) {
      if (s.addr != kEmpty && s.addr != kRemoved) insert(s.addr, s.live);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t used_ = 0;  // live and removed entries: what the probes walk through
  size_t size_ = 0;  // live entries
};

}  // namespace d9::alloc
