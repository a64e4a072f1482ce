#include "cli/input.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>

namespace d9::cli {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

bool is_segment_name(const std::string& name) {
  return ends_with(name, ".bin") || ends_with(name, ".bin.gz") || ends_with(name, ".bin.zst") ||
         ends_with(name, ".active");
}

// N in "stem.N.bin…", or -1.
long long segment_number(const std::string& name) {
  size_t bin = name.find(".bin");
  if (bin == std::string::npos || bin == 0) return -1;
  size_t dot = name.rfind('.', bin - 1);
  if (dot == std::string::npos || dot + 1 >= bin) return -1;
  long long n = 0;
  for (size_t i = dot + 1; i < bin; ++i) {
    if (name[i] < '0' || name[i] > '9' || n > (1LL << 50)) return -1;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

double now_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

bool segment_order(const std::string& a, const std::string& b) {
  fs::path pa(a), pb(b);
  std::string da = pa.parent_path().string(), db = pb.parent_path().string();
  if (da != db) return da < db;
  std::string na = pa.filename().string(), nb = pb.filename().string();
  long long sa = segment_number(na), sb = segment_number(nb);
  if (sa != sb) return sa < sb;
  return na < nb;
}

namespace {
RemoteInputs g_remote;
}  // namespace

void set_remote_inputs(RemoteInputs resolver) {
  g_remote = std::move(resolver);
}

std::vector<std::string> collect_inputs(const std::vector<std::string>& paths,
                                        std::vector<std::string>* missing) {
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    if (p.compare(0, 5, "s3://") == 0) {
      std::vector<std::string> files;
      if (!g_remote || !g_remote(p, &files)) {
        if (!g_remote) fprintf(stderr, "d9: %s: S3 paths are not available here\n", p.c_str());
        if (missing) missing->push_back(p);
        continue;
      }
      out.insert(out.end(), files.begin(), files.end());
      continue;
    }
    std::error_code ec;
    fs::file_status st = fs::status(p, ec);
    if (ec || !fs::exists(st)) {
      fprintf(stderr, "d9: %s: no such file or directory\n", p.c_str());
      if (missing) missing->push_back(p);
      continue;
    }
    if (!fs::is_directory(st)) {
      out.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    for (auto it =
             fs::recursive_directory_iterator(p, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      std::error_code ec2;
      if (it->is_regular_file(ec2) && is_segment_name(it->path().filename().string())) {
        found.push_back(it->path().string());
      }
    }
    if (ec) fprintf(stderr, "d9: %s: %s\n", p.c_str(), ec.message().c_str());
    std::sort(found.begin(), found.end(), segment_order);
    out.insert(out.end(), found.begin(), found.end());
  }
  // The same file named twice (or found through two paths) is read once.
  std::vector<std::string> unique;
  std::vector<std::string> seen;
  for (const std::string& f : out) {
    std::error_code ec;
    std::string canon = fs::weakly_canonical(f, ec).string();
    if (ec) canon = f;
    if (std::find(seen.begin(), seen.end(), canon) != seen.end()) continue;
    seen.push_back(canon);
    unique.push_back(f);
  }
  return unique;
}

namespace {

// Error texts can quote names read from the file: keep the terminal safe.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      char b[8];
      snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    }
  }
  return out;
}

}  // namespace

std::string describe_error(const std::string& path, decode::Container container,
                           const std::string& read_error, const decode::DecodeResult& r) {
  std::string what = read_error;
  // ReadTraceFile-style errors may carry the path already.
  if (what.compare(0, path.size() + 2, path + ": ") == 0) what = what.substr(path.size() + 2);
  if (!r.ok() && !(r.status == decode::DecodeStatus::kEmpty && !what.empty())) {
    if (!what.empty()) what += "; then ";
    what += r.error;
    if (container == decode::Container::kGzip || container == decode::Container::kZstd) {
      what += " of the decompressed stream";
    }
  }
  std::string msg = path + ": " + printable(what);
  if (r.events > 0) {
    msg += "; kept the " + std::to_string(r.events) + " events before it";
  } else {
    msg += "; nothing readable";
  }
  return msg;
}

RawSegment::~RawSegment() {
  unmap();
}

namespace {

std::string unknown_format(std::span<const uint8_t> data) {
  if (data.empty()) return "empty file";
  std::string s = "not a dial9 segment: the first bytes at offset 0 (";
  for (size_t i = 0; i < std::min<size_t>(data.size(), 4); ++i) {
    char b[8];
    snprintf(b, sizeof(b), i ? " %02x" : "%02x", data[i]);
    s += b;
  }
  return s + ") are neither zstd, gzip nor TRC\\0";
}

}  // namespace

void RawSegment::unmap() {
  if (map_) munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
}

bool RawSegment::decompress_fast(std::span<const uint8_t> data, size_t max_raw) {
  if (container_ == decode::Container::kZstd) {
    const unsigned long long n = ZSTD_getFrameContentSize(data.data(), data.size());
    if (n == ZSTD_CONTENTSIZE_UNKNOWN || n == ZSTD_CONTENTSIZE_ERROR || n == 0 || n > max_raw) {
      return false;
    }
    if (ZSTD_findFrameCompressedSize(data.data(), data.size()) != data.size()) return false;
    fast_.reset(new (std::nothrow) uint8_t[n]);
    if (!fast_) return false;
    const size_t got = ZSTD_decompress(fast_.get(), n, data.data(), data.size());
    if (ZSTD_isError(got) || got != n) return false;
    raw_ = {fast_.get(), static_cast<size_t>(n)};
    return true;
  }
  if (container_ == decode::Container::kGzip && data.size() >= 18) {
    uint32_t isize = 0;
    for (int i = 3; i >= 0; --i)
      isize = (isize << 8) | data[data.size() - 4 + static_cast<size_t>(i)];
    if (isize == 0 || isize > max_raw) return false;
    fast_.reset(new (std::nothrow) uint8_t[isize]);
    if (!fast_) return false;
    z_stream zs{};
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return false;
    zs.next_in = const_cast<Bytef*>(data.data());
    zs.avail_in = static_cast<uInt>(data.size());
    zs.next_out = fast_.get();
    zs.avail_out = isize;
    const int rc = data.size() <= UINT32_MAX ? inflate(&zs, Z_FINISH) : Z_DATA_ERROR;
    const bool ok = rc == Z_STREAM_END && zs.avail_in == 0 && zs.total_out == isize;
    inflateEnd(&zs);
    if (!ok) return false;  // several members, damage, or a size beyond 4 GiB
    raw_ = {fast_.get(), isize};
    return true;
  }
  return false;
}

void RawSegment::decompress(std::span<const uint8_t> data, size_t max_raw) {
  if (decompress_fast(data, max_raw)) return;
  fast_.reset();
  decode::RawTrace r = decode::Decompress(data, {.max_output_bytes = max_raw});
  owned_ = std::move(r.bytes);
  raw_ = owned_;
  if (!r.ok()) error_ = r.error;
}

void RawSegment::assign(const std::string& /*path*/, std::span<const uint8_t> data) {
  unmap();
  fast_.reset();
  error_.clear();
  file_bytes_ = data.size();
  container_ = decode::DetectContainer(data);
  if (container_ == decode::Container::kRaw) {
    owned_.assign(data.begin(), data.end());
    raw_ = owned_;
  } else if (container_ == decode::Container::kUnknown) {
    error_ = unknown_format(data);
  } else {
    decompress(data, decode::kDefaultMaxDecompressedBytes);
  }
}

bool RawSegment::open(const std::string& path, size_t max_raw) {
  unmap();
  owned_.clear();
  fast_.reset();
  raw_ = {};
  error_.clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error_ = std::string("cannot open: ") + strerror(errno);
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error_ = "not a regular file";
    close(fd);
    return false;
  }
  file_bytes_ = static_cast<uint64_t>(st.st_size);
  std::span<const uint8_t> data;
  if (st.st_size > 0) {
    void* m = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (m != MAP_FAILED) {
      map_ = m;
      map_size_ = static_cast<size_t>(st.st_size);
      madvise(map_, map_size_, MADV_SEQUENTIAL);
      data = {static_cast<const uint8_t*>(map_), map_size_};
    } else {
      // Not mappable (a pipe, a special file system): read it.
      owned_.resize(static_cast<size_t>(st.st_size));
      size_t got = 0;
      while (got < owned_.size()) {
        ssize_t n = read(fd, owned_.data() + got, owned_.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += static_cast<size_t>(n);
      }
      owned_.resize(got);
      data = owned_;
    }
  }
  close(fd);
  container_ = decode::DetectContainer(data);
  if (container_ == decode::Container::kRaw) {
    raw_ = data;
    return true;
  }
  if (container_ == decode::Container::kUnknown) {
    error_ = unknown_format(data);
    unmap();
    return false;
  }
  std::vector<uint8_t> compressed;
  if (!map_) compressed = std::move(owned_);
  decompress(map_ ? data : std::span<const uint8_t>(compressed), max_raw);
  unmap();
  return !raw_.empty() || error_.empty();
}

uint64_t total_file_bytes(const std::vector<std::string>& files) {
  uint64_t total = 0;
  for (const std::string& f : files) {
    struct stat st;
    if (stat(f.c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_size);
  }
  return total;
}

Progress::Progress(uint64_t total_files, uint64_t total_bytes, bool enabled)
    : total_files_(total_files), total_bytes_(total_bytes), enabled_(enabled && isatty(2)) {
  start_ = now_seconds();
}

Progress::~Progress() {
  clear();
}

void Progress::update(uint64_t files_done, uint64_t bytes_done) {
  if (!enabled_) return;
  double now = now_seconds();
  if (now - start_ < 1.0 || now - last_ < 0.1) return;
  last_ = now;
  double pct = total_bytes_
                   ? 100.0 * static_cast<double>(bytes_done) / static_cast<double>(total_bytes_)
                   : 0.0;
  fprintf(stderr, "\r\033[Kd9: read %llu/%llu files, %.1f/%.1f MB on disk (%.0f%%), %.0f s",
          static_cast<unsigned long long>(files_done),
          static_cast<unsigned long long>(total_files_), static_cast<double>(bytes_done) / 1e6,
          static_cast<double>(total_bytes_) / 1e6, pct, now - start_);
  fflush(stderr);
  shown_ = true;
}

void Progress::clear() {
  if (!shown_) return;
  fprintf(stderr, "\r\033[K");
  fflush(stderr);
  shown_ = false;
}

}  // namespace d9::cli
