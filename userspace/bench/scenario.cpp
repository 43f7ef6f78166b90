// SPDX-License-Identifier: Apache-2.0
#include "bench/scenario.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <utility>

#include "bench/host.h"
#include "bench/process.h"
#include "proc/sampler.h"
#include "report/report.h"

namespace thptrace::bench {
namespace {

using namespace std::chrono_literals;

// How long a during phase may last before the scenario is called stuck. A full sync or rewrite of
// a few GB on this machine type takes tens of seconds; ten minutes means something is broken.
constexpr auto kDuringTimeout = 600s;
// Between starting the during phase's load and sending the trigger: the load generator opens its
// connections before its clock starts, and the trigger must land after that (a short settle
// wait, not a phase boundary: the phase ends on Redis state).
constexpr auto kTriggerSettle = 50ms;
// INFO polling period while a during phase runs.
constexpr auto kPollPeriod = 10ms;

// Starts run_load on a thread of its own; finish() stops it and hands back what it measured.
class LoadPhase {
 public:
  LoadPhase(std::string name, const loadgen::LoadgenOptions& options) : name_(std::move(name)) {
    thread_ = std::thread([this, options] {
      try {
        result_ = loadgen::run_load(options, stop_);
      } catch (const std::exception& e) {
        error_ = e.what();
      }
      ended_.store(true);
    });
  }
  ~LoadPhase() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  LoadPhase(const LoadPhase&) = delete;
  LoadPhase& operator=(const LoadPhase&) = delete;

  // True when the run ended by itself: it could not start or lost a connection.
  bool ended() const { return ended_.load(); }

  PhaseResult finish() {
    stop_.store(true);
    thread_.join();
    if (!error_.empty())
      throw BenchError(fmt::format("the load generator could not run the {} phase: {}", name_, error_));
    PhaseResult p;
    p.name = name_;
    p.start_ns = result_.start_monotonic_ns;
    p.end_ns = result_.start_monotonic_ns + static_cast<uint64_t>(result_.elapsed.count());
    p.load = std::move(result_);
    return p;
  }

 private:
  std::string name_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> ended_{false};
  loadgen::LoadgenResult result_;
  std::string error_;
  std::thread thread_;
};

int64_t info_int(const redis::InfoMap& info, const std::string& key) { return redis::info_int(info, key).value_or(-1); }

// Lets a phase run for `d`; returns early if the load ended by itself. Throws on a signal.
void run_for(LoadPhase& phase, std::chrono::nanoseconds d, const std::atomic<bool>& interrupted) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until && !phase.ended()) {
    if (!sleep_unless(std::min<std::chrono::nanoseconds>(until - std::chrono::steady_clock::now(), 20ms), interrupted))
      throw Interrupted();
  }
}

void add_phase(ScenarioResult& r, PhaseResult p) {
  if (!p.load.failure.empty())
    r.faults.push_back(fmt::format("the load generator stopped early in the {} phase: {}", p.name, p.load.failure));
  const uint64_t errors = p.load.probe_error_replies + p.load.writer_error_replies;
  if (errors > 0)
    r.faults.push_back(
        fmt::format("{} error replies in the {} phase (first: {})", errors, p.name, p.load.first_error_reply));
  if (p.load.read_only && p.load.probe_misses > 0)
    r.notes.push_back(fmt::format("{} probe GETs found no key in the {} phase", p.load.probe_misses, p.name));
  r.phases.push_back(std::move(p));
}

