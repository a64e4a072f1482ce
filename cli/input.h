// Input for the `d9` subcommands: finding segment files, decoding one at a time, and a
// progress line.
//
// Segments are read strictly one file at a time: a raw file is mapped, a compressed one
// decompressed, and the caller folds its events into running totals as the decoder visits
// them; then the bytes are dropped. Memory therefore grows with the number of distinct
// stacks, symbols and live allocations, never with the number of files or events.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "writer/container.h"
#include "writer/wire_decoder.h"

namespace d9::cli {

// Every segment file under `paths`, in reading order. A file named on the command line is
// taken whatever its name (the format is told by its magic bytes); a directory is searched
// recursively for *.bin, *.bin.gz, *.bin.zst and *.active. Files of one directory come in
// segment order (trace.2 before trace.10), so a process's segments are read oldest first.
// Paths that do not exist are reported on stderr and appended to `missing`.
// A path that names remote segments (s3://…) goes to the resolver set here, which makes
// them local files (the d9 command sets ship/'s: cached downloads) in reading order. False
// when it failed (said on stderr): the path counts as missing.
std::vector<std::string> collect_inputs(const std::vector<std::string>& paths,
                                        std::vector<std::string>* missing = nullptr);
using RemoteInputs = std::function<bool(const std::string& path, std::vector<std::string>* files)>;
void set_remote_inputs(RemoteInputs resolver);

// Sort key used by collect_inputs: directory, then segment number, then name.
bool segment_order(const std::string& a, const std::string& b);

inline constexpr char kLiveAllocationEvent[] = "Libd9LiveAllocation";

// The raw dial9 bytes of one segment file: the file mapped into memory when it is raw, or
// its decompressed contents. Only one of these is alive at a time while d9 reads inputs.
class RawSegment {
 public:
  RawSegment() = default;
  ~RawSegment();
  RawSegment(const RawSegment&) = delete;
  RawSegment& operator=(const RawSegment&) = delete;

  // Reads `path`, decompressing at most `max_raw` bytes; false only when nothing could be
  // read at all (see error()).
  bool open(const std::string& path, size_t max_raw = decode::kDefaultMaxDecompressedBytes);
  // Takes the bytes of a file as given (any container), as if read from `path`. For tests.
  void assign(const std::string& path, std::span<const uint8_t> data);

  std::span<const uint8_t> raw() const { return raw_; }
  decode::Container container() const { return container_; }
  uint64_t file_bytes() const { return file_bytes_; }
  // I/O or decompression error ("" when none); whatever was recovered is still in raw().
  const std::string& error() const { return error_; }

 private:
  void unmap();
  void decompress(std::span<const uint8_t> data, size_t max_raw);
  // Single-shot decompression into an exactly sized, uninitialised buffer when the size is
  // known up front (one zstd frame with its content size; one gzip member, from ISIZE).
  // False when that does not apply or fails: decompress() then takes the general path.
  bool decompress_fast(std::span<const uint8_t> data, size_t max_raw);

  std::span<const uint8_t> raw_;
  std::vector<uint8_t> owned_;
  std::unique_ptr<uint8_t[]> fast_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  decode::Container container_ = decode::Container::kUnknown;
  uint64_t file_bytes_ = 0;
  std::string error_;
};

// One line for a damaged file: "<path>: <what went wrong, with the byte offset>; kept the N
// events before it" (or "; nothing readable").
std::string describe_error(const std::string& path, decode::Container container,
                           const std::string& read_error, const decode::DecodeResult& result);

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
