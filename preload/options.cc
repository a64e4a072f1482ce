#include "preload/options.h"

#include <cstring>

#include "preload/log.h"

namespace d9 {
namespace {

bool equals(const char* a, const char* b) {
  return strcmp(a, b) == 0;
}

bool parse_bool(const char* text, bool* out) {
  if (equals(text, "1") || equals(text, "true") || equals(text, "yes") || equals(text, "on")) {
    *out = true;
    return true;
  }
  if (equals(text, "0") || equals(text, "false") || equals(text, "no") || equals(text, "off")) {
    *out = false;
    return true;
  }
  return false;
}

bool parse_u64(const char* text, uint64_t* out) {
  if (!*text) return false;
  uint64_t v = 0;
  for (const char* p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
    uint64_t digit = static_cast<uint64_t>(*p - '0');
    if (v > (UINT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *out = v;
  return true;
}

void copy_string(const char* text, char* dst, size_t cap) {
  size_t n = strnlen(text, cap - 1);
  memcpy(dst, text, n);
  dst[n] = 0;
}

void report(const char* name, const char* value, const char* expected, const char* used) {
  log::line("invalid ", name, "=\"", value, "\" (", expected, "; using ", name, "=", used);
}

// Parses a size-like variable; on error reports it and leaves *field untouched.
void size_option(const char* name, const char* value, uint64_t min, uint64_t max, uint64_t* field) {
  uint64_t v;
  if (parse_size(value, &v) && v >= min && v <= max) {
    *field = v;
    return;
  }
  char used[24], lo[24], hi[24];
  log::u64(*field, used);
  log::u64(min, lo);
  log::u64(max, hi);
  char expected[128] = "expected a number with optional K/M/G suffix in ";
  strncat(expected, lo, sizeof(expected) - strlen(expected) - 1);
  strncat(expected, "..", sizeof(expected) - strlen(expected) - 1);
  strncat(expected, hi, sizeof(expected) - strlen(expected) - 1);
  strncat(expected, ")", sizeof(expected) - strlen(expected) - 1);
  report(name, value, expected, used);
}

void bool_option(const char* name, const char* value, bool* field) {
  if (!parse_bool(value, field)) report(name, value, "expected 0 or 1)", *field ? "1" : "0");
}

}  // namespace

bool parse_size(const char* text, uint64_t* out) {
  char digits[32];
  size_t n = strlen(text);
  if (n == 0 || n >= sizeof(digits)) return false;
  uint64_t mult = 1;
  switch (text[n - 1]) {
    case 'k':
    case 'K':
      mult = 1ULL << 10;
      --n;
      break;
    case 'm':
    case 'M':
      mult = 1ULL << 20;
      --n;
      break;
    case 'g':
    case 'G':
      mult = 1ULL << 30;
      --n;
      break;
    default:
      break;
  }
  memcpy(digits, text, n);
  digits[n] = 0;
  uint64_t v;
  if (!parse_u64(digits, &v)) return false;
  if (v > UINT64_MAX / mult) return false;
  *out = v * mult;
  return true;
}

void parse_options(char* const* envp, Options* o) {
  if (!envp) return;
  for (char* const* e = envp; *e; ++e) {
    const char* entry = *e;
    if (strncmp(entry, "D9_", 3) != 0) continue;
    const char* eq = strchr(entry, '=');
    if (!eq) continue;
    char name[32];
    size_t len = static_cast<size_t>(eq - entry);
    if (len >= sizeof(name)) continue;
    memcpy(name, entry, len);
    name[len] = 0;
    const char* v = eq + 1;

    if (equals(name, "D9_OUTPUT")) {
      if (*v && strlen(v) < sizeof(o->output)) {
        copy_string(v, o->output, sizeof(o->output));
      } else {
        report(name, v, "expected a directory path shorter than 512 bytes)", o->output);
      }
    } else if (equals(name, "D9_SAMPLE_RATE")) {
      size_option(name, v, 0, 1ULL << 40, &o->sample_rate);
    } else if (equals(name, "D9_LIVESET")) {
      bool_option(name, v, &o->liveset);
    } else if (equals(name, "D9_CPU_HZ")) {
      size_option(name, v, 0, 10000, &o->cpu_hz);
    } else if (equals(name, "D9_MAX_FILE_SIZE")) {
      size_option(name, v, 4096, 1ULL << 40, &o->max_file_size);
    } else if (equals(name, "D9_ROTATE_SECS")) {
      size_option(name, v, 1, 1ULL << 32, &o->rotate_secs);
    } else if (equals(name, "D9_MAX_TOTAL_SIZE")) {
      size_option(name, v, 4096, 1ULL << 50, &o->max_total_size);
    } else if (equals(name, "D9_COMPRESS")) {
      if (equals(v, "zstd")) {
        o->compress = Compression::kZstd;
      } else if (equals(v, "gzip")) {
        o->compress = Compression::kGzip;
      } else if (equals(v, "none")) {
        o->compress = Compression::kNone;
      } else {
        report(name, v, "expected zstd, gzip or none)", "zstd");
      }
    } else if (equals(name, "D9_SERVICE")) {
      copy_string(v, o->service, sizeof(o->service));
    } else if (equals(name, "D9_S3_BUCKET")) {
      copy_string(v, o->s3_bucket, sizeof(o->s3_bucket));
    } else if (equals(name, "D9_S3_PREFIX")) {
      // Without the slashes around it: the key adds its own.
      while (*v == '/') ++v;
      copy_string(v, o->s3_prefix, sizeof(o->s3_prefix));
      for (size_t n = strlen(o->s3_prefix); n > 0 && o->s3_prefix[n - 1] == '/'; --n) {
        o->s3_prefix[n - 1] = 0;
      }
    } else if (equals(name, "D9_S3_ENDPOINT") || equals(name, "D9_HOST")) {
      // Read by libd9_ship.so (ship/client.h) when it is loaded.
    } else if (equals(name, "D9_S3_EXIT_TIMEOUT")) {
      size_option(name, v, 0, 3600, &o->s3_exit_timeout);
    } else if (equals(name, "D9_STACK_DEPTH")) {
      size_option(name, v, 1, 256, &o->stack_depth);
    } else if (equals(name, "D9_RING_SLOTS")) {
      size_option(name, v, 16, 1ULL << 24, &o->ring_slots);
    } else if (equals(name, "D9_SYMBOLIZE")) {
      bool on;
      if (equals(v, "full")) {
        o->symbolize = Symbolize::kFull;
      } else if (parse_bool(v, &on)) {
        o->symbolize = on ? Symbolize::kOn : Symbolize::kOff;
      } else {
        const char* used = o->symbolize == Symbolize::kOff  ? "0"
                           : o->symbolize == Symbolize::kOn ? "1"
                                                            : "full";
        report(name, v, "expected 0, 1 or full)", used);
      }
    } else if (equals(name, "D9_ENABLE")) {
      bool_option(name, v, &o->enable);
    } else if (equals(name, "D9_SEED")) {
      uint64_t seed;
      if (parse_u64(v, &seed)) {
        o->seed = seed;
        o->has_seed = true;
      } else {
        report(name, v, "expected a decimal number)", "a random seed");
      }
    } else {
      log::line("unknown variable ", name, " ignored (see README for the D9_* table)");
    }
  }
}

}  // namespace d9
