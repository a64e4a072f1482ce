// The encoder against the decoder: every event d9 writes survives a round trip with its
// exact field values, pooled stacks and strings are written once per sub-stream, and
// timestamps survive resets.
#include "writer/encoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "writer/trace.h"
#include "writer/wire_decoder.h"

namespace d9 {
namespace {

decode::Trace decode_bytes(std::span<const uint8_t> bytes) {
  decode::Trace t = decode::DecodeTrace(bytes);
  EXPECT_TRUE(t.ok()) << t.error;
  return t;
}

TEST(Encoder, EveryEventRoundTrips) {
  Encoder e;
  e.begin_stream();
  e.clock_sync(5'000'000'000, 1'700'000'000'123'456'789);
  e.segment_metadata(5'000'000'100, {{"memory.sample_rate_bytes", "524288"}, {"service", "x"}});
  const std::vector<uint64_t> stack = {0x401000, 0x402000, 0x7f0000001234};
  e.alloc_event(5'000'001'000, 42, 1024, 0x7f00deadbeef, stack);
  e.free_event(5'000'002'000, 43, 0x7f00deadbeef, 1024, 5'000'001'000);
  e.overflow_event(5'000'003'000, 2, 7);
  e.begin_stream();
  e.symbol_entry(0x401000, 0, "ns::f(int)", 0, "/src/a.cc", 12);
  e.symbol_entry(0x401000, 0, "inlined", 1, "", 0);

  decode::Trace t = decode_bytes(e.bytes());
  EXPECT_EQ(t.stream_headers, 2u);
  ASSERT_EQ(t.clock_syncs.size(), 1u);
  EXPECT_EQ(t.clock_syncs[0].ts, 5'000'000'000u);
  EXPECT_EQ(t.clock_syncs[0].realtime_ns, 1'700'000'000'123'456'789u);
  EXPECT_EQ(t.metadata.at("memory.sample_rate_bytes"), "524288");
  EXPECT_EQ(t.metadata.at("service"), "x");
  ASSERT_EQ(t.allocs.size(), 1u);
  EXPECT_EQ(t.allocs[0].ts, 5'000'001'000u);
  EXPECT_EQ(t.allocs[0].tid, 42u);
  EXPECT_EQ(t.allocs[0].size, 1024u);
  EXPECT_EQ(t.allocs[0].addr, 0x7f00deadbeefu);
  auto frames = t.stack(t.allocs[0].stack);
  EXPECT_EQ(std::vector<uint64_t>(frames.begin(), frames.end()), stack);
  ASSERT_EQ(t.frees.size(), 1u);
  EXPECT_EQ(t.frees[0].tid, 43u);
  EXPECT_EQ(t.frees[0].addr, 0x7f00deadbeefu);
  EXPECT_EQ(t.frees[0].size, 1024u);
  EXPECT_EQ(t.frees[0].alloc_ts, t.allocs[0].ts);  // dial9 pairs on this, bit for bit
  ASSERT_EQ(t.overflows.size(), 1u);
  EXPECT_EQ(t.overflows[0].dropped_allocs, 2u);
  EXPECT_EQ(t.overflows[0].dropped_frees, 7u);
  ASSERT_EQ(t.symbols.size(), 2u);
  EXPECT_EQ(t.symbols[0].name, "ns::f(int)");
  EXPECT_EQ(t.symbols[0].file, "/src/a.cc");
  EXPECT_EQ(t.symbols[0].line, 12u);
  EXPECT_EQ(t.symbols[1].inline_depth, 1u);
  EXPECT_EQ(t.unresolved_refs, 0u);
}

TEST(Encoder, SchemaFieldsMatchTheContract) {
  // dial9-format.md §2: names, types and order are fixed.
  Encoder e;
  e.begin_stream();
  e.alloc_event(1, 1, 1, 1, std::vector<uint64_t>{1});
  e.free_event(2, 1, 1, 1, 1);
  e.overflow_event(3, 1, 0);
  std::map<std::string, std::vector<std::pair<std::string, uint8_t>>> schemas;
  struct V : decode::Visitor {
    std::map<std::string, std::vector<std::pair<std::string, uint8_t>>>* out;
    void OnSchema(const decode::Schema& s) override {
      auto& fields = (*out)[std::string(s.name)];
      for (const auto& f : s.fields) {
        fields.emplace_back(std::string(f.name),
                            static_cast<uint8_t>(f.type) | (f.optional ? 0x80 : 0));
      }
    }
    bool OnEvent(const decode::Event&) override { return true; }
  } v;
  v.out = &schemas;
  decode::Decoder decoder;
  EXPECT_TRUE(decoder.Decode(e.bytes(), v).ok());
  using F = std::vector<std::pair<std::string, uint8_t>>;
  EXPECT_EQ(schemas["AllocEvent"], (F{{"tid", 13}, {"size", 9}, {"addr", 9}, {"callchain", 6}}));
  EXPECT_EQ(schemas["FreeEvent"],
            (F{{"tid", 13}, {"addr", 9}, {"size", 9}, {"alloc_timestamp_ns", 9}}));
  EXPECT_EQ(schemas["MemoryProfileOverflowEvent"],
            (F{{"dropped_allocs", 9}, {"dropped_frees", 9}}));
}

TEST(Encoder, StacksAndStringsArePooledOncePerSubStream) {
  Encoder e;
  e.begin_stream();
  const std::vector<uint64_t> a = {1, 2, 3}, b = {1, 2, 4};
  e.alloc_event(10, 1, 8, 100, a);
  size_t after_first = e.size();
  e.alloc_event(11, 1, 8, 200, a);
  size_t second_event_bytes = e.size() - after_first;
  EXPECT_LT(second_event_bytes, 20u) << "a repeated stack must not be written again";
  e.alloc_event(12, 1, 8, 300, b);
  EXPECT_EQ(e.stack_count(), 2u);
  // A new sub-stream forgets the pools: the stack is interned again and still resolves.
  e.begin_stream();
  e.alloc_event(13, 1, 8, 400, a);
  EXPECT_EQ(e.stack_count(), 1u);
  decode::Trace t = decode_bytes(e.bytes());
  ASSERT_EQ(t.allocs.size(), 4u);
  for (const auto& ev : t.allocs) EXPECT_EQ(t.stack(ev.stack).size(), 3u);
  EXPECT_EQ(t.stack(t.allocs[3].stack)[2], 3u);
  EXPECT_EQ(t.unresolved_refs, 0u);
}

TEST(Encoder, StacksKeptByTheCallerArePooledByIdOncePerSubStream) {
  // The collector's table outlives sub-streams; its ids are not the encoder's pool ids.
  StackTable kept;
  const std::vector<uint64_t> a = {7, 8, 9}, b = {7, 8}, c = {5};
  kept.intern(b);  // kept id 0 is never used below: pool ids must not follow kept ids
  const uint32_t ka = kept.intern(a).id;
  Encoder e;
  e.begin_stream();
  e.alloc_event(10, 1, 8, 100, c);  // a stack given as frames takes pool id 0
  e.alloc_event(11, 1, 8, 200, {kept, ka});
  const size_t after_first = e.size();
  e.alloc_event(12, 1, 8, 300, {kept, ka});
  EXPECT_LT(e.size() - after_first, 20u) << "a pooled stack must not be written again";
  e.live_allocation(1, 8, 300, 12, {kept, ka});
  EXPECT_EQ(e.stack_count(), 2u);
  EXPECT_EQ(e.frame_addresses().count(9), 1u);
  // A new sub-stream pools it again, and the table may have grown meanwhile.
  const uint32_t kc = kept.intern(c).id;
  e.begin_stream();
  e.alloc_event(13, 1, 8, 400, {kept, kc});
  e.alloc_event(14, 1, 8, 500, {kept, ka});
  EXPECT_EQ(e.stack_count(), 2u);
  decode::Trace t = decode_bytes(e.bytes());
  ASSERT_EQ(t.allocs.size(), 5u);
  const std::vector<std::vector<uint64_t>> want = {c, a, a, c, a};
  for (size_t i = 0; i < want.size(); ++i) {
    auto got = t.stack(t.allocs[i].stack);
    EXPECT_EQ(std::vector<uint64_t>(got.begin(), got.end()), want[i]) << "event " << i;
  }
  EXPECT_EQ(t.EventCount("Libd9LiveAllocation"), 1u);
  EXPECT_EQ(t.unresolved_refs, 0u);
}

TEST(StackTable, IdsFollowFirstAppearanceAcrossGrowthAndClear) {
  StackTable table;
  std::vector<std::vector<uint64_t>> stacks;
  for (uint64_t i = 0; i < 5000; ++i) {  // grows the slot array several times
    stacks.push_back({0x400000 + i % 97, 0x500000 + i / 97, i});
  }
  stacks.push_back({});                    // the empty stack is a stack too
  stacks.push_back({0x400000, 0x500000});  // a prefix of stacks[0]
  for (size_t i = 0; i < stacks.size(); ++i) {
    StackTable::Interned in = table.intern(stacks[i]);
    EXPECT_TRUE(in.inserted) << i;
    EXPECT_EQ(in.id, i);
  }
  ASSERT_EQ(table.size(), stacks.size());
  for (size_t i = 0; i < stacks.size(); ++i) {
    StackTable::Interned again = table.intern(stacks[i]);
    EXPECT_FALSE(again.inserted) << i;
    EXPECT_EQ(again.id, i);
    EXPECT_TRUE(std::ranges::equal(table.frames(again.id), stacks[i])) << i;
  }
  table.clear();
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.intern(stacks[7]).id, 0u);
  EXPECT_EQ(table.intern(stacks[3]).id, 1u);
  EXPECT_EQ(table.intern(stacks[7]).id, 0u);
}

TEST(Encoder, TimestampsSurviveBackwardsAndLargeJumps) {
  Encoder e;
  e.begin_stream();
  const std::vector<uint64_t> ts = {
      1'000, 1'500, 900, 900 + 0xFFFFFF, 900 + 0xFFFFFF + 0x1000000, 0, 1ULL << 62};
  for (uint64_t t : ts) e.overflow_event(t, 1, 0);
  decode::Trace t = decode_bytes(e.bytes());
  ASSERT_EQ(t.overflows.size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) EXPECT_EQ(t.overflows[i].ts, ts[i]) << i;
  // Resets only where needed: first event (from base 0 beyond u24), backwards (900, 0),
  // the jump beyond u24, and the huge one.
  EXPECT_EQ(t.timestamp_resets, 4u);
}

TEST(Encoder, VarintBoundaries) {
  Encoder e;
  e.begin_stream();
  const std::vector<uint64_t> sizes = {0, 127, 128, 16383, 16384, UINT32_MAX, UINT64_MAX};
  for (uint64_t s : sizes) e.alloc_event(1, 1, s, s, std::vector<uint64_t>{s});
  decode::Trace t = decode_bytes(e.bytes());
  ASSERT_EQ(t.allocs.size(), sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(t.allocs[i].size, sizes[i]);
    EXPECT_EQ(t.allocs[i].addr, sizes[i]);
  }
}

// CpuSampleEvent as dial9-format.md §2.1 fixes it: field names, order and type tags
// (09, 0d, 0b, 87, 06, 89, as in dial9's own demo trace), worker 255, source 0, the
// optional thread name and cpu present or absent.
TEST(Encoder, CpuSampleMatchesTheContract) {
  Encoder e;
  e.begin_stream();
  const std::vector<uint64_t> stack = {0x401000, 0x402000};
  e.cpu_sample(7'000'000'000, 4242, std::string_view("worker-1"), stack, 3u);
  e.cpu_sample(7'000'000'500, 4243, std::nullopt, stack, std::nullopt);

  std::vector<uint8_t> schema = {0x01, 0x00, 0x00, 14, 0x00};
  for (char c : std::string("CpuSampleEvent")) schema.push_back(static_cast<uint8_t>(c));
  schema.insert(schema.end(), {0x01, 0x06, 0x00});  // has_timestamp, 6 fields
  const std::pair<std::string, uint8_t> fields[] = {{"worker_id", 0x09}, {"tid", 0x0d},
                                                    {"source", 0x0b},    {"thread_name", 0x87},
                                                    {"callchain", 0x06}, {"cpu", 0x89}};
  for (const auto& [name, tag] : fields) {
    schema.push_back(static_cast<uint8_t>(name.size()));
    schema.push_back(0);
    for (char c : name) schema.push_back(static_cast<uint8_t>(c));
    schema.push_back(tag);
  }
  std::span<const uint8_t> out = e.bytes();
  EXPECT_NE(std::search(out.begin(), out.end(), schema.begin(), schema.end()), out.end());

  decode::Trace t = decode_bytes(out);
  ASSERT_EQ(t.cpu_samples.size(), 2u);
  const decode::CpuSample& a = t.cpu_samples[0];
  EXPECT_EQ(a.ts, 7'000'000'000u);
  EXPECT_EQ(a.worker_id, 255u);
  EXPECT_EQ(a.tid, 4242u);
  EXPECT_EQ(a.source, 0u);
  EXPECT_EQ(a.thread_name, std::optional<std::string_view>("worker-1"));
  EXPECT_EQ(a.cpu, std::optional<uint32_t>(3));
  auto frames = t.stack(a.stack);
  EXPECT_EQ(std::vector<uint64_t>(frames.begin(), frames.end()), stack);
  const decode::CpuSample& b = t.cpu_samples[1];
  EXPECT_EQ(b.tid, 4243u);
  EXPECT_FALSE(b.thread_name.has_value());
  EXPECT_FALSE(b.cpu.has_value());
  EXPECT_EQ(b.stack, a.stack);  // pooled once
  EXPECT_EQ(e.stack_count(), 1u);
}

}  // namespace
}  // namespace d9
