#include "writer/trace.h"

#include <new>
#include <span>
#include <string>

#include "writer/format.h"

namespace d9::decode {

namespace {

constexpr StackId kUnsetStack = 0xFFFFFFFE;  // stack_memo_ slot not filled yet

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

  // The events the typed layer models, with the fields it reads in the order Binding keeps them.
  struct Known {
    std::string_view event;
    Kind kind;
    std::span<const char* const> fields;
  };
  static constexpr Known kKnown[] = {
      {fmt::kAllocEvent, Kind::kAlloc, kAllocFields},
      {fmt::kFreeEvent, Kind::kFree, kFreeFields},
      {fmt::kCpuSampleEvent, Kind::kCpu, kCpuFields},
      {fmt::kMemoryProfileOverflowEvent, Kind::kOverflow, kOverflowFields},
      {fmt::kClockSyncEvent, Kind::kClockSync, kClockSyncFields},
      {fmt::kSegmentMetadataEvent, Kind::kMetadata, kMetadataFields},
      {fmt::kSymbolTableEntry, Kind::kSymbol, kSymbolFields},
  };
  for (const Known& k : kKnown) {
    if (schema.name != k.event) continue;
    b.kind = k.kind;
    for (size_t i = 0; i < k.fields.size(); ++i) b.f[i] = schema.FieldIndex(k.fields[i]);
    break;
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
