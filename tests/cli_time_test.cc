// The views over time end to end: memory_shape (a 256 MiB ramp released half way, a steady
// 64 MiB leak, ~4 M temporary allocations) runs under libd9.so once, then `d9 peak`,
// `d9 lifetimes`, `leaks --at`, `flame --kind live --at` and `alloc --sizes` must see that
// shape, and the trace must carry jemalloc's own figures (Libd9AllocatorStats).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>

#include "tests/test_util.h"

namespace d9::test {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// The est_bytes of the JSON line (one site per line) whose labels start with `label`.
double site_bytes(const std::string& json, const std::string& label) {
  std::istringstream in(json);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"labels\":[\"" + label + "\"") != std::string::npos) {
      return json_number(line, "est_bytes");
    }
  }
  return 0;
}

struct Shape {
  std::string dir;
  std::map<std::string, std::pair<int64_t, int64_t>> marks;  // name -> (realtime, mono) ns
  std::string error;
};

std::string g_trace_dir;  // set once memory_shape has run

const Shape& shape() {
  static const Shape s = [] {
    Shape r;
    r.dir = make_temp_dir("cli-time");
    g_trace_dir = r.dir;
    RunResult run_result = run({program("memory_shape")}, {"D9_OUTPUT=" + r.dir, "D9_SEED=12345"});
    if (run_result.exit_code != 0) r.error = run_result.err;
    std::istringstream in(run_result.out);
    std::string word, name;
    long long rt, mono;
    while (in >> word >> name >> rt >> mono) r.marks[name] = {rt, mono};
    return r;
  }();
  return s;
}

// The trace directory goes when the tests pass.
class RemoveTrace : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!::testing::UnitTest::GetInstance()->Failed() && !g_trace_dir.empty()) {
      remove_tree(g_trace_dir);
    }
  }
};
[[maybe_unused]] ::testing::Environment* const kRemoveTrace =
    ::testing::AddGlobalTestEnvironment(new RemoveTrace);

std::string d9(const std::string& args) {
  Shell sh = shell(d9_binary() + " " + args + " --no-progress " + shape().dir);
  EXPECT_EQ(sh.status, 0) << sh.err;
  return sh.out;
}

// "@SECONDS.NANOS" for a realtime instant, as --at takes it.
std::string at_wall(int64_t ns) {
  char buf[64];
  snprintf(buf, sizeof(buf), "@%lld.%09lld", static_cast<long long>(ns / 1000000000),
           static_cast<long long>(ns % 1000000000));
  return buf;
}

TEST(CliTime, PeakNamesTheRampAtTheRelease) {
  const Shape& s = shape();
  ASSERT_EQ(s.error, "");
  ASSERT_EQ(s.marks.size(), 4u);
  const std::string out = d9("peak --json --group function");
  // The ramp site holds 256 MiB at the peak.
  EXPECT_NEAR(site_bytes(out, "ramp_site"), 256 * kMiB, 0.10 * 256 * kMiB) << out;
  const size_t first_site = out.find("\"sites\":[");
  ASSERT_NE(first_site, std::string::npos);
  EXPECT_NE(out.find("\"labels\":[\"ramp_site\"", first_site), std::string::npos);
  EXPECT_LT(out.find("ramp_site", first_site), out.find("leak_site", first_site));
  // The peak comes just before the release, within 5% of the run.
  const double run_ns = static_cast<double>(s.marks.at("end").second - s.marks.at("start").second);
  const double peak_mono = json_number(out, "mono_ns");
  EXPECT_NEAR(peak_mono, static_cast<double>(s.marks.at("before_release").second), 0.05 * run_ns);
  // jemalloc's figures near the peak are part of the answer.
  EXPECT_GT(json_number(out, "resident"), 0) << out;
}

