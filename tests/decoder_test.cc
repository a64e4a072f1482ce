// Tests for d9_decode against the fixtures of dial9-format.md §9 and hand-written bytes.
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/decode_walk.h"
#include "writer/container.h"
#include "writer/trace.h"
#include "writer/trace_tables.h"
#include "writer/wire_decoder.h"

namespace d9::decode {
namespace {

using fmt::FieldType;

std::string Fixture(const char* name) {
  return std::string(D9_FIXTURES_DIR) + "/" + name;
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<uint8_t> ZstdCompress(std::span<const uint8_t> in, bool with_content_size = true) {
  if (with_content_size) {
    std::vector<uint8_t> out(ZSTD_compressBound(in.size()));
    size_t n = ZSTD_compress(out.data(), out.size(), in.data(), in.size(), 3);
    EXPECT_FALSE(ZSTD_isError(n));
    out.resize(n);
    return out;
  }
  // Streaming without a pledged size: the frame header carries no content size.
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  std::vector<uint8_t> out(ZSTD_compressBound(in.size()) + 64);
  ZSTD_inBuffer ib{in.data(), in.size(), 0};
  ZSTD_outBuffer ob{out.data(), out.size(), 0};
  size_t rc = ZSTD_compressStream2(cctx, &ob, &ib, ZSTD_e_end);
  EXPECT_EQ(rc, 0u);
  ZSTD_freeCCtx(cctx);
  out.resize(ob.pos);
  return out;
}

std::vector<uint8_t> GzipCompress(std::span<const uint8_t> in) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY),
            Z_OK);
  std::vector<uint8_t> out(deflateBound(&zs, in.size()) + 64);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::vector<uint8_t> Concat(std::initializer_list<std::span<const uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (auto p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Everything observable about a Trace, stacks compared by content.
void ExpectSameTrace(const Trace& a, const Trace& b) {
  EXPECT_EQ(a.allocs, b.allocs);
  EXPECT_EQ(a.frees, b.frees);
  EXPECT_EQ(a.cpu_samples, b.cpu_samples);
  EXPECT_EQ(a.overflows, b.overflows);
  EXPECT_EQ(a.clock_syncs, b.clock_syncs);
  EXPECT_EQ(a.symbols, b.symbols);
  EXPECT_EQ(a.metadata, b.metadata);
  EXPECT_EQ(a.event_counts, b.event_counts);
  EXPECT_EQ(a.stream_headers, b.stream_headers);
  EXPECT_EQ(a.timestamp_resets, b.timestamp_resets);
  EXPECT_EQ(a.unresolved_refs, b.unresolved_refs);
  EXPECT_EQ(a.raw_bytes, b.raw_bytes);
  ASSERT_EQ(a.stacks.size(), b.stacks.size());
  for (StackId i = 0; i < a.stacks.size(); ++i) {
    auto x = a.stack(i);
    auto y = b.stack(i);
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end())) << "stack " << i;
  }
}

template <typename T>
bool IsPrefix(const std::vector<T>& prefix, const std::vector<T>& full) {
  return prefix.size() <= full.size() && std::equal(prefix.begin(), prefix.end(), full.begin());
}

using test::WalkAll;

// Hand-written dial9 bytes.
class Bytes {
 public:
  Bytes& u8(uint8_t v) {
    b_.push_back(v);
    return *this;
  }
  Bytes& u16(uint16_t v) { return le(v, 2); }
  Bytes& u24(uint32_t v) { return le(v, 3); }
  Bytes& u32(uint32_t v) { return le(v, 4); }
  Bytes& u64(uint64_t v) { return le(v, 8); }
  Bytes& varint(uint64_t v) {
    do {
      uint8_t byte = v & 0x7F;
      v >>= 7;
      b_.push_back(byte | (v ? 0x80 : 0));
    } while (v);
    return *this;
  }
  Bytes& raw(std::string_view s) {
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& str32(std::string_view s) { return u32(static_cast<uint32_t>(s.size())).raw(s); }
  Bytes& header() { return raw(std::string_view("TRC\0", 4)).u8(1); }
  Bytes& schema(uint16_t id, std::string_view name, bool has_ts,
                std::vector<std::pair<std::string_view, uint8_t>> fields) {
    u8(0x01).u16(id).u16(static_cast<uint16_t>(name.size())).raw(name).u8(has_ts);
    u16(static_cast<uint16_t>(fields.size()));
    for (auto [n, t] : fields) u16(static_cast<uint16_t>(n.size())).raw(n).u8(t);
    return *this;
  }
  Bytes& string_pool(uint32_t id, std::string_view s) { return u8(0x03).u32(1).u32(id).str32(s); }
  Bytes& stack_pool(uint32_t id, std::vector<uint64_t> frames) {
    u8(0x04).u32(1).u32(id).u32(static_cast<uint32_t>(frames.size()));
    for (uint64_t f : frames) u64(f);
    return *this;
  }
  Bytes& ts_reset(uint64_t ts) { return u8(0x05).u64(ts); }
  Bytes& event(uint16_t id) { return u8(0x02).u16(id); }
  Bytes& event(uint16_t id, uint32_t delta) { return event(id).u24(delta); }

  size_t size() const { return b_.size(); }
  const std::vector<uint8_t>& vec() const { return b_; }
  operator std::span<const uint8_t>() const { return b_; }

 private:
  Bytes& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  std::vector<uint8_t> b_;
};

constexpr uint8_t T(FieldType t) {
  return static_cast<uint8_t>(t);
}
constexpr uint8_t Opt(FieldType t) {
  return static_cast<uint8_t>(t) | fmt::kOptional;
}

// Collects events by copying what the tests look at.
struct Collected {
  std::string name;
  uint64_t ts;
  std::vector<Value> values;
};
std::vector<Collected> Collect(std::span<const uint8_t> raw, DecodeResult* result = nullptr) {
  std::vector<Collected> out;
  DecodeResult r = ForEachEvent(raw, [&](const Event& e) {
    out.push_back({std::string(e.name()), e.timestamp, {e.values.begin(), e.values.end()}});
  });
  if (result) *result = r;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Containers

TEST(Container, DetectsByMagicBytes) {
  const uint8_t zstd[] = {0x28, 0xB5, 0x2F, 0xFD, 0};
  const uint8_t gzip[] = {0x1F, 0x8B, 8};
  const uint8_t raw[] = {'T', 'R', 'C', 0, 1};
  const uint8_t junk[] = {'T', 'R', 'X'};
  EXPECT_EQ(DetectContainer(zstd), Container::kZstd);
  EXPECT_EQ(DetectContainer(gzip), Container::kGzip);
  EXPECT_EQ(DetectContainer(raw), Container::kRaw);
  EXPECT_EQ(DetectContainer(junk), Container::kUnknown);
  EXPECT_EQ(DetectContainer({}), Container::kUnknown);
  // The demo fixture is gzip despite its .bin name.
  EXPECT_EQ(DetectContainer(ReadBytes(Fixture("dial9-demo-trace.bin"))), Container::kGzip);
}

TEST(Container, UnknownAndMissingInputs) {
  const uint8_t junk[] = {0xDE, 0xAD, 0xBE, 0xEF, 0};
  RawTrace r = Decompress(junk);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find("de ad be ef"), std::string::npos) << r.error;
  Trace t = DecodeTraceBuffer(junk);
  EXPECT_FALSE(t.ok());
  EXPECT_FALSE(t.decoded_anything());

  RawTrace missing = ReadTraceFile("/nonexistent/d9/trace.bin");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.error.find("cannot open"), std::string::npos);
  Trace lt = LoadTrace("/nonexistent/d9/trace.bin");
  EXPECT_FALSE(lt.ok());
}

TEST(Container, DecompressionIsCapped) {
  std::vector<uint8_t> zeros(8 << 20, 0);
  DecompressOptions small;
  small.max_output_bytes = 1 << 20;
  for (const auto& packed :
       {ZstdCompress(zeros), ZstdCompress(zeros, false), GzipCompress(zeros)}) {
    RawTrace r = Decompress(packed, small);
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.error.find("limit"), std::string::npos) << r.error;
    EXPECT_EQ(r.bytes.size(), small.max_output_bytes);
    RawTrace full = Decompress(packed);
    EXPECT_TRUE(full.ok()) << full.error;
    EXPECT_EQ(full.bytes, zeros);
  }
}

