// Reading segments from a bucket: choosing them by service, host, process and time
// without listing the whole bucket, and downloading them (in parallel, cached by ETag).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ship/client.h"

namespace d9::ship {

struct Selection {
  std::string service, host;
  std::vector<std::string> processes;  // boot ids
  std::optional<int64_t> from_secs, to_secs;
  uint64_t sample = 0;  // N segments spread evenly over what matched; 0 = all
};

// A segment started up to this long before --from may still hold events inside the window
// (D9_ROTATE_SECS' default): it is chosen too, and the analysis trims its events.
inline constexpr int64_t kLookbackSecs = 60;

struct SegmentObject {
  std::string key, etag;
  uint64_t size = 0;
  SegmentInfo info;
};

// `s3://bucket/prefix?service=S&host=H&process=B&from=T&to=T&sample=N`: the URL's own
// selection (for `d9 diff` of two windows or hosts) on top of `base`. Times are Unix seconds
// or UTC dates (2026-11-24T12:00:00Z). False with *error on a bad parameter.
bool parse_selection_url(const std::string& url, const Selection& base, Location* where,
                         Selection* out, std::string* error);

// The segments under `where` that `sel` picks, oldest first. With a time window only the
// date and HHMM prefixes it touches are listed (one listing per date, one per minute that
// holds objects); service and host narrow each listing's prefix further.
Result list_segments(Client& client, const Location& where, const Selection& sel,
                     std::vector<SegmentObject>* out);

// Downloads `objects` with up to `parallel` connections. Each goes to `dest(object)`; an
// existing file there is taken as is (the cache: its path holds the ETag). Progress on
// stderr when it is a terminal. Returns the local paths in the order of `objects` ("" for
// a failure, said on stderr).
std::vector<std::string> download(const Location& where, const std::vector<SegmentObject>& objects,
                                  const std::function<std::string(const SegmentObject&)>& dest,
                                  int parallel);

// $XDG_CACHE_HOME/d9/s3/{bucket}/{etag}/{key} (default ~/.cache/d9/...).
std::string cache_path(const Location& where, const SegmentObject& o);

}  // namespace d9::ship
