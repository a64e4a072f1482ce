// `d9 report` in a real browser: Debian's chromium (headless) opens the page written for
// memory_shape's trace; the numbers in its DOM must be those of `d9 summary --json` and
// `d9 peak --json`, a #from=...&to=... URL must show that window's figures (checked against
// `d9 alloc --from --to`), and screenshots must not be blank. Also a trace of several
// processes (rotation, a fork child) and a damaged file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "tests/test_util.h"

namespace d9::test {
namespace {

namespace fs = std::filesystem;
constexpr double kMiB = 1024.0 * 1024.0;

// The raw text of a JSON number after "key": (to compare digits exactly).
std::string json_raw(const std::string& text, const std::string& key, size_t from = 0) {
  size_t at = text.find("\"" + key + "\":", from);
  if (at == std::string::npos) return "";
  at += key.size() + 3;
  size_t end = text.find_first_of(",}]", at);
  return text.substr(at, end - at);
}

// data-value of the element with this id in a dumped DOM.
std::string dom_value(const std::string& dom, const std::string& id,
                      const std::string& attr = "data-value") {
  std::smatch m;
  std::regex re("id=\"" + id + "\"[^>]*" + attr + "=\"([^\"]*)\"");
  return std::regex_search(dom, m, re) ? m[1].str() : "";
}

// Debian's chromium, headless, with a fresh profile and nothing that talks to the network.
Shell chromium(const std::string& args) {
  const std::string profile = make_temp_dir("chromium-profile");
  Shell sh = shell(
      "timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync "
      "--hide-scrollbars --user-data-dir=" +
      profile + " " + args);
  remove_tree(profile);
  return sh;
}

int colours(const std::string& png) {
  Shell sh = shell("python3 " + std::string(D9_SOURCE_DIR) + "/tests/png_colours.py " + png);
  return sh.status == 0 ? atoi(sh.out.c_str()) : -1;
}

class CliReport : public TempDirTest {
 protected:
  CliReport() : TempDirTest("cli-report") {}
  static void SetUpTestSuite() {
    ASSERT_EQ(shell("command -v chromium").status, 0)
        << "chromium is missing: scripts/setup.sh installs it";
  }
  std::string d9(const std::string& args, const std::string& path) {
    Shell sh = shell(d9_binary() + " " + args + " --no-progress " + path);
    EXPECT_EQ(sh.status, 0) << args << ": " << sh.err;
    return sh.out;
  }
  // Runs memory_shape into `out` and returns its marks: name -> realtime ns.
  std::map<std::string, int64_t> run_shape(const std::string& out,
                                           std::vector<std::string> env = {}) {
    env.push_back("D9_OUTPUT=" + out);
    env.push_back("D9_SEED=12345");
    RunResult r = run({program("memory_shape")}, env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::map<std::string, int64_t> marks;
    std::istringstream in(r.out);
    std::string word, name;
    long long rt, mono;
    while (in >> word >> name >> rt >> mono) marks[name] = rt;
    return marks;
  }
};

TEST_F(CliReport, PageNumbersEqualTheCommandsAndTheWindowFollowsTheUrl) {
  const std::string trace = dir_ + "/trace";
  std::map<std::string, int64_t> marks = run_shape(trace);
  ASSERT_EQ(marks.size(), 4u);
  const std::string html = dir_ + "/report.html";
  Shell rep = shell(d9_binary() + " report --no-progress -o " + html + " " + trace);
  ASSERT_EQ(rep.status, 0) << rep.err;
  const std::string page = read_file(html);
  // Self-contained: no external script, style, image or font.
  EXPECT_GT(page.size(), 10000u);
  EXPECT_LT(page.size(), 5u << 20);
  for (const char* ref : {"src=\"http", "href=\"http", "<link", "@import", "url(", "fetch("}) {
    EXPECT_EQ(page.find(ref), std::string::npos) << ref;
  }

  Shell dom = chromium("--dump-dom file://" + html);
  ASSERT_EQ(dom.status, 0) << dom.err;
  const std::string summary = d9("summary --json", trace);
  EXPECT_EQ(dom_value(dom.out, "sum-processes"), "1");
  EXPECT_EQ(dom_value(dom.out, "sum-alloc-samples"),
            json_raw(summary, "samples", summary.find("\"alloc\":")));
  EXPECT_EQ(dom_value(dom.out, "sum-est-alloc"),
            json_raw(summary, "est_bytes", summary.find("\"alloc\":")));
  EXPECT_EQ(dom_value(dom.out, "sum-est-live"),
            json_raw(summary, "est_bytes", summary.find("\"live\":")));
  EXPECT_EQ(dom_value(dom.out, "sum-cpu-samples"),
            json_raw(summary, "samples", summary.find("\"cpu\":")));
  EXPECT_EQ(dom_value(dom.out, "sum-dropped-allocs"), json_raw(summary, "dropped_allocs"));
  const std::string peak = d9("peak --json --group function", trace);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dom.out, m,
                                std::regex("<tr class=\"peak\" data-process=\"([^\"]*)\" "
                                           "data-bytes=\"([^\"]*)\" data-ci=\"([^\"]*)\" "
                                           "data-mono=\"([^\"]*)\"")))
      << dom.out.substr(0, 2000);
  EXPECT_EQ(m[1].str(), json_raw(peak, "process").substr(1, m[1].length()));
  EXPECT_EQ(m[2].str(), json_raw(peak, "est_bytes"));
  EXPECT_EQ(m[3].str(), json_raw(peak, "ci95_bytes"));
  EXPECT_EQ(m[4].str(), json_raw(peak, "mono_ns"));
  EXPECT_NE(dom.out.find("ramp_site (2"), std::string::npos);  // the top site at the peak

