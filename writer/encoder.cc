#include "writer/encoder.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace d9 {
namespace {

using fmt::FieldType;
using fmt::Frame;

constexpr uint8_t T(FieldType t) {
  return static_cast<uint8_t>(t);
}

// Field names, types and order are the contract in dial9-format.md §2; do not reorder.
constexpr FieldSpec kClockSyncFields[] = {{"realtime_ns", T(FieldType::kVarint)}};
constexpr FieldSpec kMetadataFields[] = {{"entries", T(FieldType::kStringMap)}};
constexpr FieldSpec kAllocFields[] = {{"tid", T(FieldType::kU32)},
                                      {"size", T(FieldType::kVarint)},
                                      {"addr", T(FieldType::kVarint)},
                                      {"callchain", T(FieldType::kPooledStack)}};
constexpr FieldSpec kFreeFields[] = {{"tid", T(FieldType::kU32)},
                                     {"addr", T(FieldType::kVarint)},
                                     {"size", T(FieldType::kVarint)},
                                     {"alloc_timestamp_ns", T(FieldType::kVarint)}};
constexpr FieldSpec kOverflowFields[] = {{"dropped_allocs", T(FieldType::kVarint)},
                                         {"dropped_frees", T(FieldType::kVarint)}};
constexpr FieldSpec kCpuFields[] = {
    {"worker_id", T(FieldType::kVarint)},
    {"tid", T(FieldType::kU32)},
    {"source", T(FieldType::kU8)},
    {"thread_name", static_cast<uint8_t>(T(FieldType::kPooledString) | fmt::kOptional)},
    {"callchain", T(FieldType::kPooledStack)},
    {"cpu", static_cast<uint8_t>(T(FieldType::kVarint) | fmt::kOptional)}};
constexpr FieldSpec kLiveFields[] = {{"tid", T(FieldType::kU32)},
                                     {"size", T(FieldType::kVarint)},
                                     {"addr", T(FieldType::kVarint)},
                                     {"alloc_timestamp_ns", T(FieldType::kVarint)},
                                     {"callchain", T(FieldType::kPooledStack)}};
constexpr FieldSpec kModuleFields[] = {
    {"path", T(FieldType::kString)},  {"build_id", T(FieldType::kString)},
    {"start", T(FieldType::kVarint)}, {"end", T(FieldType::kVarint)},
    {"bias", T(FieldType::kVarint)},  {"loaded", T(FieldType::kBool)}};
constexpr FieldSpec kAllocatorStatsFields[] = {
    {"mono_ns", T(FieldType::kVarint)}, {"allocated", T(FieldType::kVarint)},
    {"active", T(FieldType::kVarint)},  {"resident", T(FieldType::kVarint)},
    {"mapped", T(FieldType::kVarint)},  {"retained", T(FieldType::kVarint)}};
constexpr FieldSpec kSymbolFields[] = {{"addr", T(FieldType::kVarint)},
                                       {"size", T(FieldType::kVarint)},
                                       {"symbol_name", T(FieldType::kPooledString)},
                                       {"inline_depth", T(FieldType::kVarint)},
                                       {"source_file", T(FieldType::kPooledString)},
                                       {"source_line", T(FieldType::kVarint)}};
const EventSpec kClockSync{fmt::kClockSyncEvent, true, kClockSyncFields};
const EventSpec kMetadata{fmt::kSegmentMetadataEvent, true, kMetadataFields};
const EventSpec kAlloc{fmt::kAllocEvent, true, kAllocFields};
const EventSpec kFree{fmt::kFreeEvent, true, kFreeFields};
const EventSpec kOverflow{fmt::kMemoryProfileOverflowEvent, true, kOverflowFields};
const EventSpec kCpu{fmt::kCpuSampleEvent, true, kCpuFields};
const EventSpec kLive{fmt::kLiveAllocation, false, kLiveFields};
const EventSpec kModule{fmt::kModuleEntry, false, kModuleFields};
const EventSpec kAllocatorStatsSpec{fmt::kAllocatorStats, false, kAllocatorStatsFields};
const EventSpec kSymbol{fmt::kSymbolTableEntry, true, kSymbolFields};

}  // namespace

Encoder::Encoder() {
  out_.resize(4096);  // grows by doubling to what the writer flushes at once
}

void Encoder::grow(size_t n) {
  out_.resize(std::max(2 * out_.size(), used_ + n));
}

void Encoder::append_bytes(const void* p, size_t n) {
  reserve(n);
  if (n != 0) memcpy(out_.data() + used_, p, n);
  used_ += n;
}

void Encoder::begin_stream() {
  append_bytes(fmt::kMagic, sizeof(fmt::kMagic));
  put_u8(fmt::kVersion);
  schema_ids_.clear();
  strings_.clear();
  stacks_.clear();
  own_pool_ids_.clear();
  std::fill(kept_pool_ids_.begin(), kept_pool_ids_.end(), 0);
  next_stack_id_ = 0;
  frame_addresses_.clear();
  next_string_id_ = 0;
  ts_base_ = 0;
}

