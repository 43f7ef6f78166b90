#include "cli/capture.h"

#include <fmt/core.h>
#include <linux/capability.h>
#include <sys/stat.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "common/caps.h"
#include "common/error.h"
#include "common/log.h"
#include "correlate/correlator.h"
#include "proc/proc.h"
#include "proc/sampler.h"
#include "cli/redis_setup.h"
#include "redis/watcher.h"
#include "report/inputs.h"
#include "report/report.h"
#include "thptrace/version.h"
#include "tracer/tracer.h"

namespace thptrace::cli {
namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop = true; }

}  // namespace

bool stop_requested() { return g_stop; }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking poll returns EINTR at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int run_capture(const CaptureOptions& o) {
  if (!proc::process_exists(o.pid))
    throw FatalError(kExitUsage, fmt::format("no process with pid {} exists.", o.pid));
  const auto status = proc::read_status(o.pid);
  if (!status) throw FatalError(kExitUsage, fmt::format("cannot read /proc/{}/status: no such process.", o.pid));
  if (!o.json_path.empty()) {
    const auto dir = std::filesystem::path(o.json_path).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir))
      throw FatalError(kExitUsage, fmt::format("cannot write the JSON report to {}: {} is not a directory.",
                                               o.json_path, dir.string()));
  }
  const auto redis_setup = prepare_redis(o.redis, o.redis_settings);
  const std::optional<redis::Address> redis_addr =
      redis_setup ? std::optional(redis_setup->address) : std::nullopt;
  if (::access("/sys/kernel/btf/vmlinux", R_OK) != 0)
    throw FatalError(kExitRuntime, "this kernel exposes no BTF (/sys/kernel/btf/vmlinux is missing): thptrace "
                                   "needs a kernel built with CONFIG_DEBUG_INFO_BTF=y.");

  const bool is_redis = status->name.rfind("redis-server", 0) == 0 || redis_addr.has_value();
  const std::string exe = "/proc/" + std::to_string(o.pid) + "/exe";
  const auto modes = tracer::choose_modes(o.force_fallback, is_redis ? exe : std::string());
  tracer::Tracer tracer(modes, {.ringbuf_bytes = o.ringbuf_kb * 1024});
  if (std::string why; !tracer.watch(o.pid, &why))
    throw FatalError(kExitRuntime, fmt::format("cannot watch pid {}: {}.", o.pid, why));
  tracer.attach();
  // The Tracer may have moved a family the kernel refused down its chain.
  tracer::ProbeReport used = tracer.modes();
  if (std::string why; !tracer.attach_libc_fork(o.pid, &why))
    log::debug("{}; fork duration is the clone syscall's", why);
  if (used.redis.mode == tracer::Mode::uprobe) {
    std::string why;
    if (!tracer.attach_redis(o.pid, &why)) {
      log::warn("{}; fork reasons will come from INFO polling", why);
      used.redis = {redis_addr ? tracer::Mode::info_polling : tracer::Mode::unavailable, why};
    } else {
      used.redis.why = why;  // which entry points the binary gave, which labels are left to INFO
    }
  }
  // Counting huge-page allocations hooks every page allocation of the machine: only when the target
  // could be given a huge page. Decided here, while the capabilities to attach are still held.
  const auto system = proc::read_system_info();
  const auto thp = proc::huge_page_eligibility(o.pid, system.thp_enabled);
  tracer::FamilyChoice huge_alloc{tracer::Mode::unavailable, thp.why};
  if (std::string why; thp.eligible && !tracer.attach_huge_alloc_counting(&why)) {
    log::warn("{}; huge page allocations are not counted", why);
    huge_alloc.why = why;
  }
  huge_alloc.mode = tracer.huge_alloc_mode();
  // Everything is loaded and attached: what is left is reading fds already held and /proc of the
  // target (CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH for another user's process) and writing the JSON
  // (CAP_DAC_OVERRIDE, where the operator pointed it).
  // Before Linux 5.19 (the change behind the unpriv_bpf_disabled selftest) kernel.unprivileged_bpf_disabled,
  // set by default on Debian, makes the bpf() syscall refuse every command without CAP_BPF or
  // CAP_SYS_ADMIN, even a read of a map whose fd is held; so the capture keeps CAP_BPF there, or the
  // final counters and episodes could not be read. Tried, not assumed: both are lowered from the
  // effective set, a map read, and raised again.
  std::vector<int> keep = {CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_DAC_OVERRIDE};
  if (set_effective({CAP_BPF, CAP_SYS_ADMIN}, false)) {
    const bool readable = tracer.maps_readable();
    set_effective({CAP_BPF, CAP_SYS_ADMIN}, true);
    if (!readable) {
      log::debug("this kernel refuses map reads without CAP_BPF: keeping it");
      keep.push_back(CAP_BPF);
    }
  }
  if (std::string why; !drop_capabilities_except(keep, &why))
    log::warn("could not drop capabilities after attach ({}); continuing", why);
  if (used.redis.mode == tracer::Mode::info_polling && !redis_addr)
    used.redis = {tracer::Mode::unavailable, "no --redis address to poll"};

  proc::Sampler sampler(o.pid, std::chrono::milliseconds(std::max(o.interval_ms, 10)));
  std::unique_ptr<redis::Watcher> watcher;
  if (redis_addr)
    watcher = std::make_unique<redis::Watcher>(redis::Watcher::Options{
        .address = *redis_addr, .user = o.redis_settings.user, .password = redis_setup->credentials.password,
        .tls = redis::tls_for(redis_setup->credentials, *redis_addr), .interval = std::chrono::milliseconds(o.interval_ms),
        .on_snapshot = {}});

  fmt::print(stderr, "thptrace: tracing pid {} ({}){}; Ctrl-C to stop\n", o.pid, status->name,
             o.duration_s ? fmt::format(" for {:.0f} s", *o.duration_s) : std::string());

  correlate::Correlator correlator(static_cast<uint32_t>(o.pid));
  const char* record_path = std::getenv("THPTRACE_RECORD_INPUTS");
  report::CaptureInputs recorded;
  const auto on_event = [&](const thptrace_event& e) {
    if (record_path) recorded.events.push_back(e);
    correlator.on_event(e);
  };
  const uint64_t start = proc::monotonic_ns();
  const uint64_t deadline = o.duration_s ? start + static_cast<uint64_t>(*o.duration_s * 1e9) : UINT64_MAX;
  while (!g_stop && proc::monotonic_ns() < deadline && !correlator.target_exited()) {
    const int n = tracer.poll(100, on_event);
    if (n < 0 && n != -EINTR) {
      log::warn("ring buffer poll failed: {}", std::strerror(-n));
      break;
    }
  }
  tracer.poll(0, on_event);  // drain what arrived before we stopped
  const uint64_t end = proc::monotonic_ns();

  for (const auto& ep : tracer.episodes_of(o.pid)) {
    if (record_path) recorded.final_episodes.push_back(ep);
    correlator.on_final_episode(ep);
  }
  const auto target_counters = tracer.target(o.pid).value_or(thptrace_target{});
  const uint64_t dropped = tracer.dropped();
  const auto samples = sampler.stop();
  std::vector<redis::Snapshot> timeline;
  std::optional<redis::ServerFacts> facts;
  std::string redis_error;
  if (watcher) {
    timeline = watcher->stop();
    facts = watcher->facts();
    redis_error = watcher->last_error();
  }

  report::Report r;
  r.version = kVersion;
  r.system = system;
  r.pid = o.pid;
  r.comm = status->name;
  r.probes = used;
  r.huge_alloc = huge_alloc;
  r.duration_s = static_cast<double>(end - start) / 1e9;
  r.start_monotonic_ns = start;
  r.target_exited = correlator.target_exited();
  for (const auto& s : samples.samples()) {
    if (!s.target_alive) continue;
    if (!r.thp_enabled_for_process && s.thp_enabled) r.thp_enabled_for_process = s.thp_enabled;
    if (r.anon_huge_pages_kb_start == 0 && &s == &samples.samples().front()) r.anon_huge_pages_kb_start = s.anon_huge_pages_kb;
    r.anon_huge_pages_kb_max = std::max(r.anon_huge_pages_kb_max, s.anon_huge_pages_kb);
    r.anon_huge_pages_kb_end = s.anon_huge_pages_kb;
    r.rss_kb_max = std::max(r.rss_kb_max, s.rss_kb);
  }
  if (!r.thp_enabled_for_process) r.thp_enabled_for_process = status->thp_enabled;
  r.forks = correlator.finish(samples, timeline, facts ? facts->repl_diskless_sync : std::string(),
                              used.cow_fault.mode == tracer::Mode::fentry);
  r.totals = correlate::totals_from_kernel(target_counters, dropped);
  r.totals.forks = r.forks.size();
  if (!r.forks.empty() && used.cow_fault.mode != tracer::Mode::fentry) {
    r.totals.thp_splits = 0;
    for (const auto& f : r.forks) r.totals.thp_splits += f.thp_splits;
  }
  if (redis_addr) {
    report::RedisSection rs;
    rs.address = redis_addr->str();
    if (facts && !timeline.empty()) {
      const redis::Snapshot* a = nullptr;
      const redis::Snapshot* b = nullptr;
      for (const auto& s : timeline)
        if (s.up) {
          if (!a) a = &s;
          b = &s;
        }
      rs.reachable = a != nullptr;
      rs.version = facts->version;
      rs.process_id = facts->process_id;
      rs.disable_thp = facts->disable_thp;
      rs.repl_diskless_sync = facts->repl_diskless_sync;
      if (b) {
        rs.latest_fork_usec = b->latest_fork_usec;
        rs.total_forks_delta = b->total_forks - a->total_forks;
        rs.rdb_last_cow_size = b->rdb_last_cow_size;
      }
    }
    if (!rs.reachable) rs.error = redis_error.empty() ? "no reply" : redis_error;
    r.redis = rs;
  }

  if (record_path) {
    recorded.version = kVersion;
    recorded.system = system;
    recorded.pid = o.pid;
    recorded.comm = status->name;
    recorded.status_thp_enabled = status->thp_enabled;
    recorded.probes = used;
    recorded.huge_alloc = huge_alloc;
    recorded.start_ns = start;
    recorded.end_ns = end;
    recorded.target = target_counters;
    recorded.dropped = dropped;
    recorded.samples = samples;
    if (redis_addr) recorded.redis_address = redis_addr->str();
    recorded.timeline = timeline;
    recorded.facts = facts;
    recorded.redis_error = redis_error;
    std::ofstream(record_path) << report::inputs_to_json(recorded).dump(1) << "\n";
  }
  std::cout << report::to_text(r) << std::flush;
  if (!o.json_path.empty()) {
    std::string error;
    if (!report::write_json_file(r, o.json_path, &error)) {
      log::warn("{}", error);
      return kExitRuntime;
    }
  }
  return kExitOk;
}

}  // namespace thptrace::cli
