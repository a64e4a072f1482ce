#include "alloc/collector.h"

#include <algorithm>
#include <cstring>

#include "alloc/records.h"

namespace d9::alloc {

uint64_t Collector::drain(Ring& ring, Segment& segment) {
  batch_.clear();
  order_.clear();
  const size_t record_size = ring.record_size();
  // Copy out first so slots go back to producers quickly, then sort: records from
  // different threads arrive slightly out of order, and sorted events need fewer
  // timestamp resets on the wire.
  while (const void* rec = ring.peek()) {
    const auto* r = static_cast<const AllocRecord*>(rec);
    size_t used = sizeof(AllocRecord) + r->depth * sizeof(uint64_t);
    order_.push_back(static_cast<uint32_t>(batch_.size()));
    batch_.insert(batch_.end(), static_cast<const uint8_t*>(rec),
                  static_cast<const uint8_t*>(rec) + std::min(used, record_size));
    ring.pop();
  }
  auto at = [this](uint32_t off) { return reinterpret_cast<const AllocRecord*>(&batch_[off]); };
  std::stable_sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) {
    return at(a)->timestamp_ns < at(b)->timestamp_ns;
  });

  Encoder& enc = segment.events();
  uint64_t written = 0;
  for (uint32_t off : order_) {
    const AllocRecord* r = at(off);
    enc.alloc_event(r->timestamp_ns, r->tid, r->size, r->addr, {r->frames(), r->depth});
    ++written;
  }

  uint64_t dropped = ring.dropped();
  if (dropped != reported_dropped_allocs_) {
    enc.overflow_event(monotonic_ns(), dropped - reported_dropped_allocs_, 0);
    reported_dropped_allocs_ = dropped;
    ++written;
  }
  segment.note_events(written);
  return written;
}

}  // namespace d9::alloc
