// SPDX-License-Identifier: Apache-2.0
// The daemon's real HTTP endpoint against clients that do not behave: idle and slow connections
// must not stall a scrape, and the web configuration file's basic auth users are obeyed.
#include <arpa/inet.h>
#include <crypt.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
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

std::string bcrypt(const std::string& password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  if (!crypt_gensalt_rn("$2b$", 5, nullptr, 0, salt, sizeof salt)) return {};
  crypt_data data{};
  const char* h = crypt_r(password.c_str(), salt, &data);
  return h ? h : "";
}

// The HTTP status curl got for /metrics with `user` (USER:PASSWORD, or "" for none); 0: no answer.
int status_with(int port, const std::string& user) {
  std::string cmd = "curl -s -o /dev/null -m 10 -w '%{http_code}' ";
  if (!user.empty()) cmd += "-u '" + user + "' ";
  cmd += "http://127.0.0.1:" + std::to_string(port) + "/metrics";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return 0;
  char buf[16] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, p);
  ::pclose(p);
  return n ? std::atoi(buf) : 0;
}

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
    if (i >= 8) {
      ASSERT_TRUE(hostile.back()->send("GET /metr"));
    }
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

// --web.config.file in the exporters' format, named in the daemon's config file: the right password
// gets the scrape, a wrong one, an unknown user and none get 401.
TEST(Endpoint, BasicAuthFromTheWebConfigFile) {
  REQUIRE_BPF();
  const std::string dir = make_temp_dir("thptrace-web-");
  const std::string hash = bcrypt("s3cret");
  ASSERT_EQ(hash.rfind("$2b$", 0), 0u) << hash;
  std::ofstream(dir + "/web.yml") << "basic_auth_users:\n  prometheus: " << hash << "\n";
  std::ofstream(dir + "/daemon.conf") << "web.config.file = " << dir << "/web.yml\n";
  Process workload({"sleep", "120"});
  const int port = free_port();
  Process d({thptrace_bin(), "daemon", "--listen", "127.0.0.1:" + std::to_string(port), "--pid",
             std::to_string(workload.pid()), "--config", dir + "/daemon.conf"});
  ASSERT_TRUE(d.wait_stderr_line("serving metrics", 60s)) << d.err();
  EXPECT_EQ(status_with(port, "prometheus:s3cret"), 200);
  EXPECT_EQ(status_with(port, "prometheus:wrong"), 401);
  EXPECT_EQ(status_with(port, "someone:s3cret"), 401);
  EXPECT_EQ(status_with(port, ""), 401);
  EXPECT_FALSE(http_get(port, "/metrics").value_or("").find("thptrace_build_info") != std::string::npos);
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(30s), 0) << d.err();
  std::filesystem::remove_all(dir);
}

// A web configuration the daemon cannot serve is a usage error with one sentence, before anything
// is loaded: TLS (Debian 12's civetweb crashes on TLS connections), a password that is not a bcrypt
// hash, a key it does not know, a file that is not YAML.
TEST(Endpoint, BadWebConfigIsAUsageError) {
  const std::string dir = make_temp_dir("thptrace-web-");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n", "terminate TLS in front"},
      {"basic_auth_users:\n  prometheus: plaintext\n", "is not a bcrypt hash"},
      {"http_server_config:\n  http2: false\n", "is not supported"},
      {"basic_auth_users: [\n", "not valid YAML"}};
  for (const auto& [text, says] : cases) {
    std::ofstream(dir + "/web.yml", std::ios::trunc) << text;
    Process d({thptrace_bin(), "daemon", "--pid", "1", "--web.config.file", dir + "/web.yml"});
    EXPECT_EQ(d.wait(30s), 2) << text;
    const std::string err = d.err();
    EXPECT_NE(err.find(says), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
  std::filesystem::remove_all(dir);
}
