// SPDX-License-Identifier: Apache-2.0
// The daemon's kernel maps, kept truthful after months of forks, restarts and lost ring-buffer
// records, and the kernel side of each target. Apart from daemon.cpp so that the event and Redis
// logic there stays readable.
//
// - The episodes map (one entry per fork child) must hold live children only. An exit record lost
//   to a full ring buffer leaves its episode there, closed; the map has room for a few hundred, and
//   once full every new fork goes untracked. Each reaping collects closed episodes (they are
//   complete and get exported as if their record had come) and drops those of dead children.
// - The targets map holds max_targets processes. More Redis processes than that is a condition to
//   count, log and export, not an exit: the extra ones are retried as slots free up.
// - The BPF programs' own cost (run count, run time) is exported per program, as ebpf_exporter
//   does, when kernel.bpf_stats_enabled is on.
#include <chrono>

#include "common/log.h"
#include "daemon/daemon.h"
#include "proc/proc.h"

namespace thptrace::daemon {
namespace {

constexpr auto kReapEvery = std::chrono::seconds(5);

bool bpf_stats_enabled() {
  const auto v = proc::read_file("/proc/sys/kernel/bpf_stats_enabled", 16);
  return v && !v->empty() && (*v)[0] == '1';
}

}  // namespace

bool Daemon::trace_pid(Target& t) {
  const tracer::Followed followed = tracer_->follow(t.pid, true);
  if (!followed.watched) {
    metrics_.set_untraced(t.who.label, true);
    if (!t.untraced) {
      // Once per process, not once per retry.
      log::warn("{}: pid {} is not traced: {}; it is retried as watched processes exit (raise --max-targets)",
                t.who.label, t.pid, followed.why);
      metrics_.add_watch_failure();
      t.untraced = true;
    }
    return false;
  }
  if (t.untraced) log::warn("{}: pid {} is traced now", t.who.label, t.pid);
  t.untraced = false;
  metrics_.set_untraced(t.who.label, false);
  if (modes_.redis.mode == tracer::Mode::uprobe && followed.redis.mode != tracer::Mode::uprobe)
    log::warn("{}: {}; fork reasons come from INFO", t.who.label, followed.redis.why);
  if (!followed.libc_fork) log::debug("{}: {}", t.who.label, followed.fork_timing);
  return true;
}

void Daemon::reap_kernel_maps() {
  kernel_maps_.next_reap = std::chrono::steady_clock::now() + kReapEvery;

  const auto reaped = tracer_->reap_episodes();
  for (const auto& ep : reaped.lost_exits)
    if (Target* t = target_of(static_cast<pid_t>(ep.parent_tgid))) {
      exporter_->on_lost_exit(t->who.id, ep);
      pace_poller(*t);
    }
  if (!reaped.lost_exits.empty() || reaped.dead)
    log::debug("reaped {} episodes whose exit record was lost and {} of dead children", reaped.lost_exits.size(),
               reaped.dead);
  metrics_.add_reaped(reaped.lost_exits.size(), reaped.dead);

  // A fork whose child is gone without an exit record (it died unseen, or the episodes map had no
  // room for it) would otherwise stay open for an hour, pinning its target's INFO history. The exit
  // tracepoint fires before /proc/PID goes, so with the ring buffer drained first a child that is
  // gone had its exit record taken already, if it ever had one (one exiting between the drain and
  // the check still comes: its record alone makes the episode).
  tracer_->poll(0, [this](const thptrace_event& e) { on_event(e); });
  exporter_->forget_gone([](uint32_t child) { return proc::process_exists(static_cast<pid_t>(child)); });

  for (auto& t : targets_)
    if (t->pid && t->untraced && proc::process_exists(t->pid)) trace_pid(*t);

  metrics_.set_map_entries("episodes", tracer_->episode_count(), options_.max_episodes);
  metrics_.set_map_entries("targets", tracer_->target_count(), options_.max_targets);

  metrics_.set_anon_folios(proc::read_folio_counters());

  const bool stats = bpf_stats_enabled();
  metrics_.set_bpf_stats_enabled(stats);
  for (const auto& p : tracer_->program_stats()) {
    auto& last = kernel_maps_.program_cost[p.name];
    // Counters only grow while the program is loaded; a smaller value cannot happen, but would
    // not be exported as a negative increment.
    metrics_.add_program_cost(p.name, p.run_cnt >= last.first ? p.run_cnt - last.first : 0,
                              p.run_time_ns >= last.second ? p.run_time_ns - last.second : 0);
    last = {p.run_cnt, p.run_time_ns};
  }
}

}  // namespace thptrace::daemon
