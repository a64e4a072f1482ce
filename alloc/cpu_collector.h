// Writer-side half of CPU sampling: moves records out of the CPU ring and encodes them as
// CpuSampleEvent (dial9-format.md §2.1) into the current segment, with each thread's name,
// and keeps the per-segment counts the closing metadata reports.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "alloc/cpu_profiler.h"
#include "writer/segment.h"

namespace d9::cpu {

class Collector {
 public:
  // True when the ring holds samples or new drops to report. Thread exits alone (a name
  // to remember) are taken in here, so they never open a segment with nothing in it.
  bool pending(Ring& ring);

  // Encodes everything published so far. Returns the number of events written.
  uint64_t drain(Ring& ring, Segment& segment);

  // Counts for the closing metadata of the segment being sealed, then starts the next
  // segment's counts from zero.
  StringMap close_segment();

 private:
  struct Name {
    std::string name;
    uint64_t read_ns = 0;  // when comm was last read
    bool exited = false;   // final: taken from the thread's exit record
  };
  const std::string* name_of(uint32_t tid, uint64_t now);
  void note_exit(const CpuRecord& rec);

  std::vector<uint8_t> batch_;
  std::vector<std::pair<uint64_t, uint32_t>> order_;  // (timestamp, offset in batch_)
  std::unordered_map<uint32_t, Name> names_;
  uint64_t samples_ = 0, truncated_ = 0, overruns_ = 0, dropped_ = 0;
  uint64_t reported_drops_ = 0;
};

}  // namespace d9::cpu
