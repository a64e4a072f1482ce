// S3 shipping end to end: programs run with libd9.so preloaded and D9_S3_BUCKET set against
// a real s3rver on 127.0.0.1; Debian's aws CLI reads what arrived.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "ship/client.h"
#include "tests/s3_util.h"

namespace d9::test {
namespace {

namespace fs = std::filesystem;

class S3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("s3");
    port_ = free_tcp_port();
    server_ = std::make_unique<S3Server>(dir_ + "/s3data", port_);
    ASSERT_TRUE(fs::exists("/usr/bin/aws")) << "Debian's awscli is missing: scripts/setup.sh";
  }
  void TearDown() override {
    server_.reset();
    remove_tree(dir_);
  }

  // The preloaded test program, shipping to kBucket/prefix as host `host`.
  RunResult run_steady(const std::string& prefix, const std::string& secs,
                       std::vector<std::string> extra = {}) {
    std::vector<std::string> env = s3_env(port_);
    env.insert(env.end(), {"D9_OUTPUT=" + dir_ + "/out", "D9_ROTATE_SECS=1",
                           "D9_S3_BUCKET=" + std::string(kBucket), "D9_S3_PREFIX=" + prefix,
                           "D9_HOST=host-a", "D9_SERVICE=steady-svc"});
    env.insert(env.end(), extra.begin(), extra.end());
    return run({program("segments_subject"), "steady", secs, "5000"}, env);
  }

  // The reference: the same program without d9.
  void expect_host_unchanged(const RunResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(std::regex_search(r.out, std::regex("^steady [0-9]+ allocations\n$"))) << r.out;
  }

  std::string dir_;
  int port_ = 0;
  std::unique_ptr<S3Server> server_;
};

std::string boot_dir_of(const std::string& out) {
  std::vector<std::string> dirs = list_dirs(out);
  return dirs.size() == 1 ? dirs[0] : "";
}

// Keys as d9 must write them, checked field by field; returns the segment indices.
std::vector<uint64_t> check_layout(const std::vector<std::string>& keys, const std::string& prefix,
                                   const std::string& boot_id) {
  std::vector<uint64_t> indices;
  std::regex layout("^" + prefix + "/([0-9]{4}-[0-9]{2}-[0-9]{2})/([0-9]{4})/steady-svc/host-a/" +
                    boot_id + "/([0-9]+)-([0-9]+)\\.bin\\.gz$");
  for (const std::string& k : keys) {
    std::smatch m;
    EXPECT_TRUE(std::regex_match(k, m, layout)) << k;
    if (m.empty()) continue;
    time_t secs = static_cast<time_t>(std::stoull(m[3]));
    struct tm tm;
    gmtime_r(&secs, &tm);
    char date[16], hhmm[8];
    strftime(date, sizeof(date), "%Y-%m-%d", &tm);
    strftime(hhmm, sizeof(hhmm), "%H%M", &tm);
    EXPECT_EQ(m[1].str(), date) << k;
    EXPECT_EQ(m[2].str(), hhmm) << k;
    EXPECT_LE(std::llabs(static_cast<long long>(secs) - time(nullptr)), 300) << k;
    indices.push_back(std::stoull(m[4]));
  }
  std::sort(indices.begin(), indices.end());
  return indices;
}

// 0..n-1, each once: nothing lost, nothing twice.
void expect_contiguous(const std::vector<uint64_t>& indices) {
  for (size_t i = 0; i < indices.size(); ++i) EXPECT_EQ(indices[i], i);
}

