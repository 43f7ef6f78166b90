// SPDX-License-Identifier: Apache-2.0
// Connection timeouts against a "frozen Redis": a socket that accepts TCP but never answers.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "loadgen/connection.h"

namespace thptrace::loadgen {
namespace {

using namespace std::chrono_literals;

// Listens on 127.0.0.1:<ephemeral>; the kernel completes handshakes from the backlog, so a
// client connects fine and then waits forever for a reply that never comes.
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(fd_, 16);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentListener() { close(fd_); }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(LoadgenConnection, FrozenServerTimesOutInsteadOfHanging) {
  SilentListener frozen;
  ASSERT_GT(frozen.port(), 0);
  ConnectionOptions options;
  options.port = frozen.port();
  options.io_timeout = 200ms;

  const auto start = std::chrono::steady_clock::now();
  try {
    Connection::open(options);
    FAIL() << "a server that never answers PING must not be accepted";
  } catch (const LoadgenError& e) {
    EXPECT_NE(std::string(e.what()).find("did not answer within 200 ms"), std::string::npos) << e.what();
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 150ms);
  EXPECT_LT(waited, 5s);
}

}  // namespace
}  // namespace thptrace::loadgen
