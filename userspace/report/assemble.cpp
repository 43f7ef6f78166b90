// SPDX-License-Identifier: Apache-2.0
#include "report/report.h"

#include <algorithm>

#include "common/units.h"
#include "correlate/correlator.h"

namespace thptrace::report {

namespace {

// Each fork's sampled copies: those taken in its window (to the capture's end for a child that
// outlived it), against its RSS at fork.
void attribute_forks(const CaptureInputs& in, std::vector<correlate::ForkEpisode>& forks) {
  for (auto& f : forks) {
    const correlate::Window window = f.window(in.end_ns);
    std::vector<const correlate::CopySample*> mine;
    for (const auto& s : in.copy_samples)
      if (window.holds(s.ts_ns)) mine.push_back(&s);
    const proc::Sample* at_fork = in.samples.at_or_before(f.fork_ts_ns);
    const uint64_t rss_kb = at_fork && at_fork->target_alive ? at_fork->rss_kb : 0;
    f.copies = correlate::attribute_copies(mine, in.sample_every, f.cow_faults + f.child_cow_faults, rss_kb);
  }
}

// Each fork's folio counters: from the first reading at or after its fork to the first at or after
// its child's exit (the last reading for a child that outlived the capture), those that changed.
void folios_of_forks(const CaptureInputs& in, std::vector<correlate::ForkEpisode>& forks) {
  if (in.folio_readings.empty()) return;
  const auto first_at = [&](uint64_t ts) -> const FolioReading* {
    const auto it = std::find_if(in.folio_readings.begin(), in.folio_readings.end(),
                                 [ts](const FolioReading& r) { return r.ts_ns >= ts; });
    return it == in.folio_readings.end() ? nullptr : &*it;
  };
  for (auto& f : forks) {
    const FolioReading* from = first_at(f.fork_ts_ns);
    const FolioReading* to = f.exit_ts_ns ? first_at(f.exit_ts_ns) : &in.folio_readings.back();
    if (!from || !to || to == from) continue;
    std::map<uint32_t, std::map<std::string, int64_t>> changed;
    for (const auto& [kb, counters] : to->counters) {
      const auto was = from->counters.find(kb);
      if (was == from->counters.end()) continue;
      for (const auto& [name, value] : counters)
        if (const auto old = was->second.find(name); old != was->second.end() && old->second != value)
          changed[kb][name] = static_cast<int64_t>(value - old->second);
    }
    f.folios = std::move(changed);
  }
}

// Whether the capture let items of its time series go inside w (a window before a fork that reaches
// back past what a long capture keeps whole: report/retention.h).
bool series_let_go_in(const CaptureInputs& in, const correlate::Window& w) {
  return std::any_of(in.series_let_go.begin(), in.series_let_go.end(),
                     [&](const correlate::Window& g) { return g.from_ns < w.to_ns && w.from_ns < g.to_ns; });
}

// Each fork's client latency: the probe's requests answered in its window (to the capture's end for a
// child that outlived it; the requests its freeze held are answered in it) and in the window before.
void client_latency_of_forks(const CaptureInputs& in, std::vector<correlate::ForkEpisode>& forks) {
  for (auto& f : forks) {
    const correlate::Window window = f.window(in.end_ns);
    f.client_latency_during =
        redis::client_latency(in.probe_samples, window.from_ns, window.to_ns, in.client_timeout_us);
    if (const auto before = window.before(); before && !series_let_go_in(in, *before))
      f.client_latency_before =
          redis::client_latency(in.probe_samples, before->from_ns, before->to_ns, in.client_timeout_us);
  }
}

// The disk calls that returned in a window: as the capture summarised them, or from the recorded
// events of a capture from before it did; nullopt where the capture let go of calls it may have held.
std::optional<correlate::FsyncWindow> fsync_in(const CaptureInputs& in, const correlate::Window& w) {
  if (!in.disk_summarised) return correlate::fsync_window(in.events, static_cast<uint32_t>(in.pid), w);
  for (const auto& d : in.disk_windows)
    if (d.window == w) return d.calls;
  return std::nullopt;
}

// Each fork's fsyncs (the disk family): those returned in its window and in the window before (when
// the capture saw all of it). Redis syncs the AOF just before it forks a rewrite: that call returned
// before the child existed, in the window before.
void fsync_of_forks(const CaptureInputs& in, std::vector<correlate::ForkEpisode>& forks) {
  for (auto& f : forks) {
    const correlate::Window window = f.window(in.end_ns);
    f.fsync_during = fsync_in(in, window);
    const redis::Snapshot *before = nullptr, *after = nullptr;
    for (const auto& s : in.timeline) {
      if (!s.up || s.aof_delayed_fsync < 0) continue;
      if (s.ts_ns <= window.from_ns) before = &s;
      if (s.ts_ns >= window.to_ns && !after) after = &s;
    }
    if (before && after && after->aof_delayed_fsync >= before->aof_delayed_fsync)
      f.aof_delayed_fsync = after->aof_delayed_fsync - before->aof_delayed_fsync;
    if (const auto earlier = window.before(in.start_ns)) f.fsync_before = fsync_in(in, *earlier);
  }
}

// The sample nearest to ts: the last before it or the first after it. The sampler takes one as soon
// as a fork or a child's exit is reported, a few ms after it, where the one before can be an idle
// interval (a second) away.
uint64_t apart_ns(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

const proc::Sample* nearest_sample(const proc::SampleSeries& samples, uint64_t ts_ns) {
  const proc::Sample* before = samples.at_or_before(ts_ns);
  const proc::Sample* after = samples.at_or_after(ts_ns);
  if (!before || !after) return before ? before : after;
  return apart_ns(after->ts_ns, ts_ns) < apart_ns(before->ts_ns, ts_ns) ? after : before;
}

// The main thread's time over `window`, from the samples nearest its ends; nullopt when there are
// none, or when one is further from its end than a tenth of the window (5 ms at least): its ms would
// be another span's. widen_start takes the last sample at or before the start instead, however far:
// the window before a fork, whose start no event marks, read at the idle interval.
std::optional<correlate::ThreadTime> main_thread_time(const proc::SampleSeries& samples,
                                                      const correlate::Window& window, bool widen_start) {
  const proc::Sample* a = widen_start ? samples.at_or_before(window.from_ns) : nearest_sample(samples, window.from_ns);
  const proc::Sample* b = nearest_sample(samples, window.to_ns);
  const uint64_t slack = std::max<uint64_t>((window.to_ns - window.from_ns) / 10, 5'000'000);
  const auto near = [slack](const proc::Sample* s, uint64_t ts) { return apart_ns(s->ts_ns, ts) <= slack; };
  if (!a || !b || !a->main_thread || !b->main_thread || b->ts_ns <= a->ts_ns ||
      (widen_start ? a->ts_ns > window.from_ns : !near(a, window.from_ns)) || !near(b, window.to_ns))
    return std::nullopt;
  const auto grown = proc::sched_growth(*a->main_thread, *b->main_thread);
  if (!grown) return std::nullopt;
  correlate::ThreadTime t;
  t.span_ms = static_cast<double>(b->ts_ns - a->ts_ns) / 1e6;
  t.on_cpu_ms = static_cast<double>(grown->on_cpu_ns) / 1e6;
  t.runqueue_ms = static_cast<double>(grown->runqueue_ns) / 1e6;
  // The clocks advance at the scheduler's ticks and switches, not at the samples' reads: a little
  // over the span is rounding.
  t.off_cpu_ms = std::max(0.0, t.span_ms - t.on_cpu_ms - t.runqueue_ms);
  return t;
}

// Each fork's main thread over its window and the window before.
void main_thread_of_forks(const CaptureInputs& in, std::vector<correlate::ForkEpisode>& forks) {
  for (auto& f : forks) {
    const correlate::Window window = f.window(in.end_ns);
    f.main_thread_during = main_thread_time(in.samples, window, false);
    if (const auto before = window.before(in.start_ns); before && !series_let_go_in(in, *before))
      f.main_thread_before = main_thread_time(in.samples, *before, true);
  }
}

// Who, where and when: the capture's identity, as recorded.
void header_of(const CaptureInputs& in, Report& r) {
  r.version = in.version;
  r.hostname = in.hostname;
  r.boot_id = in.boot_id;
  r.start_realtime_ns = in.start_realtime_ns;
  r.end_realtime_ns = in.end_realtime_ns;
  r.system = in.system;
  r.pid = in.pid;
  r.pid_in_namespace = in.pid_in_namespace;
  r.comm = in.comm;
  r.container = in.container;
  r.probes = in.probes;
  r.huge_alloc = in.huge_alloc;
  r.duration_s = static_cast<double>(in.end_ns - in.start_ns) / 1e9;
  r.start_monotonic_ns = in.start_ns;
}

// The process's THP state and its huge pages and RSS over the capture, from its /proc samples.
void process_memory_of(const CaptureInputs& in, Report& r) {
  const auto& samples = in.samples.samples();
  for (const auto& s : samples) {
    if (!s.target_alive) continue;
    if (!r.thp_enabled_for_process && s.thp_enabled) r.thp_enabled_for_process = s.thp_enabled;
    if (r.anon_huge_pages_kb_start == 0 && &s == &samples.front()) r.anon_huge_pages_kb_start = s.anon_huge_pages_kb;
    r.anon_huge_pages_kb_max = std::max(r.anon_huge_pages_kb_max, s.anon_huge_pages_kb);
    r.anon_huge_pages_kb_end = s.anon_huge_pages_kb;
    r.rss_kb_max = std::max(r.rss_kb_max, s.rss_kb);
  }
  if (!r.thp_enabled_for_process) r.thp_enabled_for_process = in.status_thp_enabled;
  r.anon_folios_start = in.folios_start;
  r.anon_folios_end = in.folios_end;
  r.anon_folios_why = in.folio_walk_why;
}

// The capture's totals from the kernel's counters; without per-process kernel counts of splits,
// the splits of its fork windows.
void totals_of(const CaptureInputs& in, bool kernel_splits, Report& r) {
  r.totals = correlate::totals_from_kernel(in.target, in.dropped);
  r.totals.forks = r.forks.size();
  if (!r.forks.empty() && !kernel_splits) {
    r.totals.thp_splits = 0;
    for (const auto& f : r.forks) r.totals.thp_splits += f.thp_splits;
  }
}

// Each fork's copy stall where the kernel did not time it (with the kernel timing the faults, a fork
// whose parent copied nothing stalled for none; else the copy cost estimate), and its RSS at fork.
void stalls_of_forks(const CaptureInputs& in, bool kernel_splits, std::vector<correlate::ForkEpisode>& forks) {
  for (auto& f : forks) {
    if (kernel_splits && !f.copy_stall_ms) {
      f.copy_stall_ms = 0.0;
      f.copy_stall_source = "kernel";
    }
    if (in.copy_cost_ns && !f.copy_stall_ms) {
      f.copy_stall_ms = static_cast<double>(f.cow_faults) * *in.copy_cost_ns / 1e6;
      f.copy_stall_source = "estimate";
    }
    if (const proc::Sample* at_fork = in.samples.at_or_before(f.fork_ts_ns); at_fork && at_fork->target_alive)
      f.rss_kb_at_fork = at_fork->rss_kb;
  }
}

// The memory section: what the forks copied, how long children lived, the host's and the cgroup's.
MemorySection memory_of(const CaptureInputs& in, const std::vector<correlate::ForkEpisode>& forks) {
  MemorySection m;
  for (const auto& f : forks) {
    m.copied_bytes += (f.cow_faults + f.child_cow_faults) * kPageBytes;
    if (f.child_lifetime_ms) m.fork_window_s += *f.child_lifetime_ms / 1e3;
  }
  const auto& samples = in.samples.samples();
  for (const auto& s : samples)
    if (s.mem_available_bytes)
      m.mem_available_min_bytes = std::min(m.mem_available_min_bytes.value_or(UINT64_MAX), *s.mem_available_bytes);
  if (const auto& end = in.cgroup_end ? in.cgroup_end : in.cgroup_start) {
    CgroupSection c;
    c.version = end->version;
    c.path = end->dir;
    c.limit_bytes = end->limit_bytes;
    c.peak_bytes = end->peak_bytes;
    c.usage_max_bytes = std::max(end->usage_bytes, in.cgroup_start ? in.cgroup_start->usage_bytes : 0);
    for (const auto& s : samples)
      if (s.cgroup_usage_bytes) c.usage_max_bytes = std::max(c.usage_max_bytes, *s.cgroup_usage_bytes);
    if (in.cgroup_start && end->oom_kills >= in.cgroup_start->oom_kills)
      c.oom_kills = end->oom_kills - in.cgroup_start->oom_kills;
    m.cgroup = c;
  }
  return m;
}

// The Redis section: its facts, and its counters' change from the first INFO answered to the last.
RedisSection redis_of(const CaptureInputs& in) {
  RedisSection rs;
  rs.address = *in.redis_address;
  if (in.facts && !in.timeline.empty()) {
    const redis::Snapshot* a = nullptr;
    const redis::Snapshot* b = nullptr;
    for (const auto& s : in.timeline)
      if (s.up) {
        if (!a) a = &s;
        b = &s;
      }
    rs.reachable = a != nullptr;
    rs.version = in.facts->version;
    rs.run_id = in.facts->run_id;
    rs.role = in.facts->role;
    rs.process_id = in.facts->process_id;
    rs.disable_thp = in.facts->disable_thp;
    rs.repl_diskless_sync = in.facts->repl_diskless_sync;
    if (b) {
      rs.latest_fork_usec = b->latest_fork_usec;
      rs.total_forks_delta = b->total_forks - a->total_forks;
      rs.rdb_last_cow_size = b->rdb_last_cow_size;
    }
    if (const auto& f = *in.facts; !f.appendfsync.empty()) {
      rs.persistence = RedisSection::Persistence{f.appendonly, f.appendfsync, f.no_appendfsync_on_rewrite,
                                                 f.aof_rewrite_incremental_fsync, f.rdb_save_incremental_fsync};
      if (b && a->aof_delayed_fsync >= 0 && b->aof_delayed_fsync >= a->aof_delayed_fsync)
        rs.persistence->aof_delayed_fsync_delta = b->aof_delayed_fsync - a->aof_delayed_fsync;
    }
  }
  if (!rs.reachable) rs.error = in.redis_error.empty() ? "no reply" : in.redis_error;
  rs.unanswered = in.redis_outages;
  for (const auto& [command, why] : in.redis_refused) rs.refused.push_back(why);
  return rs;
}

}  // namespace

Report assemble(const CaptureInputs& in) {
  const bool kernel_splits = in.probes.cow_fault.mode == tracer::Mode::fentry;
  correlate::CorrelatorOptions options;
  options.kernel_splits = kernel_splits;
  options.cpu_waits = in.probes.sched.mode != tracer::Mode::unavailable;
  correlate::Correlator correlator(static_cast<uint32_t>(in.pid), options);
  for (const auto& e : in.events) correlator.on_event(e);
  for (const auto& ep : in.final_episodes) correlator.on_final_episode(ep);
  for (const auto& s : in.samples.samples()) correlator.on_sample(s);
  for (const auto& s : in.timeline) correlator.on_snapshot(s);
  correlator.set_repl_diskless_sync(in.facts ? in.facts->repl_diskless_sync : std::string());

  Report r;
  header_of(in, r);
  r.target_exited = correlator.target_exited();
  process_memory_of(in, r);
  r.forks = correlator.take_remaining(true);
  r.replication = replication_of(in, r.forks, correlator.replica_syncs());
  totals_of(in, kernel_splits, r);
  stalls_of_forks(in, kernel_splits, r.forks);
  r.copy_cost_ns = in.copy_cost_ns;
  if (in.sample_every) attribute_forks(in, r.forks);
  main_thread_of_forks(in, r.forks);
  folios_of_forks(in, r.forks);
  if (in.probes.disk.mode != tracer::Mode::unavailable) fsync_of_forks(in, r.forks);
  if (in.latency_probe_hz) {
    client_latency_of_forks(in, r.forks);
    r.client_probe = ClientProbeSection{
        in.latency_probe_hz, in.client_timeout_us, in.probe_missed,
        in.probe_whole ? in.probe_whole : redis::client_latency(in.probe_samples, 0, UINT64_MAX, in.client_timeout_us)};
  }
  r.sample_every = in.sample_every;
  r.copy_samples_dropped = in.copy_samples_dropped;
  r.disk_calls_dropped = in.disk_calls_dropped;
  r.disk_windows_unknown = static_cast<uint64_t>(
      std::count_if(in.disk_windows.begin(), in.disk_windows.end(), [](const auto& d) { return !d.calls; }));
  r.memory = memory_of(in, r.forks);
  if (in.redis_address) r.redis = redis_of(in);
  return r;
}

}  // namespace thptrace::report
