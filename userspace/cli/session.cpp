// SPDX-License-Identifier: Apache-2.0
#include "cli/session.h"

#include <fmt/core.h>
#include <linux/capability.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "cli/copy_cost.h"
#include "common/btf.h"
#include "common/caps.h"
#include "common/error.h"
#include "common/log.h"
#include "common/signals.h"
#include "common/text.h"
#include "correlate/correlator.h"
#include "proc/container.h"
#include "proc/resolve.h"
#include "redis/locate.h"
#include "report/disk_windows.h"
#include "report/retention.h"
#include "thptrace/version.h"

namespace thptrace::cli {

namespace {

// 16 MiB written and copied five times: tens of ms before the capture starts here, about a second
// where faults are dearest (docs/development/measurements.md).
constexpr size_t kCopyCostPages = 4096;
constexpr int kCopyCostRounds = 5;
// How often the time series are gathered from their threads and thinned.
constexpr uint64_t kThinEveryNs = 10'000'000'000;

int64_t realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The capture's time series (the /proc samples, the INFO snapshots, the probe's requests, the
// counters), gathered from their threads every kThinEveryNs and thinned outside the forks' windows
// (report/retention.h); the probe's figures over the whole capture kept as they come.
class SeriesKeeper {
 public:
  SeriesKeeper(report::CaptureInputs& in, proc::Sampler& sampler, redis::Watcher* watcher, redis::LatencyProbe* probe,
               int idle_poll_ms)
      : in_(in),
        sampler_(sampler),
        watcher_(watcher),
        probe_(probe),
        retention_(static_cast<uint32_t>(in.pid), in.start_ns,
                   {.margin_ns = std::max<uint64_t>(report::RetentionOptions{}.margin_ns,
                                                    static_cast<uint64_t>(idle_poll_ms) * 2'000'000)}),
        probe_totals_(in.client_timeout_us),
        next_thin_ns_(in.start_ns + kThinEveryNs) {}

  void on_event(const thptrace_event& e) { retention_.on_event(e); }
  // Gathers and thins, when due.
  void tick(uint64_t now_ns) {
    if (now_ns < next_thin_ns_) return;
    next_thin_ns_ = now_ns + kThinEveryNs;
    gather();
    probe_let_go_ += report::thin_series(retention_, in_, now_ns).probe_samples;
  }
  // Stops the sampler, the watcher and the probe, and gathers what they had left.
  void finish() {
    gather();
    proc::SampleSeries rest = sampler_.stop();
    for (auto& s : rest.edit()) in_.samples.add(std::move(s));
    if (probe_) {
      add_probe_samples(probe_->stop());
      if (probe_let_go_) in_.probe_whole = probe_totals_.figures();
    }
    if (watcher_)
      for (auto& s : watcher_->stop()) in_.timeline.push_back(std::move(s));
  }

 private:
  void gather() {
    proc::SampleSeries taken = sampler_.take();
    for (auto& s : taken.edit()) in_.samples.add(std::move(s));
    if (watcher_)
      for (auto& s : watcher_->take()) in_.timeline.push_back(std::move(s));
    if (probe_) add_probe_samples(probe_->take());
  }
  void add_probe_samples(const std::vector<redis::ProbeSample>& samples) {
    for (const auto& s : samples) {
      probe_totals_.add(s);
      in_.probe_samples.push_back(s);
    }
  }

