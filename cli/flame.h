// Flame graphs: folded stacks (flamegraph.pl / speedscope / inferno input) and a
// self-contained interactive SVG (click to zoom, Ctrl-F or the Search button to highlight,
// Escape to reset), written without any external tool.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cli/profile.h"

namespace d9::cli {

enum class Kind { kAlloc, kLive, kCpu };
bool parse_kind(const std::string& s, Kind* out);
const char* kind_name(Kind k);

struct Folded {
  std::string stack;  // root first, frames separated by ';'
  double value = 0;   // estimated bytes (alloc, live) or on-CPU samples (cpu)
};

// Every stack of the profile with a non-zero value, frames labelled at function (or, with
// Group::kLine, "function file:line") granularity, inlined frames expanded. With by_thread
// (cpu only) each stack starts with a "thread TID (name)" frame. Sorted by stack.
std::vector<Folded> folded_stacks(Profile& p, Kind kind, Group labels, bool by_thread);

// The frames of one stack as a flame graph shows them, root first, inlined frames expanded,
// ';' replaced (folded-stack safe); "(no stack)" for an empty stack. The HTML report draws
// its flame graphs from these too.
std::vector<std::string> flame_frames(Profile& p, uint32_t stack, Group labels);

// "stack value\n" lines, values rounded to integers.
void write_folded(FILE* out, const std::vector<Folded>& stacks);

struct FlameOptions {
  std::string title;
  std::string subtitle;
  Kind kind = Kind::kCpu;
  int width = 1200;
  double min_width_px = 0.1;  // narrower frames are left out (they reappear in no zoom)
};
void write_flame_svg(FILE* out, const std::vector<Folded>& stacks, const FlameOptions& options);

}  // namespace d9::cli
