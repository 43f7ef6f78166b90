// SPDX-License-Identifier: Apache-2.0
// Redis in real podman containers (runc, cgroupfs, images assembled from Debian packages by
// scripts/container-image.sh): with host networking, and two containers in their own network
// namespaces both listening on 6379, published on different 127.0.0.1 ports. The daemon and the
// captures run on the host; BGSAVE and a full sync in each container must be counted under that
// container's target, named by uprobes attached through /proc/PID/exe, and timed within
// max(25%, 150 µs) of that Redis's own latest_fork_usec.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "container_harness.h"
#include "harness.h"

using namespace thptrace::test;
using namespace std::chrono_literals;

namespace {

// A capture of the server at `address` (pid resolved by thptrace) until SIGINT.
struct Capture {
  std::string dir = make_temp_dir("thptrace-ctr-cap-");
  std::unique_ptr<Process> proc;
  explicit Capture(const std::string& address)
      : proc(std::make_unique<Process>(
            std::vector<std::string>{thptrace_bin(), "--redis", address, "--json", dir + "/r.json"})) {}
  ~Capture() { std::filesystem::remove_all(dir); }
  nlohmann::json stop() {
    proc->signal(SIGINT);
    EXPECT_EQ(proc->wait(60s), 0) << proc->err();
    return std::filesystem::exists(dir + "/r.json") ? read_json(dir + "/r.json") : nlohmann::json::object();
  }
};

// BGSAVE, then a full sync over disk to a fresh replica on the host; returns BGSAVE's latest_fork_usec.
int64_t bgsave_and_full_sync(const RedisContainer& c) {
  c.cmd({"BGSAVE"});
  EXPECT_TRUE(c.wait_info("rdb_bgsave_in_progress", "0", 60s));
  const int64_t fork_usec = std::stoll(c.info_field("latest_fork_usec"));
  std::this_thread::sleep_for(300ms);
  RedisServer replica({"--replicaof", "127.0.0.1", std::to_string(c.host_port())});
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < until &&
         !(replica.info_field("master_link_status") == "up" && c.info_field("rdb_bgsave_in_progress") == "0"))
    std::this_thread::sleep_for(50ms);
  EXPECT_EQ(replica.info_field("master_link_status"), "up");
  return fork_usec;
}

void check_capture(const nlohmann::json& report, const RedisContainer& c, int64_t bgsave_fork_usec) {
  EXPECT_EQ(report["target"]["pid"], c.pid()) << "the capture traced another process than " << c.name();
  EXPECT_EQ(report["probes"]["redis"], "uprobe") << report["probes"].dump();
  const auto& forks = report["forks"];
  ASSERT_EQ(forks.size(), 2u) << report.dump(2);
  EXPECT_EQ(forks[0]["reason"], "bgsave");
  EXPECT_EQ(forks[1]["reason"], "full_sync_disk");
  for (const auto& f : forks) EXPECT_EQ(f["reason_source"], "uprobe") << f.dump();
  const double ours = forks[0]["fork_duration_us"].get<double>();
  const double theirs = static_cast<double>(bgsave_fork_usec);
  EXPECT_NEAR(ours, theirs, std::max(0.25 * theirs, 150.0)) << report.dump(2);
  EXPECT_EQ(report["redis"]["total_forks_delta"], 2);
}

}  // namespace

TEST(Containers, HostNetworkRedis) {
  REQUIRE_BPF();
  REQUIRE_PODMAN();
  RedisContainer c(RedisContainer::Network::host);
  c.cmd({"DEBUG", "POPULATE", "200000", "key", "400"});
  ASSERT_NE(c.pid(), 0);
  EXPECT_EQ(c.info_field("process_id"), "1") << "the container has its own PID namespace";
  Capture cap(c.address());
  ASSERT_TRUE(cap.proc->wait_stderr_line("tracing pid " + std::to_string(c.pid()), 60s)) << cap.proc->err();
  std::this_thread::sleep_for(300ms);
  const int64_t fork_usec = bgsave_and_full_sync(c);
  std::this_thread::sleep_for(300ms);
  check_capture(cap.stop(), c, fork_usec);
}

