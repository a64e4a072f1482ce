#include "writer/decoder.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <new>

namespace d9::decode {

using fmt::FieldType;
using fmt::Frame;

// ---------------------------------------------------------------------------------------------
// Containers

const char* ContainerName(Container c) {
  switch (c) {
    case Container::kRaw:
      return "raw";
    case Container::kGzip:
      return "gzip";
    case Container::kZstd:
      return "zstd";
    case Container::kUnknown:
      break;
  }
  return "unknown";
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

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

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

// ---------------------------------------------------------------------------------------------
// Frames

const char* ValueKindName(ValueKind k) {
  switch (k) {
    case ValueKind::kAbsent:
      return "absent";
    case ValueKind::kU64:
      return "u64";
    case ValueKind::kI64:
      return "i64";
    case ValueKind::kF64:
      return "f64";
    case ValueKind::kBool:
      return "bool";
    case ValueKind::kString:
      return "string";
    case ValueKind::kBytes:
      return "bytes";
    case ValueKind::kStack:
      return "stack";
    case ValueKind::kStringMap:
      return "string_map";
    case ValueKind::kList:
      return "list";
    case ValueKind::kMap:
      return "map";
    case ValueKind::kUnresolvedString:
      return "unresolved_string";
    case ValueKind::kUnresolvedStack:
      return "unresolved_stack";
  }
  return "?";
}

std::string_view DecodeStatusName(DecodeStatus s) {
  switch (s) {
    case DecodeStatus::kOk:
      return "ok";
    case DecodeStatus::kStopped:
      return "stopped";
    case DecodeStatus::kEmpty:
      return "empty";
    case DecodeStatus::kBadHeader:
      return "bad_header";
    case DecodeStatus::kUnsupportedVersion:
      return "unsupported_version";
    case DecodeStatus::kTruncated:
      return "truncated";
    case DecodeStatus::kUnknownFrameTag:
      return "unknown_frame_tag";
    case DecodeStatus::kUnknownFieldType:
      return "unknown_field_type";
    case DecodeStatus::kUnknownTypeId:
      return "unknown_type_id";
    case DecodeStatus::kSchemaConflict:
      return "schema_conflict";
    case DecodeStatus::kBadOptional:
      return "bad_optional";
    case DecodeStatus::kBadVarint:
      return "bad_varint";
    case DecodeStatus::kTooDeep:
      return "too_deep";
  }
  return "?";
}

void U64ArrayView::AppendTo(std::vector<uint64_t>* out) const {
  size_t start = out->size();
  out->resize(start + count_);
  if constexpr (std::endian::native == std::endian::little) {
    if (count_ != 0) std::memcpy(out->data() + start, data_, size_t{count_} * 8);
  } else {
    for (uint32_t i = 0; i < count_; ++i) (*out)[start + i] = (*this)[i];
  }
}

namespace {

inline uint16_t Ld16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
inline uint32_t Ld24(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16);
}
inline uint32_t Ld32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
inline uint64_t Ld64(const uint8_t* p) {
  return U64ArrayView::Load(p);
}

inline size_t Left(const uint8_t* p, const uint8_t* end) {
  return static_cast<size_t>(end - p);
}

std::string_view View(const uint8_t* p, size_t n) {
  return {reinterpret_cast<const char*>(p), n};
}

// Internal status of reading one value; mapped to DecodeStatus at the frame level.
enum class St : uint8_t { kOk, kTruncated, kBadOptional, kBadVarint, kBadType, kTooDeep };

inline St ReadVarint(const uint8_t*& p, const uint8_t* end, uint64_t* out) {
  if (p < end && *p < 0x80) [[likely]] {
    *out = *p++;
    return St::kOk;
  }
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p == end) return St::kTruncated;
    uint8_t b = *p++;
    v |= uint64_t{b & 0x7Fu} << shift;
    if (b < 0x80) {
      *out = v;
      return St::kOk;
    }
  }
  return St::kBadVarint;
}

inline bool IsValidType(uint8_t t) {
  return t >= static_cast<uint8_t>(FieldType::kI64) &&
         t <= static_cast<uint8_t>(FieldType::kDynamicMap);
}

// pool id -> dense entry index for the current sub-stream. Writers number ids from 0, so a
// vector usually suffices; ids far beyond the number of entries go to a hash map instead so a
// hostile id cannot force a huge vector.
class PoolIndex {
 public:
  void Clear() {
    dense_.clear();
    sparse_.clear();
    entries_ = 0;
  }
  void Set(uint32_t id, uint32_t entry) {
    ++entries_;
    if (id < dense_.size()) {
      dense_[id] = entry;
      return;
    }
    if (id < 2 * entries_ + 1024) {
      dense_.resize(size_t{id} + 1, kNoPoolEntry);
      dense_[id] = entry;
      return;
    }
    sparse_[id] = entry;
  }
  uint32_t Get(uint32_t id) const {
    if (id < dense_.size() && dense_[id] != kNoPoolEntry) return dense_[id];
    if (sparse_.empty()) return kNoPoolEntry;
    auto it = sparse_.find(id);
    return it == sparse_.end() ? kNoPoolEntry : it->second;
  }

