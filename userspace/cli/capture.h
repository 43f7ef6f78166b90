// SPDX-License-Identifier: Apache-2.0
#pragma once
// `thptrace --pid PID`: one capture, one report.

#include <cstdint>
#include <optional>
#include <string>

#include "redis/credentials.h"
#include "tracer/options.h"

namespace thptrace::cli {

// 1 in 64 copy-on-write faults sampled with their stacks: a few hundred samples for a fork that copies
// tens of thousands of pages, at a cost per sample tests/bench/bpf_cost.sh measures
// (docs/guide/attribution.md).
inline constexpr uint32_t kDefaultSampleCopies = 64;

enum class Unwind { fp, dwarf };

struct CaptureOptions {
  int pid = 0;
  std::optional<double> duration_s;  // until SIGINT/SIGTERM when unset
  std::string redis;                 // HOST:PORT or unix:/PATH, "" for none
  redis::ConnectionSettings redis_settings;  // user, password file, TLS
  std::string json_path;
  std::string svg_path;  // the timeline drawn (an HTML page around it when the name ends in .html)
  tracer::LoadFlags load;       // --force-fallback, --disk, --ringbuf-kb
  int interval_ms = 100;        // /proc and Redis while a fork, a save or a sync is on
  int idle_interval_ms = 1000;  // the rest of the time (common/cadence.h)
  uint32_t sample_copies = kDefaultSampleCopies;  // 1 in N copies sampled with their stacks; 0 = off
  // How a sampled copy's call stack is had where frame pointers are missing: dwarf adds the thread's
  // registers and 8 KiB of its stack to each sample, unwound in userspace from .eh_frame.
  Unwind unwind = Unwind::dwarf;
  bool debuginfod = false;                        // the symbolizer may ask DEBUGINFOD_URLS
  uint32_t latency_probe_hz = 100;                // with --redis: PINGs a second (redis/latency_probe.h); 0 = off
  uint64_t client_timeout_us = 300;               // probes slower than this count as timeouts
};

// Validates the options, runs a CaptureSession, prints the report computed from its inputs
// (report::assemble) and writes the JSON. Returns the exit code; throws FatalError on start-up
// failures.
int run_capture(const CaptureOptions& options);

int probe_main(int argc, char** argv);
// `thptrace predict ...` (predict_cmd.cpp).
int predict_main(int argc, char** argv);

}  // namespace thptrace::cli
