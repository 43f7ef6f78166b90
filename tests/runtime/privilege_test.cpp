// SPDX-License-Identifier: Apache-2.0
// thptrace with only the capabilities the systemd unit grants (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE,
// CAP_DAC_READ_SEARCH), against a Redis running as another user; and what every thread of a running
// daemon and capture holds, read from /proc/PID/task/*/status.
#include <fmt/core.h>
#include <linux/capability.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.h"

using namespace thptrace::test;
using namespace std::chrono_literals;

namespace {
const std::string kUnitCaps = "-all,+bpf,+perfmon,+sys_ptrace,+dac_read_search";

struct ThreadCaps {
  pid_t tid = 0;
  std::string name;
  uint64_t eff = 0, prm = 0, inh = 0, bnd = 0, amb = 0;
};

uint64_t bits(std::initializer_list<int> caps) {
  uint64_t out = 0;
  for (const int c : caps) out |= uint64_t{1} << c;
  return out;
}

std::vector<ThreadCaps> thread_caps(pid_t pid) {
  std::vector<ThreadCaps> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ThreadCaps t;
    t.tid = std::stoi(e.path().filename().string());
    std::ifstream in(e.path() / "status");
    for (std::string line; std::getline(in, line);) {
      const auto hex = [&](const char* key, uint64_t& v) {
        if (line.rfind(key, 0) == 0) v = std::stoull(line.substr(std::strlen(key)), nullptr, 16);
      };
      if (line.rfind("Name:\t", 0) == 0) t.name = line.substr(6);
      hex("CapEff:", t.eff);
      hex("CapPrm:", t.prm);
      hex("CapInh:", t.inh);
      hex("CapBnd:", t.bnd);
      hex("CapAmb:", t.amb);
    }
    out.push_back(t);
  }
  return out;
}

std::string describe(const std::vector<ThreadCaps>& threads) {
  std::string s;
  for (const auto& t : threads)
    s += fmt::format("{} {:<16} eff={:x} prm={:x} inh={:x} bnd={:x} amb={:x}\n", t.tid, t.name, t.eff, t.prm, t.inh,
                     t.bnd, t.amb);
  return s;
}

bool is_http_thread(const ThreadCaps& t) {
  return t.name.rfind("civetweb", 0) == 0 || t.name.rfind("thptrace-http", 0) == 0;
}
}  // namespace