TEST_F(S3Test, ShipsEachSegmentInDial9LayoutAndDeletesIt) {
  server_->start();
  RunResult r = run_steady("fleet/a", "3.5");
  expect_host_unchanged(r);
  EXPECT_EQ(r.err, "");
  std::string boot = boot_dir_of(dir_ + "/out");
  ASSERT_FALSE(boot.empty());
  std::string boot_id = fs::path(boot).filename().string();
  // Everything shipped, so nothing left on disk.
  EXPECT_TRUE(find_segments(boot).empty());

  std::vector<std::string> keys = aws_keys(port_, "fleet/a/");
  std::vector<uint64_t> indices = check_layout(keys, "fleet/a", boot_id);
  ASSERT_GE(indices.size(), 3u);
  expect_contiguous(indices);

  // One object through the independent client: one gzip member of a dial9 stream that the
  // decoder reads, with the program's symbols.
  std::string local = dir_ + "/one.bin.gz";
  ASSERT_EQ(aws(port_, "s3 cp s3://" + std::string(kBucket) + "/" + keys[1] + " " + local).status,
            0);
  Shell gz = shell("gunzip -t " + local + " && gunzip -c " + local + " > " + dir_ + "/one.bin");
  ASSERT_EQ(gz.status, 0) << gz.err;
  decode::Trace t = decode::LoadTrace(dir_ + "/one.bin");
  EXPECT_EQ(t.container, decode::Container::kRaw);
  EXPECT_TRUE(t.error.empty()) << t.error;
  EXPECT_GT(t.allocs.size(), 10u);
  bool leaf = false;
  for (const auto& s : t.symbols) leaf |= s.name.find("steady_leaf") != std::string::npos;
  EXPECT_TRUE(leaf);
  EXPECT_EQ(t.metadata["boot_id"], boot_id);
  EXPECT_EQ(t.metadata["s3.segments_dropped"], "0");

  // Object metadata as dial9 writes it.
  Shell head =
      aws(port_, "s3api head-object --bucket " + std::string(kBucket) + " --key " + keys[1]);
  ASSERT_EQ(head.status, 0) << head.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(keys[1], m, std::regex("/([0-9]+)-([0-9]+)\\.bin\\.gz$")));
  EXPECT_NE(head.out.find("\"service\": \"steady-svc\""), std::string::npos) << head.out;
  EXPECT_NE(head.out.find("\"host\": \"host-a\""), std::string::npos) << head.out;
  EXPECT_NE(head.out.find("\"boot-id\": \"" + boot_id + "\""), std::string::npos) << head.out;
  EXPECT_NE(head.out.find("\"segment-index\": \"" + m[2].str() + "\""), std::string::npos);
  EXPECT_NE(head.out.find("\"start-time\": \"" + m[1].str() + "\""), std::string::npos);
  EXPECT_NE(head.out.find("application/gzip"), std::string::npos) << head.out;
}

TEST_F(S3Test, ServerStartedLateGetsEverySegment) {
  // Up 1.5 s into a 4 s run: the worker backs off and retries until it answers.
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    server_->start();
  });
  RunResult r = run_steady("late", "4", {"D9_S3_EXIT_TIMEOUT=10"});
  later.join();
  expect_host_unchanged(r);
  EXPECT_EQ(r.err, "");
  std::string boot = boot_dir_of(dir_ + "/out");
  EXPECT_TRUE(find_segments(boot).empty());
  std::vector<uint64_t> indices =
      check_layout(aws_keys(port_, "late/"), "late", fs::path(boot).filename().string());
  ASSERT_GE(indices.size(), 4u);
  expect_contiguous(indices);
}

TEST_F(S3Test, ServerRestartedMidRunLosesNothing) {
  server_->start();
  std::thread bounce([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    server_->stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    server_->start();
  });
  RunResult r = run_steady("bounce", "4.5", {"D9_S3_EXIT_TIMEOUT=10"});
  bounce.join();
  expect_host_unchanged(r);
  EXPECT_EQ(r.err, "");
  std::string boot = boot_dir_of(dir_ + "/out");
  EXPECT_TRUE(find_segments(boot).empty());
  std::vector<uint64_t> indices =
      check_layout(aws_keys(port_, "bounce/"), "bounce", fs::path(boot).filename().string());
  ASSERT_GE(indices.size(), 4u);
  expect_contiguous(indices);
}

TEST_F(S3Test, RefusedCredentialsSayOnceAndKeepFiles) {
  server_->start();
  // s3rver checks the access key, not SigV4 signatures: an unknown key is its refusal.
  RunResult r = run_steady("refused", "2.5", {"AWS_ACCESS_KEY_ID=NOT-A-KEY"});
  expect_host_unchanged(r);
  std::regex line(
      "d9: S3 bucket d9-test refused a segment \\(HTTP 403 InvalidAccessKeyId\\); "
      "segments stay in [^\n]+ for `d9 ship`\n");
  EXPECT_TRUE(std::regex_match(r.err, line)) << r.err;
  EXPECT_EQ(r.err.find("NOT-A-KEY"), std::string::npos);
  EXPECT_EQ(r.err.find(kS3Key), std::string::npos);
  EXPECT_GE(find_segments(boot_dir_of(dir_ + "/out")).size(), 3u);
  EXPECT_TRUE(aws_keys(port_, "refused/").empty());
}

