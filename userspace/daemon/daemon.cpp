// SPDX-License-Identifier: Apache-2.0
#include "daemon/daemon.h"

#include <fmt/core.h>
#include <linux/capability.h>
#include <malloc.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "common/btf.h"
#include "common/caps.h"
#include "common/error.h"
#include "common/log.h"
#include "common/signals.h"
#include "daemon/discovery.h"
#include "proc/container.h"
#include "proc/folios.h"
#include "proc/proc.h"
#include "proc/sampler.h"

namespace thptrace::daemon {
namespace {

constexpr auto kReadEvery = std::chrono::seconds(1);
constexpr auto kDiscoverEvery = std::chrono::seconds(5);
const std::vector<int> kDaemonCapabilities = {CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH};
// setns(CLONE_NEWNET) and opening another process's /proc/PID/ns/net and /proc/PID/root.
const std::vector<int> kNetnsCapabilities = {CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH};

// A poller's thread parses what the network sends: it holds nothing, but for a server in another
// network namespace what entering it takes, raised only around the setns (redis/transport.cpp).
std::unique_ptr<redis::Watcher> start_watcher(redis::Watcher::Options o) {
  const std::vector<int> caps = o.netns_pid ? kNetnsCapabilities : std::vector<int>{};
  return in_thread_holding("thptrace-watch", caps, [&] { return std::make_unique<redis::Watcher>(std::move(o)); });
}

}  // namespace

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {
  {
    std::string error;
    auto logins = Logins::load(options_.redis_settings, options_.redis_auth, options_.discover, &error);
    if (!logins) throw FatalError(kExitUsage, error);
    logins_ = std::move(*logins);
  }
  require_vmlinux_btf();
  // The uprobes are loaded whenever they may be used: which entry points a process gives is decided
  // per process when its uprobes are attached (Debian's redis-server, Valkey, a from-source build).
  modes_ = tracer::choose_modes(options_.load.force_fallback, tracer::RedisScope::each_process(), options_.load.disk);
  tracer_ =
      std::make_unique<tracer::Tracer>(modes_, tracer::TracerOptions{.ringbuf_bytes = options_.load.ringbuf_kb * 1024,
                                                                     .max_targets = options_.max_targets,
                                                                     .max_episodes = options_.max_episodes});
  modes_ = tracer_->modes();  // the Tracer may have moved a family the kernel refused down its chain
  tracer_->attach();
  exporter_ = std::make_unique<Exporter>(metrics_, modes_);
  if (const char* path = std::getenv("THPTRACE_RECORD_INPUTS")) exporter_->record_to(path);
  // Loaded and attached, and no thread started yet (each thread holds its own capabilities, and a new
  // one inherits its creator's). What is left: attaching uprobes to Redis processes as they (re)start
  // (CAP_BPF, CAP_PERFMON; CAP_SYS_ADMIN too for another user's process on recent kernels, and for
  // setns into a container's network namespace), and reading /proc of other users' processes
  // (CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH). Everything else goes, from the bounding set too.
  if (std::string why; !drop_capabilities_except(kDaemonCapabilities, &why))
    log::warn("could not drop capabilities after attach ({}); continuing", why);
  for (const auto& text : options_.redis) {
    const auto addr = redis::parse_address(text);
    if (!addr) throw FatalError(kExitUsage, "--redis " + text + ": expected " + redis::kAddressForms + ".");
    add_target({.label = addr->str(),
                .routes = {{*addr, redis::tls_for(logins_.credentials(), *addr)}},
                .auth_rule = logins_.match(addr->str(), {}).index},
               0);
  }
  for (const int pid : options_.pids) {
    const auto st = proc::read_status(pid);
    if (!st) throw FatalError(kExitUsage, fmt::format("no process with pid {} exists.", pid));
    add_target({.label = st->name}, pid);
  }
  metrics_.serve(options_.listen, options_.web);
}

Daemon::~Daemon() {
  retiring_.clear();  // each waits for its watcher's stop
  // A watcher may be inside a connect that tries several routes, each with its own timeout: stop
  // them all at once, not one after the other (--discover may watch dozens).
  std::vector<std::thread> stopping;
  for (auto& t : targets_) {
    if (t->watcher) stopping.emplace_back([w = t->watcher.get()] { w->stop(); });
    if (t->probe) stopping.emplace_back([p = t->probe.get()] { p->stop(); });
  }
  for (auto& s : stopping) s.join();
}

Daemon::Target& Daemon::add_target(Identity who, pid_t pid) {
  auto t = std::make_unique<Target>();
  const bool redis_side = !who.routes.empty();
  if (redis_side) who.address = who.routes.front().address;
  who.id = exporter_->add_target(who.label, redis_side);
  t->who = std::move(who);
  if (t->who.auth_rule >= 0)
    log::debug("{}: sent the login of --redis-auth {}", t->who.label, logins_.rule_text(t->who.auth_rule));
  if (redis_side && !pid) t->locate.await_first();
  if (pid) follow_pid(*t, pid);
  if (redis_side) start_redis_side(*t);
  targets_.push_back(std::move(t));
  return *targets_.back();
}

void Daemon::start_redis_side(Target& t) {
  const std::vector<redis::Route>& routes = t.who.routes;
  const pid_t netns_pid = t.who.netns_pid;
  const Login login = logins_.of(t.who.auth_rule);
  const Exporter::TargetId id = t.who.id;
  t.watcher = start_watcher(
      redis::Watcher::Options{.address = routes.front().address,
                              .user = login.user,
                              .password = login.password,
                              .tls = routes.front().tls,
                              .netns_pid = netns_pid,
                              .outside = routes.front().outside,
                              .withheld = routes.front().withheld,
                              .more_routes = std::vector<redis::Route>(routes.begin() + 1, routes.end()),
                              .interval = std::chrono::milliseconds(options_.poll_interval_ms),
                              .idle_interval = std::chrono::milliseconds(options_.idle_poll_interval_ms),
                              .idle_extras_interval = kIdleExtrasEvery,
                              .keep_history = false,
                              .on_snapshot = [this, id](const redis::Snapshot& s) { inbox_.post(id, s); }});
  if (!options_.latency_probe_hz) return;
  // One thread sends the requests of every target in our own network namespace, holding nothing;
  // another those of the targets in a container's, holding what entering it needs (permitted,
  // raised only by a connect's own short-lived thread around setns).
  auto& loop = probe_loops_[netns_pid ? 1 : 0];
  if (!loop)
    loop = in_thread_holding("thptrace-probe", netns_pid ? kNetnsCapabilities : std::vector<int>{},
                             [] { return std::make_shared<redis::ProbeLoop>(); });
  t.probe = std::make_unique<redis::LatencyProbe>(
      redis::LatencyProbe::Options{.routes = routes,
                                   .connect = {.user = login.user,
                                               .password = login.password,
                                               .timeout = std::chrono::milliseconds(2000),
                                               .ping = routes.size() > 1},
                                   .netns_pid = netns_pid,
                                   .hz = options_.latency_probe_hz,
                                   .idle_hz = options_.latency_probe_idle_hz},
      loop);
}

void Daemon::follow_pid(Target& t, pid_t pid) {
  if (t.pid == pid) return;
  if (t.pid) {
    tracer_->unwatch(t.pid);
    tracer_->detach_uprobes(t.pid);
    log::debug("{}: pid {} replaced by {}", t.who.label, t.pid, pid);
  }
  t.pid = pid;
  t.sample = {};
  t.sample_cadence.reset();
  exporter_->follow(t.who.id, pid, pid ? proc::container_names(pid) : proc::ContainerNames{});
  t.untraced = false;
  metrics_.set_untraced(t.who.label, false);
  if (pid) trace_pid(t);
}

void Daemon::lose_process(Target& t) {
  follow_pid(t, 0);
  if (t.who.discovered) {
    t.exited = true;
  } else if (t.watcher) {
    t.locate.await_first();
  }
  t.locate.lost_ns = proc::monotonic_ns();
  t.locate.pacing.process_gone();
}

void Daemon::remove_exited() {
  std::erase_if(retiring_,
                [](const auto& f) { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
  std::erase_if(targets_, [this](std::unique_ptr<Target>& t) {
    if (!t->exited) return false;
    log::warn("{}: the discovered server exited; no longer watched", t->who.label);
    exporter_->remove_target(t->who.id);
    if (t->watcher) retiring_.push_back(std::async(std::launch::async, [w = std::move(t->watcher)] { w->stop(); }));
    if (t->probe) retiring_.push_back(std::async(std::launch::async, [p = std::move(t->probe)] { p->stop(); }));
    return true;
  });
}

void Daemon::resolve(Target& t, int64_t process_id) {
  // A poll answered just before a restart can arrive after the old process's exit; a server may
  // also change its process_id at every poll: either way one search at a time, a few seconds apart.
  if (!t.locate.pacing.try_start(std::chrono::steady_clock::now())) return;
  const Login login = logins_.of(t.who.auth_rule);
  Locator::Request r{.target = t.who.id,
                     .tcp = {},
                     .connect = {.user = login.user,
                                 .password = login.password,
                                 .timeout = std::chrono::milliseconds(2000),
                                 .netns_pid = t.who.netns_pid},
                     .process_id = process_id};
  const auto tcp =
      std::find_if(t.who.routes.begin(), t.who.routes.end(), [](const auto& r) { return !r.address.is_unix(); });
  if (tcp != t.who.routes.end()) r.tcp = *tcp;
  if (tcp != t.who.routes.end() && !tcp->withheld.empty()) r.connect.user = r.connect.password = "";
  locator_.submit(std::move(r));
}

void Daemon::on_located(const Locator::Result& r) {
  Target* tp = target_by_id(r.target);
  if (!tp || tp->exited) return;
  Target& t = *tp;
  t.locate.pacing.finished();
  follow_located(t, r);
  // Found or not, the polls held for this search go out now, after the follow.
  export_polls(t, t.locate.release());
}

void Daemon::export_polls(const Target& t, const std::vector<redis::Snapshot>& polls) {
  for (const auto& s : polls) exporter_->on_snapshot(t.who.id, s);
}

void Daemon::follow_located(Target& t, const Locator::Result& r) {
  proc::Resolution found = r.found;
  if (found.pid && t.who.discovered && t.pid && found.pid != t.pid)
    found = {
        .pid = 0,
        .how = {},
        .error = fmt::format("the server behind its routes is pid {}, not pid {} that discovery found; not followed",
                             found.pid, t.pid)};
  if (!found.pid) {
    switch (t.locate.failed(found.error)) {
      case TargetLocate::Tell::warn: log::warn("{}: {}", t.who.label, found.error); break;
      case TargetLocate::Tell::debug: log::debug("{}: {}", t.who.label, found.error); break;
      case TargetLocate::Tell::nothing: break;
    }
    return;
  }
  t.locate.found();
  t.locate.resolved_process_id = r.process_id;
  log::debug("{}: host pid {}: {}", t.who.label, found.pid, found.how);
  follow_pid(t, found.pid);
}

Daemon::Target* Daemon::target_of(pid_t tgid) {
  for (auto& t : targets_)
    if (t->pid == tgid) return t.get();
  return nullptr;
}

Daemon::Target* Daemon::target_by_id(Exporter::TargetId id) {
  for (auto& t : targets_)
    if (t->who.id == id) return t.get();
  return nullptr;
}

void Daemon::drain_snapshots() {
  for (auto& [id, s] : inbox_.take()) {
    Target* t = target_by_id(id);
    if (!t || t->exited) continue;
    if (s.up) consider_locating(*t, s);
    // Until the first search for its process has its result, the target's polls wait for it (a
    // bounded few, then all go out in order): exported once its process is traced, so that a
    // server a scrape shows up is traced already. Polls while no search runs go out at once; a
    // server that first refused us (its polls all down) is held from its first answer on.
    if (t->locate.hold(s)) continue;
    export_polls(*t, t->locate.take_held());
    exporter_->on_snapshot(t->who.id, s);
  }
}

void Daemon::consider_locating(Target& t, const redis::Snapshot& s) {
  // A server discovered in /proc is reached by its own listeners: the first INFO's process_id is
  // that process's (in its own PID namespace).
  if (t.who.discovered && t.pid && !t.locate.resolved_process_id) {
    t.locate.resolved_process_id = s.process_id;
    return;
  }
  // No process yet (never found, or exited), or a new process_id (a restart): find the server's
  // host pid. INFO's process_id is its pid in its own namespace (1 in a container, where it does
  // not change across a restart; the exit record clears pid then). A poll sent before the exit was
  // seen was answered by the process that exited: searching for it would only fail, and hold the
  // search for its successor a few seconds (LocatePacing).
  if (!t.pid && s.sent_ns && s.sent_ns <= t.locate.lost_ns) return;
  if (!t.pid || s.process_id != t.locate.resolved_process_id) resolve(t, s.process_id);
}

void Daemon::on_event(const thptrace_event& e) {
  Target* t = target_of(static_cast<pid_t>(e.tgid));
  if (!t) return;
  exporter_->on_event(t->who.id, e);
  // Polls go slowly while no fork is in progress: a fork, a child's exit and the server's exit each
  // get a poll at once (the reason of a fork without uprobes is read from the polls around it).
  if (e.type == EV_FORK && t->probe) t->probe->fork_began(e.start_ns ? e.start_ns : e.ts_ns);
  if (e.type == EV_FORK || e.type == EV_CHILD_EXIT) pace_poller(*t);
  if (e.type == EV_TARGET_EXIT && t->watcher) t->watcher->wake(false);
  if (e.type == EV_TARGET_EXIT) {
    log::debug("{}: pid {} exited", t->who.label, t->pid);
    lose_process(*t);
  }
}

void Daemon::pace_poller(Target& t) {
  const bool busy = !exporter_->open_children(t.who.id).empty();
  if (t.watcher) t.watcher->wake(busy);
  if (t.probe) t.probe->set_busy(busy);
}

void Daemon::read_targets() {
  Exporter::Readings h;
  h.system = proc::read_system_info();
  h.now_ns = proc::monotonic_ns();
  const auto system = proc::read_system_counters();
  if (auto it = system.thp_vmstat.find("thp_split_pmd"); it != system.thp_vmstat.end()) h.thp_split_pmd = it->second;
  const auto now = std::chrono::steady_clock::now();
  for (auto& t : targets_) {
    report_reachability(*t);
    if (t->probe) exporter_->on_probe_samples(t->who.id, t->probe->take());
    const bool busy = t->pid && !exporter_->open_children(t->who.id).empty();
    if (t->watcher) t->watcher->set_busy(busy);
    if (t->probe) t->probe->set_busy(busy);
    if (t->pid && !proc::process_exists(t->pid)) lose_process(*t);
    if (!t->pid) continue;
    const auto counters = tracer_->target(t->pid);
    if (t->sample_cadence.full_due(now, busy, counters ? counters->thp_collapses : 0))
      t->sample = proc::take_sample(t->pid, system);
    // RSS from statm in every round, so the series does not switch between two sources.
    t->sample = proc::refresh_sample(t->pid, system, std::move(t->sample));
    if (!busy && now >= t->next_folio_walk) walk_folios(*t, now);
    h.targets.push_back({t->who.id, counters, t->sample});
  }
  h.dropped = tracer_->dropped();
  exporter_->on_readings(h);
  if (std::chrono::steady_clock::now() >= kernel_maps_.next_reap) reap_kernel_maps();
}

void Daemon::walk_folios(Target& t, std::chrono::steady_clock::time_point now) {
  t.next_folio_walk = now + kFolioWalkEvery;
  std::string why;
  auto walker = proc::FolioWalker::open(t.pid, &why);
  const auto walk = walker ? walker->walk(&why, kFolioWalkLookups) : std::nullopt;
  if (!walk) {
    log::debug("{}: its memory by folio size is not known: {}", t.who.label, why);
    return;
  }
  metrics_.set_target_anon_folios(t.who.label, walk->kb);
}

void Daemon::discover() {
  std::erase_if(declined_, [](pid_t pid) { return !proc::process_exists(pid); });
  auto discovered = static_cast<size_t>(
      std::count_if(targets_.begin(), targets_.end(), [](const auto& t) { return t->who.discovered; }));
  for (const pid_t pid : redis_server_pids()) {
    if (target_of(pid)) continue;
    if (discovered >= options_.max_discovered) {
      // Once per process: it is taken when a watched one exits and it is still running then.
      if (declined_.insert(pid).second)
        log::warn("redis-server pid {} is not watched: {} discovered servers are already (raise --max-discovered)", pid,
                  discovered);
      continue;
    }
    const std::string addr_text = address_from_title(proc::read_file("/proc/" + std::to_string(pid) + "/cmdline", 4096).value_or(""));
    const proc::ContainerNames names = proc::container_names(pid);
    auto found = discover_server(pid, addr_text, logins_.discovery_tls(), false);
    if (found.netns_pid)
      found.label = container_scoped_label(found.label, names, proc::in_other_network_namespace(pid));
    // Its login: a --redis-auth rule's for its label or its pod, else the daemon's own.
    const RuleMatch rule = logins_.match(found.label, names);
    apply_credential_policy(found, pid, rule.by_pod, !logins_.of(rule.index).password.empty(),
                            {options_.discover_credentials_exe, options_.discover_credentials_address});
    // An instance already watched by address picks up its new pid through INFO. A server with no
    // listener to tell it by gets a shared label: labels never carry a pid.
    const bool known =
        found.label != "redis-server" && std::any_of(targets_.begin(), targets_.end(), [&](const auto& t) {
          return t->who.label == found.label || (t->who.address && t->who.address->str() == found.label);
        });
    if (known) continue;
    std::string routes;
    for (const auto& r : found.routes) routes += (routes.empty() ? "" : ", ") + r.address.str() + (r.tls ? " (TLS)" : "");
    if (!found.netns_refused.empty())
      log::warn(
          "redis-server pid {} listens in a network namespace this daemon cannot enter (setns: {}; it needs "
          "CAP_SYS_ADMIN): reaching it from outside, by {}",
          pid, found.netns_refused, routes.empty() ? "no address (it listens on loopback only)" : routes);
    log::debug("discovered redis-server pid {} as {}; reaching it by {}", pid, found.label, routes.empty() ? "nothing" : routes);
    add_target({.label = found.label,
                .discovered = true,
                .routes = std::move(found.routes),
                .auth_rule = rule.index,
                .netns_pid = found.netns_pid},
               pid);
    declined_.erase(pid);
    ++discovered;
  }
}

void Daemon::reload_credentials() {
  std::string error;
  auto logins = Logins::load(options_.redis_settings, options_.redis_auth, options_.discover, &error);
  if (!logins) {
    log::warn("SIGHUP: {} Keeping the credentials already loaded.", error);
    return;
  }
  logins_ = std::move(*logins);
  for (auto& t : targets_) {
    Login login = logins_.of(t->who.auth_rule);
    if (t->watcher)
      t->watcher->set_credentials(login.user, login.password,
                                  t->who.discovered ? logins_.discovery_tls() : logins_.credentials().tls);
    if (t->probe) t->probe->set_credentials(std::move(login.user), std::move(login.password));
  }
  fmt::print(stderr, "thptrace: SIGHUP: reloaded the Redis password{} and TLS files\n",
             logins_.has_rules() ? ", --redis-auth" : "");
}

void Daemon::report_reachability(Target& t) {
  if (!t.watcher) return;
  if (t.watcher->up()) {
    if (!t.reported_error.empty()) log::warn("{}: Redis reachable again by {}", t.who.label, t.watcher->route());
    t.reported_error.clear();
    return;
  }
  const std::string why = t.watcher->last_error();
  if (why.empty() || why == t.reported_error) return;
  log::warn("{}: Redis not reachable ({}); its kernel side is still traced", t.who.label, why);
  t.reported_error = why;
}

int Daemon::run() {
  fmt::print(stderr, "thptrace: daemon serving metrics on http://{}/metrics\n", options_.listen);
  auto next_read = std::chrono::steady_clock::now();
  auto next_discover = next_read;
  const auto handle = [this](const thptrace_event& e) { on_event(e); };
  while (!stop_requested()) {
    const int n = tracer_->poll(100, handle);
    if (n < 0 && n != -EINTR) {
      log::warn("ring buffer poll failed: {}", std::strerror(-n));
      return kExitRuntime;
    }
    remove_exited();
    if (take_reload_request()) reload_credentials();
    drain_snapshots();
    for (const auto& r : locator_.take()) on_located(r);
    exporter_->export_settled(proc::monotonic_ns());
    const auto now = std::chrono::steady_clock::now();
    if (options_.discover && now >= next_discover) {
      discover();
      next_discover = now + kDiscoverEvery;
    }
    if (now >= next_read) {
      read_targets();
      remove_exited();
      next_read = now + kReadEvery;
    }
  }
  exporter_->export_remaining();
  if (const char* path = std::getenv("THPTRACE_RECORD_INPUTS"))
    std::ofstream(path + std::string(".metrics")) << metrics_.exposition();
  fmt::print(stderr, "thptrace: daemon stopping\n");
  return kExitOk;
}

int daemon_main(int argc, char** argv) {
  const auto options = parse_daemon_options(argc, argv);
  if (!options) return kExitOk;
  // Loading frees blocks of several MiB (libbpf parses the kernel's BTF), and glibc then raises its
  // mmap threshold to their size and its trim threshold to twice that: every later buffer below it
  // (a uprobe's ELF symbols at each restart of a target, a large INFO reply) would come from the
  // heap, which is not given back until 2x that is free at its top, so RSS would creep with each
  // restart. A fixed threshold keeps large buffers in their own mappings, returned when freed.
  ::mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  install_stop_handlers();
  install_reload_handler();
  Daemon d(*options);
  return d.run();
}

}  // namespace thptrace::daemon
