// SPDX-License-Identifier: Apache-2.0
// summary.md: what a person reads first. Tables per scenario, then sentences that compare the
// scenarios the way the published experiments did (docs/guide/bench.md puts them side by side).

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bench/results.h"
#include "loadgen/loadgen.h"

namespace thptrace::bench {
namespace {

using loadgen::LatencySummary;

const ScenarioResult* find(const std::vector<ScenarioResult>& results, const std::string& name) {
  for (const auto& r : results)
    if (r.spec.name == name && r.completed) return &r;
  return nullptr;
}

std::optional<LatencySummary> latency(const ScenarioResult* r, const std::string& phase) {
  if (!r) return std::nullopt;
  const PhaseResult* p = r->phase(phase);
  if (!p || p->load.probe_latency.empty()) return std::nullopt;
  return LatencySummary::of(p->load.probe_latency);
}

std::string u(uint64_t ns) { return fmt::format("{:.0f}", static_cast<double>(ns) / 1000.0); }

std::string ratio(uint64_t a, uint64_t b) {
  return b == 0 ? std::string("n/a") : fmt::format("{:.2f}×", static_cast<double>(a) / static_cast<double>(b));
}

// "weak" / "clear" wording for a tail ratio, so a small effect is called small.
std::string strength(uint64_t during, uint64_t base) {
  if (base == 0) return "";
  const double x = static_cast<double>(during) / static_cast<double>(base);
  if (x >= 1.5) return "a clear lift";
  if (x >= 1.15) return "a modest lift";
  if (x > 1 / 1.15) return "no effect worth the name at this size";
  return "lower than the baseline (noise, or less load reached Redis)";
}

// The first fork of a scenario, if any.
const ForkRecord* first_fork(const ScenarioResult* r) { return r && !r->forks.empty() ? &r->forks.front() : nullptr; }

std::string fork_us(const ForkRecord* f) {
  return f && f->fork_duration_us ? fmt::format("{:.0f} µs", *f->fork_duration_us) : std::string("n/a");
}
std::string child_ms(const ForkRecord* f) {
  return f && f->child_lifetime_ms ? fmt::format("{:.0f} ms", *f->child_lifetime_ms) : std::string("n/a");
}

std::string sample_warning(const std::optional<LatencySummary>& s) {
  if (!s || s->count >= 10000) return "";
  if (s->count < 2000)
    return fmt::format(" (the window holds {} requests, so its p99.9 is about its slowest one and is noisy)", s->count);
  return fmt::format(" (the window holds {} requests, so its p99.9 rests on its slowest {} and is noisy)", s->count,
                     s->count / 1000);
}

void full_sync_sentences(std::string& out, const std::vector<ScenarioResult>& results) {
  const auto* steady = find(results, "steady");
  const auto* disk = find(results, "full_sync_disk");
  const auto* diskless = find(results, "full_sync_diskless");
  const auto base = latency(steady, "steady");
  const auto d = latency(disk, "during");
  const auto l = latency(diskless, "during");
  if (!base && !d && !l) return;
  out += "**Full sync under write load.** ";
  if (base) out += fmt::format("Steady p99.9 {} µs (p50 {} µs). ", u(base->p99_9_ns), u(base->p50_ns));
  for (const auto& [r, s, what] : {std::tuple{disk, d, "disk-based"}, std::tuple{diskless, l, "diskless"}}) {
    if (!s) continue;
    out +=
        fmt::format("During the {} full sync ({:.2f} s from REPLICAOF to link up and fork child gone) p99.9 was {} µs",
                    what, r->during_s(), u(s->p99_9_ns));
    if (base)
      out +=
          fmt::format(" ({} of steady: {})", ratio(s->p99_9_ns, base->p99_9_ns), strength(s->p99_9_ns, base->p99_9_ns));
    out += fmt::format(", p50 {} µs{}; its fork took {} and the child lived {} with {} COW faults in the parent. ",
                       u(s->p50_ns), sample_warning(s), fork_us(first_fork(r)), child_ms(first_fork(r)),
                       first_fork(r) ? first_fork(r)->cow_faults : 0);
  }
  if (d && l) out += fmt::format("Diskless against disk: p99.9 {} µs against {} µs.", u(l->p99_9_ns), u(d->p99_9_ns));
  out += "\n\n";
}

std::string mib(uint64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / 1048576.0); }

// "a, b and c" of the replicas each fork served, in fork order: "3" for one fork serving all three.
std::string replicas_per_fork(const ScenarioResult& r) {
  std::string out;
  for (const auto& f : r.forks) out += fmt::format("{}{}", out.empty() ? "" : " + ", f.replicas.size());
  return out.empty() ? "none" : out;
}

void scale_out_sentences(std::string& out, const RunInfo& info, const std::vector<ScenarioResult>& results) {
  const auto* disk = find(results, "scale_out_disk");
  const auto* diskless = find(results, "scale_out_diskless");
  const auto* channel = find(results, "scale_out_channel");
  const auto skipped = std::find_if(info.skipped.begin(), info.skipped.end(),
                                    [](const auto& s) { return s.first == "scale_out_channel"; });
  if (!disk && !diskless && !channel && skipped == info.skipped.end()) return;
  const auto base = latency(find(results, "steady"), "steady");
  out += "**Scale-out: three fresh replicas at once.** ";
  const std::string over_channel =
      channel ? fmt::format("over {}'s rdb channel ({} yes)", info.server.label(), info.server.rdb_channel_config)
              : std::string();
  for (const auto& [r, what] : {std::pair{disk, std::string("over disk")}, std::pair{diskless, std::string("diskless")},
                                std::pair{channel, over_channel}}) {
    if (!r) continue;
    double lo = 0, hi = 0;
    size_t n = 0;
    for (const auto& f : r->forks)
      for (const auto& x : f.replicas)
        if (const auto ms = x.sync_ms()) {
          lo = n ? std::min(lo, *ms) : *ms;
          hi = n ? std::max(hi, *ms) : *ms;
          ++n;
        }
    const auto d = latency(r, "during");
    out += fmt::format(
        "{}: {} fork(s) serving {} replica(s) (per fork: {}), each replica {} ms from its request to "
        "online; {:.2f} s from REPLICAOF to the last link up",
        what, r->forks.size(), n, replicas_per_fork(*r), n ? fmt::format("{:.0f}–{:.0f}", lo, hi) : std::string("n/a"),
        r->link_up_ns > r->trigger_ns ? static_cast<double>(r->link_up_ns - r->trigger_ns) / 1e9 : 0.0);
    if (d) {
      out += fmt::format("; the primary's p99.9 {} µs during the syncs", u(d->p99_9_ns));
      if (base) out += fmt::format(" ({} of steady)", ratio(d->p99_9_ns, base->p99_9_ns));
      out += sample_warning(d);
    }
    out += fmt::format("; RSS peak {:.0f} MB, {} MB copied on write, replication buffers peak {} MB. ",
                       static_cast<double>(r->rss_kb_max) / 1024.0, mib(r->copied_bytes),
                       mib(r->replication_buffer_peak_bytes));
  }
  if (skipped != info.skipped.end()) out += fmt::format("scale_out_channel was not run: {}. ", skipped->second);
  out += "\n\n";
}

void control_sentences(std::string& out, const std::vector<ScenarioResult>& results) {
  const auto* c = find(results, "readonly_control");
  const auto b = latency(c, "before");
  const auto d = latency(c, "during");
  if (!b || !d) return;
  out += fmt::format(
      "**Read-only control.** The same disk full sync under a GET-only load: p99.9 {} µs before, {} µs during ({}: "
      "{}); "
      "p50 {} → {} µs. The parent took {} COW faults while the child lived",
      u(b->p99_9_ns), u(d->p99_9_ns), ratio(d->p99_9_ns, b->p99_9_ns), strength(d->p99_9_ns, b->p99_9_ns), u(b->p50_ns),
      u(d->p50_ns), first_fork(c) ? first_fork(c)->cow_faults : 0);
  if (const auto* disk = find(results, "full_sync_disk"); disk && first_fork(disk))
    out += fmt::format(", against {} under the write load", first_fork(disk)->cow_faults);
  out += ": copy-on-write is paid only for pages the parent writes.\n\n";
}

void aof_sentences(std::string& out, const std::vector<ScenarioResult>& results) {
  struct Row {
    const char* fsync;
    const char* skip;
    const ScenarioResult* r;
  };
  std::vector<Row> rows;
  for (const char* fsync : {"always", "everysec"})
    for (const char* skip : {"no", "yes"})
      if (const auto* r = find(results, fmt::format("aof_{}_{}", fsync, skip))) rows.push_back({fsync, skip, r});
  if (rows.empty()) return;
  out +=
      "**AOF rewrite × fsync policy.** Probe latency in µs; the rewrite lasts from BGREWRITEAOF until "
      "`aof_rewrite_in_progress` returns to 0.\n\n"
      "The fsync columns are the server's own calls as thptrace's disk family timed them: p99 in ms of the main "
      "thread's (appendfsync always) and the bio_aof thread's (everysec), before the rewrite → during it.\n\n"
      "| appendfsync | no-appendfsync-on-rewrite | p50 before | p50 during | p50 after | p99 during | max during | "
      "requests during | rewrite s | child ms | fork µs | main fsync p99 ms | bio_aof fsync p99 ms |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& row : rows) {
    const auto b = latency(row.r, "before"), d = latency(row.r, "during"), a = latency(row.r, "after");
    const auto* f = first_fork(row.r);
    // "0.41 → 3.10 (812)": p99 before → during, and the calls during; "-" for a thread that made none.
    const auto fsync = [f](std::optional<correlate::FsyncLatency> correlate::FsyncWindow::*kind) -> std::string {
      if (!f || !f->fsync_during) return "-";
      const auto& d = (*f->fsync_during).*kind;
      const auto& b = f->fsync_before ? (*f->fsync_before).*kind : std::nullopt;
      if (!d && !b) return "-";
      return fmt::format("{} → {} ({})", b ? fmt::format("{:.2f}", b->p99_us / 1e3) : "-",
                         d ? fmt::format("{:.2f}", d->p99_us / 1e3) : "-", d ? d->count : 0);
    };
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {:.2f} | {} | {} | {} | {} |\n", row.fsync, row.skip,
                       b ? u(b->p50_ns) : "-", d ? u(d->p50_ns) : "-", a ? u(a->p50_ns) : "-", d ? u(d->p99_ns) : "-",
                       d ? u(d->max_ns) : "-", d ? d->count : 0, row.r->during_s(),
                       f && f->child_lifetime_ms ? fmt::format("{:.0f}", *f->child_lifetime_ms) : "-",
                       f && f->fork_duration_us ? fmt::format("{:.0f}", *f->fork_duration_us) : "-",
                       fsync(&correlate::FsyncWindow::main), fsync(&correlate::FsyncWindow::bio_aof));
  }
  out += "\n";
  for (const char* fsync : {"always", "everysec"}) {
    const auto* no = find(results, fmt::format("aof_{}_no", fsync));
    const auto* yes = find(results, fmt::format("aof_{}_yes", fsync));
    const auto dn = latency(no, "during"), dy = latency(yes, "during");
    if (!dn || !dy) continue;
    out += fmt::format(
        "With appendfsync {}, no-appendfsync-on-rewrite yes moved the p50 during the rewrite from {} to {} µs ({}) "
        "and the rewrite took {:.2f} s against {:.2f} s. ",
        fsync, u(dn->p50_ns), u(dy->p50_ns), ratio(dy->p50_ns, dn->p50_ns), yes->during_s(), no->during_s());
  }
  out += "\n\n";
}

