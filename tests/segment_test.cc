// Segment files in a hostile process: d9's descriptor is out of the way of low numbers,
// and a program that closes it and reuses the number never receives trace bytes.
#include "writer/segment.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "writer/trace.h"

namespace d9 {
namespace {

namespace fs = std::filesystem;

// The descriptor number this process has open on `path`, or -1.
int fd_of(const std::string& path) {
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(e.path(), ec) == path) return std::stoi(e.path().filename().string());
  }
  return -1;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class SegmentFd : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/d9-segment-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(SegmentFd, DescriptorSitsAboveTheLowNumbers) {
  Segment seg;
  ASSERT_TRUE(seg.open(dir_, "trace", 0, {{"service", "t"}})) << seg.error();
  int fd = fd_of(seg.active_path());
  EXPECT_GE(fd, 64) << "programs reuse low numbers";
  EXPECT_EQ(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
}

// bash closes a pipe's end twice; with d9's segment at that number in between, the second
// close takes d9's descriptor and `exec 5>file` reuses it. Nothing of the trace may reach
// the program's file, the program's descriptor stays open, and the segment is complete.
TEST_F(SegmentFd, ProgramReusingTheNumberNeverReceivesTraceBytes) {
  Segment seg;
  ASSERT_TRUE(seg.open(dir_, "trace", 0, {{"service", "t"}})) << seg.error();
  int fd = fd_of(seg.active_path());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(close(fd), 0);  // the program's stray close
  std::string mine = dir_ + "/program.txt";
  int host = open(mine.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(host, 0);
  ASSERT_EQ(dup2(host, fd), fd);  // ... and its reuse of the number
  close(host);

  const uint64_t stack[] = {0x401000, 0x402000};
  seg.events().alloc_event(1000, 7, 64, 0x1000, stack);
  seg.note_events(1);
  ASSERT_TRUE(seg.flush()) << seg.error();
  ASSERT_EQ(write(fd, "hello\n", 6), 6);
  seg.events().alloc_event(2000, 7, 128, 0x2000, stack);
  seg.note_events(1);
  std::string sealed = seg.seal({});
  ASSERT_FALSE(sealed.empty()) << seg.error();

  EXPECT_EQ(fcntl(fd, F_GETFD), 0) << "the program's descriptor was closed by d9";
  close(fd);
  EXPECT_EQ(read_text(mine), "hello\n");
  decode::Trace t = decode::LoadTrace(sealed);
  EXPECT_TRUE(t.ok()) << t.error;
  EXPECT_EQ(t.allocs.size(), 2u);
  EXPECT_EQ(t.metadata["segment.complete"], "true");
}

}  // namespace
}  // namespace d9
