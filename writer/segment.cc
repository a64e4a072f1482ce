#include "writer/segment.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

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

Segment::~Segment() { close_fd(); }

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

std::string Segment::seal(const StringMap& extra) {
  if (fd_ < 0) return "";
  if (!flush() || event_count_ == 0) {
    close_fd();
    unlink(active_path_.c_str());
    return "";
  }
  Encoder tail;
  tail.begin_stream();
  StringMap closing = {{"segment.complete", "true"}};
  closing.insert(closing.end(), extra.begin(), extra.end());
  tail.segment_metadata(monotonic_ns(), closing);
  bool ok = write_all(tail.bytes().data(), tail.size());
  close_fd();
  if (!ok) return "";
  if (rename(active_path_.c_str(), sealed_path_.c_str()) != 0) {
    error_ = "cannot rename " + active_path_ + ": " + strerror(errno);
    return "";
  }
  return sealed_path_;
}

}  // namespace d9
