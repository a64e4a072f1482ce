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

// Forward iterator over `count` elements stored back to back from p, for every view below.
// Reader::Next decodes the element at p into an Element and moves p past it; the iterator calls
// it once per element, on reaching it. The decoder validated the bytes, so Next cannot run past
// them; should it fail anyway, the iteration ends there.
template <typename Reader>
class ElementIterator {
 public:
  using Element = typename Reader::Element;
  using iterator_category = std::forward_iterator_tag;
  using value_type = Element;
  using difference_type = std::ptrdiff_t;
  using pointer = const Element*;
  using reference = const Element&;

  ElementIterator() = default;  // the end
  ElementIterator(Reader reader, const uint8_t* p, uint32_t count)
      : reader_(reader), p_(p), left_(count) {
    Read();
  }
  const Element& operator*() const { return cur_; }
  const Element* operator->() const { return &cur_; }
  ElementIterator& operator++() {
    --left_;
    Read();
    return *this;
  }
  ElementIterator operator++(int) {
    ElementIterator old = *this;
    ++*this;
    return old;
  }
  // Iterators over one view are equal when as many elements are left; the end has none.
  bool operator==(const ElementIterator& o) const { return left_ == o.left_; }

 private:
  void Read() {
    if (left_ != 0 && !reader_.Next(&p_, &cur_)) left_ = 0;
  }

  Reader reader_{};
  const uint8_t* p_ = nullptr;
  uint32_t left_ = 0;  // elements from the current one to the end
  Element cur_{};
};

// Little-endian u64 array stored unaligned in the input (stack frames, leaf first).
class U64ArrayView {
 public:
  struct Reader {
    using Element = uint64_t;
    bool Next(const uint8_t** p, uint64_t* out) const {
      *out = Load(*p);
      *p += 8;
      return true;
    }
  };
  using Iterator = ElementIterator<Reader>;

  U64ArrayView() = default;
  U64ArrayView(const uint8_t* data, uint32_t count) : data_(data), count_(count) {}
  uint32_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  uint64_t operator[](size_t i) const { return Load(data_ + i * 8); }
  Iterator begin() const { return Iterator(Reader(), data_, count_); }
  Iterator end() const { return Iterator(); }
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
  struct Reader {
    using Element = Entry;
    bool Next(const uint8_t** p, Entry* out) const;
  };
  using Iterator = ElementIterator<Reader>;

  StringMapView() = default;
  StringMapView(const uint8_t* data, uint32_t count) : data_(data), count_(count) {}
  uint32_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  Iterator begin() const { return Iterator(Reader(), data_, count_); }
  Iterator end() const { return Iterator(); }
  // Last entry with this key wins, as for metadata merging.
  std::optional<std::string_view> Find(std::string_view key) const;

 private:
  const uint8_t* data_ = nullptr;
  uint32_t count_ = 0;
};

struct Value;
template <typename E>
class ElementsView;
// DynamicList field: count × (u8 tag, value).
using ListView = ElementsView<Value>;
// DynamicMap field: count × (u8 key tag, key, u8 value tag, value).
using MapView = ElementsView<std::pair<Value, Value>>;

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
inline bool NextElement(const Pools* pools, const uint8_t** p, const uint8_t* end,
                        std::pair<Value, Value>* out) {
  return NextElement(pools, p, end, &out->first) && NextElement(pools, p, end, &out->second);
}
}  // namespace detail

// The elements of a list (E = Value) or map (E = key/value pair) field, decoded in
// place one at a time.
template <typename E>
class ElementsView {
 public:
  using Entry = E;
  struct Reader {
    using Element = Entry;
    const detail::Pools* pools = nullptr;
    const uint8_t* end = nullptr;
    bool Next(const uint8_t** p, Entry* out) const {
      return detail::NextElement(pools, p, end, out);
    }
  };
  using Iterator = ElementIterator<Reader>;

  ElementsView() = default;
  ElementsView(const detail::Pools* pools, const uint8_t* data, uint64_t size, uint32_t count)
      : pools_(pools), data_(data), size_(size), count_(count) {}
  uint32_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  Iterator begin() const { return Iterator(Reader{pools_, data_ + size_}, data_, count_); }
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
