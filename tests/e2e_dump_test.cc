// `d9 dump` end to end: a running program under libd9.so is asked, by pid, boot id,
// directory or --all, to seal its current segment now; the file d9 prints must hold the
// program's live heap as it is at that moment (Libd9LiveAllocation events at the known
// site, with symbols), while the program runs on undisturbed.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/test_util.h"

namespace d9::test {
namespace {

class E2EDump : public TempDirTest {
 protected:
  E2EDump() : TempDirTest("dump") {}

  // Starts dump_subject with `args` and waits for its "ready" line; the subject's sites.
  std::unique_ptr<Spawned> start(const std::vector<std::string>& args, const std::string& out,
                                 std::vector<Site>* sites, std::string* ready_pid) {
    std::vector<std::string> argv = {program("dump_subject")};
    argv.insert(argv.end(), args.begin(), args.end());
    log_ = dir_ + "/subject" + std::to_string(++started_) + ".log";
    // 64 KiB: every 1 MiB block is sampled (p = 1 - e^-16), so the live set is exact.
    auto s = std::make_unique<Spawned>(
        argv, std::vector<std::string>{"D9_OUTPUT=" + out, "D9_SAMPLE_RATE=65536"}, true, log_);
    for (int i = 0; i < 500; ++i) {
      std::string text = read_file(log_);
      size_t at = text.find("ready ");
      if (at != std::string::npos && text.find('\n', at) != std::string::npos) {
        *sites = parse_sites(text);
        *ready_pid = text.substr(at + 6, text.find('\n', at) - at - 6);
        return s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "subject not ready: " << read_file(log_);
    return s;
  }

  // Live allocations at held_site in the segment `path`, and whether held_site is named
  // by the segment's symbols.
  struct Held {
    uint64_t count = 0, bytes = 0;
    bool named = false;
  };
  static Held held_in(const std::string& path, const std::vector<Site>& sites) {
    Held h;
    TraceWithLiveset d = load_with_liveset(path);
    EXPECT_EQ(d.trace.error, "") << path;
    EXPECT_EQ(d.trace.metadata.count("segment.complete"), 1u) << "sealed: " << path;
    for (const LiveAllocation& a : d.live) {
      const Site* site = a.stack.empty() ? nullptr : site_of(sites, a.stack[0]);
      if (site && site->name == "held_site") {
        ++h.count;
        h.bytes += a.size;
      }
    }
    for (const decode::SymbolTableEntry& e : d.trace.symbols) h.named |= e.name == "held_site";
    return h;
  }

  std::string log_;
  int started_ = 0;
};

TEST_F(E2EDump, ByPidSealsTheLiveHeapAsItIsNow) {
  std::string out = dir_ + "/out";
  std::vector<Site> sites;
  std::string pid;
  auto subject = start({"hold", "48"}, out, &sites, &pid);
  ASSERT_FALSE(pid.empty());

  auto t0 = std::chrono::steady_clock::now();
  Shell d9 = shell(d9_binary() + " dump " + pid);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(d9.status, 0) << d9.err;
  EXPECT_EQ(d9.err, "");
  std::string path = d9.out.substr(0, d9.out.find('\n'));
  ASSERT_EQ(access(path.c_str(), R_OK), 0) << d9.out;
  EXPECT_NE(path.find("-" + pid + "/trace.0.bin"), std::string::npos) << path;
  EXPECT_LT(secs, 5.0) << "an idle writer answers within about 100 ms";

  Held h = held_in(path, sites);
  EXPECT_EQ(h.count, 48u);
  EXPECT_EQ(h.bytes, 48u << 20);
  EXPECT_TRUE(h.named) << "the dumped segment carries symbols";
  EXPECT_TRUE(subject->running()) << "the program runs on";

  // The program keeps recording into the next segment; a second dump seals that one.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Shell again = shell(d9_binary() + " dump " + pid);
  ASSERT_EQ(again.status, 0) << again.err;
  std::string second = again.out.substr(0, again.out.find('\n'));
  EXPECT_NE(second, path);
  EXPECT_NE(second.find("/trace.1.bin"), std::string::npos) << second;
  EXPECT_EQ(held_in(second, sites).count, 48u) << "still live, carried in the next seal";
  // No request or reply files are left behind in the process's directory.
  std::string proc_dir = path.substr(0, path.rfind('/'));
  for (const auto& e : std::filesystem::directory_iterator(proc_dir)) {
    EXPECT_EQ(e.path().filename().string().find("d9-dump"), std::string::npos) << e.path();
  }
  EXPECT_EQ(subject->stop(SIGTERM, 5000), 128 + SIGTERM);
}

TEST_F(E2EDump, ByBootIdDirectoryAndAll) {
  std::string out = dir_ + "/out";
  std::vector<Site> sites_a, sites_b;
  std::string pid_a, pid_b;
  auto a = start({"hold", "8"}, out, &sites_a, &pid_a);
  auto b = start({"hold", "16"}, out, &sites_b, &pid_b);
  ASSERT_FALSE(pid_a.empty());
  ASSERT_FALSE(pid_b.empty());
  std::string dir_a, dir_b;
  for (const std::string& d : list_dirs(out)) {
    if (d.ends_with("-" + pid_a)) dir_a = d;
    if (d.ends_with("-" + pid_b)) dir_b = d;
  }
  // A process directory exists once the first sample was written (within 100 ms).
  for (int i = 0; i < 100 && (dir_a.empty() || dir_b.empty()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (const std::string& d : list_dirs(out)) {
      if (d.ends_with("-" + pid_a)) dir_a = d;
      if (d.ends_with("-" + pid_b)) dir_b = d;
    }
  }
  ASSERT_FALSE(dir_a.empty());
  ASSERT_FALSE(dir_b.empty());
  std::string boot_a = dir_a.substr(dir_a.rfind('/') + 1);

  Shell by_boot = shell(d9_binary() + " dump --dir " + out + " " + boot_a);
  ASSERT_EQ(by_boot.status, 0) << by_boot.err;
  EXPECT_EQ(held_in(by_boot.out.substr(0, by_boot.out.find('\n')), sites_a).count, 8u);

  Shell by_dir = shell(d9_binary() + " dump " + dir_b);
  ASSERT_EQ(by_dir.status, 0) << by_dir.err;
  EXPECT_EQ(held_in(by_dir.out.substr(0, by_dir.out.find('\n')), sites_b).count, 16u);

  Shell all = shell(d9_binary() + " dump --all " + out);
  ASSERT_EQ(all.status, 0) << all.err;
  std::istringstream lines(all.out);
  std::string line;
  int from_a = 0, from_b = 0;
  while (std::getline(lines, line)) {
    if (line.rfind(dir_a + "/", 0) == 0) from_a += held_in(line, sites_a).count == 8;
    if (line.rfind(dir_b + "/", 0) == 0) from_b += held_in(line, sites_b).count == 16;
  }
  EXPECT_EQ(from_a, 1) << all.out;
  EXPECT_EQ(from_b, 1) << all.out;

  // A process that has exited does not answer; d9 says so and exits 1.
  a->stop(SIGKILL, 5000);
  b->stop(SIGKILL, 5000);
  Shell gone = shell(d9_binary() + " dump --timeout 0.5 " + dir_a);
  EXPECT_EQ(gone.status, 1);
  EXPECT_NE(gone.err.find("d9: "), std::string::npos) << gone.err;
}

TEST_F(E2EDump, UnknownTargetsGetOneClearLine) {
  Shell none = shell(d9_binary() + " dump 999999999");
  EXPECT_EQ(none.status, 1);
  EXPECT_EQ(none.err, "d9: no process 999999999\n");
  // A process that is not profiled has no trace directory.
  Shell self = shell(d9_binary() + " dump --dir " + dir_ + " " + std::to_string(getpid()));
  EXPECT_EQ(self.status, 1);
  EXPECT_NE(self.err.find("has no trace directory"), std::string::npos) << self.err;
  Shell usage = shell(d9_binary() + " dump");
  EXPECT_EQ(usage.status, 2);
}

// A worker that switched from root to another user: its directory is its own, and the
// request (a file root writes there) still reaches its writer.
TEST_F(E2EDump, WorkerThatDroppedRootAnswers) {
  if (geteuid() != 0) GTEST_SKIP() << "switching users needs root";
  constexpr unsigned kNobody = 65534;
  ASSERT_EQ(chmod(dir_.c_str(), 0711), 0);
  std::string out = dir_ + "/out";
  std::vector<Site> sites;
  std::string worker;
  auto subject = start({"drop-user", std::to_string(kNobody), "12"}, out, &sites, &worker);
  ASSERT_FALSE(worker.empty());
  Shell d9 = shell(d9_binary() + " dump " + worker);
  ASSERT_EQ(d9.status, 0) << d9.err;
  std::string path = d9.out.substr(0, d9.out.find('\n'));
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0) << path;
  EXPECT_EQ(st.st_uid, kNobody);
  EXPECT_EQ(held_in(path, sites).count, 12u);
  subject->stop(SIGKILL, 5000);
}

}  // namespace
}  // namespace d9::test
