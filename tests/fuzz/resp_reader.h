// SPDX-License-Identifier: Apache-2.0
#pragma once
// Turns fuzz bytes into hiredis reply trees the way a connection does: through hiredis's own RESP
// reader, so the parsers under test only ever see trees hiredis can actually produce.

#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "redis/reply_limits.h"

namespace thptrace::fuzz {

// Feeds data to a fresh reader and calls fn(const redisReply*) for every complete reply in it,
// stopping at the first protocol error (hiredis then refuses further reads anyway). The reader has
// the client's bounds (redis/reply_limits.h): without them "*2147483647\r\n" alone asks hiredis 0.14
// for 16 GiB, hiredis's behaviour and not the parsers'. Each reply is counted afresh, as the client
// counts each command's.
template <typename Fn>
void for_each_reply(const uint8_t* data, size_t size, Fn fn) {
  std::unique_ptr<redisReader, decltype(&redisReaderFree)> reader(redisReaderCreate(), &redisReaderFree);
  if (!reader) return;
  redis::ReplyLimits limits(reader.get());
  if (redisReaderFeed(reader.get(), reinterpret_cast<const char*>(data), size) != REDIS_OK) return;
  for (;;) {
    limits.new_reply();
    void* raw = nullptr;
    if (redisReaderGetReply(reader.get(), &raw) != REDIS_OK || raw == nullptr) return;
    std::unique_ptr<redisReply, decltype(&freeReplyObject)> reply(static_cast<redisReply*>(raw), &freeReplyObject);
    fn(static_cast<const redisReply*>(reply.get()));
  }
}

}  // namespace thptrace::fuzz
