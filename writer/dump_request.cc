#include "writer/dump_request.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "writer/segment.h"

namespace d9::dump {
namespace {

constexpr char kPrefix[] = "d9-dump-";
constexpr char kRequest[] = ".request";
constexpr char kReply[] = ".reply";
constexpr size_t kMaxNonce = 32;

std::string file_name(const std::string& nonce, const char* suffix) {
  return std::string(kPrefix) + nonce + suffix;
}

// A nonce is what the CLI writes: lowercase hex, bounded. Anything else in the directory
// is not a request of ours and is left alone.
bool valid_nonce(const std::string& s) {
  if (s.empty() || s.size() > kMaxNonce) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

std::string make_nonce() {
  unsigned char bytes[8];
  if (getrandom(bytes, sizeof(bytes), 0) != sizeof(bytes)) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t v = static_cast<uint64_t>(ts.tv_nsec) ^ (static_cast<uint64_t>(getpid()) << 32);
    memcpy(bytes, &v, sizeof(bytes));
  }
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char b : bytes) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

// The reply's contents, or nullopt-like `false` while it is not there (or not complete:
// the writer creates it under a temporary name and renames it).
bool read_reply(const std::string& path, std::string* contents) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  char buf[4096];
  contents->clear();
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    contents->append(buf, static_cast<size_t>(n));
  }
  close(fd);
  while (!contents->empty() && contents->back() == '\n') contents->pop_back();
  return true;
}

}  // namespace

std::vector<std::string> take_requests(const std::string& dir) {
  std::vector<std::string> nonces;
  DIR* d = opendir(dir.c_str());
  if (!d) return nonces;
  const size_t prefix = strlen(kPrefix), suffix = strlen(kRequest);
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.compare(0, prefix, kPrefix) != 0 || !ends_with(name, kRequest)) continue;
    std::string nonce = name.substr(prefix, name.size() - prefix - suffix);
    if (!valid_nonce(nonce)) continue;
    if (unlinkat(dirfd(d), name.c_str(), 0) == 0) nonces.push_back(nonce);
  }
  closedir(d);
  return nonces;
}

void answer(const std::string& dir, const std::vector<std::string>& nonces,
            const std::string& sealed_path) {
  std::string body = sealed_path + "\n";
  for (const std::string& nonce : nonces) {
    std::string tmp = dir + "/" + file_name(nonce, ".tmp");
    OwnFd f;
    if (!f.open(tmp, O_WRONLY | O_CREAT | O_EXCL)) continue;
    int fd = f.get();
    bool ok = fd >= 0 && write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size());
    f.close();
    if (!ok || rename(tmp.c_str(), (dir + "/" + file_name(nonce, kReply)).c_str()) != 0) {
      unlink(tmp.c_str());
    }
  }
}

std::vector<Result> request(const std::vector<std::string>& dirs, int timeout_ms) {
  std::vector<Result> results(dirs.size());
  std::vector<std::string> nonces(dirs.size());
  for (size_t i = 0; i < dirs.size(); ++i) {
    results[i].dir = dirs[i];
    nonces[i] = make_nonce();
    std::string path = dirs[i] + "/" + file_name(nonces[i], kRequest);
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      results[i].error = "cannot post a request in " + dirs[i] + ": " + strerror(errno);
      nonces[i].clear();
      continue;
    }
    close(fd);
  }
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    bool waiting = false;
    for (size_t i = 0; i < dirs.size(); ++i) {
      if (nonces[i].empty() || results[i].answered) continue;
      std::string reply = dirs[i] + "/" + file_name(nonces[i], kReply);
      if (read_reply(reply, &results[i].sealed_path)) {
        results[i].answered = true;
        unlink(reply.c_str());
      } else {
        waiting = true;
      }
    }
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long elapsed_ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    if (!waiting || elapsed_ms >= timeout_ms) break;
    timespec pause{0, 20 * 1000 * 1000};
    nanosleep(&pause, nullptr);
  }
  for (size_t i = 0; i < dirs.size(); ++i) {
    if (nonces[i].empty() || results[i].answered) continue;
    // Withdrawn, so a writer that comes back later does not seal for nobody. If the writer
    // took it meanwhile, its late reply is removed too.
    unlink((dirs[i] + "/" + file_name(nonces[i], kRequest)).c_str());
    unlink((dirs[i] + "/" + file_name(nonces[i], kReply)).c_str());
    results[i].error = "no answer within " + std::to_string(timeout_ms / 1000.0).substr(0, 4) +
                       " s (the process has exited, or runs with d9 off)";
  }
  return results;
}

}  // namespace d9::dump
