// SPDX-License-Identifier: Apache-2.0
#pragma once
// `thptrace bench`: the fork/COW/THP experiments, reproducible in one command. Each
// scenario starts its own redis-server processes on 127.0.0.1, loads a deterministic dataset,
// runs the load generator through phases (before / during / after) that Redis's own state bounds,
// with the real `thptrace --pid` capture watching, and writes one results folder per run.

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"

namespace thptrace::bench {

// A failure that ends the run: what() is one sentence, printed as it is (exit 1).
class BenchError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// SIGINT/SIGTERM/SIGHUP arrived: the run unwinds, stopping what it started.
class Interrupted : public BenchError {
 public:
  Interrupted() : BenchError("interrupted by a signal") {}
};

// What starts the "during" phase, and which Redis state ends it.
enum class Trigger {
  none,          // steady: no during phase at all
  replica_sync,  // REPLICAOF on fresh replicas at once; ends when every link is up, the primary lists every
                 // replica online and no fork child is left
  rewrite_aof,   // BGREWRITEAOF; ends when aof_rewrite_in_progress and _scheduled are 0
  bgsave,        // BGSAVE; ends when rdb_bgsave_in_progress is 0
};

struct ScenarioSpec {
  std::string name;
  Trigger trigger = Trigger::none;
  // The probe and writers GET instead of SET (the negative control).
  bool read_only = false;
  // The reason every fork of the scenario must have; "" when no fork is expected.
  std::string expected_reason;
  // Extra redis-server arguments of the primary.
  std::vector<std::string> primary_args;
  // Host THP mode for the scenario ("always" / "never"), "" to leave the host's.
  std::string thp_mode;
  // One line for the summary: what the scenario varies.
  std::string description;
  // Fresh replicas the replica_sync trigger attaches at once: one for a full sync, three for a scale-out.
  unsigned replicas = 1;
  // The full syncs go over the server's rdb channel (Redis 8 repl-rdb-channel, Valkey 8
  // dual-channel-replication-enabled); every other scenario runs with it off where the build has one.
  bool rdb_channel = false;
  // Chosen by its own name in --scenarios, not only through a group: a scenario the server cannot
  // run is then a usage error rather than a skip.
  bool named = false;
};

// Every scenario in run order; `thp_always` and `thp_never` are the THP A/B.
const std::vector<ScenarioSpec>& all_scenarios();
// Expands a --scenarios list (names and the aliases `aof_rewrite`, `thp_ab`, `full_sync`, `scale_out`,
// `all`) into specs in run order, `named` set on those the list names. Throws UsageError naming an
// unknown word.
std::vector<ScenarioSpec> select_scenarios(const std::string& comma_list);

enum class ThpAb { automatic, on, off };

struct BenchOptions {
  uint64_t keys = 500000;
  size_t value_size = 400;
  uint64_t seed = 1;
  unsigned writers = 4;
  unsigned batch = 80;
  // Probe requests per second, open loop; 0 = closed loop.
  double rate = 0;
  double seconds_per_phase = 5;
  std::vector<ScenarioSpec> scenarios;
  std::filesystem::path out_dir;
  // The server binary of every primary and replica (--server); "" = redis-server from PATH.
  std::string server;
  // The thptrace binary of every capture; "" = the one installed beside thptrace-bench, else on PATH.
  std::string thptrace;
  // automatic: the THP A/B runs when THP sysfs is writable.
  ThpAb thp_ab = ThpAb::automatic;
  bool help = false;
};

// Parses `thptrace bench` flags (argv[0] is the command's name). Throws UsageError.
BenchOptions parse_bench_options(int argc, const char* const* argv);
std::string bench_usage();

// `thptrace bench`: returns 0 when every scenario ran and the self-check passed, 1 on a runtime
// failure, a failed self-check or an interruption (results so far are kept), 2 on bad usage.
int bench_main(int argc, char** argv);

}  // namespace thptrace::bench