 private:
  std::vector<uint32_t> dense_;
  std::unordered_map<uint32_t, uint32_t> sparse_;
  size_t entries_ = 0;
};

}  // namespace

namespace detail {

class Pools {
 public:
  struct Entry {
    const uint8_t* data;
    uint32_t count;  // bytes for strings, frames for stacks
  };

  void ResetStream() {
    string_index_.Clear();
    stack_index_.Clear();
  }
  void ResetAll() {
    ResetStream();
    strings_.clear();
    stacks_.clear();
  }
  // Entry indices are dense over one Decode call, which lets the typed layer memoise by them.
  void AddString(uint32_t id, const uint8_t* data, uint32_t len) {
    string_index_.Set(id, static_cast<uint32_t>(strings_.size()));
    strings_.push_back({data, len});
  }
  void AddStack(uint32_t id, const uint8_t* data, uint32_t frames) {
    stack_index_.Set(id, static_cast<uint32_t>(stacks_.size()));
    stacks_.push_back({data, frames});
  }
  uint32_t FindString(uint32_t id) const { return string_index_.Get(id); }
  uint32_t FindStack(uint32_t id) const { return stack_index_.Get(id); }
  const Entry& string(uint32_t entry) const { return strings_[entry]; }
  const Entry& stack(uint32_t entry) const { return stacks_[entry]; }
  // Entry indices are u32 and kNoPoolEntry is reserved.
  bool Full() const {
    return strings_.size() >= kNoPoolEntry - 1 || stacks_.size() >= kNoPoolEntry - 1;
  }

 private:
  PoolIndex string_index_;
  PoolIndex stack_index_;
  std::vector<Entry> strings_;
  std::vector<Entry> stacks_;
};

}  // namespace detail

