#include "writer/wire_decoder.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <unordered_map>

namespace d9::decode {

using fmt::FieldType;
using fmt::Frame;

namespace {

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

const char* ValueKindName(ValueKind k) {
  // Indexed by ValueKind.
  static constexpr const char* kNames[] = {
      "absent",          "u64",   "i64",        "f64",  "bool", "string",
      "bytes",           "stack", "string_map", "list", "map",  "unresolved_string",
      "unresolved_stack"};
  static_assert(std::size(kNames) == static_cast<size_t>(ValueKind::kUnresolvedStack) + 1);
  const auto i = static_cast<size_t>(k);
  return i < std::size(kNames) ? kNames[i] : "?";
}

std::string_view DecodeStatusName(DecodeStatus s) {
  // Indexed by DecodeStatus.
  static constexpr const char* kNames[] = {"ok",
                                           "stopped",
                                           "empty",
                                           "bad_header",
                                           "unsupported_version",
                                           "truncated",
                                           "unknown_frame_tag",
                                           "unknown_field_type",
                                           "unknown_type_id",
                                           "schema_conflict",
                                           "bad_optional",
                                           "bad_varint",
                                           "too_deep"};
  static_assert(std::size(kNames) == static_cast<size_t>(DecodeStatus::kTooDeep) + 1);
  const auto i = static_cast<size_t>(s);
  return i < std::size(kNames) ? kNames[i] : "?";
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

// A little-endian scalar of N bytes (U8, U16, U32, I64, F64, Bool), kept as its bits.
template <size_t N>
inline St ReadFixed(const uint8_t*& p, size_t left, ValueKind kind, Value* v) {
  if (left < N) return St::kTruncated;
  v->kind = kind;
  if constexpr (N == 1) {
    v->bits = *p;
  } else if constexpr (N == 2) {
    v->bits = Ld16(p);
  } else if constexpr (N == 4) {
    v->bits = Ld32(p);
  } else {
    static_assert(N == 8);
    v->bits = Ld64(p);
  }
  p += N;
  return St::kOk;
}

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
      return ReadFixed<1>(p, left, ValueKind::kU64, v);
    case FieldType::kU16:
      return ReadFixed<2>(p, left, ValueKind::kU64, v);
    case FieldType::kU32:
      return ReadFixed<4>(p, left, ValueKind::kU64, v);
    case FieldType::kI64:
      return ReadFixed<8>(p, left, ValueKind::kI64, v);
    case FieldType::kF64:
      return ReadFixed<8>(p, left, ValueKind::kF64, v);
    case FieldType::kBool: {
      const St st = ReadFixed<1>(p, left, ValueKind::kBool, v);
      v->bits = v->bits != 0;
      return st;
    }
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
    case FieldType::kPooledString:
    case FieldType::kPooledStack: {
      // A u32 id into this sub-stream's string or stack pool.
      if (left < 4) return St::kTruncated;
      const bool stack = t == FieldType::kPooledStack;
      v->pool_id = Ld32(p);
      p += 4;
      const uint32_t entry = stack ? pools.FindStack(v->pool_id) : pools.FindString(v->pool_id);
      if (entry == kNoPoolEntry) {
        v->kind = stack ? ValueKind::kUnresolvedStack : ValueKind::kUnresolvedString;
        return St::kOk;
      }
      const auto& e = stack ? pools.stack(entry) : pools.string(entry);
      v->kind = stack ? ValueKind::kStack : ValueKind::kString;
      v->pool_entry = entry;
      v->data = e.data;
      v->count = stack ? e.count : 0;
      v->size = stack ? uint64_t{e.count} * 8 : e.count;
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

bool StringMapView::Reader::Next(const uint8_t** p, Entry* out) const {
  const uint8_t* key = *p + 4;
  const uint32_t key_len = Ld32(*p);
  const uint8_t* value = key + key_len + 4;
  const uint32_t value_len = Ld32(key + key_len);
  *out = {View(key, key_len), View(value, value_len)};
  *p = value + value_len;
  return true;
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

}  // namespace d9::decode
