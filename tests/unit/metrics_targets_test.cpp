// SPDX-License-Identifier: Apache-2.0
// The daemon's per-target series: a target removed (a discovered server that exited) leaves none
// behind, of any family, and the other targets' stay as they were.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "correlate/episode.h"
#include "daemon/exporter.h"
#include "daemon/metrics.h"

using thptrace::daemon::Exporter;
using thptrace::daemon::Metrics;

namespace {

// A target with a series in every family that carries a target label: every per-target setter.
void fill(Metrics& m, const std::string& t) {
  m.add_target(t);
  thptrace::correlate::ForkEpisode e;
  e.reason = thptrace::correlate::Reason::bgsave;
  e.fork_duration_us = 500;
  e.child_lifetime_ms = 20;
  e.cow_faults = 7;
  e.child_cpu = thptrace::correlate::ForkEpisode::ChildCpu{15, 2};
  m.on_fork_started(t);
  m.on_episode(t, e, 1.8e9);
  m.on_stall(t, true, 0.001);
  m.set_memory(t, 4096, 0, true);
  m.set_cgroup_memory(t, 8192, 16384);
  thptrace::redis::Snapshot s;
  s.up = true;
  s.total_forks = 3;
  thptrace::redis::LatencyHistogram h{};
  s.latency = h;
  m.set_redis(t, s);
  m.observe_client_latency(t, true, 0.001);
  m.observe_fsync(t, "main", false, 0.002);
  m.observe_aof_write(t, true, 0.0005);
  m.add_cow_faults(t, 3, 1);
  m.add_reuse_faults(t, 2);
  m.add_main_thread(t, true, 1e6, 2e6);
  m.add_main_thread_cpu_wait(t, {4, 3, 2, 1});
  m.set_target_anon_folios(t, {{4, 1024}, {2048, 4096}});
  m.add_thp(t, 1, 1);
  m.add_untracked_forks(t, 1);
  m.set_untraced(t, false);
  thptrace::correlate::ReplicaSync sync;
  sync.outcome = thptrace::correlate::ReplicaSync::Outcome::online;
  m.on_replica_sync(t, sync, true);
  thptrace::forecast::Inputs in;
  in.rss_bytes = 1 << 30;
  in.traced = thptrace::forecast::Inputs::Traced{9000, 2, 64 << 20};
  in.mem_available_bytes = 4ull << 30;
  in.cgroup_limit_bytes = 8ull << 30;
  m.set_forecast_freeze(t, 9);
  m.set_forecast(t, thptrace::forecast::predict(in, thptrace::correlate::Reason::full_sync_disk));
}

// The families in an exposition with a series labelled target="t".
std::set<std::string> families_of(const std::string& exposition, const std::string& t) {
  std::set<std::string> out;
  std::istringstream lines(exposition);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#' || line.find("target=\"" + t + "\"") == std::string::npos) continue;
    std::string name = line.substr(0, line.find('{'));
    const auto described = [](std::string_view n) {
      const auto& all = thptrace::daemon::kMetrics;
      return std::any_of(all.begin(), all.end(), [&](const auto& m) { return m.name == n; });
    };
    for (const std::string_view suffix : {"_bucket", "_count", "_sum"})
      if (!described(name) && name.ends_with(suffix)) name.resize(name.size() - suffix.size());
    out.insert(name);
  }
  return out;
}

}  // namespace

TEST(MetricsTargets, RemovedTargetLeavesNoSeries) {
  Metrics m;
  fill(m, "127.0.0.1:7001");
  fill(m, "127.0.0.1:7002");
  const std::string before = m.exposition();
  // fill() reaches every per-target metric of the table: a new one without a line there fails here,
  // before the check below could pass without it.
  const auto filled = families_of(before, "127.0.0.1:7001");
  for (const auto& metric : thptrace::daemon::kMetrics) {
    if (metric.owner != thptrace::daemon::Owner::target) continue;
    EXPECT_TRUE(filled.count(std::string(metric.name))) << metric.name << ": add its setter to fill()";
  }

  m.remove_target("127.0.0.1:7001");
  const std::string after = m.exposition();
  EXPECT_EQ(after.find("target=\"127.0.0.1:7001\""), std::string::npos) << after;
  // Every line of the other target is still there.
  size_t kept = 0, was = 0;
  for (size_t at = before.find("target=\"127.0.0.1:7002\""); at != std::string::npos;
       at = before.find("target=\"127.0.0.1:7002\"", at + 1))
    ++was;
  for (size_t at = after.find("target=\"127.0.0.1:7002\""); at != std::string::npos;
       at = after.find("target=\"127.0.0.1:7002\"", at + 1))
    ++kept;
  EXPECT_GT(was, 20u);
  EXPECT_EQ(kept, was);

  // Added again (the same address rediscovered), it starts from zero.
  m.add_target("127.0.0.1:7001");
  EXPECT_NE(m.exposition().find("thptrace_forks_total{reason=\"bgsave\",target=\"127.0.0.1:7001\"} 0"),
            std::string::npos);
}

