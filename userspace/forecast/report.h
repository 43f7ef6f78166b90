// SPDX-License-Identifier: Apache-2.0
#pragma once
// `thptrace predict`'s report: what was measured and what it predicts, as text and as JSON
// (docs/reference/predict.schema.json). Pure: rendered from the measurement and the prediction.

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "forecast/forecast.h"

namespace thptrace::forecast {

// The soft-dirty rehearsal as it went.
struct Rehearsal {
  bool run = false;
  std::string why_not;                             // when not run: the kernel lacks it, the operator said no, ...
  std::optional<double> walk_ms;                   // the clear_refs write: the process's stall
  std::vector<std::pair<double, uint64_t>> curve;  // seconds after the clear, pages written
  // Mappings the kernel marked soft-dirty as a whole after the clear (created, grown or merged), whose
  // counts were held from then on: "" when none.
  std::string held_mappings;
};

// What Redis said of itself, for the report.
struct RedisFacts {
  std::string address, version, repl_diskless_sync;
  std::optional<int64_t> latest_fork_usec, rdb_last_cow_size, rdb_last_bgsave_time_sec, maxmemory;
};

// A main thread busy this share of a CPU or more is said to be near saturation.
inline constexpr double kSaturatedCpu = 0.9;

struct PredictReport {
  std::string version;
  pid_t pid = 0;
  std::string comm;
  double measured_s = 0;
  // The share of one CPU the process's main thread (Redis's event loop) used over the measurement:
  // near 1 it could not write faster during a fork, when the copies' faults take its time too.
  std::optional<double> main_thread_cpu;
  Inputs inputs;
  Rehearsal rehearsal;
  std::optional<RedisFacts> redis;
  Prediction prediction;
};

std::string to_text(const PredictReport& r);
nlohmann::ordered_json to_json(const PredictReport& r);

}  // namespace thptrace::forecast
