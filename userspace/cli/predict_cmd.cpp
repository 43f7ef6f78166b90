// SPDX-License-Identifier: Apache-2.0
// `thptrace predict --pid PID [--redis ADDR] [--replicas N] [--reason R] [--seconds S] [--json PATH]`:
// measures a Redis for S seconds without forking it and says what its next fork of that reason would
// cost and whether the limits hold (forecast/forecast.h has the rules, docs/guide/predict.md the why).
// The measurement: /proc (RSS, page tables), the memory cgroup, MemAvailable, Redis's INFO and CONFIG
// (its last fork's figures, the replication stream's rate, the replica output buffer limit), the times
// of the RDB file its last save wrote (that save's life to the ms) and, where the kernel tracks
// soft-dirty pages, a rehearsal of the fork's copies (proc/soft_dirty.h).
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <thread>

#include "cli/capture.h"
#include "cli/redis_setup.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/log.h"
#include "common/program_options.h"
#include "common/signals.h"
#include "common/text.h"
#include "forecast/report.h"
#include "proc/cgroup.h"
#include "proc/cpu.h"
#include "proc/foreign_file.h"
#include "proc/proc.h"
#include "proc/resolve.h"
#include "proc/sampler.h"
#include "proc/soft_dirty.h"
#include "redis/client.h"
#include "redis/options.h"
#include "redis/parse.h"
#include "redis/rdb.h"
#include "thptrace/version.h"

namespace po = boost::program_options;

namespace thptrace::cli {
namespace {

struct PredictOptions {
  pid_t pid = 0;
  std::string redis;
  redis::ConnectionSettings redis_settings;
  unsigned replicas = 1;
  std::optional<correlate::Reason> reason;
  double seconds = 30;
  std::string json_path;
  double max_stall_ms = 50;
  bool rehearse = true;
  bool replicas_given = false;  // --replicas said: a full sync is asked of
  bool help = false;
};

double monotonic_s() { return static_cast<double>(proc::monotonic_ns()) / 1e9; }

// A non-negative figure of INFO; nullopt when absent, unparsable or negative (-1: none yet).
std::optional<int64_t> info_count(const redis::InfoMap& info, const std::string& key) {
  const auto v = redis::info_int(info, key);
  return v && *v >= 0 ? v : std::nullopt;
}

// Redis >= 7.0 (and Valkey) keep one replication buffer that every replica reads from.
bool shared_replication_buffer(const std::string& version) {
  int major = 0;
  return std::sscanf(version.c_str(), "%d", &major) == 1 && major >= 7;
}

PredictOptions read_predict_options(int argc, char** argv) {
  po::options_description desc("thptrace predict: what the next fork of a Redis would cost, measured without forking");
  desc.add_options()("help,h", "show this help")("pid,p", po::value<int>(),
                                                 "the Redis process (default: the server at --redis)")(
      "redis", po::value<std::string>(),
      "HOST:PORT or unix:/PATH of that Redis: its last fork, its replication stream")(
      "replicas", po::value<long long>()->default_value(1), "replicas syncing at once (full syncs)")(
      "reason", po::value<std::string>(),
      "bgsave, full_sync_disk or full_sync_diskless (default: bgsave; with --replicas, the full sync the "
      "server's repl-diskless-sync makes)")("seconds", po::value<double>()->default_value(30), "how long to measure")(
      "json", po::value<std::string>(), "also write the prediction as JSON to PATH")(
      "max-stall-ms", po::value<double>()->default_value(50),
      "refuse the soft-dirty rehearsal when its clear would stall the process longer than this (its page "
      "tables are walked like a fork's)")("no-rehearsal", "do not clear soft-dirty bits: history and model only")(
      "verbose,v", "print debug lines");
  add_redis_connection_options(desc);
  po::variables_map vm;
  if (const auto error = parse_options(desc, argc, argv, vm))
    throw FatalError(kExitUsage, "predict: " + *error + " (see thptrace predict --help).");
  PredictOptions o;
  if (vm.count("help")) {
    std::cout << desc << "\n";
    o.help = true;
    return o;
  }
  log::set_verbose(vm.count("verbose") > 0);
  if (!vm.count("pid") && !vm.count("redis"))
    throw FatalError(kExitUsage, "predict: --pid or --redis is required (see thptrace predict --help).");
  if (vm.count("pid")) {
    o.pid = vm["pid"].as<int>();
    if (o.pid <= 0)
      throw FatalError(kExitUsage, fmt::format("predict: --pid {}: expected a positive process id.", o.pid));
  }
  if (vm.count("redis")) o.redis = vm["redis"].as<std::string>();
  o.redis_settings = redis_connection_settings(vm);
  o.replicas = static_cast<unsigned>(integer_in<UsageError>(vm, "replicas", 1, 1000));
  o.replicas_given = !vm["replicas"].defaulted();
  if (vm.count("reason")) {
    const auto r = vm["reason"].as<std::string>();
    for (const auto x :
         {correlate::Reason::bgsave, correlate::Reason::full_sync_disk, correlate::Reason::full_sync_diskless})
      if (r == correlate::reason_name(x)) o.reason = x;
    if (!o.reason)
      throw FatalError(kExitUsage, "predict: --reason " + text::printable(r) +
                                       ": expected bgsave, full_sync_disk or full_sync_diskless.");
  }
  o.seconds = vm["seconds"].as<double>();
  if (!(o.seconds >= 1 && o.seconds <= 3600)) throw FatalError(kExitUsage, "predict: --seconds: expected 1 to 3600.");
  o.max_stall_ms = vm["max-stall-ms"].as<double>();
  if (!(o.max_stall_ms > 0 && o.max_stall_ms <= 60000))
    throw FatalError(kExitUsage, "predict: --max-stall-ms: expected more than 0 and at most 60000.");
  o.rehearse = vm.count("no-rehearsal") == 0;
  if (vm.count("json")) {
    o.json_path = vm["json"].as<std::string>();
    const auto dir = std::filesystem::path(o.json_path).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir))
      throw FatalError(kExitUsage,
                       fmt::format("predict: cannot write {}: {} is not a directory.", o.json_path, dir.string()));
  }
  return o;
}

