#include "ship/bucket.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

namespace d9::ship {
namespace {

namespace fs = std::filesystem;

// Windows up to a day are listed minute by minute, longer ones date by date.
constexpr int64_t kMinuteListingSecs = 24 * 3600;
constexpr size_t kParallelListings = 8;

bool parse_when(const std::string& text, int64_t* out) {
  std::string t = text[0] == '@' ? text.substr(1) : text;
  char* end = nullptr;
  long long v = strtoll(t.c_str(), &end, 10);
  if (!t.empty() && *end == 0) {
    *out = v;
    return true;
  }
  struct tm tm {};
  const char* rest = strptime(t.c_str(), "%Y-%m-%dT%H:%M", &tm);
  if (!rest) return false;
  if (*rest == ':') rest = strptime(rest, ":%S", &tm);
  if (!rest || (strcmp(rest, "Z") != 0 && *rest != 0)) return false;
  *out = timegm(&tm);
  return true;
}

std::string minute_prefix(int64_t secs) {
  time_t t = static_cast<time_t>(secs);
  struct tm tm;
  gmtime_r(&t, &tm);
  char b[32];
  strftime(b, sizeof(b), "%Y-%m-%d/%H%M", &tm);
  return b;
}

std::string pct_decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() + 0 && isxdigit(s[i + 1]) && isxdigit(s[i + 2])) {
      out += static_cast<char>(strtol(s.substr(i + 1, 2).c_str(), nullptr, 16));
      i += 2;
    } else {
      out += s[i] == '+' ? ' ' : s[i];
    }
  }
  return out;
}

}  // namespace

bool parse_selection_url(const std::string& url, const Selection& base, Location* where,
                         Selection* out, std::string* error) {
  *out = base;
  size_t q = url.find('?');
  if (!parse_s3_url(url.substr(0, q), where)) {
    *error = url + ": not s3://bucket[/prefix]";
    return false;
  }
  if (q == std::string::npos) return true;
  std::string query = url.substr(q + 1);
  size_t at = 0;
  while (at <= query.size()) {
    size_t amp = query.find('&', at);
    std::string kv = query.substr(at, amp - at);
    at = amp == std::string::npos ? query.size() + 1 : amp + 1;
    if (kv.empty()) continue;
    size_t eq = kv.find('=');
    std::string k = kv.substr(0, eq),
                v = eq == std::string::npos ? "" : pct_decode(kv.substr(eq + 1));
    int64_t when;
    if (k == "service") {
      out->service = v;
    } else if (k == "host") {
      out->host = v;
    } else if (k == "process") {
      out->processes = {v};
    } else if ((k == "from" || k == "to") && parse_when(v, &when)) {
      (k == "from" ? out->from_secs : out->to_secs) = when;
    } else if (k == "sample" && !v.empty() && strspn(v.c_str(), "0123456789") == v.size()) {
      out->sample = strtoull(v.c_str(), nullptr, 10);
    } else {
      *error = url + ": bad selection " + kv +
               " (service=, host=, process=, from=, to= as Unix seconds or "
               "2026-11-24T12:00:00Z, sample=N)";
      return false;
    }
  }
  return true;
}

