#include "writer/output_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace d9 {

bool make_output_dirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    std::string prefix = path.substr(0, i);
    mode_t mode = i == path.size() ? 0700 : 0711;
    if (mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) return false;
  }
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

uint64_t next_free_index(const std::string& dir) {
  uint64_t next = 0;
  DIR* d = opendir(dir.c_str());
  if (!d) return 0;
  while (dirent* e = readdir(d)) {
    unsigned long long index;
    if (sscanf(e->d_name, "trace.%llu.bin", &index) == 1 && index + 1 > next) next = index + 1;
  }
  closedir(d);
  return next;
}

std::vector<SealedSegment> sealed_segments(const std::string& dir, uint64_t* total_bytes) {
  std::vector<SealedSegment> sealed;
  *total_bytes = 0;
  DIR* d = opendir(dir.c_str());
  if (!d) return sealed;
  while (dirent* e = readdir(d)) {
    unsigned long long index;
    int end = 0;
    if (sscanf(e->d_name, "trace.%llu.bin%n", &index, &end) != 1 || end == 0) continue;
    std::string rest = e->d_name + end;
    std::string path = dir + "/" + e->d_name;
    struct stat st;
    if (stat(path.c_str(), &st) != 0) continue;
    *total_bytes += static_cast<uint64_t>(st.st_size);
    if (rest.empty() || rest == ".zst" || rest == ".gz") {
      sealed.push_back({index, path, static_cast<uint64_t>(st.st_size)});
    }
  }
  closedir(d);
  std::sort(sealed.begin(), sealed.end(),
            [](const SealedSegment& a, const SealedSegment& b) { return a.index < b.index; });
  return sealed;
}

bool chown_output_dir(const std::string& dir, uid_t uid, gid_t gid) {
  bool ok = lchown(dir.c_str(), uid, gid) == 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      ok &= fchownat(dirfd(d), e->d_name, uid, gid, AT_SYMLINK_NOFOLLOW) == 0;
    }
    closedir(d);
  }
  return ok;
}

}  // namespace d9
