// Records that travel from application threads to the writer thread through the rings.
// Fixed layout, no pointers to heap memory: the writer reads them in their ring slots (or
// copies them out, to sort them) and encodes them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace d9 {

struct AllocRecord {
  uint64_t timestamp_ns;  // CLOCK_MONOTONIC
  uint64_t addr;
  uint64_t size;  // requested size
  uint32_t tid;
  uint32_t depth;  // frames that follow, leaf first
  uint64_t* frames() { return reinterpret_cast<uint64_t*>(this + 1); }
  const uint64_t* frames() const { return reinterpret_cast<const uint64_t*>(this + 1); }
  static size_t bytes_for(int max_depth) {
    return sizeof(AllocRecord) + sizeof(uint64_t) * static_cast<size_t>(max_depth);
  }
};
static_assert(sizeof(AllocRecord) % alignof(uint64_t) == 0);

// A free (or a moving realloc) of a sampled, still-tracked allocation. The writer fills in
// size and the allocation's timestamp from its live set.
struct FreeRecord {
  uint64_t timestamp_ns;
  uint64_t addr;
  uint32_t tid;
  uint32_t unused;
};

}  // namespace d9
