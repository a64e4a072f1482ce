// ship::Client over libcurl: requests signed by CURLOPT_AWS_SIGV4, bodies streamed from
// files, MD5 by OpenSSL, gzip by zlib, zstd by libzstd.
#include "ship/client.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <span>

#include "writer/container.h"
#include "writer/trace.h"

namespace d9::ship {
namespace {

constexpr long kAttemptTimeoutSecs = 30;
constexpr size_t kChunk = 128 << 10;
// Enough raw bytes for a segment's first ClockSyncEvent and its metadata, which open it.
constexpr size_t kHeaderBytes = 1 << 20;

// The environment create_client() was given (or getenv), for the helpers below.
thread_local const Getenv* t_env = nullptr;

std::string env(const char* name) {
  if (t_env && *t_env) return (*t_env)(name);
  const char* v = getenv(name);
  return v ? v : "";
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

struct Credentials {
  std::string key, secret, token;
};

// As the AWS tools find them: the environment, else the profile's section of the shared
// credentials file.
bool find_credentials(Credentials* c, std::string* error) {
  c->key = env("AWS_ACCESS_KEY_ID");
  c->secret = env("AWS_SECRET_ACCESS_KEY");
  c->token = env("AWS_SESSION_TOKEN");
  if (!c->key.empty() && !c->secret.empty()) return true;
  std::string file = env("AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty()) file = env("HOME") + "/.aws/credentials";
  std::string profile = env("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  std::ifstream in(file);
  std::string line;
  bool in_section = false;
  *c = {};
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[') {
      in_section = trim(line.substr(1, line.find(']') - 1)) == profile;
      continue;
    }
    size_t eq = line.find('=');
    if (!in_section || eq == std::string::npos) continue;
    std::string name = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    if (name == "aws_access_key_id") c->key = value;
    if (name == "aws_secret_access_key") c->secret = value;
    if (name == "aws_session_token") c->token = value;
  }
  if (!c->key.empty() && !c->secret.empty()) return true;
  *error = "no AWS credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or profile \"" + profile +
           "\" in " + file + ")";
  return false;
}

// Percent-encoding as SigV4 wants it: RFC 3986 unreserved characters as they are, and '/'
// too in a key's path (never in a query value).
std::string escape(const std::string& s, bool keep_slash) {
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      char b[4];
      snprintf(b, sizeof(b), "%%%02X", c);
      out += b;
    }
  }
  return out;
}
std::string escape_path(const std::string& s) {
  return escape(s, true);
}
std::string escape_query(const std::string& s) {
  return escape(s, false);
}

std::string hex(const unsigned char* p, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

std::string base64(const unsigned char* p, size_t n) {
  std::string out(4 * ((n + 2) / 3) + 1, '\0');
  int len = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), p, static_cast<int>(n));
  out.resize(static_cast<size_t>(len));
  return out;
}

class Md5 {
 public:
  Md5() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_md5(), nullptr); }
  ~Md5() { EVP_MD_CTX_free(ctx_); }
  void update(const void* p, size_t n) { EVP_DigestUpdate(ctx_, p, n); }
  void finish(unsigned char out[16]) {
    unsigned int len = 16;
    EVP_DigestFinal_ex(ctx_, out, &len);
  }

 private:
  EVP_MD_CTX* ctx_;
};

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

