// A process's output directory: creating it with the right modes, numbering its segment
// files, listing the sealed ones (for retention) and handing it to another owner.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace d9 {

// Creates `path` and its missing parents: the process's own directory 0700, the ones above
// it 0711, so a process that switches to another user can still reach its own directory
// while nobody else can list them. True if `path` is a directory afterwards.
bool make_output_dirs(const std::string& path);

// One past the highest segment index already in `dir` (0 for a new or missing directory),
// so a directory name that happens to be reused never has its segments overwritten.
uint64_t next_free_index(const std::string& dir);

struct SealedSegment {
  uint64_t index;
  std::string path;
  uint64_t bytes;
};
// The sealed segments in `dir` (trace.N.bin, .bin.zst, .bin.gz), oldest first, and in
// *total_bytes the size of every segment file there, the open one included.
std::vector<SealedSegment> sealed_segments(const std::string& dir, uint64_t* total_bytes);

// Gives `dir` and every file in it to uid/gid ((uid_t)-1 or (gid_t)-1: unchanged).
// False if any of them could not be changed (errno tells why).
bool chown_output_dir(const std::string& dir, uid_t uid, gid_t gid);

}  // namespace d9
