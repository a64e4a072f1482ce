// Writer-side half of allocation sampling: moves records out of the alloc ring and encodes
// them into the current segment, in timestamp order, with overflow deltas.
#pragma once

#include <cstdint>
#include <vector>

#include "alloc/ring.h"
#include "writer/segment.h"

namespace d9::alloc {

class Collector {
 public:
  // Encodes every record published so far. Returns the number of events written.
  uint64_t drain(Ring& ring, Segment& segment);

  // True when the ring holds records or new drops to report.
  bool pending(const Ring& ring) const {
    return ring.peek() != nullptr || ring.dropped() != reported_dropped_allocs_;
  }

  // Starts counting drops afresh (fork child: a new ring, a new process).
  void reset() { reported_dropped_allocs_ = 0; }

 private:
  std::vector<uint8_t> batch_;     // copies of the drained records
  std::vector<uint32_t> order_;    // offsets into batch_, sorted by timestamp
  uint64_t reported_dropped_allocs_ = 0;
};

}  // namespace d9::alloc
