// d9's configuration: one table of environment variables, read once at start-up from
// `environ` without getenv() or allocation (the first read can happen inside malloc).
// Every variable is documented in README.md; bad values are reported on stderr with the
// value used instead, and never stop the host.
#pragma once

#include <cstdint>

namespace d9 {

enum class Compression : uint8_t { kZstd, kGzip, kNone };

// D9_SYMBOLIZE: symbols at seal. kOn leaves a separate debug file with compressed DWARF
// unread but for its .symtab (names, no lines); kFull inflates it (tens of ms per process).
enum class Symbolize : uint8_t { kOff, kOn, kFull };

struct Options {
  char output[512] = "./d9-traces";           // D9_OUTPUT
  uint64_t sample_rate = 524288;              // D9_SAMPLE_RATE (bytes; 1 = all; 0 = off)
  bool liveset = true;                        // D9_LIVESET
  uint64_t cpu_hz = 99;                       // D9_CPU_HZ
  uint64_t max_file_size = 32ULL << 20;       // D9_MAX_FILE_SIZE
  uint64_t rotate_secs = 60;                  // D9_ROTATE_SECS
  uint64_t max_total_size = 512ULL << 20;     // D9_MAX_TOTAL_SIZE
  Compression compress = Compression::kZstd;  // D9_COMPRESS
  char service[128] = "";                     // D9_SERVICE (default: executable name)
  uint64_t stack_depth = 64;                  // D9_STACK_DEPTH
  uint64_t ring_slots = 4096;                 // D9_RING_SLOTS
  bool enable = true;                         // D9_ENABLE
  Symbolize symbolize = Symbolize::kOn;       // D9_SYMBOLIZE
  bool has_seed = false;                      // D9_SEED given
  uint64_t seed = 0;                          // D9_SEED
  char s3_bucket[256] = "";                   // D9_S3_BUCKET (ship/worker.h; off when empty)
  char s3_prefix[256] = "";                   // D9_S3_PREFIX
  uint64_t s3_exit_timeout = 5;               // D9_S3_EXIT_TIMEOUT (seconds)
};

// Parses the variables found in `envp` (NULL-terminated, like environ) into `out`.
// Reports each invalid value with one `d9:` line on stderr and keeps the default.
void parse_options(char* const* envp, Options* out);

// Parses "512", "64K", "32M", "1G" (binary multiples). False on anything else.
bool parse_size(const char* text, uint64_t* out);

}  // namespace d9
