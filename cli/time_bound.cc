// --from/--to/--at instants as the user writes them: relative seconds with a unit, Unix
// seconds, or a calendar date and time (cli/time_bound.h).
#include "cli/time_bound.h"

#include <time.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace d9::cli {

bool parse_time(const std::string& s, TimeBound* out, std::string* error) {
  auto fail = [&](const char* why) {
    *error = "bad time '" + s + "': " + why;
    return false;
  };
  if (s.empty()) return fail("empty");
  if (s[0] == '@') {
    // Integer and fraction apart: a double cannot hold epoch nanoseconds exactly.
    const char* p = s.c_str() + 1;
    char* end = nullptr;
    errno = 0;
    long long secs = strtoll(p, &end, 10);
    if (end == p || errno || secs < 0 || secs > 9'000'000'000LL) {
      return fail("expected @UNIX_SECONDS");
    }
    int64_t frac = 0;
    if (*end == '.') {
      int64_t scale = 100'000'000;
      for (++end; *end >= '0' && *end <= '9'; ++end, scale /= 10) frac += (*end - '0') * scale;
    }
    if (*end) return fail("expected @UNIX_SECONDS");
    out->kind = TimeBound::kWall;
    out->wall_ns = secs * 1'000'000'000LL + frac;
    return true;
  }
  // Relative: a number with an optional unit.
  if (s.find('-') == std::string::npos && s.find(':') == std::string::npos) {
    char* end = nullptr;
    double v = strtod(s.c_str(), &end);
    if (end == s.c_str() || !std::isfinite(v) || v < 0) {
      return fail("expected seconds (12, 1.5s, 300ms, 2m, 1h) or a date");
    }
    std::string unit(end);
    double scale;
    if (unit.empty() || unit == "s") {
      scale = 1;
    } else if (unit == "ms") {
      scale = 1e-3;
    } else if (unit == "us") {
      scale = 1e-6;
    } else if (unit == "m" || unit == "min") {
      scale = 60;
    } else if (unit == "h") {
      scale = 3600;
    } else {
      return fail("unknown unit (use s, ms, us, m or h)");
    }
    if (v * scale > 1e9) return fail("more than 30 years");
    out->kind = TimeBound::kRelative;
    out->seconds = v * scale;
    return true;
  }
  // Wall clock: YYYY-MM-DD[T ]HH:MM[:SS[.frac]][Z|±HH[:MM]].
  int y, mo, d, h, mi, n = 0;
  if (sscanf(s.c_str(), "%4d-%2d-%2d%*1[T ]%2d:%2d%n", &y, &mo, &d, &h, &mi, &n) != 5 || n == 0) {
    return fail("expected YYYY-MM-DDTHH:MM[:SS[.fff]][Z|+HH:MM]");
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59) return fail("no such date");
  const char* p = s.c_str() + n;
  double sec = 0;
  if (*p == ':') {
    char* end = nullptr;
    sec = strtod(p + 1, &end);
    if (end == p + 1 || sec < 0 || sec >= 61) return fail("bad seconds");
    p = end;
  }
  bool zoned = false;
  long offset_s = 0;
  if (*p == 'Z') {
    zoned = true;
    ++p;
  } else if (*p == '+' || *p == '-') {
    int oh = 0, om = 0, m = 0;
    if (sscanf(p + 1, "%2d%n", &oh, &m) != 1) return fail("bad zone");
    const char* q = p + 1 + m;
    if (*q == ':') ++q;
    int m2 = 0;
    if (*q >= '0' && *q <= '9' && sscanf(q, "%2d%n", &om, &m2) == 1) q += m2;
    offset_s = (*p == '-' ? -1 : 1) * (oh * 3600L + om * 60L);
    zoned = true;
    p = q;
  }
  if (*p) return fail("trailing characters");
  struct tm tm = {};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = 0;
  tm.tm_isdst = -1;
  time_t base = zoned ? timegm(&tm) - offset_s : mktime(&tm);
  if (base == static_cast<time_t>(-1)) return fail("not a valid date");
  out->kind = TimeBound::kWall;
  out->wall_ns = static_cast<int64_t>(base) * 1000000000LL + std::llround(sec * 1e9);
  return true;
}

}  // namespace d9::cli
