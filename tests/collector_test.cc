// The writer-side collector on hand-made ring contents: allocation records are encoded in
// time order whether they came out of their ring in order (read in place) or not (copied
// and sorted), frees pair with them, and every slot is handed back to the producers. And
// its live set, against a reference map.
#include "alloc/collector.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "alloc/live_map.h"
#include "alloc/records.h"
#include "alloc/sampled_heap.h"
#include "writer/segment.h"
#include "writer/trace.h"

namespace d9::alloc {
namespace {

namespace fs = std::filesystem;

constexpr int kDepth = 4;
constexpr uint64_t kLo = 0x100000, kHi = 0x200000;  // "the sampled arena" for this test

void push_alloc(Ring& ring, uint64_t ts, uint64_t addr, uint64_t size) {
  uint64_t pos = 0;
  auto* rec = static_cast<AllocRecord*>(ring.try_claim(&pos));
  ASSERT_NE(rec, nullptr);
  *rec = {ts, addr, size, 7, 2};
  rec->frames()[0] = 0x401000 + size;
  rec->frames()[1] = 0x402000;
  ring.publish(pos);
}

void push_free(Ring& ring, uint64_t ts, uint64_t addr) {
  uint64_t pos = 0;
  auto* rec = static_cast<FreeRecord*>(ring.try_claim(&pos));
  ASSERT_NE(rec, nullptr);
  *rec = {ts, addr, 7, 0};
  ring.publish(pos);
}

class CollectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/d9-collector-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    d9_sampled_lo = kLo;
    d9_sampled_hi = kHi;
    ASSERT_TRUE(rings_.allocs.init(8, AllocRecord::bytes_for(kDepth)));
    ASSERT_TRUE(rings_.frees.init(32, sizeof(FreeRecord)));
    ASSERT_TRUE(rings_.frees_overflow.init(32, sizeof(FreeRecord)));
    ASSERT_TRUE(segment_.open(dir_, "trace", 0, {{"service", "t"}})) << segment_.error();
  }
  void TearDown() override {
    d9_sampled_lo = d9_sampled_hi = 0;
    fs::remove_all(dir_);
  }
  decode::Trace seal() {
    std::string path = segment_.seal({});
    EXPECT_FALSE(path.empty()) << segment_.error();
    return decode::LoadTrace(path);
  }
  // Every slot of the alloc ring can be claimed again.
  void expect_alloc_ring_free() {
    EXPECT_EQ(rings_.allocs.peek(), nullptr);
    std::vector<uint64_t> held;
    for (uint64_t i = 0; i < rings_.allocs.capacity(); ++i) {
      uint64_t pos = 0;
      ASSERT_NE(rings_.allocs.try_claim(&pos), nullptr) << "slot " << i << " still held";
      held.push_back(pos);
    }
    for (uint64_t pos : held) rings_.allocs.publish(pos);
    while (rings_.allocs.peek()) rings_.allocs.pop();
  }

  std::string dir_;
  Rings rings_;
  Segment segment_;
  Collector collector_;
  Counters counters_{};
};

TEST_F(CollectorTest, AllocationsClaimedOutOfTimeOrderAreSorted) {
  push_alloc(rings_.allocs, 300, kLo + 0x100, 30);
  push_alloc(rings_.allocs, 100, kLo + 0x200, 10);
  push_alloc(rings_.allocs, 200, kLo + 0x300, 20);
  push_free(rings_.frees, 150, kLo + 0x200);
  EXPECT_EQ(collector_.drain(rings_, counters_, segment_), 4u);
  expect_alloc_ring_free();
  EXPECT_EQ(collector_.live_count(), 2u);
  decode::Trace t = seal();
  ASSERT_TRUE(t.ok()) << t.error;
  ASSERT_EQ(t.allocs.size(), 3u);
  EXPECT_EQ(t.allocs[0].ts, 100u);
  EXPECT_EQ(t.allocs[1].ts, 200u);
  EXPECT_EQ(t.allocs[2].ts, 300u);
  EXPECT_EQ(t.stack(t.allocs[0].stack).size(), 2u);
  EXPECT_EQ(t.stack(t.allocs[0].stack)[0], 0x401000u + 10);
  ASSERT_EQ(t.frees.size(), 1u);
  EXPECT_EQ(t.frees[0].alloc_ts, 100u);
  EXPECT_EQ(t.frees[0].size, 10u);
}

