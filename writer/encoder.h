// dial9 encoder: turns d9's events into the bytes specified in dial9-format.md.
//
// One Encoder writes one sub-stream at a time into a byte buffer it owns. begin_stream()
// writes the `TRC\0 01` header and forgets every schema, pooled string, pooled stack and
// the timestamp base, exactly as a reader does when it meets a new header. Schemas and
// pool entries are written the first time an event needs them, before that event.
//
// Not thread-safe: the writer thread owns its encoder.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "writer/format.h"
#include "writer/stack_table.h"

namespace d9 {

struct FieldSpec {
  const char* name;
  uint8_t type;  // fmt::FieldType, possibly | fmt::kOptional
};

struct EventSpec {
  const char* name;
  bool has_timestamp;
  std::span<const FieldSpec> fields;
};

using StringMap = std::vector<std::pair<std::string, std::string>>;

// The stack of an event: its frames, interned by the encoder per sub-stream, or an entry of
// a table the caller keeps across sub-streams (the collector's, always the same one), which
// was interned once already and is pooled by id without hashing its frames again.
struct StackRef {
  StackRef(std::span<const uint64_t> f) : frames(f) {}
  StackRef(const std::vector<uint64_t>& f) : frames(f) {}
  template <size_t N>
  StackRef(const uint64_t (&f)[N]) : frames(f) {}
  StackRef(const StackTable& t, uint32_t i) : frames(t.frames(i)), table(&t), id(i) {}
  std::span<const uint64_t> frames;
  const StackTable* table = nullptr;
  uint32_t id = 0;
};

class Encoder {
 public:
  Encoder();

  // Starts a new sub-stream: header bytes, fresh schemas, pools and timestamp base.
  void begin_stream();

  void clock_sync(uint64_t mono_ns, uint64_t realtime_ns);
  void segment_metadata(uint64_t mono_ns, const StringMap& entries);
  void alloc_event(uint64_t ts, uint32_t tid, uint64_t size, uint64_t addr, StackRef stack);
  void free_event(uint64_t ts, uint32_t tid, uint64_t addr, uint64_t size, uint64_t alloc_ts);
  void overflow_event(uint64_t ts, uint64_t dropped_allocs, uint64_t dropped_frees);
  // An on-CPU sample (source 0) of a thread outside any Tokio runtime (worker_id 255).
  void cpu_sample(uint64_t ts, uint32_t tid, std::optional<std::string_view> thread_name,
                  std::span<const uint64_t> stack, std::optional<uint32_t> cpu);
  // d9's own event (no timestamp, so dial9's readers skip it): one sampled allocation still
  // live when the segment was sealed. A leak report can work from the last segment alone.
  void live_allocation(uint32_t tid, uint64_t size, uint64_t addr, uint64_t alloc_ts,
                       StackRef stack);
  // d9's own event (no timestamp): one module of the process, so a segment can be
  // symbolized offline (`d9 symbolize`) when it was sealed without symbols.
  void module_entry(std::string_view path, std::string_view build_id, uint64_t start, uint64_t end,
                    uint64_t bias, bool loaded);
  // d9's own event (no timestamp; the time is the mono_ns field): jemalloc's stats.allocated,
  // active, resident, mapped and retained, written by the writer about once a second.
  void allocator_stats(uint64_t mono_ns, uint64_t allocated, uint64_t active, uint64_t resident,
                       uint64_t mapped, uint64_t retained);
  void symbol_entry(uint64_t addr, uint64_t size, std::string_view name, uint64_t inline_depth,
                    std::string_view file, uint64_t line);

  // Encoded bytes since the last clear_bytes().
  std::span<const uint8_t> bytes() const { return {out_.data(), used_}; }
  size_t size() const { return used_; }
  void clear_bytes() { used_ = 0; }

  // Distinct stacks pooled in this sub-stream (for tests and sizing).
  size_t stack_count() const { return next_stack_id_; }
  // Every frame address of the stacks interned in this sub-stream: what to symbolize.
  const std::unordered_set<uint64_t>& frame_addresses() const { return frame_addresses_; }

  // Low-level pieces, public so tests can build unusual streams.
  void put_u8(uint8_t v) {
    reserve(1);
    out_[used_++] = v;
  }
  template <size_t N>
  void put_le(uint64_t v);  // the low N bytes of v
  void put_u16(uint16_t v);
  void put_u24(uint32_t v);
  void put_u32(uint32_t v);
  void put_u64(uint64_t v);
  void put_varint(uint64_t v);
  void put_bytes(std::string_view s);  // u32 length + bytes

 private:
  // Writes the schema frame on first use in this sub-stream and returns its type id.
  uint16_t schema_id(const EventSpec& spec);
  // Event frame header: tag, type id and (if timestamped) the u24 delta, with a reset
  // frame first when time goes backwards or jumps more than the u24 can hold.
  void event_header(const EventSpec& spec, uint64_t ts);
  // The same header written at p (room for kMaxHeader bytes); returns the end.
  uint8_t* header(uint8_t* p, uint16_t id, bool timestamped, uint64_t ts);
  // Appends at most `max` bytes: `write(p)` fills them from p and returns where it stopped.
  template <class Write>
  void append(size_t max, Write write);
  void append_bytes(const void* p, size_t n);
  // Room for `n` more bytes past used_.
  void reserve(size_t n) {
    if (out_.size() - used_ < n) grow(n);
  }
  void grow(size_t n);
  uint32_t intern_string(std::string_view s);
  // Pool ids of stacks: interned here, or kept by the caller's table (see StackRef).
  uint32_t intern_stack(std::span<const uint64_t> frames);
  uint32_t pooled_stack(StackRef stack);
  // Writes a stack pool entry under the next id and returns that id.
  uint32_t pool_stack(std::span<const uint64_t> frames);
  void alloc_frame(uint64_t ts, uint32_t tid, uint64_t size, uint64_t addr, uint32_t stack_id);
  void live_frame(uint32_t tid, uint64_t size, uint64_t addr, uint64_t alloc_ts, uint32_t stack_id);

  // [0, used_) is the stream; the rest is room to encode into without zero-filling it per
  // field (the vector is only ever resized to grow).
  std::vector<uint8_t> out_;
  size_t used_ = 0;
  std::vector<std::pair<const EventSpec*, uint16_t>> schema_ids_;
  std::unordered_map<std::string, uint32_t> strings_;
  StackTable stacks_;                   // stacks given as frames, this sub-stream
  std::vector<uint32_t> own_pool_ids_;  // by stacks_ id
  // By id in the caller's table: pool id + 1, or 0 while not pooled in this sub-stream.
  std::vector<uint32_t> kept_pool_ids_;
  uint32_t next_stack_id_ = 0;
  std::unordered_set<uint64_t> frame_addresses_;
  uint32_t next_string_id_ = 0;
  uint64_t ts_base_ = 0;
};

}  // namespace d9