TEST_F(S3Test, BacklogOverMaxTotalSizeIsDroppedAndCounted) {
  // No server at all: everything stays, and retention bounds it to the newest segment.
  RunResult r = run_steady("backlog", "3.5", {"D9_MAX_TOTAL_SIZE=4096", "D9_S3_EXIT_TIMEOUT=1"});
  expect_host_unchanged(r);
  EXPECT_EQ(r.err,
            "d9: S3 backlog over D9_MAX_TOTAL_SIZE: the oldest unshipped segments are deleted "
            "(counted as s3.segments_dropped)\n");
  std::vector<std::string> left = find_segments(boot_dir_of(dir_ + "/out"));
  ASSERT_EQ(left.size(), 1u);
  // The survivor is the newest, and counts every segment before it.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(left[0], m, std::regex("trace\\.([0-9]+)\\.bin\\.zst$")));
  uint64_t index = std::stoull(m[1]);
  EXPECT_GE(index, 2u);
  decode::Trace t = decode::LoadTrace(left[0]);
  // It counts the segments dropped before its seal; the one dropped after it (its
  // predecessor) is in the d9: line only.
  EXPECT_EQ(t.metadata["s3.segments_dropped"], std::to_string(index - 1));
}

std::string shell_env(int port) {
  std::string env = "env ";
  for (const std::string& kv : s3_env(port)) env += kv + " ";
  return env + "D9_HOST=host-a ";
}

TEST_F(S3Test, ShipCommandUploadsWhatProcessesLeftOnDisk) {
  server_->start();
  // One process that ended normally (no S3), one killed mid-run (an .active file left).
  std::vector<std::string> local = {"D9_OUTPUT=" + dir_ + "/out", "D9_ROTATE_SECS=1",
                                    "D9_SERVICE=steady-svc"};
  RunResult done = run({program("segments_subject"), "steady", "2.2", "5000"}, local);
  ASSERT_EQ(done.exit_code, 0);
  {
    Spawned killed({program("segments_subject"), "steady", "30", "5000"}, local, true,
                   dir_ + "/killed.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    killed.stop(SIGKILL, 5000);
  }
  std::vector<std::string> boots = list_dirs(dir_ + "/out");
  ASSERT_EQ(boots.size(), 2u);
  std::vector<std::string> active;
  for (const std::string& f : find_segments(dir_ + "/out")) {
    if (f.ends_with(".active")) active.push_back(f);
  }
  ASSERT_EQ(active.size(), 1u);
  // trace.N.bin.active of boot id B: N-th segment of B.
  std::smatch am;
  ASSERT_TRUE(
      std::regex_search(active[0], am, std::regex("/([^/]+)/trace\\.([0-9]+)\\.bin\\.active$")));
  std::string active_suffix = "/" + am[1].str() + "/";
  std::string active_index = "-" + am[2].str() + ".bin.gz";

  Shell ship = shell(shell_env(port_) + d9_binary() + " ship " + dir_ + "/out s3://" +
                     std::string(kBucket) + "/shipped");
  EXPECT_EQ(ship.status, 0) << ship.err;
  EXPECT_NE(ship.err.find("d9: shipped "), std::string::npos) << ship.err;
  EXPECT_TRUE(find_segments(dir_ + "/out").empty());
  std::vector<std::string> keys = aws_keys(port_, "shipped/");
  for (const std::string& boot : boots) {
    std::string id = fs::path(boot).filename().string();
    std::vector<std::string> mine;
    for (const std::string& k : keys) {
      if (k.find("/" + id + "/") != std::string::npos) mine.push_back(k);
    }
    std::vector<uint64_t> indices = check_layout(mine, "shipped", id);
    EXPECT_GE(indices.size(), 2u) << id;
    expect_contiguous(indices);
  }
  // Every line of stdout names a shipped object.
  EXPECT_EQ(static_cast<size_t>(std::count(ship.out.begin(), ship.out.end(), '\n')), keys.size());
  // The segment that was .active arrived whole: its events decode to the end.
  std::string was_active;
  for (const std::string& k : keys) {
    if (k.find(active_suffix) != std::string::npos && k.ends_with(active_index)) was_active = k;
  }
  ASSERT_FALSE(was_active.empty());
  std::string last = dir_ + "/last.bin.gz";
  ASSERT_EQ(aws(port_, "s3 cp s3://" + std::string(kBucket) + "/" + was_active + " " + last).status,
            0);
  decode::Trace t = decode::LoadTrace(last);
  EXPECT_TRUE(t.error.empty()) << t.error;
  EXPECT_GT(t.allocs.size(), 0u);

  // Nothing left: a second run ships nothing and succeeds.
  Shell again = shell(shell_env(port_) + d9_binary() + " ship " + dir_ + "/out s3://" +
                      std::string(kBucket) + "/shipped");
  EXPECT_EQ(again.status, 0);
  EXPECT_EQ(aws_keys(port_, "shipped/"), keys);
}

}  // namespace
}  // namespace d9::test
