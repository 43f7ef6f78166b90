// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one-shot capture report: its data, the JSON (docs/reference/report.schema.json), the text a person
// reads, and the findings (plain sentences, most important first).

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "correlate/correlator.h"
#include "correlate/episode.h"
#include "kernel/modes.h"
#include "proc/proc.h"
#include "report/inputs.h"

namespace thptrace::report {

struct RedisSection {
  std::string address;
  bool reachable = false;
  std::string error;  // why it was not reachable
  std::string version;
  int64_t process_id = 0;
  std::string disable_thp;
  std::string repl_diskless_sync;
  int64_t latest_fork_usec = 0;
  int64_t total_forks_delta = 0;
  int64_t rdb_last_cow_size = 0;
  std::string run_id, role;  // "" when not read
  // What decides the AOF's and the RDB's fsyncs (CONFIG GET; unset when not read), and INFO's
  // aof_delayed_fsync over the capture (-1 when INFO lacks it).
  struct Persistence {
    std::string appendonly, appendfsync, no_appendfsync_on_rewrite, aof_rewrite_incremental_fsync,
        rdb_save_incremental_fsync;
    int64_t aof_delayed_fsync_delta = -1;
  };
  std::optional<Persistence> persistence;
  // Times it stopped answering after it had answered (to_ns 0: to the end of the capture).
  std::vector<redis::Outage> unanswered;
  // Why figures of optional commands are missing ("LATENCY HISTOGRAM refused: NOPERM ..."), by command.
  std::vector<std::string> refused;
};

// The client-latency probe of a capture with --redis (redis/latency_probe.h): its rate, the timeout
// its slow requests are counted against, the due times it missed (outages) and the whole capture's
// figures.
struct ClientProbeSection {
  uint32_t hz = 0;
  uint64_t client_timeout_us = 0;
  uint64_t missed = 0;
  std::optional<redis::ClientLatency> whole;
};

// What the forks' copy-on-write ran against: the memory cgroup the process is charged to (v1 or v2)
// and the system's MemAvailable, over the capture.
struct CgroupSection {
  int version = 0;
  std::string path;                     // the cgroup's directory
  std::optional<uint64_t> limit_bytes;  // nullopt: no limit
  uint64_t usage_max_bytes = 0;         // the highest usage sampled during the capture
  std::optional<uint64_t> peak_bytes;   // the kernel's high-water mark at the end (cgroup lifetime)
  uint64_t oom_kills = 0;               // OOM kills in the cgroup during the capture
  std::optional<uint64_t> headroom_bytes() const {
    if (!limit_bytes) return std::nullopt;
    return *limit_bytes > usage_max_bytes ? *limit_bytes - usage_max_bytes : 0;
  }
};
struct MemorySection {
  uint64_t copied_bytes = 0;  // copy-on-write faults of the fork windows (parent and children) × 4 KiB
  double fork_window_s = 0;   // the children's lifetimes summed: the time those copies took
  std::optional<uint64_t> mem_available_min_bytes;
  std::optional<CgroupSection> cgroup;
};
// The replicas' full syncs over the capture: how many, which replicas fell into the full-sync loop
// (dropped and full-synced again), the buffers they used against the limit in force.
struct ReplicaLoop {
  std::string address;
  uint64_t syncs = 0;    // full syncs of this replica in the capture
  uint64_t dropped = 0;  // of which dropped before online
};
struct ReplicationSection {
  uint64_t full_syncs = 0;                                     // INFO sync_full over the capture
  uint64_t replica_syncs = 0;                                  // syncs seen in INFO replication
  uint64_t dropped_syncs = 0;                                  // of which dropped before online
  std::optional<uint64_t> output_buffer_limit_disconnections;  // INFO stats delta; nullopt when INFO lacks it
  uint64_t replication_buffer_peak_bytes = 0;                  // mem_total_replication_buffers
  std::optional<uint64_t> replica_output_buffer_peak_bytes;    // CLIENT LIST omem, polled during syncs
  std::optional<redis::OutputBufferLimit> limit;               // client-output-buffer-limit replica
  std::optional<uint64_t> repl_timeout_s;
  double stream_bytes_per_s = 0;  // master_repl_offset's growth over the capture
  std::vector<ReplicaLoop> loops;
  std::string loop_cause;  // output_buffer_limit, repl_timeout, or unknown; "" without a loop
  std::optional<uint64_t> suggested_hard_limit_bytes;  // a replica limit that would have held
  uint64_t wasted_forks = 0;                           // full-sync forks every replica of which was dropped
  uint64_t wasted_copied_bytes = 0;                    // what those forks copied on write
};

// A limit counts as close when the usage came within this share of it.
inline constexpr double kHeadroomWarnShare = 0.20;

// The shape of the JSON report, MAJOR.MINOR: MINOR grows when keys are added, MAJOR with any other
// change (a key renamed, removed or given another meaning). docs/guide/report.md has the policy.
inline constexpr const char* kReportVersion = "2.5";

struct Report {
  std::string version;
  // Where and when, for an archive: the host's name and boot id, the wall-clock start and end
  // (CLOCK_REALTIME ns); "" and 0 when the recording lacks them.
  std::string hostname, boot_id;
  int64_t start_realtime_ns = 0, end_realtime_ns = 0;
  proc::SystemInfo system;
  int pid = 0;
  // The target's pid in its own PID namespace (NSpid's last entry): what Redis in a container reports
  // as process_id. Equal to pid on a plain host; 0 when unknown.
  int pid_in_namespace = 0;
  std::string comm;
  proc::ContainerNames container;  // empty id on a bare host
  std::optional<bool> thp_enabled_for_process;
  uint64_t anon_huge_pages_kb_start = 0, anon_huge_pages_kb_max = 0, anon_huge_pages_kb_end = 0;
  uint64_t rss_kb_max = 0;
  // Its anonymous memory by folio size at the start and at the end (proc::FolioWalker), and why a
  // walk was not made ("" when it was, and in reports from before 2.4).
  std::optional<proc::FolioShares> anon_folios_start, anon_folios_end;
  std::string anon_folios_why;
  tracer::AttachModes probes;
  // The order-9 allocation counter (huge_page_allocs): attached only when the process could be given
  // a huge page; mode unavailable when it was not, with the reason.
  tracer::FamilyChoice huge_alloc;
  double duration_s = 0;
  // CLOCK_MONOTONIC (the clock of bpf_ktime_get_ns) at the capture's start: forks[].fork_ts_ms
  // and exit_ts_ms are offsets from it, so other tools can place forks on their own timelines.
  uint64_t start_monotonic_ns = 0;
  // A kernel timestamp as seconds from the capture's start, for the sentences that place an event.
  double seconds_since_start(uint64_t ts_ns) const {
    return (static_cast<double>(ts_ns) - static_cast<double>(start_monotonic_ns)) / 1e9;
  }
  bool target_exited = false;
  std::vector<correlate::ForkEpisode> forks;
  correlate::Totals totals;
  std::optional<RedisSection> redis;  // set when --redis was given
  std::optional<ClientProbeSection> client_probe;  // set when the probe ran
  MemorySection memory;
  std::optional<ReplicationSection> replication;  // set when a replica synced or sync_full grew
  // Copy sampling (--sample-copies): 1 in sample_every, 0 when off; samples the kernel dropped.
  uint32_t sample_every = 0;
  uint64_t copy_samples_dropped = 0;
  // Disk calls the capture's bounded log let go of (report/disk_windows.h), and the fork windows (or
  // windows before them) left without figures because of it.
  uint64_t disk_calls_dropped = 0, disk_windows_unknown = 0;
  // A copy's cost measured on this host before the capture, where the forks' copy stalls are
  // estimated from it (the tracepoint modes).
  std::optional<double> copy_cost_ns;
};

// "64 KiB", "2 MiB": a folio size given in KiB.
inline std::string folio_size_name(uint32_t kb) {
  return kb % 1024 ? fmt::format("{} KiB", kb) : fmt::format("{} MiB", kb / 1024);
}
// "2 MiB: 64.0 MiB (50%), 64 KiB: 52.0 MiB (41%), 4 KiB: 12.0 MiB (9%)": the sizes holding memory, the
// largest first; "" when none does.
std::string folio_shares_text(const proc::FolioShares& s);

// The text report lists every fork while there are at most kForkTableRows; past that it keeps the
// kWorstForksShown with the most copy-on-write faults and the kRecentForksShown most recent, in fork
// order (a full-sync loop makes hundreds of forks). The JSON keeps them all.
inline constexpr size_t kForkTableRows = 20;
inline constexpr size_t kWorstForksShown = 10;
inline constexpr size_t kRecentForksShown = 5;
// Replicas listed under a fork's row in the text report.
inline constexpr size_t kReplicasShown = 5;
// Which rows of the text report's fork table are printed, by index into forks.
std::vector<bool> shown_forks(const std::vector<correlate::ForkEpisode>& forks);

// The report of a capture from everything it collected: pure, so a recorded capture's report can be
// computed again without privilege (tests/unit/golden_test.cpp).
Report assemble(const CaptureInputs& inputs);
// The replication section from the Redis timeline, the forks and the replicas' syncs; nullopt when
// no replica synced and sync_full did not grow.
std::optional<ReplicationSection> replication_of(const CaptureInputs& inputs,
                                                 const std::vector<correlate::ForkEpisode>& forks,
                                                 const std::vector<correlate::ReplicaSync>& syncs);

// What a finding is worth to an operator: critical (clients or the server are at risk now), warning
// (clients paid for it), info (how the host and the process stand).
enum class Severity { critical, warning, info };
const char* severity_name(Severity s);

// One finding: a stable id per kind, its severity, the client-visible ms it accounts for (null when
// it explains none), the sentence, and the figures it rests on.
struct Finding {
  std::string id;
  Severity severity = Severity::info;
  std::optional<double> impact_ms;
  std::string text;
  nlohmann::ordered_json evidence = nlohmann::ordered_json::object();
};

// The capture's findings, most important first: critical ones, then by the ms they account for.
std::vector<Finding> findings(const Report& r);
// Their sentences, in the same order.
std::vector<std::string> finding_texts(const Report& r);
// The JSON of the contract, and its one reader (bench reads captures with it): from_json(to_json(r))
// writes the same JSON again. from_json throws nlohmann::json::exception or std::invalid_argument
// when a key is missing or has another type. Every string of to_json is valid UTF-8, whatever bytes
// the report's names hold (each ill-formed sequence is U+FFFD).
nlohmann::ordered_json to_json(const Report& r);
// The copies of the capture: its forks' cow_faults added up (writes while a child lived). The rest
// of totals.cow_faults is reuse, writes after the child's exit that copy nothing.
uint64_t total_copies(const Report& r);
Report from_json(const nlohmann::json& j);
// The JSON report file's content (to_json, indented, with a final newline); never throws on a value.
std::string json_text(const Report& r);
// The text report; every line printable (common/text.h), whatever a name holds.
std::string to_text(const Report& r);
// CLOCK_REALTIME ns as RFC 3339 in UTC with milliseconds: 2026-12-02T12:00:00.000Z.
std::string rfc3339_utc(int64_t ns);

}  // namespace thptrace::report
