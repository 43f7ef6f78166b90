// SPDX-License-Identifier: Apache-2.0
// The replication section of a report: the replicas' syncs over the capture, the full-sync loop
// and its cause, the buffers against the limit in force.
#include <algorithm>
#include <cmath>
#include <map>

#include "common/units.h"
#include "report/report.h"

namespace thptrace::report {
namespace {

using correlate::Reason;
using correlate::ReplicaSync;

bool full_sync_reason(Reason r) {
  return r == Reason::full_sync_disk || r == Reason::full_sync_diskless || r == Reason::full_sync_rdb_channel;
}

// A partial resync (PSYNC continue) puts a replica online without a fork: listed online at once.
bool full_sync(const ReplicaSync& s) { return s.child_pid != 0 || s.states.front().state != "online"; }

uint64_t round_up_mib(double bytes) {
  constexpr double kMib = 1 << 20;
  return static_cast<uint64_t>(std::ceil(bytes / kMib)) * (1 << 20);
}

}  // namespace

std::optional<ReplicationSection> replication_of(const CaptureInputs& in,
                                                 const std::vector<correlate::ForkEpisode>& forks,
                                                 const std::vector<ReplicaSync>& syncs) {
  const redis::Snapshot* first = nullptr;
  const redis::Snapshot* last = nullptr;
  ReplicationSection r;
  for (const auto& s : in.timeline) {
    if (!s.up) continue;
    if (!first) first = &s;
    last = &s;
    r.replication_buffer_peak_bytes = std::max(
        r.replication_buffer_peak_bytes, static_cast<uint64_t>(std::max<int64_t>(s.mem_total_replication_buffers, 0)));
    if (s.replica_output_buffer_max >= 0)
      r.replica_output_buffer_peak_bytes =
          std::max(r.replica_output_buffer_peak_bytes.value_or(0), static_cast<uint64_t>(s.replica_output_buffer_max));
  }
  if (first && last) {
    r.full_syncs = static_cast<uint64_t>(std::max<int64_t>(last->sync_full - first->sync_full, 0));
    if (first->client_output_buffer_limit_disconnections >= 0 && last->client_output_buffer_limit_disconnections >= 0)
      r.output_buffer_limit_disconnections = static_cast<uint64_t>(std::max<int64_t>(
          last->client_output_buffer_limit_disconnections - first->client_output_buffer_limit_disconnections, 0));
    const double span_s = static_cast<double>(last->ts_ns - first->ts_ns) / 1e9;
    if (span_s > 0 && last->master_repl_offset > first->master_repl_offset)
      r.stream_bytes_per_s = static_cast<double>(last->master_repl_offset - first->master_repl_offset) / span_s;
  }
  std::map<std::string, ReplicaLoop> by_address;
  double longest_sync_s = 0;
  uint64_t longest_dropped_ns = 0;
  for (const auto& s : syncs) {
    if (!full_sync(s)) continue;
    ++r.replica_syncs;
    auto& l = by_address[s.address];
    l.address = s.address;
    ++l.syncs;
    if (s.outcome == ReplicaSync::Outcome::dropped) {
      ++r.dropped_syncs;
      ++l.dropped;
      longest_dropped_ns = std::max(longest_dropped_ns, s.last_seen_ns - s.first_seen_ns);
    }
    if (const auto ms = s.sync_ms()) longest_sync_s = std::max(longest_sync_s, *ms / 1e3);
  }
  if (r.replica_syncs == 0 && r.full_syncs == 0) return std::nullopt;
  // A replica dropped while it still waits for its RDB (a diskless stream cut by the output buffer
  // limit) reconnects and waits again: polls 100 ms apart can see one long wait where Redis counted
  // many full syncs (sync_full). With one replica seen, and seen dropped, Redis's count is its count.
  if (by_address.size() == 1 && r.dropped_syncs > 0 && r.full_syncs > r.replica_syncs) {
    auto& l = by_address.begin()->second;
    const uint64_t online = l.syncs - l.dropped;
    l.syncs = r.full_syncs;
    l.dropped = r.full_syncs - online;
  }
  for (const auto& [address, l] : by_address)
    if (l.syncs >= 2) r.loops.push_back(l);  // disconnected and full-synced again
  std::sort(r.loops.begin(), r.loops.end(), [](const auto& a, const auto& b) { return a.syncs > b.syncs; });

  if (in.facts) {
    r.limit = redis::parse_replica_output_buffer_limit(in.facts->client_output_buffer_limit);
    try {
      if (!in.facts->repl_timeout.empty()) r.repl_timeout_s = std::stoull(in.facts->repl_timeout);
    } catch (const std::exception&) {
      r.repl_timeout_s.reset();
    }
  }

  double longest_child_s = 0;
  double longest_wasted_child_s = 0;  // the longest-lived child of a fork whose replicas all dropped
  for (const auto& f : forks) {
    if (!full_sync_reason(f.reason) && f.replicas.empty()) continue;
    if (f.child_lifetime_ms) longest_child_s = std::max(longest_child_s, *f.child_lifetime_ms / 1e3);
    const bool all_dropped =
        !f.replicas.empty() && std::all_of(f.replicas.begin(), f.replicas.end(),
                                           [](const auto& s) { return s.outcome == ReplicaSync::Outcome::dropped; });
    if (all_dropped) {
      if (f.child_lifetime_ms) longest_wasted_child_s = std::max(longest_wasted_child_s, *f.child_lifetime_ms / 1e3);
      ++r.wasted_forks;
      r.wasted_copied_bytes += (f.cow_faults + f.child_cow_faults) * kPageBytes;
    }
  }

  if (!r.loops.empty()) {
    // The cause: Redis counts its own output-buffer disconnections (7.4+, Valkey 8.0+); without the
    // counter, a replica output buffer seen at half the limit or more; a sync that waited past
    // repl-timeout.
    const uint64_t limit_floor = r.limit ? std::min(r.limit->hard_bytes ? r.limit->hard_bytes : UINT64_MAX,
                                                    r.limit->soft_bytes ? r.limit->soft_bytes : UINT64_MAX)
                                         : UINT64_MAX;
    // Without the counter (Redis < 7.4), what the replication stream took while a dropped sync
    // lasted: more than the limit cannot have fit in the replica's output buffer.
    const double written_in_longest_drop = r.stream_bytes_per_s * static_cast<double>(longest_dropped_ns) / 1e9;
    // A replica's output buffer holds every write from the fork on, until its RDB is loaded: a
    // child that lived long enough for the stream to pass the hard limit overflowed it. Exact where
    // polls 100 ms apart see a drop in one poll only (its length then reads 0).
    const bool child_outlived_limit =
        r.limit && r.limit->hard_bytes &&
        r.stream_bytes_per_s * longest_wasted_child_s >= static_cast<double>(r.limit->hard_bytes);
    if (r.output_buffer_limit_disconnections.value_or(0) > 0 ||
        (!r.output_buffer_limit_disconnections && limit_floor != UINT64_MAX &&
         (2 * r.replica_output_buffer_peak_bytes.value_or(0) >= limit_floor ||
          written_in_longest_drop >= static_cast<double>(limit_floor) || child_outlived_limit)))
      r.loop_cause = "output_buffer_limit";
    else if (r.repl_timeout_s && longest_dropped_ns >= *r.repl_timeout_s * 1'000'000'000ull)
      r.loop_cause = "repl_timeout";
    else
      r.loop_cause = "unknown";
    if (r.loop_cause == "output_buffer_limit") {
      // A sync needs the writes of its whole length buffered: the stream's rate over the longest
      // sync (or fork child) seen, twice over, and never less than twice what was already there.
      const double sync_s = std::max({longest_sync_s, longest_child_s, 1.0});
      const double need = 2.0 * r.stream_bytes_per_s * sync_s;
      const double current = r.limit && r.limit->hard_bytes ? static_cast<double>(r.limit->hard_bytes) : 0.0;
      const double seen = static_cast<double>(
          std::max(r.replication_buffer_peak_bytes, r.replica_output_buffer_peak_bytes.value_or(0)));
      r.suggested_hard_limit_bytes = round_up_mib(std::max({need, 2.0 * current, 2.0 * seen}));
    }
  }
  return r;
}

}  // namespace thptrace::report
