// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "common/error.h"

struct redisContext;
struct redisReply;

namespace thptrace::loadgen {

// The one fatal error type of the load generator: a start-up failure (cannot connect, AUTH
// refused, bad dataset) whose what() is a single sentence fit to print as it is.
class LoadgenError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

struct ConnectionOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  // Sent with AUTH when not empty; a line "user pass" is not split (one password only).
  std::string password;
  std::chrono::milliseconds connect_timeout{3000};
  // Bound on every socket read and write, so a frozen Redis ends the run with an error instead
  // of hanging it. Must exceed the longest stall being measured (a fork of a large dataset).
  std::chrono::milliseconds io_timeout{10000};
};

struct ReplyDeleter {
  void operator()(redisReply* reply) const noexcept;
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// Appends one command in RESP to `out` (no allocation once `out` has grown), so a whole
// pipeline batch is formatted into one buffer and handed to hiredis in one call.
void append_resp_command(std::string& out, std::initializer_list<std::string_view> args);

// What a reply was, for callers that only count: any successful reply (status, string,
// integer, array), a nil (GET of a missing key) or an error reply.
enum class ReplyKind { value, nil, error };

// Owns a blocking hiredis connection with connect and I/O timeouts set; move-only.
class Connection {
 public:
  // Connects, authenticates and PINGs. Throws LoadgenError with a sentence naming the address.
  static Connection open(const ConnectionOptions& options);

  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // Queues already formatted RESP commands in the output buffer; nothing is sent until the
  // first read_reply(). Returns false (see error()) only if hiredis could not allocate.
  bool append_formatted(std::string_view resp) noexcept;
  // Flushes pending output and reads the next reply; null on a connection error or timeout,
  // after which the connection is unusable and error() says why.
  ReplyPtr read_reply() noexcept;
  // Switches to replies that are classified instead of built: hiredis then allocates nothing
  // per reply, which is most of a pipelining client's own CPU cost. Only the text of the last
  // error reply is kept. After this, use read_light_reply() and never read_reply()/command().
  void use_light_replies() noexcept;
  // The next reply's kind; nullopt on a connection error or timeout (see error()).
  std::optional<ReplyKind> read_light_reply() noexcept;
  // The text of the last error reply read by read_light_reply().
  const std::string& last_error_reply() const noexcept { return last_error_reply_; }

  // A sentence describing the connection's error state, naming the address.
  std::string error() const;
  // Sends one command and waits for its reply; throws LoadgenError on a connection error.
  ReplyPtr command(std::initializer_list<std::string_view> args);

  const std::string& address() const noexcept { return address_; }

 private:
  Connection(redisContext* context, std::string address, std::chrono::milliseconds io_timeout);

  redisContext* context_ = nullptr;
  std::string address_;
  std::chrono::milliseconds io_timeout_;
  std::string last_error_reply_;
};

// True when `reply` is a RESP error reply.
bool is_error_reply(const redisReply* reply) noexcept;
// The text of an error or status reply, empty otherwise.
std::string_view reply_text(const redisReply* reply) noexcept;

}  // namespace thptrace::loadgen
