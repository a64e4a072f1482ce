// End-to-end: tests/programs/api_semantics checks glibc's malloc contract and the C++
// operators from inside the process. It must print the same "ok N checks" line with and
// without libd9.so preloaded, in every configuration, and what d9 wrote must decode.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>

#include "tests/test_util.h"

namespace d9::test {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

class E2EApi : public TempDirTest {
 protected:
  E2EApi() : TempDirTest("e2e-api") {}

  // The reference: plain glibc, no d9.
  static const RunResult& reference() {
    static const RunResult r = run({program("api_semantics")}, {}, /*preload=*/false);
    return r;
  }

  // Runs api_semantics with d9 preloaded and checks it behaves exactly like the
  // reference run.
  RunResult run_preloaded(const std::vector<std::string>& env) {
    RunResult r = run({program("api_semantics")}, env);
    EXPECT_EQ(r.exit_code, 0) << "stdout:\n" << r.out << "stderr:\n" << r.err;
    EXPECT_EQ(r.out, reference().out) << "stderr:\n" << r.err;
    return r;
  }
};

TEST_F(E2EApi, PassesWithoutD9) {
  const RunResult& r = reference();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(starts_with(r.out, "ok ")) << r.out;
  EXPECT_EQ(lines_of(r.out).size(), 1u) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST_F(E2EApi, SameOutputAtDefaultRate) {
  RunResult r = run_preloaded({"D9_OUTPUT=" + dir_});
  EXPECT_EQ(r.err, "");
  // Whatever was written is sealed and decodes.
  for (const std::string& seg : find_segments(dir_)) {
    EXPECT_FALSE(seg.ends_with(".active")) << seg;
    decode::Trace t = decode::LoadTrace(seg);
    EXPECT_TRUE(t.ok()) << seg << ": " << t.error;
  }
}

TEST_F(E2EApi, SameOutputSamplingEveryAllocation) {
  RunResult r = run_preloaded({"D9_OUTPUT=" + dir_, "D9_SAMPLE_RATE=1"});
  EXPECT_EQ(r.err, "");

  auto dirs = list_dirs(dir_);
  ASSERT_EQ(dirs.size(), 1u) << "one process, one directory";
  auto segs = find_segments(dir_);
  ASSERT_FALSE(segs.empty());
  // Sealed and compressed with the default D9_COMPRESS=zstd.
  EXPECT_TRUE(fs::exists(dirs[0] + "/trace.0.bin.zst")) << "first segment not sealed";
  uint64_t allocs = 0, with_stack = 0;
  for (const std::string& seg : segs) {
    EXPECT_FALSE(seg.ends_with(".active")) << "left unsealed: " << seg;
    decode::Trace t = decode::LoadTrace(seg);
    EXPECT_TRUE(t.ok()) << seg << ": " << t.error;
    EXPECT_EQ(t.unresolved_refs, 0u) << seg;
    auto rate = t.metadata.find("memory.sample_rate_bytes");
    ASSERT_NE(rate, t.metadata.end()) << seg;
    EXPECT_EQ(rate->second, "1") << seg;
    allocs += t.allocs.size();
    for (const auto& a : t.allocs) {
      if (!t.stack(a.stack).empty()) ++with_stack;
    }
  }
  // The program makes well over 100k allocations; with every one sampled (minus any the
  // ring had to drop) there must be many, and nearly all of them with a stack.
  EXPECT_GT(allocs, 10000u);
  EXPECT_GT(with_stack, allocs * 9 / 10) << with_stack << " of " << allocs << " have stacks";
}

TEST_F(E2EApi, SameOutputWhenDisabled) {
  std::string out = dir_ + "/out";
  RunResult r = run_preloaded({"D9_OUTPUT=" + out, "D9_ENABLE=0"});
  EXPECT_EQ(r.err, "");
  EXPECT_FALSE(fs::exists(out)) << "D9_ENABLE=0 must not create " << out;
}

TEST_F(E2EApi, UnwritableOutputIsReportedOnceAndIgnored) {
  RunResult r = run_preloaded({"D9_OUTPUT=/proc/d9-nope"});
  auto err = lines_of(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_TRUE(starts_with(err[0], "d9: ")) << err[0];
  EXPECT_FALSE(fs::exists("/proc/d9-nope"));
}

TEST_F(E2EApi, InvalidSampleRateFallsBackToDefault) {
  RunResult r = run_preloaded({"D9_OUTPUT=" + dir_, "D9_SAMPLE_RATE=abc"});
  auto err = lines_of(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_TRUE(starts_with(err[0], "d9: invalid D9_SAMPLE_RATE")) << err[0];

  // The program allocates hundreds of MiB, so the default rate samples something.
  auto segs = find_segments(dir_);
  ASSERT_FALSE(segs.empty());
  for (const std::string& seg : segs) {
    decode::Trace t = decode::LoadTrace(seg);
    EXPECT_TRUE(t.ok()) << seg << ": " << t.error;
    auto rate = t.metadata.find("memory.sample_rate_bytes");
    ASSERT_NE(rate, t.metadata.end()) << seg;
    EXPECT_EQ(rate->second, "524288") << seg;
  }
}

// glibc's heap introspection answers from jemalloc under d9: a service that exports
// mallinfo2().uordblks as a metric sees the 64 MiB it holds (glibc's own, unused arena
// would say about 0), malloc_trim gives pages back, malloc_stats and malloc_info keep
// glibc's formats with jemalloc's figures.
class E2EHeapInfo : public E2EApi {
 protected:
  static std::map<std::string, long long> values(const std::string& out) {
    std::map<std::string, long long> v;
    for (const std::string& line : lines_of(out)) {
      size_t space = line.find(' ');
      if (space != std::string::npos && line.find(' ', space + 1) == std::string::npos) {
        v[line.substr(0, space)] = atoll(line.c_str() + space + 1);
      }
    }
    return v;
  }
};

TEST_F(E2EHeapInfo, AnswersFromJemallocWithAndWithoutSampling) {
  constexpr long long kHeld = 64LL << 20;
  for (const char* enable : {"D9_ENABLE=1", "D9_ENABLE=0"}) {
    SCOPED_TRACE(enable);
    RunResult r = run({program("heap_info")}, {"D9_OUTPUT=" + dir_, enable});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    auto v = values(r.out);
    long long grew = v["holding.uordblks"] - v["before.uordblks"];
    EXPECT_GE(grew, kHeld) << r.out;
    EXPECT_LE(grew, kHeld + (4 << 20)) << r.out;
    EXPECT_LE(v["freed.uordblks"], v["holding.uordblks"] - kHeld + (1 << 20)) << r.out;
    EXPECT_EQ(v["holding.arena"], v["holding.uordblks"] + v["holding.fordblks"]);
    EXPECT_EQ(v["holding.hblkhd"], 0);
    EXPECT_EQ(v["holding.old_uordblks"], v["holding.uordblks"]) << "mallinfo, below INT_MAX";
    // mallinfo2 reads what mallctl reads (two calls apart: within a few KiB of d9's own).
    EXPECT_NEAR(static_cast<double>(v["holding.uordblks_again"]),
                static_cast<double>(v["mallctl.allocated"]), 64 << 10);
    // Trim gives the freed pages back: resident memory drops, as glibc's trim would say.
    EXPECT_EQ(v["trim"], 1) << r.out;
    EXPECT_LT(v["rss_after_trim_kib"], v["rss_before_trim_kib"] - 16 * 1024) << r.out;
    EXPECT_LT(v["trimmed.keepcost"], v["freed.keepcost"] + 1) << r.out;
    // malloc_stats: glibc's layout on stderr, in-use bytes near mallinfo2's.
    size_t at = r.err.find("Total (incl. mmap):\nsystem bytes     = ");
    ASSERT_NE(at, std::string::npos) << r.err;
    size_t in_use = r.err.find("in use bytes     = ", at);
    ASSERT_NE(in_use, std::string::npos);
    long long stats_in_use = atoll(r.err.c_str() + in_use + 19);
    EXPECT_NEAR(static_cast<double>(stats_in_use), static_cast<double>(v["trimmed.uordblks"]),
                1 << 20);
    // malloc_info: glibc's XML, with the mapped total as the current system size.
    size_t begin = r.out.find("info-begin\n"), end = r.out.find("info-end\n");
    ASSERT_LT(begin, end);
    std::string xml = r.out.substr(begin + 11, end - begin - 11);
    EXPECT_EQ(xml.rfind("<malloc version=\"1\">", 0), 0u) << xml;
    EXPECT_NE(xml.find("</malloc>"), std::string::npos);
    EXPECT_NE(xml.find("<system type=\"current\" size=\""), std::string::npos);
    EXPECT_EQ(v["info"], 0);
    EXPECT_NE(r.out.find("info_bad 22 errno 0"), std::string::npos) << "EINVAL, as glibc";
  }
}

// The same program on glibc alone: the test's expectations are glibc's own behaviour.
TEST_F(E2EHeapInfo, GlibcAgrees) {
  RunResult r = run({program("heap_info")}, {}, /*preload=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto v = values(r.out);
  // glibc serves 1 MiB blocks with mmap: hblkhd, not uordblks, holds them.
  EXPECT_GE(v["holding.hblkhd"] + v["holding.uordblks"] - v["before.uordblks"], 64LL << 20);
  EXPECT_NE(r.err.find("Total (incl. mmap):"), std::string::npos);
  EXPECT_NE(r.out.find("info_bad 22 errno 0"), std::string::npos);
}

}  // namespace
}  // namespace d9::test
