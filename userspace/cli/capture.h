#pragma once
// `thptrace --pid PID`: one capture, one report.

#include <cstdint>
#include <optional>
#include <string>

#include "redis/credentials.h"

namespace thptrace::cli {

// Copy sampling is asked for (--sample-copies 64 is a good start): at 1 in 64 it made a parent's
// copy-on-write faults 15% slower here (tests/bench/bpf_cost.sh, docs/attribution.md), past the
// overhead goals every capture keeps by default.
inline constexpr uint32_t kDefaultSampleCopies = 0;

struct CaptureOptions {
  int pid = 0;
  std::optional<double> duration_s;  // until SIGINT/SIGTERM when unset
  std::string redis;                 // HOST:PORT or unix:/PATH, "" for none
  redis::ConnectionSettings redis_settings;  // user, password file, TLS
  std::string json_path;
  std::string svg_path;  // the timeline drawn (an HTML page around it when the name ends in .html)
  bool force_fallback = false;
  int interval_ms = 100;
  size_t ringbuf_kb = 256;
  uint32_t sample_copies = kDefaultSampleCopies;  // 1 in N copies sampled with their stacks; 0 = off
};

// Validates the options, runs a CaptureSession, prints the report computed from its inputs
// (report::assemble) and writes the JSON. Returns the exit code; throws FatalError on start-up
// failures.
int run_capture(const CaptureOptions& options);

int probe_main(int argc, char** argv);

}  // namespace thptrace::cli
