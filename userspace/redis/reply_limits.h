// SPDX-License-Identifier: Apache-2.0
#pragma once
// Bounds on what one Redis reply may make the client allocate. The server is outside input, and a
// hostile or broken one is cheap to write: hiredis 0.14 (Debian 12) sizes memory from reply headers
// alone, so "*2147483647\r\n" makes it calloc 16 GiB of element pointers and "$2000000000\r\n" makes
// it buffer until 2 GB have arrived; nothing bounds a reply in total (hiredis 1.x added
// reader->maxelements, for one array at a time). reader->maxbuf is no help: it only caps the idle
// buffer a reader keeps between replies (16 KiB by default, left so), never a reply. The bounds are
// far above what thptrace asks for (INFO is a few KiB, LATENCY HISTOGRAM a few thousand elements)
// and set per command, so that no reply costs more to read and parse than its command can need.

#include <string>
#include <vector>

struct redisReader;

namespace thptrace::redis {

// The bound of one command's reply: all its strings' bytes and all its arrays' elements together.
struct ReplyBudget {
  const char* command;  // named in the refusal: "INFO", "CONFIG GET", ...
  long long bytes;
  long long elements;
};

inline constexpr long long kMaxReplyElements = 1 << 20;  // any command's, at most
inline constexpr long long kMaxReplyBytes = 64LL << 20;
// INFO of a real server is a few KiB, a few hundred replicas included (~100 bytes a line).
inline constexpr ReplyBudget kInfoBudget{"INFO", 1LL << 20, 1};
// One key at a time; client-output-buffer-limit, the longest thptrace asks, is ~100 bytes.
inline constexpr ReplyBudget kConfigGetBudget{"CONFIG GET", 64LL << 10, 64};
// Every command and subcommand of the server (a few hundred), each with up to ~40 buckets.
inline constexpr ReplyBudget kLatencyHistogramBudget{"LATENCY HISTOGRAM", 4LL << 20, 128LL << 10};
// A few hundred replicas' lines of ~400 bytes.
inline constexpr ReplyBudget kClientListBudget{"CLIENT LIST", 1LL << 20, 1};
inline constexpr ReplyBudget kClientInfoBudget{"CLIENT INFO", 16LL << 10, 1};
// Anything else (PING, AUTH, and the load generator's and tests' own commands).
inline constexpr ReplyBudget kDefaultBudget{"the command", kMaxReplyBytes, kMaxReplyElements};

// The budget of a command given as its arguments ("INFO", "server" -> kInfoBudget).
const ReplyBudget& reply_budget(const std::vector<std::string>& args);

// Counts what the reply being read costs and fails it once over a bound. It installs itself on a
// reader: the reader's functions become hiredis's own but for createArray and createString, which
// count first and return null when over, so hiredis fails the reply (REDIS_ERR_OOM, "Out of
// memory") and frees what it had built. The reader's privdata points here, so this object must stay
// put and outlive the reader's reads; freeing the reader afterwards needs nothing of it.
class ReplyLimits {
 public:
  // reader must still have hiredis's own functions, as a new reader does.
  explicit ReplyLimits(redisReader* reader);
  ReplyLimits(const ReplyLimits&) = delete;
  ReplyLimits& operator=(const ReplyLimits&) = delete;

  // Starts the count afresh under a command's budget; call before each command.
  void new_reply(const ReplyBudget& budget = kDefaultBudget);
  // Counts an array's elements or a string's bytes; false (and refused) when the reply goes over.
  bool admit_elements(long long elements);
  bool admit_bytes(long long bytes);
  // After a read that left the reply incomplete: false (and refused) when the part hiredis is still
  // waiting for already goes over, a bulk string by its header, so the caller gives up at once
  // instead of after hiredis has buffered all that was announced.
  bool pending_within_limits();

  bool refused() const { return refused_unit_ != nullptr; }
  // "refused an oversized reply to INFO: 8388608 bytes (the limit is 1048576)"; empty when nothing
  // was refused.
  std::string refusal() const;

 private:
  bool admit(long long& used, long long limit, long long more, const char* unit);

  redisReader* reader_;
  ReplyBudget budget_ = kDefaultBudget;
  long long elements_ = 0;
  long long bytes_ = 0;
  const char* refused_unit_ = nullptr;  // "elements" or "bytes" once refused
  long long refused_total_ = 0;
};

}  // namespace thptrace::redis
