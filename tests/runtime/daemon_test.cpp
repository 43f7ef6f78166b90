// SPDX-License-Identifier: Apache-2.0
// `thptrace daemon` against real redis-server processes: the real HTTP endpoint is scraped while
// BGSAVE, a full sync and a Redis restart happen, and counters must move by the right amounts.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <fmt/core.h>

#include "harness.h"
#include "proc/proc.h"

using namespace thptrace::test;
using namespace std::chrono_literals;

namespace {

class Daemon {
 public:
  Daemon(const std::vector<std::string>& args) : port_(free_port()) {
    std::vector<std::string> argv = {thptrace_bin(), "daemon", "--listen", "127.0.0.1:" + std::to_string(port_)};
    argv.insert(argv.end(), args.begin(), args.end());
    proc_ = std::make_unique<Process>(argv);
  }
  int port() const { return port_; }
  Process& proc() { return *proc_; }
  std::string scrape() { return http_get(port_, "/metrics").value_or(""); }
  // Waits until `series` has a value satisfying pred; returns the last value seen.
  template <typename Pred>
  std::optional<double> wait_for(const std::string& series, Pred pred, std::chrono::seconds timeout = 30s) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    std::optional<double> v;
    while (std::chrono::steady_clock::now() < until) {
      v = metric_value(scrape(), series);
      if (v && pred(*v)) return v;
      std::this_thread::sleep_for(100ms);
    }
    return v;
  }

 private:
  int port_;
  std::unique_ptr<Process> proc_;
};

std::string series(const std::string& name, const std::string& target, const std::string& reason = "") {
  return reason.empty() ? name + "{target=\"" + target + "\"}"
                        : name + "{reason=\"" + reason + "\",target=\"" + target + "\"}";
}

bool promtool_clean(const std::string& scrape, std::string* out) {
  const std::string dir = make_temp_dir("thptrace-scrape-");
  {
    std::ofstream f(dir + "/m.txt");
    f << scrape;
  }
  Process p({"sh", "-c", "promtool check metrics < " + dir + "/m.txt"});
  const auto code = p.wait(60s);
  *out = p.out() + p.err();
  std::filesystem::remove_all(dir);
  return code == 0;
}

}  // namespace

