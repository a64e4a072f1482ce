#include "writer/container.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <new>

#include "writer/format.h"

namespace d9::decode {

const char* ContainerName(Container c) {
  static constexpr const char* kNames[] = {"unknown", "raw", "gzip", "zstd"};  // by Container
  static_assert(std::size(kNames) == static_cast<size_t>(Container::kZstd) + 1);
  const auto i = static_cast<size_t>(c);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

Container DetectContainer(std::span<const uint8_t> data) {
  auto starts_with = [&](const uint8_t* magic, size_t n) {
    return data.size() >= n && std::memcmp(data.data(), magic, n) == 0;
  };
  if (starts_with(fmt::kZstdMagic, sizeof(fmt::kZstdMagic))) return Container::kZstd;
  if (starts_with(fmt::kGzipMagic, sizeof(fmt::kGzipMagic))) return Container::kGzip;
  if (starts_with(fmt::kMagic, sizeof(fmt::kMagic))) return Container::kRaw;
  return Container::kUnknown;
}

namespace {

std::string LimitError(size_t cap) {
  return "decompressed size exceeds the limit of " + std::to_string(cap) + " bytes";
}

// Makes room for more output: doubles, but never beyond cap + 1 (one byte over the cap is how
// we notice the cap was hit).
bool GrowOutput(std::vector<uint8_t>* out, size_t cap) {
  size_t limit = cap == SIZE_MAX ? cap : cap + 1;
  if (out->size() >= limit) return false;
  size_t want = std::max<size_t>(out->size() * 2, out->size() + (size_t{1} << 17));
  out->resize(std::min(want, limit));
  return true;
}

void Unzstd(std::span<const uint8_t> in, size_t cap, std::vector<uint8_t>* out, std::string* err) {
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!dctx) {
    *err = "zstd: cannot create a decompression context";
    return;
  }
  unsigned long long hint = ZSTD_getFrameContentSize(in.data(), in.size());
  if (hint != ZSTD_CONTENTSIZE_UNKNOWN && hint != ZSTD_CONTENTSIZE_ERROR && hint <= cap) {
    out->reserve(static_cast<size_t>(hint));
  }
  ZSTD_inBuffer ib{in.data(), in.size(), 0};
  size_t produced = 0;
  size_t ret = 0;
  out->clear();
  for (;;) {
    if (ib.pos == ib.size && ret == 0 && ib.size > 0) break;  // every frame complete
    if (produced == out->size() && !GrowOutput(out, cap)) {
      *err = LimitError(cap);
      break;
    }
    ZSTD_outBuffer ob{out->data(), out->size(), produced};
    const size_t in_before = ib.pos;
    const size_t out_before = ob.pos;
    ret = ZSTD_decompressStream(dctx.get(), &ob, &ib);
    produced = ob.pos;
    if (ZSTD_isError(ret)) {
      *err = std::string("zstd: ") + ZSTD_getErrorName(ret) + " at input offset " +
             std::to_string(ib.pos);
      break;
    }
    if (produced > cap) {
      *err = LimitError(cap);
      break;
    }
    if (ret != 0 && ib.pos == ib.size && ob.pos < ob.size) {
      *err =
          "zstd: truncated input (frame incomplete at input offset " + std::to_string(ib.pos) + ")";
      break;
    }
    if (ib.pos == in_before && ob.pos == out_before && ob.pos < ob.size) {
      *err = "zstd: no progress at input offset " + std::to_string(ib.pos);  // defensive
      break;
    }
  }
  out->resize(std::min(produced, cap));
}

void Gunzip(std::span<const uint8_t> in, size_t cap, std::vector<uint8_t>* out, std::string* err) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    *err = "gzip: cannot initialise zlib";
    return;
  }
  size_t in_pos = 0;
  size_t produced = 0;
  out->clear();
  for (;;) {
    if (produced == out->size() && !GrowOutput(out, cap)) {
      *err = LimitError(cap);
      break;
    }
    // zlib counts in 32-bit uInt; feed at most 1 GiB per call.
    const uint8_t* next_in = in.data() + in_pos;
    zs.next_in = const_cast<Bytef*>(next_in);
    zs.avail_in = static_cast<uInt>(std::min<size_t>(in.size() - in_pos, size_t{1} << 30));
    zs.next_out = out->data() + produced;
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out->size() - produced, size_t{1} << 30));
    int rc = inflate(&zs, Z_NO_FLUSH);
    in_pos += static_cast<size_t>(zs.next_in - next_in);
    produced = static_cast<size_t>(zs.next_out - out->data());
    if (produced > cap) {
      *err = LimitError(cap);
      break;
    }
    if (rc == Z_STREAM_END) {
      if (in_pos == in.size()) break;
      // Multi-member: another gzip header follows directly.
      if (in.size() - in_pos >= 2 && in[in_pos] == fmt::kGzipMagic[0] &&
          in[in_pos + 1] == fmt::kGzipMagic[1]) {
        inflateReset(&zs);
        continue;
      }
      *err = "gzip: trailing garbage at input offset " + std::to_string(in_pos);
      break;
    }
    if (rc == Z_BUF_ERROR || rc == Z_OK) {
      if (zs.avail_out == 0) continue;  // output full: grow and go on
      if (in_pos == in.size()) {
        *err = "gzip: truncated input (member incomplete at input offset " +
               std::to_string(in_pos) + ")";
        break;
      }
      if (rc == Z_OK) continue;  // input chunk used up, more remains
      *err = "gzip: no progress at input offset " + std::to_string(in_pos);  // defensive
      break;
    }
    *err = "gzip: corrupt data at input offset " + std::to_string(in_pos) + ": " +
           (zs.msg ? zs.msg : "error " + std::to_string(rc));
    break;
  }
  inflateEnd(&zs);
  out->resize(std::min(produced, cap));
}

}  // namespace