TEST(Containers, TwoRedisOnTheSamePortInTheirOwnNetworks) {
  REQUIRE_BPF();
  REQUIRE_PODMAN();
  RedisContainer a(RedisContainer::Network::bridge);
  RedisContainer b(RedisContainer::Network::bridge);
  a.cmd({"DEBUG", "POPULATE", "200000", "key", "400"});
  b.cmd({"DEBUG", "POPULATE", "100000", "key", "400"});
  ASSERT_NE(a.pid(), b.pid());
  EXPECT_EQ(a.info_field("tcp_port"), "6379");
  EXPECT_EQ(b.info_field("tcp_port"), "6379");

  // --pid of one container with the address of the other: one sentence, exit 2.
  {
    Process p({thptrace_bin(), "--pid", std::to_string(a.pid()), "--redis", b.address(), "--duration", "1"});
    EXPECT_EQ(p.wait(30s), 2) << p.err();
    EXPECT_NE(p.err().find("is not the server at " + b.address() + ": that is host pid " + std::to_string(b.pid())),
              std::string::npos)
        << p.err();
  }

  const int port = free_port();
  Process daemon({thptrace_bin(), "daemon", "--listen", "127.0.0.1:" + std::to_string(port), "--redis", a.address(),
                  "--redis", b.address(), "--poll-interval-ms", "50"});
  Capture cap_a(a.address());
  Capture cap_b(b.address());
  ASSERT_TRUE(cap_a.proc->wait_stderr_line("tracing pid " + std::to_string(a.pid()), 60s)) << cap_a.proc->err();
  ASSERT_TRUE(cap_b.proc->wait_stderr_line("tracing pid " + std::to_string(b.pid()), 60s)) << cap_b.proc->err();
  const auto metric = [&](const std::string& series) {
    return metric_value(http_get(port, "/metrics").value_or(""), series);
  };
  // Each target's series carry its container's name, podman's (no Kubernetes annotations here).
  const auto forks = [&](const std::string& target, const std::string& reason) {
    const auto& c = target == a.address() ? a : b;
    return "thptrace_forks_total{container=\"" + c.name() + "\",reason=\"" + reason + "\",target=\"" + target + "\"}";
  };
  const auto wait_metric = [&](const std::string& series, double want) {
    const auto until = std::chrono::steady_clock::now() + 30s;
    std::optional<double> v;
    while (std::chrono::steady_clock::now() < until && (v = metric(series)) != want) std::this_thread::sleep_for(100ms);
    return v;
  };
  for (const auto* c : {&a, &b})
    ASSERT_EQ(wait_metric("thptrace_redis_up{container=\"" + c->name() + "\",target=\"" + c->address() + "\"}", 1), 1)
        << daemon.err() << http_get(port, "/metrics").value_or("");
  std::this_thread::sleep_for(1s);  // the daemon resolves each target's pid on its first INFO

  const int64_t fork_a = bgsave_and_full_sync(a);
  EXPECT_EQ(wait_metric(forks(a.address(), "bgsave"), 1), 1) << daemon.err();
  EXPECT_EQ(wait_metric(forks(a.address(), "full_sync_disk"), 1), 1) << daemon.err();
  EXPECT_EQ(metric(forks(b.address(), "bgsave")), 0) << "a's forks were counted under b";
  const int64_t fork_b = bgsave_and_full_sync(b);
  EXPECT_EQ(wait_metric(forks(b.address(), "bgsave"), 1), 1) << daemon.err();
  EXPECT_EQ(wait_metric(forks(b.address(), "full_sync_disk"), 1), 1) << daemon.err();
  EXPECT_EQ(metric(forks(a.address(), "bgsave")), 1);
  // The daemon's fork time of each BGSAVE, from its histogram's sum.
  const auto sum = [&](const RedisContainer& c) {
    return metric("thptrace_fork_duration_seconds_sum{container=\"" + c.name() + "\",reason=\"bgsave\",target=\"" +
                  c.address() + "\"}")
               .value_or(0) *
           1e6;
  };
  EXPECT_NEAR(sum(a), fork_a, std::max(0.25 * fork_a, 150.0));
  EXPECT_NEAR(sum(b), fork_b, std::max(0.25 * fork_b, 150.0));
  EXPECT_EQ(metric("thptrace_probe_info{family=\"redis\",mode=\"uprobe\"}"), 1);
  std::this_thread::sleep_for(300ms);
  check_capture(cap_a.stop(), a, fork_a);
  check_capture(cap_b.stop(), b, fork_b);
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(30s), 0) << daemon.err();
  EXPECT_EQ(leftover_thptrace_programs(), std::vector<std::string>{});
}