TEST(Container, TruncatedAndCorruptCompressedInput) {
  auto raw = ReadBytes(Fixture("d9-contract-smoke.0.bin"));
  for (const auto& packed : {ZstdCompress(raw), GzipCompress(raw)}) {
    RawTrace r = Decompress(std::span(packed).first(packed.size() - 7));
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.error.find("truncated"), std::string::npos) << r.error;
    EXPECT_TRUE(IsPrefix(r.bytes, raw));
  }
  auto gz = GzipCompress(raw);
  gz.push_back(0x00);  // trailing garbage after the only member
  RawTrace g = Decompress(gz);
  EXPECT_FALSE(g.ok());
  EXPECT_EQ(g.bytes, raw);
}

// ---------------------------------------------------------------------------------------------
// dial9 demo trace (§9)

class DemoTrace : public testing::Test {
 protected:
  static void SetUpTestSuite() { trace_ = new Trace(LoadTrace(Fixture("dial9-demo-trace.bin"))); }
  static void TearDownTestSuite() { delete trace_; }
  static Trace* trace_;
};
Trace* DemoTrace::trace_ = nullptr;

TEST_F(DemoTrace, HeadersResetsAndCounts) {
  const Trace& t = *trace_;
  ASSERT_TRUE(t.ok()) << t.error;
  EXPECT_EQ(t.container, Container::kGzip);
  EXPECT_EQ(t.raw_bytes, 4047237u);
  EXPECT_EQ(t.stream_headers, 14u);
  EXPECT_EQ(t.timestamp_resets, 7678u);
  EXPECT_EQ(t.decode.stream_headers, 14u);
  EXPECT_EQ(t.decode.timestamp_resets, 7678u);
  EXPECT_EQ(t.unresolved_refs, 0u);

  const std::map<std::string, uint64_t> expected = {
      {"ClockSyncEvent", 2},     {"SegmentMetadataEvent", 1}, {"CpuSampleEvent", 6949},
      {"PollStartEvent", 36801}, {"PollEndEvent", 36801},     {"WakeEventEvent", 35552},
      {"WorkerParkEvent", 6304}, {"WorkerUnparkEvent", 6304}, {"QueueSampleEvent", 464},
      {"TaskDumpEvent", 12952},  {"TaskSpawnEvent", 262},     {"TaskTerminateEvent", 359},
      {"SymbolTableEntry", 992}, {"SpanCloseEvent", 9890},
  };
  for (const auto& [name, count] : expected) EXPECT_EQ(t.EventCount(name), count) << name;
  // Span events are named per call site: 10 SpanEnter:/SpanExit: schemas.
  uint64_t span_schemas = 0;
  uint64_t total = 0;
  for (const auto& [name, count] : t.event_counts) {
    if (name.starts_with("SpanEnter:") || name.starts_with("SpanExit:")) ++span_schemas;
    total += count;
  }
  EXPECT_EQ(span_schemas, 10u);
  EXPECT_EQ(total, t.decode.events);
  EXPECT_EQ(t.EventCount("AllocEvent"), 0u);
  EXPECT_TRUE(t.allocs.empty());
  EXPECT_TRUE(t.frees.empty());
  EXPECT_TRUE(t.overflows.empty());
}

