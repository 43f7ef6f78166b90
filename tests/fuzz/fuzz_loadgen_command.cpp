// SPDX-License-Identifier: Apache-2.0
// The `thptrace loadgen` command line: the fuzz input split into argv on NUL bytes. A UsageError is
// the expected answer to bad input; any other exception escaping the parser is a crash.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "loadgen/command.h"

using namespace thptrace::loadgen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"loadgen"};
  std::string current;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\0') {
      args.push_back(std::move(current));
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  if (size > 0) args.push_back(std::move(current));
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());

  LoadgenCommand c;
  try {
    c = parse_loadgen_command(static_cast<int>(argv.size()), argv.data());
  } catch (const thptrace::UsageError&) {
    return 0;
  }
  if (c.help) return 0;
  const LoadgenOptions& o = c.options;
  FUZZ_CHECK(!o.connection.host.empty());
  FUZZ_CHECK(o.connection.port >= 1 && o.connection.port <= 65535);
  FUZZ_CHECK(o.connection.io_timeout.count() >= 1);
  FUZZ_CHECK(o.dataset.keys >= 1 && o.dataset.value_size >= 1);
  FUZZ_CHECK(o.batch >= 1 && o.writers <= 1024);
  FUZZ_CHECK(std::isfinite(o.rate) && o.rate >= 0);
  FUZZ_CHECK(o.duration.count() >= 0 && o.interval.count() >= 1);
  FUZZ_CHECK(c.load || !c.load_only);
  return 0;
}
