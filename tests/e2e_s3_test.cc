// S3 shipping end to end: programs run with libd9.so preloaded and D9_S3_BUCKET set against
// a real s3rver on 127.0.0.1; Debian's aws CLI reads what arrived.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
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

TEST_F(S3Test, WrongSecretIsSaidOnceAndFilesStay) {
  server_->start();
  // The gate in front of s3rver checks signatures as S3 does.
  RunResult r = run_steady("refused", "2.5", {"AWS_SECRET_ACCESS_KEY=not-the-secret"});
  expect_host_unchanged(r);
  std::regex line(
      "d9: S3 bucket d9-test refused a segment \\(HTTP 403 SignatureDoesNotMatch\\); "
      "segments stay in [^\n]+ for `d9 ship`\n");
  EXPECT_TRUE(std::regex_match(r.err, line)) << r.err;
  EXPECT_EQ(r.err.find("not-the-secret"), std::string::npos);
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
  ASSERT_TRUE(std::regex_search(left[0], m, std::regex("trace\\.([0-9]+)\\.bin\\.gz$")));
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

// A faulty front for s3rver: of the uploads (PUTs) it sees, the first `fail` get 503 at once
// and the next `stall` get 500 after holding the request for a second; everything else is
// passed to s3rver and its answer back. HTTP/1.1 with Content-Length bodies, as the client
// and s3rver speak it.
class FaultyProxy {
 public:
  FaultyProxy(int upstream, int fail, int stall) : upstream_(upstream), fail_(fail), stall_(stall) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(listener_, 16);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~FaultyProxy() {
    stop_ = true;
    shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    for (std::thread& t : workers_) t.join();
    close(listener_);
  }
  int port() const { return port_; }
  int faults() const { return faults_.load(); }
  int forwarded() const { return forwarded_.load(); }

 private:
  // One request or response: headers, then Content-Length bytes. False on EOF/timeout.
  static bool read_message(int fd, std::string* buf, std::string* msg, bool* expect) {
    for (;;) {
      size_t end = buf->find("\r\n\r\n");
      if (end != std::string::npos) {
        std::string head = buf->substr(0, end + 4);
        std::smatch m;
        size_t body = 0;
        if (std::regex_search(head, m,
                              std::regex("\r\ncontent-length: *([0-9]+)", std::regex::icase))) {
          body = std::stoull(m[1]);
        }
        if (expect) *expect = head.find("100-continue") != std::string::npos;
        if (expect && *expect && buf->size() < end + 4 + body) return true;  // body after 100
        if (buf->size() >= end + 4 + body) {
          *msg = buf->substr(0, end + 4 + body);
          buf->erase(0, end + 4 + body);
          return true;
        }
      }
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 10000) <= 0) return false;
      char tmp[65536];
      ssize_t n = read(fd, tmp, sizeof(tmp));
      if (n <= 0) return false;
      buf->append(tmp, static_cast<size_t>(n));
    }
  }
  static void write_all(int fd, const std::string& s) {
    size_t at = 0;
    while (at < s.size()) {
      ssize_t n = write(fd, s.data() + at, s.size() - at);
      if (n <= 0) return;
      at += static_cast<size_t>(n);
    }
  }
  void accept_loop() {
    while (!stop_) {
      int c = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      workers_.emplace_back([this, c] { serve(c); });
    }
  }
  void serve(int c) {
    std::string in, req;
    int up = -1;
    std::string up_buf;
    while (!stop_) {
      bool expect = false;
      if (!read_message(c, &in, &req, &expect)) break;
      bool put = in.compare(0, 4, "PUT ") == 0 || req.compare(0, 4, "PUT ") == 0;
      if (expect) {
        int n = put ? claim() : 0;
        if (n == 1) {  // refuse before the body
          write_all(c, "HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
          break;
        }
        write_all(c, "HTTP/1.1 100 Continue\r\n\r\n");
        if (!read_message(c, &in, &req, nullptr)) break;
        // The client sees no second 100: it is not passed on.
        req =
            std::regex_replace(req, std::regex("\r\nExpect: *100-continue", std::regex::icase), "");
        if (n == 2) {
          std::this_thread::sleep_for(std::chrono::seconds(1));
          write_all(
              c, "HTTP/1.1 500 Internal Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
          break;
        }
      } else if (put) {
        int n = claim();
        if (n == 1) {
          write_all(c, "HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
          break;
        }
        if (n == 2) {
          std::this_thread::sleep_for(std::chrono::seconds(1));
          write_all(
              c, "HTTP/1.1 500 Internal Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
          break;
        }
      }
      if (up < 0) {
        up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<uint16_t>(upstream_));
        if (connect(up, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) break;
      }
      write_all(up, req);
      std::string resp;
      if (!read_message(up, &up_buf, &resp, nullptr)) break;
      write_all(c, resp);
      ++forwarded_;
    }
    if (up >= 0) close(up);
    close(c);
  }
  // 1: answer 503, 2: stall then 500, 0: pass on.
  int claim() {
    std::lock_guard<std::mutex> g(mu_);
    if (fail_ > 0) {
      --fail_;
      ++faults_;
      return 1;
    }
    if (stall_ > 0) {
      --stall_;
      ++faults_;
      return 2;
    }
    return 0;
  }

  int upstream_;
  int fail_, stall_;
  int listener_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> faults_{0}, forwarded_{0};
  std::mutex mu_;
  std::thread acceptor_;
  std::vector<std::thread> workers_;
};

TEST_F(S3Test, ServerErrorsAndStallsAreRetried) {
  server_->start();
  FaultyProxy proxy(port_, 2, 1);
  RunResult r = run_steady(
      "faults", "3.5",
      {"D9_S3_ENDPOINT=http://127.0.0.1:" + std::to_string(proxy.port()), "D9_S3_EXIT_TIMEOUT=20"});
  expect_host_unchanged(r);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(proxy.faults(), 3);
  std::string boot = boot_dir_of(dir_ + "/out");
  EXPECT_TRUE(find_segments(boot).empty());
  std::vector<uint64_t> indices =
      check_layout(aws_keys(port_, "faults/"), "faults", fs::path(boot).filename().string());
  ASSERT_GE(indices.size(), 3u);
  expect_contiguous(indices);
  // Each segment went through once: the faults never reached s3rver.
  EXPECT_EQ(static_cast<size_t>(proxy.forwarded()), indices.size());
}

TEST_F(S3Test, ForkChildrenShipTheirOwnSegments) {
  server_->start();
  std::vector<std::string> env = s3_env(port_);
  env.insert(env.end(), {"D9_OUTPUT=" + dir_ + "/out", "D9_S3_BUCKET=" + std::string(kBucket),
                         "D9_S3_PREFIX=forks", "D9_HOST=host-a", "D9_SERVICE=steady-svc",
                         "D9_SAMPLE_RATE=1"});  // every process samples, so every one writes
  RunResult r = run({program("segments_subject"), "fork"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  std::set<std::string> pids;  // "child N PID" and "parent PID"
  std::regex line("(?:child [0-9]+|parent) ([0-9]+)");
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), line), end; it != end; ++it) {
    pids.insert((*it)[1].str());
  }
  ASSERT_EQ(pids.size(), 4u) << r.out;
  std::set<std::string> shipped;  // the pid of each boot id with an object
  for (const std::string& k : aws_keys(port_, "forks/")) {
    std::smatch m;
    ASSERT_TRUE(
        std::regex_search(k, m, std::regex("/host-a/[a-z]{4}-([0-9]+)/[0-9]+-0\\.bin\\.gz$")))
        << k;
    shipped.insert(m[1].str());
  }
  std::string dirs;
  for (const std::string& d : list_dirs(dir_ + "/out")) dirs += d + " ";
  EXPECT_EQ(shipped, pids) << r.out << r.err << dirs;
  EXPECT_TRUE(find_segments(dir_ + "/out").empty());
}

// libcurl and OpenSSL come with libd9_ship.so, loaded only when there is a bucket.
TEST_F(S3Test, UploadLibrariesAreMappedOnlyWithABucket) {
  server_->start();
  auto maps_after = [&](std::vector<std::string> env) {
    env.insert(env.end(), {"D9_OUTPUT=" + dir_ + "/out", "D9_ROTATE_SECS=1"});
    Spawned p({program("segments_subject"), "steady", "3", "5000"}, env, true, dir_ + "/maps.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // a seal or two
    std::ifstream f("/proc/" + std::to_string(p.pid()) + "/maps");
    std::string maps((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(p.wait(10000), 0);
    return maps;
  };
  std::string without = maps_after(s3_env(port_));
  EXPECT_NE(without.find("/libd9.so"), std::string::npos);
  EXPECT_EQ(without.find("libd9_ship.so"), std::string::npos);
  EXPECT_EQ(without.find("libcurl"), std::string::npos);
  std::vector<std::string> env = s3_env(port_);
  env.insert(env.end(), {"D9_S3_BUCKET=" + std::string(kBucket), "D9_S3_PREFIX=maps"});
  std::string with = maps_after(env);
  EXPECT_NE(with.find("libd9_ship.so"), std::string::npos);
  EXPECT_NE(with.find("libcurl"), std::string::npos);
}

TEST_F(S3Test, NoCredentialsIsSaidOnceAndExitDoesNotWait) {
  server_->start();
  auto t0 = std::chrono::steady_clock::now();
  RunResult r = run_steady(
      "nocreds", "1.5", {"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "D9_S3_EXIT_TIMEOUT=30"});
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expect_host_unchanged(r);
  EXPECT_EQ(r.err,
            "d9: cannot ship segments to S3 bucket d9-test: no AWS credentials "
            "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or profile \"default\" in /dev/null); they "
            "stay on disk\n");
  EXPECT_LT(secs, 10.0);  // not the 30 s exit timeout: there is nothing to wait for
  EXPECT_GE(find_segments(boot_dir_of(dir_ + "/out")).size(), 2u);
}

TEST_F(S3Test, CredentialsComeFromTheProfileWhenTheEnvironmentHasNone) {
  server_->start();
  std::string creds = dir_ + "/credentials";
  {
    std::ofstream f(creds);
    f << "[default]\naws_access_key_id = S3RVER\naws_secret_access_key = wrong-default-secret\n"
      << "\n# the one that works\n[ci]\naws_access_key_id=S3RVER\naws_secret_access_key = "
      << kS3Key << "\n";
  }
  std::string base =
      "env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY AWS_REGION=us-east-1 "
      "D9_S3_ENDPOINT=http://127.0.0.1:" +
      std::to_string(port_) + " AWS_SHARED_CREDENTIALS_FILE=" + creds + " ";
  std::string ls = d9_binary() + " ls s3://" + std::string(kBucket) + "/none";
  Shell ci = shell(base + "AWS_PROFILE=ci " + ls);
  EXPECT_EQ(ci.status, 0) << ci.err;
  EXPECT_NE(ci.out.find("no segments"), std::string::npos) << ci.out;
  // The default profile's secret is wrong: S3's refusal, and no secret in the output.
  Shell def = shell(base + ls);
  EXPECT_EQ(def.status, 1);
  EXPECT_NE(def.err.find("HTTP 403 SignatureDoesNotMatch"), std::string::npos) << def.err;
  EXPECT_EQ((def.out + def.err).find("wrong-default-secret"), std::string::npos);
  // A profile that is not there: said, with where it was looked for.
  Shell none = shell(base + "AWS_PROFILE=nope " + ls);
  EXPECT_EQ(none.status, 1);
  EXPECT_NE(none.err.find("profile \"nope\" in " + creds), std::string::npos) << none.err;
}

// A small fleet in the bucket: two services, three hosts, four processes.
class S3FleetTest : public S3Test {
 protected:
  void ship_fleet() {
    server_->start();
    struct Member {
      const char* service;
      const char* host;
    };
    for (Member m : {Member{"svc-a", "host-1"}, Member{"svc-a", "host-2"},
                     Member{"svc-b", "host-3"}, Member{"svc-a", "host-1"}}) {
      std::vector<std::string> env = s3_env(port_);
      env.insert(env.end(),
                 {"D9_OUTPUT=" + dir_ + "/out", "D9_ROTATE_SECS=1",
                  "D9_S3_BUCKET=" + std::string(kBucket), "D9_S3_PREFIX=fleet",
                  "D9_HOST=" + std::string(m.host), "D9_SERVICE=" + std::string(m.service)});
      RunResult r = run({program("segments_subject"), "steady", "1.3", "5000"}, env);
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    // What the independent client sees: key -> size.
    Shell ls = aws(port_, "s3 ls --recursive s3://" + std::string(kBucket) + "/fleet/");
    std::regex line("[0-9-]+ [0-9:]+ +([0-9]+) (\\S+)");
    for (std::sregex_iterator it(ls.out.begin(), ls.out.end(), line), end; it != end; ++it) {
      sizes_[(*it)[2].str()] = std::stoull((*it)[1].str());
    }
    ASSERT_GE(sizes_.size(), 8u);
  }
  std::string d9(const std::string& args) {
    return shell_env(port_) + "XDG_CACHE_HOME=" + dir_ + "/cache " + d9_binary() + " " + args;
  }
  std::map<std::string, uint64_t> sizes_;
};

TEST_F(S3FleetTest, LsReportsEveryServiceHostAndProcess) {
  ship_fleet();
  Shell ls = shell(d9("ls s3://" + std::string(kBucket) + "/fleet --json"));
  ASSERT_EQ(ls.status, 0) << ls.err;
  uint64_t total = 0;
  std::map<std::string, std::set<std::string>> processes;  // service/host -> boot ids
  for (const auto& [key, size] : sizes_) {
    total += size;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(key, m, std::regex("/[0-9]{4}/([^/]+)/([^/]+)/([^/]+)/")));
    processes[m[1].str() + "/" + m[2].str()].insert(m[3].str());
  }
  EXPECT_EQ(processes.size(), 3u);
  EXPECT_EQ(processes["svc-a/host-1"].size(), 2u);
  EXPECT_EQ(processes["svc-a/host-2"].size(), 1u);
  EXPECT_EQ(processes["svc-b/host-3"].size(), 1u);
  EXPECT_NE(ls.out.find("\"segments\":" + std::to_string(sizes_.size()) +
                        ",\"bytes\":" + std::to_string(total)),
            std::string::npos)
      << ls.out;
  for (const auto& [where, boots] : processes) {
    for (const std::string& b : boots) {
      EXPECT_NE(ls.out.find("{\"boot_id\":\"" + b + "\""), std::string::npos) << b;
    }
  }
  EXPECT_NE(ls.out.find("{\"service\":\"svc-a\",\"hosts\":[{\"host\":\"host-1\""),
            std::string::npos);
  EXPECT_NE(ls.out.find("{\"service\":\"svc-b\",\"hosts\":[{\"host\":\"host-3\""),
            std::string::npos);

  // Narrowed: one service, one host; the table names them.
  Shell one = shell(d9("ls s3://" + std::string(kBucket) + "/fleet --service svc-a --host host-2"));
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_NE(one.out.find("service svc-a: 1 hosts, 1 processes"), std::string::npos) << one.out;
  EXPECT_EQ(one.out.find("svc-b"), std::string::npos);
  EXPECT_NE(one.out.find("busiest minutes"), std::string::npos);
  // A window before everything: nothing.
  Shell none = shell(d9("ls s3://" + std::string(kBucket) + "/fleet --to 2001-01-01T00:00:00Z"));
  EXPECT_NE(none.out.find("no segments match"), std::string::npos) << none.out;
}

TEST_F(S3FleetTest, AllocFromTheBucketEqualsAllocOnTheSameSegmentsFetchedByAws) {
  ship_fleet();
  uint64_t first = UINT64_MAX, last = 0;
  for (const auto& [key, size] : sizes_) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(key, m, std::regex("/([0-9]+)-[0-9]+\\.bin\\.gz$")));
    first = std::min<uint64_t>(first, std::stoull(m[1]));
    last = std::max<uint64_t>(last, std::stoull(m[1]));
  }
  // svc-a over a window holding all of its segments: chosen by listing minute prefixes.
  std::string window = " --from @" + std::to_string(first) + " --to @" + std::to_string(last + 5);
  Shell remote =
      shell(d9("alloc s3://" + std::string(kBucket) + "/fleet --service svc-a" + window));
  ASSERT_EQ(remote.status, 0) << remote.err;
  std::string local = dir_ + "/aws-copy";
  Shell cp = aws(port_, "s3 cp --recursive --exclude '*' --include '*/svc-a/*' s3://" +
                            std::string(kBucket) + "/fleet/ " + local);
  ASSERT_EQ(cp.status, 0) << cp.err;
  Shell here = shell(d9("alloc " + local + window));
  ASSERT_EQ(here.status, 0) << here.err;
  EXPECT_EQ(remote.out, here.out);
  EXPECT_NE(remote.out.find("3 process(es)"), std::string::npos) << remote.out;
  EXPECT_NE(remote.out.find("steady_leaf"), std::string::npos);
  // Downloads are cached by ETag: one file per svc-a object, and a second run reads them.
  size_t cached = 0, svc_a = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ + "/cache/d9/s3/" + kBucket)) {
    cached += e.is_regular_file() && e.path().string().ends_with(".bin.gz");
  }
  for (const auto& [key, size] : sizes_) svc_a += key.find("/svc-a/") != std::string::npos;
  EXPECT_EQ(cached, svc_a);
  Shell again = shell(d9("alloc s3://" + std::string(kBucket) + "/fleet --service svc-a" + window));
  EXPECT_EQ(again.out, remote.out);
  // The views over time and the HTML report read the bucket alike.
  Shell peak_remote =
      shell(d9("peak --json s3://" + std::string(kBucket) + "/fleet --service svc-a" + window));
  Shell peak_here = shell(d9("peak --json " + local + window));
  ASSERT_EQ(peak_remote.status, 0) << peak_remote.err;
  // Each process's peak: its moment and estimated bytes (the order of near-equal sites
  // below it follows the order files are read in, which differs between keys and paths).
  auto peaks = [](const std::string& json) {
    std::multiset<std::string> found;
    std::regex peak(
        "\"process\":\"([a-z]+-[0-9]+)\"[^{]*\"peak\":\\{\"mono_ns\":([0-9]+)"
        "[^}]*\"est_bytes\":([0-9]+)");
    for (std::sregex_iterator it(json.begin(), json.end(), peak), end; it != end; ++it) {
      found.insert((*it)[1].str() + " " + (*it)[2].str() + " " + (*it)[3].str());
    }
    return found;
  };
  EXPECT_EQ(peaks(peak_remote.out), peaks(peak_here.out));
  EXPECT_EQ(peaks(peak_here.out).size(), 3u) << peak_here.out.substr(0, 2000);
  Shell report = shell(d9("report s3://" + std::string(kBucket) + "/fleet --service svc-a" +
                          window + " -o " + dir_ + "/report.html"));
  ASSERT_EQ(report.status, 0) << report.err;
  std::ifstream page(dir_ + "/report.html");
  std::string html((std::istreambuf_iterator<char>(page)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find("steady_leaf"), std::string::npos) << "the page holds the sites";
  // --sample N: N segments spread over the window, the first and the last among them.
  Shell sampled = shell(
      d9("summary s3://" + std::string(kBucket) + "/fleet --service svc-a --sample 2" + window));
  ASSERT_EQ(sampled.status, 0) << sampled.err;
  EXPECT_NE(sampled.out.find("2 segment(s)"), std::string::npos) << sampled.out;
  // Per-path selection: two hosts of one service side by side.
  std::string base = "'s3://" + std::string(kBucket) + "/fleet?service=svc-a&host=";
  Shell diff = shell(d9("diff " + base + "host-1' " + base + "host-2'"));
  ASSERT_EQ(diff.status, 0) << diff.err;
  EXPECT_NE(diff.out.find("A: s3://d9-test/fleet?service=svc-a&host=host-1 ("), std::string::npos)
      << diff.out;
  EXPECT_NE(diff.out.find("B: s3://d9-test/fleet?service=svc-a&host=host-2 ("), std::string::npos);
  EXPECT_NE(diff.out.find("steady_leaf"), std::string::npos);
  // d9 fetch gives the same objects, byte for byte, and raw with --decompress.
  Shell fetch = shell(d9("fetch s3://" + std::string(kBucket) + "/fleet --service svc-b -o " +
                         dir_ + "/fetched --decompress"));
  ASSERT_EQ(fetch.status, 0) << fetch.err;
  size_t raw = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ + "/fetched")) {
    if (!e.is_regular_file()) continue;
    EXPECT_TRUE(e.path().string().ends_with(".bin")) << e.path();
    EXPECT_NE(e.path().string().find("/svc-b/host-3/"), std::string::npos) << e.path();
    decode::Trace t = decode::LoadTrace(e.path().string());
    EXPECT_EQ(t.container, decode::Container::kRaw);
    EXPECT_TRUE(t.error.empty());
    ++raw;
  }
  size_t svc_b = 0;
  for (const auto& [key, size] : sizes_) svc_b += key.find("/svc-b/") != std::string::npos;
  EXPECT_EQ(raw, svc_b);
}

}  // namespace
}  // namespace d9::test
