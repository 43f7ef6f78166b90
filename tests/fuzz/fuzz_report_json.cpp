// SPDX-License-Identifier: Apache-2.0
// The capture's JSON and text reports (report::json_text, report::to_text) of a report whose names
// are arbitrary bytes: neither throws, the JSON is valid UTF-8 that parses back with each name as
// text::valid_utf8 made it, and every text line is printable.
#include <nlohmann/json.hpp>

#include "common/text.h"
#include "fuzz_check.h"
#include "writers.h"

using namespace thptrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Bytes in(data, size);
  report::CaptureInputs inputs;
  const report::Report r = fuzz::fuzzed_report(in, inputs);
  const std::string json = report::json_text(r);  // an exception here is a crash to libFuzzer
  FUZZ_CHECK(text::is_valid_utf8(json));
  const auto back = nlohmann::json::parse(json, nullptr, false);
  FUZZ_CHECK(!back.is_discarded());
  FUZZ_CHECK(back["target"]["comm"] == text::valid_utf8(r.comm));
  FUZZ_CHECK(back["system"]["kernel_release"] == text::valid_utf8(r.system.kernel_release));
  if (r.redis && !r.redis->reachable) FUZZ_CHECK(back["redis_error"] == text::valid_utf8(r.redis->error));
  const std::string text = report::to_text(r);
  FUZZ_CHECK(text::is_valid_utf8(text));
  FUZZ_CHECK(fuzz::only_line_breaks(text));
  return 0;
}
