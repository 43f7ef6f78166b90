// SPDX-License-Identifier: Apache-2.0
#include "redis/reply_limits.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <string_view>

namespace thptrace::redis {
namespace {

// Room for a bulk string's "$<len>\r\n" and closing "\r\n", or a line's "\r\n": bytes still pending
// count only beyond it; the create function counts the exact size once the item is whole.
constexpr long long kHeaderRoom = 64;
// A bulk length is read exactly up to here (far beyond any real one) and no further, so it cannot
// overflow however many digits a server sends.
constexpr long long kLengthCap = 100'000'000'000'000'000;

// hiredis's own functions, and ours built on them. hiredis 0.14 starts every reader with the same
// static table, so the first reader's is every reader's. Written once, under the guard of a static.
redisReplyObjectFunctions hiredis_functions;
redisReplyObjectFunctions bounded_functions;

ReplyLimits& limits_of(const redisReadTask* task) { return *static_cast<ReplyLimits*>(task->privdata); }

void* create_array(const redisReadTask* task, int elements) {
  return limits_of(task).admit_elements(elements) ? hiredis_functions.createArray(task, elements) : nullptr;
}

// Status and error lines come here too, not only bulk strings.
void* create_string(const redisReadTask* task, char* str, size_t len) {
  return limits_of(task).admit_bytes(static_cast<long long>(len)) ? hiredis_functions.createString(task, str, len)
                                                                   : nullptr;
}

}  // namespace

ReplyLimits::ReplyLimits(redisReader* reader) : reader_(reader) {
  [[maybe_unused]] static const bool built = [reader] {
    hiredis_functions = *reader->fn;
    bounded_functions = hiredis_functions;
    bounded_functions.createArray = create_array;
    bounded_functions.createString = create_string;
    return true;
  }();
  // hiredis hands the reader's privdata to every create function, in each redisReadTask.
  reader->privdata = this;
  reader->fn = &bounded_functions;
}

const ReplyBudget& reply_budget(const std::vector<std::string>& args) {
  const auto is = [&args](size_t i, std::string_view word) {
    if (i >= args.size() || args[i].size() != word.size()) return false;
    for (size_t k = 0; k < word.size(); ++k)
      if ((args[i][k] | 0x20) != (word[k] | 0x20)) return false;
    return true;
  };
  if (is(0, "info")) return kInfoBudget;
  if (is(0, "config") && is(1, "get")) return kConfigGetBudget;
  if (is(0, "latency") && is(1, "histogram")) return kLatencyHistogramBudget;
  if (is(0, "client") && is(1, "list")) return kClientListBudget;
  if (is(0, "client") && is(1, "info")) return kClientInfoBudget;
  return kDefaultBudget;
}

void ReplyLimits::new_reply(const ReplyBudget& budget) {
  budget_ = budget;
  elements_ = 0;
  bytes_ = 0;
  refused_unit_ = nullptr;
}

bool ReplyLimits::admit_elements(long long elements) {
  return admit(elements_, budget_.elements, elements, "elements");
}

bool ReplyLimits::admit_bytes(long long bytes) { return admit(bytes_, budget_.bytes, bytes, "bytes"); }

bool ReplyLimits::admit(long long& used, long long limit, long long more, const char* unit) {
  if (more <= limit - used) {
    used += more;
    return true;
  }
  refused_unit_ = unit;
  refused_total_ = used + more;
  return false;
}

bool ReplyLimits::pending_within_limits() {
  if (reader_->err != 0 || reader_->buf == nullptr || reader_->ridx < 0) return true;
  const char* p = reader_->buf + reader_->pos;
  const char* const end = reader_->buf + reader_->len;
  long long pending = std::max(0LL, static_cast<long long>(end - p) - kHeaderRoom);
  // hiredis 0.14 creates a bulk string ("$<len>\r\n<data>\r\n") only once all of it has arrived; until
  // then the current task is a REDIS_REPLY_STRING and buf+pos is at <len>, the '$' consumed. (This
  // reads 0.14's rstack; hiredis 1.x replaced it, so a newer hiredis fails to compile here.)
  if (reader_->rstack[reader_->ridx].type == REDIS_REPLY_STRING) {
    long long announced = 0;
    for (; p < end && *p >= '0' && *p <= '9'; ++p)
      if (announced < kLengthCap) announced = announced * 10 + (*p - '0');
    pending = std::max(pending, announced);
  }
  if (pending <= budget_.bytes - bytes_) return true;
  refused_unit_ = "bytes";
  refused_total_ = bytes_ + pending;
  return false;
}

std::string ReplyLimits::refusal() const {
  if (!refused()) return {};
  const long long limit = std::string_view(refused_unit_) == "elements" ? budget_.elements : budget_.bytes;
  return std::string("refused an oversized reply to ") + budget_.command + ": " + std::to_string(refused_total_) + " " +
         refused_unit_ + " (the limit is " + std::to_string(limit) + ")";
}

}  // namespace thptrace::redis
