// The daemon's real HTTP endpoint against clients that do not behave: idle and slow connections
// must not stall a scrape, and the web configuration file (TLS, basic auth) is obeyed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <thread>

#include "harness.h"

using namespace thptrace::test;
using namespace std::chrono_literals;

namespace {

// A TCP connection to 127.0.0.1:port that the test holds open; -1 when it could not connect.
class Socket {
 public:
  explicit Socket(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }
  bool send(const std::string& s) const { return ::write(fd_, s.data(), s.size()) == static_cast<ssize_t>(s.size()); }
  // Whether the server has closed its side: a read returns end of file or an error.
  bool closed_by_server() const {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    return n <= 0;
  }

 private:
  int fd_;
};

}  // namespace

// 8 connections that send nothing and 2 that send half a request line and wait are open while the
// endpoint is scraped. The 2 s bound is a liveness check, not a speed assertion: with too few HTTP
// workers or a long request timeout the scrape waits for them (30 s with civetweb's defaults), which
// no bound of seconds would hide. The server then lets every one of them go.
TEST(Endpoint, IdleAndSlowClientsDoNotStallAScrape) {
  REQUIRE_BPF();
  Process workload({"sleep", "120"});
  const int port = free_port();
  Process d({thptrace_bin(), "daemon", "--listen", "127.0.0.1:" + std::to_string(port), "--pid",
             std::to_string(workload.pid())});
  ASSERT_TRUE(d.wait_stderr_line("serving metrics", 60s)) << d.err();
  ASSERT_TRUE(http_get(port, "/metrics")) << d.err();
  std::vector<std::unique_ptr<Socket>> hostile;
  for (int i = 0; i < 10; ++i) {
    hostile.push_back(std::make_unique<Socket>(port));
    ASSERT_GE(hostile.back()->fd(), 0);
    if (i >= 8) ASSERT_TRUE(hostile.back()->send("GET /metr"));
  }
  std::this_thread::sleep_for(300ms);  // accepted and handed to workers before the scrape
  const auto start = std::chrono::steady_clock::now();
  const auto body = http_get(port, "/metrics");
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(body) << d.err();
  EXPECT_NE(body->find("thptrace_build_info"), std::string::npos);
  EXPECT_LT(took, 2s) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
  const auto until = std::chrono::steady_clock::now() + 20s;
  size_t closed = 0;
  while (std::chrono::steady_clock::now() < until) {
    closed = 0;
    for (const auto& s : hostile) closed += s->closed_by_server();
    if (closed == hostile.size()) break;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(closed, hostile.size()) << "of the idle and slow connections, these were closed by the server";
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(30s), 0) << d.err();
}
