// SPDX-License-Identifier: Apache-2.0
#include "redis/client.h"

#include <hiredis/hiredis.h>

#include <fstream>

namespace thptrace::redis {

void Client::ReaderDeleter::operator()(redisReader* r) const { redisReaderFree(r); }
void Client::ReplyDeleter::operator()(void* r) const { freeReplyObject(r); }

std::optional<std::string> read_password_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

Client::Client(std::unique_ptr<Transport> transport, std::chrono::milliseconds timeout)
    : transport_(std::move(transport)), timeout_(timeout), reader_(redisReaderCreate()), limits_(reader_.get()) {}

Client::~Client() = default;

std::unique_ptr<Client> Client::connect(const Address& addr, const ConnectOptions& options, ConnectError* error) {
  auto transport = connect_transport(addr, options.tls.get(), options.netns_pid, options.timeout, error);
  if (!transport) return nullptr;
  std::unique_ptr<Client> c(new Client(std::move(transport), options.timeout));
  if (!options.password.empty()) {
    Reply r = options.user.empty() ? c->run({"AUTH", options.password}) : c->run({"AUTH", options.user, options.password});
    if (!r) {
      if (error) *error = {c->last_error_, options.tls != nullptr};
      return nullptr;
    }
    if (static_cast<redisReply*>(r.get())->type == REDIS_REPLY_ERROR) {
      if (error) *error = {"Redis at " + addr.str() + " rejected the credentials (AUTH failed)", false};
      return nullptr;
    }
  } else if (options.tls || options.ping) {
    // Under TLS 1.3 a server that refuses our client certificate says so after our handshake is
    // done, on the first read: ask once here, so the refusal is a failure to connect.
    if (!c->run({"PING"})) {
      if (error) *error = {c->last_error_, options.tls != nullptr};
      return nullptr;
    }
  }
  return c;
}

std::unique_ptr<Client> Client::connect(const Address& addr, const std::string& password,
                                        std::chrono::milliseconds timeout, std::string* error) {
  return connect(addr, "", password, timeout, error);
}

std::unique_ptr<Client> Client::connect(const Address& addr, const std::string& user, const std::string& password,
                                        std::chrono::milliseconds timeout, std::string* error) {
  ConnectError e;
  auto c = connect(addr, ConnectOptions{.user = user, .password = password, .timeout = timeout}, &e);
  if (!c && error) *error = e.sentence;
  return c;
}

Client::Reply Client::fail(const std::string& why) {
  broken_ = true;
  last_error_ = printable(why);
  return nullptr;
}

bool Client::write_command(const std::vector<std::string>& args, Deadline deadline) {
  if (broken_) return false;  // last_error_ still says why
  refused_ = false;
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  char* cmd = nullptr;
  const int len = redisFormatCommandArgv(&cmd, static_cast<int>(argv.size()), argv.data(), lens.data());
  if (len < 0) return fail("out of memory"), false;
  std::string error;
  const bool written = transport_->write_all(std::string_view(cmd, static_cast<size_t>(len)), deadline, &error);
  redisFreeCommand(cmd);
  if (!written) return fail(error), false;
  limits_.new_reply(reply_budget(args));
  return true;
}

// After every read that leaves the reply incomplete the limits look at what is still pending: a
// header that announces too much fails at once, not after the reader has waited for and buffered
// all it announced.
Client::Reply Client::whole_reply(bool* failed) {
  *failed = false;
  void* reply = nullptr;
  if (redisReaderGetReply(reader_.get(), &reply) != REDIS_OK) {
    *failed = true;
    return fail(limits_.refused() ? limits_.refusal() : std::string("protocol error: ") + reader_->errstr);
  }
  if (reply) {
    if (static_cast<const redisReply*>(reply)->type == REDIS_REPLY_ERROR) {
      const auto* r = static_cast<const redisReply*>(reply);
      refused_ = true;
      last_error_ = printable(std::string_view(r->str, r->len));
    }
    return Reply(reply);
  }
  if (!limits_.pending_within_limits()) {
    *failed = true;
    return fail(limits_.refusal());
  }
  return nullptr;
}

bool Client::feed(const char* buf, size_t n) {
  if (redisReaderFeed(reader_.get(), buf, n) == REDIS_OK) return true;
  fail(std::string("protocol error: ") + reader_->errstr);
  return false;
}

// Writes the command and feeds what arrives to the reader until a reply is whole.
Client::Reply Client::run(const std::vector<std::string>& args) {
  const Deadline deadline = std::chrono::steady_clock::now() + timeout_;
  if (!write_command(args, deadline)) return nullptr;
  char buf[16 * 1024];
  while (true) {
    bool failed = false;
    if (Reply reply = whole_reply(&failed); reply || failed) return reply;
    std::string error;
    const size_t n = transport_->read_some(buf, sizeof buf, deadline, &error);
    if (n == 0) return fail(error);
    if (!feed(buf, n)) return nullptr;
  }
}

int Client::fd() const { return transport_->fd(); }

bool Client::send(const std::vector<std::string>& args) {
  return write_command(args, std::chrono::steady_clock::now() + timeout_);
}

Client::Progress Client::read_reply() {
  if (broken_) return Progress::failed;
  char buf[4096];
  while (true) {
    bool failed = false;
    if (Reply reply = whole_reply(&failed); reply || failed) return failed ? Progress::failed : Progress::answered;
    std::string error;
    const ssize_t n = transport_->read_now(buf, sizeof buf, &error);
    if (n == 0) return Progress::waiting;
    if (n < 0) return fail(error), Progress::failed;
    if (!feed(buf, static_cast<size_t>(n))) return Progress::failed;
  }
}

void Client::break_off(const std::string& why) { fail(why); }

std::optional<std::string> Client::command(const std::vector<std::string>& args) {
  Reply reply = run(args);
  if (!reply) return std::nullopt;
  const auto* r = static_cast<const redisReply*>(reply.get());
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      return std::string(r->str, r->len);
    case REDIS_REPLY_INTEGER:
      return std::to_string(r->integer);
    case REDIS_REPLY_NIL:
      return std::string{};
    case REDIS_REPLY_ERROR: return std::nullopt;  // last_error_ set by run()
    default:
      return std::string{};
  }
}

std::optional<std::string> Client::info(const std::string& sections) {
  if (sections.empty()) return command({"INFO"});
  return command({"INFO", sections});
}

std::optional<LatencyHistogram> Client::latency_histogram() {
  Reply reply = run({"LATENCY", "HISTOGRAM"});
  const auto* r = static_cast<const redisReply*>(reply.get());
  if (!r || r->type == REDIS_REPLY_ERROR) return std::nullopt;
  return parse_latency_histogram(r);
}

std::map<std::string, std::string> Client::config_get(const std::vector<std::string>& keys) {
  std::map<std::string, std::string> out;
  // One key per call: CONFIG GET with several keys needs Redis 7.0.
  for (const auto& k : keys) {
    Reply reply = run({"CONFIG", "GET", k});
    if (!reply || refused_) break;
    for (auto& [key, value] : parse_config_get(static_cast<const redisReply*>(reply.get())))
      out.insert_or_assign(key, value);
  }
  return out;
}

}  // namespace thptrace::redis
