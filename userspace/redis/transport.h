// SPDX-License-Identifier: Apache-2.0
#pragma once
// The bytes under the Redis protocol: a TCP or unix stream socket, optionally with TLS on it, and
// nothing else. Every call has a deadline: a frozen or silent server gives an error, not a hang.

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "redis/address.h"
#include "redis/tls.h"

namespace thptrace::redis {

using Deadline = std::chrono::steady_clock::time_point;

// Why connecting failed. `tls` marks a failure that retrying will not mend (a certificate the
// server or we refuse, a server that does not speak TLS): a capture stops on it.
struct ConnectError {
  std::string sentence;
  bool tls = false;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Sends all of data; false and one sentence in *error otherwise.
  virtual bool write_all(std::string_view data, Deadline deadline, std::string* error) = 0;
  // Waits up to the deadline for bytes and reads some: > 0 bytes read; 0 and *error otherwise
  // (the peer closed, a timeout, a TLS or socket error).
  virtual size_t read_some(char* buf, size_t size, Deadline deadline, std::string* error) = 0;
  // For an event loop: reads what has come without waiting. > 0 bytes read; 0 when nothing has
  // come yet; -1 and *error when the connection failed (closed, a TLS or socket error).
  virtual ssize_t read_now(char* buf, size_t size, std::string* error) = 0;
  // The socket, to wait on for readability (read_now() then says what came).
  virtual int fd() const = 0;
};

// Connects to addr; with tls, runs the handshake and verifies the server's certificate. nullptr and
// *error when it cannot. netns_pid, when not 0, reaches the address from that process's network
// namespace (the socket is made there) and a unix path through its root (/proc/PID/root).
// "" when this process may join pid's network namespace (setns needs CAP_SYS_ADMIN), else why not.
std::string netns_entry_error(pid_t pid);

std::unique_ptr<Transport> connect_transport(const Address& addr, const TlsContext* tls, pid_t netns_pid,
                                             std::chrono::milliseconds timeout, ConnectError* error);

}  // namespace thptrace::redis
