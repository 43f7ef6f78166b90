// SPDX-License-Identifier: Apache-2.0
// The client-latency probe (--latency-probe, redis/latency_probe.h) against a real redis-server with
// freezes of known length: DEBUG SLEEP 0.2 stops the event loop for 200 ms, and the probe must show a
// request of about 200 ms and every request due in it as slower than the clients' timeout; a fork of
// a loaded server freezes it for the fork's own measured duration, and the fork's window must show a
// request of about that length while the window before shows none. And what lets such a report be
// archived and lined up with others: the host, the wall-clock span, the server's run id and role.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <thread>

#include "harness.h"
#include "redis/latency_probe.h"

using namespace thptrace::test;
using namespace std::chrono_literals;

namespace {

// A capture of redis at `hz` probes a second around body(), which starts `settle` after the capture
// does; its JSON report, and its --svg timeline in *svg when asked.
template <typename Body>
nlohmann::json capture_with_probe(const RedisServer& redis, int hz, Body body,
                                  std::chrono::milliseconds settle = std::chrono::milliseconds(500),
                                  std::string* svg = nullptr) {
  const std::string dir = make_temp_dir("thptrace-client-latency-");
  const std::string json = dir + "/report.json";
  Process tracer({thptrace_bin(), "--redis", redis.address(), "--json", json, "--latency-probe", std::to_string(hz),
                  "--sample-copies", "0", "--svg", dir + "/timeline.svg"});
  EXPECT_TRUE(tracer.wait_stderr_line("tracing pid", 30s)) << tracer.err();
  std::this_thread::sleep_for(settle);
  body();
  std::this_thread::sleep_for(500ms);
  tracer.signal(SIGINT);
  EXPECT_EQ(tracer.wait(60s), 0) << tracer.err();
  auto j = std::filesystem::exists(json) ? read_json(json) : nlohmann::json();
  if (svg) {
    std::ifstream in(dir + "/timeline.svg");
    svg->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::filesystem::remove_all(dir);
  return j;
}

}  // namespace

TEST(ClientLatency, AFrozenEventLoopShowsAtItsFullLength) {
  REQUIRE_BPF();
  RedisServer redis;
  const auto report = capture_with_probe(redis, 100, [&] { redis.cmd({"DEBUG", "SLEEP", "0.2"}); });
  ASSERT_TRUE(report.contains("client_latency")) << report.dump(1);
  const auto& c = report["client_latency"];
  EXPECT_EQ(c["probe_hz"], 100);
  EXPECT_EQ(c["client_timeout_us"], 300);
  EXPECT_EQ(c["missed"], 0);
  const auto& whole = c["whole_capture"];
  ASSERT_TRUE(whole.is_object()) << c.dump(1);
  // The request due at the sleep's start waited all of it; the 19 due after it, each from its own
  // due time, less and less. Not one request of 200 ms among a few, as a probe timed from its send
  // would say.
  EXPECT_GE(whole["max_us"].get<double>(), 190'000) << whole.dump();
  EXPECT_LE(whole["max_us"].get<double>(), 400'000) << whole.dump();
  EXPECT_GE(whole["over_timeout"].get<uint64_t>(), 18u) << whole.dump();
  // About 100 a second over the capture (at least 1.2 s of it).
  EXPECT_GE(whole["samples"].get<uint64_t>(), 100u) << whole.dump();
  EXPECT_LT(whole["p50_us"].get<double>(), 10'000) << whole.dump();
}

TEST(ClientLatency, AForkFreezesClientsForItsDuration) {
  REQUIRE_BPF();
  RedisServer redis;
  for (int i = 0; i < 5; ++i) redis.cmd({"DEBUG", "POPULATE", "100000", "key" + std::to_string(i), "400"});
  // The window before the fork is as long as the child's life (about a second): the fork comes
  // late enough that it holds none of the capture's start, when the server has just been populated
  // and the capture takes its first readings (a CI run once saw 20 ms there).
  std::string svg;
  const auto report = capture_with_probe(
      redis, 1000,
      [&] {
        redis.cmd({"BGSAVE"});
        for (int i = 0; i < 300 && redis.info_field("rdb_bgsave_in_progress") != "0"; ++i)
          std::this_thread::sleep_for(50ms);
      },
      2500ms, &svg);
  ASSERT_TRUE(report.contains("forks")) << report.dump(1);
  ASSERT_EQ(report["forks"].size(), 1u) << report["forks"].dump(1);
  const auto& f = report["forks"][0];
  ASSERT_TRUE(f["fork_duration_us"].is_number()) << f.dump(1);
  const double fork_us = f["fork_duration_us"].get<double>();
  const auto& during = f["client_latency_during"];
  const auto& before = f["client_latency_before"];
  ASSERT_TRUE(during.is_object()) << f.dump(1);
  ASSERT_TRUE(before.is_object()) << f.dump(1);
  // A request due within the first millisecond of the freeze (1,000 a second) waited the rest of it.
  EXPECT_GE(during["max_us"].get<double>(), fork_us - 1'500) << "fork " << fork_us << " us: " << during.dump();
  // The freeze stands out of the window before: above its tail (its p99), not necessarily above its
  // one worst request, which on a loaded 2-core runner (the probe itself under a sanitizer) was once
  // 10 ms of the prober's own scheduling against a fork of 7.8 ms.
  EXPECT_GT(during["max_us"].get<double>(), before["p99_us"].get<double>()) << f.dump(1);
  EXPECT_GE(during["over_timeout"].get<uint64_t>(), 1u) << during.dump();
  // The timeline's clients' track shows the same request, and the freeze is marked for as long as the
  // fork took.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex(R"re(class="client" data-max-us="(\d+)")re")))
      << svg.substr(0, 3000);
  EXPECT_GE(std::stod(m[1]), fork_us - 1'500) << "fork " << fork_us << " us";
  ASSERT_TRUE(
      std::regex_search(svg, m, std::regex(R"re(class="freeze" data-child="\d+" data-freeze-ms="([0-9.]+)")re")));
  EXPECT_NEAR(std::stod(m[1]), fork_us / 1e3, 0.001);
}

TEST(ClientLatency, TheReportSaysWhereWhenAndWhichServer) {
  REQUIRE_BPF();
  RedisServer redis;
  const auto before = std::chrono::system_clock::now();
  const auto report = capture_with_probe(redis, 10, [] {});
  ASSERT_TRUE(report.contains("host")) << report.dump(1);
  std::string boot_id;
  std::getline(std::ifstream("/proc/sys/kernel/random/boot_id"), boot_id);
  EXPECT_EQ(report["host"]["boot_id"], boot_id);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  EXPECT_EQ(report["host"]["name"], host);
  // The wall-clock start, to the second: the capture began after `before` and within a minute of it.
  const auto start = report["capture"]["start_utc"].get<std::string>();
  const auto t = std::chrono::system_clock::to_time_t(before);
  tm utc{};
  ::gmtime_r(&t, &utc);
  char day[16];
  std::strftime(day, sizeof day, "%Y-%m-%dT", &utc);
  EXPECT_EQ(start.rfind(day, 0), 0u) << start;
  EXPECT_LT(start, report["capture"]["end_utc"].get<std::string>());
  EXPECT_EQ(report["redis"]["run_id"], redis.info_field("run_id"));
  EXPECT_EQ(report["redis"]["role"], "master");
}

// A probe alone on its loop, started many times: each connects and samples. The loop then sleeps
// until the connect wakes it, so a connect's result that the loop could wake up before leaves its
// probe without samples for good (the first version of the loop did that in 136 of 200 starts here).
TEST(ClientLatency, AProbeAloneSamplesEveryTimeItStarts) {
  RedisServer redis;
  const thptrace::redis::Route route{.address = {.host = "127.0.0.1", .port = redis.port()}};
  int without = 0;
  for (int i = 0; i < 100; ++i) {
    thptrace::redis::LatencyProbe probe(thptrace::redis::LatencyProbe::Options{
        .routes = {route}, .connect = {.timeout = std::chrono::milliseconds(2000)}, .hz = 1000});
    bool sampled = false;
    for (const auto until = std::chrono::steady_clock::now() + 1s;
         !sampled && std::chrono::steady_clock::now() < until;) {
      std::this_thread::sleep_for(2ms);
      sampled = !probe.take().empty();
    }
    if (!sampled) ++without;
  }
  EXPECT_EQ(without, 0);
}

// Many probes on one loop (the daemon's way, one per watched server): each connects and samples at
// its rate, however their connects interleave.
TEST(ClientLatency, ManyProbesOnOneLoopEachSample) {
  RedisServer redis;
  const thptrace::redis::Route route{.address = {.host = "127.0.0.1", .port = redis.port()}};
  auto loop = std::make_shared<thptrace::redis::ProbeLoop>();
  std::vector<std::unique_ptr<thptrace::redis::LatencyProbe>> probes;
  probes.reserve(40);
  for (int i = 0; i < 40; ++i)
    probes.push_back(std::make_unique<thptrace::redis::LatencyProbe>(
        thptrace::redis::LatencyProbe::Options{
            .routes = {route}, .connect = {.timeout = std::chrono::milliseconds(2000)}, .hz = 100},
        loop));
  std::this_thread::sleep_for(2s);
  for (size_t i = 0; i < probes.size(); ++i) {
    const auto samples = probes[i]->stop();
    // 100 a second over the 2 s less its connect: at least a second's worth, each answered.
    EXPECT_GE(samples.size(), 100u) << "probe " << i;
    EXPECT_TRUE(std::none_of(samples.begin(), samples.end(), [](const auto& s) { return s.failed; })) << "probe " << i;
  }
}