TEST(Daemon, CountsForksFollowsRestartsAndExitsClean) {
  REQUIRE_BPF();
  const int port = free_port();
  auto redis = std::make_unique<RedisServer>(std::vector<std::string>{"--repl-diskless-sync", "no"}, port);
  redis->cmd({"DEBUG", "POPULATE", "50000", "key", "400"});
  const std::string target = redis->address();
  Daemon d({"--redis", target, "--poll-interval-ms", "50"});
  ASSERT_TRUE(d.wait_for(series("thptrace_redis_up", target), [](double v) { return v == 1; })) << d.proc().err();
  // The server's process found and watched (its RSS is read once it is): a fork before that is not
  // the daemon's to count, and Redis answers INFO before the daemon has located its process.
  ASSERT_TRUE(d.wait_for(series("thptrace_rss_bytes", target), [](double v) { return v > 0; })) << d.proc().err();
  // Attached and listening, the daemon (root here) keeps only what re-attaching uprobes and reading
  // /proc need: CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF.
  const auto status = thptrace::proc::read_file("/proc/" + std::to_string(d.proc().pid()) + "/status").value_or("");
  for (const char* set : {"CapEff:\t", "CapPrm:\t"}) {
    const auto at = status.find(set);
    ASSERT_NE(at, std::string::npos) << status;
    const uint64_t caps = std::stoull(status.substr(at + std::strlen(set), 16), nullptr, 16);
    const uint64_t allowed = (1ull << 2) | (1ull << 19) | (1ull << 21) | (1ull << 38) | (1ull << 39);
    EXPECT_EQ(caps & ~allowed, 0u) << set << std::hex << caps;
  }
  EXPECT_NE(status.find("NoNewPrivs:\t1"), std::string::npos) << status;
  const std::string scrape0 = d.scrape();
  EXPECT_EQ(metric_value(scrape0, series("thptrace_forks_total", target, "bgsave")), 0);
  EXPECT_EQ(metric_value(scrape0, series("thptrace_forks_total", target, "full_sync_disk")), 0);
  // A reason's histograms come with its first fork (docs/reference/metrics.md), its counter is there from the start.
  EXPECT_FALSE(metric_value(scrape0, series("thptrace_fork_duration_seconds_count", target, "bgsave")));
  std::string lint;
  EXPECT_TRUE(promtool_clean(scrape0, &lint)) << lint;

  // BGSAVE: one fork with its reason, its duration and lifetime observed once.
  redis->cmd({"SET", "a", "b"});
  redis->cmd({"BGSAVE"});
  EXPECT_EQ(d.wait_for(series("thptrace_forks_total", target, "bgsave"), [](double v) { return v >= 1; }), 1);
  std::string s = d.scrape();
  EXPECT_EQ(metric_value(s, series("thptrace_fork_duration_seconds_count", target, "bgsave")), 1);
  EXPECT_EQ(metric_value(s, series("thptrace_fork_child_lifetime_seconds_count", target, "bgsave")), 1);
  EXPECT_GT(metric_value(s, series("thptrace_fork_duration_seconds_sum", target, "bgsave")).value_or(0), 0);
  EXPECT_FALSE(metric_value(s, series("thptrace_fork_duration_seconds_count", target, "aof_rewrite")));
  // The fork's copies, once its child has exited: the copies counter is its observation, in pages
  // and in bytes of 4 KiB pages.
  const auto fork_copies = metric_value(s, series("thptrace_fork_cow_faults_sum", target, "bgsave"));
  ASSERT_TRUE(fork_copies) << s;
  EXPECT_EQ(metric_value(s, series("thptrace_copies_total", target)), *fork_copies);
  EXPECT_EQ(metric_value(s, series("thptrace_parent_copied_bytes_total", target)), *fork_copies * 4096);
  EXPECT_EQ(d.wait_for(series("thptrace_redis_forks_total", target), [](double v) { return v >= 1; }), 1);

  // A full sync over disk to a fresh replica.
  {
    RedisServer replica({"--replicaof", "127.0.0.1", std::to_string(port)});
    EXPECT_EQ(d.wait_for(series("thptrace_forks_total", target, "full_sync_disk"), [](double v) { return v >= 1; }, 60s), 1);
    EXPECT_EQ(d.wait_for(series("thptrace_redis_sync_full_total", target), [](double v) { return v >= 1; }), 1);
    // The replica's sync from INFO replication: online once, with its duration; its fork served it.
    const std::string online = "thptrace_replica_syncs_total{outcome=\"online\",target=\"" + target + "\"}";
    EXPECT_EQ(d.wait_for(online, [](double v) { return v >= 1; }), 1) << d.scrape();
    s = d.scrape();
    EXPECT_EQ(metric_value(s, "thptrace_replica_sync_duration_seconds_count{target=\"" + target + "\"}"), 1);
    EXPECT_GT(metric_value(s, "thptrace_replica_sync_duration_seconds_sum{target=\"" + target + "\"}").value_or(0), 0);
    EXPECT_EQ(metric_value(s, "thptrace_fork_replicas_sum{target=\"" + target + "\"}"), 1);
    EXPECT_EQ(metric_value(s, "thptrace_full_sync_loop_repeats_total{target=\"" + target + "\"}"), 0);
  }
  s = d.scrape();
  EXPECT_EQ(metric_value(s, series("thptrace_forks_total", target, "bgsave")), 1);
  EXPECT_TRUE(metric_value(s, "thptrace_redis_command_latency_seconds_count{target=\"" + target + "\"}"));
  EXPECT_TRUE(promtool_clean(s, &lint)) << lint;

  // Restart Redis on the same port: up goes 0 → 1 and forks of the new process are counted.
  redis.reset();
  EXPECT_EQ(d.wait_for(series("thptrace_redis_up", target), [](double v) { return v == 0; }), 0);
  redis = std::make_unique<RedisServer>(std::vector<std::string>{}, port);
  EXPECT_EQ(d.wait_for(series("thptrace_redis_up", target), [](double v) { return v == 1; }), 1);
  std::this_thread::sleep_for(1500ms);  // the daemon re-attaches to the new pid on its next INFO
  redis->cmd({"SET", "a", "b"});
  redis->cmd({"BGSAVE"});
  EXPECT_EQ(d.wait_for(series("thptrace_forks_total", target, "bgsave"), [](double v) { return v >= 2; }), 2)
      << d.proc().err();

  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
  EXPECT_EQ(leftover_thptrace_programs(), std::vector<std::string>{});
}