  report::CaptureInputs& in_;
  proc::Sampler& sampler_;
  redis::Watcher* watcher_;
  redis::LatencyProbe* probe_;
  report::Retention retention_;
  redis::LatencyTotals probe_totals_;
  size_t probe_let_go_ = 0;
  uint64_t next_thin_ns_;
};

// The host's folio counters by size (Linux 6.8+), around each fork: at the start, as each fork's
// record arrives, once each exited child's memory is gone, and at the end. A child's exit record can
// come before its memory is freed (6.16+ trace the exit before exit_mm): the reading waits until the
// child is a zombie or gone, checked after each poll. The start's reading tells whether the kernel
// has them; without, nothing is read again.
class FolioWatch {
 public:
  explicit FolioWatch(std::vector<report::FolioReading>& readings) : readings_(readings) {
    read();
    on_ = !readings_.back().counters.empty();
    if (!on_) readings_.clear();
  }
  void on_fork() {
    if (on_) read();
  }
  void on_child_exit(pid_t child) {
    if (on_) exits_unread_.push_back(child);
  }
  void after_poll() {
    if (std::erase_if(exits_unread_, released) > 0) read();
  }
  // The end's reading, after a moment for the memory of a child that exited at the very end to go.
  void finish() {
    for (int i = 0; i < 50 && !std::all_of(exits_unread_.begin(), exits_unread_.end(), released); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (on_) read();
  }

 private:
  // A zombie has freed its memory (exit_mm comes before exit_notify); a child not yet a zombie may
  // have let go of its mm (statm 0) and not yet freed it.
  static bool released(pid_t child) { return !proc::process_exists(child); }
  void read() { readings_.push_back({proc::monotonic_ns(), proc::read_folio_counters()}); }

  std::vector<report::FolioReading>& readings_;
  bool on_ = false;
  std::vector<pid_t> exits_unread_;
};

}  // namespace

CaptureTarget validate_capture(const CaptureOptions& o) {
  auto redis = prepare_redis(o.redis, o.redis_settings);
  const pid_t pid = redis ? resolve_redis_target(*redis, o.redis_settings.user, o.pid) : o.pid;
  if (!proc::process_exists(pid)) {
    if (const auto st = proc::read_status(pid); st && st->exited)
      throw FatalError(kExitUsage, fmt::format("process {} ({}) has exited; its parent has not reaped it yet.", pid,
                                               text::printable(st->name)));
    throw FatalError(kExitUsage, fmt::format("no process with pid {} exists.", pid));
  }
  const auto status = proc::read_status(pid);
  if (!status) throw FatalError(kExitUsage, fmt::format("cannot read /proc/{}/status: no such process.", pid));
  for (const auto& [path, what] : {std::pair{o.json_path, "the JSON report"}, std::pair{o.svg_path, "the timeline"}}) {
    if (path.empty()) continue;
    const auto dir = std::filesystem::path(path).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir))
      throw FatalError(kExitUsage,
                       fmt::format("cannot write {} to {}: {} is not a directory.", what, path, dir.string()));
  }
  CaptureTarget t{pid, *status, std::move(redis)};
  require_vmlinux_btf();
  return t;
}

CaptureSession::CaptureSession(const CaptureOptions& o, const CaptureTarget& target)
    : duration_s_(o.duration_s), read_counters_(!o.svg_path.empty()) {
  inputs_.version = kVersion;
  inputs_.pid = target.pid;
  if (const auto ns =
          proc::parse_nspid(proc::read_file("/proc/" + std::to_string(target.pid) + "/status").value_or(""));
      !ns.empty())
    inputs_.pid_in_namespace = ns.back();
  inputs_.comm = target.status.name;
  inputs_.container = proc::container_names(target.pid);
  inputs_.status_thp_enabled = target.status.thp_enabled;
  if (target.redis) inputs_.redis_address = target.redis->address.str();
  attach(o, target);
  inputs_.cgroup_start = proc::read_memory_cgroup(target.pid);
  idle_poll_ms_ = o.idle_interval_ms;
  sampler_ = std::make_unique<proc::Sampler>(target.pid, std::chrono::milliseconds(o.interval_ms),
                                             std::chrono::milliseconds(o.idle_interval_ms));
  // The poller parses what the network sends: its thread holds nothing, but for a unix socket what
  // connecting to another user's socket file takes, raised only around the connect.
  const std::vector<int> watcher_caps =
      target.redis && target.redis->address.is_unix() ? std::vector<int>{CAP_DAC_OVERRIDE} : std::vector<int>{};
  if (target.redis)
    watcher_ = in_thread_holding("thptrace-watch", watcher_caps, [&] {
      return std::make_unique<redis::Watcher>(
          redis::Watcher::Options{.address = target.redis->address,
                                  .user = o.redis_settings.user,
                                  .password = target.redis->credentials.password,
                                  .tls = redis::tls_for(target.redis->credentials, target.redis->address),
                                  .interval = std::chrono::milliseconds(o.interval_ms),
                                  .idle_interval = std::chrono::milliseconds(o.idle_interval_ms),
                                  .on_snapshot = {}});
    });
  if (target.redis && o.latency_probe_hz) {
    inputs_.latency_probe_hz = o.latency_probe_hz;
    inputs_.client_timeout_us = o.client_timeout_us;
    latency_probe_ = in_thread_holding("thptrace-probe", watcher_caps, [&] {
      return std::make_unique<redis::LatencyProbe>(redis::LatencyProbe::Options{
          .routes = {{target.redis->address, redis::tls_for(target.redis->credentials, target.redis->address)}},
          .connect = {.user = o.redis_settings.user,
                      .password = target.redis->credentials.password,
                      .timeout = std::chrono::milliseconds(2000)},
          .hz = o.latency_probe_hz});
    });
  }
}