// Sends the trigger and polls Redis until the during phase's end condition holds. Records the
// times in `r`; a condition never reached is a fault.
void trigger_and_wait(const ScenarioSpec& spec, RedisInstance& primary,
                      const std::vector<std::unique_ptr<RedisInstance>>& replicas, LoadPhase& load, ScenarioResult& r,
                      const std::atomic<bool>& interrupted) {
  const redis::InfoMap before = primary.info();
  r.trigger_ns = proc::monotonic_ns();
  switch (spec.trigger) {
    case Trigger::replica_sync:
      // All at once, as a scale-out attaches them: one REPLICAOF after the other, no wait between.
      for (const auto& replica : replicas) replica->command({"REPLICAOF", "127.0.0.1", std::to_string(primary.port())});
      r.replica_link_up_ns.assign(replicas.size(), 0);
      break;
    case Trigger::rewrite_aof:
      primary.command({"BGREWRITEAOF"});
      break;
    case Trigger::bgsave:
      primary.command({"BGSAVE"});
      break;
    case Trigger::none:
      return;
  }
  const auto until = std::chrono::steady_clock::now() + kDuringTimeout;
  for (;;) {
    if (!sleep_unless(kPollPeriod, interrupted)) throw Interrupted();
    bool done = false;
    const redis::InfoMap p = primary.info("persistence");
    if (spec.trigger == Trigger::replica_sync) {
      bool all_up = true;
      for (size_t i = 0; i < replicas.size(); ++i) {
        if (!r.replica_link_up_ns[i] && replicas[i]->info_field("replication", "master_link_status") == "up")
          r.replica_link_up_ns[i] = proc::monotonic_ns();
        all_up = all_up && r.replica_link_up_ns[i];
      }
      if (all_up && !r.link_up_ns)
        r.link_up_ns = *std::max_element(r.replica_link_up_ns.begin(), r.replica_link_up_ns.end());
      // The primary's own view too: a Valkey 8 dual-channel replica has its link up seconds before
      // the primary lists it online (bg_transfer until the replica, done loading, acknowledges),
      // and a capture ended before that would see the sync unfinished.
      bool all_online = false;
      if (r.link_up_ns) {
        const auto listed = redis::parse_replicas(primary.info("replication"));
        all_online = std::all_of(replicas.begin(), replicas.end(), [&](const auto& replica) {
          return std::any_of(listed.begin(), listed.end(), [&](const redis::ReplicaInfo& x) {
            return x.address() == replica->address() && x.state == "online";
          });
        });
      }
      done = all_online && info_int(p, "rdb_bgsave_in_progress") == 0;
    } else if (spec.trigger == Trigger::rewrite_aof) {
      done = info_int(p, "aof_rewrite_in_progress") == 0 && info_int(p, "aof_rewrite_scheduled") == 0;
    } else {
      done = info_int(p, "rdb_bgsave_in_progress") == 0;
    }
    if (done) break;
    if (load.ended()) break;  // add_phase reports the load's failure
    if (std::chrono::steady_clock::now() >= until) {
      r.faults.push_back(spec.trigger == Trigger::replica_sync
                             ? fmt::format("{} never synced: master_link_status not up after {} s",
                                           replicas.size() > 1 ? "a replica" : "the replica", kDuringTimeout.count())
                             : fmt::format("the {} did not finish within {} s",
                                           spec.trigger == Trigger::bgsave ? "BGSAVE" : "AOF rewrite",
                                           kDuringTimeout.count()));
      break;
    }
  }
  r.done_ns = proc::monotonic_ns();

  // Redis's own counters say whether the thing really happened, independently of the tracer.
  const redis::InfoMap after = primary.info();
  if (spec.trigger == Trigger::replica_sync) {
    const int64_t full = info_int(after, "sync_full") - info_int(before, "sync_full");
    const auto want = static_cast<int64_t>(replicas.size());
    if (full < 1) r.faults.push_back("the primary's sync_full did not grow: no FULLRESYNC happened");
    else if (full < want)
      r.faults.push_back(fmt::format("the primary's sync_full grew by {}, not by one per replica ({})", full, want));
    if (full > want)
      r.notes.push_back(want > 1 ? fmt::format("{} replicas needed {} full syncs to come up", want, full)
                                 : fmt::format("the replica needed {} full syncs to come up", full));
  } else if (spec.trigger == Trigger::rewrite_aof) {
    if (info_int(after, "aof_rewrites") <= info_int(before, "aof_rewrites"))
      r.faults.push_back("aof_rewrites did not grow: the AOF rewrite did not happen");
    if (redis::info_str(after, "aof_last_bgrewrite_status") != "ok")
      r.faults.push_back("the AOF rewrite failed (aof_last_bgrewrite_status is not ok)");
  } else if (spec.trigger == Trigger::bgsave) {
    if (info_int(after, "rdb_saves") <= info_int(before, "rdb_saves"))
      r.faults.push_back("rdb_saves did not grow: the BGSAVE did not happen");
    if (redis::info_str(after, "rdb_last_bgsave_status") != "ok")
      r.faults.push_back("the BGSAVE failed (rdb_last_bgsave_status is not ok)");
  }
}

// Waits until no fork child of Redis is alive (none should be, but a stray one would be counted
// as this scenario's).
void wait_idle(RedisInstance& primary, const std::atomic<bool>& interrupted) {
  const auto until = std::chrono::steady_clock::now() + kDuringTimeout;
  while (std::chrono::steady_clock::now() < until) {
    const auto p = primary.info("persistence");
    if (info_int(p, "rdb_bgsave_in_progress") == 0 && info_int(p, "aof_rewrite_in_progress") == 0 &&
        info_int(p, "aof_rewrite_scheduled") == 0)
      return;
    if (!sleep_unless(kPollPeriod, interrupted)) throw Interrupted();
  }
  throw BenchError("redis-server kept a fork child alive after loading the dataset");
}

