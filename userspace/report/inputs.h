// SPDX-License-Identifier: Apache-2.0
#pragma once
// Everything a capture collects that the report is computed from: the kernel's events and final
// counters, the /proc samples, the Redis timeline and the facts read at start. A capture can write
// them to a file (THPTRACE_RECORD_INPUTS=PATH) so the report can be recomputed and tested without
// privilege from a recorded run.

#include <nlohmann/json.hpp>

#include <charconv>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "correlate/copies.h"
#include "correlate/disk.h"
#include "correlate/window.h"
#include "kernel/abi.h"
#include "kernel/modes.h"
#include "proc/cgroup.h"
#include "proc/container.h"
#include "proc/folios.h"
#include "proc/proc.h"
#include "proc/sampler.h"
#include "redis/latency_probe.h"
#include "redis/watcher.h"

namespace thptrace::report {

// The target's in-kernel counters read every few ms by a capture asked for a timeline (--svg): the
// running counts the fault programs keep (the fast path's per-CPU sums), so a time bucket's faults
// are a difference of two reads, not one ring-buffer record per fault.
struct CounterSample {
  uint64_t ts_ns = 0;  // CLOCK_MONOTONIC
  uint64_t cow_faults = 0;
  uint64_t child_cow_faults = 0;
  uint64_t thp_splits = 0;  // fentry mode only
};
// How often a capture with --svg reads them.
inline constexpr uint64_t kCounterIntervalNs = 10'000'000;

// A window's disk calls as the capture summarised them (correlate::DiskLog): nullopt where the log
// had let go of calls the window may have held.
struct DiskSummary {
  correlate::Window window;
  std::optional<correlate::FsyncWindow> calls;
};

struct FolioReading {
  uint64_t ts_ns = 0;  // CLOCK_MONOTONIC
  proc::FolioCounters counters;
};

struct CaptureInputs {
  std::string version;
  proc::SystemInfo system;
  int pid = 0;
  // NSpid's last entry: the target's pid in its own PID namespace, what Redis in a container reports
  // as process_id. 0 when unknown (recordings from before it); written only when set.
  int pid_in_namespace = 0;
  std::string comm;                        // /proc/PID/status Name at the start
  proc::ContainerNames container;          // its container's id and Kubernetes names; empty on a bare host
  std::optional<bool> status_thp_enabled;  // /proc/PID/status THP_enabled at the start
  tracer::AttachModes probes;              // the modes in use after attach
  tracer::FamilyChoice huge_alloc;
  uint64_t start_ns = 0, end_ns = 0;             // CLOCK_MONOTONIC
  // CLOCK_REALTIME at the same moments, the host's name and boot id; 0 and "" in recordings from
  // before them (then the report leaves them out). Written only when set.
  int64_t start_realtime_ns = 0, end_realtime_ns = 0;
  std::string hostname, boot_id;
  std::vector<thptrace_event> events;            // ring-buffer records, in arrival order
  // Set by captures that summarise their disk calls as they come (correlate::DiskLog): `events`
  // holds no EV_DISK record, `disk_windows` each fork's window and the one before it. Unset in
  // recordings from before, whose events hold the calls.
  bool disk_summarised = false;
  std::vector<DiskSummary> disk_windows;
  uint64_t disk_calls_dropped = 0;               // let go of by the log, oldest first
  std::vector<thptrace_episode> final_episodes;  // still in the kernel map at the end
  thptrace_target target{};                      // the target's kernel counters at the end
  uint64_t dropped = 0;                          // ring-buffer records lost
  proc::SampleSeries samples;
  std::optional<std::string> redis_address;  // set when --redis was given
  std::vector<redis::Snapshot> timeline;
  std::optional<redis::ServerFacts> facts;
  std::string redis_error;
  std::vector<redis::Outage> redis_outages;  // after it had answered; written only when there are some
  // Optional commands the server refused at their last try, by command, and why (the figure each
  // gives is missing); written only when there are some.
  std::map<std::string, std::string> redis_refused;
  // The target's memory cgroup at the start and at the end (limit, the kernel's peak, OOM kills).
  std::optional<proc::CgroupMemory> cgroup_start, cgroup_end;
  std::vector<CounterSample> counters;  // only with --svg; written only when there are some
  // The host's folio counters by size (proc::read_folio_counters), read at the start, at each fork
  // and child's exit of the target (when their record arrives) and at the end; none where the
  // kernel has no per-size counters (written only when there are some).
  std::vector<FolioReading> folio_readings;
  // The target's anonymous memory by folio size (proc::FolioWalker) at the start and at the end;
  // unset where the walk could not be made (folio_walk_why says why), and in recordings from before.
  std::optional<proc::FolioShares> folios_start, folios_end;
  std::string folio_walk_why;
  // ns one copy-on-write fault took on this host, measured before the capture (cli/copy_cost.h);
  // only where the kernel does not time the faults (the tracepoint modes).
  std::optional<double> copy_cost_ns;
  // Sampled copies (--sample-copies N): 1 in sample_every copy-on-write faults of the target while a
  // child of it lived, resolved during the capture. Written only when sampling was on.
  uint32_t sample_every = 0;
  uint64_t copy_samples_dropped = 0;
  std::vector<correlate::CopySample> copy_samples;
  // The client-latency probe (--latency-probe HZ with --redis; redis/latency_probe.h): its requests,
  // the due times it missed (an outage) and the samples past its bound. Written only when it ran.
  uint32_t latency_probe_hz = 0;
  uint64_t client_timeout_us = 0;
  uint64_t probe_missed = 0, probe_dropped = 0;
  std::vector<redis::ProbeSample> probe_samples;
  // The figures of every request of the capture, where it let some go (below); else unset, and the
  // report reads them from probe_samples.
  std::optional<redis::ClientLatency> probe_whole;
  // Where the capture let items of its time series go (samples, timeline, probe_samples, counters),
  // outside its forks' windows and the windows before them (report/retention.h); oldest first.
  std::vector<correlate::Window> series_let_go;
};

// One record of each kind, as inputs_to_json writes it (the daemon's recordings use them too).
nlohmann::ordered_json episode_json(const thptrace_episode& e);
thptrace_episode episode_from(const nlohmann::json& j);
nlohmann::ordered_json event_json(const thptrace_event& e);
thptrace_event event_from(const nlohmann::json& j);
nlohmann::ordered_json target_json(const thptrace_target& t);
thptrace_target target_from(const nlohmann::json& j);
nlohmann::ordered_json snapshot_json(const redis::Snapshot& s);
redis::Snapshot snapshot_from(const nlohmann::json& j);
// A latency-probe request as a row [due_ns, latency_ns, failed 0|1]: a long series.
nlohmann::ordered_json probe_sample_json(const redis::ProbeSample& s);
redis::ProbeSample probe_sample_from(const nlohmann::json& j);
// A sample's main-thread clocks: {on_cpu_ns, runqueue_ns}, or null.
nlohmann::ordered_json sched_stat_json(const std::optional<proc::SchedStat>& s);
std::optional<proc::SchedStat> sched_stat_from(const nlohmann::json& j);
// The host's kernel and THP settings; folio_modes only when the kernel has them.
nlohmann::ordered_json system_json(const proc::SystemInfo& s);
proc::SystemInfo system_from(const nlohmann::json& j);
// The probe's figures over a window, as the report's forks[].client_latency_during writes them; null
// for nullopt.
nlohmann::ordered_json client_latency_json(const std::optional<redis::ClientLatency>& c);
std::optional<redis::ClientLatency> client_latency_from(const nlohmann::json& v);
// A window's disk calls, as the report's forks[].fsync_during writes them; null for nullopt.
nlohmann::ordered_json fsync_json(const std::optional<correlate::FsyncWindow>& w);
std::optional<correlate::FsyncWindow> fsync_from(const nlohmann::json& v);
// Values by folio size in KiB, as {"64": value, ...}: the recordings' folio readings (counters by
// name), the report's forks[].folios and the target's memory by folio size. A key that is not a size
// throws as a value of the wrong type does.
template <typename V>
nlohmann::ordered_json by_size_json(const std::map<uint32_t, V>& by_size) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [kb, value] : by_size) j[std::to_string(kb)] = value;
  return j;
}
template <typename V>
std::map<uint32_t, V> by_size_from(const nlohmann::json& j) {
  std::map<uint32_t, V> by_size;
  for (const auto& [key, value] : j.items()) {
    uint32_t kb = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), kb);
    if (ec != std::errc() || end != key.data() + key.size()) kb = nlohmann::json(key).get<uint32_t>();  // throws
    by_size[kb] = value.template get<V>();
  }
  return by_size;
}
// A folio walk (proc::FolioShares) as {kb: {"4": ..., "64": ...}, pages, every, walk_us}; null for
// nullopt.
nlohmann::ordered_json folio_shares_json(const std::optional<proc::FolioShares>& s);
std::optional<proc::FolioShares> folio_shares_from(const nlohmann::json& j);
nlohmann::ordered_json choice_json(const tracer::FamilyChoice& c);
tracer::FamilyChoice choice_from(const nlohmann::json& j);

nlohmann::ordered_json inputs_to_json(const CaptureInputs& in);
// Throws nlohmann::json::exception on a malformed document.
CaptureInputs inputs_from_json(const nlohmann::json& j);

}  // namespace thptrace::report