TEST(Daemon, BadConfigIsAUsageError) {
  Process a({thptrace_bin(), "daemon", "--config", "/nonexistent/thptrace.conf"});
  EXPECT_EQ(a.wait(30s), 2) << a.err();
  Process b({thptrace_bin(), "daemon"});
  EXPECT_EQ(b.wait(30s), 2) << b.err();
  Process c({thptrace_bin(), "daemon", "--redis", "nohostport"});
  EXPECT_EQ(c.wait(30s), 2) << c.err();
}

TEST(Daemon, DiscoversLocalRedisServers) {
  REQUIRE_BPF();
  RedisServer redis;
  redis.cmd({"DEBUG", "POPULATE", "20000", "key", "100"});
  Daemon d({"--discover"});
  // Redis's process title carries its address, which becomes the target label.
  const std::string target = redis.address();
  ASSERT_EQ(d.wait_for(series("thptrace_redis_up", target), [](double v) { return v == 1; }), 1) << d.proc().err();
  redis.cmd({"BGSAVE"});
  EXPECT_EQ(d.wait_for(series("thptrace_forks_total", target, "bgsave"), [](double v) { return v >= 1; }), 1);
  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
}

TEST(Daemon, ReasonsFromInfoInFallbackMode) {
  REQUIRE_BPF();
  RedisServer redis;
  const std::string target = redis.address();
  Daemon d({"--redis", target, "--force-fallback"});
  ASSERT_EQ(d.wait_for(series("thptrace_redis_up", target), [](double v) { return v == 1; }), 1) << d.proc().err();
  EXPECT_EQ(metric_value(d.scrape(), "thptrace_probe_info{family=\"redis\",mode=\"info_polling\"}"), 1);
  // Up is exported before the pid INFO gave is resolved and traced: a fork before that is not seen.
  ASSERT_TRUE(d.wait_for(series("thptrace_rss_bytes", target), [](double v) { return v > 0; })) << d.proc().err();
  // An empty BGSAVE lives for a millisecond, between two INFO polls: the reason comes from the poll after.
  redis.cmd({"BGSAVE"});
  EXPECT_EQ(d.wait_for(series("thptrace_forks_total", target, "bgsave"), [](double v) { return v >= 1; }), 1)
      << d.scrape();
  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
}