TEST_F(DemoTrace, MetadataClockSyncAndSamples) {
  const Trace& t = *trace_;
  EXPECT_EQ(t.metadata.at("service"), "metrics-service");
  EXPECT_EQ(t.metadata.at("worker_threads"), "2");
  EXPECT_EQ(t.metadata.at("flush_interval"), "1");
  EXPECT_EQ(t.metadata.at("table_name"), "metrics-service");
  EXPECT_EQ(t.metadata.at("server_addr"), "0.0.0.0:3001");
  EXPECT_EQ(t.metadata.size(), 5u);

  ASSERT_EQ(t.clock_syncs.size(), 2u);
  for (const auto& c : t.clock_syncs) EXPECT_GT(c.realtime_ns, c.ts);

  // §9 summarises the samples as source 1 without thread names. The file really holds 6877
  // such scheduler samples plus 72 on-CPU (source 0) samples that do carry a thread name.
  ASSERT_EQ(t.cpu_samples.size(), 6949u);
  std::set<uint64_t> workers;
  std::map<uint8_t, int> by_source;
  for (const auto& s : t.cpu_samples) {
    ++by_source[s.source];
    EXPECT_EQ(s.thread_name.has_value(), s.source == 0);
    EXPECT_TRUE(s.cpu.has_value());
    EXPECT_FALSE(t.stack(s.stack).empty());
    workers.insert(s.worker_id);
  }
  EXPECT_EQ(by_source, (std::map<uint8_t, int>{{0, 72}, {1, 6877}}));
  EXPECT_EQ(workers, (std::set<uint64_t>{0, 1}));

  ASSERT_EQ(t.symbols.size(), 992u);
  for (const auto& s : t.symbols) EXPECT_FALSE(s.name.empty());
}

TEST_F(DemoTrace, GenericApiAgreesWithTypedLayer) {
  RawTrace raw = ReadTraceFile(Fixture("dial9-demo-trace.bin"));
  ASSERT_TRUE(raw.ok()) << raw.error;
  std::map<std::string, uint64_t> counts;
  uint64_t samples = 0;
  DecodeResult r = ForEachEvent(raw.bytes, [&](const Event& e) {
    ++counts[std::string(e.name())];
    if (e.name() == fmt::kCpuSampleEvent) {
      ++samples;
      const Value* name = e.Find("thread_name");
      const Value* cpu = e.Find("cpu");
      const Value* chain = e.Find("callchain");
      ASSERT_TRUE(name && cpu && chain);
      EXPECT_EQ(name->kind, e.Find("source")->u64() == 1 ? ValueKind::kAbsent : ValueKind::kString);
      EXPECT_EQ(name->type, FieldType::kPooledString);
      EXPECT_EQ(cpu->kind, ValueKind::kU64);
      EXPECT_EQ(chain->kind, ValueKind::kStack);
      EXPECT_EQ(e.Find("no_such_field"), nullptr);
      EXPECT_EQ(e.schema->FieldIndex("tid"), 1);
    }
  });
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.bytes_consumed, raw.bytes.size());
  EXPECT_EQ(samples, 6949u);
  EXPECT_EQ(counts, (std::map<std::string, uint64_t>(trace_->event_counts.begin(),
                                                     trace_->event_counts.end())));
}

// ---------------------------------------------------------------------------------------------
// d9 contract smoke fixture (§9)

void CheckSmoke(const Trace& t) {
  ASSERT_TRUE(t.ok()) << t.error;
  EXPECT_EQ(t.stream_headers, 4u);
  EXPECT_EQ(t.timestamp_resets, 3u);
  EXPECT_EQ(t.unresolved_refs, 0u);
  EXPECT_EQ(t.metadata,
            (std::map<std::string, std::string, std::less<>>{{"service", "d9-smoke"},
                                                             {"memory.sample_rate_bytes", "524288"},
                                                             {"cpu.profile.frequency_hz", "99"}}));
  EXPECT_EQ(t.EventCount("CpuSampleEvent"), 200u);
  EXPECT_EQ(t.EventCount("AllocEvent"), 200u);
  EXPECT_EQ(t.EventCount("FreeEvent"), 150u);
  EXPECT_EQ(t.EventCount("MemoryProfileOverflowEvent"), 1u);
  EXPECT_EQ(t.EventCount("ClockSyncEvent"), 2u);
  EXPECT_EQ(t.EventCount("SegmentMetadataEvent"), 1u);
  EXPECT_EQ(t.EventCount("SymbolTableEntry"), 5u);

  ASSERT_EQ(t.clock_syncs.size(), 2u);
  EXPECT_EQ(t.clock_syncs[0], (ClockSync{5000000000000, 1778000000000000000}));
  EXPECT_EQ(t.clock_syncs[1], (ClockSync{5000000000010, 1778000000000000010}));

  ASSERT_EQ(t.cpu_samples.size(), 200u);
  std::map<StackId, int> per_stack;
  for (size_t i = 0; i < t.cpu_samples.size(); ++i) {
    const CpuSample& s = t.cpu_samples[i];
    EXPECT_EQ(s.tid, 4242u);
    EXPECT_EQ(s.worker_id, 255u);
    EXPECT_EQ(s.source, 0);
    EXPECT_EQ(s.cpu, std::optional<uint32_t>(3));
    if (i % 2 == 0) {
      EXPECT_EQ(s.thread_name, std::optional<std::string_view>("main")) << i;
    } else {
      EXPECT_FALSE(s.thread_name.has_value()) << i;
    }
    EXPECT_EQ(t.stack(s.stack).size(), 3u);
    ++per_stack[s.stack];
  }
  ASSERT_EQ(per_stack.size(), 2u);
  std::map<uint64_t, int> by_leaf;
  for (auto [id, n] : per_stack) {
    auto frames = t.stack(id);
    EXPECT_EQ(frames[1], 0x402000u);
    EXPECT_EQ(frames[2], 0x403000u);
    by_leaf[frames[0]] = n;
  }
  EXPECT_EQ(by_leaf, (std::map<uint64_t, int>{{0x401000, 133}, {0x401100, 67}}));

  ASSERT_EQ(t.allocs.size(), 200u);
  std::map<uint64_t, AllocEvent> by_addr;
  for (size_t i = 0; i < t.allocs.size(); ++i) {
    const AllocEvent& a = t.allocs[i];
    const uint64_t k = i + 1;
    EXPECT_EQ(a.size, 64 * k);
    // The fixture numbers addresses from k-1: the first allocation sits at 0x7f0000000000.
    EXPECT_EQ(a.addr, 0x7f0000000000u + (k - 1) * 0x1000);
    EXPECT_EQ(a.tid, 4242u);
    EXPECT_EQ(t.stack(a.stack).size(), 3u);
    by_addr[a.addr] = a;
  }
  ASSERT_EQ(t.frees.size(), 150u);
  for (size_t i = 0; i < t.frees.size(); ++i) {
    const FreeEvent& f = t.frees[i];
    EXPECT_EQ(f.addr, t.allocs[i].addr);  // the first 150 allocations, in order
    ASSERT_TRUE(by_addr.count(f.addr));
    EXPECT_EQ(f.alloc_ts, by_addr[f.addr].ts);
    EXPECT_EQ(f.size, by_addr[f.addr].size);
    EXPECT_GT(f.ts, f.alloc_ts);
  }

  ASSERT_EQ(t.overflows.size(), 1u);
  EXPECT_EQ(t.overflows[0].dropped_allocs, 2u);
  EXPECT_EQ(t.overflows[0].dropped_frees, 7u);

  std::map<uint64_t, std::vector<const SymbolTableEntry*>> syms;
  for (const auto& s : t.symbols) syms[s.addr].push_back(&s);
  ASSERT_EQ(syms.size(), 4u);
  int inlined = 0;
  for (const auto& [addr, entries] : syms) {
    if (entries.size() == 2) {
      ++inlined;
      EXPECT_EQ(addr, 0x402000u);
      EXPECT_EQ(entries[0]->inline_depth, 0u);
      EXPECT_EQ(entries[0]->name, "middle_fn");
      EXPECT_EQ(entries[1]->inline_depth, 1u);
      EXPECT_EQ(entries[1]->name, "inlined_helper");
      EXPECT_EQ(entries[1]->file, "/src/helper.h");
      EXPECT_EQ(entries[1]->line, 7u);
    } else {
      EXPECT_EQ(entries.size(), 1u);
      EXPECT_EQ(entries[0]->inline_depth, 0u);
    }
  }
  EXPECT_EQ(inlined, 1);
  EXPECT_EQ(syms[0x401000][0]->name, "leaf_fn");
  EXPECT_EQ(syms[0x401000][0]->file, "/src/app.cc");
  EXPECT_EQ(syms[0x401000][0]->line, 10u);
}

