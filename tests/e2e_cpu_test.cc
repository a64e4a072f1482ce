// End-to-end CPU sampling: preload libd9.so into cpu_split (known CPU use per function
// and thread) and check the CpuSampleEvents it wrote against what the program measured.
#include <gtest/gtest.h>

#include <cmath>
#include <ctime>
#include <map>
#include <sstream>

#include "tests/test_util.h"

namespace d9::test {
namespace {

struct Site {
  uint64_t start = 0, end = 0;
};

struct Truth {
  std::map<std::string, Site> sites;
  uint32_t worker_tid = 0, named_tid = 0;
  double worker_cpu_s = 0, a_s = 0, b_s = 0, named_cpu_s = 0;
  uint64_t renamed_at = 0;
};

Truth parse_run(const std::string& out) {
  Truth r;
  std::istringstream in(out);
  std::string word;
  while (in >> word) {
    if (word == "site") {
      std::string name;
      Site s;
      in >> name >> s.start >> s.end;
      r.sites[name] = s;
    } else if (word == "thread") {
      std::string kind;
      in >> kind;
      uint64_t cpu, x, y;
      if (kind == "worker") {
        in >> r.worker_tid >> cpu >> x >> y;
        r.worker_cpu_s = cpu / 1e9;
        r.a_s = x / 1e9;
        r.b_s = y / 1e9;
      } else {
        in >> r.named_tid >> cpu >> r.renamed_at;
        r.named_cpu_s = cpu / 1e9;
      }
    }
  }
  return r;
}

// The rate CPU-time timers can deliver here: the kernel tick.
uint64_t tick_hz() {
  timespec res{};
  clock_getres(CLOCK_MONOTONIC_COARSE, &res);
  return res.tv_sec == 0 && res.tv_nsec >= 1000000 ? 1000000000ULL / res.tv_nsec : 1000;
}

struct Sample {
  uint64_t ts;
  uint32_t tid;
  std::string name;
  std::vector<uint64_t> stack;
  bool has_cpu;
};

// Every CPU sample and the merged metadata of every segment under dir.
struct Samples {
  std::vector<Sample> all;
  std::map<std::string, std::string> metadata;
  uint64_t closing_samples = 0, closing_truncated = 0;
  uint64_t allocs = 0, allocs_without_stack = 0;
  int segments = 0;
};

Samples load(const std::string& dir) {
  Samples s;
  for (const std::string& path : find_segments(dir)) {
    decode::Trace t = decode::LoadTrace(path);
    EXPECT_TRUE(t.ok()) << path << ": " << t.error;
    ++s.segments;
    for (const auto& [k, v] : t.metadata) s.metadata[k] = v;
    s.closing_samples += std::stoull(t.metadata["cpu.samples"]);
    s.closing_truncated += std::stoull(t.metadata["cpu.truncated_samples"]);
    for (const decode::AllocEvent& a : t.allocs) {
      ++s.allocs;
      s.allocs_without_stack += t.stack(a.stack).size() < 2;
    }
    for (const decode::CpuSample& c : t.cpu_samples) {
      EXPECT_EQ(c.worker_id, 255u);
      EXPECT_EQ(c.source, 0u);
      auto st = t.stack(c.stack);
      EXPECT_FALSE(st.empty());
      s.all.push_back({c.ts, c.tid, c.thread_name ? std::string(*c.thread_name) : "",
                       std::vector<uint64_t>(st.begin(), st.end()), c.cpu.has_value()});
    }
  }
  return s;
}

bool inside(const Site& s, uint64_t pc) {
  return pc >= s.start && pc < s.end;
}

class E2ECpu : public TempDirTest {
 protected:
  E2ECpu() : TempDirTest("e2e-cpu") {}
};

// The acceptance test: the 70/30 split within ±5 points, the second thread's name (and
// its later rename), and samples ≈ hz × CPU seconds (±15%) for each thread.
TEST_F(E2ECpu, RecoversKnownSplitNamesAndRate) {
  const uint64_t hz = std::min<uint64_t>(250, tick_hz());
  // ~1000 samples of the split thread: its share has a standard error of 1.5 points.
  const double seconds = std::max(4.0, 1000.0 / static_cast<double>(hz));
  RunResult r = run({program("cpu_split"), std::to_string(seconds)},
                    {"D9_OUTPUT=" + dir_, "D9_CPU_HZ=" + std::to_string(hz)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  Truth truth = parse_run(r.out);
  ASSERT_EQ(truth.sites.size(), 3u) << r.out;
  Samples s = load(dir_);
  EXPECT_EQ(s.metadata["cpu.profile.frequency_hz"], std::to_string(hz));
  EXPECT_EQ(s.metadata["cpu.sampling"], "on");

  uint64_t worker = 0, a = 0, b = 0, named = 0, complete = 0, with_cpu = 0;
  uint64_t named_before = 0, named_before_ok = 0, named_after = 0, named_after_ok = 0;
  for (const Sample& x : s.all) {
    with_cpu += x.has_cpu;
    if (x.tid == truth.worker_tid) {
      ++worker;
      EXPECT_EQ(x.name, "cpu_split");  // inherited from the process, never renamed
      a += inside(truth.sites["work_a"], x.stack[0]);
      b += inside(truth.sites["work_b"], x.stack[0]);
    } else if (x.tid == truth.named_tid) {
      ++named;
      EXPECT_TRUE(inside(truth.sites["work_c"], x.stack[0]) || x.stack.size() > 1);
      if (x.ts < truth.renamed_at) {
        ++named_before;
        named_before_ok += x.name == "d9-named";
      } else if (x.ts > truth.renamed_at + 1200000000ULL) {  // names are re-read every second
        ++named_after;
        named_after_ok += x.name == "d9-renamed";
      }
    }
  }
  uint64_t in_work = 0, in_work_complete = 0;
  for (const Sample& x : s.all) {
    complete += x.stack.size() >= 4;
    if (inside(truth.sites["work_a"], x.stack[0]) || inside(truth.sites["work_b"], x.stack[0]) ||
        inside(truth.sites["work_c"], x.stack[0])) {
      ++in_work;
      in_work_complete += x.stack.size() >= 5;
    }
  }
  double truth_a = truth.a_s / (truth.a_s + truth.b_s);
  double share_a = static_cast<double>(a) / static_cast<double>(a + b);
  // The share's precision comes from the signals delivered, not from the samples written:
  // when the kernel delivers a thread's CPU-time expirations late (a busy or throttled
  // machine: each check of the timer finds several intervals elapsed), one signal carries
  // si_overrun > 0 and d9 writes its stack 1 + overrun times, so CPU time stays right
  // but those samples share one pc. On a loaded 2-core VM, 1272 of 1991 samples were such
  // repeats: about 250 independent points, a standard error of ~4 points instead of 1.5.
  // Repeats have the signal's timestamp; the bound is 4 standard errors of the weighted
  // share, sum(w^2) p (1 - p) / sum(w)^2, and never below 5 points.
  std::map<uint64_t, uint64_t> signal_weight;  // timestamp -> samples written for it
  for (const Sample& x : s.all) {
    if (x.tid == truth.worker_tid &&
        (inside(truth.sites["work_a"], x.stack[0]) || inside(truth.sites["work_b"], x.stack[0]))) {
      ++signal_weight[x.ts];
    }
  }
  double w_sum = 0, w_sq = 0;
  for (const auto& [ts, w] : signal_weight) {
    w_sum += static_cast<double>(w);
    w_sq += static_cast<double>(w * w);
  }
  const double share_se = std::sqrt(w_sq * truth_a * (1 - truth_a)) / w_sum;
  const double share_bound = std::max(0.05, 4 * share_se);
  std::printf(
      "worker: %lu samples (%.1f expected) from %zu signals, work_a %.1f%% (truth %.1f%%, "
      "bound ±%.1f)\n",
      worker, truth.worker_cpu_s * hz, signal_weight.size(), share_a * 100, truth_a * 100,
      share_bound * 100);
  std::printf("named: %lu samples (%.1f expected); truncated %lu of %lu\n", named,
              truth.named_cpu_s * hz, s.closing_truncated, s.closing_samples);
  EXPECT_NEAR(truth_a, 0.70, 0.03);
  EXPECT_NEAR(share_a, truth_a, share_bound);
  EXPECT_GE(a + b, worker * 95 / 100);  // the rest: the loop's clock reads
  EXPECT_NEAR(static_cast<double>(worker), truth.worker_cpu_s * hz, 0.15 * truth.worker_cpu_s * hz);
  EXPECT_NEAR(static_cast<double>(named), truth.named_cpu_s * hz, 0.15 * truth.named_cpu_s * hz);
  EXPECT_GE(named_before_ok, named_before * 95 / 100);
  EXPECT_GT(named_after, 0u);
  EXPECT_EQ(named_after_ok, named_after);
  EXPECT_EQ(with_cpu, s.all.size());
  // Every stack in the work goes down to clone(): work_x, the thread function, d9's start
  // wrapper, start_thread, clone3 — and the writer knew it reached the bottom. The
  // exception, counted as truncated: a sample taken before the writer built the unwind
  // tables (start-up). Outside the work a complete stack may be short, and rarely is: a
  // tick as a thread starts or ends in d9's start wrapper (3 frames down to clone3), or
  // as the process starts before main (down to _start).
  EXPECT_GE(in_work_complete + s.closing_truncated, in_work);
  EXPECT_LE(complete + s.closing_truncated, s.all.size());
  EXPECT_GE(complete + s.closing_truncated + s.all.size() / 200, s.all.size())
      << "short complete stacks outside the work";
  EXPECT_EQ(s.closing_samples, s.all.size());
  EXPECT_LE(s.closing_truncated, s.all.size() / 100);
}

// The default rate, and the count check at it.
TEST_F(E2ECpu, DefaultRate) {
  RunResult r = run({program("cpu_split"), "1"}, {"D9_OUTPUT=" + dir_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  Truth truth = parse_run(r.out);
  Samples s = load(dir_);
  EXPECT_EQ(s.metadata["cpu.profile.frequency_hz"], "99");
  uint64_t worker = 0, named = 0;
  for (const Sample& x : s.all) {
    worker += x.tid == truth.worker_tid;
    named += x.tid == truth.named_tid;
  }
  EXPECT_NEAR(static_cast<double>(worker), truth.worker_cpu_s * 99, 0.15 * truth.worker_cpu_s * 99);
  EXPECT_NEAR(static_cast<double>(named), truth.named_cpu_s * 99, 0.15 * truth.named_cpu_s * 99);
}

// A rate the tick cannot honour is capped, written as the rate used, and said once.
TEST_F(E2ECpu, RateAboveTickIsCappedAndSaid) {
  const uint64_t tick = tick_hz();
  if (tick >= 5000) GTEST_SKIP() << "tick of " << tick << " Hz";
  RunResult r = run({program("cpu_split"), "0.5"}, {"D9_OUTPUT=" + dir_, "D9_CPU_HZ=9999"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("d9: D9_CPU_HZ=9999 is above the kernel tick rate"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("d9:"), r.err.rfind("d9:")) << "said more than once: " << r.err;
  Samples s = load(dir_);
  EXPECT_EQ(s.metadata["cpu.profile.frequency_hz"], std::to_string(tick));
  EXPECT_GT(s.all.size(), 0u);
}

TEST_F(E2ECpu, ZeroTurnsCpuSamplingOff) {
  RunResult r = run({program("cpu_split"), "0.3"}, {"D9_OUTPUT=" + dir_, "D9_CPU_HZ=0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  Samples s = load(dir_);
  EXPECT_EQ(s.all.size(), 0u);
}

// CPU samples alone (allocation sampling off) still make segments.
TEST_F(E2ECpu, CpuOnlyWhenAllocationSamplingIsOff) {
  RunResult r = run({program("cpu_split"), "0.3"}, {"D9_OUTPUT=" + dir_, "D9_SAMPLE_RATE=0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  Samples s = load(dir_);
  EXPECT_EQ(s.segments, 1);
  EXPECT_GT(s.all.size(), 0u);
  EXPECT_EQ(s.metadata.count("memory.sample_rate_bytes"), 0u);
}

// The stress of the issue, CI form (scripts/cpu_stress.sh runs it for minutes): at 999 Hz,
// threads dlopen/dlclose in a loop, the process forks without exec, 2,000 short-lived
// threads come and go and threads allocate heavily. No deadlock (the program's watchdog
// exits 3), no crash, no host signal lost; the host's own profiling timer then takes over.
TEST_F(E2ECpu, StressAt999Hz) {
  RunResult r = run({program("cpu_stress"), "3", "2000"}, {"D9_OUTPUT=" + dir_, "D9_CPU_HZ=999"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("ok forks=", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(" threads=2000 "), std::string::npos) << r.out;
  // Said once each: the capped rate (where the tick is below 999 Hz) and the hand-over.
  std::string expected_err;
  if (tick_hz() < 999) {
    expected_err =
        "d9: D9_CPU_HZ=999 is above the kernel tick rate that CPU-time timers run on; "
        "sampling at " +
        std::to_string(tick_hz()) + " Hz (written as cpu.profile.frequency_hz)\n";
  }
  expected_err +=
      "d9: the program started its own profiling timer (ITIMER_PROF); d9's CPU "
      "sampling is off, the program's own SIGPROF use takes precedence\n";
  EXPECT_EQ(r.err, expected_err);

  auto dirs = list_dirs(dir_);
  ASSERT_GE(dirs.size(), 2u);
  size_t with_samples = 0;
  uint64_t samples = 0, truncated = 0, allocs = 0, allocs_without_stack = 0;
  for (const std::string& d : dirs) {
    auto segs = find_segments(d);
    ASSERT_FALSE(segs.empty()) << d;
    for (const std::string& seg : segs) EXPECT_EQ(seg.find(".active"), std::string::npos) << seg;
    Samples s = load(d);
    with_samples += !s.all.empty();
    samples += s.closing_samples;
    truncated += s.closing_truncated;
    allocs += s.allocs;
    allocs_without_stack += s.allocs_without_stack;
  }
  // Fork children sample allocations from their first instruction on, with stacks, as do
  // processes before d9's constructor has loaded libunwind (libgcc's unwinder until then).
  std::printf("%lu allocation samples, %lu without a stack\n", allocs, allocs_without_stack);
  EXPECT_EQ(allocs_without_stack, 0u);
  std::printf("%zu processes, %zu with CPU samples; %lu samples, %lu truncated\n", dirs.size(),
              with_samples, samples, truncated);
  EXPECT_GE(with_samples, dirs.size() * 9 / 10);  // fork children burn ~30 ms of CPU each
  EXPECT_LE(truncated, samples / 10);
}

}  // namespace
}  // namespace d9::test
