// S3 client for sealed segments: uploads in dial9's key layout, lists and downloads.
//
// The implementation (libcurl with CURLOPT_AWS_SIGV4, OpenSSL's MD5, zstd and zlib) lives
// in libd9_ship.so. libd9.so loads it with dlopen(RTLD_LOCAL) only when D9_S3_BUCKET is
// set (ship/worker.h), so libcurl and OpenSSL never enter a host's symbol scope and a
// process without S3 never maps them. The d9 command links the same code statically.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace d9::ship {

// s3://bucket[/prefix]: prefix without leading or trailing '/'.
struct Location {
  std::string bucket;
  std::string prefix;
};
bool parse_s3_url(const std::string& url, Location* out);
bool is_s3_url(const std::string& text);

// What the key and the object metadata say about one segment.
struct SegmentInfo {
  std::string service, host, boot_id;
  uint64_t index = 0;
  uint64_t start_secs = 0;  // realtime seconds of the segment's first ClockSyncEvent
};

// {prefix/}{YYYY-MM-DD}/{HHMM}/{service}/{host}/{boot_id}/{epoch_secs}-{index}.bin.gz, the
// date and HHMM of start_secs in UTC. '/' inside a value becomes '_' (one path segment).
std::string segment_key(const std::string& prefix, const SegmentInfo& info);
// The inverse, for keys under `prefix`; false for anything else.
bool parse_segment_key(const std::string& prefix, const std::string& key, SegmentInfo* out);
// One path segment: '/' replaced, empty -> "unknown".
std::string path_segment(std::string value);

enum class Status : uint8_t {
  kOk,
  kRetry,     // connection error, timeout, 5xx, 429: try again later
  kRejected,  // any other HTTP status (bad credentials, no bucket): retrying will not help
  kBadFile,   // the local file is not a readable segment (no clock sync, no index)
};

struct Result {
  Status status = Status::kOk;
  long http = 0;        // HTTP status, 0 when there was no answer
  std::string message;  // one line, never a secret
  std::string key;      // object key (put_segment)
  uint64_t bytes = 0;   // bytes sent or received
};

struct ObjectInfo {
  std::string key;
  std::string etag;  // without quotes
  uint64_t size = 0;
};

struct Listing {
  std::vector<ObjectInfo> objects;
  std::vector<std::string> prefixes;  // CommonPrefixes, with a delimiter
  bool truncated = false;
  std::string next_token;
};
// Parses one ListObjectsV2 answer. False (with *error) on XML it cannot read. Untrusted
// input: tests/fuzz/list_xml_fuzz.cc.
bool parse_list_xml(const std::string& xml, Listing* out, std::string* error);

class Client {
 public:
  virtual ~Client() = default;
  // Uploads the sealed segment at `path` (raw, gzip or zstd; zstd and raw are transcoded
  // to one gzip member through an unnamed temporary file, so memory stays bounded) under
  // its dial9 key, with Content-MD5 and the dial9 object metadata. kOk only after HTTP 200
  // whose ETag is the body's MD5: only then may the caller delete the file. A .bin.gz is
  // sent as it is once it is checked to be one gzip member, unless `own_gzip` says libd9
  // sealed it (always one member): that check inflates the whole file.
  virtual Result put_segment(const std::string& path, bool own_gzip) = 0;
  // Every object under `prefix` (a key prefix, not a Location prefix), or with a
  // non-empty `delimiter` the objects and common prefixes one level down.
  virtual Result list(const std::string& prefix, const std::string& delimiter, Listing* out) = 0;
  // Downloads `key` into the file `path` (written to path.part, renamed when complete).
  virtual Result get(const std::string& key, const std::string& path) = 0;
  // Ends the transfer in progress and every later one at once (process exit).
  virtual void abort() = 0;
  virtual const std::string& bucket() const = 0;
  virtual const std::string& host() const = 0;
};

// Environment the client reads at creation (kEnvironment): D9_S3_ENDPOINT,
// AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL; AWS_REGION, AWS_DEFAULT_REGION; D9_HOST;
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, else AWS_PROFILE's section
// of AWS_SHARED_CREDENTIALS_FILE (default $HOME/.aws/credentials). Looked up with `env`
// (libd9.so passes a copy taken at start-up: a host thread's setenv must not race with
// the upload thread's getenv), or getenv when it is empty.
inline constexpr const char* kEnvironment[] = {
    "D9_S3_ENDPOINT",    "AWS_ENDPOINT_URL_S3",         "AWS_ENDPOINT_URL",
    "AWS_REGION",        "AWS_DEFAULT_REGION",          "D9_HOST",
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",       "AWS_SESSION_TOKEN",
    "AWS_PROFILE",       "AWS_SHARED_CREDENTIALS_FILE", "HOME"};
using Getenv = std::function<std::string(const char* name)>;
Client* create_client(const Location& where, std::string* error, const Getenv& env = {});

inline constexpr char kShipLibrary[] = "libd9_ship.so";
inline constexpr char kShipEntry[] = "d9_create_ship_client_v3";
using CreateClientFn = Client* (*)(const Location& where, const Getenv& env, std::string* error);

}  // namespace d9::ship
