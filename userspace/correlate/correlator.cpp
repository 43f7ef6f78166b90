// SPDX-License-Identifier: Apache-2.0
#include "correlate/correlator.h"

#include <algorithm>

namespace thptrace::correlate {
namespace {

// Bounded history (the daemon): INFO polls and vmstat samples are kept this far back from the
// newest one and from the oldest fork not yet taken...
constexpr uint64_t kIdleHistoryNs = 5'000'000'000;
// ...unless that fork is older than this: its exit record was lost, it no longer pins the history.
constexpr uint64_t kLongestForkNs = 3600ull * 1'000'000'000;

// An AOF rewrite or a module's fork never serves a replica.
bool may_serve(uint32_t kernel_reason) {
  const Reason r = reason_from_kernel(kernel_reason);
  return r != Reason::aof_rewrite && r != Reason::module;
}

}  // namespace

Reason reason_from_kernel(uint32_t code) {
  switch (code) {
    case REASON_BGSAVE: return Reason::bgsave;
    case REASON_FULL_SYNC_DISK: return Reason::full_sync_disk;
    case REASON_FULL_SYNC_DISKLESS: return Reason::full_sync_diskless;
    case REASON_AOF_REWRITE: return Reason::aof_rewrite;
    case REASON_MODULE: return Reason::module;
    case REASON_FULL_SYNC_RDB_CHANNEL: return Reason::full_sync_rdb_channel;
    default: return Reason::unknown;
  }
}

Correlator::Correlator(uint32_t target_tgid, CorrelatorOptions options)
    : target_(target_tgid), options_(std::move(options)) {}

void Correlator::on_event(const thptrace_event& e) {
  if (e.tgid != target_) return;
  switch (e.type) {
    case EV_FORK: {
      Partial& p = episodes_[e.child_pid];
      if (!p.have_final) {
        p.ep.parent_tgid = e.tgid;
        p.ep.child_pid = e.child_pid;
        p.ep.fork_ts_ns = e.ts_ns;
        p.ep.reason = static_cast<uint32_t>(e.value);
      }
      p.have_fork = true;
      replicas_.on_fork({e.child_pid, p.ep.fork_ts_ns, p.ep.exit_ts_ns, may_serve(p.ep.reason)});
      break;
    }
    case EV_FORK_RETURN: {
      auto it = episodes_.find(e.child_pid);
      if (it == episodes_.end()) break;  // a thread, or a fork we did not see start
      if (e.ts_ns >= e.start_ns) it->second.fork_duration_us = static_cast<double>(e.ts_ns - e.start_ns) / 1e3;
      break;
    }
    case EV_CHILD_EXIT: {
      Partial& p = episodes_[e.child_pid];
      p.ep = e.episode;
      p.have_final = true;
      replicas_.on_fork({e.child_pid, p.ep.fork_ts_ns, p.ep.exit_ts_ns, may_serve(p.ep.reason)});
      break;
    }
    case EV_TARGET_EXIT: target_exited_ = true; break;
    default:
      break;
  }
}

void Correlator::on_final_episode(const thptrace_episode& ep) {
  if (ep.parent_tgid != target_) return;
  Partial& p = episodes_[ep.child_pid];
  // An exit record already delivered is final; a map read of the same episode is older.
  if (p.have_final && p.ep.exit_ts_ns) return;
  p.ep = ep;
  p.have_final = true;
  replicas_.on_fork({ep.child_pid, ep.fork_ts_ns, ep.exit_ts_ns, may_serve(ep.reason)});
}

void Correlator::on_snapshot(redis::Snapshot s) {
  // A poll Redis did not answer says nothing about a fork.
  if (!s.up) return;
  if (options_.bounded_history) s.latency.reset();  // only reasons are asked of a bounded history
  replicas_.on_snapshot(s);
  timeline_.push_back(std::move(s));
  trim_history();
}

void Correlator::on_sample(proc::Sample s) {
  samples_.add(std::move(s));
  trim_history();
}

void Correlator::trim_history() {
  if (!options_.bounded_history) return;
  const auto back_off = [](uint64_t ts) { return ts > kIdleHistoryNs ? ts - kIdleHistoryNs : 0; };
  uint64_t newest = 0;
  if (!timeline_.empty()) newest = timeline_.back().ts_ns;
  if (!samples_.samples().empty()) newest = std::max(newest, samples_.samples().back().ts_ns);
  uint64_t keep_from = back_off(newest);
  for (const auto& [child, p] : episodes_)
    if (p.ep.fork_ts_ns && p.ep.fork_ts_ns + kLongestForkNs >= newest)
      keep_from = std::min(keep_from, back_off(p.ep.fork_ts_ns));
  size_t old = 0;
  while (timeline_.size() - old > 2 && timeline_[old].ts_ns < keep_from) ++old;
  timeline_.erase(timeline_.begin(), timeline_.begin() + static_cast<std::ptrdiff_t>(old));
  samples_.drop_before(keep_from, 2);
  replicas_.drop_before(keep_from);
}

size_t Correlator::live_children() const {
  return static_cast<size_t>(std::count_if(episodes_.begin(), episodes_.end(), [](const auto& kv) {
    return !kv.second.have_final || kv.second.ep.exit_ts_ns == 0;
  }));
}

bool Correlator::settled(const Partial& p, uint64_t now_ns) const {
  const uint64_t exit = p.ep.exit_ts_ns;
  if (!p.have_final || exit == 0) return false;  // the child lives
  if (now_ns >= exit + kSettleWaitNs) return true;
  // A poll sent after the exit shows what the child was (a short child can live between two polls).
  const bool reason_known = reason_from_kernel(p.ep.reason) != Reason::unknown || !options_.redis_polled ||
                            (!timeline_.empty() && timeline_.back().sent_ns > exit);
  const bool splits_known =
      options_.kernel_splits || (!samples_.samples().empty() && samples_.samples().back().ts_ns >= exit);
  return reason_known && splits_known;
}

ForkEpisode Correlator::complete(const Partial& p) const {
  ForkEpisode f = episode_from_kernel(p.ep);
  if (options_.cpu_waits && f.exit_ts_ns) {
    const auto ms = [](uint64_t ns) { return static_cast<double>(ns) / 1e6; };
    const auto& w = p.ep.main_wait;
    f.main_wait = ForkEpisode::CpuWait{ms(w.child_ns), ms(w.threads_ns), ms(w.others_ns), ms(w.idle_ns)};
  }
  if (!f.fork_duration_us && p.fork_duration_us) f.fork_duration_us = p.fork_duration_us;
  if (f.reason == Reason::unknown && !timeline_.empty()) {
    f.reason = reason_from_redis(timeline_, f.fork_ts_ns, f.exit_ts_ns, options_.repl_diskless_sync);
    f.reason_source = f.reason == Reason::unknown ? "none" : "info";
  }
  const auto& samples = samples_.samples();
  const Window window = f.window(samples.empty() ? f.fork_ts_ns : std::max(f.fork_ts_ns, samples.back().ts_ns));
  if (options_.kernel_splits) {
    f.thp_splits_source = "kernel";
  } else {
    f.thp_splits = samples_.vmstat_delta("thp_split_pmd", window.from_ns, window.to_ns).value_or(0);
    f.thp_splits_source = "vmstat";
  }
  if (f.reason != Reason::aof_rewrite && f.reason != Reason::module) f.replicas = replicas_.served_by(f.child_pid);
  if (!timeline_.empty() && f.exit_ts_ns) {
    f.latency_during = latency_between(timeline_, window.from_ns, window.to_ns);
    if (const auto before = window.before())
      f.latency_before = latency_between(timeline_, before->from_ns, before->to_ns);
  }
  return f;
}

std::vector<ForkEpisode> Correlator::take_if(const std::function<bool(const Partial&)>& pick) {
  std::vector<ForkEpisode> out;
  for (auto it = episodes_.begin(); it != episodes_.end();) {
    const Partial& p = it->second;
    if ((p.have_fork || p.have_final) && pick(p)) {
      out.push_back(complete(p));
      it = episodes_.erase(it);
    } else {
      ++it;
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ForkEpisode& a, const ForkEpisode& b) { return a.fork_ts_ns < b.fork_ts_ns; });
  return out;
}

std::vector<ForkEpisode> Correlator::take_settled(uint64_t now_ns) {
  if (options_.bounded_history)  // a child whose exit record was lost is let go
    std::erase_if(episodes_, [now_ns](const auto& kv) {
      return !kv.second.have_final && kv.second.ep.fork_ts_ns + kLongestForkNs < now_ns;
    });
  return take_if([this, now_ns](const Partial& p) { return settled(p, now_ns); });
}

std::vector<uint32_t> Correlator::open_children() const {
  std::vector<uint32_t> out;
  for (const auto& [child, p] : episodes_)
    if (p.have_fork && !p.have_final) out.push_back(child);
  return out;
}

bool Correlator::forget(uint32_t child_pid) {
  const auto it = episodes_.find(child_pid);
  if (it == episodes_.end() || it->second.have_final) return false;
  episodes_.erase(it);
  trim_history();
  return true;
}

std::vector<ForkEpisode> Correlator::take_remaining(bool include_alive) {
  return take_if([include_alive](const Partial& p) { return include_alive || (p.have_final && p.ep.exit_ts_ns); });
}

ForkEpisode episode_from_kernel(const thptrace_episode& ep) {
  ForkEpisode f;
  f.parent_tgid = ep.parent_tgid;
  f.child_pid = ep.child_pid;
  f.reason = reason_from_kernel(ep.reason);
  f.reason_source = f.reason == Reason::unknown ? "none" : "uprobe";
  f.fork_ts_ns = ep.fork_ts_ns;
  f.exit_ts_ns = ep.exit_ts_ns;
  if (ep.clone_end_ns > ep.clone_start_ns && ep.clone_start_ns)
    f.clone_syscall_us = static_cast<double>(ep.clone_end_ns - ep.clone_start_ns) / 1e3;
  // libc's fork() is what the application (and Redis's latest_fork_usec) sees; the syscall alone
  // leaves out the atfork handlers.
  f.fork_duration_us = ep.libc_fork_ns ? std::optional<double>(static_cast<double>(ep.libc_fork_ns) / 1e3)
                                       : f.clone_syscall_us;
  if (ep.exit_ts_ns > ep.fork_ts_ns) f.child_lifetime_ms = static_cast<double>(ep.exit_ts_ns - ep.fork_ts_ns) / 1e6;
  f.cow_faults = ep.faults.cow;
  f.child_cow_faults = ep.child_cow_faults;
  if (ep.exit_ts_ns) f.child_io = ForkEpisode::ChildIo{ep.child_wchar, ep.child_write_bytes};
  // Recorded before the kernel read them: no clocks (a child that ran at all ran some ns).
  if (ep.exit_ts_ns && ep.child_cpu_ns)
    f.child_cpu = ForkEpisode::ChildCpu{static_cast<double>(ep.child_cpu_ns) / 1e6,
                                        static_cast<double>(ep.child_runqueue_ns) / 1e6};
  f.huge_cow_faults = ep.faults.huge_cow;
  f.thp_splits = ep.faults.thp_splits;
  f.huge_allocs = ep.huge_allocs;
  if (ep.faults.ns_count) {
    f.fault_avg_ns = static_cast<double>(ep.faults.ns_total) / static_cast<double>(ep.faults.ns_count);
    f.fault_latency_log2.assign(std::begin(ep.faults.lat), std::end(ep.faults.lat));
    f.copy_stall_ms = static_cast<double>(ep.faults.ns_total) / 1e6;
    f.copy_stall_source = "kernel";
  }
  f.compaction_stalls = ep.compaction_stalls;
  f.reclaim_stalls = ep.reclaim_stalls;
  f.compaction_ms = static_cast<double>(ep.compaction_ns) / 1e6;
  f.reclaim_ms = static_cast<double>(ep.reclaim_ns) / 1e6;
  return f;
}
Reason reason_from_redis(const std::vector<redis::Snapshot>& timeline, uint64_t fork_ts, uint64_t exit_ts,
                         const std::string& repl_diskless_sync) {
  // The snapshot before the fork and those taken while the child lived (plus one after, since a
  // short child can live between two polls and leave only its counters behind).
  const redis::Snapshot* before = nullptr;
  const redis::Snapshot* after = nullptr;
  bool during = false;
  bool aof = false, rdb = false, replica_waiting = false, diskless = repl_diskless_sync == "yes";
  for (const auto& s : timeline) {
    if (!s.up) continue;
    if (s.ts_ns <= fork_ts) {  // answered before the fork: shows the state before it
      before = &s;
      continue;
    }
    if (exit_ts && (s.sent_ns ? s.sent_ns : s.ts_ns) > exit_ts) {  // asked after the exit
      if (!after) after = &s;
      continue;
    }
    during = true;
    // The setting in force when the child ran decides (it can change at run time).
    if (!s.repl_diskless_sync.empty()) diskless = s.repl_diskless_sync == "yes";
    aof = aof || s.aof_rewrite_in_progress;
    rdb = rdb || s.rdb_bgsave_in_progress;
    replica_waiting = replica_waiting || s.replica_waiting_bgsave;
    after = &s;
  }
  if (!before && !after) return Reason::unknown;
  // A child that lived between two polls left no poll of its own. When exactly one fork happened
  // between the polls around it, the counters of started saves and rewrites (Redis ≥ 7.0) that moved
  // are this child's, and so is the state the first poll after its exit shows while Redis has not
  // reaped it yet.
  if (before && after && after->total_forks == before->total_forks + 1) {
    aof = aof || after->aof_rewrites > before->aof_rewrites;
    rdb = rdb || after->rdb_saves > before->rdb_saves;
    if (!during) {
      aof = aof || after->aof_rewrite_in_progress;
      rdb = rdb || after->rdb_bgsave_in_progress;
      if (!after->repl_diskless_sync.empty()) diskless = after->repl_diskless_sync == "yes";
    }
  }
  if (aof) return Reason::aof_rewrite;
  const bool full_sync = (before && after && after->sync_full > before->sync_full) || replica_waiting ||
                         (before && before->replica_waiting_bgsave);
  if (full_sync) return diskless ? Reason::full_sync_diskless : Reason::full_sync_disk;
  if (rdb) return Reason::bgsave;
  if (before && after && after->total_forks > before->total_forks) return Reason::bgsave;
  return Reason::unknown;
}

std::optional<LatencyWindow> latency_between(const std::vector<redis::Snapshot>& timeline, uint64_t from_ns,
                                             uint64_t to_ns) {
  const redis::Snapshot* a = nullptr;
  const redis::Snapshot* b = nullptr;
  for (const auto& s : timeline) {
    if (!s.up || !s.latency) continue;
    // Before the first poll, the window starts at the first snapshot: shorter, never wrong.
    if (s.ts_ns <= from_ns || (!a && s.ts_ns < to_ns)) a = &s;
    if (s.ts_ns >= to_ns && !b) b = &s;
  }
  if (!a || !b || a == b) return std::nullopt;
  const auto d = b->latency->minus(*a->latency);
  if (d.total() == 0) return std::nullopt;
  LatencyWindow w;
  w.calls = d.total();
  w.p50_us = d.quantile_us(0.5).value_or(0);
  w.p99_us = d.quantile_us(0.99).value_or(0);
  w.p999_us = d.quantile_us(0.999).value_or(0);
  w.max_us = d.quantile_us(1.0).value_or(0);
  return w;
}

Totals totals_from_kernel(const thptrace_target& t, uint64_t dropped) {
  Totals s;
  s.cow_faults = t.faults.cow;
  s.child_cow_faults = t.child_cow_faults;
  s.thp_splits = t.faults.thp_splits;
  s.thp_collapses = t.thp_collapses;
  s.khugepaged_scans = t.khugepaged_scans;
  s.huge_allocs = t.huge_allocs;
  s.compaction_stalls = t.compaction_stalls;
  s.reclaim_stalls = t.reclaim_stalls;
  s.compaction_ms = static_cast<double>(t.compaction_ns) / 1e6;
  s.reclaim_ms = static_cast<double>(t.reclaim_ns) / 1e6;
  s.untracked_forks = t.untracked_forks;
  s.dropped_events = dropped;
  return s;
}

}  // namespace thptrace::correlate