// The format is little-endian, as is every host d9 runs on: fields are copied, not
// assembled byte by byte.
static_assert(std::endian::native == std::endian::little);

namespace {

template <size_t N>
uint8_t* le(uint8_t* p, uint64_t v) {
  memcpy(p, &v, N);
  return p + N;
}

constexpr size_t kMaxVarint = 10;  // LEB128: 7 bits a byte

uint8_t* varint(uint8_t* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}

// Largest event header: a timestamp reset frame (tag + u64), then tag, type id, u24 delta.
constexpr size_t kMaxHeader = 1 + 8 + 1 + 2 + 3;

}  // namespace

template <class Write>
void Encoder::append(size_t max, Write write) {
  reserve(max);
  uint8_t* end = write(out_.data() + used_);
  used_ = static_cast<size_t>(end - out_.data());
}

template <size_t N>
void Encoder::put_le(uint64_t v) {
  append(N, [v](uint8_t* p) { return le<N>(p, v); });
}

void Encoder::put_u16(uint16_t v) {
  put_le<2>(v);
}

void Encoder::put_u24(uint32_t v) {
  put_le<3>(v);
}

void Encoder::put_u32(uint32_t v) {
  put_le<4>(v);
}

void Encoder::put_u64(uint64_t v) {
  put_le<8>(v);
}

void Encoder::put_varint(uint64_t v) {
  append(kMaxVarint, [v](uint8_t* p) { return varint(p, v); });
}

void Encoder::put_bytes(std::string_view s) {
  put_u32(static_cast<uint32_t>(s.size()));
  append_bytes(s.data(), s.size());
}

uint16_t Encoder::schema_id(const EventSpec& spec) {
  for (const auto& [known, id] : schema_ids_) {  // a handful of specs: a scan beats a hash
    if (known == &spec) return id;
  }
  auto id = static_cast<uint16_t>(schema_ids_.size());
  schema_ids_.emplace_back(&spec, id);
  put_u8(static_cast<uint8_t>(Frame::kSchema));
  put_u16(id);
  size_t name_len = strlen(spec.name);
  put_u16(static_cast<uint16_t>(name_len));
  append_bytes(spec.name, name_len);
  put_u8(spec.has_timestamp ? 1 : 0);
  put_u16(static_cast<uint16_t>(spec.fields.size()));
  for (const FieldSpec& f : spec.fields) {
    size_t len = strlen(f.name);
    put_u16(static_cast<uint16_t>(len));
    append_bytes(f.name, len);
    put_u8(f.type);
  }
  return id;
}

uint8_t* Encoder::header(uint8_t* p, uint16_t id, bool timestamped, uint64_t ts) {
  if (timestamped && (ts < ts_base_ || ts - ts_base_ > fmt::kMaxTimestampDelta)) {
    *p++ = static_cast<uint8_t>(Frame::kTimestampReset);
    p = le<8>(p, ts);
    ts_base_ = ts;
  }
  *p++ = static_cast<uint8_t>(Frame::kEvent);
  p = le<2>(p, id);
  if (timestamped) {
    p = le<3>(p, ts - ts_base_);
    ts_base_ = ts;
  }
  return p;
}

void Encoder::event_header(const EventSpec& spec, uint64_t ts) {
  uint16_t id = schema_id(spec);
  append(kMaxHeader, [&](uint8_t* p) { return header(p, id, spec.has_timestamp, ts); });
}

uint32_t Encoder::intern_string(std::string_view s) {
  auto it = strings_.find(std::string(s));
  if (it != strings_.end()) return it->second;
  uint32_t id = next_string_id_++;
  strings_.emplace(std::string(s), id);
  put_u8(static_cast<uint8_t>(Frame::kStringPool));
  put_u32(1);
  put_u32(id);
  put_bytes(s);
  return id;
}

uint32_t Encoder::intern_stack(std::span<const uint64_t> frames) {
  auto [id, inserted] = stacks_.intern(frames);
  if (inserted) own_pool_ids_.push_back(pool_stack(frames));
  return own_pool_ids_[id];
}

uint32_t Encoder::pooled_stack(StackRef stack) {
  if (!stack.table) return intern_stack(stack.frames);
  if (stack.id >= kept_pool_ids_.size()) kept_pool_ids_.resize(stack.table->size(), 0);
  uint32_t& slot = kept_pool_ids_[stack.id];
  if (slot == 0) slot = pool_stack(stack.frames) + 1;
  return slot - 1;
}

