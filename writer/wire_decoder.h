// The wire decoder: Decoder walks raw dial9 bytes ("TRC\0" ...) frame by frame (schemas, string
// and stack pools, timestamp resets, events) and calls a Visitor once per event with its schema
// and field values. Values are views into the input; nothing is allocated per event once the
// decoder has warmed up. Bad input never throws or crashes: the result names the byte offset.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "writer/format.h"

namespace d9::decode {

namespace detail {
class Pools;         // string/stack pools, used to resolve pooled values inside lists
class DecoderState;  // everything else the decoder keeps between frames
}  // namespace detail

// Little-endian u64 array stored unaligned in the input (stack frames, leaf first).
class U64ArrayView {
 public:
  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = uint64_t;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = uint64_t;
    Iterator() = default;
    explicit Iterator(const uint8_t* p) : p_(p) {}
    uint64_t operator*() const { return Load(p_); }
    Iterator& operator++() {
      p_ += 8;
      return *this;
    }
    Iterator operator++(int) {
      Iterator old = *this;
      p_ += 8;
      return old;
    }
    bool operator==(const Iterator& o) const { return p_ == o.p_; }

   private:
    const uint8_t* p_ = nullptr;
  };

  U64ArrayView() = default;
  U64ArrayView(const uint8_t* data, uint32_t count) : data_(data), count_(count) {}
  uint32_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  uint64_t operator[](size_t i) const { return Load(data_ + i * 8); }
  Iterator begin() const { return Iterator(data_); }
  Iterator end() const { return Iterator(data_ + size_t{count_} * 8); }
  // Appends all entries to `out` (one memcpy on little-endian hosts).
  void AppendTo(std::vector<uint64_t>* out) const;
  std::vector<uint64_t> ToVector() const {
    std::vector<uint64_t> v;
    AppendTo(&v);
    return v;
  }
  const uint8_t* raw() const { return data_; }

  static uint64_t Load(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }

 private:
  const uint8_t* data_ = nullptr;
  uint32_t count_ = 0;
};

// StringMap field: count × (u32 klen, key, u32 vlen, value), validated by the decoder.
class StringMapView {
 public:
  using Entry = std::pair<std::string_view, std::string_view>;
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Entry;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = Entry;
    Iterator() = default;
    Iterator(const uint8_t* p, uint32_t left) : p_(p), left_(left) {}
    Entry operator*() const;
    Iterator& operator++();
    bool operator==(const Iterator& o) const { return left_ == o.left_; }

   private:
    const uint8_t* p_ = nullptr;
    uint32_t left_ = 0;
  };

  StringMapView() = default;
  StringMapView(const uint8_t* data, uint32_t count) : data_(data), count_(count) {}
  uint32_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  Iterator begin() const { return Iterator(data_, count_); }
  Iterator end() const { return Iterator(nullptr, 0); }
  // Last entry with this key wins, as for metadata merging.
  std::optional<std::string_view> Find(std::string_view key) const;

 private:
  const uint8_t* data_ = nullptr;
  uint32_t count_ = 0;
};

class ListView;
class MapView;

enum class ValueKind : uint8_t {
  kAbsent,  // optional field sent as absent
  kU64,     // U8, U16, U32, Varint
  kI64,
  kF64,
  kBool,
  kString,  // String or a resolved PooledString
  kBytes,
  kStack,  // StackFrames or a resolved PooledStackFrames
  kStringMap,
  kList,
  kMap,
  kUnresolvedString,  // PooledString whose id was never interned in this sub-stream
  kUnresolvedStack,   // PooledStackFrames whose id was never interned in this sub-stream
};
const char* ValueKindName(ValueKind k);

inline constexpr uint32_t kNoPoolEntry = 0xFFFFFFFF;

// One decoded field value. Strings, bytes and stacks point into the input buffer and stay valid
// as long as it does; lists and maps also need the decoder's pools and are only valid during
// the Visitor callback that received them.
struct Value {
  ValueKind kind = ValueKind::kAbsent;
  fmt::FieldType type = fmt::FieldType::kVarint;  // wire type, optional bit removed
  uint32_t count = 0;                             // elements of a stack, string map, list or map
  uint32_t pool_id = 0;                // id named by a pooled field (also set when unresolved)
  uint32_t pool_entry = kNoPoolEntry;  // dense index of the pool entry within one Decode call
  uint64_t bits = 0;                   // u64 / bool, i64 and f64 bit patterns
  const uint8_t* data = nullptr;       // payload of strings, bytes, stacks, maps, lists
  uint64_t size = 0;                   // payload bytes
  const detail::Pools* pools = nullptr;