// While no fork is in progress the daemon reads RSS each second (statm) but smaps_rollup, status,
// the cgroup files, LATENCY HISTOGRAM and CONFIG GET only every 10 s (docs/reference/metrics.md): RSS still
// follows a Redis whose memory grows within seconds, and the command latency histogram never
// vanishes between the polls that ask for it, and moves within the 10 s.
TEST(Daemon, IdleSeriesStayFresh) {
  REQUIRE_BPF();
  RedisServer redis;
  const std::string target = redis.address();
  Daemon d({"--redis", target});
  ASSERT_TRUE(d.wait_for(series("thptrace_rss_bytes", target), [](double v) { return v > 0; })) << d.proc().err();
  const std::string latency = "thptrace_redis_command_latency_seconds_count{target=\"" + target + "\"}";
  ASSERT_TRUE(d.wait_for(latency, [](double) { return true; })) << d.scrape();
  const double rss0 = *metric_value(d.scrape(), series("thptrace_rss_bytes", target));
  const double calls0 = *metric_value(d.scrape(), latency);
  // About 40 MB more resident at once; the next second's statm shows it.
  populate(redis, 300000, "key", 100);
  const auto t = std::chrono::steady_clock::now();
  EXPECT_TRUE(d.wait_for(
      series("thptrace_rss_bytes", target), [&](double v) { return v > rss0 + 20e6; }, 5s))
      << "rss was " << rss0;
  EXPECT_LT(std::chrono::steady_clock::now() - t, 4s);
  // The calls above (and the daemon's own polls) reach the histogram within the idle interval; it is
  // exported in every scrape meanwhile.
  bool always = true;
  std::optional<double> calls;
  for (auto until = std::chrono::steady_clock::now() + 13s; std::chrono::steady_clock::now() < until;) {
    calls = metric_value(d.scrape(), latency);
    always = always && calls.has_value();
    if (calls && *calls > calls0) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(always);
  EXPECT_GT(calls.value_or(0), calls0);
  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
}

// The host's anonymous folios by size are the kernel's own count (hugepages-<N>kB/stats/nr_anon,
// Linux 6.13+) times the size, for every size the kernel counts.
TEST(Daemon, AnonFolioBytesAreTheKernelsCount) {
  REQUIRE_BPF();
  const auto counts = thptrace::proc::read_folio_counters();
  std::vector<uint32_t> sizes;
  for (const auto& [kb, values] : counts)
    if (values.count("nr_anon")) sizes.push_back(kb);
  if (sizes.empty()) GTEST_SKIP() << "this kernel does not count anonymous folios by size (6.13+)";
  Daemon d({"--pid", std::to_string(::getpid())});
  for (const uint32_t kb : sizes) {
    const std::string s = "thptrace_anon_folio_bytes{size_kb=\"" + std::to_string(kb) + "\"}";
    // A gauge of the whole host, read every 5 s: until it shows the count the kernel has now (within
    // what other processes change in the meantime on a busy host: 16 folios, 2%).
    const double size = kb * 1024.0;
    const auto now = [kb, size] {
      return static_cast<double>(thptrace::proc::read_folio_counters()[kb]["nr_anon"]) * size;
    };
    bool matched = false;
    const auto v = d.wait_for(
        s, [&](double x) { return matched = std::abs(x - now()) <= 16 * size + 0.02 * now(); }, 20s);
    ASSERT_TRUE(v) << s << " not exported: " << d.scrape();
    EXPECT_TRUE(matched) << s << " " << *v << " against the kernel's " << now();
    EXPECT_EQ(std::fmod(*v, size), 0.0) << s;
  }
  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
}

// A target's own memory by folio size: walked as the daemon first reads the target (then every 5
// minutes), page by page for a process under 128 MiB of pages. Its sizes add up to the process's
// anonymous memory as smaps_rollup counts it, read around the scrape (the server is idle).
TEST(Daemon, TargetAnonFolioBytesAddUpToItsAnonymousMemory) {
  REQUIRE_BPF();
  RedisServer redis;
  redis.cmd({"DEBUG", "POPULATE", "100000", "key", "200"});
  const std::string target = redis.address();
  Daemon d({"--redis", target});
  const std::string small = "thptrace_target_anon_folio_bytes{size_kb=\"4\",target=\"" + target + "\"}";
  ASSERT_TRUE(d.wait_for(small, [](double v) { return v > 0; })) << d.scrape();
  const auto before = thptrace::proc::read_smaps_rollup(redis.pid());
  const std::string scrape = d.scrape();
  const auto after = thptrace::proc::read_smaps_rollup(redis.pid());
  ASSERT_TRUE(before && after);
  double total = 0;
  std::istringstream lines(scrape);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("thptrace_target_anon_folio_bytes{", 0) == 0 && line.find(target) != std::string::npos)
      total += std::stod(line.substr(line.rfind(' ') + 1));
  const double low = static_cast<double>(std::min(before->anonymous_kb, after->anonymous_kb)) * 1024;
  const double high = static_cast<double>(std::max(before->anonymous_kb, after->anonymous_kb)) * 1024;
  EXPECT_GE(total, 0.95 * low) << scrape;
  EXPECT_LE(total, 1.05 * high) << scrape;
  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
}

// Polls slowly while no fork is in progress (the slowest idle cadence allowed), fast from the fork
// event on: a BGSAVE, an AOF rewrite and a full sync are still each labelled right, with uprobes and
// with reasons from INFO polling alone (--force-fallback). Short children too: an AOF rewrite of a
// nearly empty dataset lives a millisecond, between two polls.
class DaemonSlowIdle : public ::testing::TestWithParam<bool> {};

