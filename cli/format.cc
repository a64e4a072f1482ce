// Formatting shared by the reports: byte counts, addresses, wall-clock instants and JSON
// strings (cli/format.h).
#include "cli/format.h"

#include <time.h>

#include <cmath>
#include <cstdio>

namespace d9::cli {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 5) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

std::string hex(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string format_wall(int64_t ns) {
  time_t secs = static_cast<time_t>(ns / 1000000000LL);
  int ms = static_cast<int>((ns % 1000000000LL) / 1000000LL);
  if (ms < 0) {
    ms += 1000;
    --secs;
  }
  struct tm tm;
  if (!localtime_r(&secs, &tm)) return std::to_string(ns) + " ns";
  char date[64], zone[16];
  strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S", &tm);
  strftime(zone, sizeof(zone), "%z", &tm);
  char buf[96];
  snprintf(buf, sizeof(buf), "%s.%03d %s", date, ms, zone);
  return buf;
}

// Length of the valid UTF-8 sequence starting at s[i], or 0.
static size_t utf8_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      // Valid UTF-8 passes through; any other byte becomes its Latin-1 code point, so
      // every line stays valid JSON whatever a damaged file holds.
      size_t n = utf8_length(s, i);
      if (n) {
        out.append(s.substr(i, n));
        i += n - 1;
      } else {
        char buf[8];
        snprintf(buf, sizeof(buf), "\\u%04x", c);
        out += buf;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

}  // namespace d9::cli
