// SPDX-License-Identifier: Apache-2.0
// The text report a person reads: the capture's summary, a row per fork (the worst and the latest
// when there are many) with its replicas and what the clients felt, and the findings.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>

#include "common/text.h"
#include "common/units.h"
#include "report/copies.h"
#include "report/report.h"

namespace thptrace::report {
namespace {

std::string fmt_opt(const std::optional<double>& v, const char* spec) {
  return v ? fmt::format(fmt::runtime(spec), *v) : std::string("-");
}

// One replica's sync under its fork's row: how it got the fork, each state with the time since its
// request, and how it ended.
std::string replica_line(const correlate::ReplicaSync& s) {
  std::string how;
  switch (s.joined) {
    case correlate::ReplicaSync::Joined::rode: how = "rode a fork in progress"; break;
    case correlate::ReplicaSync::Joined::started: how = "its request started the fork"; break;
    case correlate::ReplicaSync::Joined::waited:
      how = fmt::format("waited {:.0f} ms for the fork", s.wait_ms.value_or(0));
      break;
    case correlate::ReplicaSync::Joined::unknown: how = "requested before the capture"; break;
  }
  std::string states;
  if (s.outcome == correlate::ReplicaSync::Outcome::online && !s.sync_ms()) {
    states = "online, synced between two polls";
  } else {
    for (const auto& x : s.states)
      states += fmt::format("{}{} +{:.0f} ms", states.empty() ? "" : ", ", x.state,
                            static_cast<double>(x.first_seen_ns - s.first_seen_ns) / 1e6);
  }
  std::string end;
  if (s.outcome == correlate::ReplicaSync::Outcome::dropped)
    end = fmt::format("; dropped after {:.0f} ms", static_cast<double>(s.last_seen_ns - s.first_seen_ns) / 1e6);
  else if (s.outcome == correlate::ReplicaSync::Outcome::syncing)
    end = "; still syncing at the end";
  return fmt::format("           replica {} ({}): {}{}; offset {}", s.address, how, states, end, s.offset);
}

// A fork's row, continued: how long the parent was stopped, by cause.
std::string stall_line(const correlate::ForkEpisode& e, const std::optional<double>& copy_cost_ns) {
  std::string copies = "copies unknown";
  if (e.copy_stall_ms && e.copy_stall_source == "estimate" && copy_cost_ns)
    copies = fmt::format("copies ~{:.1f} ms (estimated: {} at {:.0f} ns, a copy's cost measured here)",
                         *e.copy_stall_ms, e.cow_faults, *copy_cost_ns);
  else if (e.copy_stall_ms)
    copies = fmt::format("copies {:.1f} ms", *e.copy_stall_ms);
  return fmt::format("           stalled: fork {}, {}, compaction {:.1f} ms, reclaim {:.1f} ms",
                     e.fork_duration_us ? fmt::format("{:.1f} ms", *e.fork_duration_us / 1e3) : std::string("unknown"),
                     copies, e.compaction_ms, e.reclaim_ms);
}

// A fork's row, continued: what the latency probe's requests felt during it and before it.
// The fork's fsyncs by thread kind, during against before: "fsync main 812 × p99 3.1 ms (before 790
// × 0.4 ms), bio_aof ...".
std::string main_thread_line(const correlate::ThreadTime& d, const std::optional<correlate::ThreadTime>& b) {
  std::string out = fmt::format(
      "           main thread: on a CPU {:.1f} ms, waiting for a CPU {:.1f} ms, off CPU {:.1f} ms of {:.1f} ms",
      d.on_cpu_ms, d.runqueue_ms, d.off_cpu_ms, d.span_ms);
  if (b)
    out += fmt::format(" (before: {:.1f}, {:.1f}, {:.1f} of {:.1f} ms)", b->on_cpu_ms, b->runqueue_ms, b->off_cpu_ms,
                       b->span_ms);
  return out;
}

// What held the main thread's CPU while it waited for it, over the child's life (the sched family).
std::string main_wait_line(const correlate::ForkEpisode::CpuWait& w) {
  return fmt::format(
      "           it waited {:.1f} ms behind: its fork child {:.1f} ms, its own threads {:.1f} ms, other processes "
      "{:.1f} ms, an idle CPU waking {:.1f} ms",
      w.total_ms(), w.child_ms, w.threads_ms, w.others_ms, w.idle_ms);
}

std::string fsync_line(const correlate::FsyncWindow& d, const std::optional<correlate::FsyncWindow>& b) {
  using K = std::optional<correlate::FsyncLatency> correlate::FsyncWindow::*;
  const std::array<std::pair<const char*, K>, 3> kinds = {{{"main", &correlate::FsyncWindow::main},
                                                           {"bio_aof", &correlate::FsyncWindow::bio_aof},
                                                           {"other", &correlate::FsyncWindow::other}}};
  std::string out;
  for (const auto& [name, k] : kinds) {
    const auto& x = d.*k;
    if (!x) continue;
    out += fmt::format("{}{} {} × p50 {:.2f} p99 {:.2f} max {:.2f} ms", out.empty() ? "" : "; ", name, x->count,
                       x->p50_us / 1e3, x->p99_us / 1e3, x->max_us / 1e3);
    if (b && (*b).*k)
      out += fmt::format(" (before {} × p99 {:.2f} ms)", ((*b).*k)->count, ((*b).*k)->p99_us / 1e3);
    else if (b)
      out += " (none before)";
  }
  if (out.empty())
    out = fmt::format("none by the process while the child lived ({} in the window before)", b ? b->count() : 0);
  if (d.aof_write) {
    out +=
        fmt::format("; event loop in file writes {} × {:.1f} ms in all, p99 {:.2f} max {:.2f} ms", d.aof_write->count,
                    d.aof_write->blocked_ms, d.aof_write->p99_us / 1e3, d.aof_write->max_us / 1e3);
    if (b && b->aof_write)
      out += fmt::format(" (before {} × {:.1f} ms)", b->aof_write->count, b->aof_write->blocked_ms);
  }
  return "           fsync: " + out;
}

// What the child wrote: "child wrote 812.0 MiB at 95.3 MiB/s, 812.0 MiB toward the disk".
std::string child_io_line(const correlate::ForkEpisode& e) {
  const auto mib = [](uint64_t b) { return static_cast<double>(b) / (1 << 20); };
  const auto& io = *e.child_io;
  std::string rate;
  if (e.child_lifetime_ms && *e.child_lifetime_ms > 0)
    rate = fmt::format(" at {:.1f} MiB/s", mib(io.written_bytes) / (*e.child_lifetime_ms / 1e3));
  return fmt::format("           child wrote: {:.1f} MiB{}, {:.1f} MiB of it toward the disk", mib(io.written_bytes),
                     rate, mib(io.storage_bytes));
}

// The host's folio counters that changed over the fork's window, by size: "folios (host): 64 KiB
// nr_anon -256 (-16.0 MiB), split_deferred +1" (the folios the parent's writes replaced by 4 KiB
// pages are freed with the child).
std::string folio_line(const std::map<uint32_t, std::map<std::string, int64_t>>& sizes) {
  std::string out;
  for (const auto& [kb, counters] : sizes) {
    std::string parts;
    for (const auto& [name, delta] : counters) {
      parts += fmt::format("{}{} {:+}", parts.empty() ? "" : ", ", name, delta);
      if (name == "nr_anon")
        parts += fmt::format(" ({:+.1f} MiB)", static_cast<double>(delta) * static_cast<double>(kb) / 1024);
    }
    out += fmt::format("{}{} {}", out.empty() ? "" : "; ", folio_size_name(kb), parts);
  }
  return "           folios (host): " + out;
}

std::string client_latency_line(const redis::ClientLatency& d, const std::optional<redis::ClientLatency>& b,
                                uint64_t timeout_us) {
  const auto figures = [timeout_us](const redis::ClientLatency& c) {
    return fmt::format("max {:.2f} ms, p99.9 {:.2f} ms, p50 {:.0f} µs, {} of {} over {} µs", c.max_us / 1e3,
                       c.p999_us / 1e3, c.p50_us, c.over_timeout, c.samples, timeout_us);
  };
  return fmt::format("           clients felt: {} during; {}", figures(d),
                     b ? figures(*b) + " before" : std::string("nothing measured before"));
}

using Line = std::function<void(const std::string&)>;

// The target's memory by folio size at the start and at the end, or why it was not read.
void folio_lines(const Report& r, const Line& line) {
  const auto walk = [](const proc::FolioShares& s) {
    const std::string shares = folio_shares_text(s);
    return (shares.empty() ? std::string("no anonymous memory") : shares) +
           (s.every > 1 ? fmt::format(", 1 page in {} looked up", s.every) : std::string());
  };
  if (r.anon_folios_start) line("anonymous memory by folio size, start: " + walk(*r.anon_folios_start));
  if (r.anon_folios_end) line("anonymous memory by folio size, end: " + walk(*r.anon_folios_end));
  if (!r.anon_folios_start && !r.anon_folios_why.empty())
    line("anonymous memory by folio size: not read (" + r.anon_folios_why + ")");
}

// Who was captured, where and how: the host, the kernel's THP modes, the attach modes.
void capture_lines(const Report& r, const Line& line) {
  line(fmt::format("thptrace {} — capture of pid {} ({}) for {:.1f} s", r.version, r.pid, r.comm, r.duration_s));
  if (!r.container.id.empty())
    line(fmt::format("container {}{}{}", r.container.id.substr(0, 12),
                     r.container.pod.empty() ? "" : fmt::format(", pod {}/{}", r.container.ns, r.container.pod),
                     r.container.container.empty() ? "" : fmt::format(", container {}", r.container.container)));
  if (r.start_realtime_ns)
    line(fmt::format("host {}, from {} to {}", r.hostname.empty() ? "?" : r.hostname, rfc3339_utc(r.start_realtime_ns),
                     rfc3339_utc(r.end_realtime_ns)));
  line(fmt::format("kernel {}  THP enabled={} defrag={}  process THP_enabled={}", r.system.kernel_release,
                   r.system.thp_enabled, r.system.thp_defrag,
                   r.thp_enabled_for_process ? (*r.thp_enabled_for_process ? "1" : "0") : "n/a"));
  if (!r.system.folio_modes.empty()) {
    std::string sizes;
    for (const auto& [kb, mode] : r.system.folio_modes)
      sizes += fmt::format("{}{}K {}", sizes.empty() ? "" : ", ", kb, text::printable(mode));
    line("anonymous folio sizes: " + sizes);
  }
  line(fmt::format("AnonHugePages start/max/end: {}/{}/{} kB   RSS max: {} kB", r.anon_huge_pages_kb_start,
                   r.anon_huge_pages_kb_max, r.anon_huge_pages_kb_end, r.rss_kb_max));
  folio_lines(r, line);
  // kernel_copies has a line of its own when it is not counted.
  std::string probes;
  for (const auto& f : tracer::kFamilies)
    if (f.family != tracer::Family::kernel_copies)
      probes +=
          fmt::format("{}{}={}", probes.empty() ? "" : " ", f.name, tracer::mode_name(r.probes.at(f.family).mode));
  line(fmt::format("probes: {}{}", probes, r.probes.forced_fallback ? " (fallback forced)" : ""));
  if (r.probes.redis.mode == tracer::Mode::uprobe || r.probes.redis.mode == tracer::Mode::info_polling)
    line(fmt::format("redis fork reasons: {}", r.probes.redis.why));
  if (r.probes.kernel_copies.mode == tracer::Mode::unavailable)
    line(fmt::format("kernel-made copies: not counted ({})", r.probes.kernel_copies.why));
  if (r.probes.disk.mode == tracer::Mode::unavailable && !r.probes.disk.why.empty())
    line(fmt::format("fsyncs and AOF writes: not traced ({})", r.probes.disk.why));
  if (r.huge_alloc.mode == tracer::Mode::unavailable)
    line(fmt::format("huge page allocations: not counted ({})", r.huge_alloc.why));
  else
    line(fmt::format("huge page allocations: counted with {} ({})", tracer::mode_name(r.huge_alloc.mode),
                     r.huge_alloc.why));
}

// What the server and its memory cgroup said: Redis's settings, its silences and refusals, the
// cgroup's limit, the replication's buffers.
void server_lines(const Report& r, const Line& line) {
  if (r.redis && r.redis->reachable)
    line(fmt::format("redis {} at {}: disable-thp={} repl-diskless-sync={} latest_fork_usec={} total_forks +{}",
                     r.redis->version, r.redis->address, r.redis->disable_thp, r.redis->repl_diskless_sync,
                     r.redis->latest_fork_usec, r.redis->total_forks_delta));
  if (r.redis)
    for (const auto& o : r.redis->unanswered)
      line(fmt::format(
          "redis did not answer from +{:.1f} s {}: {}", r.seconds_since_start(o.from_ns),
          o.to_ns ? fmt::format("to +{:.1f} s", r.seconds_since_start(o.to_ns)) : std::string("to the end"), o.error));
  if (r.redis && r.redis->reachable)
    for (const auto& why : r.redis->refused) line(fmt::format("redis figure missing: {}", why));
  if (const auto& c = r.memory.cgroup) {
    const auto mib = [](uint64_t b) { return mib_text(static_cast<double>(b)); };
    line(fmt::format("memory cgroup v{} {}: limit {}, usage peak {}{}, oom kills {}", c->version, c->path,
                     c->limit_bytes ? mib(*c->limit_bytes) : std::string("none"), mib(c->usage_max_bytes),
                     c->limit_bytes ? fmt::format(" ({:.0f}% of it)",
                                                  100.0 * static_cast<double>(c->usage_max_bytes) /
                                                      static_cast<double>(std::max<uint64_t>(*c->limit_bytes, 1)))
                                    : std::string(),
                     c->oom_kills));
  }
  if (const auto& x = r.replication) {
    const auto mib = [](uint64_t b) { return mib_text(static_cast<double>(b)); };
    std::string limit = "unknown";
    if (x->limit)
      limit = fmt::format("{} hard, {} soft for {} s", mib(x->limit->hard_bytes), mib(x->limit->soft_bytes),
                          x->limit->soft_seconds);
    line(fmt::format(
        "replication: {} full syncs (INFO sync_full +{}), {} dropped before online; replica output "
        "buffer limit {}; replication buffers peak {}{}{}",
        x->replica_syncs, x->full_syncs, x->dropped_syncs, limit, mib(x->replication_buffer_peak_bytes),
        x->replica_output_buffer_peak_bytes
            ? fmt::format(", replica output buffer peak {}", mib(*x->replica_output_buffer_peak_bytes))
            : std::string(),
        x->output_buffer_limit_disconnections
            ? fmt::format(", output buffer limit disconnections +{}", *x->output_buffer_limit_disconnections)
            : std::string()));
  }
}

// A row per fork shown (the worst and the latest when there are many), with what continues it.
void fork_lines(const Report& r, const Line& line) {
  line(fmt::format("forks: {}", r.forks.size()));
  if (!r.forks.empty()) {
    line(fmt::format("  {:>8} {:<19} {:>10} {:>11} {:>10} {:>10} {:>7} {:>21} {:>21}", "child", "reason", "fork_us",
                     "lifetime_ms", "cow", "child_cow", "splits", "p50/p99.9 us during", "p50/p99.9 us before"));
    const auto shown = shown_forks(r.forks);
    for (size_t i = 0; i < r.forks.size(); ++i) {
      if (!shown[i]) continue;
      const auto& e = r.forks[i];
      auto lat = [](const std::optional<correlate::LatencyWindow>& w) {
        return w ? fmt::format("{:.0f}/{:.0f}", w->p50_us, w->p999_us) : std::string("-");
      };
      line(fmt::format("  {:>8} {:<19} {:>10} {:>11} {:>10} {:>10} {:>7} {:>21} {:>21}", e.child_pid,
                       correlate::reason_name(e.reason), fmt_opt(e.fork_duration_us, "{:.0f}"),
                       e.child_lifetime_ms ? fmt::format("{:.1f}", *e.child_lifetime_ms) : std::string("alive"),
                       e.cow_faults, e.child_cow_faults, e.thp_splits, lat(e.latency_during), lat(e.latency_before)));
      if (r.client_probe && e.client_latency_during)
        line(client_latency_line(*e.client_latency_during, e.client_latency_before, r.client_probe->client_timeout_us));
      if (e.main_thread_during) line(main_thread_line(*e.main_thread_during, e.main_thread_before));
      if (e.main_wait) line(main_wait_line(*e.main_wait));
      if (e.child_cpu)
        line(fmt::format("           its child: on a CPU {:.1f} ms, waiting for a CPU {:.1f} ms",
                         e.child_cpu->on_cpu_ms, e.child_cpu->runqueue_ms));
      if (e.fsync_during &&
          (e.fsync_during->count() || e.fsync_during->aof_write || (e.fsync_before && e.fsync_before->count())))
        line(fsync_line(*e.fsync_during, e.fsync_before));
      if (e.child_io && e.child_io->written_bytes) line(child_io_line(e));
      if (e.folios && !e.folios->empty()) line(folio_line(*e.folios));
      if (e.fault_avg_ns)
        line(fmt::format("           COW fault handler: avg {:.0f} ns; huge-PMD faults {}", *e.fault_avg_ns,
                         e.huge_cow_faults));
      if (e.fork_duration_us || e.copy_stall_ms) line(stall_line(e, r.copy_cost_ns));
      for (size_t k = 0; k < e.replicas.size() && k < kReplicasShown; ++k) line(replica_line(e.replicas[k]));
      if (e.replicas.size() > kReplicasShown)
        line(fmt::format("           ... {} more replicas (the JSON report has them all)",
                         e.replicas.size() - kReplicasShown));
      if (e.copies)
        for (const auto& l : copies_lines(*e.copies)) line(l);
    }
    const auto hidden = static_cast<size_t>(std::count(shown.begin(), shown.end(), false));
    if (hidden > 0)
      line(
          fmt::format("  ... {} more forks not shown: the table keeps the {} with the most copy-on-write faults "
                      "and the {} most recent; the JSON report has every fork.",
                      hidden, kWorstForksShown, kRecentForksShown));
  }
}

}  // namespace

std::vector<bool> shown_forks(const std::vector<correlate::ForkEpisode>& forks) {
  std::vector<bool> shown(forks.size(), forks.size() <= kForkTableRows);
  if (forks.size() <= kForkTableRows) return shown;
  std::vector<size_t> by_cow(forks.size());
  for (size_t i = 0; i < by_cow.size(); ++i) by_cow[i] = i;
  std::stable_sort(by_cow.begin(), by_cow.end(),
                   [&](size_t a, size_t b) { return forks[a].cow_faults > forks[b].cow_faults; });
  for (size_t i = 0; i < kWorstForksShown; ++i) shown[by_cow[i]] = true;
  for (size_t i = forks.size() - kRecentForksShown; i < forks.size(); ++i) shown[i] = true;
  return shown;
}

std::string folio_shares_text(const proc::FolioShares& s) {
  const uint64_t total = s.total_kb();
  std::string out;
  for (auto it = s.kb.rbegin(); it != s.kb.rend(); ++it)
    if (it->second > 0)
      out += fmt::format("{}{}: {} ({:.0f}%)", out.empty() ? "" : ", ", folio_size_name(it->first),
                         mib_text(static_cast<double>(it->second) * 1024),
                         100.0 * static_cast<double>(it->second) / static_cast<double>(total));
  return out;
}

std::string to_text(const Report& r) {
  std::string out;
  // Each line made printable once here: a name cannot end a line early or hold a terminal escape.
  const Line line = [&out](const std::string& s) { out += text::printable(s) + "\n"; };
  capture_lines(r, line);
  server_lines(r, line);
  line("");
  fork_lines(r, line);
  line("");
  const uint64_t copies = total_copies(r);
  line(
      fmt::format("totals: copies={} reuse_faults={} (writes while a child lived / after, no copy) "
                  "child_cow_faults={} thp_splits={} thp_collapses={} compaction_stalls={} reclaim_stalls={} "
                  "dropped_events={}",
                  copies, r.totals.cow_faults > copies ? r.totals.cow_faults - copies : 0, r.totals.child_cow_faults,
                  r.totals.thp_splits, r.totals.thp_collapses, r.totals.compaction_stalls, r.totals.reclaim_stalls,
                  r.totals.dropped_events));
  line("");
  line("findings:");
  int i = 1;
  for (const auto& f : findings(r)) line(fmt::format("  {}. [{}] {}", i++, severity_name(f.severity), f.text));
  return out;
}

}  // namespace thptrace::report
