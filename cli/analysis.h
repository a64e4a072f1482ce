// Analyses shared by the `d9` subcommands: loading segments from files or directories,
// and Horvitz–Thompson estimates per allocation site.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "writer/decoder.h"

namespace d9::cli {

// Every segment file under the given paths (files are taken as they are; directories are
// searched recursively for *.bin, *.bin.gz, *.bin.zst and *.active), sorted.
std::vector<std::string> collect_inputs(const std::vector<std::string>& paths);

// Symbol names for addresses, from the SymbolTableEntry records of one segment.
class SymbolMap {
 public:
  void add(const decode::Trace& trace);
  // "function" for the outermost frame at addr plus inlined callees as "outer > inner",
  // or the hex address when unknown.
  std::string name(uint64_t addr) const;

 private:
  std::map<uint64_t, std::vector<std::string>> names_;  // by addr, index = inline depth
};

struct SiteEstimate {
  std::vector<uint64_t> stack;  // leaf first
  double bytes = 0;             // sum of per-sample Horvitz–Thompson weights
  double variance = 0;          // sum of w^2 (1 - p): HT variance estimator
  uint64_t samples = 0;
  uint64_t raw_bytes = 0;
};

}  // namespace d9::cli