namespace {

St ReadComposite(const detail::Pools& pools, FieldType t, const uint8_t*& p, const uint8_t* end,
                 Value* v, int depth);

// Reads one value of wire tag `tag` (optional bit allowed) at p, advancing p.
inline St ReadValue(const detail::Pools& pools, uint8_t tag, const uint8_t*& p, const uint8_t* end,
                    Value* v, int depth) {
  if (tag & fmt::kOptional) {
    if (p == end) return St::kTruncated;
    uint8_t present = *p++;
    tag &= static_cast<uint8_t>(~fmt::kOptional);
    if (!IsValidType(tag)) return St::kBadType;
    if (present > 1) return St::kBadOptional;
    if (present == 0) {
      *v = Value{};
      v->type = static_cast<FieldType>(tag);
      return St::kOk;
    }
  }
  const auto t = static_cast<FieldType>(tag);
  *v = Value{};
  v->type = t;
  const size_t left = Left(p, end);
  switch (t) {
    case FieldType::kVarint:
      v->kind = ValueKind::kU64;
      return ReadVarint(p, end, &v->bits);
    case FieldType::kU8:
      if (left < 1) return St::kTruncated;
      v->kind = ValueKind::kU64;
      v->bits = *p++;
      return St::kOk;
    case FieldType::kU16:
      if (left < 2) return St::kTruncated;
      v->kind = ValueKind::kU64;
      v->bits = Ld16(p);
      p += 2;
      return St::kOk;
    case FieldType::kU32:
      if (left < 4) return St::kTruncated;
      v->kind = ValueKind::kU64;
      v->bits = Ld32(p);
      p += 4;
      return St::kOk;
    case FieldType::kI64:
    case FieldType::kF64:
      if (left < 8) return St::kTruncated;
      v->kind = t == FieldType::kI64 ? ValueKind::kI64 : ValueKind::kF64;
      v->bits = Ld64(p);
      p += 8;
      return St::kOk;
    case FieldType::kBool:
      if (left < 1) return St::kTruncated;
      v->kind = ValueKind::kBool;
      v->bits = *p++ != 0;
      return St::kOk;
    case FieldType::kString:
    case FieldType::kBytes: {
      if (left < 4) return St::kTruncated;
      uint32_t len = Ld32(p);
      if (len > left - 4) return St::kTruncated;
      v->kind = t == FieldType::kString ? ValueKind::kString : ValueKind::kBytes;
      v->data = p + 4;
      v->size = len;
      p += 4 + size_t{len};
      return St::kOk;
    }
    case FieldType::kPooledString: {
      if (left < 4) return St::kTruncated;
      uint32_t id = Ld32(p);
      p += 4;
      v->pool_id = id;
      uint32_t entry = pools.FindString(id);
      if (entry == kNoPoolEntry) {
        v->kind = ValueKind::kUnresolvedString;
        return St::kOk;
      }
      const auto& e = pools.string(entry);
      v->kind = ValueKind::kString;
      v->pool_entry = entry;
      v->data = e.data;
      v->size = e.count;
      return St::kOk;
    }
    case FieldType::kPooledStack: {
      if (left < 4) return St::kTruncated;
      uint32_t id = Ld32(p);
      p += 4;
      v->pool_id = id;
      uint32_t entry = pools.FindStack(id);
      if (entry == kNoPoolEntry) {
        v->kind = ValueKind::kUnresolvedStack;
        return St::kOk;
      }
      const auto& e = pools.stack(entry);
      v->kind = ValueKind::kStack;
      v->pool_entry = entry;
      v->data = e.data;
      v->count = e.count;
      v->size = uint64_t{e.count} * 8;
      return St::kOk;
    }
    case FieldType::kStackFrames: {
      if (left < 4) return St::kTruncated;
      uint32_t n = Ld32(p);
      if (n > (left - 4) / 8) return St::kTruncated;
      v->kind = ValueKind::kStack;
      v->data = p + 4;
      v->count = n;
      v->size = uint64_t{n} * 8;
      p += 4 + size_t{n} * 8;
      return St::kOk;
    }
    case FieldType::kStringMap:
    case FieldType::kDynamicList:
    case FieldType::kDynamicMap:
      return ReadComposite(pools, t, p, end, v, depth);
  }
  return St::kBadType;
}

// StringMap, DynamicList and DynamicMap: walks (and so validates) every element once, so the
// views handed out later can iterate without failing.
St ReadComposite(const detail::Pools& pools, FieldType t, const uint8_t*& p, const uint8_t* end,
                 Value* v, int depth) {
  if (Left(p, end) < 4) return St::kTruncated;
  const uint32_t n = Ld32(p);
  const uint8_t* q = p + 4;
  // Smallest possible element: map entry 8 bytes, list element 2 (tag + u8), map pair 4.
  const size_t min_elem = t == FieldType::kStringMap ? 8 : t == FieldType::kDynamicList ? 2 : 4;
  if (n > Left(q, end) / min_elem) return St::kTruncated;
  if (t == FieldType::kStringMap) {
    for (uint32_t i = 0; i < n; ++i) {
      for (int part = 0; part < 2; ++part) {
        if (Left(q, end) < 4) return St::kTruncated;
        uint32_t len = Ld32(q);
        q += 4;
        if (len > Left(q, end)) return St::kTruncated;
        q += len;
      }
    }
    v->kind = ValueKind::kStringMap;
  } else {
    if (depth >= kMaxNesting) return St::kTooDeep;
    const int per_elem = t == FieldType::kDynamicList ? 1 : 2;
    Value tmp;
    for (uint32_t i = 0; i < n; ++i) {
      for (int part = 0; part < per_elem; ++part) {
        if (q == end) return St::kTruncated;
        uint8_t tag = *q++;
        St st = ReadValue(pools, tag, q, end, &tmp, depth + 1);
        if (st != St::kOk) return st;
      }
    }
    v->kind = t == FieldType::kDynamicList ? ValueKind::kList : ValueKind::kMap;
    v->pools = &pools;
  }
  v->count = n;
  v->data = p + 4;
  v->size = static_cast<uint64_t>(q - (p + 4));
  p = q;
  return St::kOk;
}

}  // namespace

namespace detail {

bool NextElement(const Pools* pools, const uint8_t** p, const uint8_t* end, Value* out) {
  if (pools == nullptr || *p >= end) return false;
  uint8_t tag = *(*p)++;
  return ReadValue(*pools, tag, *p, end, out, 0) == St::kOk;
}

class DecoderState {
 public:
  void ResetStream() {
    pools.ResetStream();
    for (uint16_t id : used_ids) by_id[id] = 0;
    used_ids.clear();
    ts_base = 0;
  }
  void ResetAll() {
    ResetStream();
    pools.ResetAll();
    schemas.clear();
    bodies.clear();
    serial_by_body.clear();
  }

  Pools pools;
  // type id -> serial + 1 in this sub-stream, 0 = none. Grown on demand: ids are usually small
  // and a fresh decoder should not pay for all 65536.
  std::vector<uint32_t> by_id;
  std::vector<uint16_t> used_ids;
  std::vector<std::unique_ptr<Schema>> schemas;  // by serial
  std::vector<std::string_view> bodies;          // raw schema frame body, by serial
  std::unordered_map<std::string_view, uint32_t> serial_by_body;
  std::vector<FieldDef> scratch_fields;
  std::vector<Value> values;
  uint64_t ts_base = 0;
};

}  // namespace detail