TEST(Smoke, RawFixture) {
  Trace t = LoadTrace(Fixture("d9-contract-smoke.0.bin"));
  EXPECT_EQ(t.container, Container::kRaw);
  CheckSmoke(t);
}

TEST(Smoke, RawGzipAndZstdDecodeIdentically) {
  Trace raw = LoadTrace(Fixture("d9-contract-smoke.0.bin"));
  Trace gz = LoadTrace(Fixture("d9-contract-smoke.0.bin.gz"));
  EXPECT_EQ(gz.container, Container::kGzip);
  CheckSmoke(gz);
  ExpectSameTrace(raw, gz);

  auto bytes = ReadBytes(Fixture("d9-contract-smoke.0.bin"));
  Trace zst = DecodeTraceBuffer(ZstdCompress(bytes));
  EXPECT_EQ(zst.container, Container::kZstd);
  CheckSmoke(zst);
  ExpectSameTrace(raw, zst);

  // Several zstd frames (one without a content size), split at arbitrary byte positions.
  std::span<const uint8_t> s(bytes);
  size_t a = bytes.size() / 3, b = 2 * bytes.size() / 3 + 17;
  auto multi = Concat({ZstdCompress(s.first(a)), ZstdCompress(s.subspan(a, b - a), false),
                       ZstdCompress(s.subspan(b))});
  Trace zst3 = DecodeTraceBuffer(multi);
  ExpectSameTrace(raw, zst3);

  // Several gzip members, likewise.
  auto members = Concat({GzipCompress(s.first(a)), GzipCompress(s.subspan(a))});
  Trace gz2 = DecodeTraceBuffer(members);
  EXPECT_TRUE(gz2.ok()) << gz2.error;
  ExpectSameTrace(raw, gz2);

  // DecodeTrace on raw bytes agrees with the file loader.
  ExpectSameTrace(raw, DecodeTrace(bytes));
}

TEST(Smoke, ConcatenatedFilesRepeatEverything) {
  auto bytes = ReadBytes(Fixture("d9-contract-smoke.0.bin"));
  auto gz = ReadBytes(Fixture("d9-contract-smoke.0.bin.gz"));
  Trace t = DecodeTraceBuffer(Concat({gz, gz}));
  ASSERT_TRUE(t.ok()) << t.error;
  EXPECT_EQ(t.stream_headers, 8u);
  EXPECT_EQ(t.cpu_samples.size(), 400u);
  EXPECT_EQ(t.raw_bytes, 2 * bytes.size());
  EXPECT_EQ(t.stacks.size(), 2u);  // identical stacks from both copies are shared
  EXPECT_EQ(t.EventCount("SymbolTableEntry"), 10u);
}

TEST(Smoke, TruncationAtEveryOffsetKeepsAPrefix) {
  auto bytes = ReadBytes(Fixture("d9-contract-smoke.0.bin"));
  Trace full = DecodeTrace(bytes);
  ASSERT_TRUE(full.ok());
  size_t clean_cuts = 0;
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    Trace t = DecodeTrace(std::span(bytes).first(cut));
    ASSERT_TRUE(IsPrefix(t.allocs, full.allocs)) << cut;
    ASSERT_TRUE(IsPrefix(t.frees, full.frees)) << cut;
    ASSERT_TRUE(IsPrefix(t.cpu_samples, full.cpu_samples)) << cut;
    ASSERT_TRUE(IsPrefix(t.clock_syncs, full.clock_syncs)) << cut;
    ASSERT_TRUE(IsPrefix(t.overflows, full.overflows)) << cut;
    ASSERT_TRUE(IsPrefix(t.symbols, full.symbols)) << cut;
    ASSERT_LE(t.decode.events, full.decode.events);
    if (cut == 0) {
      EXPECT_EQ(t.decode.status, DecodeStatus::kEmpty);
    } else if (t.ok()) {
      EXPECT_EQ(t.decode.bytes_consumed, cut);  // cut fell on a frame boundary
      ++clean_cuts;
    } else {
      ASSERT_EQ(t.decode.status, DecodeStatus::kTruncated) << cut << ": " << t.error;
      EXPECT_EQ(t.decode.error_offset, t.decode.bytes_consumed);
      EXPECT_NE(t.error.find("at offset " + std::to_string(t.decode.error_offset)),
                std::string::npos)
          << t.error;
    }
  }
  EXPECT_EQ(clean_cuts, full.decode.frames);
}

