// Writer-side half of allocation sampling: moves records out of the rings and encodes them
// into the current segment in timestamp order, pairs frees with their allocations through
// the live set, and reports drops as overflow deltas.
#pragma once

#include <cstdint>
#include <vector>

#include "alloc/live_map.h"
#include "alloc/profiler.h"
#include "alloc/records.h"
#include "writer/segment.h"
#include "writer/stack_table.h"

namespace d9::alloc {

class Collector {
 public:
  // True when the rings hold records or new drops to report.
  bool pending(const Rings& rings, const Counters& c) const;

  // Encodes everything published so far. Returns the number of events written.
  uint64_t drain(Rings& rings, const Counters& c, Segment& segment);

  // One Libd9LiveAllocation per sampled allocation still live; called before a seal.
  uint64_t write_live_set(Encoder& enc) const;

  size_t live_count() const { return live_.size(); }
  // Frees given up on: no matching allocation arrived within ~1 s (it predates a fork).
  uint64_t unmatched_frees() const { return unmatched_frees_; }

  // Starts afresh (fork child: new rings, new process).
  void reset();

 private:
  struct Item {
    uint64_t ts;
    const void* in_ring;  // an allocation record still in its ring slot, else nullptr
    uint32_t offset;      // into batch_, when not in the ring
    bool is_free;
    uint32_t drains_waited;  // frees: drains already spent pending
  };

  // Copies the free records out, freeing their slots at once (they are small).
  void copy_frees(Ring& ring);
  // Lists the allocation records where they lie. They are encoded in ring order, each slot
  // freed as soon as its record is; a run out of time order (threads that claimed close
  // together) is copied out instead, to be sorted.
  void list_allocs(Ring& ring);
  void copy(const void* rec, size_t size, Item* item);

  std::vector<uint8_t> batch_;  // copies of the drained records
  std::vector<Item> order_;
  // Frees whose allocation has not been drained yet. The alloc was published before the
  // free happened, but a ring hands records out in claim order, so another thread's
  // claimed-but-unpublished slot can hold it back for a while. Retried on every drain.
  struct PendingFree {
    FreeRecord record;
    uint32_t drains_waited;
  };
  std::vector<PendingFree> pending_frees_;
  // By address. Usually one entry per address, but a free can still be in flight (timed,
  // not yet published) when a newer allocation reusing its address arrives, so an address
  // may briefly hold several incarnations; a free pairs with the newest one before it.
  LiveMap live_;
  // Stacks of sampled allocations, interned once and kept across segments: the encoder
  // pools them by id, and the live set written at each seal refers to them.
  StackTable stacks_;
  uint64_t reported_dropped_allocs_ = 0;
  uint64_t reported_dropped_frees_ = 0;
  uint64_t unmatched_frees_ = 0;
};

}  // namespace d9::alloc