  // The window of a #from=&to= URL, on bin edges: the page's sum over its bins equals
  // `d9 alloc --from --to` (up to samples within a rounding error of the edges).
  const double t0 = atof(dom_value(dom.out, "win", "data-t0").c_str());
  const double bin = atof(dom_value(dom.out, "win", "data-bin-s").c_str());
  ASSERT_GT(bin, 0);
  char window[128];
  const double a = t0 + 20 * bin, b = t0 + 200 * bin;
  snprintf(window, sizeof(window), "#from=%.9f&to=%.9f", a, b);
  Shell win = chromium("--dump-dom 'file://" + html + window + "'");
  ASSERT_EQ(win.status, 0) << win.err;
  EXPECT_EQ(dom_value(win.out, "win", "data-bin-from"), "20");
  EXPECT_EQ(dom_value(win.out, "win", "data-bin-to"), "199");
  char range[128];
  snprintf(range, sizeof(range), "--from %.9f --to %.9f", a, b);
  const std::string alloc = d9("alloc --json " + std::string(range), trace);
  const double want = json_number(alloc, "est_bytes", alloc.find("\"total\":"));
  EXPECT_NEAR(atof(dom_value(win.out, "win-alloc").c_str()), want, 0.01 * want + 1) << window;

  // Windows before and after the release: the peak lies in the first, not in the second.
  const int64_t first_wall = static_cast<int64_t>(json_number(summary, "first_ns"));
  auto rel = [&](const char* mark) {
    return t0 + static_cast<double>(marks.at(mark) - first_wall) / 1e9;
  };
  const double peak_bytes = atof(m[2].str().c_str());
  snprintf(window, sizeof(window), "#from=%.6f&to=%.6f", t0, rel("before_release") + 0.002);
  Shell before = chromium("--dump-dom 'file://" + html + window + "'");
  EXPECT_NEAR(atof(dom_value(before.out, "win-peak").c_str()), peak_bytes, 0.03 * peak_bytes);
  snprintf(window, sizeof(window), "#from=%.6f&to=%.6f", rel("after_release") + 0.05, rel("end"));
  Shell after = chromium("--dump-dom 'file://" + html + window + "'");
  const double after_peak = atof(dom_value(after.out, "win-peak").c_str());
  EXPECT_GT(after_peak, 16 * kMiB);
  EXPECT_LT(after_peak, 128 * kMiB);

