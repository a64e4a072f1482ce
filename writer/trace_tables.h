// The tables a decoded Trace keeps its stacks and strings in: StackTable (deduplicated stacks,
// numbered by StackId) and StringArena (owned copies of the strings events point to).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "writer/wire_decoder.h"

namespace d9::decode {

using StackId = uint32_t;
// Stack of an event whose pooled stack id was never interned (or was missing).
inline constexpr StackId kUnresolvedStack = 0xFFFFFFFF;

// Deduplicated stacks (leaf first), stored contiguously.
class StackTable {
 public:
  StackTable() = default;
  StackTable(StackTable&&) noexcept = default;
  StackTable& operator=(StackTable&&) noexcept = default;

  StackId Intern(U64ArrayView frames);
  StackId Intern(std::span<const uint64_t> frames);
  // Empty for kUnresolvedStack or an out-of-range id.
  std::span<const uint64_t> Get(StackId id) const {
    if (id >= size()) return {};
    return {frames_.data() + offsets_[id], offsets_[id + 1] - offsets_[id]};
  }
  size_t size() const { return offsets_.size() - 1; }

 private:
  StackId Commit(size_t start);
  static uint64_t Hash(const uint64_t* p, size_t n);

  std::vector<uint64_t> frames_;
  std::vector<size_t> offsets_{0};
  std::unordered_map<uint64_t, StackId> head_;  // content hash -> newest stack with that hash
  std::vector<StackId> next_;                   // older stack with the same hash
};

// Owns copies of strings referenced by a Trace. Views stay valid when the arena is moved.
class StringArena {
 public:
  StringArena() = default;
  StringArena(StringArena&&) noexcept = default;
  StringArena& operator=(StringArena&&) noexcept = default;
  std::string_view Intern(std::string_view s);

 private:
  std::vector<std::unique_ptr<char[]>> chunks_;
  size_t chunk_used_ = 0;
  size_t chunk_size_ = 0;
  std::unordered_set<std::string_view> set_;
};

}  // namespace d9::decode
