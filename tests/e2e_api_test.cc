// End-to-end: tests/programs/api_semantics checks glibc's malloc contract and the C++
// operators from inside the process. It must print the same "ok N checks" line with and
// without libd9.so preloaded, in every configuration, and what d9 wrote must decode.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "tests/e2e_util.h"

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

class E2EApi : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("e2e-api");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override {
    if (!HasFailure()) remove_tree(dir_);
  }

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

  std::string dir_;
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

}  // namespace
}  // namespace d9::test
