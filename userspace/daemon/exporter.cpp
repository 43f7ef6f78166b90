// SPDX-License-Identifier: Apache-2.0
#include "daemon/exporter.h"

#include <time.h>

#include <algorithm>

#include "common/units.h"
#include "report/inputs.h"

namespace thptrace::daemon {

Exporter::Exporter(Metrics& metrics, const tracer::AttachModes& modes)
    : metrics_(metrics), modes_(modes), kernel_splits_(modes.cow_fault.mode == tracer::Mode::fentry) {
  metrics_.set_probe_modes(modes);
  timespec mono{}, real{};
  ::clock_gettime(CLOCK_MONOTONIC, &mono);
  ::clock_gettime(CLOCK_REALTIME, &real);
  realtime_offset_ns_ =
      (static_cast<int64_t>(real.tv_sec) - mono.tv_sec) * 1'000'000'000 + (real.tv_nsec - mono.tv_nsec);
}

void Exporter::record_to(const std::string& record_path) {
  record_ = std::make_unique<std::ofstream>(record_path);
  nlohmann::ordered_json probes;
  for (const auto& f : tracer::kFamilies) probes[f.name] = report::choice_json(modes_.at(f.family));
  record({{"probes", probes}, {"realtime_offset_ns", realtime_offset_ns_}});
}

void Exporter::record(const nlohmann::ordered_json& step) {
  if (record_)
    *record_ << step.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n" << std::flush;
}

Exporter::TargetId Exporter::add_target(const std::string& label, bool redis_polled) {
  metrics_.add_target(label);
  record({{"add_target", label}, {"watched", redis_polled}});
  // The INFO history kept for naming reasons reaches back only to the oldest fork not yet exported.
  const TargetId id = next_id_++;
  targets_.emplace(id, Target{label,
                              correlate::Correlator(0, {.kernel_splits = kernel_splits_,
                                                        .redis_polled = redis_polled,
                                                        .repl_diskless_sync = {},
                                                        .bounded_history = true}),
                              {}});
  return id;
}

void Exporter::remove_target(TargetId id) {
  const auto it = targets_.find(id);
  if (it == targets_.end()) return;
  record({{"remove_target", it->second.label}});
  metrics_.remove_target(it->second.label);
  targets_.erase(it);
}

void Exporter::follow(TargetId id, pid_t pid, const proc::ContainerNames& names) {
  Target& t = targets_.at(id);
  record({{"follow", t.label}, {"pid", pid}, {"container", proc::container_json(names)}});
  if (pid) metrics_.set_names(t.label, names);
  t.correlator.retarget(static_cast<uint32_t>(pid));
  t.last = {};  // a new process's counters start at zero
  t.copies = t.reuse = 0;
  t.main_thread.reset();
}

void Exporter::on_event(TargetId id, const thptrace_event& e) {
  Target& t = targets_.at(id);
  record({{"event", report::event_json(e)}, {"target", t.label}});
  t.correlator.on_event(e);
  switch (e.type) {
    case EV_FORK:
      metrics_.on_fork_started(t.label);
      if (t.fork_windows.size() < kMaxForkWindows) t.fork_windows[e.child_pid] = {e.ts_ns, correlate::Window::kOpen};
      break;
    case EV_CHILD_EXIT:
      if (const auto it = t.fork_windows.find(e.child_pid); it != t.fork_windows.end()) it->second.to_ns = e.ts_ns;
      break;
    case EV_STALL:
      metrics_.on_stall(t.label, e.value == STALL_COMPACTION, static_cast<double>(e.ts_ns - e.start_ns) / 1e9);
      break;
    case EV_DISK: {
      if (e.ts_ns < e.start_ns) break;
      if (e.value == DISK_WRITE) {
        metrics_.observe_aof_write(t.label, t.in_fork_window(e.ts_ns), static_cast<double>(e.ts_ns - e.start_ns) / 1e9);
        break;
      }
      metrics_.observe_fsync(t.label, correlate::thread_kind_name(e.value2), t.in_fork_window(e.ts_ns),
                             static_cast<double>(e.ts_ns - e.start_ns) / 1e9);
      break;
    }
    default: break;
  }
}

void Exporter::on_lost_exit(TargetId id, const thptrace_episode& ep) {
  thptrace_event e{};
  e.type = EV_CHILD_EXIT;
  e.tgid = ep.parent_tgid;
  e.pid = ep.child_pid;
  e.child_pid = ep.child_pid;
  e.ts_ns = ep.exit_ts_ns;
  e.episode = ep;
  on_event(id, e);
}

void Exporter::on_snapshot(TargetId id, const redis::Snapshot& s) {
  Target& t = targets_.at(id);
  record({{"snapshot", report::snapshot_json(s)}, {"target", t.label}});
  metrics_.set_redis(t.label, s);
  t.correlator.on_snapshot(s);
  if (s.up) {
    // The stream's rate over the last minute of polls (a restarted server starts its offset again).
    constexpr uint64_t kRateWindowNs = 60'000'000'000;
    if (!t.history.repl_offsets.empty() && s.master_repl_offset < t.history.repl_offsets.back().second)
      t.history.repl_offsets.clear();
    t.history.repl_offsets.emplace_back(s.ts_ns, s.master_repl_offset);
    while (t.history.repl_offsets.size() > 2 && t.history.repl_offsets.front().first + kRateWindowNs < s.ts_ns)
      t.history.repl_offsets.pop_front();
    t.history.replicas = s.replicas.size();
  }
}

void Exporter::on_readings(const Readings& h) {
  if (record_) record_readings(h);
  metrics_.set_thp_mode(h.system.thp_enabled, h.system.thp_defrag);
  for (const auto& r : h.targets) {
    Target& t = targets_.at(r.target);
    if (r.counters) export_counters(t, *r.counters);
    export_main_thread(t, r.sample.main_thread, h.now_ns);
    if (r.sample.target_alive) {
      metrics_.set_memory(t.label, r.sample.rss_kb * 1024, r.sample.anon_huge_pages_kb * 1024, r.sample.thp_enabled);
      metrics_.set_cgroup_memory(t.label, r.sample.cgroup_usage_bytes, r.sample.cgroup_limit_bytes);
      t.history.memory = {true, r.sample.rss_kb * 1024, r.sample.cgroup_usage_bytes, r.sample.cgroup_limit_bytes,
                          r.sample.mem_available_bytes};
      update_forecast(t);
    }
  }
  // /proc/vmstat is the system's: every target's fork windows are measured against it.
  if (h.thp_split_pmd) {
    proc::Sample s;
    s.ts_ns = h.now_ns;
    s.thp_vmstat["thp_split_pmd"] = *h.thp_split_pmd;
    for (auto& [id, t] : targets_) t.correlator.on_sample(s);
  }
  if (h.dropped > last_dropped_) metrics_.add_dropped(h.dropped - last_dropped_);
  last_dropped_ = h.dropped;
}

void Exporter::record_readings(const Readings& h) {
  nlohmann::ordered_json step = {
      {"housekeeping", h.now_ns}, {"thp_enabled", h.system.thp_enabled}, {"thp_defrag", h.system.thp_defrag}};
  if (h.thp_split_pmd) step["thp_split_pmd"] = *h.thp_split_pmd;
  step["targets"] = nlohmann::ordered_json::array();
  for (const auto& r : h.targets) {
    nlohmann::ordered_json ts = {{"target", targets_.at(r.target).label}};
    if (r.counters) ts["counters"] = report::target_json(*r.counters);
    const auto& s = r.sample;
    ts["sample"] = {
        {"target_alive", s.target_alive},
        {"rss_kb", s.rss_kb},
        {"anon_huge_pages_kb", s.anon_huge_pages_kb},
        {"thp_enabled", s.thp_enabled ? nlohmann::ordered_json(*s.thp_enabled) : nlohmann::ordered_json(nullptr)}};
    if (s.cgroup_usage_bytes) ts["sample"]["cgroup_usage_bytes"] = *s.cgroup_usage_bytes;
    if (s.cgroup_limit_bytes) ts["sample"]["cgroup_limit_bytes"] = *s.cgroup_limit_bytes;
    if (s.mem_available_bytes) ts["sample"]["mem_available_bytes"] = *s.mem_available_bytes;
    if (s.main_thread) ts["sample"]["main_thread"] = report::sched_stat_json(s.main_thread);
    step["targets"].push_back(std::move(ts));
  }
  step["dropped"] = h.dropped;
  record(step);
}

void Exporter::export_counters(Target& t, const thptrace_target& k) {
  metrics_.add_cow_faults(t.label, k.faults.cow - t.last.faults.cow, k.child_cow_faults - t.last.child_cow_faults);
  // Fallback modes: a fork's splits are counted when its episode is exported (export_episode).
  const uint64_t splits = kernel_splits_ ? k.faults.thp_splits - t.last.faults.thp_splits : 0;
  metrics_.add_thp(t.label, splits, k.thp_collapses - t.last.thp_collapses);
  metrics_.add_untracked_forks(t.label, k.untracked_forks - t.last.untracked_forks);
  if (modes_.sched.mode != tracer::Mode::unavailable) {
    const auto& now = k.main_wait;
    const auto& was = t.last.main_wait;
    metrics_.add_main_thread_cpu_wait(t.label, {now.child_ns - was.child_ns, now.threads_ns - was.threads_ns,
                                                now.others_ns - was.others_ns, now.idle_ns - was.idle_ns});
  }
  t.last = k;
  // With every fork exported, the faults that are not its copies are reuse: pages written after the
  // child's exit (or before any fork) that the kernel took over without copying. Counted only then,
  // so a fork's copies are never reuse while it lives.
  if (t.correlator.untaken() == 0 && k.faults.cow > t.copies + t.reuse) {
    metrics_.add_reuse_faults(t.label, k.faults.cow - t.copies - t.reuse);
    t.reuse = k.faults.cow - t.copies;
  }
}

void Exporter::export_main_thread(Target& t, const std::optional<proc::SchedStat>& now, uint64_t now_ns) {
  // The main thread's time since the last reading, split between the phases by how much of the
  // interval the fork windows cover (the clocks say how much, not when: within an interval it is
  // taken as even).
  const auto grown = now && t.main_thread ? proc::sched_growth(*t.main_thread, *now) : std::nullopt;
  if (grown && now_ns > t.main_thread_ns) {
    const double fork = t.fork_share(t.main_thread_ns, now_ns);
    const auto on = static_cast<double>(grown->on_cpu_ns);
    const auto wait = static_cast<double>(grown->runqueue_ns);
    metrics_.add_main_thread(t.label, true, on * fork, wait * fork);
    metrics_.add_main_thread(t.label, false, on * (1 - fork), wait * (1 - fork));
  }
  t.main_thread = now;
  t.main_thread_ns = now_ns;
}

void Exporter::forget_gone(const std::function<bool(uint32_t)>& alive) {
  for (auto& [id, t] : targets_)
    for (const uint32_t child : t.correlator.open_children())
      if (!alive(child)) forget(id, child);
}

void Exporter::forget(TargetId id, uint32_t child_pid) {
  Target& t = targets_.at(id);
  record({{"forget", t.label}, {"child_pid", child_pid}});
  if (t.correlator.forget(child_pid)) metrics_.on_fork_lost(t.label);
  t.fork_windows.erase(child_pid);
}

void Exporter::on_probe_samples(TargetId id, const std::vector<redis::ProbeSample>& samples) {
  Target& t = targets_.at(id);
  if (record_ && !samples.empty()) {
    auto rows = nlohmann::ordered_json::array();
    for (const auto& x : samples) rows.push_back(report::probe_sample_json(x));
    record({{"probe", t.label}, {"samples", std::move(rows)}});
  }
  uint64_t newest = 0;
  for (const auto& x : samples) {
    const uint64_t done = x.done_ns();
    newest = std::max(newest, done);
    metrics_.observe_client_latency(t.label, t.in_fork_window(done), static_cast<double>(x.latency_ns) / 1e9);
  }
  std::erase_if(t.fork_windows, [newest](const auto& kv) {
    return kv.second.to_ns != correlate::Window::kOpen && kv.second.to_ns + kForkWindowKeepNs < newest;
  });
}

void Exporter::export_episode(Target& t, const correlate::ForkEpisode& e) {
  metrics_.on_episode(t.label, e, static_cast<double>(static_cast<int64_t>(e.fork_ts_ns) + realtime_offset_ns_) / 1e9);
  t.copies += e.cow_faults;
  if (!kernel_splits_) metrics_.add_thp(t.label, e.thp_splits, 0);
  if (e.fork_duration_us && e.child_lifetime_ms) {
    // The RSS as the fork settles (its child gone): what a later forecast scales its figures by.
    const forecast::Inputs::Traced f{*e.fork_duration_us, *e.child_lifetime_ms / 1e3,
                                     (e.cow_faults + e.child_cow_faults) * kPageBytes,
                                     t.history.memory.known ? t.history.memory.rss_bytes : 0};
    t.history.traced[e.reason] = f;
    t.history.last_traced = f;
    update_forecast(t);
  }
}

void Exporter::update_forecast(Target& t) {
  if (!t.history.last_traced || !t.history.memory.known) return;
  forecast::Inputs in;
  in.rss_bytes = in.anon_bytes = t.history.memory.rss_bytes;
  in.server_answered = !t.history.repl_offsets.empty();
  in.cgroup_limit_bytes = t.history.memory.cgroup_limit_bytes;
  in.cgroup_usage_bytes = t.history.memory.cgroup_usage_bytes;
  in.mem_available_bytes = t.history.memory.mem_available_bytes;
  if (t.history.repl_offsets.size() >= 2) {
    const auto& [from_ns, from] = t.history.repl_offsets.front();
    const auto& [to_ns, to] = t.history.repl_offsets.back();
    if (to_ns > from_ns)
      in.repl_bytes_per_s = static_cast<double>(to - from) / (static_cast<double>(to_ns - from_ns) / 1e9);
    in.repl_rate_basis = "master_repl_offset";
  }
  in.replicas = static_cast<unsigned>(std::max<size_t>(1, t.history.replicas));
  in.traced = t.history.last_traced;
  metrics_.set_forecast_freeze(t.label, forecast::predict(in, correlate::Reason::bgsave).fork_freeze_ms.value);
  for (const auto reason :
       {correlate::Reason::bgsave, correlate::Reason::full_sync_disk, correlate::Reason::full_sync_diskless}) {
    // The last fork of the same reason; a fork of another reason's child writes the same RDB.
    const auto it = t.history.traced.find(reason);
    in.traced = it != t.history.traced.end() ? it->second : *t.history.last_traced;
    metrics_.set_forecast(t.label, forecast::predict(in, reason));
  }
}

void Exporter::export_replica_syncs(Target& t) {
  // A full sync within this long of the same replica's last one is the loop going round.
  constexpr uint64_t kLoopWindowNs = 3600ull * 1'000'000'000;
  for (const auto& s : t.correlator.take_finished_replica_syncs()) {
    // A partial resync puts the replica online at once, without a fork: not a full sync.
    const bool full = s.child_pid != 0 || s.states.front().state != "online";
    if (!full) continue;
    const auto it = t.dropped_at.find(s.address);
    const bool repeat = it != t.dropped_at.end() && s.first_seen_ns <= it->second + kLoopWindowNs;
    metrics_.on_replica_sync(t.label, s, repeat);
    t.dropped_at[s.address] = s.last_seen_ns;
    std::erase_if(t.dropped_at, [&](const auto& kv) { return kv.second + kLoopWindowNs < s.last_seen_ns; });
  }
}

void Exporter::export_settled(uint64_t now_ns) {
  for (auto& [id, t] : targets_) {
    for (const auto& e : t.correlator.take_settled(now_ns)) {
      record({{"settled", now_ns}, {"target", t.label}, {"child_pid", e.child_pid}});
      export_episode(t, e);
    }
    export_replica_syncs(t);
  }
}

void Exporter::export_remaining() {
  record({{"end", true}});
  for (auto& [id, t] : targets_) {
    for (const auto& e : t.correlator.take_remaining(false)) export_episode(t, e);
    export_replica_syncs(t);
  }
}

}  // namespace thptrace::daemon
