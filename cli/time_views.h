// The views over time in the CLI: `d9 peak`, `d9 lifetimes`, `d9 alloc --sizes` and the live
// set at a moment (`--at` of `leaks` and `flame --kind live`). Estimates from cli/timeline.h.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/profile.h"
#include "cli/report.h"
#include "cli/timeline.h"

namespace d9::cli {

// The peak of one process: its moment and the sites live then.
struct ProcessPeak {
  uint32_t process = 0;
  Timeline::Peak peak;
  double t_s = 0;           // seconds since the trace's origin
  double run_fraction = 0;  // where in the process's own span [first, last] event
  std::vector<LiveStat> by_stack;
};
std::vector<ProcessPeak> find_peaks(const Profile& p, const Timeline& tl);

void print_peak(FILE* out, Profile& p, const Timeline& tl, const ReportOptions& o);

struct LifetimeOptions {
  uint64_t temporary_ns = 10'000'000;  // --temporary
};
// Per site: lifetime histogram and temporary share, grouped like the other reports.
struct LifetimeRow {
  std::vector<uint32_t> key;
  uint32_t rep_stack = 0;
  Timeline::StackLifetimes stat;
};
std::vector<LifetimeRow> group_lifetimes(Profile& p, const Timeline& tl, Group g, bool trim,
                                         uint64_t temporary_ns);
void print_lifetimes(FILE* out, Profile& p, const Timeline& tl, const ReportOptions& o,
                     const LifetimeOptions& lo);

void print_sizes(FILE* out, Profile& p, const Timeline& tl, const ReportOptions& o);

// The live set of every process at `at` (see Profile::to_mono), installed with
// Profile::set_live so `leaks` and `flame --kind live` report it.
void apply_live_at(Profile& p, const Timeline& tl, const TimeBound& at);

// Seconds since the trace's origin of a process's monotonic instant.
double seconds_from_origin(const Profile& p, const ProcessInfo& pr, uint64_t mono);

}  // namespace d9::cli