TEST(Smoke, TruncatedGzipKeepsAPrefix) {
  auto gz = ReadBytes(Fixture("d9-contract-smoke.0.bin.gz"));
  Trace full = DecodeTraceBuffer(gz);
  for (size_t cut = 0; cut < gz.size(); ++cut) {
    Trace t = DecodeTraceBuffer(std::span(gz).first(cut));
    EXPECT_FALSE(t.ok());
    ASSERT_TRUE(IsPrefix(t.cpu_samples, full.cpu_samples)) << cut;
    ASSERT_TRUE(IsPrefix(t.allocs, full.allocs)) << cut;
  }
}

TEST(Smoke, RandomByteFlipsNeverCrash) {
  auto raw = ReadBytes(Fixture("d9-contract-smoke.0.bin"));
  auto gz = ReadBytes(Fixture("d9-contract-smoke.0.bin.gz"));
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    const auto& src = iter % 4 == 3 ? gz : raw;
    std::vector<uint8_t> b = src;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < flips; ++i) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    Trace t = DecodeTraceBuffer(b);
    WalkAll walk;
    RawTrace r = Decompress(b);
    Decoder d;
    DecodeResult res = d.Decode(r.bytes, walk);
    EXPECT_EQ(res.events, walk.events);
    EXPECT_EQ(res.ok(), res.error.empty());
  }
}

// ---------------------------------------------------------------------------------------------
// Hand-written frames

TEST(Frames, OptionalFieldsAbsentAndPresent) {
  Bytes b;
  b.header()
      .schema(7, "Opt", true,
              {{"name", Opt(FieldType::kPooledString)},
               {"cpu", Opt(FieldType::kVarint)},
               {"label", Opt(FieldType::kString)},
               {"tid", T(FieldType::kU32)}})
      .string_pool(0, "hello");
  b.event(7, 100).u8(0).u8(0).u8(0).u32(42);
  b.event(7, 1).u8(1).u32(0).u8(1).varint(300).u8(1).str32("lbl").u32(43);
  DecodeResult r;
  auto ev = Collect(b, &r);
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].ts, 100u);
  EXPECT_EQ(ev[1].ts, 101u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ev[0].values[i].kind, ValueKind::kAbsent) << i;
  EXPECT_EQ(ev[0].values[0].type, FieldType::kPooledString);
  EXPECT_EQ(ev[0].values[3].u64(), 42u);
  EXPECT_EQ(ev[1].values[0].kind, ValueKind::kString);
  EXPECT_EQ(ev[1].values[0].str(), "hello");
  EXPECT_EQ(ev[1].values[1].kind, ValueKind::kU64);
  EXPECT_EQ(ev[1].values[1].u64(), 300u);
  EXPECT_EQ(ev[1].values[2].str(), "lbl");
  EXPECT_EQ(ev[1].values[3].u64(), 43u);

  // A presence byte other than 0/1 is corruption.
  Bytes bad = b;
  bad.event(7, 1).u8(2);
  DecodeResult rb;
  auto evb = Collect(bad, &rb);
  EXPECT_EQ(evb.size(), 2u);
  EXPECT_EQ(rb.status, DecodeStatus::kBadOptional);
  EXPECT_EQ(rb.error_offset, b.size());
}

TEST(Frames, TimestampResetAndSubStreamBase) {
  Bytes b;
  b.header().schema(1, "E", true, {});
  b.event(1, 10).event(1, 5);                       // 10, 15
  b.ts_reset(1000).event(1, 0).event(1, 7);         // 1000, 1007
  b.ts_reset(500).event(1, 1);                      // going backwards costs a reset: 501
  b.event(1, 0xFFFFFF);                             // max delta
  b.header().schema(1, "E", true, {}).event(1, 3);  // new sub-stream: base back to 0
  struct V : Visitor {
    std::vector<uint64_t> ts, resets, headers;
    void OnStreamHeader(uint64_t off) override { headers.push_back(off); }
    void OnTimestampReset(uint64_t, uint64_t t) override { resets.push_back(t); }
    bool OnEvent(const Event& e) override {
      ts.push_back(e.timestamp);
      return true;
    }
  } v;
  Decoder d;
  DecodeResult r = d.Decode(b, v);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(v.ts, (std::vector<uint64_t>{10, 15, 1000, 1007, 501, 501 + 0xFFFFFF, 3}));
  EXPECT_EQ(v.resets, (std::vector<uint64_t>{1000, 500}));
  EXPECT_EQ(v.headers.size(), 2u);
  EXPECT_EQ(v.headers[0], 0u);
  EXPECT_EQ(r.timestamp_resets, 2u);
  EXPECT_EQ(r.stream_headers, 2u);
  EXPECT_EQ(r.bytes_consumed, b.size());
}

TEST(Frames, UntimestampedEventsLeaveTheBaseAlone) {
  Bytes b;
  b.header().schema(1, "T", true, {}).schema(2, "Libd9Map", false, {{"x", T(FieldType::kU8)}});
  b.event(1, 50).event(2).u8(9).event(1, 1);
  DecodeResult r;
  auto ev = Collect(b, &r);
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[1].ts, 0u);
  EXPECT_EQ(ev[1].values[0].u64(), 9u);
  EXPECT_EQ(ev[2].ts, 51u);
}

