// d9: answers from dial9 segments written by libd9.so.
//
//   d9 summary PATH...   processes, samples, sample rate, drops, top allocation sites
//   d9 alloc PATH...     top allocation sites by estimated bytes, with 95% intervals
//
// PATH is a segment file or a directory searched recursively.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "alloc/sampler.h"
#include "cli/analysis.h"

namespace d9::cli {

namespace fs = std::filesystem;

std::vector<std::string> collect_inputs(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  auto is_segment = [](const std::string& name) {
    auto ends = [&](const char* s) {
      size_t n = strlen(s);
      return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
    };
    return ends(".bin") || ends(".bin.gz") || ends(".bin.zst") || ends(".active");
  };
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (auto it = fs::recursive_directory_iterator(p, ec);
           it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) break;
        if (it->is_regular_file() && is_segment(it->path().filename().string())) {
          out.push_back(it->path().string());
        }
      }
    } else {
      out.push_back(p);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void SymbolMap::add(const decode::Trace& trace) {
  for (const decode::SymbolTableEntry& s : trace.symbols) {
    auto& v = names_[s.addr];
    if (v.size() <= s.inline_depth) v.resize(s.inline_depth + 1);
    v[s.inline_depth] = std::string(s.name);
  }
}

std::string SymbolMap::name(uint64_t addr) const {
  auto it = names_.find(addr);
  if (it == names_.end()) {
    char buf[32];
    snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(addr));
    return buf;
  }
  std::string out;
  // Innermost (most inlined) first, matching a leaf-first stack.
  for (auto r = it->second.rbegin(); r != it->second.rend(); ++r) {
    if (r->empty()) continue;
    if (!out.empty()) out += " < ";
    out += *r;
  }
  return out;
}

namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

struct Loaded {
  uint64_t files = 0, unreadable = 0;
  std::set<std::string> processes;
  uint64_t samples = 0, dropped_allocs = 0, dropped_frees = 0;
  uint64_t rate = 0;
  std::set<uint64_t> rates;
  std::map<std::vector<uint64_t>, SiteEstimate> sites;
  SymbolMap symbols;
};

// Streams the inputs one file at a time, folding each into the running totals.
bool load(const std::vector<std::string>& inputs, Loaded* out) {
  for (const std::string& path : inputs) {
    decode::Trace t = decode::LoadTrace(path);
    ++out->files;
    if (!t.ok()) {
      fprintf(stderr, "d9: %s: %s\n", path.c_str(), t.error.c_str());
      if (!t.decoded_anything()) {
        ++out->unreadable;
        continue;
      }
    }
    uint64_t rate = 524288;
    if (auto it = t.metadata.find("memory.sample_rate_bytes"); it != t.metadata.end()) {
      rate = strtoull(it->second.c_str(), nullptr, 10);
    }
    out->rates.insert(rate);
    if (auto it = t.metadata.find("boot_id"); it != t.metadata.end()) {
      out->processes.insert(it->second);
    }
    for (const decode::Overflow& o : t.overflows) {
      out->dropped_allocs += o.dropped_allocs;
      out->dropped_frees += o.dropped_frees;
    }
    out->symbols.add(t);
    for (const decode::AllocEvent& a : t.allocs) {
      auto frames = t.stack(a.stack);
      std::vector<uint64_t> key(frames.begin(), frames.end());
      SiteEstimate& s = out->sites[key];
      if (s.samples == 0) s.stack = key;
      // Weight each sample first, then sum: unbiased for every site and size mix.
      double w = sample_weight(a.size, rate);
      double p = sample_probability(a.size, rate);
      s.bytes += w;
      s.variance += w * w * (1 - p);
      s.raw_bytes += a.size;
      ++s.samples;
      ++out->samples;
    }
  }
  out->rate = out->rates.size() == 1 ? *out->rates.begin() : 0;
  return out->unreadable < out->files;
}