void thp_sentences(std::string& out, const std::vector<ScenarioResult>& results) {
  const auto* on = find(results, "thp_always");
  const auto* off = find(results, "thp_never");
  if (!on && !off) return;
  out += "**THP A/B (BGSAVE, disable-thp no).** ";
  for (const auto* r : {on, off}) {
    if (!r) continue;
    const auto d = latency(r, "during");
    const auto* f = first_fork(r);
    const auto b = latency(r, "before");
    out += fmt::format(
        "THP `{}`: fork {}, child {}, {} COW faults, {} THP PMD splits{}, AnonHugePages max {} kB; "
        "p99.9 during the save {} µs, max {} µs, worst probe request around the fork {} µs (before: p99.9 {} µs). ",
        r->spec.thp_mode, fork_us(f), child_ms(f), f ? f->cow_faults : 0, f ? f->thp_splits : 0,
        f && f->thp_splits_source == "vmstat" ? " (system-wide)" : "", r->anon_huge_pages_kb_max,
        d ? u(d->p99_9_ns) : "-", d ? u(d->max_ns) : "-", f ? u(probe_max_near_fork(*r, *f)) : "-",
        b ? u(b->p99_9_ns) : "-");
  }
  const auto *fon = first_fork(on), *foff = first_fork(off);
  if (fon && foff && fon->fork_duration_us && foff->fork_duration_us && *fon->fork_duration_us > 0)
    out += fmt::format("Fork with THP `never` took {:.2f}× the time it took with `always`. ",
                       *foff->fork_duration_us / *fon->fork_duration_us);
  if (on && on->anon_huge_pages_kb_max == 0)
    out += "No huge page backed the heap under `always`, so this A/B did not test huge-page copy-on-write. ";
  out += "\n\n";
}

