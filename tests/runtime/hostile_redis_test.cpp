// SPDX-License-Identifier: Apache-2.0
// The real daemon and capture against hostile Redis servers (tests/hostile/hostile_redis.py): one
// that refuses INFO, one that never answers, replies far over their bounds, and bytes that are not
// text. Every failure must back off (the fake counts how often it was asked), be counted on
// /metrics, be said once in the log, and leave the daemon serving.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.h"
#include "hostile.h"

using namespace thptrace::test;
using namespace std::chrono_literals;

namespace {

std::string series(const std::string& name, const std::string& target) { return name + "{target=\"" + target + "\"}"; }

size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// `thptrace daemon` watching the given addresses, serving /metrics on a free loopback port.
class Daemon {
 public:
  explicit Daemon(const std::vector<std::string>& addresses, const std::vector<std::string>& more = {})
      : port_(free_port()) {
    std::vector<std::string> argv = {thptrace_bin(), "daemon", "--listen", "127.0.0.1:" + std::to_string(port_)};
    for (const auto& a : addresses) argv.insert(argv.end(), {"--redis", a});
    argv.insert(argv.end(), more.begin(), more.end());
    proc_ = std::make_unique<Process>(argv);
  }
  ~Daemon() {
    proc_->signal(SIGTERM);
    proc_->wait(30s);
  }
  Process& proc() { return *proc_; }
  std::optional<std::string> scrape() { return http_get(port_, "/metrics"); }

 private:
  int port_;
  std::unique_ptr<Process> proc_;
};

}  // namespace

// A server whose user may not run INFO (an ACL user with -@dangerous), one that accepts and never
// answers, and one that rejects the password: each is asked a few times in 12 s (the backoff doubles
// from 1 s), not in a loop; the failures are counted per target and each reason is logged once.
TEST(HostileRedis, DaemonBacksOffFromRefusalsAndSilence) {
  REQUIRE_BPF();
  HostileRedis noperm({"--noperm-info"});
  HostileRedis silent({"--silent"});
  HostileRedis locked({"--require-auth", "--password", "the-right-one"});
  const std::string dir = make_temp_dir("thptrace-hostile-pw-");
  { std::ofstream(dir + "/password") << "a-wrong-one\n"; }
  Daemon d({noperm.address(), silent.address(), locked.address()}, {"--redis-password-file", dir + "/password"});
  ASSERT_TRUE(d.proc().wait_stderr_line("serving metrics", 60s)) << d.proc().err();
  std::this_thread::sleep_for(12s);
  const auto scrape = d.scrape();
  ASSERT_TRUE(scrape) << d.proc().err();
  for (const auto* server : {&noperm, &silent, &locked}) {
    const auto seen = server->stats();
    const std::string target = server->address();
    EXPECT_GE(seen.connections, 2) << target << ": tried again";
    EXPECT_LE(seen.connections, 10) << target;
    EXPECT_LE(seen.count("INFO"), 10) << target;
    EXPECT_LE(seen.count("AUTH"), 10) << target;
    EXPECT_GT(metric_value(*scrape, series("thptrace_redis_poll_failures_total", target)).value_or(0), 0)
        << target << "\n"
        << *scrape;
    EXPECT_EQ(metric_value(*scrape, series("thptrace_redis_up", target)), 0) << target;
  }
  // The rejected AUTH was the configured one, and nothing was asked after it.
  const auto locked_seen = locked.stats();
  for (const auto& args : locked_seen.auth) EXPECT_EQ(args, std::vector<std::string>{"a-wrong-one"});
  EXPECT_EQ(locked_seen.commands, locked_seen.count("AUTH"));
  // The refusal, as the server said it, once (one line per change of reason, not per try).
  const std::string err = d.proc().err();
  EXPECT_EQ(occurrences(err, "INFO refused: NOPERM this user has no permissions to run the 'info' command"), 1u) << err;
  EXPECT_EQ(occurrences(err, "Redis at " + silent.address() + " did not reply in time"), 1u) << err;
  EXPECT_EQ(occurrences(err, "Redis at " + locked.address() + " rejected the credentials"), 1u) << err;
  // After the refusal the fake was sent INFO server alone: nothing more on a connection that failed.
  EXPECT_EQ(noperm.stats().count("CONFIG"), 0);
  std::filesystem::remove_all(dir);
}

