#include "writer/segment.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

namespace d9 {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

ClockPair read_clock_pair() {
  uint64_t before = monotonic_ns();
  timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  uint64_t after = monotonic_ns();
  return {before + (after - before) / 2,
          static_cast<uint64_t>(rt.tv_sec) * 1000000000ULL + static_cast<uint64_t>(rt.tv_nsec)};
}

Segment::~Segment() {
  close_fd();
}

void Segment::close_fd() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

bool Segment::open(const std::string& dir, const std::string& stem, uint64_t index,
                   const StringMap& metadata) {
  sealed_path_ = dir + "/" + stem + "." + std::to_string(index) + ".bin";
  active_path_ = sealed_path_ + ".active";
  fd_ = ::open(active_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    error_ = "cannot create " + active_path_ + ": " + strerror(errno);
    return false;
  }
  event_count_ = 0;
  bytes_written_ = 0;
  compressed_bytes_ = 0;
  error_.clear();
  compress_error_.clear();

  // ClockSync first, so readers looking in the first events find the wall-clock anchor.
  Encoder head;
  head.begin_stream();
  ClockPair clock = read_clock_pair();
  head.clock_sync(clock.mono_ns, clock.realtime_ns);
  head.begin_stream();
  clock = read_clock_pair();
  head.segment_metadata(clock.mono_ns, metadata);
  head.clock_sync(clock.mono_ns, clock.realtime_ns);
  if (!write_all(head.bytes().data(), head.size())) return false;

  events_.clear_bytes();
  events_.begin_stream();
  return true;
}

bool Segment::write_all(const uint8_t* data, size_t len) {
  while (len > 0) {
    ssize_t n = ::write(fd_, data, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      error_ = "write to " + active_path_ + " failed: " + strerror(errno);
      return false;
    }
    data += n;
    len -= static_cast<size_t>(n);
    bytes_written_ += static_cast<uint64_t>(n);
  }
  return true;
}

bool Segment::flush() {
  if (fd_ < 0) return false;
  bool ok = write_all(events_.bytes().data(), events_.size());
  events_.clear_bytes();
  return ok;
}

void Segment::discard() {
  if (fd_ < 0) return;
  close_fd();
  unlink(active_path_.c_str());
}

void Segment::write_symbols(SealTools& tools, bool symbolize) {
  Encoder sym;
  sym.begin_stream();
  // Modules mapped now, too: a library loaded since the last refresh (a dlclose, or a
  // lookup outside every known module) may hold this segment's addresses.
  tools.refresh_modules();
  for (const ModuleInfo& m : tools.modules()) {
    sym.module_entry(m.path, m.build_id, m.start, m.end, m.bias, m.loaded);
  }
  for (uint64_t addr : symbolize ? events_.frame_addresses() : std::unordered_set<uint64_t>{}) {
    const std::vector<SymbolFrame>& frames = tools.resolve(addr);
    for (size_t depth = 0; depth < frames.size(); ++depth) {
      const SymbolFrame& f = frames[depth];
      sym.symbol_entry(addr, 0, f.function, depth, f.file, f.line);
    }
  }
  write_all(sym.bytes().data(), sym.size());
}

std::string Segment::seal(const SealOptions& options) {
  if (fd_ < 0) return "";
  if (!flush() || event_count_ == 0) {
    discard();
    return "";
  }
  Encoder tail;
  tail.begin_stream();
  StringMap closing = {{"segment.complete", "true"}};
  closing.insert(closing.end(), options.extra_metadata.begin(), options.extra_metadata.end());
  tail.segment_metadata(monotonic_ns(), closing);
  bool ok = write_all(tail.bytes().data(), tail.size());
  if (ok && options.tools) write_symbols(*options.tools, options.symbolize);
  if (!error_.empty()) ok = false;
  close_fd();
  if (!ok) {
    unlink(active_path_.c_str());
    return "";
  }
  // Never over an existing segment (a reused directory name, say).
  if (renameat2(AT_FDCWD, active_path_.c_str(), AT_FDCWD, sealed_path_.c_str(), RENAME_NOREPLACE) !=
      0) {
    error_ = "cannot rename " + active_path_ + ": " + strerror(errno);
    return "";
  }
  if (options.tools && options.compression) {
    std::string packed = compress(*options.tools, *options.compression);
    if (!packed.empty()) return packed;
  }
  return sealed_path_;
}

std::string Segment::compress(SealTools& tools, SealCompression how) {
  int in = ::open(sealed_path_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0) return "";
  std::vector<uint8_t> raw;
  uint8_t buf[1 << 16];
  for (ssize_t n; (n = read(in, buf, sizeof(buf))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    raw.insert(raw.end(), buf, buf + n);
  }
  close(in);
  std::vector<uint8_t> packed;
  std::string why;
  if (!tools.compress(raw, how, &packed, &why)) {
    compress_error_ = "cannot compress " + sealed_path_ + ": " + why;
    return "";
  }
  // Written under a temporary name and renamed, so a reader never sees half a file.
  std::string out = sealed_path_ + (how == SealCompression::kZstd ? ".zst" : ".gz");
  std::string tmp = out + ".tmp";
  // A failure here keeps the uncompressed segment: reported, but nothing is lost.
  fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    compress_error_ = "cannot create " + tmp + ": " + strerror(errno);
    return "";
  }
  bool ok = write_all(packed.data(), packed.size());
  close_fd();
  if (!ok || renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_NOREPLACE) != 0) {
    compress_error_ = ok ? "cannot rename " + tmp + ": " + strerror(errno) : error_;
    error_.clear();
    unlink(tmp.c_str());
    return "";
  }
  unlink(sealed_path_.c_str());
  compressed_bytes_ = packed.size();
  return out;
}

}  // namespace d9