uint32_t Encoder::pool_stack(std::span<const uint64_t> frames) {
  const uint32_t id = next_stack_id_++;
  frame_addresses_.insert(frames.begin(), frames.end());
  put_u8(static_cast<uint8_t>(Frame::kStackPool));
  put_u32(1);
  put_u32(id);
  put_u32(static_cast<uint32_t>(frames.size()));
  for (uint64_t pc : frames) put_u64(pc);
  return id;
}

void Encoder::clock_sync(uint64_t mono_ns, uint64_t realtime_ns) {
  event_header(kClockSync, mono_ns);
  put_varint(realtime_ns);
}

void Encoder::segment_metadata(uint64_t mono_ns, const StringMap& entries) {
  event_header(kMetadata, mono_ns);
  put_u32(static_cast<uint32_t>(entries.size()));
  for (const auto& [key, value] : entries) {
    put_bytes(key);
    put_bytes(value);
  }
}

void Encoder::alloc_event(uint64_t ts, uint32_t tid, uint64_t size, uint64_t addr, StackRef stack) {
  // Pool entries must precede the event frame that references them.
  uint32_t stack_id = pooled_stack(stack);
  uint16_t id = schema_id(kAlloc);
  append(kMaxHeader + 4 + 2 * kMaxVarint + 4, [&](uint8_t* p) {
    p = header(p, id, kAlloc.has_timestamp, ts);
    p = le<4>(p, tid);
    p = varint(p, size);
    p = varint(p, addr);
    return le<4>(p, stack_id);
  });
}

void Encoder::free_event(uint64_t ts, uint32_t tid, uint64_t addr, uint64_t size,
                         uint64_t alloc_ts) {
  uint16_t id = schema_id(kFree);
  append(kMaxHeader + 4 + 3 * kMaxVarint, [&](uint8_t* p) {
    p = header(p, id, kFree.has_timestamp, ts);
    p = le<4>(p, tid);
    p = varint(p, addr);
    p = varint(p, size);
    return varint(p, alloc_ts);
  });
}

void Encoder::overflow_event(uint64_t ts, uint64_t dropped_allocs, uint64_t dropped_frees) {
  event_header(kOverflow, ts);
  put_varint(dropped_allocs);
  put_varint(dropped_frees);
}

void Encoder::cpu_sample(uint64_t ts, uint32_t tid, std::optional<std::string_view> thread_name,
                         std::span<const uint64_t> stack, std::optional<uint32_t> cpu) {
  constexpr uint64_t kUnknownWorker = 255;  // dial9: not a Tokio worker
  constexpr uint8_t kOnCpu = 0;
  uint32_t name_id = thread_name ? intern_string(*thread_name) : 0;
  uint32_t stack_id = intern_stack(stack);
  uint16_t id = schema_id(kCpu);
  append(kMaxHeader + 2 * kMaxVarint + 4 + 1 + 1 + 4 + 4 + 1, [&](uint8_t* p) {
    p = header(p, id, kCpu.has_timestamp, ts);
    p = varint(p, kUnknownWorker);
    p = le<4>(p, tid);
    *p++ = kOnCpu;
    *p++ = thread_name ? 1 : 0;
    if (thread_name) p = le<4>(p, name_id);
    p = le<4>(p, stack_id);
    *p++ = cpu ? 1 : 0;
    return cpu ? varint(p, *cpu) : p;
  });
}

void Encoder::live_allocation(uint32_t tid, uint64_t size, uint64_t addr, uint64_t alloc_ts,
                              StackRef stack) {
  uint32_t stack_id = pooled_stack(stack);
  event_header(kLive, 0);
  put_u32(tid);
  put_varint(size);
  put_varint(addr);
  put_varint(alloc_ts);
  put_u32(stack_id);
}

void Encoder::allocator_stats(uint64_t mono_ns, uint64_t allocated, uint64_t active,
                              uint64_t resident, uint64_t mapped, uint64_t retained) {
  event_header(kAllocatorStatsSpec, 0);
  for (uint64_t v : {mono_ns, allocated, active, resident, mapped, retained}) put_varint(v);
}

void Encoder::module_entry(std::string_view path, std::string_view build_id, uint64_t start,
                           uint64_t end, uint64_t bias, bool loaded) {
  event_header(kModule, 0);
  put_bytes(path);
  put_bytes(build_id);
  put_varint(start);
  put_varint(end);
  put_varint(bias);
  put_u8(loaded ? 1 : 0);
}

void Encoder::symbol_entry(uint64_t addr, uint64_t size, std::string_view name,
                           uint64_t inline_depth, std::string_view file, uint64_t line) {
  uint32_t name_id = intern_string(name);
  uint32_t file_id = intern_string(file);
  event_header(kSymbol, 0);  // upstream writes 0; readers exempt symbols from time bounds
  put_varint(addr);
  put_varint(size);
  put_u32(name_id);
  put_varint(inline_depth);
  put_u32(file_id);
  put_varint(line);
}

}  // namespace d9