  // Screenshots of the whole page and of a window are not blank.
  for (const std::string& url : {"file://" + html, "file://" + html + window}) {
    const std::string png = dir_ + (url.find('#') == std::string::npos ? "/page.png" : "/win.png");
    Shell shot = chromium("--window-size=1200,2000 --screenshot=" + png + " '" + url + "'");
    ASSERT_EQ(shot.status, 0) << shot.err;
    EXPECT_GE(colours(png), 20) << png;
  }
}

TEST_F(CliReport, SeveralProcessesRotationAndAForkChild) {
  const std::string trace = dir_ + "/trace";
  run_shape(trace, {"D9_MAX_FILE_SIZE=16K"});  // rotates
  RunResult r =
      run({program("segments_subject"), "fork"}, {"D9_OUTPUT=" + trace, "D9_SAMPLE_RATE=4096"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string summary = d9("summary --json", trace);
  size_t n = 0;
  for (size_t at = summary.find("{\"process\":"); at != std::string::npos;
       at = summary.find("{\"process\":", at + 1)) {
    ++n;
  }
  ASSERT_GE(n, 3u) << summary;  // memory_shape, the forking parent and its child
  EXPECT_GT(json_number(summary, "segments"), static_cast<double>(n));  // rotation
  const std::string html = dir_ + "/report.html";
  Shell rep = shell(d9_binary() + " report --no-progress -o " + html + " " + trace);
  ASSERT_EQ(rep.status, 0) << rep.err;
  Shell dom = chromium("--dump-dom file://" + html);
  ASSERT_EQ(dom.status, 0) << dom.err;
  EXPECT_EQ(dom_value(dom.out, "sum-processes"), std::to_string(n));
  EXPECT_EQ(dom_value(dom.out, "sum-alloc-samples"),
            json_raw(summary, "samples", summary.find("\"alloc\":")));
  // One peak row per process with allocations, as `d9 peak --json` has.
  const std::string peak = d9("peak --json", trace);
  size_t rows = 0, want = 0;
  for (size_t at = dom.out.find("<tr class=\"peak\""); at != std::string::npos;
       at = dom.out.find("<tr class=\"peak\"", at + 1)) {
    ++rows;
  }
  for (size_t at = peak.find("\"peak\":{"); at != std::string::npos;
       at = peak.find("\"peak\":{", at + 1)) {
    ++want;
  }
  EXPECT_EQ(rows, want);
  EXPECT_GE(rows, 3u);
}

TEST_F(CliReport, DamagedFileStillReportsWhatCameBefore) {
  const std::string trace = dir_ + "/trace";
  run_shape(trace);
  std::vector<std::string> segs = find_segments(trace);
  ASSERT_EQ(segs.size(), 1u);
  // The raw stream cut in half: what came before the cut is still read.
  const std::string raw = dir_ + "/cut.bin";
  ASSERT_EQ(shell("zstd -d -q -c " + segs[0] + " > " + raw).status, 0);
  fs::resize_file(raw, fs::file_size(raw) / 2);
  const std::string html = dir_ + "/report.html";
  Shell rep = shell(d9_binary() + " report --no-progress -o " + html + " " + raw);
  ASSERT_EQ(rep.status, 0) << rep.err;
  EXPECT_NE(rep.err.find("cut.bin"), std::string::npos) << rep.err;  // the damage is named
  Shell summary = shell(d9_binary() + " summary --json --no-progress " + raw);
  Shell dom = chromium("--dump-dom file://" + html);
  ASSERT_EQ(dom.status, 0) << dom.err;
  const std::string samples = dom_value(dom.out, "sum-alloc-samples");
  EXPECT_EQ(samples, json_raw(summary.out, "samples", summary.out.find("\"alloc\":")));
  EXPECT_GT(atoi(samples.c_str()), 0);
  EXPECT_NE(dom.out.find("damaged input"), std::string::npos);
}

}  // namespace
}  // namespace d9::test
