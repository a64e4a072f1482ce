// Input for the `d9` subcommands: finding segment files, decoding one at a time, and a
// progress line.
//
// Segments are read strictly one file at a time: a file is decompressed, decoded into a
// decode::Trace (plus d9's own Libd9LiveAllocation records), folded into the running
// totals by the caller, then dropped. Memory therefore grows with the number of distinct
// stacks, symbols and live allocations, never with the number of files or events.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "writer/decoder.h"

namespace d9::cli {

// Every segment file under `paths`, in reading order. A file named on the command line is
// taken whatever its name (the format is told by its magic bytes); a directory is searched
// recursively for *.bin, *.bin.gz, *.bin.zst and *.active. Files of one directory come in
// segment order (trace.2 before trace.10), so a process's segments are read oldest first.
// Paths that do not exist are reported on stderr and appended to `missing`.
std::vector<std::string> collect_inputs(const std::vector<std::string>& paths,
                                        std::vector<std::string>* missing = nullptr);

// Sort key used by collect_inputs: directory, then segment number, then name.
bool segment_order(const std::string& a, const std::string& b);

// A Libd9LiveAllocation record: one sampled allocation still live when its segment was
// sealed (untimestamped, written by libd9 at seal). Stack ids index the segment's Trace.
struct LiveRecord {
  uint32_t tid = 0;
  uint64_t size = 0;
  uint64_t addr = 0;
  uint64_t alloc_ts = 0;
  decode::StackId stack = decode::kUnresolvedStack;
};

inline constexpr char kLiveAllocationEvent[] = "Libd9LiveAllocation";

// One decoded segment.
struct Segment {
  std::string path;
  uint64_t file_bytes = 0;  // size on disk
  decode::Trace trace;
  std::vector<LiveRecord> live;  // Libd9LiveAllocation records, in file order
  bool has_live_snapshot = false;
  // Empty when the file was clean; otherwise one line naming the file and the byte offset.
  std::string error;
  bool readable() const { return trace.decoded_anything(); }
};

// Reads, decompresses and decodes `path`. Never throws for bad input: on corruption the
// events before the bad frame are kept and `error` says where it went wrong.
Segment read_segment(const std::string& path);

// Decodes `raw` (any container) as if it had been read from `path`. For tests.
Segment decode_segment(const std::string& path, std::vector<uint8_t> data);

// "d9: <path>: <what> at offset N ..." style message for a decode or decompression error.
std::string describe_error(const std::string& path, const decode::Trace& trace);

// A one-line progress indicator on stderr, shown only when stderr is a terminal and the
// work has already taken more than a second; redrawn at most ten times a second.
class Progress {
 public:
  Progress(uint64_t total_files, uint64_t total_bytes, bool enabled);
  ~Progress();
  void update(uint64_t files_done, uint64_t bytes_done);
  void clear();

 private:
  uint64_t total_files_, total_bytes_;
  bool enabled_;
  bool shown_ = false;
  double start_ = 0, last_ = 0;
};

// Total size on disk of the given files (for the progress line and throughput figures).
uint64_t total_file_bytes(const std::vector<std::string>& files);

}  // namespace d9::cli