void CaptureSession::attach(const CaptureOptions& o, const CaptureTarget& target) {
  const bool is_redis = target.status.name.rfind("redis-server", 0) == 0 || target.redis.has_value();
  const std::string exe = "/proc/" + std::to_string(target.pid) + "/exe";
  const auto modes = tracer::choose_modes(o.load.force_fallback, is_redis ? exe : std::string(), o.load.disk);
  tracer_ = std::make_unique<tracer::Tracer>(modes, tracer::TracerOptions{.ringbuf_bytes = o.load.ringbuf_kb * 1024,
                                                                          .sample_every = o.sample_copies,
                                                                          .dwarf_stacks = o.unwind == Unwind::dwarf});
  inputs_.sample_every = o.sample_copies;
  if (o.sample_copies)
    resolver_ = std::make_unique<symbolize::Resolver>(target.pid, symbolize::ResolverOptions{o.debuginfod});
  // Where the kernel does not time the faults, a fork's copy stall is estimated from a copy's cost
  // on this host, measured now, before any program is attached.
  if (tracer_->modes().cow_fault.mode != tracer::Mode::fentry) {
    std::string why;
    inputs_.copy_cost_ns = measure_copy_ns(kCopyCostPages, kCopyCostRounds, &why);
    if (!inputs_.copy_cost_ns) log::debug("the cost of a copy was not measured ({}): copy stalls unknown", why);
  }
  tracer_->attach();
  const tracer::Followed followed = tracer_->follow(target.pid, target.redis.has_value());
  if (!followed.watched)
    throw FatalError(kExitRuntime, fmt::format("cannot watch pid {}: {}.", target.pid, followed.why));
  if (!followed.libc_fork) log::debug("{}; fork duration is the clone syscall's", followed.fork_timing);
  if (tracer_->modes().redis.mode == tracer::Mode::uprobe && followed.redis.mode != tracer::Mode::uprobe)
    log::warn("{}; fork reasons will come from INFO polling", followed.redis.why);
  // Counting huge-page allocations hooks every page allocation of the machine: only when the target
  // could be given a huge page. Decided here, while the capabilities to attach are still held.
  inputs_.system = proc::read_system_info();
  inputs_.system.folio_modes = proc::read_folio_modes();
  walk_folios_at_start(target.pid);
  const auto thp = proc::huge_page_eligibility(target.pid, inputs_.system.thp_enabled);
  tracer::FamilyChoice huge_alloc{tracer::Mode::unavailable, thp.why};
  if (std::string why; thp.eligible && !tracer_->attach_huge_alloc_counting(&why)) {
    log::warn("{}; huge page allocations are not counted", why);
    huge_alloc.why = why;
  }
  huge_alloc.mode = tracer_->huge_alloc_mode();
  // Everything is loaded and attached but the sched family, attached at each fork (it runs at every
  // context switch of the machine, tracer/tracer.h): what is left is that (CAP_BPF),
  // reading fds already held and /proc of the target (CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH for another
  // user's process) and writing the JSON (CAP_DAC_OVERRIDE, where the operator pointed it).
  // Before Linux 5.19 (the change behind the unpriv_bpf_disabled selftest) kernel.unprivileged_bpf_disabled,
  // set by default on Debian, makes the bpf() syscall refuse every command without CAP_BPF or
  // CAP_SYS_ADMIN, even a read of a map whose fd is held; so the capture keeps CAP_BPF there, or the
  // final counters and episodes could not be read. Tried, not assumed: both are lowered from the
  // effective set, a map read, and raised again.
  std::vector<int> keep = {CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_DAC_OVERRIDE};
  const bool sched = tracer_->modes().sched.mode != tracer::Mode::unavailable;
  if (sched) keep.push_back(CAP_BPF);  // attaching a loaded program; CAP_PERFMON was for loading it
  if (!sched && set_effective({CAP_BPF, CAP_SYS_ADMIN}, false)) {
    const bool readable = tracer_->maps_readable();
    set_effective({CAP_BPF, CAP_SYS_ADMIN}, true);
    if (!readable) {
      log::debug("this kernel refuses map reads without CAP_BPF: keeping it");
      keep.push_back(CAP_BPF);
    }
  }
  if (std::string why; !drop_capabilities_except(keep, &why))
    log::warn("could not drop capabilities after attach ({}); continuing", why);
  inputs_.probes = tracer_->modes();
  inputs_.probes.redis = followed.redis;  // the family as it serves this process
  inputs_.huge_alloc = huge_alloc;
}

