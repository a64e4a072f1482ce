// The environment table: values, suffixes, and what happens with bad input.
#include "preload/options.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace d9 {
namespace {

Options parse(std::vector<std::string> env) {
  std::vector<char*> ptrs;
  for (auto& e : env) ptrs.push_back(e.data());
  ptrs.push_back(nullptr);
  Options o;
  parse_options(ptrs.data(), &o);
  return o;
}

TEST(Options, Defaults) {
  Options o = parse({"PATH=/bin", "HOME=/root"});
  EXPECT_STREQ(o.output, "./d9-traces");
  EXPECT_EQ(o.sample_rate, 524288u);
  EXPECT_TRUE(o.liveset);
  EXPECT_EQ(o.cpu_hz, 99u);
  EXPECT_EQ(o.max_file_size, 32u << 20);
  EXPECT_EQ(o.rotate_secs, 60u);
  EXPECT_EQ(o.max_total_size, 512u << 20);
  EXPECT_EQ(o.compress, Compression::kZstd);
  EXPECT_EQ(o.stack_depth, 64u);
  EXPECT_EQ(o.ring_slots, 4096u);
  EXPECT_TRUE(o.enable);
  EXPECT_EQ(o.symbolize, Symbolize::kOn);
  EXPECT_FALSE(o.has_seed);
}

TEST(Options, Sizes) {
  uint64_t v;
  EXPECT_TRUE(parse_size("512", &v));
  EXPECT_EQ(v, 512u);
  EXPECT_TRUE(parse_size("64K", &v));
  EXPECT_EQ(v, 65536u);
  EXPECT_TRUE(parse_size("32m", &v));
  EXPECT_EQ(v, 32u << 20);
  EXPECT_TRUE(parse_size("2G", &v));
  EXPECT_EQ(v, 2ull << 30);
  EXPECT_FALSE(parse_size("", &v));
  EXPECT_FALSE(parse_size("K", &v));
  EXPECT_FALSE(parse_size("-1", &v));
  EXPECT_FALSE(parse_size("1.5M", &v));
  EXPECT_FALSE(parse_size("99999999999999999999", &v));
  EXPECT_FALSE(parse_size("17179869184G", &v));  // overflows 64 bits
}

TEST(Options, ValidValues) {
  Options o = parse({"D9_OUTPUT=/tmp/x", "D9_SAMPLE_RATE=1", "D9_LIVESET=0", "D9_CPU_HZ=0",
                     "D9_MAX_FILE_SIZE=64K", "D9_ROTATE_SECS=1", "D9_MAX_TOTAL_SIZE=1G",
                     "D9_COMPRESS=gzip", "D9_SERVICE=api", "D9_STACK_DEPTH=16", "D9_RING_SLOTS=16",
                     "D9_ENABLE=0", "D9_SEED=99"});
  EXPECT_STREQ(o.output, "/tmp/x");
  EXPECT_EQ(o.sample_rate, 1u);
  EXPECT_FALSE(o.liveset);
  EXPECT_EQ(o.cpu_hz, 0u);
  EXPECT_EQ(o.max_file_size, 65536u);
  EXPECT_EQ(o.rotate_secs, 1u);
  EXPECT_EQ(o.max_total_size, 1u << 30);
  EXPECT_EQ(o.compress, Compression::kGzip);
  EXPECT_STREQ(o.service, "api");
  EXPECT_EQ(o.stack_depth, 16u);
  EXPECT_EQ(o.ring_slots, 16u);
  EXPECT_FALSE(o.enable);
  EXPECT_TRUE(o.has_seed);
  EXPECT_EQ(o.seed, 99u);
}

TEST(Options, SymbolizeLevels) {
  EXPECT_EQ(parse({"D9_SYMBOLIZE=0"}).symbolize, Symbolize::kOff);
  EXPECT_EQ(parse({"D9_SYMBOLIZE=off"}).symbolize, Symbolize::kOff);
  EXPECT_EQ(parse({"D9_SYMBOLIZE=1"}).symbolize, Symbolize::kOn);
  EXPECT_EQ(parse({"D9_SYMBOLIZE=full"}).symbolize, Symbolize::kFull);
  // The last one wins, as for every variable.
  EXPECT_EQ(parse({"D9_SYMBOLIZE=full", "D9_SYMBOLIZE=0"}).symbolize, Symbolize::kOff);
}

TEST(Options, InvalidValuesKeepDefaultsAndSayWhy) {
  testing::internal::CaptureStderr();
  Options o =
      parse({"D9_SAMPLE_RATE=lots", "D9_LIVESET=maybe", "D9_COMPRESS=lz4", "D9_STACK_DEPTH=100000",
             "D9_RING_SLOTS=2", "D9_TYPO=1", "D9_SEED=x", "D9_SYMBOLIZE=Full"});
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(o.sample_rate, 524288u);
  EXPECT_TRUE(o.liveset);
  EXPECT_EQ(o.compress, Compression::kZstd);
  EXPECT_EQ(o.stack_depth, 64u);
  EXPECT_EQ(o.ring_slots, 4096u);
  EXPECT_FALSE(o.has_seed);
  EXPECT_EQ(o.symbolize, Symbolize::kOn);
  EXPECT_NE(err.find("d9: invalid D9_SAMPLE_RATE=\"lots\""), std::string::npos) << err;
  EXPECT_NE(err.find("using D9_SAMPLE_RATE=524288"), std::string::npos) << err;
  EXPECT_NE(err.find("d9: invalid D9_LIVESET=\"maybe\""), std::string::npos) << err;
  EXPECT_NE(err.find("D9_COMPRESS=\"lz4\""), std::string::npos) << err;
  EXPECT_NE(err.find("D9_STACK_DEPTH=\"100000\""), std::string::npos) << err;
  EXPECT_NE(err.find("D9_RING_SLOTS=\"2\""), std::string::npos) << err;
  EXPECT_NE(err.find("unknown variable D9_TYPO"), std::string::npos) << err;
  EXPECT_NE(err.find("d9: invalid D9_SYMBOLIZE=\"Full\" (expected 0, 1 or full); using "
                     "D9_SYMBOLIZE=1"),
            std::string::npos)
      << err;
  // One line per problem.
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 8) << err;
}