TEST(Frames, SchemaAnnotationFrameIsParsedAndSkipped) {
  Bytes b;
  b.header().schema(300, "A", true, {{"bytes", T(FieldType::kVarint)}});
  b.u8(0x06).varint(300).u16(2);
  b.u16(0).u16(4).raw("unit").u32(5).raw("bytes");
  b.u16(0).u16(4).raw("kind").u32(0);
  b.event(300, 1).varint(77);
  struct V : Visitor {
    std::vector<std::string> notes;
    uint64_t value = 0;
    void OnSchemaAnnotation(uint64_t id, uint16_t field, std::string_view k,
                            std::string_view v) override {
      notes.push_back(std::to_string(id) + "/" + std::to_string(field) + "/" + std::string(k) +
                      "=" + std::string(v));
    }
    bool OnEvent(const Event& e) override {
      value = e.values[0].u64();
      return true;
    }
  } v;
  Decoder d;
  DecodeResult r = d.Decode(b, v);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(v.notes, (std::vector<std::string>{"300/0/unit=bytes", "300/0/kind="}));
  EXPECT_EQ(v.value, 77u);

  // A truncated annotation frame reports nothing from it.
  Bytes t;
  t.header().u8(0x06).varint(1).u16(1).u16(0).u16(4).raw("unit").u32(10).raw("abc");
  V v2;
  DecodeResult r2 = d.Decode(t, v2);
  EXPECT_EQ(r2.status, DecodeStatus::kTruncated);
  EXPECT_EQ(r2.error_offset, 5u);
  EXPECT_TRUE(v2.notes.empty());
}

TEST(Frames, UnknownTagReportsItsOffset) {
  Bytes b;
  b.header().schema(1, "E", true, {{"v", T(FieldType::kU8)}}).event(1, 1).u8(5);
  const size_t at = b.size();
  b.u8(0x7F).u8(0).u8(0);
  DecodeResult r;
  auto ev = Collect(b, &r);
  EXPECT_EQ(ev.size(), 1u);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.decoded_anything());
  EXPECT_EQ(r.status, DecodeStatus::kUnknownFrameTag);
  EXPECT_EQ(r.error_offset, at);
  EXPECT_EQ(r.bytes_consumed, at);
  EXPECT_EQ(r.error, "unknown frame tag 0x7f at offset " + std::to_string(at));

  Trace t = DecodeTrace(b);
  EXPECT_FALSE(t.ok());
  EXPECT_TRUE(t.decoded_anything());
  EXPECT_EQ(t.EventCount("E"), 1u);
  EXPECT_NE(t.error.find("offset " + std::to_string(at)), std::string::npos);
}

TEST(Frames, HeaderErrors) {
  DecodeResult r;
  Collect({}, &r);
  EXPECT_EQ(r.status, DecodeStatus::kEmpty);
  Bytes junk;
  junk.raw("XYZW");
  Collect(junk, &r);
  EXPECT_EQ(r.status, DecodeStatus::kBadHeader);
  Bytes v2;
  v2.raw(std::string_view("TRC\0", 4)).u8(2);
  Collect(v2, &r);
  EXPECT_EQ(r.status, DecodeStatus::kUnsupportedVersion);
  Bytes partial;
  partial.raw("TR");
  Collect(partial, &r);
  EXPECT_EQ(r.status, DecodeStatus::kTruncated);
  // "T" at a frame boundary that is not a header is just an unknown tag.
  Bytes t;
  t.header().raw("TRX\0\1");
  Collect(t, &r);
  EXPECT_EQ(r.status, DecodeStatus::kUnknownFrameTag);
  EXPECT_EQ(r.error_offset, 5u);
}

TEST(Frames, SchemaRegistrationRules) {
  Bytes b;
  b.header().schema(1, "E", true, {{"v", T(FieldType::kU8)}});
  b.schema(1, "E", true, {{"v", T(FieldType::kU8)}});  // identical re-send: fine
  b.event(1, 1).u8(1);
  b.header().schema(1, "Other", false, {});  // a new sub-stream may reuse the id
  b.event(1);
  b.header().schema(1, "E", true, {{"v", T(FieldType::kU8)}}).event(1, 2).u8(2);
  std::vector<std::pair<std::string, uint32_t>> seen;
  int schemas = 0;
  struct V : Visitor {
    std::vector<std::pair<std::string, uint32_t>>* seen;
    int* schemas;
    void OnSchema(const Schema&) override { ++*schemas; }
    bool OnEvent(const Event& e) override {
      seen->push_back({std::string(e.name()), e.schema->serial});
      return true;
    }
  } v;
  v.seen = &seen;
  v.schemas = &schemas;
  Decoder d;
  DecodeResult r = d.Decode(b, v);
  ASSERT_TRUE(r.ok()) << r.error;
  // Identical schemas in different sub-streams share a serial.
  EXPECT_EQ(seen,
            (std::vector<std::pair<std::string, uint32_t>>{{"E", 0}, {"Other", 1}, {"E", 0}}));
  EXPECT_EQ(schemas, 2);

  Bytes c;
  c.header().schema(1, "E", true, {{"v", T(FieldType::kU8)}}).event(1, 1).u8(1);
  const size_t at = c.size();
  c.schema(1, "E", true, {{"v", T(FieldType::kU16)}});
  r = d.Decode(c, v);
  EXPECT_EQ(r.status, DecodeStatus::kSchemaConflict);
  EXPECT_EQ(r.error_offset, at);
  EXPECT_EQ(r.events, 1u);

  Bytes u;
  u.header().schema(1, "E", true, {{"v", 0x10}});
  r = d.Decode(u, v);
  EXPECT_EQ(r.status, DecodeStatus::kUnknownFieldType);
  Bytes u2;
  u2.header().schema(1, "E", true, {{"v", 0x80}});
  r = d.Decode(u2, v);
  EXPECT_EQ(r.status, DecodeStatus::kUnknownFieldType);

  Bytes missing;
  missing.header().event(9, 0);
  r = d.Decode(missing, v);
  EXPECT_EQ(r.status, DecodeStatus::kUnknownTypeId);
  EXPECT_EQ(r.error_offset, 5u);
}

