// SPDX-License-Identifier: Apache-2.0
// `thptrace loadgen` flag parsing and exit codes, without a Redis server.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "loadgen/command.h"

namespace thptrace::loadgen {
namespace {

using namespace std::chrono_literals;

LoadgenCommand parse(std::vector<const char*> args) {
  args.insert(args.begin(), "loadgen");
  return parse_loadgen_command(static_cast<int>(args.size()), args.data());
}

int run_main(std::vector<std::string> args, std::string* err = nullptr) {
  args.insert(args.begin(), "loadgen");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  const int rc = loadgen_main(static_cast<int>(args.size()), argv.data());
  const std::string captured = testing::internal::GetCapturedStderr();
  testing::internal::GetCapturedStdout();
  if (err != nullptr) *err = captured;
  return rc;
}

TEST(LoadgenCommand, DefaultsMatchTheDocumentedOnes) {
  const LoadgenCommand c = parse({});
  EXPECT_EQ(c.options.connection.host, "127.0.0.1");
  EXPECT_EQ(c.options.connection.port, 6379);
  EXPECT_TRUE(c.load);
  EXPECT_FALSE(c.load_only);
  EXPECT_EQ(c.options.batch, 80u);
  EXPECT_EQ(c.options.writers, 0u);
  EXPECT_EQ(c.options.rate, 0.0);
  EXPECT_EQ(c.options.duration, 10s);
  EXPECT_FALSE(c.options.read_only);
  EXPECT_EQ(c.options.interval, 100ms);
  EXPECT_EQ(c.options.connection.io_timeout, 10s);
}

TEST(LoadgenCommand, ParsesEveryFlag) {
  const LoadgenCommand c = parse({"--host",   "localhost",   "--port",    "6390",          "--password-file",
                                  "/run/pw",  "--keys",      "800000",    "--value-size",  "400",
                                  "--seed",   "7",           "--no-load", "--writers",     "6",
                                  "--batch",  "40",          "--rate",    "1000",          "--duration",
                                  "2.5",      "--read-only", "--csv",     "out.csv",       "--json",
                                  "out.json", "--timeout",   "0.5",       "--interval-ms", "50"});
  EXPECT_EQ(c.options.connection.host, "localhost");
  EXPECT_EQ(c.options.connection.port, 6390);
  EXPECT_EQ(c.password_file, "/run/pw");
  EXPECT_EQ(c.options.dataset.keys, 800'000u);
  EXPECT_EQ(c.options.dataset.value_size, 400u);
  EXPECT_EQ(c.options.dataset.seed, 7u);
  EXPECT_FALSE(c.load);
  EXPECT_EQ(c.options.writers, 6u);
  EXPECT_EQ(c.options.batch, 40u);
  EXPECT_EQ(c.options.rate, 1000.0);
  EXPECT_EQ(c.options.duration, 2500ms);
  EXPECT_TRUE(c.options.read_only);
  EXPECT_EQ(c.csv_path, "out.csv");
  EXPECT_EQ(c.json_path, "out.json");
  EXPECT_EQ(c.options.connection.io_timeout, 500ms);
  EXPECT_EQ(c.options.interval, 50ms);
}

TEST(LoadgenCommand, RejectsBadUsage) {
  EXPECT_THROW(parse({"--load", "--no-load"}), UsageError);
  EXPECT_THROW(parse({"--load-only", "--no-load"}), UsageError);
  EXPECT_THROW(parse({"--writers", "-1"}), UsageError);  // would wrap if parsed as unsigned
  EXPECT_THROW(parse({"--batch", "0"}), UsageError);
  EXPECT_THROW(parse({"--keys", "0"}), UsageError);
  EXPECT_THROW(parse({"--rate", "-5"}), UsageError);
  EXPECT_THROW(parse({"--rate", "nan"}), UsageError);
  EXPECT_THROW(parse({"--port", "70000"}), UsageError);
  EXPECT_THROW(parse({"--port", "abc"}), UsageError);
  EXPECT_THROW(parse({"--frobnicate"}), UsageError);
  EXPECT_THROW(parse({"stray"}), UsageError);
}

TEST(LoadgenCommand, BadUsageExitsTwoWithOneSentence) {
  std::string err;
  EXPECT_EQ(run_main({"--writers", "many"}, &err), 2);
  EXPECT_TRUE(err.starts_with("thptrace loadgen: ")) << err;
  EXPECT_NE(err.find("--help"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), err.size() - 1) << err;
}

TEST(LoadgenCommand, HelpExitsZero) { EXPECT_EQ(run_main({"--help"}), 0); }

TEST(LoadgenCommand, UnreachableRedisExitsOneNamingTheAddress) {
  // A port bound but never listened on refuses connections, and no other process can take it.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));

  std::string err;
  EXPECT_EQ(run_main({"--port", port, "--duration", "1"}, &err), 1);
  EXPECT_NE(err.find("cannot connect to Redis at 127.0.0.1:" + port), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), err.size() - 1) << err;
  close(fd);
}

TEST(LoadgenCommand, UnreadablePasswordFileExitsOne) {
  std::string err;
  EXPECT_EQ(run_main({"--password-file", "/nonexistent/thptrace-password"}, &err), 1);
  EXPECT_NE(err.find("password file"), std::string::npos) << err;
}

}  // namespace
}  // namespace thptrace::loadgen
