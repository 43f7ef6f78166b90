// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <filesystem>
#include <iosfwd>
#include <nlohmann/json.hpp>

#include "loadgen/loadgen.h"

namespace thptrace::loadgen {

// Latencies in the reports are in microseconds with nanosecond precision (3 decimals).
//
// Percentiles CSV, one row per series:
//   series,mode,rate,count,error_replies,throughput_ops_per_s,mean_us,min_us,p50_us,p90_us,
//   p99_us,p99_9_us,p99_99_us,max_us
// series: `probe` (corrected from the intended send time in open loop), `probe_service_time`
// (from the actual send: what a closed-loop tool reports) and `writer_batch` (one whole
// pipeline round trip; its throughput counts commands, not batches). mode: closed|open.
void write_percentiles_csv(std::ostream& out, const LoadgenResult& result);

// Timeline CSV, one row per interval: offset_ms,probe_count,p50_us,p99_us,max_us,writer_ops;
// the latency cells are empty for an interval with no probe sample.
void write_timeline_csv(std::ostream& out, const LoadgenResult& result);

// Everything: options (never the password), both probe histograms, writers, timeline, failure.
nlohmann::json to_json(const LoadgenResult& result, const LoadgenOptions& options);

// Where `--csv PATH` puts the timeline: PATH's stem + "_timeline" + its extension.
std::filesystem::path timeline_csv_path(const std::filesystem::path& csv_path);

// Write the files `--csv` and `--json` name. Throw LoadgenError naming the path on failure.
void write_csv_files(const std::filesystem::path& csv_path, const LoadgenResult& result);
void write_json_file(const std::filesystem::path& json_path, const LoadgenResult& result,
                     const LoadgenOptions& options);

// A short human-readable report: percentiles and throughputs, for stdout.
void write_summary(std::ostream& out, const LoadgenResult& result);

}  // namespace thptrace::loadgen
