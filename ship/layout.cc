// Keys, s3:// URLs and ListObjectsV2 answers: no I/O, so the CLI, the tests and the fuzz
// target use them without libcurl.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ship/client.h"

namespace d9::ship {

bool is_s3_url(const std::string& text) {
  return text.compare(0, 5, "s3://") == 0;
}

bool parse_s3_url(const std::string& url, Location* out) {
  if (!is_s3_url(url)) return false;
  std::string rest = url.substr(5);
  size_t slash = rest.find('/');
  out->bucket = rest.substr(0, slash);
  out->prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  while (!out->prefix.empty() && out->prefix.back() == '/') out->prefix.pop_back();
  while (!out->prefix.empty() && out->prefix.front() == '/') out->prefix.erase(0, 1);
  return !out->bucket.empty();
}

std::string path_segment(std::string value) {
  for (char& c : value) {
    if (c == '/') c = '_';
  }
  return value.empty() ? "unknown" : value;
}

std::string segment_key(const std::string& prefix, const SegmentInfo& info) {
  time_t t = static_cast<time_t>(info.start_secs);
  struct tm tm;
  gmtime_r(&t, &tm);
  char when[32];
  strftime(when, sizeof(when), "%Y-%m-%d/%H%M", &tm);
  std::string key = prefix.empty() ? "" : prefix + "/";
  key += when;
  key += "/" + path_segment(info.service) + "/" + path_segment(info.host) + "/" +
         path_segment(info.boot_id) + "/" + std::to_string(info.start_secs) + "-" +
         std::to_string(info.index) + ".bin.gz";
  return key;
}

namespace {

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return s.size() <= 19;
}

}  // namespace

bool parse_segment_key(const std::string& prefix, const std::string& key, SegmentInfo* out) {
  std::string rest = key;
  if (!prefix.empty()) {
    if (rest.compare(0, prefix.size() + 1, prefix + "/") != 0) return false;
    rest = rest.substr(prefix.size() + 1);
  }
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t slash = rest.find('/', start);
    parts.push_back(rest.substr(start, slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (parts.size() != 6) return false;
  const std::string& date = parts[0];
  if (date.size() != 10 || date[4] != '-' || date[7] != '-' || parts[1].size() != 4 ||
      !all_digits(parts[1])) {
    return false;
  }
  const std::string& name = parts[5];
  const std::string ext = ".bin.gz";
  if (name.size() <= ext.size() || name.compare(name.size() - ext.size(), ext.size(), ext) != 0) {
    return false;
  }
  std::string stem = name.substr(0, name.size() - ext.size());
  size_t dash = stem.find('-');
  if (dash == std::string::npos) return false;
  std::string secs = stem.substr(0, dash), index = stem.substr(dash + 1);
  if (!all_digits(secs) || !all_digits(index)) return false;
  out->service = parts[2];
  out->host = parts[3];
  out->boot_id = parts[4];
  out->start_secs = strtoull(secs.c_str(), nullptr, 10);
  out->index = strtoull(index.c_str(), nullptr, 10);
  return true;
}

namespace {

// XML character data with the five predefined entities and numeric references decoded.
bool unescape(const std::string& in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '&') {
      *out += in[i];
      continue;
    }
    size_t semi = in.find(';', i);
    if (semi == std::string::npos || semi - i > 12) return false;
    std::string ent = in.substr(i + 1, semi - i - 1);
    i = semi;
    if (ent == "amp") {
      *out += '&';
    } else if (ent == "lt") {
      *out += '<';
    } else if (ent == "gt") {
      *out += '>';
    } else if (ent == "quot") {
      *out += '"';
    } else if (ent == "apos") {
      *out += '\'';
    } else if (ent.size() >= 2 && ent[0] == '#') {
      bool hex = ent[1] == 'x' || ent[1] == 'X';
      std::string digits = ent.substr(hex ? 2 : 1);
      if (digits.empty() || digits.size() > 8) return false;
      char* end = nullptr;
      unsigned long cp = strtoul(digits.c_str(), &end, hex ? 16 : 10);
      if (*end || cp == 0 || cp > 0x10FFFF) return false;
      // UTF-8.
      if (cp < 0x80) {
        *out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        *out += static_cast<char>(0xC0 | (cp >> 6));
        *out += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        *out += static_cast<char>(0xE0 | (cp >> 12));
        *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        *out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        *out += static_cast<char>(0xF0 | (cp >> 18));
        *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        *out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else {
      return false;
    }
  }
  return true;
}

// The text of the first <tag>…</tag> in [from, to), unescaped. False when absent or bad.
bool element(const std::string& xml, size_t from, size_t to, const char* tag, std::string* out) {
  std::string open = std::string("<") + tag + ">", close = std::string("</") + tag + ">";
  size_t a = xml.find(open, from);
  if (a == std::string::npos || a >= to) return false;
  a += open.size();
  size_t b = xml.find(close, a);
  if (b == std::string::npos || b > to) return false;
  return unescape(xml.substr(a, b - a), out);
}

}  // namespace

bool parse_list_xml(const std::string& xml, Listing* out, std::string* error) {
  *out = Listing{};
  if (xml.find("<ListBucketResult") == std::string::npos) {
    *error = "not a ListBucketResult";
    return false;
  }
  // Blocks of one kind: <Contents>…</Contents> and <CommonPrefixes>…</CommonPrefixes>.
  // Their children hold character data only, so the first closing tag ends each block.
  auto blocks = [&](const char* tag, auto fn) {
    std::string open = std::string("<") + tag + ">", close = std::string("</") + tag + ">";
    for (size_t at = xml.find(open); at != std::string::npos; at = xml.find(open, at)) {
      size_t end = xml.find(close, at);
      if (end == std::string::npos) return false;
      if (!fn(at + open.size(), end)) return false;
      at = end + close.size();
    }
    return true;
  };
  bool ok = blocks("Contents", [&](size_t a, size_t b) {
    ObjectInfo o;
    std::string size;
    if (!element(xml, a, b, "Key", &o.key) || !element(xml, a, b, "Size", &size) ||
        !all_digits(size)) {
      return false;
    }
    o.size = strtoull(size.c_str(), nullptr, 10);
    if (element(xml, a, b, "ETag", &o.etag)) {
      if (o.etag.size() >= 2 && o.etag.front() == '"' && o.etag.back() == '"') {
        o.etag = o.etag.substr(1, o.etag.size() - 2);
      }
    }
    out->objects.push_back(std::move(o));
    return true;
  });
  ok = ok && blocks("CommonPrefixes", [&](size_t a, size_t b) {
         std::string p;
         if (!element(xml, a, b, "Prefix", &p)) return false;
         out->prefixes.push_back(std::move(p));
         return true;
       });
  if (!ok) {
    *error = "malformed Contents or CommonPrefixes";
    return false;
  }
  std::string truncated;
  out->truncated = element(xml, 0, xml.size(), "IsTruncated", &truncated) && truncated == "true";
  if (out->truncated && (!element(xml, 0, xml.size(), "NextContinuationToken", &out->next_token) ||
                         out->next_token.empty())) {
    *error = "truncated listing without a continuation token";
    return false;
  }
  return true;
}

}  // namespace d9::ship
