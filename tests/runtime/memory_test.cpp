// SPDX-License-Identifier: Apache-2.0
// The report's memory section against a real memory cgroup: a Redis charged to a cgroup whose limit
// sits 15% above its usage, a BGSAVE under writes, and the capture's figures checked against the
// cgroup's own files (cgroup v1's memory controller here; v2 where the host has it there).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.h"
#include "proc/proc.h"

using namespace std::chrono_literals;
using namespace thptrace;
using namespace thptrace::test;

TEST(Memory, CgroupLimitAndPeakMatchTheCgroupsOwnFiguresAndCloseIsAFinding) {
  REQUIRE_BPF();
  MemoryCgroup cg;
  ASSERT_TRUE(cg.ok()) << "no memory cgroup controller to make a test cgroup in (v1 memory or v2 with +memory)";
  RedisServer r({"--save", "", "--appendonly", "no"});
  ASSERT_TRUE(cg.add(r.pid()));
  // Charged to the cgroup from here: the keys are allocated inside it.
  r.cmd({"DEBUG", "POPULATE", "150000", "key", "256"});
  std::this_thread::sleep_for(200ms);
  const uint64_t usage = cg.usage();
  ASSERT_GT(usage, 30u << 20);
  const uint64_t limit = (static_cast<uint64_t>(static_cast<double>(usage) / 0.85) + 4095) / 4096 * 4096;
  ASSERT_TRUE(cg.set_limit(limit));
  ASSERT_EQ(cg.limit(), limit);

  const std::string dir = make_temp_dir("thptrace-mem-");
  const std::string json = dir + "/report.json";
  Process tracer(
      {thptrace_bin(), "--pid", std::to_string(r.pid()), "--redis", r.address(), "--duration", "3", "--json", json});
  // Attached before the fork (under ASan loading the programs can take longer than a fixed second).
  ASSERT_TRUE(tracer.wait_stderr_line("tracing pid", 30s)) << tracer.err();
  std::this_thread::sleep_for(200ms);
  r.cmd({"BGSAVE"});
  for (int i = 0; i < 500; i++) r.cmd({"SET", "key:" + std::to_string(i * 200), "x"});
  ASSERT_EQ(tracer.wait(60s), 0) << tracer.err();
  const auto j = read_json(json);
  std::filesystem::remove_all(dir);

  ASSERT_TRUE(j.contains("memory")) << j.dump(2);
  const auto& c = j["memory"]["cgroup"];
  ASSERT_TRUE(c.is_object()) << j["memory"].dump(2);
  EXPECT_EQ(c["version"], cg.version());
  EXPECT_EQ(c["path"], cg.dir());
  EXPECT_EQ(c["limit_bytes"], limit);
  // Sampled every 100 ms, so at most the kernel's own high-water mark, read after the capture.
  const uint64_t kernel_peak = cg.read("memory.max_usage_in_bytes", "memory.peak");
  EXPECT_LE(c["usage_max_bytes"].get<uint64_t>(), kernel_peak);
  EXPECT_GE(c["usage_max_bytes"].get<uint64_t>(), usage * 95 / 100);
  EXPECT_EQ(c["peak_bytes"].get<uint64_t>(), kernel_peak);
  EXPECT_EQ(c["headroom_bytes"], limit - c["usage_max_bytes"].get<uint64_t>());
  EXPECT_EQ(c["oom_kills"], 0);
  EXPECT_GT(j["memory"]["copied_bytes"].get<uint64_t>(), 0u);
  EXPECT_TRUE(j["memory"]["mem_available_min_bytes"].is_number());
  bool said = false;
  for (const auto& f : j["findings"])
    said = said || f["text"].get<std::string>().find("memory cgroup's usage peaked") != std::string::npos;
  EXPECT_TRUE(said) << j["findings"].dump(2);

  // The daemon exports the same cgroup's figures for the alert on low headroom during a fork.
  const int port = free_port();
  Process daemon({thptrace_bin(), "daemon", "--listen", "127.0.0.1:" + std::to_string(port), "--redis", r.address()});
  const std::string target = "{target=\"" + r.address() + "\"}";
  std::optional<double> got_limit, got_usage;
  for (int i = 0; i < 100 && !(got_limit && got_usage); i++) {
    std::this_thread::sleep_for(200ms);
    const std::string s = http_get(port, "/metrics").value_or("");
    got_limit = metric_value(s, "thptrace_memory_cgroup_limit_bytes" + target);
    got_usage = metric_value(s, "thptrace_memory_cgroup_usage_bytes" + target);
  }
  ASSERT_TRUE(got_limit && got_usage) << daemon.err();
  EXPECT_EQ(*got_limit, static_cast<double>(limit));
  EXPECT_GT(*got_usage, 0.8 * static_cast<double>(limit));
  EXPECT_LE(*got_usage, static_cast<double>(limit));
  ::kill(daemon.pid(), SIGTERM);
  EXPECT_EQ(daemon.wait(30s), 0) << daemon.err();
}
