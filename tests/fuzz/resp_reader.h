#pragma once
// Turns fuzz bytes into hiredis reply trees the way a connection does: through hiredis's own RESP
// reader, so the parsers under test only ever see trees hiredis can actually produce.

#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace thptrace::fuzz {

// hiredis 0.14 (Debian 12) allocates a multi-bulk reply's element array as soon as it reads the
// header, so "*2147483647\r\n" alone asks for 16 GiB: hiredis's behaviour, not the parsers' (hiredis
// 1.x bounds it with reader->maxelements). The fuzz reader keeps hiredis's own reply functions but
// refuses arrays above kMaxElements, which the reader then reports as out of memory.
inline constexpr int kMaxElements = 1 << 16;

inline redisReplyObjectFunctions* bounded_functions() {
  static redisReplyObjectFunctions defaults = [] {
    redisReader* r = redisReaderCreate();
    const redisReplyObjectFunctions fns = *r->fn;
    redisReaderFree(r);
    return fns;
  }();
  static redisReplyObjectFunctions bounded = [] {
    redisReplyObjectFunctions fns = defaults;
    fns.createArray = [](const redisReadTask* task, int elements) -> void* {
      return elements > kMaxElements ? nullptr : defaults.createArray(task, elements);
    };
    return fns;
  }();
  return &bounded;
}

// Feeds data to a fresh reader and calls fn(const redisReply*) for every complete reply in it,
// stopping at the first protocol error (hiredis then refuses further reads anyway).
template <typename Fn>
void for_each_reply(const uint8_t* data, size_t size, Fn fn) {
  std::unique_ptr<redisReader, decltype(&redisReaderFree)> reader(
      redisReaderCreateWithFunctions(bounded_functions()), &redisReaderFree);
  if (!reader || redisReaderFeed(reader.get(), reinterpret_cast<const char*>(data), size) != REDIS_OK) return;
  for (;;) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader.get(), &raw) != REDIS_OK || raw == nullptr) return;
    std::unique_ptr<redisReply, decltype(&freeReplyObject)> reply(static_cast<redisReply*>(raw), &freeReplyObject);
    fn(static_cast<const redisReply*>(reply.get()));
  }
}

}  // namespace thptrace::fuzz
