// SPDX-License-Identifier: Apache-2.0
// INFO text from a Redis we do not control: parse_info, then everything built on its map
// (parse_replicas, capped and escaped; info_int, snapshot_from_info); the same bytes as a CONFIG GET
// client-output-buffer-limit value and as a CLIENT LIST reply.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "redis/parse.h"
#include "redis/watcher.h"

using namespace thptrace::redis;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const InfoMap info = parse_info(text);

  size_t slave_keys = 0;
  for (const auto& [key, value] : info) {
    // A key is the text before the first colon of one line that is not a comment.
    FUZZ_CHECK(!key.empty());
    FUZZ_CHECK(key.front() != '#');
    FUZZ_CHECK(key.find_first_of(":\n") == std::string::npos);
    FUZZ_CHECK(value.find('\n') == std::string::npos);
    FUZZ_CHECK(key.size() + value.size() < size);
    if (key.rfind("slave", 0) == 0) ++slave_keys;
    (void)info_int(info, key);
  }
  size_t listed = 0;
  const auto replicas = parse_replicas(info, &listed);
  FUZZ_CHECK(listed <= slave_keys);
  FUZZ_CHECK(replicas.size() <= listed && replicas.size() <= kMaxReplicas);
  // Read where they enter: what goes on to labels and logs is bounded and printable.
  for (const auto& r : replicas) {
    FUZZ_CHECK(r.ip.size() <= 4 * 64 + 3 && r.state.size() <= 4 * 32 + 3);
    for (const std::string* field : {&r.ip, &r.state})
      for (const char ch : *field) FUZZ_CHECK(ch >= 0x20 && ch < 0x7f);
  }

  const Snapshot s = snapshot_from_info(info, 42);
  FUZZ_CHECK(s.up && s.ts_ns == 42);
  if (const auto pid = info_int(info, "process_id")) FUZZ_CHECK(s.process_id == *pid);
  FUZZ_CHECK(s.replicas.size() <= slave_keys && s.replicas_listed == listed);

  if (const auto limit = parse_replica_output_buffer_limit(text))
    FUZZ_CHECK(text.find("slave ") != std::string_view::npos || text.find("replica ") != std::string_view::npos);
  if (max_client_omem(text)) FUZZ_CHECK(text.find(" omem=") != std::string_view::npos);
  return 0;
}
