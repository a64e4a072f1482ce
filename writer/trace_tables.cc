#include "writer/trace_tables.h"

#include <algorithm>
#include <cstring>

namespace d9::decode {

namespace {
constexpr StackId kNoNext = 0xFFFFFFFF;  // end of a hash chain in next_
}  // namespace

uint64_t StackTable::Hash(const uint64_t* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  for (size_t i = 0; i < n; ++i) {
    h = (h ^ p[i]) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 29;
  }
  return h;
}

StackId StackTable::Commit(size_t start) {
  const size_t n = frames_.size() - start;
  const uint64_t h = Hash(frames_.data() + start, n);
  auto [it, inserted] = head_.try_emplace(h, kNoNext);
  for (StackId id = it->second; id != kNoNext; id = next_[id]) {
    std::span<const uint64_t> old = Get(id);
    if (old.size() == n &&
        (n == 0 || std::memcmp(old.data(), frames_.data() + start, n * 8) == 0)) {
      frames_.resize(start);
      return id;
    }
  }
  const auto id = static_cast<StackId>(size());
  offsets_.push_back(frames_.size());
  next_.push_back(it->second);
  it->second = id;
  return id;
}

StackId StackTable::Intern(U64ArrayView frames) {
  const size_t start = frames_.size();
  frames.AppendTo(&frames_);
  return Commit(start);
}

StackId StackTable::Intern(std::span<const uint64_t> frames) {
  const size_t start = frames_.size();
  frames_.insert(frames_.end(), frames.begin(), frames.end());
  return Commit(start);
}

std::string_view StringArena::Intern(std::string_view s) {
  static constexpr char kEmpty[] = "";
  if (s.empty()) return {kEmpty, 0};
  auto it = set_.find(s);
  if (it != set_.end()) return *it;
  if (chunk_size_ - chunk_used_ < s.size()) {
    chunk_size_ = std::max<size_t>(s.size(), 64 * 1024);
    chunks_.push_back(std::unique_ptr<char[]>(new char[chunk_size_]));  // no zero fill
    chunk_used_ = 0;
  }
  char* dst = chunks_.back().get() + chunk_used_;
  std::memcpy(dst, s.data(), s.size());
  chunk_used_ += s.size();
  std::string_view copy(dst, s.size());
  set_.insert(copy);
  return copy;
}

}  // namespace d9::decode