TEST(CliTime, LifetimesPutTheChurnFirst) {
  const std::string out = d9("lifetimes --json --group function");
  const size_t sites = out.find("\"sites\":[");
  ASSERT_NE(sites, std::string::npos) << out;
  std::istringstream in(out.substr(sites));
  std::string line, first;
  while (std::getline(in, line)) {
    if (line.rfind("{\"est_allocs\"", 0) == 0) {
      first = line;
      break;
    }
  }
  EXPECT_NE(first.find("\"labels\":[\"churn_site\""), std::string::npos) << out;
  EXPECT_GT(json_number(first, "temporary_share"), 0.95);
  // ~4 M churn allocations (8000 a step for 512 steps), estimated from a few hundred samples.
  EXPECT_NEAR(json_number(first, "est_allocs"), 8000.0 * 512, 0.25 * 8000 * 512);
  // The leak is never temporary.
  std::istringstream all(out.substr(sites));
  while (std::getline(all, line)) {
    if (line.find("\"labels\":[\"leak_site\"") != std::string::npos) {
      EXPECT_EQ(json_number(line, "est_temporary"), 0);
    }
  }
}

TEST(CliTime, LeaksAtBeforeAndAfterTheReleaseDifferByTheRamp) {
  const Shape& s = shape();
  ASSERT_EQ(s.marks.count("before_release"), 1u);
  const std::string before =
      d9("leaks --json --group function --at " + at_wall(s.marks.at("before_release").first));
  const std::string after =
      d9("leaks --json --group function --at " + at_wall(s.marks.at("after_release").first));
  const double diff = json_number(before, "est_bytes") - json_number(after, "est_bytes");
  EXPECT_NEAR(diff, 256 * kMiB, 0.10 * 256 * kMiB) << before << "\n" << after;
  EXPECT_NEAR(site_bytes(before, "ramp_site"), 256 * kMiB, 0.10 * 256 * kMiB);
  EXPECT_EQ(site_bytes(after, "ramp_site"), 0);
  // The leak grows on: 32 MiB then, 64 MiB at the end.
  EXPECT_NEAR(site_bytes(after, "leak_site"), 32 * kMiB, 0.25 * 32 * kMiB);
  EXPECT_NEAR(site_bytes(d9("leaks --json --group function"), "leak_site"), 64 * kMiB,
              0.2 * 64 * kMiB);
  // The flame graph of the live set at a moment agrees.
  const std::string flame_before =
      d9("flame --kind live --folded --at " + at_wall(s.marks.at("before_release").first));
  const std::string flame_after =
      d9("flame --kind live --folded --at " + at_wall(s.marks.at("after_release").first));
  EXPECT_NE(flame_before.find("ramp_site"), std::string::npos);
  EXPECT_EQ(flame_after.find("ramp_site"), std::string::npos);
  EXPECT_NE(flame_after.find("leak_site"), std::string::npos);
}

TEST(CliTime, SizesPerSite) {
  const std::string out = d9("alloc --sizes --json --group function");
  std::istringstream in(out);
  std::string line;
  int seen = 0;
  while (std::getline(in, line)) {
    if (line.find("\"labels\":[\"churn_site\"") != std::string::npos) {
      EXPECT_NE(line.find("{\"min\":32,\"max\":63,"), std::string::npos) << line;
      ++seen;
    }
    if (line.find("\"labels\":[\"ramp_site\"") != std::string::npos) {
      EXPECT_NE(line.find("{\"min\":1048576,\"max\":2097151,"), std::string::npos) << line;
      ++seen;
    }
  }
  EXPECT_EQ(seen, 2) << out;
}

TEST(CliTime, TraceCarriesJemallocFigures) {
  const std::string out = d9("export --format jsonl");
  std::istringstream in(out);
  std::string line;
  int readings = 0;
  double max_allocated = 0;
  while (std::getline(in, line)) {
    if (line.find("\"event\":\"Libd9AllocatorStats\"") == std::string::npos) continue;
    ++readings;
    const double allocated = json_number(line, "allocated"), active = json_number(line, "active");
    EXPECT_LE(allocated, active);
    EXPECT_LE(active, json_number(line, "mapped"));
    max_allocated = std::max(max_allocated, allocated);
  }
  EXPECT_GE(readings, 2);  // about once a second, and one at the seal
  // A reading during the ramp (~1 s in) sees well over 128 MiB.
  EXPECT_GT(max_allocated, 128 * kMiB);
}

}  // namespace
}  // namespace d9::test