// Two pods' Redis on the same inner port (6379, each in its own network namespace) and one with host
// networking, found by --discover: each is watched, under a label of its own (a loopback address in a
// container names nothing on the host, so it carries the pod), and every series of the two pods
// carries the Kubernetes names their runtime wrote in the OCI bundle (podman here, with the
// annotations CRI-O writes), without the Kubernetes API. A BGSAVE in one pod is counted under it
// alone; a capture of it carries the same names.
TEST(Containers, DiscoveryWatchesTwoPodsOnTheSamePortByTheirKubernetesNames) {
  REQUIRE_BPF();
  REQUIRE_PODMAN();
  const auto pod = [](const std::string& name) {
    return std::vector<std::string>{"io.kubernetes.pod.namespace=shop", "io.kubernetes.pod.name=" + name,
                                    "io.kubernetes.container.name=redis"};
  };
  // cache-0 lets in only its ACL user, whose login the daemon has for that pod alone.
  RedisContainer p0(RedisContainer::Network::bridge, {"--user", "thptrace", "on", ">cache-0-secret", "~*", "+@all"},
                    pod("cache-0"));
  p0.cmd({"ACL", "SETUSER", "default", "off"});
  RedisContainer p1(RedisContainer::Network::bridge, {}, pod("cache-1"));
  RedisContainer host(RedisContainer::Network::host);
  const std::string secret = make_temp_dir("thptrace-pod-secret-");
  std::ofstream(secret + "/username") << "thptrace\n";
  std::ofstream(secret + "/password") << "cache-0-secret\n";
  const int port = free_port();
  Process daemon({thptrace_bin(), "daemon", "--listen", "127.0.0.1:" + std::to_string(port), "--discover",
                  "--redis-auth", "shop/cache-0=" + secret});
  const auto series = [](const std::string& metric, const std::string& name, const std::string& reason = "") {
    return metric + "{container=\"redis\",namespace=\"shop\",pod=\"" + name + "\"," +
           (reason.empty() ? "" : "reason=\"" + reason + "\",") + "target=\"127.0.0.1:6379@shop/" + name + "\"}";
  };
  const auto wait_metric = [&](const std::string& s, double want) {
    const auto until = std::chrono::steady_clock::now() + 30s;
    std::optional<double> v;
    while (std::chrono::steady_clock::now() < until &&
           (v = metric_value(http_get(port, "/metrics").value_or(""), s)) != want)
      std::this_thread::sleep_for(200ms);
    return v;
  };
  // Both up: cache-0 with the login its rule names (a process's pod is the runtime's record, so the
  // rule is the operator's word that the login goes there), cache-1 without AUTH (sent that login,
  // a server with no ACL user of that name would refuse it).
  for (const char* name : {"cache-0", "cache-1"})
    EXPECT_EQ(wait_metric(series("thptrace_redis_up", name), 1), 1)
        << name << "\n"
        << daemon.err() << http_get(port, "/metrics").value_or("");
  // The host-network one by its address, with podman's name for its container and no pod.
  EXPECT_EQ(wait_metric("thptrace_redis_up{container=\"" + host.name() + "\",target=\"" + host.address() + "\"}", 1), 1)
      << daemon.err() << http_get(port, "/metrics").value_or("");
  std::this_thread::sleep_for(1s);  // each pid is followed on its first INFO
  Capture cap(p1.address());
  ASSERT_TRUE(cap.proc->wait_stderr_line("tracing pid " + std::to_string(p1.pid()), 60s)) << cap.proc->err();
  p1.cmd({"BGSAVE"});
  EXPECT_EQ(wait_metric(series("thptrace_forks_total", "cache-1", "bgsave"), 1), 1) << daemon.err();
  EXPECT_EQ(metric_value(http_get(port, "/metrics").value_or(""), series("thptrace_forks_total", "cache-0", "bgsave")),
            0)
      << "cache-1's fork was counted under cache-0";
  const auto report = cap.stop();
  ASSERT_TRUE(report["target"].contains("container")) << report["target"].dump(2);
  const auto& c = report["target"]["container"];
  EXPECT_EQ(c["namespace"], "shop");
  EXPECT_EQ(c["pod"], "cache-1");
  EXPECT_EQ(c["name"], "redis");
  EXPECT_EQ(c["id"], podman({"inspect", p1.name(), "--format", "{{.Id}}"}));
  ASSERT_EQ(report["forks"].size(), 1u) << report.dump(2);
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(30s), 0) << daemon.err();
  EXPECT_EQ(daemon.err().find("cache-0-secret"), std::string::npos) << daemon.err();
  std::filesystem::remove_all(secret);
}