TEST(Frames, UnresolvedPoolIdsBecomeMarkers) {
  Bytes b;
  b.header()
      .schema(3, fmt::kCpuSampleEvent, true,
              {{"worker_id", T(FieldType::kVarint)},
               {"tid", T(FieldType::kU32)},
               {"source", T(FieldType::kU8)},
               {"thread_name", Opt(FieldType::kPooledString)},
               {"callchain", T(FieldType::kPooledStack)},
               {"cpu", Opt(FieldType::kVarint)}})
      .string_pool(0, "worker")
      .stack_pool(0, {0x10, 0x20});
  b.event(3, 1).varint(255).u32(7).u8(0).u8(1).u32(0).u32(0).u8(0);  // resolves
  b.event(3, 1).varint(255).u32(7).u8(0).u8(1).u32(9).u32(4).u8(1).varint(2);
  // Pools do not survive a new header.
  b.header().schema(3, fmt::kCpuSampleEvent, true,
                    {{"worker_id", T(FieldType::kVarint)},
                     {"tid", T(FieldType::kU32)},
                     {"source", T(FieldType::kU8)},
                     {"thread_name", Opt(FieldType::kPooledString)},
                     {"callchain", T(FieldType::kPooledStack)},
                     {"cpu", Opt(FieldType::kVarint)}});
  b.event(3, 1).varint(255).u32(7).u8(0).u8(1).u32(0).u32(0).u8(0);
  DecodeResult r;
  auto ev = Collect(b, &r);
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].values[3].str(), "worker");
  EXPECT_EQ(ev[0].values[4].stack().ToVector(), (std::vector<uint64_t>{0x10, 0x20}));
  EXPECT_EQ(ev[1].values[3].kind, ValueKind::kUnresolvedString);
  EXPECT_EQ(ev[1].values[3].pool_id, 9u);
  EXPECT_EQ(ev[1].values[4].kind, ValueKind::kUnresolvedStack);
  EXPECT_EQ(ev[1].values[4].pool_id, 4u);
  EXPECT_EQ(ev[2].values[3].kind, ValueKind::kUnresolvedString);
  EXPECT_EQ(ev[2].values[4].kind, ValueKind::kUnresolvedStack);

  Trace t = DecodeTrace(b);
  ASSERT_TRUE(t.ok()) << t.error;
  ASSERT_EQ(t.cpu_samples.size(), 3u);
  EXPECT_EQ(t.cpu_samples[0].thread_name, std::optional<std::string_view>("worker"));
  EXPECT_EQ(t.stack(t.cpu_samples[0].stack).size(), 2u);
  EXPECT_EQ(t.cpu_samples[1].thread_name, std::optional<std::string_view>("<unresolved pool#9>"));
  EXPECT_EQ(t.cpu_samples[1].stack, kUnresolvedStack);
  EXPECT_TRUE(t.stack(kUnresolvedStack).empty());
  EXPECT_EQ(t.cpu_samples[1].cpu, std::optional<uint32_t>(2));
  EXPECT_EQ(t.unresolved_refs, 4u);
}

TEST(Frames, AllFieldTypes) {
  Bytes b;
  b.header().schema(2, "All", true,
                    {{"i64", T(FieldType::kI64)},
                     {"f64", T(FieldType::kF64)},
                     {"bool", T(FieldType::kBool)},
                     {"string", T(FieldType::kString)},
                     {"bytes", T(FieldType::kBytes)},
                     {"pstack", T(FieldType::kPooledStack)},
                     {"pstring", T(FieldType::kPooledString)},
                     {"stack", T(FieldType::kStackFrames)},
                     {"varint", T(FieldType::kVarint)},
                     {"smap", T(FieldType::kStringMap)},
                     {"u8", T(FieldType::kU8)},
                     {"u16", T(FieldType::kU16)},
                     {"u32", T(FieldType::kU32)},
                     {"list", T(FieldType::kDynamicList)},
                     {"map", T(FieldType::kDynamicMap)}});
  // Several entries in one pool frame are legal too.
  b.u8(0x03).u32(2).u32(1).str32("one").u32(2).str32("pooled");
  b.stack_pool(1, {0x10, 0x20});
  b.event(2, 9);
  b.u64(static_cast<uint64_t>(-5));
  b.u64(std::bit_cast<uint64_t>(2.5));
  b.u8(1).str32("str").str32(std::string_view("\0\1\2", 3)).u32(1).u32(2);
  b.u32(3).u64(7).u64(8).u64(9);
  b.varint(UINT64_MAX);
  b.u32(2).str32("a").str32("1").str32("b").str32("2");
  b.u8(200).u16(60000).u32(4000000000u);
  b.u32(3).u8(T(FieldType::kVarint)).varint(5);
  b.u8(T(FieldType::kString)).str32("x");
  b.u8(T(FieldType::kDynamicList)).u32(2).u8(T(FieldType::kBool)).u8(1);
  b.u8(Opt(FieldType::kU8)).u8(0);
  b.u32(2).u8(T(FieldType::kString)).str32("k").u8(T(FieldType::kU32)).u32(7);
  b.u8(T(FieldType::kVarint)).varint(1).u8(T(FieldType::kPooledString)).u32(2);

  bool checked = false;
  DecodeResult r = ForEachEvent(b, [&](const Event& e) {
    checked = true;
    EXPECT_EQ(e.timestamp, 9u);
    auto v = [&](const char* n) { return *e.Find(n); };
    EXPECT_EQ(v("i64").kind, ValueKind::kI64);
    EXPECT_EQ(v("i64").i64(), -5);
    EXPECT_EQ(v("f64").f64(), 2.5);
    EXPECT_EQ(v("bool").kind, ValueKind::kBool);
    EXPECT_TRUE(v("bool").boolean());
    EXPECT_EQ(v("string").str(), "str");
    EXPECT_EQ(v("bytes").kind, ValueKind::kBytes);
    EXPECT_EQ(v("bytes").str(), std::string_view("\0\1\2", 3));
    EXPECT_EQ(v("pstack").stack().ToVector(), (std::vector<uint64_t>{0x10, 0x20}));
    EXPECT_EQ(v("pstring").str(), "pooled");
    EXPECT_EQ(v("stack").stack().ToVector(), (std::vector<uint64_t>{7, 8, 9}));
    EXPECT_EQ(v("stack").pool_entry, kNoPoolEntry);
    EXPECT_EQ(v("varint").u64(), UINT64_MAX);
    std::vector<std::pair<std::string_view, std::string_view>> smap;
    for (auto kv : v("smap").string_map()) smap.push_back(kv);
    EXPECT_EQ(smap.size(), 2u);
    EXPECT_EQ(smap[1].first, "b");
    EXPECT_EQ(smap[1].second, "2");
    EXPECT_EQ(v("smap").string_map().Find("a"), std::optional<std::string_view>("1"));
    EXPECT_EQ(v("u8").u64(), 200u);
    EXPECT_EQ(v("u16").u64(), 60000u);
    EXPECT_EQ(v("u32").u64(), 4000000000u);

    ListView list = v("list").list();
    ASSERT_EQ(list.size(), 3u);
    std::vector<ValueKind> kinds;
    for (const Value& x : list) kinds.push_back(x.kind);
    EXPECT_EQ(kinds,
              (std::vector<ValueKind>{ValueKind::kU64, ValueKind::kString, ValueKind::kList}));
    auto it = list.begin();
    EXPECT_EQ(it->u64(), 5u);
    ++it;
    EXPECT_EQ(it->str(), "x");
    ++it;
    std::vector<ValueKind> inner;
    for (const Value& x : it->list()) inner.push_back(x.kind);
    EXPECT_EQ(inner, (std::vector<ValueKind>{ValueKind::kBool, ValueKind::kAbsent}));

    std::vector<std::string> map;
    for (const auto& [k, val] : v("map").map()) {
      map.push_back(std::string(ValueKindName(k.kind)) + ":" +
                    std::string(ValueKindName(val.kind)));
    }
    EXPECT_EQ(map, (std::vector<std::string>{"string:u64", "u64:string"}));
    auto m = v("map").map().begin();
    ++m;
    EXPECT_EQ(m->second.str(), "pooled");  // pooled strings resolve inside maps too
  });
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(checked);
}