// The phase `ts` falls in: the during phase is bounded by the trigger and the end condition.
std::string phase_at(const ScenarioResult& r, uint64_t ts) {
  if (r.trigger_ns && ts >= r.trigger_ns && ts <= r.done_ns) return "during";
  for (const auto& p : r.phases)
    if (ts >= p.start_ns && ts <= p.end_ns) return p.name;
  return "between phases";
}

// A scale-out's replicas as the capture gave them to the forks: every replica the bench started,
// once, online, its sync time positive.
void check_scale_out(ScenarioResult& r) {
  std::vector<std::string> served;
  for (const auto& f : r.forks)
    for (const auto& s : f.replicas) {
      served.push_back(s.address);
      if (s.outcome != correlate::ReplicaSync::Outcome::online)
        r.faults.push_back(fmt::format("the capture saw the sync of {} end {}, not online", s.address,
                                       correlate::outcome_name(s.outcome)));
      else if (s.states.size() > 1 && (!s.sync_ms() || *s.sync_ms() <= 0))  // seen syncing: timed
        r.faults.push_back(fmt::format("the capture gave {} no positive sync time", s.address));
    }
  // Over an rdb channel, the state only that channel has (the replica loads the RDB while the
  // primary buffers its stream) shows for at least one replica: else the channel was not used.
  if (!r.channel_state.empty()) {
    bool seen = false;
    for (const auto& f : r.forks)
      for (const auto& s : f.replicas)
        for (const auto& st : s.states) seen = seen || st.state == r.channel_state;
    if (!seen)
      r.faults.push_back(
          fmt::format("no replica sync was seen in {}, the state of the server's rdb channel", r.channel_state));
  }
  std::sort(served.begin(), served.end());
  auto started = r.replica_addresses;
  std::sort(started.begin(), started.end());
  if (served != started)
    r.faults.push_back(
        fmt::format("the capture's forks served {} replica sync(s) ({}), not the {} replicas started ({})",
                    served.size(), fmt::join(served, " "), started.size(), fmt::join(started, " ")));
}

}  // namespace

void read_capture(const std::filesystem::path& json_path, ScenarioResult& r) {
  std::ifstream in(json_path);
  const auto j = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
  if (!j.is_object()) {
    r.faults.push_back(fmt::format("the capture wrote no readable JSON report ({})", json_path.string()));
    return;
  }
  report::Report capture;
  try {
    capture = report::from_json(j);
  } catch (const std::exception& e) {
    r.faults.push_back(
        fmt::format("the capture's JSON report ({}) does not read back: {}", json_path.string(), e.what()));
    return;
  }
  if (capture.start_monotonic_ns == 0) r.faults.emplace_back("the capture's JSON has no capture.start_monotonic_ns");
  r.system_thp_enabled = capture.system.thp_enabled;
  r.system_thp_defrag = capture.system.thp_defrag;
  r.process_thp_enabled = capture.thp_enabled_for_process;
  r.anon_huge_pages_kb_max = capture.anon_huge_pages_kb_max;
  r.rss_kb_max = capture.rss_kb_max;
  r.dropped_events = capture.totals.dropped_events;
  // The results' probes column predates the kernel_copies family, which follows cow_fault.
  for (const auto& f : tracer::kFamilies)
    if (f.family != tracer::Family::kernel_copies)
      r.probes += fmt::format("{}{}={}", r.probes.empty() ? "" : " ", f.name,
                              tracer::mode_name(capture.probes.at(f.family).mode));
  if (capture.redis && capture.redis->reachable) r.disable_thp = capture.redis->disable_thp;
  r.copied_bytes = capture.memory.copied_bytes;
  if (capture.memory.cgroup) {
    r.cgroup_usage_max_bytes = capture.memory.cgroup->usage_max_bytes;
    r.cgroup_limit_bytes = capture.memory.cgroup->limit_bytes;
  }
  if (capture.replication) r.replication_buffer_peak_bytes = capture.replication->replication_buffer_peak_bytes;

  for (const auto& f : capture.forks) {
    ForkRecord k;
    k.child_pid = f.child_pid;
    k.reason = correlate::reason_name(f.reason);
    k.reason_source = f.reason_source;
    k.fork_duration_us = f.fork_duration_us;
    k.child_lifetime_ms = f.child_lifetime_ms;
    k.cow_faults = f.cow_faults;
    k.child_cow_faults = f.child_cow_faults;
    k.thp_splits = f.thp_splits;
    k.thp_splits_source = f.thp_splits_source;
    k.fsync_during = f.fsync_during;
    k.fsync_before = f.fsync_before;
    k.fork_ns = f.fork_ts_ns;
    k.exit_ns = f.exit_ts_ns;
    k.phase = phase_at(r, k.fork_ns);
    k.replicas = f.replicas;
    r.forks.push_back(std::move(k));
  }

  if (r.dropped_events > 0)
    r.faults.push_back(fmt::format("the capture dropped {} ring-buffer events", r.dropped_events));
  const std::string& want = r.spec.expected_reason;
  if (want.empty()) {
    if (!r.forks.empty())
      r.faults.push_back(
          fmt::format("{} fork(s) where none was expected (first: {})", r.forks.size(), r.forks[0].reason));
  } else if (r.forks.empty()) {
    r.faults.push_back(fmt::format("no fork seen; expected a {} fork", want));
  } else {
    for (const auto& f : r.forks)
      if (f.reason != want)
        r.faults.push_back(fmt::format("the fork of child {} has reason {}, expected {}", f.child_pid, f.reason, want));
    if (r.forks.size() > 1 && r.spec.replicas <= 1)
      r.notes.push_back(fmt::format("{} forks in one scenario (one expected)", r.forks.size()));
    for (const auto& f : r.forks) {
      if (f.phase != "during")
        r.notes.push_back(fmt::format("the fork of child {} began in the {} phase, not during", f.child_pid, f.phase));
      else if (f.exit_ns > r.done_ns)
        r.notes.push_back(fmt::format("the child {} outlived the during phase by {:.0f} ms", f.child_pid,
                                      static_cast<double>(f.exit_ns - r.done_ns) / 1e6));
    }
  }
  if (r.spec.replicas > 1) check_scale_out(r);
  if (!r.spec.thp_mode.empty()) {
    if (r.system_thp_enabled != r.spec.thp_mode)
      r.faults.push_back(
          fmt::format("the capture saw THP mode {}, not the scenario's {}", r.system_thp_enabled, r.spec.thp_mode));
    if (r.spec.thp_mode == "always" && r.process_thp_enabled == false)
      r.faults.push_back("THP was off for the Redis process under `always` with disable-thp no");
    if (r.spec.thp_mode == "always" && r.anon_huge_pages_kb_max == 0)
      r.notes.push_back("AnonHugePages stayed 0 kB under THP `always`: no huge page backed the heap");
  }
}

