// SPDX-License-Identifier: Apache-2.0
#include "loadgen/connection.h"

#include <fmt/format.h>
#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace thptrace::loadgen {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

void append_decimal(std::string& out, size_t n) {
  char digits[24];
  char* end = digits + sizeof(digits);
  char* p = end;
  do {
    *--p = static_cast<char>('0' + n % 10);
    n /= 10;
  } while (n != 0);
  out.append(p, static_cast<size_t>(end - p));
}

// Light replies: hiredis calls these instead of building redisReply trees. Each returns the
// address of a per-type sentinel (never null: null means out of memory to hiredis), so the
// "reply" pointer itself says what the reply was, and frees nothing.
char reply_sentinels[8];
// Where the error text of the reply being parsed goes; set by read_light_reply on its own
// thread, because hiredis 0.14 gives these callbacks no context of ours.
thread_local std::string* error_text_sink = nullptr;

void* light_string(const redisReadTask* task, char* str, size_t len) {
  if (task->type == REDIS_REPLY_ERROR && task->parent == nullptr && error_text_sink != nullptr)
    error_text_sink->assign(str, len);
  return &reply_sentinels[task->type];
}
void* light_array(const redisReadTask*, int) { return &reply_sentinels[REDIS_REPLY_ARRAY]; }
void* light_integer(const redisReadTask*, long long) { return &reply_sentinels[REDIS_REPLY_INTEGER]; }
void* light_nil(const redisReadTask*) { return &reply_sentinels[REDIS_REPLY_NIL]; }
void light_free(void*) {}

redisReplyObjectFunctions light_functions = {light_string, light_array, light_integer, light_nil, light_free};

}  // namespace

void ReplyDeleter::operator()(redisReply* reply) const noexcept { freeReplyObject(reply); }

void append_resp_command(std::string& out, std::initializer_list<std::string_view> args) {
  out.push_back('*');
  append_decimal(out, args.size());
  out.append("\r\n");
  for (std::string_view arg : args) {
    out.push_back('$');
    append_decimal(out, arg.size());
    out.append("\r\n");
    out.append(arg);
    out.append("\r\n");
  }
}

bool is_error_reply(const redisReply* reply) noexcept { return reply != nullptr && reply->type == REDIS_REPLY_ERROR; }

std::string_view reply_text(const redisReply* reply) noexcept {
  if (reply == nullptr || (reply->type != REDIS_REPLY_ERROR && reply->type != REDIS_REPLY_STATUS)) return {};
  return {reply->str, reply->len};
}

Connection::Connection(redisContext* context, std::string address, std::chrono::milliseconds io_timeout)
    : context_(context), address_(std::move(address)), io_timeout_(io_timeout) {}

Connection::Connection(Connection&& other) noexcept
    : context_(std::exchange(other.context_, nullptr)),
      address_(std::move(other.address_)),
      io_timeout_(other.io_timeout_),
      last_error_reply_(std::move(other.last_error_reply_)) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    if (context_ != nullptr) redisFree(context_);
    context_ = std::exchange(other.context_, nullptr);
    address_ = std::move(other.address_);
    io_timeout_ = other.io_timeout_;
    last_error_reply_ = std::move(other.last_error_reply_);
  }
  return *this;
}

Connection::~Connection() {
  if (context_ != nullptr) redisFree(context_);
}

Connection Connection::open(const ConnectionOptions& options) {
  const std::string address = fmt::format("{}:{}", options.host, options.port);
  redisContext* context =
      redisConnectWithTimeout(options.host.c_str(), options.port, to_timeval(options.connect_timeout));
  if (context == nullptr) throw LoadgenError(fmt::format("cannot connect to Redis at {}: out of memory", address));
  if (context->err != 0) {
    std::string why = context->errstr;
    redisFree(context);
    throw LoadgenError(fmt::format("cannot connect to Redis at {}: {}", address, why));
  }
  Connection connection(context, address, options.io_timeout);
  if (redisSetTimeout(context, to_timeval(options.io_timeout)) != REDIS_OK)
    throw LoadgenError(fmt::format("cannot set the I/O timeout on the connection to Redis at {}", address));

  if (!options.password.empty()) {
    ReplyPtr reply = connection.command({"AUTH", options.password});
    if (is_error_reply(reply.get()))
      throw LoadgenError(fmt::format("Redis at {} refused the password: {}", address, reply_text(reply.get())));
  }
  ReplyPtr pong = connection.command({"PING"});
  if (is_error_reply(pong.get())) {
    const std::string_view text = reply_text(pong.get());
    if (text.starts_with("NOAUTH"))
      throw LoadgenError(fmt::format("Redis at {} requires a password: pass --password-file", address));
    throw LoadgenError(fmt::format("Redis at {} answered PING with an error: {}", address, text));
  }
  return connection;
}

bool Connection::append_formatted(std::string_view resp) noexcept {
  return redisAppendFormattedCommand(context_, resp.data(), resp.size()) == REDIS_OK;
}

ReplyPtr Connection::read_reply() noexcept {
  void* reply = nullptr;
  if (redisGetReply(context_, &reply) != REDIS_OK) return nullptr;
  return ReplyPtr(static_cast<redisReply*>(reply));
}

void Connection::use_light_replies() noexcept { context_->reader->fn = &light_functions; }

std::optional<ReplyKind> Connection::read_light_reply() noexcept {
  error_text_sink = &last_error_reply_;
  void* reply = nullptr;
  const int status = redisGetReply(context_, &reply);
  error_text_sink = nullptr;
  if (status != REDIS_OK || reply == nullptr) return std::nullopt;
  const auto type = static_cast<char*>(reply) - reply_sentinels;
  if (type == REDIS_REPLY_ERROR) return ReplyKind::error;
  if (type == REDIS_REPLY_NIL) return ReplyKind::nil;
  return ReplyKind::value;
}

std::string Connection::error() const {
  if (context_ == nullptr) return fmt::format("the connection to Redis at {} was closed", address_);
  if (context_->err == REDIS_ERR_EOF) return fmt::format("Redis at {} closed the connection", address_);
  // hiredis reports an expired SO_RCVTIMEO/SO_SNDTIMEO as a plain EAGAIN I/O error.
  if (context_->err == REDIS_ERR_IO && std::strcmp(context_->errstr, std::strerror(EAGAIN)) == 0)
    return fmt::format("Redis at {} did not answer within {} ms (I/O timeout)", address_, io_timeout_.count());
  return fmt::format("lost the connection to Redis at {}: {}", address_, context_->errstr);
}

ReplyPtr Connection::command(std::initializer_list<std::string_view> args) {
  std::string resp;
  append_resp_command(resp, args);
  if (!append_formatted(resp)) throw LoadgenError(error());
  ReplyPtr reply = read_reply();
  if (!reply) throw LoadgenError(error());
  return reply;
}

}  // namespace thptrace::loadgen