  bool present() const { return kind != ValueKind::kAbsent; }
  bool unresolved() const {
    return kind == ValueKind::kUnresolvedString || kind == ValueKind::kUnresolvedStack;
  }
  uint64_t u64() const { return bits; }
  int64_t i64() const { return static_cast<int64_t>(bits); }
  double f64() const { return std::bit_cast<double>(bits); }
  bool boolean() const { return bits != 0; }
  std::string_view str() const {
    return {reinterpret_cast<const char*>(data), static_cast<size_t>(size)};
  }
  U64ArrayView stack() const {
    return kind == ValueKind::kStack ? U64ArrayView(data, count) : U64ArrayView();
  }
  StringMapView string_map() const {
    return kind == ValueKind::kStringMap ? StringMapView(data, count) : StringMapView();
  }
  ListView list() const;
  MapView map() const;
  // Integer-like kinds (u64, i64 bits, bool) as u64; anything else gives `fallback`.
  uint64_t AsU64(uint64_t fallback = 0) const {
    switch (kind) {
      case ValueKind::kU64:
      case ValueKind::kI64:
      case ValueKind::kBool:
        return bits;
      default:
        return fallback;
    }
  }
};

namespace detail {
// Decodes the next element of an already validated list (one value) or map (key then value).
bool NextElement(const Pools* pools, const uint8_t** p, const uint8_t* end, Value* out);
}  // namespace detail

// DynamicList field: count × (u8 tag, value).
class ListView {
 public:
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Value;
    using difference_type = std::ptrdiff_t;
    using pointer = const Value*;
    using reference = const Value&;
    Iterator() = default;
    Iterator(const detail::Pools* pools, const uint8_t* p, const uint8_t* end, uint32_t left)
        : pools_(pools), p_(p), end_(end), left_(left) {
      Advance();
    }
    const Value& operator*() const { return cur_; }
    const Value* operator->() const { return &cur_; }
    Iterator& operator++() {
      Advance();
      return *this;
    }
    bool operator==(const Iterator& o) const { return done_ == o.done_ && (done_ || p_ == o.p_); }

   private:
    void Advance() {
      if (left_ == 0 || !detail::NextElement(pools_, &p_, end_, &cur_)) {
        done_ = true;
        return;
      }
      done_ = false;
      --left_;
    }
    const detail::Pools* pools_ = nullptr;
    const uint8_t* p_ = nullptr;
    const uint8_t* end_ = nullptr;
    uint32_t left_ = 0;
    bool done_ = true;
    Value cur_;
  };

  ListView() = default;
  ListView(const detail::Pools* pools, const uint8_t* data, uint64_t size, uint32_t count)
      : pools_(pools), data_(data), size_(size), count_(count) {}
  uint32_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  Iterator begin() const { return Iterator(pools_, data_, data_ + size_, count_); }
  Iterator end() const { return Iterator(); }

 private:
  const detail::Pools* pools_ = nullptr;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  uint32_t count_ = 0;
};

// DynamicMap field: count × (u8 key tag, key, u8 value tag, value).
class MapView {
 public:
  using Entry = std::pair<Value, Value>;
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Entry;
    using difference_type = std::ptrdiff_t;
    using pointer = const Entry*;
    using reference = const Entry&;
    Iterator() = default;
    Iterator(const detail::Pools* pools, const uint8_t* p, const uint8_t* end, uint32_t left)
        : pools_(pools), p_(p), end_(end), left_(left) {
      Advance();
    }
    const Entry& operator*() const { return cur_; }
    const Entry* operator->() const { return &cur_; }
    Iterator& operator++() {
      Advance();
      return *this;
    }
    bool operator==(const Iterator& o) const { return done_ == o.done_ && (done_ || p_ == o.p_); }

   private:
    void Advance() {
      if (left_ == 0 || !detail::NextElement(pools_, &p_, end_, &cur_.first) ||
          !detail::NextElement(pools_, &p_, end_, &cur_.second)) {
        done_ = true;
        return;
      }
      done_ = false;
      --left_;
    }
    const detail::Pools* pools_ = nullptr;
    const uint8_t* p_ = nullptr;
    const uint8_t* end_ = nullptr;
    uint32_t left_ = 0;
    bool done_ = true;
    Entry cur_;
  };

  MapView() = default;
  MapView(const detail::Pools* pools, const uint8_t* data, uint64_t size, uint32_t count)
      : pools_(pools), data_(data), size_(size), count_(count) {}
  uint32_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  Iterator begin() const { return Iterator(pools_, data_, data_ + size_, count_); }
  Iterator end() const { return Iterator(); }

 private:
  const detail::Pools* pools_ = nullptr;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  uint32_t count_ = 0;
};

inline ListView Value::list() const {
  return kind == ValueKind::kList ? ListView(pools, data, size, count) : ListView();
}
inline MapView Value::map() const {
  return kind == ValueKind::kMap ? MapView(pools, data, size, count) : MapView();
}

