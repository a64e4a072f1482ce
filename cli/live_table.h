// LiveTable: the sampled allocations of one process not yet matched by a free, keyed by
// (address, allocation timestamp) exactly as dial9's toolkit pairs FreeEvents with
// AllocEvents. Open addressing with linear probing and backward-shift deletion: one insert
// and one erase per sampled allocation is the hot path of `d9 summary` and `d9 leaks`.
#pragma once

#include <cstdint>
#include <vector>

namespace d9::cli {

struct LiveAlloc {
  uint32_t stack = 0;
  uint32_t tid = 0;
  uint64_t size = 0;
  uint64_t rate = 0;
};

// Keyed by (address, allocation timestamp); the value is a LiveAlloc for the live set, a
// sample's index for the views over time (cli/timeline.h).
template <class V>
class BasicLiveTable {
 public:
  struct Slot {
    uint64_t addr = 0;
    uint64_t ts = kEmpty;  // kEmpty marks a free slot
    V value;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The value of (addr, ts), or null.
  V* find(uint64_t addr, uint64_t ts) {
    if (size_ == 0 || ts == kEmpty) return nullptr;
    for (size_t i = index(addr, ts); slots_[i].ts != kEmpty; i = (i + 1) & mask_) {
      if (slots_[i].addr == addr && slots_[i].ts == ts) return &slots_[i].value;
    }
    return nullptr;
  }

  void insert(uint64_t addr, uint64_t ts, const V& v) {
    if (ts == kEmpty) return;
    if ((size_ + 1) * 2 > slots_.size()) grow();
    size_t i = index(addr, ts);
    while (slots_[i].ts != kEmpty) {
      if (slots_[i].addr == addr && slots_[i].ts == ts) {
        slots_[i].value = v;
        return;
      }
      i = (i + 1) & mask_;
    }
    slots_[i] = {addr, ts, v};
    ++size_;
  }

  bool erase(uint64_t addr, uint64_t ts) {
    if (size_ == 0 || ts == kEmpty) return false;
    size_t i = index(addr, ts);
    while (slots_[i].ts != kEmpty) {
      if (slots_[i].addr == addr && slots_[i].ts == ts) {
        // Backward shift: pull later members of the probe run into the hole.
        size_t hole = i;
        for (size_t j = (i + 1) & mask_; slots_[j].ts != kEmpty; j = (j + 1) & mask_) {
          size_t home = index(slots_[j].addr, slots_[j].ts);
          // Move j into the hole unless its home lies cyclically in (hole, j].
          bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
          if (!stays) {
            slots_[hole] = slots_[j];
            hole = j;
          }
        }
        slots_[hole].ts = kEmpty;
        --size_;
        return true;
      }
      i = (i + 1) & mask_;
    }
    return false;
  }

  void clear() {
    std::vector<Slot>().swap(slots_);
    size_ = 0;
    mask_ = 0;
  }

  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const Slot& s : slots_) {
      if (s.ts != kEmpty) fn(s.addr, s.ts, s.value);
    }
  }

 private:
  size_t index(uint64_t addr, uint64_t ts) const {
    uint64_t h = (addr ^ (ts * 0x9E3779B97F4A7C15ULL)) * 0xBF58476D1CE4E5B9ULL;
    return static_cast<size_t>(h ^ (h >> 32)) & mask_;
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (const Slot& s : old) {
      if (s.ts != kEmpty) insert(s.addr, s.ts, s.value);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

using LiveTable = BasicLiveTable<LiveAlloc>;

}  // namespace d9::cli