ssize_t read_full(int fd, uint8_t* buf, size_t cap) {
  size_t got = 0;
  while (got < cap) {
    ssize_t n = read(fd, buf + got, cap - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(got);
}

bool write_full(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Streams the raw dial9 bytes of a segment file (raw, one or more gzip members, zstd
// frames) to `sink`, a chunk at a time. Stops early when `sink` returns false.
template <class Sink>
bool stream_raw(int fd, Sink sink, std::string* error) {
  auto in = std::make_unique<uint8_t[]>(kChunk);
  auto out = std::make_unique<uint8_t[]>(kChunk);
  ssize_t n = read_full(fd, in.get(), kChunk);
  if (n < 0) {
    *error = std::string("read: ") + strerror(errno);
    return false;
  }
  decode::Container c = decode::DetectContainer({in.get(), static_cast<size_t>(n)});
  if (c == decode::Container::kRaw) {
    while (n > 0) {
      if (!sink(in.get(), static_cast<size_t>(n))) return true;
      n = read_full(fd, in.get(), kChunk);
    }
    if (n < 0) *error = std::string("read: ") + strerror(errno);
    return n == 0;
  }
  if (c == decode::Container::kZstd) {
    std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> d(ZSTD_createDCtx(), ZSTD_freeDCtx);
    while (n > 0) {
      ZSTD_inBuffer ib{in.get(), static_cast<size_t>(n), 0};
      while (ib.pos < ib.size) {
        ZSTD_outBuffer ob{out.get(), kChunk, 0};
        size_t rc = ZSTD_decompressStream(d.get(), &ob, &ib);
        if (ZSTD_isError(rc)) {
          *error = std::string("zstd: ") + ZSTD_getErrorName(rc);
          return false;
        }
        if (ob.pos > 0 && !sink(out.get(), ob.pos)) return true;
      }
      n = read_full(fd, in.get(), kChunk);
    }
    return n == 0;
  }
  if (c == decode::Container::kGzip) {
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return false;
    std::unique_ptr<z_stream, int (*)(z_stream*)> end(&z, inflateEnd);
    while (n > 0) {
      z.next_in = in.get();
      z.avail_in = static_cast<uInt>(n);
      while (z.avail_in > 0) {
        z.next_out = out.get();
        z.avail_out = static_cast<uInt>(kChunk);
        int rc = inflate(&z, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
          *error = "gzip: damaged data";
          return false;
        }
        size_t produced = kChunk - z.avail_out;
        if (produced > 0 && !sink(out.get(), produced)) return true;
        if (rc == Z_STREAM_END) inflateReset(&z);  // the next member, if any
        if (rc == Z_BUF_ERROR && produced == 0) break;
      }
      n = read_full(fd, in.get(), kChunk);
    }
    return n == 0;
  }
  *error = "not a dial9 segment (neither raw, gzip nor zstd)";
  return false;
}

// N in "stem.N.bin…".
bool index_from_name(const std::string& path, uint64_t* out) {
  std::string name = path.substr(path.rfind('/') + 1);
  size_t bin = name.find(".bin");
  if (bin == std::string::npos || bin == 0) return false;
  size_t dot = name.rfind('.', bin - 1);
  if (dot == std::string::npos || dot + 1 >= bin || bin - dot - 1 > 18) return false;
  uint64_t n = 0;
  for (size_t i = dot + 1; i < bin; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    n = n * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  *out = n;
  return true;
}

class CurlClient final : public Client {
 public:
  CurlClient(Location where, std::string endpoint, std::string region, std::string host,
             Credentials creds)
      : where_(std::move(where)),
        endpoint_(std::move(endpoint)),
        region_(std::move(region)),
        host_(std::move(host)),
        creds_(std::move(creds)) {
    curl_ = curl_easy_init();
  }
  ~CurlClient() override {
    if (curl_) curl_easy_cleanup(curl_);
  }

  const std::string& bucket() const override { return where_.bucket; }
  const std::string& host() const override { return host_; }
  void abort() override { aborted_.store(true, std::memory_order_release); }

  Result put_segment(const std::string& path, bool own_gzip) override {
    Result r;
    r.status = Status::kBadFile;
    SegmentInfo info;
    if (!index_from_name(path, &info.index)) {
      r.message = path + ": not named like a segment (stem.N.bin…)";
      return r;
    }
    Fd src(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (src.fd < 0) {
      r.status = errno == ENOENT ? Status::kBadFile : Status::kRetry;
      r.message = path + ": " + strerror(errno);
      return r;
    }
    if (!read_info(src.fd, path, &info, &r.message)) return r;
    info.host = host_;
    r.key = segment_key(where_.prefix, info);

    // The body: the file itself when it is one gzip member already, else a gzip member
    // written to an unnamed temporary file beside it (gone with its descriptor).
    uint8_t magic[2] = {0, 0};
    if (pread(src.fd, magic, 2, 0) != 2) {
      r.message = path + ": empty file";
      return r;
    }
    unsigned char digest[16];
    int body = src.fd;
    std::unique_ptr<Fd> tmp;
    if (magic[0] == 0x1f && magic[1] == 0x8b && (own_gzip || single_gzip_member(src.fd))) {
      if (!md5_of(src.fd, digest)) {
        r.status = Status::kRetry;
        r.message = path + ": read failed";
        return r;
      }
    } else {
      std::string dir = path.substr(0, path.rfind('/') + 1);
      if (dir.empty()) dir = ".";
      tmp = std::make_unique<Fd>(open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
      if (tmp->fd < 0) {
        r.status = Status::kRetry;
        r.message = dir + ": cannot create a temporary file: " + strerror(errno);
        return r;
      }
      if (!gzip_to(src.fd, tmp->fd, digest, &r.message)) {
        r.status = r.message.compare(0, 5, "write") == 0 ? Status::kRetry : Status::kBadFile;
        r.message = path + ": " + r.message;
        return r;
      }
      body = tmp->fd;
    }
    struct stat st;
    fstat(body, &st);
    const uint64_t size = static_cast<uint64_t>(st.st_size);

    std::vector<std::string> headers = {
        "Content-Type: application/gzip",
        "Content-MD5: " + base64(digest, 16),
        "x-amz-meta-service: " + info.service,
        "x-amz-meta-boot-id: " + info.boot_id,
        "x-amz-meta-segment-index: " + std::to_string(info.index),
        "x-amz-meta-start-time: " + std::to_string(info.start_secs),
        "x-amz-meta-host: " + info.host,
    };
    Upload up{body, 0, size};
    Answer a;
    Result sent = perform("PUT", r.key, "", headers, &up, nullptr, &a);
    sent.key = r.key;
    if (sent.status != Status::kOk) return sent;
    // S3's ETag of a single PUT is the body's MD5: the server stored what was sent.
    std::string etag = a.etag;
    if (etag.size() >= 2 && etag.front() == '"') etag = etag.substr(1, etag.size() - 2);
    if (etag != hex(digest, 16)) {
      sent.status = Status::kRetry;
      sent.message = "ETag " + etag + " is not the body's MD5";
      return sent;
    }
    sent.bytes = size;
    return sent;
  }

  Result list(const std::string& prefix, const std::string& delimiter, Listing* out) override {
    *out = Listing{};
    std::string token;
    for (;;) {
      // Parameters in canonical (sorted, escaped) order: SigV4 signs the query as sent.
      std::string q;
      if (!token.empty()) q += "continuation-token=" + escape_query(token) + "&";
      if (!delimiter.empty()) q += "delimiter=" + escape_query(delimiter) + "&";
      q += "list-type=2&prefix=" + escape_query(prefix);
      Answer a;
      Result r = perform("GET", "", q, {}, nullptr, nullptr, &a);
      if (r.status != Status::kOk) return r;
      Listing page;
      if (!parse_list_xml(a.body, &page, &r.message)) {
        r.status = Status::kRetry;
        r.message = "ListObjectsV2: " + r.message;
        return r;
      }
      out->objects.insert(out->objects.end(), page.objects.begin(), page.objects.end());
      out->prefixes.insert(out->prefixes.end(), page.prefixes.begin(), page.prefixes.end());
      if (!page.truncated) return r;
      token = page.next_token;
    }
  }

  Result get(const std::string& key, const std::string& path) override {
    std::string part = path + ".part";
    Fd fd(open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    Result r;
    if (fd.fd < 0) {
      r.status = Status::kRejected;
      r.message = part + ": " + strerror(errno);
      return r;
    }
    Answer a;
    r = perform("GET", key, "", {}, nullptr, &fd.fd, &a);
    if (r.status == Status::kOk && rename(part.c_str(), path.c_str()) != 0) {
      r.status = Status::kRejected;
      r.message = path + ": " + strerror(errno);
    }
    if (r.status != Status::kOk) unlink(part.c_str());
    r.bytes = a.received;
    return r;
  }

 private:
  struct Upload {
    int fd;
    uint64_t offset, size;
  };
  struct Answer {
    std::string body;  // error bodies and listings (downloads go to the file)
    std::string etag;
    int* sink = nullptr;
    bool sink_failed = false;
    uint64_t received = 0;
  };

  // A segment's service, boot id and start, from its first events.
  static bool read_info(int fd, const std::string& path, SegmentInfo* info, std::string* error) {
    std::vector<uint8_t> raw;
    std::string why;
    bool ok = stream_raw(
        fd,
        [&](const uint8_t* p, size_t n) {
          raw.insert(raw.end(), p, p + std::min(n, kHeaderBytes - raw.size()));
          return raw.size() < kHeaderBytes;
        },
        &why);
    if (!ok && raw.empty()) {
      *error = path + ": " + why;
      return false;
    }
    decode::Trace t = decode::DecodeTrace(raw);
    if (t.clock_syncs.empty() || t.clock_syncs[0].realtime_ns == 0) {
      *error = path + ": no clock sync event at its start";
      return false;
    }
    info->start_secs = t.clock_syncs[0].realtime_ns / 1000000000ULL;
    auto find = [&](const char* k) {
      auto it = t.metadata.find(k);
      return it == t.metadata.end() ? std::string() : it->second;
    };
    info->service = find("service");
    info->boot_id = find("boot_id");
    return true;
  }

  static bool single_gzip_member(int fd) {
    bool ok = true;
    int members = 0;
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return false;
    auto in = std::make_unique<uint8_t[]>(kChunk);
    auto out = std::make_unique<uint8_t[]>(kChunk);
    off_t at = 0;
    for (;;) {
      ssize_t n = pread(fd, in.get(), kChunk, at);
      if (n <= 0) break;
      at += n;
      z.next_in = in.get();
      z.avail_in = static_cast<uInt>(n);
      while (z.avail_in > 0 && ok) {
        z.next_out = out.get();
        z.avail_out = static_cast<uInt>(kChunk);
        int rc = inflate(&z, Z_NO_FLUSH);
        if (rc == Z_STREAM_END) {
          ++members;
          inflateReset(&z);
        } else if (rc != Z_OK) {
          ok = rc == Z_BUF_ERROR && z.avail_out != 0;
          if (ok) break;
        }
      }
      if (!ok) break;
    }
    inflateEnd(&z);
    return ok && members == 1;
  }

  static bool md5_of(int fd, unsigned char digest[16]) {
    Md5 md5;
    auto buf = std::make_unique<uint8_t[]>(kChunk);
    off_t at = 0;
    for (;;) {
      ssize_t n = pread(fd, buf.get(), kChunk, at);
      if (n < 0) return false;
      if (n == 0) break;
      md5.update(buf.get(), static_cast<size_t>(n));
      at += n;
    }
    md5.finish(digest);
    return true;
  }

  // The raw stream of `src` as one gzip member (fast level, as dial9) into `dst`.
  static bool gzip_to(int src, int dst, unsigned char digest[16], std::string* error) {
    if (lseek(src, 0, SEEK_SET) != 0) {
      *error = std::string("read: ") + strerror(errno);
      return false;
    }
    z_stream z{};
    if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
      *error = "deflateInit2 failed";
      return false;
    }
    std::unique_ptr<z_stream, int (*)(z_stream*)> end(&z, deflateEnd);
    auto out = std::make_unique<uint8_t[]>(kChunk);
    Md5 md5;
    bool write_ok = true;
    auto push = [&](const uint8_t* p, size_t n, int flush) {
      z.next_in = const_cast<uint8_t*>(p);
      z.avail_in = static_cast<uInt>(n);
      int rc;
      do {
        z.next_out = out.get();
        z.avail_out = static_cast<uInt>(kChunk);
        rc = deflate(&z, flush);
        size_t produced = kChunk - z.avail_out;
        md5.update(out.get(), produced);
        if (produced > 0 && !write_full(dst, out.get(), produced)) write_ok = false;
      } while (z.avail_out == 0 && write_ok);
      return write_ok && rc != Z_STREAM_ERROR;
    };
    if (!stream_raw(
            src, [&](const uint8_t* p, size_t n) { return push(p, n, Z_NO_FLUSH); }, error)) {
      return false;
    }
    if (!write_ok || !push(nullptr, 0, Z_FINISH)) {
      *error = std::string("write to the temporary file failed: ") + strerror(errno);
      return false;
    }
    md5.finish(digest);
    return true;
  }

  static size_t on_read(char* buf, size_t size, size_t n, void* arg) {
    auto* up = static_cast<Upload*>(arg);
    size_t want = std::min<uint64_t>(size * n, up->size - up->offset);
    if (want == 0) return 0;
    ssize_t got = pread(up->fd, buf, want, static_cast<off_t>(up->offset));
    if (got <= 0) return CURL_READFUNC_ABORT;
    up->offset += static_cast<uint64_t>(got);
    return static_cast<size_t>(got);
  }

  static size_t on_write(char* p, size_t size, size_t n, void* arg) {
    auto* a = static_cast<Answer*>(arg);
    size_t len = size * n;
    a->received += len;
    if (a->sink) {
      if (!write_full(*a->sink, reinterpret_cast<uint8_t*>(p), len)) {
        a->sink_failed = true;
        return 0;
      }
    } else if (a->body.size() < (64u << 20)) {
      a->body.append(p, len);
    }
    return len;
  }

  static size_t on_header(char* p, size_t size, size_t n, void* arg) {
    auto* a = static_cast<Answer*>(arg);
    std::string line(p, size * n);
    if (line.size() > 5 && strncasecmp(line.c_str(), "etag:", 5) == 0) {
      a->etag = trim(line.substr(5));
      while (!a->etag.empty() && (a->etag.back() == '\n' || a->etag.back() == '\r')) {
        a->etag.pop_back();
      }
    }
    return size * n;
  }

  static int on_progress(void* arg, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    return static_cast<CurlClient*>(arg)->aborted_.load(std::memory_order_acquire) ? 1 : 0;
  }

  std::string url(const std::string& key, const std::string& query) const {
    std::string u;
    if (!endpoint_.empty()) {  // path style: S3-compatible servers, and any bucket name
      u = endpoint_;
      while (!u.empty() && u.back() == '/') u.pop_back();
      u += "/" + escape_path(where_.bucket) + "/" + escape_path(key);
    } else {  // virtual-host style, as AWS wants
      u = "https://" + where_.bucket + ".s3." + region_ + ".amazonaws.com/" + escape_path(key);
    }
    if (!query.empty()) u += "?" + query;
    return u;
  }

  Result perform(const char* method, const std::string& key, const std::string& query,
                 const std::vector<std::string>& extra_headers, Upload* up, int* sink, Answer* a) {
    Result r;
    if (aborted_.load(std::memory_order_acquire)) {
      r.status = Status::kRetry;
      r.message = "stopped";
      return r;
    }
    CURL* c = curl_;
    curl_easy_reset(c);
    std::string u = url(key, query);
    std::string sigv4 = "aws:amz:" + region_ + ":s3";
    curl_easy_setopt(c, CURLOPT_URL, u.c_str());
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(c, CURLOPT_USERNAME, creds_.key.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, creds_.secret.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    if (up) {
      curl_easy_setopt(c, CURLOPT_TIMEOUT, kAttemptTimeoutSecs);
    } else {  // downloads and listings of any size: stalls end them, not their length
      curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
      curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, kAttemptTimeoutSecs);
    }
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, this);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
    curl_slist* headers = nullptr;
    for (const std::string& h : extra_headers) headers = curl_slist_append(headers, h.c_str());
    std::string token_header;
    if (!creds_.token.empty()) {
      token_header = "x-amz-security-token: " + creds_.token;
      headers = curl_slist_append(headers, token_header.c_str());
    }
    // S3 wants the payload's hash in a header (curl 7.88 does not add it). Uploads are
    // streamed, so not hashed: their integrity is Content-MD5's job.
    headers = curl_slist_append(
        headers, up ? "x-amz-content-sha256: UNSIGNED-PAYLOAD"
                    : "x-amz-content-sha256: "
                      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    if (up) {
      curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
      curl_easy_setopt(c, CURLOPT_READDATA, up);
      curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(up->size));
    } else {
      curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    }
    a->sink = sink;
    // Error bodies are read into memory even for downloads.
    Answer* target = a;
    curl_easy_setopt(c, CURLOPT_WRITEDATA, target);
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(headers);
    long http = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
    r.http = http;
    if (rc != CURLE_OK) {
      r.status = a->sink_failed ? Status::kRejected : Status::kRetry;
      r.message = a->sink_failed ? "cannot write the download" : curl_easy_strerror(rc);
      return r;
    }
    if (http == 200 || (http == 204 && !up && !sink)) return r;
    r.status = http >= 500 || http == 429 ? Status::kRetry : Status::kRejected;
    // S3's error code (<Code>SignatureDoesNotMatch</Code>): never a secret.
    std::string code;
    size_t at = a->body.find("<Code>");
    if (at != std::string::npos) {
      size_t end = a->body.find("</Code>", at);
      if (end != std::string::npos && end - at < 80) code = a->body.substr(at + 6, end - at - 6);
    }
    r.message = "HTTP " + std::to_string(http) + (code.empty() ? "" : " " + code);
    if (sink) {  // the error body went to the file
      r.message = "HTTP " + std::to_string(http);
    }
    return r;
  }

  Location where_;
  std::string endpoint_, region_, host_;
  Credentials creds_;
  CURL* curl_ = nullptr;
  std::atomic<bool> aborted_{false};
};

}  // namespace

Client* create_client(const Location& where, std::string* error, const Getenv& getenv_fn) {
  t_env = &getenv_fn;
  struct Reset {
    ~Reset() { t_env = nullptr; }
  } reset;
  static bool initialised = [] {
    // No atexit handler: a process may exit while an upload is under way on d9's thread,
    // and OpenSSL's clean-up must not pull its tables from under it.
    OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  }();
  if (!initialised) {
    *error = "curl_global_init failed";
    return nullptr;
  }
  Credentials creds;
  if (!find_credentials(&creds, error)) return nullptr;
  std::string endpoint = env("D9_S3_ENDPOINT");
  if (endpoint.empty()) endpoint = env("AWS_ENDPOINT_URL_S3");
  if (endpoint.empty()) endpoint = env("AWS_ENDPOINT_URL");
  std::string region = env("AWS_REGION");
  if (region.empty()) region = env("AWS_DEFAULT_REGION");
  if (region.empty()) region = "us-east-1";
  std::string host = env("D9_HOST");
  if (host.empty()) {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    host = name;
  }
  auto* c = new CurlClient(where, endpoint, region, path_segment(host), std::move(creds));
  return c;
}

}  // namespace d9::ship