void CaptureSession::stamp_start() {
  inputs_.start_ns = proc::monotonic_ns();
  inputs_.start_realtime_ns = realtime_ns();
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) inputs_.hostname = text::printable(host);
  inputs_.boot_id = text::printable(proc::read_file("/proc/sys/kernel/random/boot_id", 64).value_or("").substr(0, 36));
}

void CaptureSession::read_counters(uint64_t now_ns) {
  if (!read_counters_ || now_ns < next_counters_ns_) return;
  next_counters_ns_ = now_ns + report::kCounterIntervalNs;
  if (const auto t = tracer_->target(inputs_.pid))
    inputs_.counters.push_back({now_ns, t->faults.cow, t->child_cow_faults, t->faults.thp_splits});
}

// A signal ends the wait at once (EINTR: the handlers do not restart it), an event as soon as it is in
// the ring. Copy samples wake no one until their ring is half full, so while a child lives (and copies
// are sampled) the rings are read every 100 ms to resolve the samples while the process still has its
// mappings.
int CaptureSession::poll_ms(bool busy, uint64_t deadline_ns) const {
  uint64_t ms = read_counters_ ? report::kCounterIntervalNs / 1'000'000
                               : static_cast<uint64_t>(resolver_ && busy ? 100 : idle_poll_ms_);
  const uint64_t now = proc::monotonic_ns();
  if (deadline_ns != UINT64_MAX) ms = std::min(ms, deadline_ns > now ? (deadline_ns - now) / 1'000'000 + 1 : 0);
  return static_cast<int>(ms);
}

// Resolved while the process lives: its maps and its files are gone once it exits.
void CaptureSession::resolve_samples() {
  for (const auto& r : tracer_->take_copy_samples())
    if (const auto& s = r.sample; s.tgid == static_cast<uint32_t>(inputs_.pid) && resolver_)
      inputs_.copy_samples.push_back(
          resolver_->resolve(s.ts_ns, s.address, s.stack, s.frames, r.user ? &*r.user : nullptr));
}

