// SPDX-License-Identifier: Apache-2.0
// thptrace: see README.md. Dispatches the subcommands; every fatal error ends here as one sentence
// and the exit code of the CLI contract (0 ok, 1 runtime, 2 usage).
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>
#include <vector>

#include "cli/capture.h"
#include "common/companion.h"
#include "common/error.h"
#include "common/log.h"
#include "common/program_options.h"
#include "common/signals.h"
#include "daemon/main.h"
#include "redis/options.h"
#include "thptrace/version.h"

namespace po = boost::program_options;
using namespace thptrace;

namespace {

const char* kUsage =
    "usage: thptrace [--pid PID] [--redis HOST:PORT|unix:/PATH [--redis-tls ...]] [--duration SECONDS] [--json PATH]\n"
    "                [--force-fallback] [--disk auto|on|off] [--sample-copies N [--unwind dwarf|fp] [--debuginfod]] "
    "[--latency-probe HZ]\n"
    "         (--pid, --redis or both: the process serving a TCP --redis is found from the kernel's socket tables)\n"
    "       thptrace probe [--json]\n"
    "       thptrace predict --pid PID [--redis HOST:PORT] [--replicas N] [--reason R] [--seconds S] [--json PATH]\n"
    "       thptrace daemon [--config PATH] [--listen ADDR:PORT] [--redis HOST:PORT|unix:/PATH ...] [--pid PID ...]\n"
    "                [--discover] [--redis-tls ...]\n"
    "       thptrace loadgen ...        thptrace bench ...     (run by thptrace-bench, installed apart)\n"
    "       thptrace --help | --version\n";

po::options_description capture_options_description() {
  po::options_description desc("Capture options");
  desc.add_options()("help,h", "show this help")("version", "print the version")(
      "pid,p", po::value<int>(),
      "process to trace (e.g. $(pidof redis-server)); with --redis, must be that server (default: it)")(
      "duration,d", po::value<double>(), "seconds to trace; until Ctrl-C when omitted")(
      "redis", po::value<std::string>(),
      "HOST:PORT or unix:/PATH of that Redis, for fork reasons and server-side latency")(
      "json", po::value<std::string>(), "also write the report as JSON to PATH")(
      "svg", po::value<std::string>(),
      "also draw the capture's timeline to PATH (SVG; an HTML page around it when PATH ends in .html)")(
      "interval-ms", po::value<int>()->default_value(100),
      "sampling interval of /proc and Redis while a fork, a save or a replica's sync is on, ms")(
      "idle-interval-ms", po::value<int>()->default_value(1000),
      "sampling interval of /proc and Redis otherwise, ms (a fork the kernel reports is sampled at once)")(
      "sample-copies", po::value<long long>()->default_value(cli::kDefaultSampleCopies),
      "sample 1 in N copy-on-write faults while a fork child lives, with the call stack, to say which code "
      "paths and mappings the copies come from (a power of two; 0 = off)")(
      "unwind", po::value<std::string>()->default_value("dwarf"),
      "how sampled copies' call stacks are unwound where frame pointers are missing: dwarf (the thread's "
      "registers and 8 KiB of its stack, unwound from .eh_frame) or fp (frame pointers alone)")(
      "latency-probe", po::value<long long>()->default_value(100),
      "with --redis: PINGs a second on a connection of their own, each timed from its due time, for the "
      "latency clients felt (0 = off)")(
      "client-timeout-us", po::value<long long>()->default_value(300),
      "the timeout of the server's clients, µs: probes slower than it are counted as timeouts")(
      "debuginfod",
      "ask the servers of DEBUGINFOD_URLS for debug files of the traced binaries that this host and "
      "the process lack (off: DEBUGINFOD_URLS is ignored)")("verbose,v", "print libbpf's messages and debug lines");
  tracer::add_load_options(desc);
  add_redis_connection_options(desc);
  return desc;
}

// The capture's options from the parsed command line, each checked; throws FatalError (usage).
cli::CaptureOptions capture_options_from(const po::variables_map& vm) {
  if (!vm.count("pid") && !vm.count("redis"))
    throw FatalError(kExitUsage, "--pid or --redis is required (see thptrace --help).");
  cli::CaptureOptions o;
  o.pid = vm.count("pid") ? vm["pid"].as<int>() : 0;  // 0: the process serving --redis
  if (vm.count("pid") && o.pid <= 0)
    throw FatalError(kExitUsage, fmt::format("--pid {}: expected a positive process id.", o.pid));
  if (vm.count("duration")) {
    o.duration_s = vm["duration"].as<double>();
    if (!(*o.duration_s > 0) || *o.duration_s > 86400 * 365)
      throw FatalError(kExitUsage, "--duration: expected a positive number of seconds.");
  }
  if (vm.count("redis")) o.redis = vm["redis"].as<std::string>();
  o.redis_settings = redis_connection_settings(vm);
  if (vm.count("json")) o.json_path = vm["json"].as<std::string>();
  if (vm.count("svg")) o.svg_path = vm["svg"].as<std::string>();
  o.load = tracer::load_flags(vm);
  o.interval_ms = vm["interval-ms"].as<int>();
  if (o.interval_ms < 10 || o.interval_ms > 60000) throw FatalError(kExitUsage, "--interval-ms: expected 10 to 60000.");
  // Given alone, a slower --interval-ms is the idle one too.
  o.idle_interval_ms = vm["idle-interval-ms"].defaulted() ? std::max(vm["idle-interval-ms"].as<int>(), o.interval_ms)
                                                          : vm["idle-interval-ms"].as<int>();
  if (o.idle_interval_ms < o.interval_ms || o.idle_interval_ms > 60000)
    throw FatalError(kExitUsage,
                     fmt::format("--idle-interval-ms: expected --interval-ms ({}) to 60000.", o.interval_ms));
  o.sample_copies = static_cast<uint32_t>(integer_in<UsageError>(vm, "sample-copies", 0, 1 << 20));
  // A power of two: the fault programs pick 1 in N with a mask, not a division.
  if (o.sample_copies & (o.sample_copies - 1))
    throw FatalError(kExitUsage, fmt::format("--sample-copies {}: expected 0 (off) or a power of two (1, 2, 4, ... "
                                             "1048576).",
                                             o.sample_copies));
  if (const auto u = vm["unwind"].as<std::string>(); u == "dwarf" || u == "fp")
    o.unwind = u == "dwarf" ? cli::Unwind::dwarf : cli::Unwind::fp;
  else
    throw FatalError(kExitUsage, "--unwind " + u + ": expected dwarf or fp.");
  o.latency_probe_hz = static_cast<uint32_t>(integer_in<UsageError>(vm, "latency-probe", 0, 10000));
  o.client_timeout_us = static_cast<uint64_t>(integer_in<UsageError>(vm, "client-timeout-us", 1, 60'000'000));
  // libdw asks the servers named in DEBUGINFOD_URLS for what it misses: a network fetch, driven by
  // build ids a traced process chose, only on request. Unset before any thread starts.
  o.debuginfod = vm.count("debuginfod") > 0;
  return o;
}

int capture_main(int argc, char** argv) {
  const po::options_description desc = capture_options_description();
  po::variables_map vm;
  if (const auto error = parse_options(desc, argc, argv, vm))
    throw FatalError(kExitUsage, *error + " (see thptrace --help).");
  if (vm.count("help")) {
    std::cout << kUsage << "\n" << desc << "\n";
    return kExitOk;
  }
  if (vm.count("version")) {
    std::cout << "thptrace " << kVersion << "\n";
    return kExitOk;
  }
  log::set_verbose(vm.count("verbose") > 0);
  const cli::CaptureOptions o = capture_options_from(vm);
  if (!o.debuginfod) ::unsetenv("DEBUGINFOD_URLS");
  install_stop_handlers();
  return cli::run_capture(o);
}

// `thptrace loadgen` and `thptrace bench` are thptrace-bench's: the binary that runs with CAP_BPF on
// every host carries no load generator or experiment, so it replaces itself with that one, same
// arguments.
[[noreturn]] void exec_bench(char** argv) {
  const auto bench = find_companion("thptrace-bench");
  if (!bench) {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    throw FatalError(
        kExitUsage,
        fmt::format("`{}` needs thptrace-bench, found neither in {} nor on PATH; install it beside thptrace "
                    "(cmake --install BUILD_DIR --component bench).",
                    argv[1], ec ? std::string("thptrace's directory") : self.parent_path().string()));
  }
  std::vector<char*> args{const_cast<char*>(bench->c_str())};
  for (char** a = argv + 1; *a != nullptr; ++a) args.push_back(*a);
  args.push_back(nullptr);
  ::execv(bench->c_str(), args.data());
  throw FatalError(kExitRuntime, fmt::format("cannot run {}: {}.", bench->string(), std::strerror(errno)));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && std::strcmp(argv[1], "probe") == 0) return cli::probe_main(argc - 1, argv + 1);
    if (argc >= 2 && std::strcmp(argv[1], "predict") == 0) return cli::predict_main(argc - 1, argv + 1);
    if (argc >= 2 && std::strcmp(argv[1], "daemon") == 0) return daemon::daemon_main(argc - 1, argv + 1);
    if (argc >= 2 && (std::strcmp(argv[1], "loadgen") == 0 || std::strcmp(argv[1], "bench") == 0)) exec_bench(argv);
    if (argc < 2) {
      std::cerr << kUsage;
      return kExitUsage;
    }
    return capture_main(argc, argv);
  } catch (const FatalError& e) {
    fmt::print(stderr, "thptrace: {}\n", e.what());
    return e.code();
  } catch (const std::exception& e) {
    fmt::print(stderr, "thptrace: unexpected error: {}\n", e.what());
    return kExitRuntime;
  }
}
