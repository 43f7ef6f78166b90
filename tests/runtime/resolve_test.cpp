// SPDX-License-Identifier: Apache-2.0
// An address is mapped to its server's host process by the kernel's socket tables (proc/resolve.h),
// checked here on a plain host: the capture finds the pid from --redis alone, and refuses a --pid that
// is not that server. The container cases are in container_test.cpp.
#include <unistd.h>

#include <filesystem>

#include "harness.h"
#include "redis/locate.h"

using namespace thptrace::test;
using namespace std::chrono_literals;

TEST(Resolve, HostRedisByItsAddress) {
  RedisServer a;
  RedisServer b;
  const auto found_a = thptrace::redis::locate_server(*thptrace::redis::parse_address(a.address()), "", "");
  EXPECT_EQ(found_a.pid, a.pid()) << found_a.error;
  EXPECT_NE(found_a.how.find("socket of our connection"), std::string::npos) << found_a.how;
  const auto found_b = thptrace::redis::locate_server(*thptrace::redis::parse_address(b.address()), "", "");
  EXPECT_EQ(found_b.pid, b.pid()) << found_b.error;
  // Nothing listens there: an error sentence, no pid.
  const auto none = thptrace::redis::locate_server({"127.0.0.1", free_port()}, "", "");
  EXPECT_EQ(none.pid, 0);
  EXPECT_FALSE(none.error.empty());
}

TEST(Resolve, CaptureRefusesAPidThatIsNotTheServer) {
  RedisServer a;
  RedisServer b;
  Process p({thptrace_bin(), "--pid", std::to_string(b.pid()), "--redis", a.address(), "--duration", "1"});
  EXPECT_EQ(p.wait(30s), 2) << p.err();
  const std::string err = p.err();
  EXPECT_NE(err.find("--pid " + std::to_string(b.pid()) + " is not the server at " + a.address() +
                     ": that is host pid " + std::to_string(a.pid())),
            std::string::npos)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one sentence, one line: " << err;
}

TEST(Resolve, CaptureFindsThePidFromTheAddress) {
  REQUIRE_BPF();
  RedisServer r;
  const std::string dir = make_temp_dir("thptrace-resolve-");
  Process p({thptrace_bin(), "--redis", r.address(), "--duration", "1", "--json", dir + "/r.json"});
  ASSERT_EQ(p.wait(60s), 0) << p.err();
  const auto report = read_json(dir + "/r.json");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(report["target"]["pid"], r.pid());
  EXPECT_EQ(report["probes"]["redis"], "uprobe");
  // --pid and --redis naming the same process is fine.
  Process same({thptrace_bin(), "--pid", std::to_string(r.pid()), "--redis", r.address(), "--duration", "0.5"});
  EXPECT_EQ(same.wait(60s), 0) << same.err();
}
