// SPDX-License-Identifier: Apache-2.0
// `thptrace daemon --discover` as servers come and go: a discovered redis-server that exits is let go
// (its series, its watcher, its kernel side), and the number of discovered servers is capped. Other
// tests on the host may run their own redis-server at the same time: only this test's servers'
// labels are asserted on.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <thread>

#include "harness.h"

using namespace thptrace::test;
using namespace std::chrono_literals;

namespace {

class DiscoveringDaemon {
 public:
  explicit DiscoveringDaemon(const std::vector<std::string>& extra = {}) : port_(free_port()) {
    std::vector<std::string> argv = {thptrace_bin(), "daemon", "--listen", "127.0.0.1:" + std::to_string(port_),
                                     "--discover"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc_ = std::make_unique<Process>(argv);
  }
  Process& proc() { return *proc_; }
  std::string scrape() { return http_get(port_, "/metrics").value_or(""); }
  // Waits until pred(scrape) holds; false on timeout.
  template <typename Pred>
  bool wait_until(Pred pred, std::chrono::seconds timeout) {
    return thptrace::test::wait_until([&] { return pred(scrape()); }, timeout, 200ms);
  }

 private:
  int port_;
  std::unique_ptr<Process> proc_;
};

std::string label_of(const std::string& address) { return "target=\"" + address + "\""; }

// Listens on 127.0.0.1:port for `d` and returns how many connections it accepted.
int connections_within(int port, std::chrono::milliseconds d) {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  const int one = 1;
  ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(s, 16) != 0) {
    ::close(s);
    return -1;
  }
  int accepted = 0;
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{s, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      const int c = ::accept(s, nullptr, nullptr);
      if (c >= 0) {
        ++accepted;
        ::close(c);
      }
    }
  }
  ::close(s);
  return accepted;
}

// The labels of thptrace_redis_up series in a scrape that name one of `ours`.
std::set<std::string> our_targets(const std::string& scrape, const std::vector<std::string>& ours) {
  std::set<std::string> out;
  for (const auto& a : ours)
    if (metric_value(scrape, "thptrace_redis_up{" + label_of(a) + "}")) out.insert(a);
  return out;
}

}  // namespace

TEST(Discovery, AnExitedServerIsLetGo) {
  REQUIRE_BPF();
  DiscoveringDaemon d;
  auto redis = std::make_unique<RedisServer>();
  const std::string label = label_of(redis->address());
  const int port = redis->port();
  ASSERT_TRUE(
      d.wait_until([&](const std::string& s) { return metric_value(s, "thptrace_redis_up{" + label + "}") == 1; }, 30s))
      << d.proc().err();
  ASSERT_TRUE(d.wait_until(
      [&](const std::string& s) { return s.find("thptrace_cow_faults_total{" + label + "}") != std::string::npos; },
      5s));

  // SHUTDOWN does not answer; the destructor then finds nothing to shut down and reaps the process.
  if (auto c = redis->client()) c->command({"SHUTDOWN", "NOSAVE"});
  redis.reset();
  EXPECT_TRUE(d.wait_until([&](const std::string& s) { return s.find(label) == std::string::npos; }, 15s))
      << "series of the exited server are still exported:\n"
      << d.scrape();

  // Whoever binds the port next is a stranger: nothing may connect to it (the watcher retried every
  // few seconds while it lived, at most 5 s apart).
  EXPECT_EQ(connections_within(port, 8s), 0) << d.proc().err();
  EXPECT_NE(d.proc().err().find("no longer watched"), std::string::npos) << d.proc().err();

  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
}

TEST(Discovery, DiscoveredServersAreCapped) {
  REQUIRE_BPF();
  RedisServer a, b;
  const std::vector<std::string> ours = {a.address(), b.address()};
  DiscoveringDaemon d({"--max-discovered", "1"});
  // One of the host's redis-servers is taken (ours or another test's), the others are named once.
  EXPECT_TRUE(d.proc().wait_stderr_line("raise --max-discovered", 30s)) << d.proc().err();
  for (int i = 0; i < 10; ++i) {
    EXPECT_LE(our_targets(d.scrape(), ours).size(), 1u);
    std::this_thread::sleep_for(600ms);
  }
  d.proc().signal(SIGTERM);
  EXPECT_EQ(d.proc().wait(30s), 0) << d.proc().err();
  // One line per server left out, not one per discovery round (every 5 s, two or more here).
  const std::string err = d.proc().err();
  const std::string needle = "redis-server pid ";
  std::vector<std::string> declined;
  for (size_t at = err.find(needle); at != std::string::npos; at = err.find(needle, at + 1)) {
    const size_t end = err.find('\n', at);
    const std::string line = err.substr(at, end - at);
    if (line.find("raise --max-discovered") != std::string::npos) declined.push_back(line);
  }
  EXPECT_FALSE(declined.empty()) << err;
  EXPECT_EQ(std::set<std::string>(declined.begin(), declined.end()).size(), declined.size()) << err;
}