// One INFO of the server, parsed; nullopt (and a warning) when it does not answer.
std::optional<redis::InfoMap> info_of(redis::Client* client) {
  if (!client) return std::nullopt;
  const auto text = client->info("all");
  if (!text) {
    log::warn("Redis did not answer INFO: {}", client->last_error());
    return std::nullopt;
  }
  return redis::parse_info(*text);
}

// The rehearsal, where the kernel has it and the clear's stall is within the operator's bound: the
// clear walks the page tables as a fork's copy does, so the fork's predicted freeze bounds it.
forecast::Rehearsal start_rehearsal(const PredictOptions& o, pid_t pid, const forecast::Figure& stall) {
  forecast::Rehearsal rh;
  if (!o.rehearse) {
    rh.why_not = "--no-rehearsal";
    return rh;
  }
  std::string why;
  if (!proc::soft_dirty_supported(&why)) {
    rh.why_not = why;
    return rh;
  }
  if (stall.value > o.max_stall_ms)
    throw FatalError(kExitRuntime,
                     fmt::format("predict: the soft-dirty rehearsal would stall pid {} for about {:.0f} ms ({} of {}), "
                                 "over --max-stall-ms {:.0f}; raise it, or pass --no-rehearsal.",
                                 pid, stall.value, forecast::method_name(stall.method), stall.basis, o.max_stall_ms));
  const auto walk = proc::clear_soft_dirty(pid, &why);
  if (!walk) {
    rh.why_not = why;
    return rh;
  }
  rh.run = true;
  rh.walk_ms = static_cast<double>(*walk) / 1e6;
  return rh;
}