// The daemon's own image (scripts/container-image.sh thptrace, from this build's .deb) run with the settings of
// deploy/kubernetes/base/daemonset.yaml: host PID namespace, its own network namespace, uid 0 with only
// BPF, PERFMON, SYS_PTRACE and DAC_READ_SEARCH, no privilege escalation, a read-only root, /sys/kernel/btf
// and the THP sysfs directory mounted read-only, its default command (daemon --discover --listen
// 0.0.0.0:9966). podman's default seccomp profile (Debian 12) allows bpf() and perf_event_open() only
// with CAP_SYS_ADMIN, so, as the DaemonSet's notes say for such runtimes, a local profile allows them.
TEST(Containers, DaemonFromItsImageWithTheDaemonSetSettings) {
  REQUIRE_BPF();
  REQUIRE_PODMAN();
  // Built from the Debian package of this build, as an operator's would be.
  const std::string image = container_image("thptrace", THPTRACE_BUILD_ROOT);
  RedisContainer redis(RedisContainer::Network::bridge);
  redis.cmd({"DEBUG", "POPULATE", "20000", "key", "100"});
  const std::string dir = make_temp_dir("thptrace-seccomp-");
  {
    std::ifstream in("/usr/share/containers/seccomp.json");
    ASSERT_TRUE(in) << "podman's default seccomp profile is missing";
    auto profile = nlohmann::json::parse(in);
    for (auto& rule : profile["syscalls"]) {
      auto& names = rule["names"];
      names.erase(std::remove_if(names.begin(), names.end(),
                                 [](const nlohmann::json& n) { return n == "bpf" || n == "perf_event_open"; }),
                  names.end());
    }
    profile["syscalls"].push_back({{"names", {"bpf", "perf_event_open"}}, {"action", "SCMP_ACT_ALLOW"}});
    std::ofstream(dir + "/seccomp.json") << profile.dump();
  }
  const int port = free_port();
  const std::string name = container_name();
  struct Remove {
    std::string name, dir;
    ~Remove() {
      try {
        podman({"rm", "-f", "-t", "5", name});
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
      std::filesystem::remove_all(dir);
    }
  } remove{name, dir};
  podman({"run",
          "-d",
          "--name",
          name,
          "--pid",
          "host",
          "--cap-drop",
          "ALL",
          "--cap-add",
          "BPF,PERFMON,SYS_PTRACE,DAC_READ_SEARCH",
          "--security-opt",
          "no-new-privileges",
          "--security-opt",
          "seccomp=" + dir + "/seccomp.json",
          "--read-only",
          "-v",
          "/sys/kernel/btf:/sys/kernel/btf:ro",
          "-v",
          "/sys/kernel/mm/transparent_hugepage:/sys/kernel/mm/transparent_hugepage:ro",
          "-p",
          "127.0.0.1:" + std::to_string(port) + ":9966",
          "--ulimit",
          "nofile=20000:20000",
          "--ulimit",
          "nproc=4096:4096",
          image});
  const auto logs = [&] {
    try {
      Process p(podman_argv({"logs", name}));
      p.wait(30s);
      return p.out() + p.err();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  };
  // Discovery labels the Redis container by its bridge address (from its namespace's fib_trie), which
  // the daemon's own network namespace reaches.
  const std::string target = redis.bridge_ip() + ":6379";
  // Its series also carry the container's name (podman's, read from the host's files through
  // /proc/1/root): matched by their target, whatever else they carry.
  const auto wait_metric = [&](const std::string& name, const std::map<std::string, std::string>& labels, double want) {
    const auto until = std::chrono::steady_clock::now() + 60s;
    std::optional<double> v;
    while (std::chrono::steady_clock::now() < until &&
           (v = metric_value_with(http_get(port, "/metrics").value_or(""), name, labels)) != want)
      std::this_thread::sleep_for(200ms);
    return v;
  };
  ASSERT_EQ(wait_metric("thptrace_redis_up", {{"target", target}}, 1), 1) << logs();
  EXPECT_EQ(metric_value_with(http_get(port, "/metrics").value_or(""), "thptrace_redis_up",
                              {{"target", target}, {"container", redis.name()}}),
            1)
      << http_get(port, "/metrics").value_or("");
  std::this_thread::sleep_for(1s);
  redis.cmd({"BGSAVE"});
  EXPECT_EQ(wait_metric("thptrace_forks_total", {{"reason", "bgsave"}, {"target", target}}, 1), 1) << logs();
  const std::string scrape = http_get(port, "/metrics").value_or("");
  EXPECT_EQ(metric_value(scrape, "thptrace_probe_info{family=\"fork\",mode=\"tp_btf\"}"), 1) << scrape;
  EXPECT_GT(metric_value_with(scrape, "thptrace_rss_bytes", {{"target", target}}).value_or(0), 1e6) << scrape;
  // Without CAP_SYS_ADMIN the daemon cannot join the Redis container's network namespace and says
  // so, once, naming the address it uses instead; the uprobes are refused and reasons come from INFO.
  const std::string log = logs();
  EXPECT_NE(
      log.find("cannot enter (setns: Operation not permitted; it needs CAP_SYS_ADMIN): reaching it from outside, by " +
               target),
      std::string::npos)
      << log;
  EXPECT_NE(log.find(target + ": entry points: none"), std::string::npos) << log;
}
