// SPDX-License-Identifier: Apache-2.0
// `thptrace bench`: flags, the run loop over scenarios, the results folder and the exit code.

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <climits>
#include <cmath>
#include <ctime>
#include <iostream>
#include <optional>
#include <sstream>

#include "bench/bench.h"
#include "bench/host.h"
#include "bench/process.h"
#include "bench/results.h"
#include "bench/scenario.h"
#include "bench/server.h"
#include "common/companion.h"
#include "common/program_options.h"
#include "proc/cpu.h"
#include "proc/proc.h"
#include "thptrace/version.h"

namespace thptrace::bench {
namespace {

namespace po = boost::program_options;

po::options_description describe_options() {
  po::options_description d("thptrace bench options");
  // clang-format off
  d.add_options()
      ("help,h", "print this help and exit")
      ("keys", po::value<long long>()->default_value(500000)->value_name("N"), "dataset size in keys")
      ("value-size", po::value<long long>()->default_value(400)->value_name("BYTES"), "value size in bytes")
      ("seed", po::value<long long>()->default_value(1)->value_name("N"), "seed of the dataset and key sequences")
      ("writers", po::value<long long>()->default_value(4)->value_name("N"),
       "bulk writer connections (GET instead of SET in readonly_control)")
      ("batch", po::value<long long>()->default_value(80)->value_name("N"), "commands per writer pipeline batch")
      ("rate", po::value<double>()->default_value(0)->value_name("PER_S"),
       "probe requests per second, open loop with coordinated-omission correction; 0 = closed loop")
      ("seconds-per-phase", po::value<double>()->default_value(5)->value_name("S"),
       "length of the before and after phases (steady runs 3 times this)")
      ("server", po::value<std::string>()->value_name("PATH"),
       "the server binary every scenario starts (a Valkey or Redis build; default redis-server from PATH)")
      ("scenarios", po::value<std::string>()->default_value("all")->value_name("LIST"),
       "comma list of steady, full_sync_disk, full_sync_diskless, scale_out_disk, scale_out_diskless, "
       "scale_out_channel (needs a server with an rdb channel: Redis >= 8.0, Valkey >= 8.0), "
       "readonly_control, aof_always_no, aof_always_yes, aof_everysec_no, aof_everysec_yes, thp_always, thp_never, "
       "or the groups full_sync, scale_out, aof_rewrite, thp_ab, all")
      ("out", po::value<std::string>()->value_name("DIR"), "results folder (default results/<UTC timestamp>)")
      ("thp-ab", po::bool_switch(), "run the THP A/B (thp_always, thp_never); fail if THP sysfs is not writable")
      ("no-thp-ab", po::bool_switch(), "skip the THP A/B even where THP sysfs is writable");
  // clang-format on
  return d;
}

long long integer_in(const po::variables_map& vm, const char* name, long long lo, long long hi) {
  return thptrace::integer_in<UsageError>(vm, name, lo, hi);
}

double number_in(const po::variables_map& vm, const char* name, double lo, double hi) {
  return thptrace::number_in<UsageError>(vm, name, lo, hi);
}

std::string utc_now(const char* format) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

uint64_t mem_total_kb() {
  std::istringstream in(proc::read_file("/proc/meminfo").value_or(""));
  for (std::string key; in >> key;) {
    uint64_t v = 0;
    in >> v;
    if (key == "MemTotal:") return v;
    in.ignore(LLONG_MAX, '\n');
  }
  return 0;
}

// The 1, 5 and 15 minute load averages of /proc/loadavg.
std::string loadavg() {
  std::istringstream in(proc::read_file("/proc/loadavg").value_or(""));
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// A temporary directory for the servers' data (RDB, AOF): not the results folder, because an
// AOF of a large dataset is big and none of it is a result.
std::filesystem::path make_work_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "thptrace-bench-XXXXXX").string();
  if (!::mkdtemp(tmpl.data()))
    throw BenchError(fmt::format("cannot create a temporary directory: {}", std::strerror(errno)));
  return tmpl;
}

// One line per scenario on stderr, so a long run shows where it is.
std::string scenario_line(const ScenarioResult& r) {
  std::string s;
  for (const auto& p : r.phases) {
    const auto l = loadgen::LatencySummary::of(p.load.probe_latency);
    s += fmt::format(" {} p50/p99.9 {}/{} µs;", p.name, us(l.p50_ns), us(l.p99_9_ns));
  }
  if (!r.forks.empty()) {
    const auto& f = r.forks.front();
    s += fmt::format(" {} fork(s), first {} {:.0f} µs", r.forks.size(), f.reason, f.fork_duration_us.value_or(0));
  }
  if (!r.faults.empty()) s += fmt::format(" — FAULT: {}", r.faults.front());
  return s;
}

// The tools a run needs: root, a server binary and the thptrace beside thptrace-bench (or on PATH).
void find_tools(BenchOptions& o) {
  if (::geteuid() != 0)
    throw BenchError("thptrace bench needs root: every scenario's capture loads BPF programs (run it with sudo)");
  if (o.server.empty()) {
    o.server = find_in_path("redis-server");
    if (o.server.empty())
      throw BenchError(
          "redis-server is not in PATH; install it (scripts/install-deps.sh installs redis-server) or name a "
          "server with --server");
  }
  if (o.thptrace.empty()) {
    const auto thptrace = find_companion("thptrace");
    if (!thptrace)
      throw BenchError(
          "the thptrace binary is neither beside thptrace-bench nor on PATH; install it (cmake --install "
          "BUILD_DIR)");
    o.thptrace = thptrace->string();
  }
}

// Which THP scenarios run: --thp-ab insists, --no-thp-ab drops them, otherwise they run where
// the mode can be changed and are skipped with a note where it cannot.
void choose_thp_scenarios(BenchOptions& o, RunInfo& info) {
  const bool writable = ThpMode::writable();
  if (o.thp_ab == ThpAb::on) {
    if (!writable)
      throw BenchError(
          fmt::format("--thp-ab: {} is not writable here (the THP A/B needs root on the host, not in a "
                      "container)",
                      proc::kThpEnabledPath));
    for (const auto& s : all_scenarios())
      if (!s.thp_mode.empty() &&
          std::none_of(o.scenarios.begin(), o.scenarios.end(), [&](const ScenarioSpec& x) { return x.name == s.name; }))
        o.scenarios.push_back(s);
  }
  const auto is_thp = [](const ScenarioSpec& s) { return !s.thp_mode.empty(); };
  if (o.thp_ab == ThpAb::off || !writable) {
    const bool had = std::any_of(o.scenarios.begin(), o.scenarios.end(), is_thp);
    std::erase_if(o.scenarios, is_thp);
    if (had)
      info.notes.push_back(o.thp_ab == ThpAb::off
                               ? "the THP A/B was skipped (--no-thp-ab)"
                               : fmt::format("the THP A/B was skipped: {} is not writable", proc::kThpEnabledPath));
  }
  if (o.scenarios.empty()) throw UsageError("no scenario left to run once the THP A/B was dropped");
}

// The host as the run starts: time, version, kernel, CPUs, memory, load, THP modes.
void describe_host(RunInfo& info) {
  info.utc_start = utc_now("%Y-%m-%dT%H:%M:%SZ");
  info.thptrace_version = kVersion;
  utsname u{};
  if (::uname(&u) == 0) info.kernel_release = u.release;
  info.cpus = proc::online_cpus();
  info.mem_total_kb = mem_total_kb();
  info.loadavg_start = loadavg();
  const auto system = proc::read_system_info();
  info.host_thp_enabled = system.thp_enabled;
  info.host_thp_defrag = system.thp_defrag;
}

int run(BenchOptions o) {
  find_tools(o);

  RunInfo info;
  choose_thp_scenarios(o, info);
  const auto is_thp = [](const ScenarioSpec& s) { return !s.thp_mode.empty(); };

  // The servers' data directory, removed whatever happens (an AOF of a large dataset is big).
  struct WorkDir {
    std::filesystem::path path = make_work_dir();
    ~WorkDir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } work;
  const auto& work_dir = work.path;
  // Which build --server is, started once: its rdb channel decides scale_out_channel.
  const ServerBuild server = probe_server(o.server, work_dir / "probe");
  info.server = server;
  if (server.rdb_channel_config.empty()) {
    for (const auto& s : o.scenarios)
      if (s.rdb_channel && s.named) throw UsageError(fmt::format("--scenarios {}: {}", s.name, server.no_channel_why));
    for (const auto& s : o.scenarios)
      if (s.rdb_channel) {
        info.skipped.emplace_back(s.name, server.no_channel_why);
        info.notes.push_back(fmt::format("{} was not run: {}", s.name, server.no_channel_why));
        fmt::print(stderr, "thptrace bench: skipping {}: {}\n", s.name, server.no_channel_why);
      }
    std::erase_if(o.scenarios, [](const ScenarioSpec& s) { return s.rdb_channel; });
  }

  const auto& out = o.out_dir;
  std::error_code ec;
  if (std::filesystem::exists(out, ec) && !std::filesystem::is_empty(out, ec))
    throw UsageError(fmt::format("--out {}: the folder exists and is not empty", out.string()));
  std::filesystem::create_directories(out / "captures", ec);
  if (ec) throw BenchError(fmt::format("cannot create the results folder {}: {}", out.string(), ec.message()));

  StopSignals signals;
  const auto& interrupted = StopSignals::interrupted();
  describe_host(info);

  std::optional<ThpMode> thp;
  if (std::any_of(o.scenarios.begin(), o.scenarios.end(), is_thp)) thp.emplace();
  RunContext ctx{o, out, work_dir, thp ? &*thp : nullptr, interrupted, server};

  fmt::print(stderr, "thptrace bench: {} scenario(s) on {} ({}), {} keys × {} B, results in {}\n", o.scenarios.size(),
             server.label(), server.path, o.keys, o.value_size, out.string());
  std::vector<ScenarioResult> results;
  for (size_t i = 0; i < o.scenarios.size(); ++i) {
    const auto& spec = o.scenarios[i];
    fmt::print(stderr, "thptrace bench: [{}/{}] {}: {}\n", i + 1, o.scenarios.size(), spec.name, spec.description);
    try {
      results.push_back(run_scenario(spec, ctx));
    } catch (const Interrupted&) {
      info.interrupted = true;
      break;
    }
    fmt::print(stderr, "thptrace bench:   {}\n", scenario_line(results.back()));
  }
  if (interrupted.load()) info.interrupted = true;
  if (thp) thp->restore();
  thp.reset();
  info.host_thp_enabled_after = ThpMode::current();
  info.utc_end = utc_now("%Y-%m-%dT%H:%M:%SZ");
  info.loadavg_end = loadavg();
  write_results(out, o, info, results);

  const auto faults = self_check_faults(results);
  if (info.interrupted)
    throw BenchError(
        fmt::format("interrupted by a signal; the {} finished scenario(s) are in {}", results.size(), out.string()));
  if (!faults.empty())
    throw BenchError(fmt::format("the self-check failed with {} fault(s), first {}; evidence is in {}", faults.size(),
                                 faults.front(), out.string()));
  fmt::print("thptrace bench: self-check passed; results in {} (summary.md)\n", out.string());
  return 0;
}

}  // namespace

