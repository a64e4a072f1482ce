// One segment file: `{dir}/{stem}.{N}.bin.active` while written, `{stem}.{N}.bin` once sealed.
//
// Layout (dial9-format.md §5.1), each part its own sub-stream so every segment stands alone:
//   [TRC] ClockSyncEvent                                    at open
//   [TRC] SegmentMetadataEvent + ClockSyncEvent             at open
//   [TRC] schemas, pools and events ...                     appended by each drain
//   [TRC] SegmentMetadataEvent{segment.complete=true}       at seal
//   [TRC] Libd9Module + SymbolTableEntry records            at seal, with the seal tools
// then the file is renamed `{stem}.{N}.bin` and, if asked, compressed to `.bin.zst` or
// `.bin.gz` (the `.bin` is removed once the compressed file is complete).
// The active file is always decodable up to its last complete frame, so a killed process
// leaves a readable trace behind.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "writer/encoder.h"
#include "writer/seal_tools.h"

namespace d9 {

// A file descriptor of d9's own, in a process whose code closes descriptors it does not own
// (bash closes a pipe's end twice) and reuses the numbers. d9's descriptors sit above a
// high floor, out of the way of the low numbers programs reuse, and each use first checks
// that the number still names the file d9 opened, so d9 never writes to, reads from or
// closes a descriptor the program has taken over.
class OwnFd {
 public:
  // Grows the process's descriptor table up to the floor now, when the process is still
  // single-threaded (at start-up). Growing it later, once threads share the table, makes
  // the growing thread wait for an RCU grace period: 10-30 ms for the first segment.
  static void reserve_floor();
  // Moves `fd` up to the floor, close-on-exec; returns its new number (`fd` itself when
  // that fails). For descriptors d9's own libraries open on its behalf.
  static int raise(int fd);

  OwnFd() = default;
  ~OwnFd() { close(); }
  OwnFd(const OwnFd&) = delete;
  OwnFd& operator=(const OwnFd&) = delete;

  // open(2) with O_CLOEXEC | O_NOFOLLOW added; false with errno set on failure.
  bool open(const std::string& path, int flags, mode_t mode = 0600);
  // The descriptor, once it is checked to still be ours; if the program took the number,
  // the file is opened again (appending) under a new one. -1 if neither works.
  int get();
  bool is_open() const { return fd_ >= 0; }
  // Closes the descriptor if it is still ours; forgets it either way.
  void close();

 private:
  bool still_ours() const;

  int fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  std::string path_;
};

class Segment {
 public:
  Segment() = default;
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Creates the active file (0600, never following a planted symlink, close-on-exec) and
  // writes the opening sub-streams. On failure returns false and sets error().
  bool open(const std::string& dir, const std::string& stem, uint64_t index,
            const StringMap& metadata);

  // The encoder for events; its bytes go to disk on flush().
  Encoder& events() { return events_; }
  void note_events(uint64_t n) { event_count_ += n; }
  uint64_t event_count() const { return event_count_; }

  // Appends everything encoded so far. False (with error()) when the write fails.
  bool flush();

  struct SealOptions {
    StringMap extra_metadata;    // added to segment.complete=true
    SealTools* tools = nullptr;  // symbols and compression; null: neither
    bool symbolize = true;       // SymbolTableEntry records (else the module map only)
    std::optional<SealCompression> compression;  // none: the segment stays `.bin`
    // Called before each chunk the compressor reads: other work the caller keeps going.
    std::function<void()> between_chunks;
  };
  // Writes the closing metadata and symbols, closes, renames to the sealed name and
  // compresses. A segment that holds no events is deleted instead. Returns the final path
  // ("" when deleted or failed; error() says why on failure).
  std::string seal(const SealOptions& options);

  // Closes and deletes the active file (a failed write: the segment is dropped whole).
  void discard();

  bool is_open() const { return file_.is_open(); }
  // Fork child: closes the inherited descriptor and forgets the file without touching it.
  void abandon() { close_fd(); }
  uint64_t bytes_written() const { return bytes_written_; }
  // Encoded and not yet flushed.
  size_t bytes_buffered() const { return events_.size(); }
  // Size of the compressed file made by the last seal (0 if none).
  uint64_t compressed_bytes() const { return compressed_bytes_; }
  const std::string& error() const { return error_; }
  // Why the last seal left its segment uncompressed ("" if it did not).
  const std::string& compress_error() const { return compress_error_; }
  const std::string& active_path() const { return active_path_; }

 private:
  bool write_all(const uint8_t* data, size_t len);
  void close_fd();
  // The module map, and with `symbolize` the SymbolTableEntry records.
  void write_symbols(SealTools& tools, bool symbolize);
  // Compresses the sealed file into a sibling; returns its path, or "" (file kept as is).
  std::string compress(SealTools& tools, SealCompression how,
                       const std::function<void()>& between_chunks);

  OwnFd file_;  // the active file, then the compressed one being written
  Encoder events_;
  std::string active_path_;
  std::string sealed_path_;
  std::string error_;
  std::string compress_error_;
  uint64_t event_count_ = 0;
  uint64_t bytes_written_ = 0;
  uint64_t compressed_bytes_ = 0;
};

// Current CLOCK_MONOTONIC and CLOCK_REALTIME, paired as upstream does: the realtime read
// is matched with the midpoint of two monotonic reads around it.
struct ClockPair {
  uint64_t mono_ns;
  uint64_t realtime_ns;
};
ClockPair read_clock_pair();
uint64_t monotonic_ns();

}  // namespace d9