TEST(MetricsTargets, ExporterForgetsARemovedTarget) {
  Metrics m;
  thptrace::tracer::AttachModes modes;
  Exporter x(m, modes);
  const auto a = x.add_target("a:1", true);
  const auto b = x.add_target("b:1", true);
  x.remove_target(a);
  EXPECT_THROW(x.open_children(a), std::out_of_range);
  EXPECT_TRUE(x.open_children(b).empty());
  // Ids are not given again: a stale one cannot reach a new target.
  EXPECT_NE(x.add_target("a:1", true), a);
  EXPECT_NE(m.exposition().find("target=\"a:1\""), std::string::npos);
}

// docs/reference/metrics.md is the contract: every family the daemon exports is in its tables with
// the same type, and every family its tables name is one the daemon exports.
TEST(MetricsTargets, EveryFamilyIsDocumentedWithItsType) {
  Metrics m;
  fill(m, "127.0.0.1:7001");
  m.observe_client_latency("127.0.0.1:7001", true, 0.001);
  m.observe_fsync("127.0.0.1:7001", "main", false, 0.002);
  m.observe_aof_write("127.0.0.1:7001", true, 0.0005);
  m.set_probe_modes(thptrace::tracer::AttachModes{});
  m.set_thp_mode("madvise", "madvise");
  m.set_map_entries("targets", 1, 64);
  m.add_program_cost("fork_btf", 1, 100);
  m.set_anon_folios({{64, {{"nr_anon", 3}}}});
  thptrace::forecast::Inputs in;
  in.rss_bytes = 1 << 30;
  in.traced = thptrace::forecast::Inputs::Traced{9000, 2, 64 << 20};
  in.mem_available_bytes = 4ull << 30;
  m.set_forecast_freeze("127.0.0.1:7001", 9);
  m.set_forecast("127.0.0.1:7001", thptrace::forecast::predict(in, thptrace::correlate::Reason::full_sync_disk));
  std::map<std::string, std::string> exported;
  std::istringstream lines(m.exposition());
  for (std::string line; std::getline(lines, line);) {
    std::smatch g;
    if (std::regex_match(line, g, std::regex(R"(# TYPE (\w+) (\w+))"))) exported[g[1]] = g[2];
  }
  std::ifstream doc(THPTRACE_TEST_DATA "/../../../docs/reference/metrics.md");
  ASSERT_TRUE(doc) << "docs/reference/metrics.md";
  std::map<std::string, std::string> documented;
  for (std::string line; std::getline(doc, line);) {
    std::smatch g;
    if (std::regex_search(line, g, std::regex(R"(^\| `(thptrace_\w+)` \| (counter|gauge|histogram) \|)")))
      documented[g[1]] = g[2];
  }
  for (const auto& [name, type] : exported) {
    ASSERT_TRUE(documented.count(name)) << name << " is exported but not in docs/reference/metrics.md";
    EXPECT_EQ(documented[name], type) << name;
  }
  for (const auto& [name, type] : documented)
    EXPECT_TRUE(exported.count(name)) << name << " is documented, not exported";
}

// A containerised target's series carry its Kubernetes names beside `target`; a bare host's carry
// none (empty is absent to Prometheus); another container under the same target is another series.
TEST(MetricsTargets, ContainerNamesLabelEveryTargetSeries) {
  Metrics m;
  fill(m, "127.0.0.1:6379");
  m.set_names("127.0.0.1:6379", {std::string(64, 'a'), "shop", "cache-0", "redis"});
  m.on_episode("127.0.0.1:6379", thptrace::correlate::ForkEpisode{});
  std::string s = m.exposition();
  EXPECT_NE(
      s.find(
          R"(thptrace_forks_total{container="redis",namespace="shop",pod="cache-0",reason="unknown",target="127.0.0.1:6379"} 1)"),
      std::string::npos)
      << s;
  EXPECT_NE(s.find(R"(thptrace_redis_up{container="redis",namespace="shop",pod="cache-0",target="127.0.0.1:6379"} 0)"),
            std::string::npos);
  EXPECT_EQ(s.find(R"(thptrace_forks_total{reason="unknown",target="127.0.0.1:6379"})"), std::string::npos);
  // Rescheduled: the old pod's series go, the new one's start at zero.
  m.set_names("127.0.0.1:6379", {std::string(64, 'b'), "shop", "cache-1", "redis"});
  s = m.exposition();
  EXPECT_EQ(s.find("cache-0"), std::string::npos);
  EXPECT_NE(
      s.find(
          R"(thptrace_forks_total{container="redis",namespace="shop",pod="cache-1",reason="unknown",target="127.0.0.1:6379"} 0)"),
      std::string::npos);
  // A bare host: target alone.
  m.set_names("127.0.0.1:6379", {});
  s = m.exposition();
  EXPECT_NE(s.find(R"(thptrace_forks_total{reason="unknown",target="127.0.0.1:6379"} 0)"), std::string::npos);
  EXPECT_EQ(s.find("namespace="), std::string::npos);
}