std::string bench_usage() {
  std::ostringstream out;
  out << "Usage: thptrace bench [options]\n"
         "Runs the fork/COW/THP scenarios on local redis-server processes (127.0.0.1, free ports) with a\n"
         "thptrace capture watching each, and writes CSVs, summary.md and latency_timeline.svg to --out.\n"
         "Needs root (BPF). Exit 0: every scenario ran and the self-check passed; 1: a runtime failure, a\n"
         "mechanical fault (a replica that never synced, a missing fork, a wrong fork reason, dropped events)\n"
         "or an interruption (results so far are kept); 2: bad usage.\n\n"
      << describe_options() << '\n';
  return out.str();
}

BenchOptions parse_bench_options(int argc, const char* const* argv) {
  po::variables_map vm;
  const auto parse = [](int n, const char* const* args, po::variables_map& out, bool /*safe*/) {
    const po::positional_options_description no_positionals;
    po::store(po::command_line_parser(n, args).options(describe_options()).positional(no_positionals).run(), out);
    po::notify(out);
  };
  if (const auto error = parse_command_line(parse, argc, argv, vm)) throw UsageError(*error);
  BenchOptions o;
  if (vm.count("help") != 0) {
    o.help = true;
    return o;
  }
  o.keys = static_cast<uint64_t>(integer_in(vm, "keys", 1, 1'000'000'000));
  o.value_size = static_cast<size_t>(integer_in(vm, "value-size", 1, 64LL * 1024 * 1024));
  o.seed = static_cast<uint64_t>(vm["seed"].as<long long>());
  o.writers = static_cast<unsigned>(integer_in(vm, "writers", 0, 256));
  o.batch = static_cast<unsigned>(integer_in(vm, "batch", 1, 100'000));
  o.rate = number_in(vm, "rate", 0, 10'000'000);
  o.seconds_per_phase = number_in(vm, "seconds-per-phase", 0.1, 3600);
  o.scenarios = select_scenarios(vm["scenarios"].as<std::string>());
  if (vm["thp-ab"].as<bool>() && vm["no-thp-ab"].as<bool>())
    throw UsageError("--thp-ab and --no-thp-ab contradict each other");
  o.thp_ab = vm["thp-ab"].as<bool>() ? ThpAb::on : vm["no-thp-ab"].as<bool>() ? ThpAb::off : ThpAb::automatic;
  if (vm.count("server") != 0) o.server = resolve_server(vm["server"].as<std::string>());
  o.out_dir = vm.count("out") != 0 ? std::filesystem::path(vm["out"].as<std::string>())
                                   : std::filesystem::path("results") / utc_now("%Y%m%dT%H%M%SZ");
  if (o.out_dir.empty()) throw UsageError("--out cannot be empty");
  return o;
}

int bench_main(int argc, char** argv) {
  BenchOptions options;
  try {
    options = parse_bench_options(argc, argv);
  } catch (const UsageError& e) {
    fmt::print(stderr, "thptrace bench: {}; see thptrace bench --help.\n", e.what());
    return 2;
  }
  if (options.help) {
    std::cout << bench_usage();
    return 0;
  }
  try {
    return run(std::move(options));
  } catch (const UsageError& e) {
    fmt::print(stderr, "thptrace bench: {}; see thptrace bench --help.\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::string_view why = e.what();
    while (why.ends_with('.')) why.remove_suffix(1);
    fmt::print(stderr, "thptrace bench: {}.\n", why);
    return 1;
  }
}

}  // namespace thptrace::bench