report::CaptureInputs CaptureSession::run() {
  fmt::print(stderr, "thptrace: tracing pid {} ({}){}; Ctrl-C to stop\n", inputs_.pid, text::printable(inputs_.comm),
             duration_s_ ? fmt::format(" for {:.0f} s", *duration_s_) : std::string());
  const auto pid = static_cast<uint32_t>(inputs_.pid);
  bool target_exited = false;
  // Whether a fork child of the target lives: the correlator's open children, as the daemon reads
  // them. The report's own correlator replays the recorded events at the end (report::assemble);
  // this one only keeps the pace, and lets each fork go once it has settled.
  correlate::Correlator pace(
      pid, {.kernel_splits = false, .redis_polled = false, .repl_diskless_sync = {}, .bounded_history = true});
  const auto busy = [&pace] { return !pace.open_children().empty(); };
  report::DiskWindows disk(pid, inputs_);
  stamp_start();
  next_counters_ns_ = inputs_.start_ns;
  SeriesKeeper series(inputs_, *sampler_, watcher_.get(), latency_probe_.get(), idle_poll_ms_);
  FolioWatch folios(inputs_.folio_readings);
  const auto on_event = [&](const thptrace_event& e) {
    if (disk.on_event(e)) return;
    // A stall's and a collapse's counts are the kernel's (the target's and the episodes' counters):
    // their records carry nothing else the report reads, and under memory pressure they come by the
    // thousand. What is kept grows with the forks only.
    if (e.type == EV_STALL || e.type == EV_COLLAPSE) return;
    series.on_event(e);
    inputs_.events.push_back(e);
    pace.on_event(e);
    if (e.tgid != pid) return;
    target_exited = target_exited || e.type == EV_TARGET_EXIT;
    // The mappings the fork's copies will fall in.
    if (e.type == EV_FORK && resolver_) resolver_->refresh();
    if (e.type == EV_FORK) folios.on_fork();
    if (e.type == EV_CHILD_EXIT) folios.on_child_exit(static_cast<pid_t>(e.child_pid));
    if (e.type != EV_FORK && e.type != EV_CHILD_EXIT && e.type != EV_TARGET_EXIT) return;
    // Rounds go slowly while no fork is in progress: a fork and a child's exit each get a poll and a
    // sample at once (the reason of a fork without uprobes is read from the polls around it), and
    // they go fast while a child lives.
    const bool fast = e.type != EV_TARGET_EXIT && busy();
    sampler_->wake(fast);
    if (watcher_) watcher_->wake(fast);
  };
  const uint64_t deadline = duration_s_ ? inputs_.start_ns + static_cast<uint64_t>(*duration_s_ * 1e9) : UINT64_MAX;
  while (!stop_requested() && proc::monotonic_ns() < deadline && !target_exited) {
    read_counters(proc::monotonic_ns());
    const int n = tracer_->poll(poll_ms(busy(), deadline), on_event);
    pace.take_settled(proc::monotonic_ns());
    disk.settle(proc::monotonic_ns());
    series.tick(proc::monotonic_ns());
    folios.after_poll();
    resolve_samples();
    if (n < 0 && n != -EINTR) {
      log::warn("ring buffer poll failed: {}", std::strerror(-n));
      break;
    }
  }
  tracer_->poll(0, on_event);  // drain what arrived before we stopped
  resolve_samples();
  inputs_.copy_samples_dropped = tracer_->copy_samples_dropped();
  next_counters_ns_ = 0;
  read_counters(proc::monotonic_ns());
  inputs_.end_ns = proc::monotonic_ns();
  inputs_.end_realtime_ns = realtime_ns();
  inputs_.final_episodes = tracer_->episodes_of(inputs_.pid);
  disk.finish(inputs_.final_episodes);
  inputs_.target = tracer_->target(inputs_.pid).value_or(thptrace_target{});
  inputs_.dropped = tracer_->dropped();
  series.finish();
  folios.finish();
  take_final_figures(target_exited);
  return std::move(inputs_);
}

// Opened and walked once before the capabilities are dropped (pagemap shows frames to a reader that
// held CAP_SYS_ADMIN at its open, kpageflags is root's), walked again at the end through the same files.
void CaptureSession::walk_folios_at_start(pid_t pid) {
  std::string why;
  folio_walker_ = proc::FolioWalker::open(pid, &why);
  if (folio_walker_) inputs_.folios_start = folio_walker_->walk(&why);
  if (!inputs_.folios_start) {
    inputs_.folio_walk_why = text::printable(why);
    log::debug("the target's memory by folio size is not read: {}", why);
  }
}

void CaptureSession::take_final_figures(bool target_exited) {
  if (folio_walker_ && !target_exited) {
    std::string why;
    inputs_.folios_end = folio_walker_->walk(&why);
    if (!inputs_.folios_end) log::debug("the target's memory by folio size at the end is not read: {}", why);
  }
  inputs_.cgroup_end = proc::read_memory_cgroup(inputs_.pid);
  // The sched family attaches at each fork: where it could not, its figures are not in the report.
  if (const auto& why = tracer_->sched_refused(); !why.empty())
    inputs_.probes.sched = {tracer::Mode::unavailable, inputs_.probes.sched.why + "; at a fork: " + why};
  if (latency_probe_) {
    inputs_.probe_missed = latency_probe_->missed();
    inputs_.probe_dropped = latency_probe_->dropped();
  }
  if (watcher_) {
    inputs_.facts = watcher_->facts();
    inputs_.redis_error = watcher_->last_error();
    inputs_.redis_outages = watcher_->outages();
    inputs_.redis_refused = watcher_->refused_commands();
  }
}

}  // namespace thptrace::cli
