// S3 end-to-end helpers: a real S3-compatible server (s3rver 3.7 from npm, installed by
// scripts/s3rver.sh into tests/s3/node_modules) on 127.0.0.1 behind a SigV4 check, and
// Debian's `aws` CLI as the independent client. Missing tools fail the test
// (scripts/test.sh installs them).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace d9::test {

inline constexpr char kS3Key[] = "S3RVER";  // s3rver's built-in account
inline constexpr char kBucket[] = "d9-test";

inline std::string s3rver_script() {
  return std::string(D9_SOURCE_DIR) + "/tests/s3/node_modules/s3rver/bin/s3rver.js";
}

// The environment every S3 client here gets: credentials, region, no user config.
inline std::vector<std::string> s3_env(int port) {
  return {"AWS_ACCESS_KEY_ID=" + std::string(kS3Key),
          "AWS_SECRET_ACCESS_KEY=" + std::string(kS3Key),
          "AWS_REGION=us-east-1",
          "AWS_CONFIG_FILE=/dev/null",
          "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
          "AWS_EC2_METADATA_DISABLED=true",
          "D9_S3_ENDPOINT=http://127.0.0.1:" + std::to_string(port)};
}

// s3rver with its data in `data_dir` (kept across restarts) and its bucket made, behind
// tests/s3/sigv4_gate.py on `port`: s3rver checks access keys only, the gate checks every
// signature with the aws CLI's own signer. Clients talk to the gate.
class S3Server {
 public:
  S3Server(const std::string& data_dir, int port)
      : data_dir_(data_dir), port_(port), inner_port_(free_tcp_port()) {}
  ~S3Server() { stop(); }

  void start() {
    ASSERT_TRUE(std::filesystem::exists(s3rver_script()))
        << s3rver_script() << " is missing: run scripts/s3rver.sh (scripts/test.sh does)";
    std::filesystem::create_directories(data_dir_);
    server_ = std::make_unique<Spawned>(
        std::vector<std::string>{"node", s3rver_script(), "-d", data_dir_, "-a", "127.0.0.1", "-p",
                                 std::to_string(inner_port_), "--configure-bucket", kBucket,
                                 "--silent"},
        std::vector<std::string>{}, false, data_dir_ + ".log");
    gate_ = std::make_unique<Spawned>(
        std::vector<std::string>{
            "/usr/bin/python3", std::string(D9_SOURCE_DIR) + "/tests/s3/sigv4_gate.py",
            std::to_string(port_), std::to_string(inner_port_), kS3Key, kS3Key, "us-east-1"},
        std::vector<std::string>{}, false, data_dir_ + ".gate.log");
    ASSERT_TRUE(wait_for_port(inner_port_, 15000, server_.get())) << "s3rver did not start";
    ASSERT_TRUE(wait_for_port(port_, 15000, gate_.get())) << "sigv4_gate.py did not start";
  }
  void stop() {
    if (gate_) gate_->stop(SIGKILL, 5000);
    if (server_) server_->stop(SIGKILL, 5000);
    gate_.reset();
    server_.reset();
  }
  int port() const { return port_; }

 private:
  std::string data_dir_;
  int port_, inner_port_;
  std::unique_ptr<Spawned> server_, gate_;
};

// Runs Debian's aws CLI (/usr/bin/aws) against the server.
inline Shell aws(int port, const std::string& args) {
  std::string env;
  for (const std::string& kv : s3_env(port)) {
    if (kv.rfind("D9_", 0) != 0) env += kv + " ";
  }
  return shell("env " + env +
               "/usr/bin/aws --endpoint-url http://127.0.0.1:" + std::to_string(port) + " " + args);
}

// Keys under s3://kBucket/prefix, as `aws s3 ls --recursive` prints them.
inline std::vector<std::string> aws_keys(int port, const std::string& prefix) {
  Shell s = aws(port, "s3 ls --recursive s3://" + std::string(kBucket) + "/" + prefix);
  std::vector<std::string> keys;
  size_t at = 0;
  while (at < s.out.size()) {
    size_t nl = s.out.find('\n', at);
    std::string line = s.out.substr(at, nl - at);
    at = nl == std::string::npos ? s.out.size() : nl + 1;
    // "2026-11-24 12:18:05      37993 key"
    size_t last = line.find_last_of(' ');
    if (last != std::string::npos && line.size() > 20) keys.push_back(line.substr(last + 1));
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace d9::test
