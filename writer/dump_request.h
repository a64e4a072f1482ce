// `d9 dump`: asking a running process to seal its current segment now.
//
// The request is a file in the process's own trace directory, so nothing reaches the host
// program (no signal it could see, block or be interrupted by), and it works for a worker
// that dropped root: its directory is its own, and root may write there too.
//
//   the CLI creates   {dir}/d9-dump-{nonce}.request
//   the writer, which looks for requests at most every 100 ms, removes it, seals its
//   current segment (live set, module map, symbols) and writes
//                     {dir}/d9-dump-{nonce}.reply   holding the sealed file's path, or
//                                                   nothing when no event was recorded
//                                                   since the last seal (whose file stands)
//   the CLI reads and removes the reply.
#pragma once

#include <string>
#include <vector>

namespace d9::dump {

// Writer side. Nonces of the requests waiting in `dir`; their request files are removed.
std::vector<std::string> take_requests(const std::string& dir);
// Writes one reply per nonce with `sealed_path` ("" when nothing was sealed).
void answer(const std::string& dir, const std::vector<std::string>& nonces,
            const std::string& sealed_path);

// CLI side: posts a request in each directory, then waits up to `timeout_ms` for all the
// replies. Requests left unanswered are withdrawn (their files removed).
struct Result {
  std::string dir;
  bool answered = false;
  std::string sealed_path;  // "" when answered with nothing new
  std::string error;        // why the request could not be posted, or was not answered
};
std::vector<Result> request(const std::vector<std::string>& dirs, int timeout_ms);

}  // namespace d9::dump