TEST(Options, S3Shipping) {
  Options off = parse({"PATH=/bin"});
  EXPECT_STREQ(off.s3_bucket, "");  // off unless a bucket is named
  EXPECT_EQ(off.s3_exit_timeout, 5u);
  testing::internal::CaptureStderr();
  Options o = parse({"D9_S3_BUCKET=traces", "D9_S3_PREFIX=/fleet/prod/", "D9_S3_EXIT_TIMEOUT=0",
                     "D9_S3_ENDPOINT=http://127.0.0.1:9000", "D9_HOST=web-3"});
  Options bad = parse({"D9_S3_EXIT_TIMEOUT=forever"});
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_STREQ(o.s3_bucket, "traces");
  EXPECT_STREQ(o.s3_prefix, "fleet/prod");
  EXPECT_EQ(o.s3_exit_timeout, 0u);
  EXPECT_EQ(bad.s3_exit_timeout, 5u);
  // The endpoint and host are libd9_ship.so's to read: known, not "unknown variable".
  EXPECT_EQ(err.find("D9_S3_ENDPOINT"), std::string::npos) << err;
  EXPECT_EQ(err.find("D9_HOST"), std::string::npos) << err;
  EXPECT_NE(err.find("invalid D9_S3_EXIT_TIMEOUT=\"forever\""), std::string::npos) << err;
}

TEST(Options, NullEnvironmentKeepsDefaults) {
  Options o;
  parse_options(nullptr, &o);
  EXPECT_EQ(o.sample_rate, 524288u);
}

}  // namespace
}  // namespace d9
