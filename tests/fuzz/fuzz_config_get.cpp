// SPDX-License-Identifier: Apache-2.0
// CONFIG GET replies: fuzz bytes are read as RESP by hiredis, every reply tree goes to parse_config_get.
#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "redis/parse.h"
#include "resp_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  thptrace::fuzz::for_each_reply(data, size, [](const redisReply* reply) {
    const auto config = thptrace::redis::parse_config_get(reply);
    if (reply->type != REDIS_REPLY_ARRAY) {
      FUZZ_CHECK(config.empty());
      return;
    }
    FUZZ_CHECK(config.size() <= reply->elements / 2);
  });
  return 0;
}
