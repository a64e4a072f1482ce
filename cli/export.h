// Exports: pprof protobuf (gzipped, written by hand from profile.proto) and JSON lines.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/flame.h"
#include "cli/profile.h"

namespace d9::cli {

// pprof kinds: alloc (alloc_objects, alloc_space), live (inuse_objects, inuse_space),
// heap (all four, like Go's heap profiles) and cpu (samples, cpu nanoseconds).
enum class PprofKind { kAlloc, kLive, kHeap, kCpu };
bool parse_pprof_kind(const std::string& s, PprofKind* out);

// The uncompressed profile.proto message. Values are Horvitz–Thompson estimates rounded to
// integers; locations carry function names, files and lines (inlined frames as extra lines)
// where the segments had symbols, and one mapping per process.
std::string build_pprof(Profile& p, PprofKind kind);

// gzip (RFC 1952) with zlib.
std::string gzip(const std::string& data, int level = 6);

// Writes `data` to `path` ("-" = stdout). False with a message on stderr on failure.
bool write_file(const std::string& path, const std::string& data);

// One JSON object per event and line, in file order: {"file", "process", "event", "ts",
// then the event's own fields}. Stacks are hex addresses, with a parallel "<field>_symbols"
// array when the segment has symbols; AllocEvent gets its Horvitz–Thompson "est_bytes".
// Honors --pid/--process/--tid/--from/--to. Returns the number of readable files.
uint64_t export_jsonl(const std::vector<std::string>& files, const LoadOptions& options, FILE* out);

}  // namespace d9::cli