namespace {

void copy_log(const RedisInstance& server, const std::filesystem::path& to) {
  std::error_code ec;
  std::filesystem::copy_file(server.dir() / "redis.log", to, std::filesystem::copy_options::overwrite_existing, ec);
}

loadgen::LoadgenOptions load_options(const BenchOptions& o, const ScenarioSpec& spec, int port) {
  loadgen::LoadgenOptions lo;
  lo.connection.host = "127.0.0.1";
  lo.connection.port = port;
  // Longer than any stall being measured: a fork of a few GB, an fsync behind a rewrite.
  lo.connection.io_timeout = 60s;
  lo.dataset = {.seed = o.seed, .keys = o.keys, .value_size = o.value_size};
  lo.writers = o.writers;
  lo.batch = o.batch;
  lo.rate = o.rate;
  lo.duration = std::chrono::nanoseconds::zero();  // until the phase's end condition
  lo.read_only = spec.read_only;
  lo.interval = 100ms;
  return lo;
}

void run_phases(const ScenarioSpec& spec, RunContext& ctx, ScenarioResult& r) {
  const BenchOptions& o = ctx.options;
  const auto spp = std::chrono::nanoseconds(static_cast<int64_t>(o.seconds_per_phase * 1e9));
  if (!spec.thp_mode.empty()) {
    if (!ctx.thp) throw BenchError("the THP scenarios need a writable THP mode");
    ctx.thp->set(spec.thp_mode);
  }

  const auto base = ctx.work_dir / spec.name;
  std::vector<std::string> primary_args = spec.primary_args;
  // No output-buffer limit for replicas: under the writers' load the default (256 MB hard) can
  // drop the replica mid-sync and start a second full sync, which is a different experiment.
  primary_args.insert(primary_args.end(),
                      {"--client-output-buffer-limit", "replica 0 0 0", "--repl-diskless-sync-delay", "0"});
  // The rdb channel is set on both sides, and off where the scenario is not about it: Redis 8.0.2
  // starts with repl-rdb-channel yes, which would turn every diskless sync into an rdb-channel one.
  std::vector<std::string> channel;
  const auto& server = ctx.server;
  if (spec.rdb_channel && server.rdb_channel_config.empty())
    throw BenchError(fmt::format("{} needs an rdb channel: {}", spec.name, server.no_channel_why));
  if (!server.rdb_channel_config.empty()) channel = {"--" + server.rdb_channel_config, spec.rdb_channel ? "yes" : "no"};
  if (spec.rdb_channel) r.channel_state = server.channel_state;
  primary_args.insert(primary_args.end(), channel.begin(), channel.end());
  RedisInstance primary(server.path, base / "primary", primary_args);
  std::vector<std::unique_ptr<RedisInstance>> replicas;
  const std::function<std::string(size_t)> replica_name = [&](size_t i) {
    return spec.replicas > 1 ? fmt::format("replica{}", i + 1) : std::string("replica");
  };
  if (spec.trigger == Trigger::replica_sync)
    for (size_t i = 0; i < spec.replicas; ++i) {
      replicas.push_back(std::make_unique<RedisInstance>(server.path, base / replica_name(i), channel));
      r.replica_addresses.push_back(replicas.back()->address());
    }

  // The servers' logs are evidence whatever happens next: copied before the servers go.
  struct CopyLogs {
    const RedisInstance& primary;
    const std::vector<std::unique_ptr<RedisInstance>>& replicas;
    std::function<std::string(size_t)> replica_name;
    std::filesystem::path to;
    std::string name;
    ~CopyLogs() {
      std::error_code ec;
      std::filesystem::create_directories(to, ec);
      copy_log(primary, to / (name + "-primary.log"));
      for (size_t i = 0; i < replicas.size(); ++i) copy_log(*replicas[i], to / (name + "-" + replica_name(i) + ".log"));
    }
  } copy_logs{primary, replicas, replica_name, ctx.out_dir / "logs", spec.name};

  const loadgen::Dataset dataset(loadgen::DatasetOptions{.seed = o.seed, .keys = o.keys, .value_size = o.value_size});
  loadgen::ConnectionOptions conn;
  conn.port = primary.port();
  conn.io_timeout = 60s;
  const auto loaded = loadgen::load_dataset(conn, dataset, {}, 1000, &ctx.interrupted);
  if (ctx.interrupted.load()) throw Interrupted();
  if (loaded.keys != o.keys) throw BenchError("the dataset did not load completely");
  wait_idle(primary, ctx.interrupted);
  r.info_after_load = primary.info();

  const auto json_path = ctx.out_dir / "captures" / (spec.name + ".json");
  std::optional<int> capture_code;
  {
    Capture capture(o.thptrace, primary.pid(), primary.address(), json_path, ctx.interrupted);
    const auto lo = load_options(o, spec, primary.port());
    if (spec.trigger == Trigger::none) {
      LoadPhase steady("steady", lo);
      run_for(steady, 3 * spp, ctx.interrupted);
      add_phase(r, steady.finish());
    } else {
      {
        LoadPhase before("before", lo);
        run_for(before, spp, ctx.interrupted);
        add_phase(r, before.finish());
      }
      {
        LoadPhase during("during", lo);
        if (!sleep_unless(kTriggerSettle, ctx.interrupted)) throw Interrupted();
        trigger_and_wait(spec, primary, replicas, during, r, ctx.interrupted);
        add_phase(r, during.finish());
      }
      {
        LoadPhase after("after", lo);
        run_for(after, spp, ctx.interrupted);
        add_phase(r, after.finish());
      }
    }
    capture_code = capture.stop();
    if (capture_code != 0)
      r.faults.push_back(capture_code
                             ? fmt::format("the capture exited with code {}: {}", *capture_code, capture.log_tail())
                             : "the capture did not end within 60 s of SIGINT and was killed");
  }
  r.zero_ns = r.phases.empty() ? 0 : r.phases.front().start_ns;
  read_capture(json_path, r);
  r.info_end = primary.info();
  r.completed = true;
}

}  // namespace

const PhaseResult* ScenarioResult::phase(const std::string& name) const {
  for (const auto& p : phases)
    if (p.name == name) return &p;
  return nullptr;
}

ScenarioResult run_scenario(const ScenarioSpec& spec, RunContext& ctx) {
  ScenarioResult r;
  r.spec = spec;
  // The host's THP mode comes back after a THP scenario, whatever happens in it.
  struct RestoreThp {
    ThpMode* thp;
    bool armed;
    ~RestoreThp() {
      if (armed && thp) thp->restore();
    }
  } restore_thp{ctx.thp, !spec.thp_mode.empty()};
  try {
    run_phases(spec, ctx, r);
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& e) {
    r.faults.push_back(e.what());
  }
  if (!r.completed && ctx.interrupted.load()) throw Interrupted();
  return r;
}

}  // namespace thptrace::bench
