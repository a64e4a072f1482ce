// The writer's wake-up protocol (alloc/profiler.h): it reads the nudge count before it
// looks for work, so a nudge that lands between the look and the sleep is never slept
// through. A fork child asks its new writer for a seal right before exec, often before that
// writer has reached its first sleep: sleeping through that request cost every fork+exec of
// a profiled program 5 ms.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "alloc/profiler.h"

namespace d9::alloc {
namespace {

using Clock = std::chrono::steady_clock;
constexpr long kLongSleepNs = 900L * 1000 * 1000;  // the futex timeout must stay below 1 s

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

TEST(WriterWakeup, NudgeBetweenLookAndSleepEndsTheSleepAtOnce) {
  uint32_t seen = nudges();
  nudge_writer();  // lands after the look, before the sleep
  auto t0 = Clock::now();
  wait_for_work(seen, kLongSleepNs);
  EXPECT_LT(seconds_since(t0), 0.45) << "slept through a nudge";
}

TEST(WriterWakeup, NudgeDuringTheSleepEndsIt) {
  uint32_t seen = nudges();
  std::thread nudger([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    nudge_writer();
  });
  auto t0 = Clock::now();
  wait_for_work(seen, kLongSleepNs);
  EXPECT_LT(seconds_since(t0), 0.45);
  nudger.join();
}

TEST(WriterWakeup, WithoutANudgeTheSleepLastsItsTimeout) {
  auto t0 = Clock::now();
  wait_for_work(nudges(), 50L * 1000 * 1000);
  EXPECT_GE(seconds_since(t0), 0.045);
}

}  // namespace
}  // namespace d9::alloc