struct FieldDef {
  std::string_view name;
  fmt::FieldType type = fmt::FieldType::kVarint;  // without the optional bit
  bool optional = false;
};

struct Schema {
  // Dense id, unique per distinct schema (type id + definition) within one Decode call and
  // stable across sub-streams that re-register it: index per-schema caches with it.
  uint32_t serial = 0;
  uint16_t type_id = 0;
  std::string_view name;  // points into the input buffer
  bool has_timestamp = false;
  std::vector<FieldDef> fields;

  // Index of the field called `field`, or -1. Linear: schemas have a handful of fields.
  int FieldIndex(std::string_view field) const {
    for (size_t i = 0; i < fields.size(); ++i) {
      if (fields[i].name == field) return static_cast<int>(i);
    }
    return -1;
  }
};

struct Event {
  const Schema* schema = nullptr;
  uint64_t timestamp = 0;         // absolute ns; 0 when the schema has no timestamp
  uint64_t offset = 0;            // byte offset of the event frame in the raw stream
  std::span<const Value> values;  // one per schema field, in schema order

  std::string_view name() const { return schema->name; }
  // nullptr if the schema has no such field.
  const Value* Find(std::string_view field) const {
    int i = schema->FieldIndex(field);
    return i < 0 ? nullptr : &values[static_cast<size_t>(i)];
  }
};

class Visitor {
 public:
  virtual ~Visitor() = default;
  // A "TRC\0" header: schemas, pools and the timestamp base were just reset.
  virtual void OnStreamHeader(uint64_t /*offset*/) {}
  // Once per distinct schema (serial), before the first event that uses it.
  virtual void OnSchema(const Schema& /*schema*/) {}
  virtual void OnTimestampReset(uint64_t /*offset*/, uint64_t /*timestamp_ns*/) {}
  // One entry of a 0x06 schema annotation frame (parsed, otherwise ignored by the decoder).
  virtual void OnSchemaAnnotation(uint64_t /*type_id*/, uint16_t /*field_index*/,
                                  std::string_view /*key*/, std::string_view /*value*/) {}
  // Return false to stop decoding after this event.
  virtual bool OnEvent(const Event& event) = 0;
};

enum class DecodeStatus : uint8_t {
  kOk,
  kStopped,  // the visitor asked to stop
  kEmpty,
  kBadHeader,  // input does not start with "TRC\0"
  kUnsupportedVersion,
  kTruncated,  // the input ends inside a frame (or a count/length runs past the end)
  kUnknownFrameTag,
  kUnknownFieldType,
  kUnknownTypeId,  // event for a type id with no schema in this sub-stream
  kSchemaConflict,
  kBadOptional,  // presence byte other than 0 or 1
  kBadVarint,    // longer than 10 bytes
  kTooDeep,      // lists/maps nested beyond kMaxNesting
};

// Lists and maps nested deeper than this are rejected, so hostile input cannot blow the stack.
inline constexpr int kMaxNesting = 16;

struct DecodeResult {
  DecodeStatus status = DecodeStatus::kOk;
  std::string error;            // empty unless status is an error; names the byte offset
  uint64_t error_offset = 0;    // start of the frame (or header) that failed
  uint64_t bytes_consumed = 0;  // end of the last complete frame
  uint64_t frames = 0;          // complete frames, headers included
  uint64_t events = 0;
  uint64_t stream_headers = 0;
  uint64_t timestamp_resets = 0;

  bool ok() const { return status == DecodeStatus::kOk || status == DecodeStatus::kStopped; }
  bool decoded_anything() const { return events > 0; }
};

// Reusable: keeps its buffers between calls. Not thread-safe; use one per thread. Schemas handed
// to the visitor live until the next Decode call; string views point into the input.
class Decoder {
 public:
  Decoder();
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Decodes raw dial9 bytes (starting with "TRC\0"). Never throws for bad input; exceptions
  // thrown by the visitor propagate.
  DecodeResult Decode(std::span<const uint8_t> raw, Visitor& visitor);

 private:
  std::unique_ptr<detail::DecoderState> state_;
};

// Calls fn(const Event&) for every event; fn may return bool (false stops) or void.
template <typename Fn>
DecodeResult ForEachEvent(std::span<const uint8_t> raw, Fn&& fn) {
  using F = std::remove_reference_t<Fn>;
  struct FnVisitor : Visitor {
    F* fn;
    explicit FnVisitor(F* f) : fn(f) {}
    bool OnEvent(const Event& e) override {
      if constexpr (std::is_same_v<decltype((*fn)(e)), void>) {
        (*fn)(e);
        return true;
      } else {
        return static_cast<bool>((*fn)(e));
      }
    }
  } visitor(&fn);
  Decoder decoder;
  return decoder.Decode(raw, visitor);
}

std::string_view DecodeStatusName(DecodeStatus s);

}  // namespace d9::decode
