// Interns call stacks: one id per distinct sequence of frame addresses, numbered in order
// of first appearance. The writer looks up every allocation sample's stack (the encoder's
// pooled stacks, the live set's stacks), so a lookup hashes the frames where they lie: no
// key string is built, and nothing is allocated once the stack is known.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace d9 {

class StackTable {
 public:
  struct Interned {
    uint32_t id;
    bool inserted;  // first time this stack was seen
  };

  Interned intern(std::span<const uint64_t> frames) {
    if ((entries_.size() + 1) * 2 > slots_.size()) grow();  // load factor <= 1/2
    const uint64_t h = hash(frames);
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const uint32_t slot = slots_[i];
      if (slot == 0) {
        const auto id = static_cast<uint32_t>(entries_.size());
        entries_.push_back({h, frames_.size(), frames.size()});
        frames_.insert(frames_.end(), frames.begin(), frames.end());
        slots_[i] = id + 1;
        return {id, true};
      }
      const Entry& e = entries_[slot - 1];
      if (e.hash == h && std::ranges::equal(stack(e), frames)) return {slot - 1, false};
    }
  }

  std::span<const uint64_t> frames(uint32_t id) const { return stack(entries_[id]); }
  size_t size() const { return entries_.size(); }

  void clear() {
    entries_.clear();
    frames_.clear();
    std::fill(slots_.begin(), slots_.end(), 0);
  }

 private:
  struct Entry {
    uint64_t hash;
    size_t offset;  // into frames_
    size_t depth;
  };

  std::span<const uint64_t> stack(const Entry& e) const {
    return {frames_.data() + e.offset, e.depth};
  }

  static uint64_t hash(std::span<const uint64_t> frames) {
    uint64_t h = frames.size();
    for (uint64_t pc : frames) {
      h = (h ^ pc) * 0x9e3779b97f4a7c15ULL;
      h ^= h >> 29;
    }
    return h ^ (h >> 32);
  }

  void grow() {
    slots_.assign(slots_.empty() ? 64 : slots_.size() * 2, 0);
    const size_t mask = slots_.size() - 1;
    for (size_t id = 0; id < entries_.size(); ++id) {
      size_t i = entries_[id].hash & mask;
      while (slots_[i] != 0) i = (i + 1) & mask;
      slots_[i] = static_cast<uint32_t>(id + 1);
    }
  }

  std::vector<Entry> entries_;  // by id
  std::vector<uint64_t> frames_;
  std::vector<uint32_t> slots_;  // open addressing: id + 1, 0 = empty
};

}  // namespace d9
