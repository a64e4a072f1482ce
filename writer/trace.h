// The typed layer: Trace holds the events d9 writes (allocations, frees, CPU samples, symbols,
// metadata) decoded from one file, TraceBuilder is the Visitor that fills it, and
// DecodeTrace / DecodeTraceBuffer / LoadTrace are the entry points from bytes or a path.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "writer/container.h"
#include "writer/trace_tables.h"
#include "writer/wire_decoder.h"

namespace d9::decode {

struct AllocEvent {
  uint64_t ts = 0;
  uint32_t tid = 0;
  uint64_t size = 0;
  uint64_t addr = 0;
  StackId stack = kUnresolvedStack;
  bool operator==(const AllocEvent&) const = default;
};

struct FreeEvent {
  uint64_t ts = 0;
  uint32_t tid = 0;
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t alloc_ts = 0;
  bool operator==(const FreeEvent&) const = default;
};

struct CpuSample {
  uint64_t ts = 0;
  uint64_t worker_id = 0;
  uint32_t tid = 0;
  uint8_t source = 0;
  std::optional<std::string_view> thread_name;  // points into the owning Trace
  StackId stack = kUnresolvedStack;
  std::optional<uint32_t> cpu;
  bool operator==(const CpuSample&) const = default;
};

struct Overflow {
  uint64_t ts = 0;
  uint64_t dropped_allocs = 0;
  uint64_t dropped_frees = 0;
  bool operator==(const Overflow&) const = default;
};

struct ClockSync {
  uint64_t ts = 0;
  uint64_t realtime_ns = 0;
  bool operator==(const ClockSync&) const = default;
};

struct SymbolTableEntry {
  uint64_t addr = 0;
  uint64_t size = 0;
  std::string_view name;  // points into the owning Trace
  uint64_t inline_depth = 0;
  std::string_view file;  // "" when unknown
  uint64_t line = 0;
  bool operator==(const SymbolTableEntry&) const = default;
};

// Everything d9 cares about in one file. Move-only: string views point into `strings`.
struct Trace {
  std::vector<AllocEvent> allocs;
  std::vector<FreeEvent> frees;
  std::vector<CpuSample> cpu_samples;
  std::vector<Overflow> overflows;
  std::vector<ClockSync> clock_syncs;
  std::vector<SymbolTableEntry> symbols;
  std::map<std::string, std::string, std::less<>> metadata;   // merged; later events win
  std::map<std::string, uint64_t, std::less<>> event_counts;  // every schema name seen
  uint64_t stream_headers = 0;
  uint64_t timestamp_resets = 0;
  uint64_t unresolved_refs = 0;  // pooled ids that did not resolve (fields we model)
  uint64_t raw_bytes = 0;        // size of the raw (decompressed) stream
  Container container = Container::kUnknown;
  DecodeResult decode;  // frame decoder outcome and counters
  std::string error;    // decompression and decode errors; empty when the file was clean
  StackTable stacks;
  StringArena strings;

  Trace() = default;
  Trace(Trace&&) noexcept = default;
  Trace& operator=(Trace&&) noexcept = default;

  bool ok() const { return error.empty(); }
  bool decoded_anything() const { return decode.decoded_anything(); }
  uint64_t EventCount(std::string_view name) const {
    auto it = event_counts.find(name);
    return it == event_counts.end() ? 0 : it->second;
  }
  std::span<const uint64_t> stack(StackId id) const { return stacks.Get(id); }
};

// Visitor that fills a Trace; use it to combine the typed layer with other visitors. One builder
// per Decode call: it memoises pool entries, whose indices restart with every call.
class TraceBuilder : public Visitor {
 public:
  explicit TraceBuilder(Trace* out) : out_(out) {}
  void OnStreamHeader(uint64_t offset) override;
  void OnSchema(const Schema& schema) override;
  void OnTimestampReset(uint64_t offset, uint64_t timestamp_ns) override;
  bool OnEvent(const Event& event) override;
  // Folds per-schema counts into out->event_counts and records the decode outcome.
  void Finish(const DecodeResult& result);

 private:
  enum class Kind : uint8_t {
    kOther,
    kAlloc,
    kFree,
    kCpu,
    kOverflow,
    kClockSync,
    kMetadata,
    kSymbol
  };
  struct Binding {
    Kind kind = Kind::kOther;
    int f[6] = {-1, -1, -1, -1, -1, -1};  // field indices, meaning depends on kind
    uint32_t name_slot = 0;
  };
  StackId Stack(const Value& v);
  std::string_view String(const Value& v);

  Trace* out_;
  std::vector<Binding> bindings_;        // by schema serial
  std::vector<uint64_t> counts_;         // by name slot
  std::vector<std::string_view> names_;  // by name slot; views into out_->strings
  std::unordered_map<std::string_view, uint32_t> name_slots_;
  std::vector<StackId> stack_memo_;         // by pool entry
  std::vector<std::string_view> str_memo_;  // by pool entry; data()==nullptr means unset
};

// Raw dial9 bytes -> Trace.
Trace DecodeTrace(std::span<const uint8_t> raw);
// Any container (raw, gzip, zstd) -> Trace.
Trace DecodeTraceBuffer(std::span<const uint8_t> data, const DecompressOptions& options = {});
// A file of any container -> Trace.
Trace LoadTrace(const std::string& path, const DecompressOptions& options = {});

}  // namespace d9::decode