Result list_segments(Client& client, const Location& where, const Selection& sel,
                     std::vector<SegmentObject>* out) {
  out->clear();
  const std::string base = where.prefix.empty() ? "" : where.prefix + "/";
  const int64_t lo = sel.from_secs ? *sel.from_secs - kLookbackSecs : 0;
  const int64_t hi = sel.to_secs ? *sel.to_secs : INT64_MAX / 2;
  // Below each minute prefix: service/ and host/ when they are given.
  std::string narrow;
  if (!sel.service.empty()) {
    narrow = path_segment(sel.service) + "/";
    if (!sel.host.empty()) narrow += path_segment(sel.host) + "/";
  }
  // Key prefixes to list: the whole prefix without a window; with one, each minute it
  // touches (up to a day), or each date (longer windows). No delimiter listings: they cost
  // a round trip per level, and s3rver answers them wrongly for nested keys.
  std::vector<std::string> listings;
  if (!sel.from_secs) {
    listings.push_back(base);
  } else {
    const int64_t end = sel.to_secs ? *sel.to_secs : static_cast<int64_t>(time(nullptr)) + 60;
    if (end - lo <= kMinuteListingSecs) {
      for (int64_t t = lo - lo % 60; t <= end; t += 60) {
        listings.push_back(base + minute_prefix(t) + "/" + narrow);
      }
    } else {
      for (int64_t t = lo - lo % 86400; t <= end; t += 86400) {
        listings.push_back(base + minute_prefix(t).substr(0, 10) + "/");
      }
    }
  }
  std::vector<std::vector<ObjectInfo>> found(listings.size());
  std::vector<Result> results(listings.size());
  std::atomic<size_t> next{0};
  auto work = [&](Client* c) {
    std::unique_ptr<Client> own;
    for (size_t i; (i = next.fetch_add(1)) < listings.size();) {
      if (!c) {
        std::string error;
        own.reset(create_client(where, &error));
        c = own.get();
        if (!c) {
          results[i].status = Status::kRejected;
          results[i].message = error;
          continue;
        }
      }
      Listing page;
      results[i] = c->list(listings[i], "", &page);
      found[i] = std::move(page.objects);
    }
  };
  const size_t threads = std::min<size_t>(kParallelListings, listings.size());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work, nullptr);
  work(&client);
  for (std::thread& t : pool) t.join();
  Result r;
  for (size_t i = 0; i < listings.size(); ++i) {
    if (results[i].status != Status::kOk) return results[i];
    for (ObjectInfo& o : found[i]) {
      SegmentObject s;
      if (!parse_segment_key(where.prefix, o.key, &s.info)) continue;
      if (!sel.service.empty() && s.info.service != path_segment(sel.service)) continue;
      if (!sel.host.empty() && s.info.host != path_segment(sel.host)) continue;
      if (!sel.processes.empty() && std::find(sel.processes.begin(), sel.processes.end(),
                                              s.info.boot_id) == sel.processes.end()) {
        continue;
      }
      int64_t start = static_cast<int64_t>(s.info.start_secs);
      if (start < lo || start > hi) continue;
      s.key = std::move(o.key);
      s.etag = std::move(o.etag);
      s.size = o.size;
      out->push_back(std::move(s));
    }
  }
  std::sort(out->begin(), out->end(), [](const SegmentObject& a, const SegmentObject& b) {
    if (a.info.start_secs != b.info.start_secs) return a.info.start_secs < b.info.start_secs;
    return a.key < b.key;
  });
  if (sel.sample > 0 && out->size() > sel.sample) {
    // N spread evenly: the first, the last, and the rest at equal steps between.
    std::vector<SegmentObject> picked;
    const size_t n = out->size(), k = sel.sample;
    for (size_t i = 0; i < k; ++i) {
      size_t at = k == 1 ? n / 2 : i * (n - 1) / (k - 1);
      picked.push_back((*out)[at]);
    }
    *out = std::move(picked);
  }
  return r;
}

std::string cache_path(const Location& where, const SegmentObject& o) {
  std::string root;
  if (const char* x = getenv("XDG_CACHE_HOME"); x && *x) {
    root = x;
  } else {
    const char* home = getenv("HOME");
    root = std::string(home ? home : ".") + "/.cache";
  }
  return root + "/d9/s3/" + where.bucket + "/" + (o.etag.empty() ? "no-etag" : o.etag) + "/" +
         o.key;
}

std::vector<std::string> download(const Location& where, const std::vector<SegmentObject>& objects,
                                  const std::function<std::string(const SegmentObject&)>& dest,
                                  int parallel) {
  std::vector<std::string> paths(objects.size());
  std::atomic<size_t> next{0}, done{0};
  std::atomic<uint64_t> bytes{0};
  uint64_t total = 0;
  for (const SegmentObject& o : objects) total += o.size;
  std::mutex err_mu;
  const bool progress = isatty(2);
  auto work = [&] {
    std::unique_ptr<Client> client;
    for (size_t i; (i = next.fetch_add(1)) < objects.size();) {
      const SegmentObject& o = objects[i];
      std::string path = dest(o);
      std::error_code ec;
      if (!fs::exists(path, ec)) {
        std::string error;
        if (!client) client.reset(create_client(where, &error));
        fs::create_directories(fs::path(path).parent_path(), ec);
        Result r;
        if (client) {
          for (int attempt = 0; attempt < 3; ++attempt) {
            r = client->get(o.key, path);
            if (r.status != Status::kRetry) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(500 << attempt));
          }
        }
        if (!client || r.status != Status::kOk) {
          std::lock_guard<std::mutex> g(err_mu);
          fprintf(stderr, "d9: s3://%s/%s: %s\n", where.bucket.c_str(), o.key.c_str(),
                  client ? r.message.c_str() : error.c_str());
          path.clear();
        }
      }
      paths[i] = path;
      bytes += o.size;
      size_t d = ++done;
      if (progress) {
        std::lock_guard<std::mutex> g(err_mu);
        fprintf(stderr, "\r\033[Kd9: fetched %zu/%zu segments, %.1f/%.1f MB", d, objects.size(),
                static_cast<double>(bytes.load()) / 1e6, static_cast<double>(total) / 1e6);
      }
    }
  };
  const int n = std::max(1, std::min<int>(parallel, static_cast<int>(objects.size())));
  std::vector<std::thread> threads;
  for (int t = 1; t < n; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  if (progress && !objects.empty()) fprintf(stderr, "\r\033[K");
  return paths;
}

}  // namespace d9::ship