TEST_P(DaemonSlowIdle, ReasonsStayRight) {
  REQUIRE_BPF();
  const bool info_only = GetParam();
  const int port = free_port();
  RedisServer redis({"--repl-diskless-sync", "no"}, port);
  const std::string target = redis.address();
  std::vector<std::string> args = {"--redis", target, "--poll-interval-ms", "100", "--idle-poll-interval-ms", "5000"};
  if (info_only) args.emplace_back("--force-fallback");
  Daemon d(args);
  ASSERT_EQ(d.wait_for(series("thptrace_redis_up", target), [](double v) { return v == 1; }), 1) << d.proc().err();
  const std::string mode = info_only ? "info_polling" : "uprobe";
  EXPECT_EQ(metric_value(d.scrape(), "thptrace_probe_info{family=\"redis\",mode=\"" + mode + "\"}"), 1);
  // Up is exported before the pid INFO gave is resolved and traced: a fork before that is not seen.
  ASSERT_TRUE(d.wait_for(series("thptrace_rss_bytes", target), [](double v) { return v > 0; })) << d.proc().err();
  const auto forks = [&](const std::string& reason) { return series("thptrace_forks_total", target, reason); };
  const auto wait_count = [&](const std::string& reason, double n) {
    return d.wait_for(
        forks(reason), [n](double v) { return v >= n; }, 60s);
  };
  // Each fork is started right after an idle poll at the earliest: the wait covers a whole idle
  // interval, so the fork lands anywhere in it.
  redis.cmd({"SET", "a", "b"});
  redis.cmd({"BGREWRITEAOF"});
  EXPECT_EQ(wait_count("aof_rewrite", 1), 1) << d.scrape();
  std::this_thread::sleep_for(2500ms);
  redis.cmd({"BGSAVE"});
  EXPECT_EQ(wait_count("bgsave", 1), 1) << d.scrape();
  redis.cmd({"DEBUG", "POPULATE", "100000", "key", "400"});
  std::this_thread::sleep_for(3700ms);
  redis.cmd({"BGREWRITEAOF"});
  EXPECT_EQ(wait_count("aof_rewrite", 2), 2) << d.scrape();
  std::this_thread::sleep_for(1200ms);
  redis.cmd({"BGSAVE"});
  EXPECT_EQ(wait_count("bgsave", 2), 2) << d.scrape();
  {
    RedisServer replica({"--replicaof", "127.0.0.1", std::to_string(port)});
    EXPECT_EQ(wait_count("full_sync_disk", 1), 1) << d.scrape();
  }
  const std::string s = d.scrape();
  EXPECT_EQ(metric_value(s, forks("bgsave")), 2);
  EXPECT_EQ(metric_value(s, forks("aof_rewrite")), 2);
  EXPECT_EQ(metric_value(s, forks("full_sync_disk")), 1);
  EXPECT_EQ(metric_value(s, forks("unknown")), 0);
  EXPECT_EQ(metric_value(s, forks("full_sync_diskless")), 0);
  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
}

INSTANTIATE_TEST_SUITE_P(Modes, DaemonSlowIdle, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "InfoOnly" : "Uprobes"; });

namespace {

// A series of thptrace_redis_client_latency_seconds: the line that names all of `labels`, whatever
// their order; nullopt when there is none.
std::optional<double> client_latency(const std::string& scrape, const std::string& suffix,
                                     const std::vector<std::string>& labels) {
  std::istringstream in(scrape);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("thptrace_redis_client_latency_seconds" + suffix + "{", 0) != 0) continue;
    const auto close = line.find("} ");
    if (close == std::string::npos) continue;
    const std::string names = line.substr(0, close);
    if (std::all_of(labels.begin(), labels.end(), [&](const auto& l) { return names.find(l) != std::string::npos; }))
      return std::stod(line.substr(close + 2));
  }
  return std::nullopt;
}

// A BGSAVE, the first of the server's: the scrape once its child has exited and the probe's samples
// are exported, with the fork's duration as the daemon measured it (nullopt when not there).
std::pair<std::string, std::optional<double>> first_bgsave(Daemon& d, const RedisServer& redis) {
  const std::string target = redis.address();
  redis.cmd({"BGSAVE"});
  if (d.wait_for(
          series("thptrace_forks_total", target, "bgsave"), [](double v) { return v >= 1; }, 60s) != 1)
    return {d.scrape(), std::nullopt};
  for (int i = 0; i < 300 && redis.info_field("rdb_bgsave_in_progress") != "0"; ++i) std::this_thread::sleep_for(50ms);
  std::this_thread::sleep_for(1500ms);  // the probe's samples are taken once a second
  std::string s = d.scrape();
  auto fork_s = metric_value(s, series("thptrace_fork_duration_seconds_sum", target, "bgsave"));
  return {std::move(s), fork_s};
}

}  // namespace

