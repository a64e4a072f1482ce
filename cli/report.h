// Text and JSON reports of the `d9` subcommands, built from a loaded Profile.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/profile.h"

namespace d9::cli {

struct ReportOptions {
  size_t top = 10;
  int frames = 6;  // frames shown per stack site
  Group group = Group::kStack;
  bool json = false;
  bool by_thread = false;
  bool trim = true;  // memory sites: skip leaf-side allocation plumbing (Profile::group_key)
  std::string at;    // leaks: the moment of the live set when not the end (`--at`)
};

// Stacks grouped by Profile::group_key, heaviest first.
template <typename Stat>
struct Row {
  std::vector<uint32_t> key;  // labels, leaf first
  Stat stat;
  uint32_t rep_stack = 0;  // the heaviest stack in the group (for addresses in JSON)
  double rep_weight = -1;
};
std::vector<Row<MemStat>> group_alloc(Profile& p, Group g, bool trim = true);
std::vector<Row<LiveStat>> group_live(Profile& p, Group g, bool trim = true);
// The same over a live set other than the Profile's (the live set at another moment).
std::vector<Row<LiveStat>> group_live(Profile& p, const std::vector<LiveStat>& by_stack, Group g,
                                      bool trim = true);

struct CpuRow {
  std::vector<uint32_t> key;
  CpuStat self;   // samples whose leaf is this key (or, by stack, this exact stack)
  CpuStat total;  // samples with this key anywhere in the stack, counted once per sample
  uint32_t rep_stack = 0;
};
// thread < 0: all threads; else only samples of that thread index. Sorted by self.
std::vector<CpuRow> group_cpu(Profile& p, Group g, int64_t thread = -1);

// "leaf <- caller <- …" for a key, cut to `frames` labels for stack groups.
std::string site_name(const Profile& p, const std::vector<uint32_t>& key, Group g, int frames);
// Key as one string, for diffs between two profiles.
std::string key_string(const Profile& p, const std::vector<uint32_t>& key);

// Pieces of the reports shared with the views over time (cli/time_views.h).
using ull = unsigned long long;
double pct(double part, double whole);
std::string fmt_count(double v);
std::string fmt_duration(double ns);
std::string frame_json(const Profile& p, uint32_t frame);
std::string labels_json(const Profile& p, const std::vector<uint32_t>& key);
std::string stack_json(const Profile& p, uint32_t stack);
// "est_bytes", "ci95_bytes", "est_allocs", "samples", "sampled_bytes", "share" members.
std::string mem_json(const MemStat& s, double total);
std::string processes_json(const Profile& p);

void print_summary(FILE* out, Profile& p, const ReportOptions& o);
void print_alloc(FILE* out, Profile& p, const ReportOptions& o);
void print_leaks(FILE* out, Profile& p, const ReportOptions& o);
void print_cpu(FILE* out, Profile& p, const ReportOptions& o);
void print_diff(FILE* out, Profile& a, Profile& b, const std::string& name_a,
                const std::string& name_b, const ReportOptions& o);

}  // namespace d9::cli
