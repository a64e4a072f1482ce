#include "writer/segment.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
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

namespace {

// Lowest number for d9's descriptors: 1000, or 64 below a lower RLIMIT_NOFILE, so they
// stay below FD_SETSIZE for programs that select() and leave the low numbers to the host.
int fd_floor() {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= 1064) {
    return 1000;
  }
  return rl.rlim_cur > 128 ? static_cast<int>(rl.rlim_cur) - 64 : 3;
}

// Threads of this process, from /proc/self/stat (field 20); 0 if unknown.
long thread_count(int stat_fd) {
  char buf[1024];
  ssize_t n = ::read(stat_fd, buf, sizeof(buf) - 1);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* p = strrchr(buf, ')');  // the command name may hold spaces and parentheses
  for (int field = 2; p && field < 20; ++field) p = strchr(p + 1, ' ');
  return p ? strtol(p + 1, nullptr, 10) : 0;
}

}  // namespace

int OwnFd::raise(int fd) {
  int high = fcntl(fd, F_DUPFD_CLOEXEC, fd_floor());
  if (high < 0) return fd;  // kept where it is
  ::close(fd);
  return high;
}

void OwnFd::reserve_floor() {
  int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  if (thread_count(fd) == 1) {
    int high = fcntl(fd, F_DUPFD_CLOEXEC, fd_floor());
    if (high >= 0) ::close(high);
  }
  ::close(fd);
}

bool OwnFd::open(const std::string& path, int flags, mode_t mode) {
  close();
  int fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return false;
  fd = raise(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int saved = errno;
    ::close(fd);
    errno = saved;
    return false;
  }
  fd_ = fd;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  path_ = path;
  return true;
}

bool OwnFd::still_ours() const {
  struct stat st;
  return fstat(fd_, &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_;
}

int OwnFd::get() {
  if (fd_ < 0 || still_ours()) return fd_;
  // The program closed our number (and may have reused it): never touch it again.
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  if (fd_ < 0) return -1;
  fd_ = raise(fd_);
  if (still_ours()) return fd_;  // the same file, not one planted under its name
  ::close(fd_);
  fd_ = -1;
  return -1;
}

void OwnFd::close() {
  if (fd_ >= 0 && still_ours()) ::close(fd_);
  fd_ = -1;
}

Segment::~Segment() {
  close_fd();
}

void Segment::close_fd() {
  file_.close();
}

bool Segment::open(const std::string& dir, const std::string& stem, uint64_t index,
                   const StringMap& metadata) {
  sealed_path_ = dir + "/" + stem + "." + std::to_string(index) + ".bin";
  active_path_ = sealed_path_ + ".active";
  if (!file_.open(active_path_, O_WRONLY | O_CREAT | O_EXCL)) {
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
  int fd = file_.get();
  if (fd < 0 && len > 0) {
    error_ = "write to " + active_path_ + " failed: the program closed d9's descriptor";
    return false;
  }
  while (len > 0) {
    ssize_t n = ::write(fd, data, len);
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
  if (!file_.is_open()) return false;
  bool ok = write_all(events_.bytes().data(), events_.size());
  events_.clear_bytes();
  return ok;
}

void Segment::discard() {
  if (!file_.is_open()) return;
  close_fd();
  unlink(active_path_.c_str());
}

void Segment::write_symbols(SealTools& tools, bool symbolize) {
  Encoder sym;
  sym.begin_stream();
  // Modules mapped now, too: a library loaded since the last refresh (a dlclose, or a
  // lookup outside every known module) may hold this segment's addresses.
  tools.refresh_modules(false);
  for (const ModuleInfo& m : tools.modules()) {
    sym.module_entry(m.path, m.build_id, m.start, m.end, m.bias, m.loaded);
  }
  std::vector<uint64_t> addrs;
  if (symbolize) {
    const std::unordered_set<uint64_t>& all = events_.frame_addresses();
    addrs.assign(all.begin(), all.end());
  }
  tools.prepare(addrs);  // all at once: one pass over a symbol table instead of an index
  for (uint64_t addr : addrs) {
    const std::vector<SymbolFrame>& frames = tools.resolve(addr);
    for (size_t depth = 0; depth < frames.size(); ++depth) {
      const SymbolFrame& f = frames[depth];
      sym.symbol_entry(addr, 0, f.function, depth, f.file, f.line);
    }
  }
  write_all(sym.bytes().data(), sym.size());
}

std::string Segment::seal(const SealOptions& options) {
  if (!file_.is_open()) return "";
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
    std::string packed = compress(*options.tools, *options.compression, options.between_chunks);
    if (!packed.empty()) return packed;
  }
  return sealed_path_;
}

std::string Segment::compress(SealTools& tools, SealCompression how,
                              const std::function<void()>& between_chunks) {
  OwnFd in;
  struct stat st;
  if (!in.open(sealed_path_, O_RDONLY) || fstat(in.get(), &st) != 0) return "";
  // Written under a temporary name and renamed, so a reader never sees half a file.
  std::string out = sealed_path_ + (how == SealCompression::kZstd ? ".zst" : ".gz");
  std::string tmp = out + ".tmp";
  // A failure here keeps the uncompressed segment: reported, but nothing is lost.
  if (!file_.open(tmp, O_WRONLY | O_CREAT | O_EXCL)) {
    compress_error_ = "cannot create " + tmp + ": " + strerror(errno);
    return "";
  }
  auto read_chunk = [&](uint8_t* buf, size_t cap) -> ssize_t {
    if (between_chunks) between_chunks();
    for (;;) {  // a descriptor taken over mid-read fails with EBADF
      ssize_t n = read(in.get(), buf, cap);
      if (n >= 0 || errno != EINTR) return n;
    }
  };
  uint64_t packed = 0;
  auto write_chunk = [&](std::span<const uint8_t> bytes) {
    packed += bytes.size();
    return write_all(bytes.data(), bytes.size());
  };
  std::string why;
  bool ok = tools.compress(read_chunk, static_cast<uint64_t>(st.st_size), write_chunk, how, &why);
  close_fd();
  if (!ok) {
    compress_error_ = why.empty() ? error_ : "cannot compress " + sealed_path_ + ": " + why;
  } else if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_NOREPLACE) != 0) {
    compress_error_ = "cannot rename " + tmp + ": " + strerror(errno);
    ok = false;
  }
  error_.clear();
  if (!ok) {
    unlink(tmp.c_str());
    return "";
  }
  unlink(sealed_path_.c_str());
  compressed_bytes_ = packed;
  return out;
}

}  // namespace d9