// The latency probe per target, by phase, at 1,000 requests a second busy or idle: DEBUG SLEEP 0.2
// while no fork lives puts about 200 requests in the idle phase's slow buckets (each due one timed
// from its due time); a BGSAVE of a loaded server puts a request of about the fork's own duration in
// the fork phase.
TEST(Daemon, ClientLatencyByPhaseShowsTheFreezes) {
  REQUIRE_BPF();
  RedisServer redis;
  for (int i = 0; i < 5; ++i) redis.cmd({"DEBUG", "POPULATE", "100000", "key" + std::to_string(i), "400"});
  const std::string target = redis.address();
  Daemon d({"--redis", target, "--latency-probe", "1000", "--latency-probe-idle", "1000"});
  ASSERT_TRUE(d.wait_for(series("thptrace_rss_bytes", target), [](double v) { return v > 0; })) << d.proc().err();
  const std::string t = "target=\"" + target + "\"";
  // Requests of the idle phase that took longer than `seconds` (a bucket bound).
  const auto idle_over = [&](const std::string& seconds) {
    const std::string s = d.scrape();
    const auto count = client_latency(s, "_count", {t, "phase=\"idle\""});
    const auto under = client_latency(s, "_bucket", {t, "phase=\"idle\"", "le=\"" + seconds + "\""});
    return count && under ? *count - *under : 0.0;
  };
  for (int i = 0; i < 50 && client_latency(d.scrape(), "_count", {t, "phase=\"idle\""}).value_or(0) == 0; ++i)
    std::this_thread::sleep_for(100ms);
  ASSERT_GT(client_latency(d.scrape(), "_count", {t, "phase=\"idle\""}).value_or(0), 0) << d.scrape();
  const double over_1s_before = idle_over("1");
  redis.cmd({"DEBUG", "SLEEP", "0.2"});
  double slow = 0;
  for (int i = 0; i < 50 && slow < 90; ++i, std::this_thread::sleep_for(100ms)) slow = idle_over("0.1");
  // At 1,000 a second, the requests due in the sleep's first 100 ms waited more than 100 ms, each
  // timed from its due time (a probe timing from its send would see them fast). How many of the
  // second 100 ms also did depends on how fast the host lets the backlog drain (114 to 194 in CI
  // runs beside other work): no upper bound on the count. None waited a second: a probe timing from
  // anything earlier than its due time would put the sleep's requests there.
  EXPECT_GE(slow, 90) << d.scrape();
  std::this_thread::sleep_for(1500ms);  // the probe's samples are exported once a second
  EXPECT_EQ(idle_over("1"), over_1s_before) << d.scrape();
  const auto [s, fork_s] = first_bgsave(d, redis);
  ASSERT_TRUE(fork_s) << s;
  const auto fork_count = client_latency(s, "_count", {t, "phase=\"fork\""});
  ASSERT_TRUE(fork_count) << s;
  // The largest bucket bound under half the fork's duration: a request answered during the fork
  // took more than that.
  double bound = 0;
  for (const double b : {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05})
    if (b < *fork_s / 2) bound = b;
  ASSERT_GT(bound, 0) << "fork of " << *fork_s << " s";
  const auto under = client_latency(s, "_bucket", {t, "phase=\"fork\"", "le=\"" + fmt::format("{}", bound) + "\""});
  ASSERT_TRUE(under) << s;
  EXPECT_GE(*fork_count - *under, 1) << "fork of " << *fork_s << " s, bound " << bound << "\n" << s;
  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
}

