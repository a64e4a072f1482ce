// The `d9` command end to end: a program with known allocation sites runs under libd9.so,
// then `d9 alloc` must name the sites in the right order, with estimates within ±5% and
// 95% intervals that contain the truth, agreeing with the Horvitz–Thompson formula applied
// to the decoded samples. Also `d9 run`: trace location, summary and exit status.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "alloc/sampler.h"
#include "tests/test_util.h"

namespace d9::test {
namespace {

namespace fs = std::filesystem;

std::string json_first_addr(const std::string& line) {
  size_t at = line.find("\"frames\":[{\"addr\":\"");
  if (at == std::string::npos) return "";
  at += 19;
  return line.substr(at, line.find('"', at) - at);
}

class CliE2E : public TempDirTest {
 protected:
  CliE2E() : TempDirTest("cli-e2e") {}
};

TEST_F(CliE2E, AllocNamesKnownSitesInOrderWithinFivePercent) {
  RunResult r = run_known_sites(dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<Site> sites = parse_sites(r.out);
  ASSERT_EQ(sites.size(), 4u) << r.out;

  Shell d9 = shell(d9_binary() + " alloc --json --group stack --top 50 --no-progress " + dir_);
  ASSERT_EQ(d9.status, 0) << d9.err;
  EXPECT_EQ(d9.err, "");

  // Each site's line: the leaf frame's address is inside the site's code.
  struct Got {
    double est, ci;
    size_t rank;
  };
  std::map<std::string, Got> got;
  std::istringstream in(d9.out);
  std::string line;
  size_t rank = 0;
  while (std::getline(in, line)) {
    if (line.rfind("{\"est_bytes\"", 0) != 0) continue;
    uint64_t leaf = strtoull(json_first_addr(line).c_str(), nullptr, 16);
    for (const Site& s : sites) {
      if (leaf > s.start && leaf <= s.end && !got.count(s.name)) {
        got[s.name] = {json_number(line, "est_bytes"), json_number(line, "ci95_bytes"), rank};
      }
    }
    ++rank;
  }
  ASSERT_EQ(got.size(), 4u) << d9.out;

  // The figures are the Horvitz–Thompson sums of the decoded samples, weight first.
  std::map<std::string, double> ht;
  for (const std::string& seg : find_segments(dir_)) {
    decode::Trace t = decode::LoadTrace(seg);
    uint64_t rate = std::stoull(t.metadata["memory.sample_rate_bytes"]);
    for (const decode::AllocEvent& a : t.allocs) {
      auto st = t.stack(a.stack);
      if (st.empty()) continue;
      for (const Site& s : sites) {
        if (st[0] > s.start && st[0] <= s.end) ht[s.name] += sample_weight(a.size, rate);
      }
    }
  }
  uint64_t truth_total = 0;
  for (const Site& s : sites) truth_total += s.bytes;
  for (const Site& s : sites) {
    const Got& g = got[s.name];
    double truth = static_cast<double>(s.bytes);
    double share = truth / static_cast<double>(truth_total);
    std::printf("site %-7s share %5.1f%%  truth %12.0f  d9 %12.0f ±%10.0f  (%.4f)  rank %zu\n",
                s.name.c_str(), 100 * share, truth, g.est, g.ci, g.est / truth, g.rank);
    EXPECT_NEAR(g.est, ht[s.name], 1e-6 * ht[s.name] + 1) << s.name;
    EXPECT_GT(g.ci, 0) << s.name;
    if (share >= 0.10) {
      // The acceptance criterion, for every site that matters (as in e2e_alloc_test).
      EXPECT_NEAR(g.est / truth, 1.0, 0.05) << s.name;
      EXPECT_LE(std::fabs(g.est - truth), g.ci) << s.name << ": the 95% interval misses";
    } else {
      // A 5% site has ~1000 samples: ±6% is its 95% interval, so ±5% would fail by design
      // for some seeds; with four 95% intervals one misses about one seed in five. Check
      // it against the 99.9% interval (3.29 standard errors) instead.
      EXPECT_LE(std::fabs(g.est - truth), g.ci / 1.96 * 3.29) << s.name;
    }
  }
  // Right order: a site with clearly more bytes ranks above one with fewer (small and medium
  // both allocate 4 GiB, so either order is right for those two).
  for (const Site& a : sites) {
    for (const Site& b : sites) {
      if (a.bytes > b.bytes * 1.5) {
        EXPECT_LT(got[a.name].rank, got[b.name].rank) << a.name;
      }
    }
  }

  // The text table lists the same sites, largest first.
  Shell text = shell(d9_binary() + " alloc --no-progress " + dir_);
  ASSERT_EQ(text.status, 0);
  EXPECT_NE(text.out.find("estimated bytes allocated: 9."), std::string::npos) << text.out;
}

TEST_F(CliE2E, RunFindsTheLibraryAndSummarises) {
  Shell r = shell(d9_binary() + " run --rate 1 -o " + dir_ + " -- " + program("known_sites") +
                  " counted 200");
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<Site> sites = parse_sites(r.out);
  ASSERT_EQ(sites.size(), 1u) << r.out;
  std::vector<std::string> dirs = list_dirs(dir_);
  ASSERT_EQ(dirs.size(), 1u);
  EXPECT_NE(r.err.find("trace written to:\n  " + dirs[0]), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("allocation samples:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sample rate of 1 (every allocation)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("top allocation sites"), std::string::npos) << r.err;

  // rate 1: the estimate is exact, 4500 bytes per round at the one site.
  Shell a =
      shell(d9_binary() + " alloc --json --group function --top 1000 --no-progress " + dirs[0]);
  ASSERT_EQ(a.status, 0) << a.err;
  // One row per call site in site_counted (9 entry points) until symbols name the function.
  double at_site = 0;
  std::istringstream in(a.out);
  std::string line;
  while (std::getline(in, line)) {
    uint64_t leaf = strtoull(json_first_addr(line).c_str(), nullptr, 16);
    if (leaf > sites[0].start && leaf <= sites[0].end) {
      at_site += json_number(line, "est_bytes");
      EXPECT_EQ(json_number(line, "ci95_bytes"), 0.0) << line;
    }
  }
  EXPECT_EQ(at_site, 200.0 * 4500) << a.out;
}

// A program that leaks 64 MiB at one site and churns 2 GiB at another: `d9 leaks` shows the
// leak, with an interval containing the truth, and nothing of the churn.
TEST_F(CliE2E, LeaksShowsWhatIsStillLiveAtTheEnd) {
  Shell r = shell("D9_SEED=4242 " + d9_binary() + " run -q -o " + dir_ + " -- " +
                  program("liveset_cases") + " leak");
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<Site> sites = parse_sites(r.out);
  ASSERT_EQ(sites.size(), 2u) << r.out;
  const Site& leak = sites[0].name == "leak" ? sites[0] : sites[1];
  const Site& churn = sites[0].name == "leak" ? sites[1] : sites[0];

  Shell d9 = shell(d9_binary() + " leaks --json --top 100 --no-progress " + dir_);
  ASSERT_EQ(d9.status, 0) << d9.err;
  double at_leak = 0, ci2 = 0, at_churn = 0;
  std::istringstream in(d9.out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("{\"est_bytes\"", 0) != 0) continue;
    uint64_t pc = strtoull(json_first_addr(line).c_str(), nullptr, 16);
    double est = json_number(line, "est_bytes"), ci = json_number(line, "ci95_bytes");
    if (pc > leak.start && pc <= leak.end) {
      at_leak += est;
      ci2 += ci * ci;
      EXPECT_GT(json_number(line, "oldest_age_ns"), 0) << line;
    }
    if (pc > churn.start && pc <= churn.end) at_churn += est;
  }
  const double truth = static_cast<double>(leak.bytes);
  std::printf("leak: truth %.0f  d9 %.0f ±%.0f\n", truth, at_leak, std::sqrt(ci2));
  // ~128 samples (±18% at 95%): checked against the 99.9% interval, 3.29 standard errors,
  // so that one seed in twenty does not fail (40 seeds averaged 126.4 samples for 127.9
  // expected: no bias).
  EXPECT_LE(std::fabs(at_leak - truth), std::sqrt(ci2) / 1.96 * 3.29) << d9.out;
  EXPECT_GT(at_leak, 0) << d9.out;
  EXPECT_EQ(at_churn, 0) << d9.out;

  Shell text = shell(d9_binary() + " leaks --no-progress " + dir_);
  EXPECT_EQ(text.status, 0);
  EXPECT_NE(text.out.find("live at the end:"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("upper bounds"), std::string::npos) << text.out;
}

TEST_F(CliE2E, RunPropagatesTheExitStatus) {
  Shell seven = shell(d9_binary() + " run -q -o " + dir_ + " -- sh -c 'exit 7'");
  EXPECT_EQ(seven.status, 7) << seven.err;
  Shell killed = shell(d9_binary() + " run -q -o " + dir_ + " -- sh -c 'kill -TERM $$'");
  EXPECT_EQ(killed.status, 128 + 15) << killed.err;
  Shell missing = shell(d9_binary() + " run -o " + dir_ + " -- /nonexistent/program");
  EXPECT_EQ(missing.status, 127) << missing.err;
  EXPECT_NE(missing.err.find("cannot run /nonexistent/program"), std::string::npos);
  Shell options = shell(d9_binary() + " run --no-liveset --cpu-hz 0 -q -o " + dir_ + " -- " +
                        program("known_sites") + " counted 50");
  EXPECT_EQ(options.status, 0) << options.err;
  // D9_LIVESET=0 reaches the library: its metadata says so.
  for (const std::string& seg : find_segments(dir_)) {
    decode::Trace t = decode::LoadTrace(seg);
    if (t.allocs.size() > 100) {
      EXPECT_EQ(t.metadata["memory.track_liveset"], "false") << seg;
    }
  }
}

TEST_F(CliE2E, EveryCommandRunsOnARealTrace) {
  RunResult r =
      run({program("demo_service")}, {"D9_OUTPUT=" + dir_, "D9_SEED=7", "D9_SAMPLE_RATE=64K"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string d9 = d9_binary() + " ";
  for (const std::string& cmd : std::vector<std::string>{
           "summary", "alloc --group function", "alloc --group line", "leaks", "cpu --by-thread",
           "flame --kind alloc --folded", "flame --kind live --folded",
           "export --format jsonl -o " + dir_ + "/x.jsonl", "alloc --from 0 --to 1h --tid 1,2,3",
           "summary --json"}) {
    Shell s = shell(d9 + cmd + " --no-progress " + dir_);
    EXPECT_EQ(s.status, 0) << cmd << ": " << s.err;
  }
  Shell svg = shell(d9 + "flame --kind alloc -o " + dir_ + "/f.svg " + dir_);
  EXPECT_EQ(svg.status, 0) << svg.err;
  Shell pprof = shell(d9 + "export --kind heap -o " + dir_ + "/h.pb.gz " + dir_);
  EXPECT_EQ(pprof.status, 0) << pprof.err;
  Shell diff = shell(d9 + "diff " + dir_ + " " + dir_);
  EXPECT_EQ(diff.status, 0) << diff.err;
  EXPECT_NE(diff.out.find("change +0 B"), std::string::npos) << diff.out;
}

}  // namespace
}  // namespace d9::test
