#pragma once
// A small owner of one hiredis connection, with a timeout on connect and on every command so a
// frozen Redis (SIGSTOP) gives an error, not a hang, and bounds on every reply (reply_limits.h) so a
// hostile or broken one gives an error, not an out-of-memory.

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "redis/parse.h"
#include "redis/reply_limits.h"

struct redisContext;

namespace thptrace::redis {

struct Address {
  std::string host;
  int port = 6379;
  std::string str() const { return host + ":" + std::to_string(port); }
};

// "HOST:PORT" or "[V6]:PORT" -> Address; nullopt for anything else (port 1..65535).
std::optional<Address> parse_address(const std::string& text);

// Reads a password file: the first line, without its newline; nullopt when unreadable.
std::optional<std::string> read_password_file(const std::string& path);

class Client {
 public:
  // Connects and authenticates; on failure returns nullptr and sets *error to one sentence (the
  // password never appears in it).
  static std::unique_ptr<Client> connect(const Address& addr, const std::string& password,
                                         std::chrono::milliseconds timeout, std::string* error);
  // The same as an ACL user (AUTH user password); an empty user is the default user.
  static std::unique_ptr<Client> connect(const Address& addr, const std::string& user, const std::string& password,
                                         std::chrono::milliseconds timeout, std::string* error);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // nullopt when the command failed; the connection is then broken() and must be replaced. A reply
  // over reply_limits.h's bounds fails the command and breaks the connection like a protocol error.
  std::optional<std::string> info(const std::string& sections = "");
  std::optional<LatencyHistogram> latency_histogram();
  std::map<std::string, std::string> config_get(const std::vector<std::string>& keys);
  // Runs a command given as separate arguments; returns the reply as text (status, string, or
  // integer), nullopt on error. For tests and the load generator's control commands.
  std::optional<std::string> command(const std::vector<std::string>& args);

  bool broken() const;
  const std::string& last_error() const { return last_error_; }

 private:
  explicit Client(redisContext* ctx);
  redisContext* ctx_;
  ReplyLimits limits_;  // installed on ctx_'s reader
  std::string last_error_;
};

}  // namespace thptrace::redis
