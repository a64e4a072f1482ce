// The alloc ring under concurrency: every record is either delivered exactly once or
// counted as dropped; producers never block.
#include "alloc/ring.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace d9 {
namespace {

struct Rec {
  uint64_t producer;
  uint64_t seq;
  uint64_t check;
};

TEST(Ring, SingleThreadFifoAndDrop) {
  Ring ring;
  ASSERT_TRUE(ring.init(4, sizeof(Rec)));
  EXPECT_EQ(ring.capacity(), 4u);
  for (uint64_t i = 0; i < 6; ++i) {
    uint64_t pos = 0;
    void* slot = ring.try_claim(&pos);
    if (i < 4) {
      ASSERT_NE(slot, nullptr);
      *static_cast<Rec*>(slot) = {0, i, i * 3};
      ring.publish(pos);
    } else {
      EXPECT_EQ(slot, nullptr);
    }
  }
  EXPECT_EQ(ring.dropped(), 2u);
  for (uint64_t i = 0; i < 4; ++i) {
    const auto* r = static_cast<const Rec*>(ring.peek());
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->seq, i);
    ring.pop();
  }
  EXPECT_EQ(ring.peek(), nullptr);
  // Wraps around after draining.
  uint64_t pos = 0;
  ASSERT_NE(ring.try_claim(&pos), nullptr);
  ring.publish(pos);
  EXPECT_NE(ring.peek(), nullptr);
}

TEST(Ring, ClaimedButUnpublishedSlotHoldsBackConsumerOnly) {
  Ring ring;
  ASSERT_TRUE(ring.init(8, sizeof(Rec)));
  uint64_t first = 0, second = 0;
  ASSERT_NE(ring.try_claim(&first), nullptr);
  ASSERT_NE(ring.try_claim(&second), nullptr);
  ring.publish(second);
  EXPECT_EQ(ring.peek(), nullptr);  // in order: the first is not published yet
  ring.publish(first);
  ASSERT_NE(ring.peek(), nullptr);
  ring.pop();
  ASSERT_NE(ring.peek(), nullptr);
}

// The writer lists records where they lie, then frees their slots one by one: a slot is
// never handed to a producer before it is popped, and peek_at stops at the first record
// not yet published, and at the ring's end.
TEST(Ring, PeekAtReadsAheadAndSlotsStayHeldUntilPopped) {
  Ring ring;
  ASSERT_TRUE(ring.init(4, sizeof(Rec)));
  uint64_t pos[4];
  for (uint64_t i = 0; i < 4; ++i) {
    void* slot = ring.try_claim(&pos[i]);
    ASSERT_NE(slot, nullptr);
    *static_cast<Rec*>(slot) = {0, i, 0};
  }
  ring.publish(pos[0]);
  ring.publish(pos[1]);
  ring.publish(pos[3]);
  EXPECT_EQ(static_cast<const Rec*>(ring.peek_at(1))->seq, 1u);
  EXPECT_EQ(ring.peek_at(2), nullptr);  // claimed, not published
  ring.publish(pos[2]);
  for (uint64_t k = 0; k < 4; ++k) {
    ASSERT_NE(ring.peek_at(k), nullptr);
    EXPECT_EQ(static_cast<const Rec*>(ring.peek_at(k))->seq, k);
  }
  EXPECT_EQ(ring.peek_at(4), nullptr);  // past the end: would wrap onto the first slot
  uint64_t extra = 0;
  EXPECT_EQ(ring.try_claim(&extra), nullptr) << "every slot is still held";
  ring.pop();
  void* slot = ring.try_claim(&extra);
  ASSERT_NE(slot, nullptr) << "the popped slot is free again";
  *static_cast<Rec*>(slot) = {0, 4, 0};
  ring.publish(extra);
  EXPECT_EQ(static_cast<const Rec*>(ring.peek_at(0))->seq, 1u);
  EXPECT_EQ(static_cast<const Rec*>(ring.peek_at(3))->seq, 4u);
}

TEST(Ring, ResetForgetsEverything) {
  Ring ring;
  ASSERT_TRUE(ring.init(16, sizeof(Rec)));
  for (int i = 0; i < 20; ++i) {
    uint64_t pos = 0;
    if (ring.try_claim(&pos)) ring.publish(pos);
  }
  EXPECT_EQ(ring.dropped(), 4u);
  ring.reset();
  EXPECT_EQ(ring.peek(), nullptr);
  EXPECT_EQ(ring.dropped(), 0u);
  uint64_t pos = 0;
  ASSERT_NE(ring.try_claim(&pos), nullptr);
}

// Many producers, one consumer, a ring small enough to overflow: delivered + dropped ==
// produced, exactly, and no record is delivered twice or corrupted.
void run_mpsc(uint32_t slots, int producers, uint64_t per_producer) {
  Ring ring;
  ASSERT_TRUE(ring.init(slots, sizeof(Rec)));
  std::atomic<int> running{producers};
  std::vector<std::vector<uint8_t>> seen(producers, std::vector<uint8_t>(per_producer, 0));
  uint64_t delivered = 0;
  bool corrupt = false, duplicate = false;

  std::thread consumer([&] {
    for (;;) {
      bool done = running.load(std::memory_order_acquire) == 0;
      while (const void* p = ring.peek()) {
        Rec r = *static_cast<const Rec*>(p);
        ring.pop();
        if (r.producer >= static_cast<uint64_t>(producers) || r.seq >= per_producer ||
            r.check != (r.producer * 1000003 ^ r.seq)) {
          corrupt = true;
          continue;
        }
        if (seen[r.producer][r.seq]++) duplicate = true;
        ++delivered;
      }
      if (done) break;
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < producers; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < per_producer; ++i) {
        uint64_t pos = 0;
        if (void* slot = ring.try_claim(&pos)) {
          *static_cast<Rec*>(slot) = {static_cast<uint64_t>(t), i,
                                      static_cast<uint64_t>(t) * 1000003 ^ i};
          ring.publish(pos);
        }
      }
      running.fetch_sub(1, std::memory_order_release);
    });
  }
  for (auto& t : threads) t.join();
  consumer.join();
  EXPECT_FALSE(corrupt);
  EXPECT_FALSE(duplicate);
  EXPECT_EQ(delivered + ring.dropped(), producers * per_producer);
  EXPECT_EQ(ring.claimed(), delivered);  // what counters() reports as samples taken
}

TEST(Ring, ManyProducersTinyRingCountsEveryDrop) {
  run_mpsc(16, 4, 200000);
}
TEST(Ring, ManyProducersLargeRing) {
  run_mpsc(4096, 3, 200000);
}

}  // namespace
}  // namespace d9
