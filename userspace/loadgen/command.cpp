// SPDX-License-Identifier: Apache-2.0
#include "loadgen/command.h"

#include "common/program_options.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "loadgen/output.h"

namespace thptrace::loadgen {
namespace {

namespace po = boost::program_options;

// Set from the signal handler, so it must be a lock-free atomic with static storage.
std::atomic<bool> interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);

void on_stop_signal(int) { interrupted.store(true, std::memory_order_relaxed); }

// Routes SIGINT and SIGTERM to `interrupted` for the lifetime of the object, then restores
// whatever handlers the host program had.
class StopSignals {
 public:
  StopSignals() {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

po::options_description describe_options() {
  po::options_description d("thptrace loadgen options");
  // Integers are read as signed 64-bit and range-checked by hand: Boost's lexical_cast quietly
  // wraps "-1" into a huge unsigned value.
  // One option per line reads better than the formatter's chained layout.
  // clang-format off
  d.add_options()
      ("help,h", "print this help and exit")
      ("host", po::value<std::string>()->default_value("127.0.0.1")->value_name("HOST"), "Redis host")
      ("port", po::value<long long>()->default_value(6379)->value_name("PORT"), "Redis port")
      ("password-file", po::value<std::string>()->value_name("PATH"),
       "file whose first line is the Redis password (AUTH)")
      ("keys", po::value<long long>()->default_value(100000)->value_name("N"),
       "dataset size in keys (key:0 .. key:N-1)")
      ("value-size", po::value<long long>()->default_value(400)->value_name("BYTES"), "value size in bytes")
      ("seed", po::value<long long>()->default_value(1)->value_name("N"),
       "seed of the dataset and of the key sequences")
      ("load", po::bool_switch(), "load the dataset before the run (the default)")
      ("no-load", po::bool_switch(), "skip loading: the dataset is already in Redis")
      ("load-only", po::bool_switch(), "load the dataset and exit without a run")
      ("writers", po::value<long long>()->default_value(0)->value_name("N"), "bulk writer connections")
      ("batch", po::value<long long>()->default_value(80)->value_name("N"), "commands per writer pipeline batch")
      ("rate", po::value<double>()->default_value(0)->value_name("PER_S"),
       "probe requests per second, open loop with coordinated-omission correction; 0 = closed loop")
      ("duration", po::value<double>()->default_value(10)->value_name("SECONDS"),
       "run time in seconds; 0 = until SIGINT/SIGTERM")
      ("read-only", po::bool_switch(), "the probe and the writers GET instead of SET")
      ("csv", po::value<std::string>()->value_name("PATH"),
       "write percentiles to PATH (e.g. run.csv) and the timeline beside it (run_timeline.csv)")
      ("json", po::value<std::string>()->value_name("PATH"), "write percentiles and the timeline to PATH as JSON")
      ("timeout", po::value<double>()->default_value(10)->value_name("SECONDS"),
       "seconds to wait for any reply before giving up")
      ("interval-ms", po::value<long long>()->default_value(100)->value_name("MS"),
       "timeline interval in milliseconds");
  // clang-format on
  return d;
}

long long integer_in(const po::variables_map& vm, const char* name, long long lo, long long hi) {
  return thptrace::integer_in<UsageError>(vm, name, lo, hi);
}

double number_in(const po::variables_map& vm, const char* name, double lo, double hi) {
  return thptrace::number_in<UsageError>(vm, name, lo, hi);
}

std::string read_password(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw LoadgenError(fmt::format("cannot read the password file {}: {}", path.string(), std::strerror(errno)));
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.empty()) throw LoadgenError(fmt::format("the password file {} is empty", path.string()));
  return line;
}

// The live progress line, redrawn in place; only used when stderr is a terminal.
class ProgressLine {
 public:
  void loading(uint64_t loaded, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (loaded != total && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    fmt::print(stderr, "\rloading {}/{} keys ({:.0f}%)\033[K", loaded, total,
               100.0 * static_cast<double>(loaded) / static_cast<double>(total));
    std::fflush(stderr);
  }
  void running(const LiveStats& s) {
    const double dt = std::chrono::duration<double>(s.elapsed - last_.elapsed).count();
    if (dt <= 0) return;
    fmt::print(
        stderr, "\r{:6.1f} s  probe {:.0f} req/s  p99 {:.3f} ms  writers {:.0f} cmd/s\033[K",
        std::chrono::duration<double>(s.elapsed).count(), static_cast<double>(s.probe_ops - last_.probe_ops) / dt,
        static_cast<double>(s.last_interval_p99_ns) / 1e6, static_cast<double>(s.writer_ops - last_.writer_ops) / dt);
    std::fflush(stderr);
    last_ = s;
  }
  void clear() {
    fmt::print(stderr, "\r\033[K");
    std::fflush(stderr);
  }

 private:
  std::chrono::steady_clock::time_point last_draw_{};
  LiveStats last_{};
};

int run(const LoadgenCommand& parsed) {
  LoadgenCommand command = parsed;
  if (!command.password_file.empty()) command.options.connection.password = read_password(command.password_file);

  std::signal(SIGPIPE, SIG_IGN);
  StopSignals stop_signals;
  interrupted.store(false);
  const bool live = isatty(STDERR_FILENO) == 1;
  ProgressLine progress;

  if (command.load) {
    const Dataset dataset(command.options.dataset);
    LoadProgress on_batch;
    if (live) on_batch = [&](uint64_t loaded, uint64_t total) { progress.loading(loaded, total); };
    const LoadReport report = load_dataset(command.options.connection, dataset, on_batch, 1000, &interrupted);
    if (live) progress.clear();
    if (report.keys < dataset.key_count()) throw LoadgenError("interrupted while loading the dataset");
    fmt::print("loaded {} keys of {} bytes in {:.2f} s\n", report.keys, dataset.value_size(),
               std::chrono::duration<double>(report.elapsed).count());
  }
  if (command.load_only) return 0;

  LiveCallback on_interval;
  if (live) on_interval = [&](const LiveStats& s) { progress.running(s); };
  const LoadgenResult result = run_load(command.options, interrupted, on_interval);
  if (live) progress.clear();

  write_summary(std::cout, result);
  std::cout.flush();
  if (!command.csv_path.empty()) write_csv_files(command.csv_path, result);
  if (!command.json_path.empty()) write_json_file(command.json_path, result, command.options);
  if (!result.failure.empty()) throw LoadgenError(fmt::format("the run ended early: {}", result.failure));
  return 0;
}

}  // namespace

std::string loadgen_usage() {
  std::ostringstream out;
  out << "Usage: thptrace loadgen [options]\n"
         "Loads a deterministic dataset into Redis, then times every request of one probe connection\n"
         "(closed loop, or open loop at --rate) while --writers connections pipeline --batch commands.\n\n"
      << describe_options() << '\n';
  return out.str();
}

namespace {

// Throws po::error on bad flags.
void parse_flags(int argc, const char* const* argv, po::variables_map& vm, bool /*safe*/) {
  // An empty positional description makes a stray word an error instead of silently ignored.
  const po::positional_options_description no_positionals;
  po::store(po::command_line_parser(argc, argv).options(describe_options()).positional(no_positionals).run(), vm);
  po::notify(vm);
}

}  // namespace

LoadgenCommand parse_loadgen_command(int argc, const char* const* argv) {
  po::variables_map vm;
  if (const auto error = parse_command_line(parse_flags, argc, argv, vm)) throw UsageError(*error);

  LoadgenCommand c;
  if (vm.count("help") != 0) {
    c.help = true;
    return c;
  }
  if (vm["load"].as<bool>() && vm["no-load"].as<bool>()) throw UsageError("--load and --no-load contradict each other");
  c.load = !vm["no-load"].as<bool>();
  c.load_only = vm["load-only"].as<bool>();
  if (c.load_only && !c.load) throw UsageError("--load-only and --no-load contradict each other");

  LoadgenOptions& o = c.options;
  o.connection.host = vm["host"].as<std::string>();
  if (o.connection.host.empty()) throw UsageError("--host cannot be empty");
  o.connection.port = static_cast<int>(integer_in(vm, "port", 1, 65535));
  const double timeout = number_in(vm, "timeout", 0.001, 86400);
  o.connection.io_timeout = std::chrono::milliseconds(static_cast<int64_t>(std::llround(timeout * 1000)));
  if (vm.count("password-file") != 0) c.password_file = vm["password-file"].as<std::string>();

  o.dataset.keys = static_cast<uint64_t>(integer_in(vm, "keys", 1, LLONG_MAX));
  o.dataset.value_size = static_cast<size_t>(integer_in(vm, "value-size", 1, 512LL * 1024 * 1024));
  // Any 64-bit pattern is a valid seed; negative input is taken as its two's complement.
  o.dataset.seed = static_cast<uint64_t>(vm["seed"].as<long long>());

  o.writers = static_cast<unsigned>(integer_in(vm, "writers", 0, 1024));
  o.batch = static_cast<unsigned>(integer_in(vm, "batch", 1, 1'000'000));
  o.rate = number_in(vm, "rate", 0, 10'000'000);
  const double duration = number_in(vm, "duration", 0, 365.0 * 86400);
  o.duration = std::chrono::nanoseconds(static_cast<int64_t>(std::llround(duration * 1e9)));
  o.read_only = vm["read-only"].as<bool>();
  o.interval = std::chrono::milliseconds(integer_in(vm, "interval-ms", 1, 3'600'000));

  if (vm.count("csv") != 0) c.csv_path = vm["csv"].as<std::string>();
  if (vm.count("json") != 0) c.json_path = vm["json"].as<std::string>();
  return c;
}

int loadgen_main(int argc, char** argv) {
  LoadgenCommand command;
  try {
    command = parse_loadgen_command(argc, argv);
  } catch (const UsageError& e) {
    fmt::print(stderr, "thptrace loadgen: {}; see thptrace loadgen --help.\n", e.what());
    return 2;
  }
  if (command.help) {
    std::cout << loadgen_usage();
    return 0;
  }
  try {
    return run(command);
  } catch (const std::exception& e) {
    // LoadgenError carries our own sentence; anything else (bad_alloc, ...) is just as fatal here.
    std::cout.flush();
    std::string_view why = e.what();
    while (why.ends_with('.')) why.remove_suffix(1);  // Redis' own messages sometimes end with one
    fmt::print(stderr, "thptrace loadgen: {}.\n", why);
    return 1;
  }
}

}  // namespace thptrace::loadgen
