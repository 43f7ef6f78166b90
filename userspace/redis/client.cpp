#include "redis/client.h"

#include <hiredis/hiredis.h>

#include <charconv>
#include <cstdio>
#include <fstream>

namespace thptrace::redis {
namespace {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

timeval to_timeval(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000), static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
}

// Ends a failed command. When limits refused the reply, breaks ctx and its reader the way hiredis
// breaks them on a protocol error, with the refusal as errstr (hiredis alone would say "Out of
// memory", or nothing yet); hiredis copies the reader's error to ctx again on every later command.
ReplyPtr failed(redisContext* ctx, const ReplyLimits& limits) {
  if (limits.refused()) {
    const std::string why = limits.refusal();
    ctx->err = ctx->reader->err = REDIS_ERR_PROTOCOL;
    std::snprintf(ctx->errstr, sizeof(ctx->errstr), "%s", why.c_str());
    std::snprintf(ctx->reader->errstr, sizeof(ctx->reader->errstr), "%s", why.c_str());
  }
  return nullptr;
}

// redisCommandArgv, with hiredis 0.14's redisGetReply loop spelt out so that limits see every read
// that leaves the reply incomplete: a header that announces too much fails at once, not after hiredis
// has waited for and buffered all it announced.
ReplyPtr run(redisContext* ctx, ReplyLimits& limits, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  limits.new_reply();
  if (redisAppendCommandArgv(ctx, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK)
    return nullptr;
  void* reply = nullptr;
  // As in hiredis, a reply already buffered is the answer; the command then waits in the output buffer.
  if (redisGetReplyFromReader(ctx, &reply) != REDIS_OK) return failed(ctx, limits);
  for (int written = 0; !reply && !written;)
    if (redisBufferWrite(ctx, &written) != REDIS_OK) return nullptr;
  while (!reply) {
    if (redisBufferRead(ctx) != REDIS_OK || redisGetReplyFromReader(ctx, &reply) != REDIS_OK ||
        (!reply && !limits.pending_within_limits()))
      return failed(ctx, limits);
  }
  return ReplyPtr(static_cast<redisReply*>(reply));
}

}  // namespace

std::optional<Address> parse_address(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return std::nullopt;
  Address a;
  a.host = text.substr(0, colon);
  if (a.host.front() == '[') {
    if (a.host.size() < 3 || a.host.back() != ']') return std::nullopt;
    a.host = a.host.substr(1, a.host.size() - 2);
  }
  // Brackets only delimit an IPv6 literal; a host that still holds one ("[[::1]]:1") is no host,
  // and str() of it would not parse back (found by tests/fuzz).
  if (a.host.find_first_of("[]") != std::string::npos) return std::nullopt;
  const char* first = text.data() + colon + 1;
  const char* last = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(first, last, a.port);
  if (ec != std::errc() || ptr != last || a.port < 1 || a.port > 65535) return std::nullopt;
  return a;
}

std::optional<std::string> read_password_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

std::unique_ptr<Client> Client::connect(const Address& addr, const std::string& password,
                                        std::chrono::milliseconds timeout, std::string* error) {
  return connect(addr, "", password, timeout, error);
}

std::unique_ptr<Client> Client::connect(const Address& addr, const std::string& user, const std::string& password,
                                        std::chrono::milliseconds timeout, std::string* error) {
  redisContext* ctx = redisConnectWithTimeout(addr.host.c_str(), addr.port, to_timeval(timeout));
  if (!ctx || ctx->err) {
    if (error)
      *error = "cannot connect to Redis at " + addr.str() + ": " + (ctx ? ctx->errstr : "out of memory");
    if (ctx) redisFree(ctx);
    return nullptr;
  }
  redisSetTimeout(ctx, to_timeval(timeout));
  std::unique_ptr<Client> c(new Client(ctx));
  if (!password.empty()) {
    ReplyPtr r = user.empty() ? run(ctx, c->limits_, {"AUTH", password})
                              : run(ctx, c->limits_, {"AUTH", user, password});
    if (!r || r->type == REDIS_REPLY_ERROR) {
      if (error) *error = "Redis at " + addr.str() + " rejected the credentials (AUTH failed)";
      return nullptr;
    }
  }
  return c;
}

Client::Client(redisContext* ctx) : ctx_(ctx), limits_(ctx->reader) {}

Client::~Client() { redisFree(ctx_); }

bool Client::broken() const { return ctx_->err != 0; }

std::optional<std::string> Client::command(const std::vector<std::string>& args) {
  ReplyPtr r = run(ctx_, limits_, args);
  if (!r) {
    last_error_ = ctx_->errstr;
    return std::nullopt;
  }
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      return std::string(r->str, r->len);
    case REDIS_REPLY_INTEGER:
      return std::to_string(r->integer);
    case REDIS_REPLY_NIL:
      return std::string{};
    case REDIS_REPLY_ERROR:
      last_error_ = std::string(r->str, r->len);
      return std::nullopt;
    default:
      return std::string{};
  }
}

std::optional<std::string> Client::info(const std::string& sections) {
  if (sections.empty()) return command({"INFO"});
  return command({"INFO", sections});
}

std::optional<LatencyHistogram> Client::latency_histogram() {
  ReplyPtr r = run(ctx_, limits_, {"LATENCY", "HISTOGRAM"});
  if (!r || r->type == REDIS_REPLY_ERROR) return std::nullopt;
  return parse_latency_histogram(r.get());
}

std::map<std::string, std::string> Client::config_get(const std::vector<std::string>& keys) {
  std::map<std::string, std::string> out;
  // One key per call: CONFIG GET with several keys needs Redis 7.0.
  for (const auto& k : keys) {
    ReplyPtr r = run(ctx_, limits_, {"CONFIG", "GET", k});
    if (!r) break;
    for (auto& [key, value] : parse_config_get(r.get())) out.insert_or_assign(key, value);
  }
  return out;
}

}  // namespace thptrace::redis