void scenario_tables(std::string& out, const ScenarioResult& r) {
  out += fmt::format("### {}\n\n{}.", r.spec.name, r.spec.description);
  if (r.trigger_ns) {
    out += fmt::format(" During phase: {:.2f} s from the trigger to Redis's end condition", r.during_s());
    if (r.link_up_ns)
      out += fmt::format(" ({} link up after {:.2f} s)",
                         r.replica_link_up_ns.size() > 1 ? "the last replica's" : "replica",
                         static_cast<double>(r.link_up_ns - r.trigger_ns) / 1e9);
    out += ".";
  }
  out +=
      "\n\n| phase | requests | p50 µs | p90 µs | p99 µs | p99.9 µs | p99.99 µs | max µs | writer cmd/s |\n"
      "|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& p : r.phases) {
    const auto s = LatencySummary::of(p.load.probe_latency);
    out +=
        fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {:.0f} |\n", p.name, s.count, u(s.p50_ns), u(s.p90_ns),
                    u(s.p99_ns), u(s.p99_9_ns), u(s.p99_99_ns), u(s.max_ns), p.load.writer_throughput());
  }
  out += "\n";
  const auto mb = [&](const char* key) {
    const auto v = redis::info_int(r.info_end, key);
    return v ? fmt::format("{:.1f}", static_cast<double>(*v) / 1048576.0) : std::string("-");
  };
  if (!r.forks.empty()) {
    out +=
        "| fork | reason | phase | fork µs | child ms | COW faults | child COW | THP splits | probe max near fork µs "
        "|\n"
        "|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& f : r.forks)
      out += fmt::format(
          "| {} | {} ({}) | {} | {} | {} | {} | {} | {} | {} |\n", f.child_pid, f.reason, f.reason_source, f.phase,
          f.fork_duration_us ? fmt::format("{:.0f}", *f.fork_duration_us) : "-",
          f.child_lifetime_ms ? fmt::format("{:.1f}", *f.child_lifetime_ms) : "alive", f.cow_faults, f.child_cow_faults,
          f.thp_splits_source == "vmstat" ? fmt::format("{} (system-wide)", f.thp_splits)
                                          : std::to_string(f.thp_splits),
          u(probe_max_near_fork(r, f)));
    out += "\n";
  } else {
    out += "No fork.\n\n";
  }
  if (std::any_of(r.forks.begin(), r.forks.end(), [](const ForkRecord& f) { return !f.replicas.empty(); })) {
    out +=
        "| fork | replica | joined | states (ms after its request, INFO polled every 100 ms) | sync ms | outcome | "
        "link up s after REPLICAOF |\n|---|---|---|---|---|---|---|\n";
    for (const auto& f : r.forks)
      for (const auto& x : f.replicas) {
        std::string states;
        for (const auto& st : x.states)
          states += fmt::format("{}{} {:.0f}", states.empty() ? "" : ", ", st.state,
                                static_cast<double>(st.first_seen_ns - x.first_seen_ns) / 1e6);
        std::string link_up = "-";
        for (size_t i = 0; i < r.replica_addresses.size() && i < r.replica_link_up_ns.size(); ++i)
          if (r.replica_addresses[i] == x.address && r.replica_link_up_ns[i] > r.trigger_ns)
            link_up = fmt::format("{:.2f}", static_cast<double>(r.replica_link_up_ns[i] - r.trigger_ns) / 1e9);
        out += fmt::format(
            "| {} | {} | {} | {} | {} | {} | {} |\n", f.child_pid, x.address, correlate::joined_name(x.joined), states,
            x.sync_ms() ? fmt::format("{:.0f}", *x.sync_ms()) : "-", correlate::outcome_name(x.outcome), link_up);
      }
    out += "\n";
  }
  out += fmt::format(
      "Memory: RSS max {:.0f} MB, AnonHugePages max {} kB, rdb_last_cow_size {} MB, aof_last_cow_size {} MB; THP `{}` "
      "(process THP {}), disable-thp {}.",
      static_cast<double>(r.rss_kb_max) / 1024.0, r.anon_huge_pages_kb_max, mb("rdb_last_cow_size"),
      mb("aof_last_cow_size"), r.system_thp_enabled,
      r.process_thp_enabled ? (*r.process_thp_enabled ? "on" : "off") : "?",
      r.disable_thp.empty() ? "?" : r.disable_thp);
  out += fmt::format(" Copied on write in the fork windows {} MB", mib(r.copied_bytes));
  if (r.replication_buffer_peak_bytes)
    out += fmt::format(", replication buffers peak {} MB", mib(r.replication_buffer_peak_bytes));
  if (r.cgroup_usage_max_bytes)
    out += fmt::format(", memory cgroup usage max {} MB{}", mib(*r.cgroup_usage_max_bytes),
                       r.cgroup_limit_bytes ? fmt::format(" of {} MB", mib(*r.cgroup_limit_bytes)) : "");
  out += ".\n\n";
  for (const auto& f : r.faults) out += fmt::format("- **fault:** {}\n", f);
  for (const auto& n : r.notes) out += fmt::format("- note: {}\n", n);
  if (!r.faults.empty() || !r.notes.empty()) out += "\n";
}

}  // namespace

