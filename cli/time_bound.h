// --from/--to/--at instants: relative to the start of the trace, or on the wall clock.
#pragma once

#include <cstdint>
#include <string>

namespace d9::cli {

// One end of a --from/--to window: seconds relative to the start of the trace (the earliest
// event of all inputs), or an absolute wall-clock instant (placed on each process's
// monotonic timeline through its ClockSyncEvent).
struct TimeBound {
  enum Kind { kNone, kRelative, kWall } kind = kNone;
  double seconds = 0;   // kRelative
  int64_t wall_ns = 0;  // kWall, ns since the Unix epoch
};
// Accepts "12", "12.5", "1500ms", "2m", "1h" (relative), "@1714560000[.5]" (Unix seconds)
// and "2024-05-01T12:00:00[.123][Z|+02:00]" or "2024-05-01 12:00:00" (local time without a
// zone).
bool parse_time(const std::string& s, TimeBound* out, std::string* error);

}  // namespace d9::cli