TEST(Privilege, CaptureWithTheUnitsCapabilitiesOnly) {
  REQUIRE_BPF();
  const std::string dir = make_temp_dir("thptrace-priv-");
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  const int port = free_port();
  Process redis({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "redis-server", "--bind", "127.0.0.1",
                 "--port", std::to_string(port), "--dir", dir, "--save", "", "--appendonly", "no"});
  std::unique_ptr<thptrace::redis::Client> c;
  for (int i = 0; i < 100 && !c; ++i) {
    std::string error;
    c = thptrace::redis::Client::connect({"127.0.0.1", port}, "", 2000ms, &error);
    if (!c) std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(c);
  // Without CAP_DAC_OVERRIDE root cannot write into the Redis user's directory.
  const std::string out_dir = make_temp_dir("thptrace-priv-out-");
  const std::string json = out_dir + "/report.json";
  Process tracer({"setpriv", "--inh-caps=" + kUnitCaps, "--bounding-set=" + kUnitCaps, thptrace_bin(), "--pid",
                  std::to_string(redis.pid()), "--redis", "127.0.0.1:" + std::to_string(port), "--duration", "3",
                  "--json", json});
  ASSERT_TRUE(tracer.wait_stderr_line("tracing pid", 30s)) << tracer.err();
  std::this_thread::sleep_for(500ms);
  c->command({"SET", "k", "v"});
  c->command({"BGSAVE"});
  ASSERT_EQ(tracer.wait(60s), 0) << tracer.err();
  const auto j = read_json(json);
  ASSERT_EQ(j["forks"].size(), 1u) << j.dump(2);
  EXPECT_EQ(j["forks"][0]["reason"], "bgsave") << j.dump(2);
  EXPECT_NE(j["probes"]["fork"], "unavailable");
  // Uprobes on another user's process need CAP_SYS_ADMIN on this kernel (measured on 6.18): without
  // it the capture says so and names reasons from INFO.
  EXPECT_TRUE(j["probes"]["redis"] == "uprobe" || j["probes"]["redis"] == "info_polling") << j["probes"].dump();
  c->command({"SHUTDOWN", "NOSAVE"});
  redis.wait(10s);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(out_dir);
}

// The daemon drops to what it keeps before it starts a thread: every thread's bounding set is that
// set, none holds more, and the Redis poller and the HTTP server's threads, which parse what the
// network sends, hold nothing at all.
TEST(Privilege, EveryDaemonThreadHoldsNoMoreThanItNeeds) {
  REQUIRE_BPF();
  RedisServer redis;
  const int port = free_port();
  Process d({thptrace_bin(), "daemon", "--listen", "127.0.0.1:" + std::to_string(port), "--redis", redis.address()});
  ASSERT_TRUE(d.wait_stderr_line("serving metrics", 60s)) << d.err();
  const std::string up = "thptrace_redis_up{target=\"" + redis.address() + "\"}";
  std::optional<double> v;
  for (int i = 0; i < 100 && v != 1.0; ++i, std::this_thread::sleep_for(100ms))
    v = metric_value(http_get(port, "/metrics").value_or(""), up);
  ASSERT_EQ(v, 1.0) << d.err();
  const uint64_t kept = bits({CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH});
  const auto threads = thread_caps(d.pid());
  const std::string all = describe(threads);
  int watchers = 0, http = 0;
  for (const auto& t : threads) {
    EXPECT_EQ(t.bnd, kept) << all;
    EXPECT_EQ(t.prm & ~kept, 0u) << all;
    EXPECT_EQ(t.eff & ~kept, 0u) << all;
    EXPECT_EQ(t.inh, 0u) << all;
    EXPECT_EQ(t.amb, 0u) << all;
    if (t.tid == d.pid()) {
      EXPECT_EQ(t.eff, kept) << all;
      continue;
    }
    // The search for the server's process reads other users' /proc/PID/fd, and may enter a
    // container's network namespace (CAP_SYS_ADMIN, raised around setns only).
    if (t.name == "thptrace-locate") {
      EXPECT_EQ(t.eff, bits({CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH})) << all;
      EXPECT_EQ(t.prm & ~bits({CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_SYS_ADMIN}), 0u) << all;
      continue;
    }
    // No other thread needs a capability here (no server in another network namespace).
    EXPECT_EQ(t.eff, 0u) << all;
    EXPECT_EQ(t.prm, 0u) << all;
    watchers += t.name == "thptrace-watch";
    http += is_http_thread(t);
  }
  EXPECT_GE(watchers, 1) << all;
  EXPECT_GE(http, 2) << all;
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(30s), 0) << d.err();
}

// The capture drops before it starts its sampler and its Redis poller; the poller holds nothing.
TEST(Privilege, CaptureRedisPollerHoldsNothing) {
  REQUIRE_BPF();
  RedisServer redis;
  Process tracer({thptrace_bin(), "--pid", std::to_string(redis.pid()), "--redis", redis.address(), "--duration", "4"});
  ASSERT_TRUE(tracer.wait_stderr_line("tracing pid", 60s)) << tracer.err();
  const auto threads = thread_caps(tracer.pid());
  const std::string all = describe(threads);
  uint64_t main_prm = 0;
  for (const auto& t : threads)
    if (t.tid == tracer.pid()) main_prm = t.prm;
  EXPECT_EQ(main_prm & bits({CAP_SYS_ADMIN, CAP_PERFMON, CAP_NET_ADMIN, CAP_SETPCAP}), 0u) << all;
  int watchers = 0;
  for (const auto& t : threads) {
    EXPECT_EQ(t.bnd & ~main_prm, 0u) << all;
    EXPECT_EQ(t.prm & ~main_prm, 0u) << all;
    EXPECT_EQ(t.amb, 0u) << all;
    if (t.name != "thptrace-watch") continue;
    ++watchers;
    EXPECT_EQ(t.eff, 0u) << all;
    EXPECT_EQ(t.prm, 0u) << all;
  }
  EXPECT_EQ(watchers, 1) << all;
  EXPECT_EQ(tracer.wait(60s), 0) << tracer.err();
}
