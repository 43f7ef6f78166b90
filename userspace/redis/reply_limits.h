#pragma once
// Bounds on what one Redis reply may make the client allocate. The server is outside input, and a
// hostile or broken one is cheap to write: hiredis 0.14 (Debian 12) sizes memory from reply headers
// alone, so "*2147483647\r\n" makes it calloc 16 GiB of element pointers and "$2000000000\r\n" makes
// it buffer until 2 GB have arrived; nothing bounds a reply in total (hiredis 1.x added
// reader->maxelements, for one array at a time). reader->maxbuf is no help: it only caps the idle
// buffer a reader keeps between replies (16 KiB by default, left so), never a reply. The bounds are
// far above what thptrace asks for: INFO is a few KiB, LATENCY HISTOGRAM a few thousand elements.

#include <string>

struct redisReader;

namespace thptrace::redis {

inline constexpr long long kMaxReplyElements = 1 << 20;  // all arrays of one reply together
inline constexpr long long kMaxReplyBytes = 64LL << 20;  // all strings of one reply together

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

  // Starts the count afresh; call before each command.
  void new_reply();
  // Counts an array's elements or a string's bytes; false (and refused) when the reply goes over.
  bool admit_elements(long long elements);
  bool admit_bytes(long long bytes);
  // After a read that left the reply incomplete: false (and refused) when the part hiredis is still
  // waiting for already goes over, a bulk string by its header, so the caller gives up at once
  // instead of after hiredis has buffered all that was announced.
  bool pending_within_limits();

  bool refused() const { return refused_unit_ != nullptr; }
  // "refused an oversized reply: 2147483647 elements (the limit is 1048576 per reply)"; empty when
  // nothing was refused. Short enough for hiredis's 128-byte errstr.
  std::string refusal() const;

 private:
  bool admit(long long& used, long long limit, long long more, const char* unit);

  redisReader* reader_;
  long long elements_ = 0;
  long long bytes_ = 0;
  const char* refused_unit_ = nullptr;  // "elements" or "bytes" once refused
  long long refused_total_ = 0;
};

}  // namespace thptrace::redis