// What the server's RDB file tells of the last save, when the file is that save's (renamed within 2 s
// of the last successful save INFO gives, rdb_last_save_time): its life, from the file's birth (the
// child creates it as it starts) to its change time (the rename when done), where the filesystem
// keeps birth times; and the server's used_memory as the save began (the file's used-mem field).
// The file is found in the server's own root (a container's too); its name comes from the server,
// so it is taken only as an absolute directory and a plain file name.
struct LastSaveFile {
  std::optional<double> seconds;
  std::optional<uint64_t> used_memory;
};
LastSaveFile last_save_file(pid_t pid, const std::map<std::string, std::string>& config,
                            std::optional<int64_t> last_save_time) {
  const auto dir = config.find("dir"), name = config.find("dbfilename");
  if (!last_save_time || dir == config.end() || name == config.end()) return {};
  const std::string& d = dir->second;
  const std::string& n = name->second;
  if (d.empty() || d.front() != '/' || d.size() > 4096 || n.empty() || n.size() > 255 ||
      n.find('/') != std::string::npos || n == "." || n == ".." || d.find('\0') != std::string::npos ||
      n.find('\0') != std::string::npos)
    return {};
  std::string why;
  const auto file = proc::process_file_times(pid, d + "/" + n, redis::kRdbHeadBytes, &why);
  if (!file) {
    log::debug("predict: the RDB file is not read: {}", why);
    return {};
  }
  if (std::abs(file->change_s - static_cast<double>(*last_save_time)) > 2) return {};
  LastSaveFile last;
  if (file->birth_s > 0 && file->change_s >= file->birth_s) last.seconds = file->change_s - file->birth_s;
  last.used_memory = redis::rdb_used_mem(file->head);
  return last;
}

// What the server says of itself: its last fork and save, its replication settings, into the report
// and the forecast's inputs. Returns repl-diskless-sync ("" when unknown).
std::string read_server(redis::Client& client, const redis::InfoMap& info, const std::string& address,
                        forecast::PredictReport& r) {
  auto& in = r.inputs;
  forecast::RedisFacts x;
  x.address = address;
  x.version = redis::printable(redis::info_str(info, "redis_version"), 64);
  x.latest_fork_usec = info_count(info, "latest_fork_usec");
  x.rdb_last_cow_size = info_count(info, "rdb_last_cow_size");
  x.rdb_last_bgsave_time_sec = info_count(info, "rdb_last_bgsave_time_sec");
  const auto config =
      client.config_get({"repl-diskless-sync", "client-output-buffer-limit", "maxmemory", "dir", "dbfilename"});
  if (const auto it = config.find("repl-diskless-sync"); it != config.end())
    x.repl_diskless_sync = redis::printable(it->second, 16);
  if (const auto it = config.find("maxmemory"); it != config.end()) {
    char* end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (end && *end == '\0' && v >= 0) x.maxmemory = v;
  }
  if (const auto it = config.find("client-output-buffer-limit"); it != config.end())
    if (const auto l = redis::parse_replica_output_buffer_limit(it->second)) {
      in.replica_hard_bytes = l->hard_bytes;
      in.replica_soft_bytes = l->soft_bytes;
      in.replica_soft_seconds = l->soft_seconds;
    }
  in.server_answered = true;
  in.shared_replication_buffer = shared_replication_buffer(x.version);
  // A server that has forked: its last fork is this process's history.
  if (x.latest_fork_usec && *x.latest_fork_usec > 0) in.last_fork_usec = static_cast<double>(*x.latest_fork_usec);
  if (x.rdb_last_cow_size && *x.rdb_last_cow_size > 0)
    in.last_rdb_cow_bytes = static_cast<uint64_t>(*x.rdb_last_cow_size);
  if (const auto used = info_count(info, "used_memory"); used && *used > 0)
    in.used_memory_now = static_cast<uint64_t>(*used);
  if (x.rdb_last_bgsave_time_sec) {
    in.last_rdb_seconds = static_cast<double>(*x.rdb_last_bgsave_time_sec);
    const auto file = last_save_file(r.pid, config, info_count(info, "rdb_last_save_time"));
    in.last_rdb_file_seconds = file.seconds;
    in.last_save_used_memory = file.used_memory;
  }
  std::string diskless = x.repl_diskless_sync;
  r.redis = std::move(x);
  return diskless;
}