// With the defaults (2 requests a second while no child lives, 100 while one does), a fork is still
// timed at its full length: one request goes as soon as the fork is seen and is timed from the
// fork call's start, so the fork phase holds a request slower than the kernel's own fork duration.
// Requests due at the busy rate after the fork began wait less than the fork did: without that one
// request, none would be. And the idle rate is the default's: about 2 a second, not 100.
TEST(Daemon, ClientLatencyTimesEachForkFromItsStartAtTheIdleRate) {
  REQUIRE_BPF();
  RedisServer redis;
  for (int i = 0; i < 5; ++i) redis.cmd({"DEBUG", "POPULATE", "100000", "key" + std::to_string(i), "400"});
  const std::string target = redis.address();
  Daemon d({"--redis", target});
  ASSERT_TRUE(d.wait_for(series("thptrace_rss_bytes", target), [](double v) { return v > 0; })) << d.proc().err();
  const std::string t = "target=\"" + target + "\"";
  const auto idle_count = [&] { return client_latency(d.scrape(), "_count", {t, "phase=\"idle\""}).value_or(0); };
  for (int i = 0; i < 50 && idle_count() == 0; ++i) std::this_thread::sleep_for(100ms);
  const double idle0 = idle_count();
  const auto idle_from = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(5s);
  const double idle_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - idle_from).count();
  // Samples are exported once a second: the 5 s span holds 4 to 6 seconds' worth at 2 a second.
  const double idle = idle_count() - idle0;
  EXPECT_GE(idle, 2 * (idle_s - 1) - 1) << d.scrape();
  EXPECT_LE(idle, 2 * (idle_s + 1) + 1) << d.scrape();
  const auto [s, fork_s] = first_bgsave(d, redis);
  ASSERT_TRUE(fork_s) << s;
  double bound = 0;  // the largest bucket bound under the fork's duration
  for (const double b : {0.0002, 0.0003, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1})
    if (b < *fork_s) bound = b;
  ASSERT_GT(bound, 0) << "fork of " << *fork_s << " s";
  const auto count = client_latency(s, "_count", {t, "phase=\"fork\""});
  const auto under = client_latency(s, "_bucket", {t, "phase=\"fork\"", "le=\"" + fmt::format("{}", bound) + "\""});
  ASSERT_TRUE(count && under) << s;
  EXPECT_GE(*count - *under, 1) << "fork of " << *fork_s << " s, bound " << bound << "\n" << s;
  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
}

// One thread sends every target's requests: a server stopped by SIGSTOP (its requests time out, its
// reconnects wait their timeout) holds up no other target's, which keep their rate.
TEST(Daemon, AStoppedServerHoldsUpNoOtherTargetsProbe) {
  REQUIRE_BPF();
  RedisServer stopped, live;
  Daemon d({"--redis", stopped.address(), "--redis", live.address(), "--latency-probe-idle", "100"});
  const auto count = [&](const RedisServer& r) {
    return client_latency(d.scrape(), "_count", {"target=\"" + r.address() + "\"", "phase=\"idle\""}).value_or(0);
  };
  for (int i = 0; i < 100 && (count(stopped) == 0 || count(live) == 0); ++i) std::this_thread::sleep_for(100ms);
  ASSERT_GT(count(stopped), 0) << d.scrape();
  ASSERT_GT(count(live), 0) << d.scrape();
  ASSERT_EQ(::kill(stopped.pid(), SIGSTOP), 0);
  std::this_thread::sleep_for(1500ms);  // the samples taken before the stop are exported
  const double stopped0 = count(stopped), live0 = count(live);
  const auto from = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(6s);  // three of the stopped server's 2 s request timeouts
  const double span_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
  const double live_n = count(live) - live0, stopped_n = count(stopped) - stopped0;
  ::kill(stopped.pid(), SIGCONT);
  // At 100 a second, less a second either side for the export: a loop held by the stopped server's
  // 2 s timeouts would have sent a few.
  EXPECT_GE(live_n, 100 * (span_s - 1) * 0.8) << d.scrape();
  // The stopped server's requests fail at its timeout, one at a time, with backoff: a handful.
  EXPECT_LE(stopped_n, 10) << d.scrape();
  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
}