TEST(Frames, HostileCountsAndNesting) {
  auto status_of = [](const Bytes& b) {
    DecodeResult r;
    Collect(b, &r);
    return r.status;
  };
  // Huge counts must fail as truncation, not allocate.
  Bytes smap;
  smap.header().schema(1, "M", false, {{"m", T(FieldType::kStringMap)}}).event(1).u32(0xFFFFFFFF);
  EXPECT_EQ(status_of(smap), DecodeStatus::kTruncated);
  Bytes stack;
  stack.header().u8(0x04).u32(1).u32(0).u32(0x40000000).u64(1);
  EXPECT_EQ(status_of(stack), DecodeStatus::kTruncated);
  Bytes pool;
  pool.header().u8(0x03).u32(0xFFFFFFFF).u32(0).u32(0);
  EXPECT_EQ(status_of(pool), DecodeStatus::kTruncated);
  Bytes fields;
  fields.header().u8(0x01).u16(1).u16(1).raw("F").u8(1).u16(0xFFFF).u16(1).raw("a").u8(9);
  EXPECT_EQ(status_of(fields), DecodeStatus::kTruncated);
  Bytes frames;
  frames.header().schema(1, "S", false, {{"s", T(FieldType::kStackFrames)}}).event(1).u32(1 << 30);
  EXPECT_EQ(status_of(frames), DecodeStatus::kTruncated);
  Bytes list;
  list.header().schema(1, "L", false, {{"l", T(FieldType::kDynamicList)}}).event(1).u32(1 << 30);
  EXPECT_EQ(status_of(list), DecodeStatus::kTruncated);

  // Pool ids far apart must not blow up the index.
  Bytes sparse;
  sparse.header().string_pool(0xFFFFFFF0, "far").string_pool(3, "near");
  sparse.schema(1, "P", false,
                {{"a", T(FieldType::kPooledString)}, {"b", T(FieldType::kPooledString)}});
  sparse.event(1).u32(0xFFFFFFF0).u32(3);
  DecodeResult rs;
  auto ev = Collect(sparse, &rs);
  ASSERT_TRUE(rs.ok()) << rs.error;
  EXPECT_EQ(ev[0].values[0].str(), "far");
  EXPECT_EQ(ev[0].values[1].str(), "near");

  // Lists nested beyond kMaxNesting.
  Bytes deep;
  deep.header().schema(1, "D", false, {{"l", T(FieldType::kDynamicList)}}).event(1);
  for (int i = 0; i < 40; ++i) deep.u32(1).u8(T(FieldType::kDynamicList));
  deep.u32(0);
  EXPECT_EQ(status_of(deep), DecodeStatus::kTooDeep);

  Bytes varint;
  varint.header().schema(1, "V", false, {{"v", T(FieldType::kVarint)}}).event(1);
  for (int i = 0; i < 11; ++i) varint.u8(0x80);
  varint.u8(0);
  EXPECT_EQ(status_of(varint), DecodeStatus::kBadVarint);

  Bytes bad_elem;
  bad_elem.header()
      .schema(1, "L", false, {{"l", T(FieldType::kDynamicList)}})
      .event(1)
      .u32(1)
      .u8(0x33)
      .u8(0);
  EXPECT_EQ(status_of(bad_elem), DecodeStatus::kUnknownFieldType);
}

TEST(Frames, VisitorCanStop) {
  Bytes b;
  b.header().schema(1, "E", true, {}).event(1, 1).event(1, 1).event(1, 1);
  int n = 0;
  auto stop_after_two = [&](const Event&) { return ++n < 2; };  // an lvalue callable works too
  DecodeResult r = ForEachEvent(b, stop_after_two);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(r.status, DecodeStatus::kStopped);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.events, 2u);
}

TEST(Frames, StackTableDeduplicates) {
  StackTable t;
  std::vector<uint64_t> a = {1, 2, 3}, b = {1, 2}, c = {};
  StackId ia = t.Intern(a), ib = t.Intern(b), ic = t.Intern(c);
  EXPECT_EQ(t.Intern(a), ia);
  EXPECT_EQ(t.Intern(b), ib);
  EXPECT_EQ(t.Intern(c), ic);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(std::vector<uint64_t>(t.Get(ia).begin(), t.Get(ia).end()), a);
  EXPECT_TRUE(t.Get(ic).empty());
  EXPECT_TRUE(t.Get(kUnresolvedStack).empty());
}

}  // namespace
}  // namespace d9::decode