// The process as /proc shows it: its memory, its cgroup's, the host's.
forecast::PredictReport report_of_process(pid_t pid, const proc::ProcessStatus& status, const PredictOptions& o) {
  forecast::PredictReport r;
  r.version = kVersion;
  r.pid = pid;
  r.comm = status.name;
  auto& in = r.inputs;
  in.replicas = o.replicas;
  in.rss_bytes = status.vm_rss_kb * 1024;
  in.page_table_bytes = status.vm_pte_kb * 1024;
  const auto smaps = proc::read_smaps_rollup(pid);
  in.anon_bytes = (smaps ? smaps->anonymous_kb : status.vm_rss_kb) * 1024;
  in.anon_huge_bytes = smaps ? smaps->anon_huge_pages_kb * 1024 : 0;
  if (const auto cg = proc::read_memory_cgroup(pid)) {
    in.cgroup_limit_bytes = cg->limit_bytes;
    in.cgroup_usage_bytes = cg->usage_bytes;
  }
  in.mem_available_bytes = proc::read_mem_available();
  return r;
}

// A connection to the server, or null (and a warning): the forecast then goes without its figures.
std::unique_ptr<redis::Client> connect_server(const std::optional<RedisSetup>& setup, const PredictOptions& o) {
  if (!setup) return nullptr;
  redis::ConnectError failure;
  auto client = redis::Client::connect(setup->address,
                                       {.user = o.redis_settings.user,
                                        .password = setup->credentials.password,
                                        .timeout = std::chrono::milliseconds(2000),
                                        .tls = redis::tls_for(setup->credentials, setup->address)},
                                       &failure);
  if (!client) log::warn("{}: predicting without the server's figures", failure.sentence);
  return client;
}

// The fork to forecast: --reason, else a full sync with --replicas (over disk or a socket as the
// server's repl-diskless-sync says), else a BGSAVE.
correlate::Reason reason_of(const PredictOptions& o, const std::string& diskless) {
  if (o.reason) return *o.reason;
  if (o.replicas_given)
    return diskless == "yes" ? correlate::Reason::full_sync_diskless : correlate::Reason::full_sync_disk;
  return correlate::Reason::bgsave;
}

// The CPU the main thread and the host used over the measurement: the thread's CPU time, the host's
// runnable threads read at every step, its CPU pressure where the kernel has PSI.
class CpuWatch {
 public:
  explicit CpuWatch(pid_t pid)
      : pid_(pid), cpu_start_(proc::thread_cpu_seconds(pid, pid)), pressure_start_(proc::read_cpu_pressure_some_us()) {
    read_runnable();
  }
  void read_runnable() {
    // The read itself runs: it is not a thread the child would share a CPU with.
    if (const auto n = proc::read_procs_running()) {
      runnable_sum_ += *n > 0 ? *n - 1 : 0;
      ++runnable_reads_;
    }
  }
  void finish(forecast::PredictReport& r) const {
    if (const auto cpu_end = proc::thread_cpu_seconds(pid_, pid_); cpu_start_ && cpu_end && r.measured_s > 0)
      r.main_thread_cpu = std::max(0.0, *cpu_end - *cpu_start_) / r.measured_s;
    if (runnable_reads_ == 0) return;
    auto& load = r.inputs.cpu_load =
        forecast::Inputs::CpuLoad{runnable_sum_ / runnable_reads_, proc::online_cpus(), std::nullopt};
    const auto pressure_end = proc::read_cpu_pressure_some_us();
    if (pressure_start_ && pressure_end && *pressure_end >= *pressure_start_ && r.measured_s > 0)
      load->pressure_some = std::min(1.0, static_cast<double>(*pressure_end - *pressure_start_) / 1e6 / r.measured_s);
  }

 private:
  pid_t pid_;
  std::optional<double> cpu_start_;
  std::optional<uint64_t> pressure_start_;
  double runnable_sum_ = 0;
  unsigned runnable_reads_ = 0;
};

// The replication stream's rate over the measurement; without a replica (no backlog yet, the offset
// stands still) the bytes clients sent stand in for it: an upper bound, reads included.
void stream_rate_of(const redis::InfoMap& start, const redis::InfoMap& end, double seconds, forecast::Inputs& in) {
  const auto rate = [&](const char* key) -> std::optional<double> {
    const auto a = redis::info_int(start, key);
    const auto b = redis::info_int(end, key);
    if (!a || !b || *b < *a) return std::nullopt;
    return static_cast<double>(*b - *a) / seconds;
  };
  if (const auto stream = rate("master_repl_offset"); stream && *stream > 0) {
    in.repl_bytes_per_s = *stream;
    in.repl_rate_basis = "master_repl_offset";
  } else if (const auto input = rate("total_net_input_bytes")) {
    in.repl_bytes_per_s = *input;
    in.repl_rate_basis = "total_net_input_bytes (no replication stream yet; reads included)";
  }
}