TEST_F(CollectorTest, AllocationsInOrderAreReadInPlaceAndTheirSlotsFreed) {
  // Two laps of the 8-slot ring, so slots are reused between drains.
  uint64_t ts = 10;
  for (int drain = 0; drain < 2; ++drain) {
    for (int i = 0; i < 6; ++i, ts += 10) {
      push_alloc(rings_.allocs, ts, kLo + ts * 16, ts);
      if (i % 2 == 1) push_free(rings_.frees, ts + 5, kLo + ts * 16);  // freed at once
    }
    EXPECT_EQ(collector_.drain(rings_, counters_, segment_), 9u);
    expect_alloc_ring_free();
  }
  EXPECT_EQ(collector_.live_count(), 6u);
  decode::Trace t = seal();
  ASSERT_TRUE(t.ok()) << t.error;
  ASSERT_EQ(t.allocs.size(), 12u);
  for (size_t i = 0; i < t.allocs.size(); ++i) {
    EXPECT_EQ(t.allocs[i].ts, 10 * (i + 1));
    EXPECT_EQ(t.allocs[i].size, 10 * (i + 1));
    EXPECT_EQ(t.stack(t.allocs[i].stack)[0], 0x401000 + 10 * (i + 1));
  }
  ASSERT_EQ(t.frees.size(), 6u);
  for (const decode::FreeEvent& f : t.frees) {
    EXPECT_EQ(f.alloc_ts + 5, f.ts);
    EXPECT_EQ(f.size, f.alloc_ts);
  }
}

// Several incarnations of one address: a free takes the newest allocated before it.
TEST(LiveMap, FreeTakesTheNewestIncarnationBeforeIt) {
  LiveMap m;
  m.insert(0x1000, {100, 1, 0, 0});
  m.insert(0x1000, {300, 3, 0, 0});
  m.insert(0x1000, {200, 2, 0, 0});
  LiveMap::Live l{};
  EXPECT_FALSE(m.take_before(0x1000, 100, &l)) << "nothing allocated before 100";
  EXPECT_FALSE(m.take_before(0x2000, 1000, &l)) << "another address";
  ASSERT_TRUE(m.take_before(0x1000, 250, &l));
  EXPECT_EQ(l.alloc_ts, 200u);
  ASSERT_TRUE(m.take_before(0x1000, 250, &l));
  EXPECT_EQ(l.alloc_ts, 100u);
  EXPECT_FALSE(m.take_before(0x1000, 250, &l));
  EXPECT_EQ(m.size(), 1u);
  ASSERT_TRUE(m.take_before(0x1000, 1000, &l));
  EXPECT_EQ(l.size, 3u);
  EXPECT_EQ(m.size(), 0u);
}

// Against a reference multimap through growth and many removals (the removed entries
// left in the table are swept out as it rehashes).
TEST(LiveMap, MatchesAReferenceThroughGrowthAndChurn) {
  LiveMap m;
  std::multimap<uint64_t, uint64_t> ref;  // addr -> alloc_ts
  uint64_t x = 12345, ts = 0;
  for (int i = 0; i < 200000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    uint64_t addr = 0x10000 + ((x >> 33) % 3000) * 16;
    if ((x >> 20) % 3 != 0) {
      m.insert(addr, {++ts, addr, 0, 0});
      ref.emplace(addr, ts);
    } else {
      LiveMap::Live l{};
      bool found = m.take_before(addr, ts + 1, &l);
      auto [lo, hi] = ref.equal_range(addr);
      auto newest = lo;
      for (auto it = lo; it != hi; ++it) newest = it->second > newest->second ? it : newest;
      ASSERT_EQ(found, lo != hi) << i;
      if (found) {
        EXPECT_EQ(l.alloc_ts, newest->second);
        ref.erase(newest);
      }
    }
    ASSERT_EQ(m.size(), ref.size());
  }
  size_t seen = 0;
  m.for_each([&](uint64_t addr, const LiveMap::Live& l) {
    ++seen;
    EXPECT_EQ(l.size, addr);
  });
  EXPECT_EQ(seen, ref.size());
  m.clear();
  EXPECT_EQ(m.size(), 0u);
  LiveMap::Live l{};
  EXPECT_FALSE(m.take_before(0x10000, ts + 1, &l));
}

}  // namespace
}  // namespace d9::alloc