// --discover with a password: a fake named redis-server (a copy of python3) that asks for AUTH is
// sent none, is named by the port it listens on, and is said once to need AUTH that is not sent to
// it; a real redis-server whose executable the operator listed gets the password and answers.
TEST(HostileRedis, DiscoverSendsThePasswordOnlyWhereTheOperatorSaid) {
  REQUIRE_BPF();
  HostileRedis fake({"--require-auth"}, "redis-server");
  const std::string secret = "only-for-the-real-one";
  RedisServer real({"--requirepass", secret});
  const std::string dir = make_temp_dir("thptrace-hostile-discover-");
  { std::ofstream(dir + "/password") << secret << "\n"; }
  const std::string redis_exe = std::filesystem::canonical("/proc/" + std::to_string(real.pid()) + "/exe");
  Daemon d({}, {"--discover", "--redis-password-file", dir + "/password", "--discover-credentials-exe", redis_exe});
  ASSERT_TRUE(d.proc().wait_stderr_line("serving metrics", 60s)) << d.proc().err();
  ASSERT_TRUE(d.proc().wait_stderr_line("it needs AUTH, and the credentials are not sent to it", 30s))
      << d.proc().err();
  std::optional<std::string> scrape;
  for (int i = 0; i < 100; ++i) {
    scrape = d.scrape();
    if (scrape && metric_value(*scrape, series("thptrace_redis_up", real.address())) == 1) break;
    std::this_thread::sleep_for(200ms);
  }
  ASSERT_TRUE(scrape) << d.proc().err();
  EXPECT_EQ(metric_value(*scrape, series("thptrace_redis_up", real.address())), 1) << d.proc().err();
  EXPECT_EQ(metric_value(*scrape, series("thptrace_redis_up", fake.address())), 0) << *scrape;
  // Its kernel side is traced all the same, under the address it listens on.
  EXPECT_GT(metric_value(*scrape, series("thptrace_rss_bytes", fake.address())).value_or(0), 0) << *scrape;
  const auto seen = fake.stats();
  EXPECT_GE(seen.connections, 1);
  EXPECT_TRUE(seen.auth.empty()) << "the fake was sent AUTH " << seen.auth.size() << " times";
  const std::string err = d.proc().err();
  EXPECT_NE(err.find("is not one of --discover-credentials-exe"), std::string::npos) << err;
  EXPECT_EQ(occurrences(err, "it needs AUTH, and the credentials are not sent to it"), 1u) << err;
  EXPECT_EQ(err.find(secret), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Replies over their command's bound (an 8 MiB INFO, INFO listing 100,000 replicas) are refused
// without reading them; 5,000 replicas fit INFO's bound and only the first 256 are read; a server
// whose fields and errors hold 0xFF and control bytes. The daemon stays up and answers a scrape.
TEST(HostileRedis, DaemonBoundsWhatItReads) {
  REQUIRE_BPF();
  HostileRedis huge({"--huge-info", std::to_string(8 << 20)});
  HostileRedis crowd({"--replicas", "100000"});
  HostileRedis many({"--replicas", "5000"});
  HostileRedis binary({"--invalid-utf8"});
  Daemon d({huge.address(), crowd.address(), many.address(), binary.address()});
  ASSERT_TRUE(d.proc().wait_stderr_line("serving metrics", 60s)) << d.proc().err();
  ASSERT_TRUE(d.proc().wait_stderr_line("lists 5000 replicas; only the first 256 are read", 20s)) << d.proc().err();
  std::this_thread::sleep_for(3s);
  const auto scrape = d.scrape();
  ASSERT_TRUE(scrape) << d.proc().err();
  for (const auto* server : {&huge, &crowd}) {
    const std::string target = server->address();
    EXPECT_EQ(metric_value(*scrape, series("thptrace_redis_up", target)), 0) << target;
    EXPECT_GT(metric_value(*scrape, series("thptrace_redis_poll_failures_total", target)).value_or(0), 0) << target;
    EXPECT_LE(server->stats().count("INFO"), 10) << target;
  }
  EXPECT_EQ(metric_value(*scrape, series("thptrace_redis_up", many.address())), 1) << *scrape;
  EXPECT_EQ(metric_value(*scrape, series("thptrace_redis_up", binary.address())), 1) << *scrape;
  const std::string err = d.proc().err();
  EXPECT_EQ(occurrences(err, "refused an oversized reply to INFO: "), 2u) << err;
  EXPECT_EQ(occurrences(err, "(the limit is 1048576)"), 2u) << err;
  // The server's error text reached the log cut and escaped: no raw byte of it.
  EXPECT_NE(err.find("LATENCY HISTOGRAM refused: ERR \\xff\\x00\\x1b[2Jyyy"), std::string::npos) << err;
  for (const char bad : {'\xff', '\x1b', '\x7f'}) {
    EXPECT_EQ(err.find(bad), std::string::npos) << err;
    EXPECT_EQ(scrape->find(bad), std::string::npos);
  }
  EXPECT_EQ(d.proc().wait(0ms), std::nullopt) << "the daemon exited: " << err;
}

// A capture of a server that refuses INFO: it asks a few times, not in a loop, and its report says
// why the Redis figures are missing.
TEST(HostileRedis, CaptureSaysWhyRedisFiguresAreMissing) {
  REQUIRE_BPF();
  HostileRedis noperm({"--noperm-info"});
  const std::string dir = make_temp_dir("thptrace-hostile-capture-");
  const std::string json = dir + "/report.json";
  Process p({thptrace_bin(), "--pid", std::to_string(noperm.pid()), "--redis", noperm.address(), "--duration", "6",
             "--json", json});
  const auto code = p.wait(60s);
  EXPECT_EQ(code, 0) << p.err();
  ASSERT_TRUE(std::filesystem::exists(json)) << p.err();
  const auto report = read_json(json);
  EXPECT_FALSE(report.contains("redis")) << report.dump(2);
  EXPECT_EQ(report.value("redis_error", ""),
            "INFO refused: NOPERM this user has no permissions to run the 'info' command")
      << report.dump(2);
  EXPECT_LE(noperm.stats().count("INFO"), 8);
  std::filesystem::remove_all(dir);
}

// A capture of a server that answers INFO but refuses LATENCY and CONFIG (a user with -@dangerous
// and +info): the report has its INFO figures and says which are missing and why; the refused
// commands are asked again only after their own backoff.
TEST(HostileRedis, CaptureSaysWhichFiguresARefusalLeftOut) {
  REQUIRE_BPF();
  HostileRedis partial({"--refuse", "LATENCY", "--refuse", "CONFIG"});
  const std::string dir = make_temp_dir("thptrace-hostile-capture-");
  const std::string json = dir + "/report.json";
  Process p({thptrace_bin(), "--pid", std::to_string(partial.pid()), "--redis", partial.address(), "--duration", "6",
             "--json", json});
  const auto code = p.wait(60s);
  EXPECT_EQ(code, 0) << p.err();
  ASSERT_TRUE(std::filesystem::exists(json)) << p.err();
  const auto report = read_json(json);
  ASSERT_TRUE(report.contains("redis")) << report.dump(2);
  EXPECT_EQ(report["redis"]["version"], "7.0.15");
  EXPECT_EQ(
      report["redis"]["refused"],
      nlohmann::json::array({"CONFIG GET refused: NOPERM this user has no permissions to run the 'config' command",
                             "LATENCY HISTOGRAM refused: NOPERM this user has no permissions to run the 'latency' "
                             "command"}))
      << report["redis"].dump(2);
  EXPECT_NE(p.out().find("redis figure missing: LATENCY HISTOGRAM refused: NOPERM"), std::string::npos) << p.out();
  // Polled every second for 6 s; the refused commands at 0, 1, 3 s (and maybe 7): not with every poll.
  const auto seen = partial.stats();
  EXPECT_GE(seen.count("INFO"), 5);
  EXPECT_LE(seen.count("LATENCY"), 4);
  EXPECT_LE(seen.count("CONFIG"), 4);
  std::filesystem::remove_all(dir);
}
