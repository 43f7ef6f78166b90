// SPDX-License-Identifier: Apache-2.0
#pragma once
// One scenario's run and what it measured: the load generator's phases, the capture's fork
// episodes placed on the same clock, memory and THP facts, and the mechanical faults found.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/server.h"
#include "correlate/disk.h"
#include "correlate/replicas.h"
#include "loadgen/loadgen.h"
#include "redis/parse.h"

namespace thptrace::bench {

class ThpMode;

// One load-generator run: a phase of a scenario.
struct PhaseResult {
  std::string name;  // steady | before | during | after
  loadgen::LoadgenResult load;
  uint64_t start_ns = 0, end_ns = 0;  // CLOCK_MONOTONIC span of the run
};

// One fork episode from the capture's JSON, on CLOCK_MONOTONIC.
struct ForkRecord {
  int64_t child_pid = 0;
  std::string reason, reason_source;
  std::optional<double> fork_duration_us, child_lifetime_ms;
  uint64_t cow_faults = 0, child_cow_faults = 0, thp_splits = 0;
  std::string thp_splits_source;  // "kernel" (this process) or "vmstat" (system-wide delta)
  uint64_t fork_ns = 0;
  uint64_t exit_ns = 0;  // 0 when the child outlived the capture
  std::string phase;     // the phase the fork began in
  // The replicas' full syncs the capture gave this fork (INFO replication, polled every 100 ms).
  std::vector<correlate::ReplicaSync> replicas;
  // The capture's disk family: the process's fsyncs by thread while the child lived and before.
  std::optional<correlate::FsyncWindow> fsync_during, fsync_before;
};

struct ScenarioResult {
  ScenarioSpec spec;
  // Every phase ran to its end (the self-check may still have found faults).
  bool completed = false;
  std::vector<PhaseResult> phases;
  std::vector<ForkRecord> forks;
  // Time zero of the scenario's timeline: the first phase's start.
  uint64_t zero_ns = 0;
  // The during phase as Redis state bounds it: the trigger command, the replica's link up (full
  // syncs only) and the end condition (link up and fork child gone / rewrite or save finished).
  uint64_t trigger_ns = 0, link_up_ns = 0, done_ns = 0;
  // Per replica, in the order they were started: its address and when its own master_link_status
  // turned up (polled every 10 ms; link_up_ns is the last of them). Full syncs only.
  std::vector<std::string> replica_addresses;
  std::vector<uint64_t> replica_link_up_ns;
  // The replica state only the server's rdb channel shows (bg_transfer, send_bulk_and_stream), when
  // the scenario ran over it: the self-check wants it seen for at least one replica.
  std::string channel_state;

  // From the capture's JSON.
  std::string system_thp_enabled, system_thp_defrag;
  std::optional<bool> process_thp_enabled;
  uint64_t anon_huge_pages_kb_max = 0, rss_kb_max = 0;
  uint64_t dropped_events = 0;
  std::string probes;  // "fork=tp_btf cow_fault=..." as the capture chose them
  // The capture's memory and replication figures: copy-on-write copies of the fork windows, the
  // replication buffers' peak (mem_total_replication_buffers), the memory cgroup's highest usage.
  uint64_t copied_bytes = 0, replication_buffer_peak_bytes = 0;
  std::optional<uint64_t> cgroup_usage_max_bytes, cgroup_limit_bytes;
  // From INFO.
  std::string disable_thp;
  redis::InfoMap info_after_load, info_end;

  // Mechanical faults: any one fails the run's self-check.
  std::vector<std::string> faults;
  // Plain observations for the summary (a resync, no huge pages under `always`, ...).
  std::vector<std::string> notes;

  const PhaseResult* phase(const std::string& name) const;
  double during_s() const { return done_ns > trigger_ns ? static_cast<double>(done_ns - trigger_ns) / 1e9 : 0; }
};

struct RunContext {
  const BenchOptions& options;
  std::filesystem::path out_dir;   // the results folder
  std::filesystem::path work_dir;  // redis-server directories (RDB, AOF), removed after each scenario
  ThpMode* thp = nullptr;          // set when THP scenarios may run
  const std::atomic<bool>& interrupted;
  const ServerBuild& server;  // every primary and replica runs it
};

// Runs one scenario from start to clean-up. Faults (a replica that never synced, a capture that
// failed, a fork with the wrong reason...) are recorded in the result, not thrown; only an
// interruption throws (Interrupted), after everything the scenario started has been stopped.
ScenarioResult run_scenario(const ScenarioSpec& spec, RunContext& context);

// Reads the capture's JSON report (report::from_json, the reader of what report writes) into `r`
// and checks its forks against the scenario's expectation; a report that does not read back is a
// fault.
void read_capture(const std::filesystem::path& json_path, ScenarioResult& r);

}  // namespace thptrace::bench
