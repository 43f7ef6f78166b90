// SPDX-License-Identifier: Apache-2.0
// The first bytes of an RDB file (the server's, in a directory others may write): its auxiliary
// fields, read by `thptrace predict` for the server's memory at its last save.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "redis/rdb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view head(reinterpret_cast<const char*>(data), size);
  // A figure only from a file that begins as an RDB file and names the field.
  if (thptrace::redis::rdb_used_mem(head)) {
    FUZZ_CHECK(head.substr(0, 5) == "REDIS");
    FUZZ_CHECK(head.find("used-mem") != std::string_view::npos);
  }
  return 0;
}