std::vector<const SiteEstimate*> top_sites(const Loaded& l, size_t n) {
  std::vector<const SiteEstimate*> v;
  for (const auto& [k, s] : l.sites) v.push_back(&s);
  std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->bytes > b->bytes; });
  if (v.size() > n) v.resize(n);
  return v;
}

void print_sites(const Loaded& l, size_t n, int frames) {
  double total = 0;
  for (const auto& [k, s] : l.sites) total += s.bytes;
  printf("  %12s %9s %7s %8s  %s\n", "est. bytes", "±95%", "share", "samples",
         "allocation site (leaf first)");
  for (const SiteEstimate* s : top_sites(l, n)) {
    double ci = 1.96 * std::sqrt(s->variance);
    std::string where;
    for (int i = 0; i < static_cast<int>(s->stack.size()) && i < frames; ++i) {
      if (i) where += " <- ";
      where += l.symbols.name(s->stack[i]);
    }
    if (s->stack.empty()) where = "(no stack)";
    printf("  %12s %8.1f%% %6.1f%% %8llu  %s\n", human_bytes(s->bytes).c_str(),
           s->bytes > 0 ? 100 * ci / s->bytes : 0.0, total > 0 ? 100 * s->bytes / total : 0.0,
           static_cast<unsigned long long>(s->samples), where.c_str());
  }
}

void print_header(const Loaded& l) {
  double total = 0, variance = 0;
  for (const auto& [k, s] : l.sites) {
    total += s.bytes;
    variance += s.variance;
  }
  printf("%llu segment(s), %zu process(es), %llu allocation samples",
         static_cast<unsigned long long>(l.files), l.processes.size(),
         static_cast<unsigned long long>(l.samples));
  if (l.rate) {
    printf(" at a mean rate of %s\n", human_bytes(static_cast<double>(l.rate)).c_str());
  } else {
    printf(" at mixed rates\n");
  }
  printf("estimated bytes allocated: %s ±%.1f%% (95%%)\n", human_bytes(total).c_str(),
         total > 0 ? 100 * 1.96 * std::sqrt(variance) / total : 0.0);
  if (l.dropped_allocs || l.dropped_frees) {
    printf("warning: %llu allocation samples and %llu frees were dropped (ring full); "
           "estimates are low by about that many samples\n",
           static_cast<unsigned long long>(l.dropped_allocs),
           static_cast<unsigned long long>(l.dropped_frees));
  }
}

int usage() {
  fprintf(stderr,
          "usage: d9 <command> PATH...\n"
          "  summary PATH...   processes, samples, sample rate, drops and top 5 sites\n"
          "  alloc PATH...     top allocation sites by estimated bytes (95%% intervals)\n"
          "    --top N           sites to show (default 10)\n"
          "    --frames N        frames per site (default 6)\n"
          "PATH is a segment (.bin, .bin.gz, .bin.zst, .active) or a directory.\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) return usage();
  std::string cmd = argv[1];
  size_t top = cmd == "summary" ? 5 : 10;
  int frames = 6;
  std::vector<std::string> paths;
  for (int i = 2; i < argc; ++i) {
    if (!strcmp(argv[i], "--top") && i + 1 < argc) {
      top = strtoull(argv[++i], nullptr, 10);
    } else if (!strcmp(argv[i], "--frames") && i + 1 < argc) {
      frames = atoi(argv[++i]);
    } else {
      paths.push_back(argv[i]);
    }
  }
  if ((cmd != "summary" && cmd != "alloc") || paths.empty()) return usage();
  std::vector<std::string> inputs = collect_inputs(paths);
  if (inputs.empty()) {
    fprintf(stderr, "d9: no segments found in the given paths\n");
    return 1;
  }
  Loaded l;
  if (!load(inputs, &l)) {
    fprintf(stderr, "d9: nothing readable in %zu file(s)\n", inputs.size());
    return 1;
  }
  print_header(l);
  print_sites(l, top, frames);
  return 0;
}

}  // namespace d9::cli

int main(int argc, char** argv) { return d9::cli::main(argc, argv); }
