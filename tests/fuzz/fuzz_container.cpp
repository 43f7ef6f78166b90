// SPDX-License-Identifier: Apache-2.0
// What container runtimes leave on the host, read by the daemon and the capture to name a process's
// container: the input is read as /proc/PID/cgroup, as an OCI config.json and as podman's
// containers.json in turn. Whatever it holds, an id is 64 lowercase hex digits or nothing, a name is
// valid UTF-8 of at most 253 bytes, and nothing throws.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/text.h"
#include "fuzz_check.h"
#include "proc/container.h"

namespace {
void check_name(const std::string& s) {
  FUZZ_CHECK(s.size() <= 253 * 3);  // a cut code point becomes U+FFFD (3 bytes)
  FUZZ_CHECK(thptrace::text::is_valid_utf8(s));
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace thptrace::proc;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string id = container_id_from_cgroup(text);
  FUZZ_CHECK(id.empty() || id.size() == 64);
  for (const char c : id) FUZZ_CHECK((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  const auto n = names_from_oci_config(text);
  check_name(n.ns);
  check_name(n.pod);
  check_name(n.container);
  check_name(podman_name(text, "94fe4324422bed49ea4bd0a23287b2b3c2dfee154114f0d2440db69b890eb566"));
  // Written and read back as the report does.
  FUZZ_CHECK(container_from(container_json(n)) == n);
  return 0;
}