// The daemon's forecast of the next fork, from the last one it traced: its freeze is that fork's, its
// copies (parent and child) are that fork's. Charged to a memory cgroup whose limit is above the server's RSS but below
// RSS plus the next full sync's need, the headroom under it is negative; with the limit well above, positive.
TEST(Daemon, ForecastsTheNextForkFromTheLastAndItsHeadroom) {
  REQUIRE_BPF();
  MemoryCgroup cg;  // before the server: its destructor waits for the server to be gone
  RedisServer redis({"--save", ""});
  populate(redis, 500000);
  const std::string target = redis.address();
  Daemon d({"--redis", target, "--poll-interval-ms", "100", "--latency-probe", "0"});
  ASSERT_TRUE(d.wait_for(series("thptrace_rss_bytes", target), [](double v) { return v > 0; })) << d.proc().err();
  EXPECT_FALSE(metric_value(d.scrape(), series("thptrace_predicted_fork_freeze_seconds", target)))
      << "a forecast before any fork";
  std::string s, all;
  {
    WriteLoad load(redis, "key:", 500000);
    const auto bgsave = [&](double n) {
      std::this_thread::sleep_for(1s);
      redis.cmd({"BGSAVE"});
      ASSERT_TRUE(wait_info(redis, "rdb_bgsave_in_progress", "0", 120s));
      ASSERT_TRUE(d.wait_for(
          series("thptrace_forks_total", target, "bgsave"), [n](double v) { return v >= n; }, 60s));
      std::this_thread::sleep_for(2s);  // the readings after the child's exit: its copies counted
    };
    bgsave(1);
    s = d.scrape();
    const auto freeze = metric_value(s, series("thptrace_predicted_fork_freeze_seconds", target));
    ASSERT_TRUE(freeze) << s;
    // The same fork's time, in ms then s on one side and s on the other: equal to the last bits.
    EXPECT_NEAR(*freeze, metric_value(s, series("thptrace_last_fork_duration_seconds", target)).value_or(0), 1e-9);
    EXPECT_GT(metric_value(s, series("thptrace_predicted_child_lifetime_seconds", target, "bgsave")).value_or(0), 0);
    // Each forecast is the copies (parent and child) of the fork the daemon traced last, to the byte;
    // how far the next fork lands from it is measured over many rounds by
    // tests/bench/predict_accuracy.sh, not held to a line here (it moves with the host's load).
    // THPTRACE_PREDICT_ROUNDS: more rounds, for the benchmark.
    const char* asked = std::getenv("THPTRACE_PREDICT_ROUNDS");
    const double rounds = asked && std::atoi(asked) > 0 ? std::atoi(asked) : 2;
    for (double n = 2; n < 2 + rounds; ++n) {
      s = d.scrape();
      const double predicted = metric_value(s, series("thptrace_predicted_copy_bytes", target, "bgsave")).value_or(0);
      ASSERT_GT(predicted, 0) << s;
      const double copies0 = metric_value(s, series("thptrace_copies_total", target)).value_or(0);
      const double child0 = metric_value(s, series("thptrace_child_cow_faults_total", target)).value_or(0);
      bgsave(n);
      // The fork's copies as the counters give them, and the forecast made of them: equal once the
      // episode is exported (a scrape can fall between the two on a busy host).
      double copied = 0, forecast = 0;
      for (const auto until = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < until;) {
        s = d.scrape();
        copied = (metric_value(s, series("thptrace_copies_total", target)).value_or(0) - copies0 +
                  metric_value(s, series("thptrace_child_cow_faults_total", target)).value_or(0) - child0) *
                 4096;
        forecast = metric_value(s, series("thptrace_predicted_copy_bytes", target, "bgsave")).value_or(0);
        if (copied > 0 && forecast == copied) break;
        std::this_thread::sleep_for(200ms);
      }
      ASSERT_GT(copied, 0) << s;
      EXPECT_EQ(forecast, copied) << s;
      all += fmt::format(" {:.1f} MB for {:.1f};", predicted / 1e6, copied / 1e6);
      // The forecast made before this fork against it, with the range docs/reference/metrics.md states.
      print_predict_outcome("daemon, bgsave", "copied_bytes", "history", predicted, predicted * 0.75, predicted * 1.25,
                            copied);
    }
  }
  std::cout << "daemon forecast: predicted" << all << "\n";

  // The limits: the need of a full sync now (the history is the last fork; the stream has no replica).
  s = d.scrape();
  const double rss = metric_value(s, series("thptrace_rss_bytes", target)).value_or(0);
  const double need =
      metric_value(s, series("thptrace_predicted_fork_memory_bytes", target, "full_sync_disk")).value_or(0);
  ASSERT_GT(need, 0) << s;
  ASSERT_TRUE(cg.ok()) << "no memory cgroup controller to make a test cgroup in (v1 memory or v2 with +memory)";
  ASSERT_TRUE(cg.add(redis.pid()));
  const std::string headroom =
      "thptrace_predicted_headroom_bytes{limit=\"cgroup\",reason=\"full_sync_disk\",target=\"" + target + "\"}";
  for (const double limit : {rss + need / 2, (rss + need) * 2}) {
    ASSERT_TRUE(cg.set_limit(static_cast<uint64_t>(limit))) << cg.dir();
    // The cgroup's files are read every 10 s while no fork lives.
    const bool below = limit < rss + need;
    const auto h = d.wait_for(
        headroom, [&](double v) { return below ? v < 0 : v > need; }, 30s);
    EXPECT_TRUE(h && (below ? *h < 0 : *h > need))
        << "limit " << limit << ", rss " << rss << ", need " << need << ": " << (h ? std::to_string(*h) : "no series");
  }
  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
}