std::string summary_markdown(const BenchOptions& o, const RunInfo& info, const std::vector<ScenarioResult>& results) {
  std::string out = "# thptrace bench\n\n";
  const redis::InfoMap* redis_info = nullptr;
  for (const auto& r : results)
    if (!r.info_after_load.empty()) {
      redis_info = &r.info_after_load;
      break;
    }
  out += fmt::format("Run {} to {} (UTC), thptrace {}, kernel {}, {} CPUs, {:.0f} GiB RAM", info.utc_start,
                     info.utc_end, info.thptrace_version, info.kernel_release, info.cpus,
                     static_cast<double>(info.mem_total_kb) / 1048576.0);
  out += fmt::format(", {} ({}{})", info.server.label(), info.server.path,
                     redis_info ? ", " + redis::info_str(*redis_info, "mem_allocator") : "");
  out += fmt::format(
      ". Host THP `{}` (defrag `{}`), `{}` after the run. Load average {} at the start, {} at the end.\n\n",
      info.host_thp_enabled, info.host_thp_defrag, info.host_thp_enabled_after, info.loadavg_start, info.loadavg_end);
  out += fmt::format(
      "Dataset: {} keys × {} B (seed {}){}. Load: one probe connection timing every request ({}), plus {} writer "
      "connection(s) pipelining batches of {}. Phases: {:g} s before, a during phase as long as Redis's own state says "
      "the sync / rewrite / save lasts, {:g} s after; `steady` runs {:g} s with no fork. Every scenario has fresh "
      "redis-server processes and its own `thptrace --pid` capture (captures/).\n\n",
      o.keys, o.value_size, o.seed,
      redis_info ? fmt::format(", used_memory {:.0f} MB after load",
                               static_cast<double>(redis::info_int(*redis_info, "used_memory").value_or(0)) / 1048576.0)
                 : "",
      o.rate > 0 ? fmt::format("open loop at {:g} req/s, latency from the intended send time", o.rate)
                 : "closed loop, one request in flight",
      o.writers, o.batch, o.seconds_per_phase, o.seconds_per_phase, 3 * o.seconds_per_phase);

  const auto faults = self_check_faults(results);
  out += "## Self-check\n\n";
  if (info.interrupted) out += "**Interrupted** by a signal: the scenarios below are the ones that finished.\n\n";
  if (faults.empty()) {
    out +=
        "Passed: every replica synced, every scenario that should fork forked with the expected reason, and no "
        "event was dropped. Latency effects below are measurements, not pass/fail criteria.\n\n";
  } else {
    out += "**Failed** on mechanical faults (evidence kept in captures/ and logs/):\n\n";
    for (const auto& f : faults) out += "- " + f + "\n";
    out += "\n";
  }
  for (const auto& n : info.notes) out += "Note: " + n + "\n\n";

  out += "## What this run shows\n\n";
  full_sync_sentences(out, results);
  scale_out_sentences(out, info, results);
  control_sentences(out, results);
  aof_sentences(out, results);
  thp_sentences(out, results);
  out +=
      "Percentiles come from a log-linear histogram (≤ 1% error). On a 2-CPU host the probe, the writers, "
      "Redis, its fork child and the capture share two cores, so absolute numbers carry scheduler noise; "
      "compare scenarios of one run, not runs of different machines.\n\n";

  out += "## Scenarios\n\n";
  for (const auto& r : results) scenario_tables(out, r);
  out +=
      "Files: latency_percentiles.csv, latency_timeline.csv (100 ms rows), fork_and_mem.csv, replica_syncs.csv, "
      "run_metadata.csv, latency_timeline.svg (probe p99 and max over time, the during phase tinted, fork windows "
      "shaded, replicas' link up marked), "
      "captures/<scenario>.json (the capture's report), logs/ (redis-server logs).\n";
  return out;
}

}  // namespace thptrace::bench