StringMapView::Entry StringMapView::Iterator::operator*() const {
  uint32_t kl = Ld32(p_);
  const uint8_t* k = p_ + 4;
  uint32_t vl = Ld32(k + kl);
  return {View(k, kl), View(k + kl + 4, vl)};
}

StringMapView::Iterator& StringMapView::Iterator::operator++() {
  uint32_t kl = Ld32(p_);
  uint32_t vl = Ld32(p_ + 4 + kl);
  p_ += 8 + size_t{kl} + vl;
  --left_;
  return *this;
}

std::optional<std::string_view> StringMapView::Find(std::string_view key) const {
  std::optional<std::string_view> found;
  for (auto [k, v] : *this) {
    if (k == key) found = v;
  }
  return found;
}

Decoder::Decoder() : state_(std::make_unique<detail::DecoderState>()) {}
Decoder::~Decoder() = default;

DecodeResult Decoder::Decode(std::span<const uint8_t> raw, Visitor& visitor) {
  detail::DecoderState& s = *state_;
  s.ResetAll();
  DecodeResult r;
  const uint8_t* const begin = raw.data();
  const uint8_t* const end = begin + raw.size();
  const uint8_t* p = begin;
  const uint8_t* frame = p;

  auto offset = [&](const uint8_t* at) { return static_cast<uint64_t>(at - begin); };
  auto fail = [&](DecodeStatus status, std::string msg) {
    r.status = status;
    r.error_offset = offset(frame);
    r.error = std::move(msg);
    return r;
  };
  auto at = [&] { return " at offset " + std::to_string(offset(frame)); };
  auto fail_value = [&](St st, const char* what) {
    switch (st) {
      case St::kTruncated:
        return fail(DecodeStatus::kTruncated, std::string("truncated ") + what + at());
      case St::kBadOptional:
        return fail(DecodeStatus::kBadOptional,
                    std::string("bad optional presence byte in ") + what + at());
      case St::kBadVarint:
        return fail(DecodeStatus::kBadVarint, std::string("varint too long in ") + what + at());
      case St::kBadType:
        return fail(DecodeStatus::kUnknownFieldType,
                    std::string("unknown value type in ") + what + at());
      case St::kTooDeep:
        return fail(DecodeStatus::kTooDeep, std::string("lists nested too deep in ") + what + at());
      case St::kOk:
        break;
    }
    return r;
  };

  if (raw.empty()) return fail(DecodeStatus::kEmpty, "empty input");
  if (raw.size() < sizeof(fmt::kMagic) ||
      std::memcmp(begin, fmt::kMagic, sizeof(fmt::kMagic)) != 0) {
    if (std::memcmp(begin, fmt::kMagic, std::min(raw.size(), sizeof(fmt::kMagic))) == 0) {
      return fail(DecodeStatus::kTruncated, "truncated stream header at offset 0");
    }
    return fail(DecodeStatus::kBadHeader, "missing TRC\\0 stream header at offset 0");
  }

  while (p < end) {
    frame = p;
    const uint8_t tag = *p;
    if (tag == static_cast<uint8_t>(Frame::kEvent)) [[likely]] {
      if (Left(p, end) < 3) return fail(DecodeStatus::kTruncated, "truncated event frame" + at());
      const uint16_t type_id = Ld16(p + 1);
      p += 3;
      const uint32_t slot = type_id < s.by_id.size() ? s.by_id[type_id] : 0;
      if (slot == 0) [[unlikely]] {
        return fail(DecodeStatus::kUnknownTypeId,
                    "event for unregistered type id " + std::to_string(type_id) + at());
      }
      const Schema& schema = *s.schemas[slot - 1];
      uint64_t ts = 0;
      if (schema.has_timestamp) {
        if (Left(p, end) < 3) return fail(DecodeStatus::kTruncated, "truncated event frame" + at());
        ts = s.ts_base + Ld24(p);
        p += 3;
      }
      const size_t n = schema.fields.size();
      Value* values = s.values.data();
      for (size_t i = 0; i < n; ++i) {
        const FieldDef& f = schema.fields[i];
        const uint8_t ftag = static_cast<uint8_t>(f.type) | (f.optional ? fmt::kOptional : 0);
        St st = ReadValue(s.pools, ftag, p, end, &values[i], 0);
        if (st != St::kOk) [[unlikely]]
          return fail_value(st, "event frame");
      }
      if (schema.has_timestamp) s.ts_base = ts;
      ++r.events;
      ++r.frames;
      r.bytes_consumed = offset(p);
      Event event;
      event.schema = &schema;
      event.timestamp = ts;
      event.offset = offset(frame);
      event.values = {values, n};
      if (!visitor.OnEvent(event)) {
        r.status = DecodeStatus::kStopped;
        return r;
      }
      continue;
    }

    switch (tag) {
      case fmt::kMagic[0]: {
        const size_t left = Left(p, end);
        const size_t cmp = std::min(left, sizeof(fmt::kMagic));
        if (std::memcmp(p, fmt::kMagic, cmp) != 0) {
          return fail(DecodeStatus::kUnknownFrameTag, "unknown frame tag " + Hex(tag) + at());
        }
        if (left < static_cast<size_t>(fmt::kHeaderSize)) {
          return fail(DecodeStatus::kTruncated, "truncated stream header" + at());
        }
        if (p[4] != fmt::kVersion) {
          return fail(DecodeStatus::kUnsupportedVersion,
                      "unsupported stream version " + std::to_string(p[4]) + at());
        }
        p += fmt::kHeaderSize;
        s.ResetStream();
        ++r.stream_headers;
        visitor.OnStreamHeader(offset(frame));
        break;
      }

      case static_cast<uint8_t>(Frame::kSchema): {
        const uint8_t* q = p + 1;
        auto trunc = [&] {
          return fail(DecodeStatus::kTruncated, "truncated schema frame" + at());
        };
        if (Left(q, end) < 4) return trunc();
        const uint16_t type_id = Ld16(q);
        const uint16_t name_len = Ld16(q + 2);
        q += 4;
        if (Left(q, end) < size_t{name_len} + 3) return trunc();
        const std::string_view name = View(q, name_len);
        q += name_len;
        const bool has_ts = *q++ != 0;
        const uint16_t field_count = Ld16(q);
        q += 2;
        if (field_count > Left(q, end) / 3) return trunc();
        s.scratch_fields.clear();
        for (uint16_t i = 0; i < field_count; ++i) {
          if (Left(q, end) < 2) return trunc();
          const uint16_t len = Ld16(q);
          q += 2;
          if (Left(q, end) < size_t{len} + 1) return trunc();
          FieldDef f;
          f.name = View(q, len);
          q += len;
          const uint8_t ft = *q++;
          const uint8_t base = ft & static_cast<uint8_t>(~fmt::kOptional);
          if (!IsValidType(base)) {
            return fail(DecodeStatus::kUnknownFieldType,
                        "unknown field type " + Hex(ft) + " for field '" + std::string(f.name) +
                            "' of schema '" + std::string(name) + "'" + at());
          }
          f.type = static_cast<FieldType>(base);
          f.optional = (ft & fmt::kOptional) != 0;
          s.scratch_fields.push_back(f);
        }
        const std::string_view body = View(p + 1, static_cast<size_t>(q - (p + 1)));
        if (type_id >= s.by_id.size()) s.by_id.resize(size_t{type_id} + 1, 0);
        const uint32_t existing = s.by_id[type_id];
        if (existing != 0) {
          // Re-sending the same schema is allowed; redefining the id is not.
          if (s.bodies[existing - 1] != body) {
            return fail(DecodeStatus::kSchemaConflict,
                        "schema conflict: type id " + std::to_string(type_id) + " redefined as '" +
                            std::string(name) + "'" + at());
          }
        } else {
          uint32_t serial;
          auto it = s.serial_by_body.find(body);
          if (it != s.serial_by_body.end()) {
            serial = it->second;
          } else {
            serial = static_cast<uint32_t>(s.schemas.size());
            auto schema = std::make_unique<Schema>();
            schema->serial = serial;
            schema->type_id = type_id;
            schema->name = name;
            schema->has_timestamp = has_ts;
            schema->fields = s.scratch_fields;
            s.schemas.push_back(std::move(schema));
            s.bodies.push_back(body);
            s.serial_by_body.emplace(body, serial);
            if (s.values.size() < field_count) s.values.resize(field_count);
            visitor.OnSchema(*s.schemas.back());
          }
          s.by_id[type_id] = serial + 1;
          s.used_ids.push_back(type_id);
        }
        p = q;
        break;
      }

      case static_cast<uint8_t>(Frame::kStringPool):
      case static_cast<uint8_t>(Frame::kStackPool): {
        const bool strings = tag == static_cast<uint8_t>(Frame::kStringPool);
        const uint8_t* q = p + 1;
        auto trunc = [&] {
          return fail(
              DecodeStatus::kTruncated,
              std::string(strings ? "truncated string pool frame" : "truncated stack pool frame") +
                  at());
        };
        if (Left(q, end) < 4) return trunc();
        const uint32_t count = Ld32(q);
        q += 4;
        if (count > Left(q, end) / 8) return trunc();
        for (uint32_t i = 0; i < count; ++i) {
          if (Left(q, end) < 8) return trunc();
          const uint32_t id = Ld32(q);
          const uint32_t n = Ld32(q + 4);
          q += 8;
          if (s.pools.Full()) return trunc();  // more entries than bytes could ever hold
          if (strings) {
            if (n > Left(q, end)) return trunc();
            s.pools.AddString(id, q, n);
            q += n;
          } else {
            if (n > Left(q, end) / 8) return trunc();
            s.pools.AddStack(id, q, n);
            q += size_t{n} * 8;
          }
        }
        p = q;
        break;
      }

      case static_cast<uint8_t>(Frame::kTimestampReset): {
        if (Left(p, end) < 9) {
          return fail(DecodeStatus::kTruncated, "truncated timestamp reset frame" + at());
        }
        s.ts_base = Ld64(p + 1);
        p += 9;
        ++r.timestamp_resets;
        visitor.OnTimestampReset(offset(frame), s.ts_base);
        break;
      }

      case static_cast<uint8_t>(Frame::kSchemaAnnotations): {
        const uint8_t* q = p + 1;
        uint64_t type_id = 0;
        St st = ReadVarint(q, end, &type_id);
        if (st != St::kOk) return fail_value(st, "schema annotation frame");
        auto trunc = [&] {
          return fail(DecodeStatus::kTruncated, "truncated schema annotation frame" + at());
        };
        if (Left(q, end) < 2) return trunc();
        const uint16_t count = Ld16(q);
        q += 2;
        const uint8_t* entries = q;
        // Validate the whole frame first so the visitor never sees half of a truncated one.
        for (uint16_t i = 0; i < count; ++i) {
          if (Left(q, end) < 4) return trunc();
          const uint16_t key_len = Ld16(q + 2);
          q += 4;
          if (Left(q, end) < size_t{key_len} + 4) return trunc();
          q += key_len;
          const uint32_t value_len = Ld32(q);
          q += 4;
          if (value_len > Left(q, end)) return trunc();
          q += value_len;
        }
        for (const uint8_t* e = entries; e < q;) {
          const uint16_t field = Ld16(e);
          const uint16_t key_len = Ld16(e + 2);
          const std::string_view key = View(e + 4, key_len);
          e += 4 + size_t{key_len};
          const uint32_t value_len = Ld32(e);
          visitor.OnSchemaAnnotation(type_id, field, key, View(e + 4, value_len));
          e += 4 + size_t{value_len};
        }
        p = q;
        break;
      }

      default:
        return fail(DecodeStatus::kUnknownFrameTag, "unknown frame tag " + Hex(tag) + at());
    }
    ++r.frames;
    r.bytes_consumed = offset(p);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Typed layer

namespace {
constexpr StackId kUnsetStack = 0xFFFFFFFE;  // stack_memo_ slot not filled yet
constexpr StackId kNoNext = 0xFFFFFFFF;
}  // namespace

uint64_t StackTable::Hash(const uint64_t* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  for (size_t i = 0; i < n; ++i) {
    h = (h ^ p[i]) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 29;
  }
  return h;
}

StackId StackTable::Commit(size_t start) {
  const size_t n = frames_.size() - start;
  const uint64_t h = Hash(frames_.data() + start, n);
  auto [it, inserted] = head_.try_emplace(h, kNoNext);
  for (StackId id = it->second; id != kNoNext; id = next_[id]) {
    std::span<const uint64_t> old = Get(id);
    if (old.size() == n &&
        (n == 0 || std::memcmp(old.data(), frames_.data() + start, n * 8) == 0)) {
      frames_.resize(start);
      return id;
    }
  }
  const auto id = static_cast<StackId>(size());
  offsets_.push_back(frames_.size());
  next_.push_back(it->second);
  it->second = id;
  return id;
}

StackId StackTable::Intern(U64ArrayView frames) {
  const size_t start = frames_.size();
  frames.AppendTo(&frames_);
  return Commit(start);
}

StackId StackTable::Intern(std::span<const uint64_t> frames) {
  const size_t start = frames_.size();
  frames_.insert(frames_.end(), frames.begin(), frames.end());
  return Commit(start);
}

std::string_view StringArena::Intern(std::string_view s) {
  static constexpr char kEmpty[] = "";
  if (s.empty()) return {kEmpty, 0};
  auto it = set_.find(s);
  if (it != set_.end()) return *it;
  if (chunk_size_ - chunk_used_ < s.size()) {
    chunk_size_ = std::max<size_t>(s.size(), 64 * 1024);
    chunks_.push_back(std::unique_ptr<char[]>(new char[chunk_size_]));  // no zero fill
    chunk_used_ = 0;
  }
  char* dst = chunks_.back().get() + chunk_used_;
  std::memcpy(dst, s.data(), s.size());
  chunk_used_ += s.size();
  std::string_view copy(dst, s.size());
  set_.insert(copy);
  return copy;
}

namespace {

// Field indices per kind, in the order the Binding stores them.
constexpr const char* kAllocFields[] = {"tid", "size", "addr", "callchain"};
constexpr const char* kFreeFields[] = {"tid", "addr", "size", "alloc_timestamp_ns"};
constexpr const char* kCpuFields[] = {"worker_id",   "tid",       "source",
                                      "thread_name", "callchain", "cpu"};
constexpr const char* kOverflowFields[] = {"dropped_allocs", "dropped_frees"};
constexpr const char* kClockSyncFields[] = {"realtime_ns"};
constexpr const char* kMetadataFields[] = {"entries"};
constexpr const char* kSymbolFields[] = {"addr",         "size",        "symbol_name",
                                         "inline_depth", "source_file", "source_line"};

inline const Value* FieldAt(const Event& e, int idx) {
  return idx < 0 ? nullptr : &e.values[static_cast<size_t>(idx)];
}
inline uint64_t U(const Event& e, int idx) {
  const Value* v = FieldAt(e, idx);
  return v ? v->AsU64() : 0;
}

}  // namespace

void TraceBuilder::OnStreamHeader(uint64_t /*offset*/) {
  ++out_->stream_headers;
}

void TraceBuilder::OnTimestampReset(uint64_t /*offset*/, uint64_t /*timestamp_ns*/) {
  ++out_->timestamp_resets;
}

void TraceBuilder::OnSchema(const Schema& schema) {
  if (bindings_.size() <= schema.serial) bindings_.resize(size_t{schema.serial} + 1);
  Binding& b = bindings_[schema.serial];

  auto it = name_slots_.find(schema.name);
  if (it == name_slots_.end()) {
    std::string_view name = out_->strings.Intern(schema.name);
    it = name_slots_.emplace(name, static_cast<uint32_t>(names_.size())).first;
    names_.push_back(name);
    counts_.push_back(0);
  }
  b.name_slot = it->second;

  auto bind = [&](Kind kind, const auto& fields) {
    b.kind = kind;
    size_t i = 0;
    for (const char* f : fields) b.f[i++] = schema.FieldIndex(f);
  };
  const std::string_view n = schema.name;
  if (n == fmt::kAllocEvent) {
    bind(Kind::kAlloc, kAllocFields);
  } else if (n == fmt::kFreeEvent) {
    bind(Kind::kFree, kFreeFields);
  } else if (n == fmt::kCpuSampleEvent) {
    bind(Kind::kCpu, kCpuFields);
  } else if (n == fmt::kMemoryProfileOverflowEvent) {
    bind(Kind::kOverflow, kOverflowFields);
  } else if (n == fmt::kClockSyncEvent) {
    bind(Kind::kClockSync, kClockSyncFields);
  } else if (n == fmt::kSegmentMetadataEvent) {
    bind(Kind::kMetadata, kMetadataFields);
  } else if (n == fmt::kSymbolTableEntry) {
    bind(Kind::kSymbol, kSymbolFields);
  }
}

StackId TraceBuilder::Stack(const Value& v) {
  if (v.kind == ValueKind::kUnresolvedStack) {
    ++out_->unresolved_refs;
    return kUnresolvedStack;
  }
  if (v.kind != ValueKind::kStack) return kUnresolvedStack;
  if (v.pool_entry == kNoPoolEntry) return out_->stacks.Intern(v.stack());
  // Pool entries are interned once per sub-stream but referenced by many events.
  if (stack_memo_.size() <= v.pool_entry) stack_memo_.resize(size_t{v.pool_entry} + 1, kUnsetStack);
  StackId& memo = stack_memo_[v.pool_entry];
  if (memo == kUnsetStack) memo = out_->stacks.Intern(v.stack());
  return memo;
}

std::string_view TraceBuilder::String(const Value& v) {
  if (v.kind == ValueKind::kUnresolvedString) {
    ++out_->unresolved_refs;
    return out_->strings.Intern("<unresolved pool#" + std::to_string(v.pool_id) + ">");
  }
  if (v.kind != ValueKind::kString) return out_->strings.Intern({});
  if (v.pool_entry == kNoPoolEntry) return out_->strings.Intern(v.str());
  if (str_memo_.size() <= v.pool_entry) str_memo_.resize(size_t{v.pool_entry} + 1);
  std::string_view& memo = str_memo_[v.pool_entry];
  if (memo.data() == nullptr) memo = out_->strings.Intern(v.str());
  return memo;
}

bool TraceBuilder::OnEvent(const Event& e) {
  const Binding& b = bindings_[e.schema->serial];
  ++counts_[b.name_slot];
  switch (b.kind) {
    case Kind::kOther:
      break;
    case Kind::kAlloc: {
      AllocEvent a;
      a.ts = e.timestamp;
      a.tid = static_cast<uint32_t>(U(e, b.f[0]));
      a.size = U(e, b.f[1]);
      a.addr = U(e, b.f[2]);
      if (const Value* v = FieldAt(e, b.f[3])) a.stack = Stack(*v);
      out_->allocs.push_back(a);
      break;
    }
    case Kind::kFree: {
      FreeEvent f;
      f.ts = e.timestamp;
      f.tid = static_cast<uint32_t>(U(e, b.f[0]));
      f.addr = U(e, b.f[1]);
      f.size = U(e, b.f[2]);
      f.alloc_ts = U(e, b.f[3]);
      out_->frees.push_back(f);
      break;
    }
    case Kind::kCpu: {
      CpuSample c;
      c.ts = e.timestamp;
      c.worker_id = U(e, b.f[0]);
      c.tid = static_cast<uint32_t>(U(e, b.f[1]));
      c.source = static_cast<uint8_t>(U(e, b.f[2]));
      if (const Value* v = FieldAt(e, b.f[3]); v && v->present()) c.thread_name = String(*v);
      if (const Value* v = FieldAt(e, b.f[4])) c.stack = Stack(*v);
      if (const Value* v = FieldAt(e, b.f[5]); v && v->kind == ValueKind::kU64) {
        c.cpu = static_cast<uint32_t>(v->bits);
      }
      out_->cpu_samples.push_back(c);
      break;
    }
    case Kind::kOverflow:
      out_->overflows.push_back({e.timestamp, U(e, b.f[0]), U(e, b.f[1])});
      break;
    case Kind::kClockSync:
      out_->clock_syncs.push_back({e.timestamp, U(e, b.f[0])});
      break;
    case Kind::kMetadata:
      if (const Value* v = FieldAt(e, b.f[0])) {
        for (auto [key, value] : v->string_map()) {
          auto it = out_->metadata.find(key);
          if (it == out_->metadata.end()) {
            out_->metadata.emplace(std::string(key), std::string(value));
          } else {
            it->second.assign(value);
          }
        }
      }
      break;
    case Kind::kSymbol: {
      SymbolTableEntry s;
      s.addr = U(e, b.f[0]);
      s.size = U(e, b.f[1]);
      if (const Value* v = FieldAt(e, b.f[2])) s.name = String(*v);
      s.inline_depth = U(e, b.f[3]);
      if (const Value* v = FieldAt(e, b.f[4])) s.file = String(*v);
      s.line = U(e, b.f[5]);
      out_->symbols.push_back(s);
      break;
    }
  }
  return true;
}

void TraceBuilder::Finish(const DecodeResult& result) {
  for (size_t i = 0; i < names_.size(); ++i) {
    auto it = out_->event_counts.find(names_[i]);
    if (it == out_->event_counts.end()) {
      out_->event_counts.emplace(std::string(names_[i]), counts_[i]);
    } else {
      it->second += counts_[i];
    }
  }
  out_->decode = result;
  if (!result.error.empty()) {
    if (!out_->error.empty()) out_->error += "; ";
    out_->error += result.error;
  }
}

namespace {

// Shared tail of the typed entry points: decode `raw` into `t`, keeping earlier errors.
void DecodeInto(std::span<const uint8_t> raw, Trace* t) {
  try {
    t->raw_bytes = raw.size();
    TraceBuilder builder(t);
    Decoder decoder;
    DecodeResult r = decoder.Decode(raw, builder);
    builder.Finish(r);
  } catch (const std::bad_alloc&) {
    if (!t->error.empty()) t->error += "; ";
    t->error += "out of memory while decoding";
  }
}

}  // namespace

Trace DecodeTrace(std::span<const uint8_t> raw) {
  Trace t;
  t.container = DetectContainer(raw);
  DecodeInto(raw, &t);
  return t;
}

Trace DecodeTraceBuffer(std::span<const uint8_t> data, const DecompressOptions& options) {
  if (DetectContainer(data) == Container::kRaw) return DecodeTrace(data);  // no copy
  RawTrace raw = Decompress(data, options);
  Trace t;
  t.container = raw.container;
  t.error = raw.error;
  // Decode whatever was recovered; a failed detection leaves nothing worth a second error.
  if (!raw.bytes.empty() || raw.ok()) DecodeInto(raw.bytes, &t);
  return t;
}

Trace LoadTrace(const std::string& path, const DecompressOptions& options) {
  RawTrace raw = ReadTraceFile(path, options);
  Trace t;
  t.container = raw.container;
  t.error = raw.error;
  if (!raw.bytes.empty() || raw.ok()) DecodeInto(raw.bytes, &t);
  return t;
}

}  // namespace d9::decode
