// SPDX-License-Identifier: Apache-2.0
#pragma once
// A small owner of one Redis connection: a transport (TCP, unix socket, TLS; transport.h) under
// hiredis's reply reader, with a deadline on connect and on every command so a frozen Redis
// (SIGSTOP) gives an error, not a hang, and bounds on every reply (reply_limits.h) so a hostile or
// broken one gives an error, not an out-of-memory.

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "redis/address.h"
#include "redis/parse.h"
#include "redis/reply_limits.h"
#include "redis/tls.h"
#include "redis/transport.h"

struct redisReader;

namespace thptrace::redis {

// Reads a password file: the first line, without its newline; nullopt when unreadable.
std::optional<std::string> read_password_file(const std::string& path);

// How to reach and log in to one server, besides its address.
struct ConnectOptions {
  std::string user{};  // ACL user; "" for the default user
  std::string password{};
  std::chrono::milliseconds timeout{1000};
  std::shared_ptr<const TlsContext> tls{};  // null: no TLS
  pid_t netns_pid = 0;                    // see connect_transport()
  // Ask PING once (any reply will do) before calling the connection made: tells a port that speaks
  // Redis from one that only accepts connections (a TLS port asked in plain, a cluster bus).
  bool ping = false;
};

class Client {
 public:
  // Connects, runs the TLS handshake and authenticates; on failure returns nullptr and sets *error
  // (the password never appears in it).
  static std::unique_ptr<Client> connect(const Address& addr, const ConnectOptions& options, ConnectError* error);
  // Plain connections as the default user, or an ACL user (AUTH user password) when user is set.
  static std::unique_ptr<Client> connect(const Address& addr, const std::string& password,
                                         std::chrono::milliseconds timeout, std::string* error);
  static std::unique_ptr<Client> connect(const Address& addr, const std::string& user, const std::string& password,
                                         std::chrono::milliseconds timeout, std::string* error);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // nullopt when the command failed: refused() by the server (an error reply; the connection still
  // works), or broken() and to be replaced. A reply over its command's bound (reply_limits.h) fails
  // the command and breaks the connection like a protocol error. last_error() then says why, cut
  // and made printable (parse.h's printable()).
  std::optional<std::string> info(const std::string& sections = "");
  std::optional<LatencyHistogram> latency_histogram();
  // Stops at the first key the server refuses (refused() then says so).
  std::map<std::string, std::string> config_get(const std::vector<std::string>& keys);
  // Runs a command given as separate arguments; returns the reply as text (status, string, or
  // integer), nullopt on error. For tests and the load generator's control commands.
  std::optional<std::string> command(const std::vector<std::string>& args);

  // For an event loop, one request out at a time: the socket to wait on for readability, a command
  // sent without waiting for its reply (false: broken()), and that reply read from what has come
  // (answered: whole, refused() says whether an error reply; failed: broken()).
  int fd() const;
  bool send(const std::vector<std::string>& args);
  enum class Progress { waiting, answered, failed };
  Progress read_reply();
  // The caller gave up on the reply (a timeout of its own): broken(), last_error() says why.
  void break_off(const std::string& why);

  bool broken() const { return broken_; }
  // The last command was answered with an error reply.
  bool refused() const { return refused_; }
  const std::string& last_error() const { return last_error_; }

 private:
  struct ReaderDeleter {
    void operator()(redisReader* r) const;
  };
  struct ReplyDeleter {
    void operator()(void* r) const;
  };
  using Reply = std::unique_ptr<void, ReplyDeleter>;

  Client(std::unique_ptr<Transport> transport, std::chrono::milliseconds timeout);
  // Sends one command and reads its reply (a redisReply); null when the connection broke.
  Reply run(const std::vector<std::string>& args);
  bool write_command(const std::vector<std::string>& args, Deadline deadline);
  // The reply the reader holds whole, else null (*failed: the bytes so far cannot be one, or
  // announce more than the limits allow).
  Reply whole_reply(bool* failed);
  bool feed(const char* buf, size_t n);
  // Marks the connection broken with why (made printable); returns null.
  Reply fail(const std::string& why);

  std::unique_ptr<Transport> transport_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<redisReader, ReaderDeleter> reader_;
  ReplyLimits limits_;  // installed on reader_
  bool broken_ = false;
  bool refused_ = false;
  std::string last_error_;
};

}  // namespace thptrace::redis