// The measurement's steps, from the rehearsal's clear to o.seconds after start_s (or a signal):
// about 60 of them, at most 4 a second (a count reads 8 bytes of pagemap per page of the process's
// writable memory), each reading the host's runnable threads and counting the pages written since
// the clear into the rehearsal's curve.
void measure(const PredictOptions& o, double start_s, double cleared_s, proc::SoftDirtyCounter* counter, CpuWatch& cpu,
             forecast::Rehearsal& rh) {
  const double step = std::clamp(o.seconds / 60, 0.25, 5.0);
  std::string why;
  for (double next = cleared_s + step;; next += step) {
    while (monotonic_s() < next && !stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (stop_requested()) break;
    cpu.read_runnable();
    if (counter) {
      const auto pages = counter->count(&why);
      if (!pages) throw FatalError(kExitRuntime, "predict: the rehearsal stopped: " + why + ".");
      rh.curve.emplace_back(monotonic_s() - cleared_s, *pages);
    }
    if (monotonic_s() - start_s >= o.seconds) break;
  }
}

}  // namespace

int predict_main(int argc, char** argv) {
  const PredictOptions o = read_predict_options(argc, argv);
  if (o.help) return kExitOk;
  const auto redis_setup = prepare_redis(o.redis, o.redis_settings);
  const pid_t pid = redis_setup ? resolve_redis_target(*redis_setup, o.redis_settings.user, o.pid) : o.pid;
  const auto status = proc::read_status(pid);
  if (!status || status->exited)
    throw FatalError(kExitUsage, fmt::format("predict: no process with pid {} exists.", pid));
  install_stop_handlers();

  forecast::PredictReport r = report_of_process(pid, *status, o);
  auto& in = r.inputs;
  const auto client = connect_server(redis_setup, o);
  const auto info_start = info_of(client.get());
  const double start_s = monotonic_s();
  CpuWatch cpu(pid);
  std::string diskless;
  if (info_start) diskless = read_server(*client, *info_start, redis_setup->address.str(), r);
  const correlate::Reason reason = reason_of(o, diskless);

  r.rehearsal = start_rehearsal(o, pid, forecast::predict(in, reason).fork_freeze_ms);
  auto& rh = r.rehearsal;
  std::string why;
  std::optional<proc::SoftDirtyCounter> counter;
  if (rh.run && !(counter = proc::SoftDirtyCounter::after_clear(pid, &why)))
    throw FatalError(kExitRuntime, "predict: the rehearsal stopped: " + why + ".");
  const double cleared_s = monotonic_s();
  fmt::print(stderr, "thptrace: predicting pid {} ({}): measuring for {:.0f} s, {}\n", pid, text::printable(r.comm),
             o.seconds,
             rh.run ? fmt::format("rehearsing its copies (soft-dirty bits cleared in {:.2f} ms)", *rh.walk_ms)
                    : "no rehearsal: " + rh.why_not);
  measure(o, start_s, cleared_s, counter ? &*counter : nullptr, cpu, rh);
  r.measured_s = monotonic_s() - start_s;
  cpu.finish(r);
  if (const auto info_end = info_of(client.get()); info_start && info_end && r.measured_s > 0)
    stream_rate_of(*info_start, *info_end, r.measured_s, in);
  if (counter) rh.held_mappings = counter->held();
  in.dirty_curve = rh.curve;
  r.prediction = forecast::predict(in, reason);
  std::cout << forecast::to_text(r);
  if (!o.json_path.empty()) {
    std::string error;
    if (!write_file_atomically(o.json_path, forecast::to_json(r).dump(2) + "\n", &error))
      throw FatalError(kExitRuntime, fmt::format("predict: cannot write {}: {}.", o.json_path, error));
  }
  return kExitOk;
}

}  // namespace thptrace::cli
