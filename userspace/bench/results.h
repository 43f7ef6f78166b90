// SPDX-License-Identifier: Apache-2.0
#pragma once
// The results folder of a bench run: CSVs, run metadata, summary.md and the timeline plot.

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench.h"
#include "bench/scenario.h"
#include "bench/server.h"

namespace thptrace::bench {

// What the run knows beyond its scenarios.
struct RunInfo {
  std::string utc_start, utc_end;
  std::string kernel_release;
  unsigned cpus = 0;
  uint64_t mem_total_kb = 0;
  std::string thptrace_version;
  std::string host_thp_enabled, host_thp_defrag;  // at the start of the run
  std::string host_thp_enabled_after;             // at the end, after restoring
  // /proc/loadavg at the start and the end: other work on the host shows up in the latencies.
  std::string loadavg_start, loadavg_end;
  // Plain notes (e.g. why the THP A/B did not run).
  std::vector<std::string> notes;
  // The server every scenario ran (--server).
  ServerBuild server;
  // Scenarios chosen through a group that this server cannot run, and why (scale_out_channel
  // without an rdb channel).
  std::vector<std::pair<std::string, std::string>> skipped;
  bool interrupted = false;
};

// Every mechanical fault of the run, each prefixed with its scenario: the self-check passes
// when this is empty (and the run was not interrupted).
std::vector<std::string> self_check_faults(const std::vector<ScenarioResult>& results);

// Writes latency_percentiles.csv, latency_timeline.csv, fork_and_mem.csv, replica_syncs.csv, run_metadata.csv,
// summary.md and latency_timeline.svg into `dir` (which exists). Throws BenchError naming a file
// that cannot be written.
void write_results(const std::filesystem::path& dir, const BenchOptions& options, const RunInfo& info,
                   const std::vector<ScenarioResult>& results);

// summary.md: a table per scenario and plain sentences comparing them (summary.cpp).
std::string summary_markdown(const BenchOptions& options, const RunInfo& info,
                             const std::vector<ScenarioResult>& results);

// latency_timeline.svg: probe p99 and max over time, one panel per scenario, the during phase
// tinted, every fork window shaded and each replica's link up marked (svg.cpp).
std::string timeline_svg(const std::vector<ScenarioResult>& results);

// The largest probe latency (ns) of the 100 ms timeline rows that overlap a fork window (fork to
// child exit): the worst request the probe saw around that fork, within 100 ms on either side.
// 0 when no row with a sample overlaps.
uint64_t probe_max_near_fork(const ScenarioResult& r, const ForkRecord& f);

// Shared by the writers: a latency in ns as µs with one decimal.
std::string us(uint64_t ns);
// ms of `ts` from the scenario's time zero (0 stays 0 only when ts is 0: then "").
std::string ms_from_zero(const ScenarioResult& r, uint64_t ts);

}  // namespace thptrace::bench