RawTrace Decompress(std::span<const uint8_t> input, const DecompressOptions& options) {
  RawTrace out;
  out.container = DetectContainer(input);
  try {
    switch (out.container) {
      case Container::kRaw:
        out.bytes.assign(input.begin(), input.end());
        break;
      case Container::kGzip:
        Gunzip(input, options.max_output_bytes, &out.bytes, &out.error);
        break;
      case Container::kZstd:
        Unzstd(input, options.max_output_bytes, &out.bytes, &out.error);
        break;
      case Container::kUnknown: {
        if (input.empty()) {
          out.error = "empty input";
          break;
        }
        out.error = "unrecognised input: first bytes";
        for (size_t i = 0; i < std::min<size_t>(input.size(), 4); ++i) {
          char b[8];
          std::snprintf(b, sizeof(b), " %02x", input[i]);
          out.error += b;
        }
        out.error += " are not zstd, gzip or TRC\\0";
        break;
      }
    }
  } catch (const std::bad_alloc&) {
    out.bytes.clear();
    out.error = "out of memory while decompressing";
  }
  return out;
}

RawTrace ReadTraceFile(const std::string& path, const DecompressOptions& options) {
  RawTrace out;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) {
    out.error = "cannot open " + path + ": " + std::strerror(errno);
    return out;
  }
  std::vector<uint8_t> data;
  try {
    size_t used = 0;
    data.resize(size_t{1} << 16);
    for (;;) {
      if (used == data.size()) data.resize(data.size() * 2);
      size_t n = std::fread(data.data() + used, 1, data.size() - used, f.get());
      used += n;
      if (n == 0) break;
    }
    if (std::ferror(f.get())) {
      out.error = "cannot read " + path + ": " + std::strerror(errno);
      return out;
    }
    data.resize(used);
  } catch (const std::bad_alloc&) {
    out.error = "out of memory reading " + path;
    return out;
  }
  if (DetectContainer(data) == Container::kRaw) {
    out.container = Container::kRaw;
    out.bytes = std::move(data);  // no copy for raw files
    return out;
  }
  out = Decompress(data, options);
  if (!out.ok()) out.error = path + ": " + out.error;
  return out;
}

}  // namespace d9::decode
