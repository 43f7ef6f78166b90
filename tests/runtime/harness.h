// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared pieces of the runtime tests: child processes with pipes, real redis-server instances on
// loopback, the BPF precondition (fail, not skip, under THPTRACE_REQUIRE_BPF=1), and the checks that
// a capture left no BPF program of ours behind.

#include <gtest/gtest.h>

#include <sys/types.h>
#include "proc/proc.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "redis/client.h"

namespace thptrace::test {

// Skips the test when BPF cannot be used, or fails it when THPTRACE_REQUIRE_BPF=1.
#define REQUIRE_BPF()                                                   \
  do {                                                                  \
    const std::string why = ::thptrace::test::bpf_unavailable_reason(); \
    if (!why.empty()) {                                                 \
      if (::thptrace::test::bpf_required()) FAIL() << why;              \
      GTEST_SKIP() << why;                                              \
    }                                                                   \
  } while (0)

bool bpf_required();
std::string bpf_unavailable_reason();  // "" when BPF works here

std::string thptrace_bin();

// THPTRACE_EXPECT_MODES (set by the kernel-matrix guest runs, tests/vm): space-separated KEY=VALUE,
// the attach mode each named family must take on that kernel (fork=tp_btf cow_fault=fentry ...),
// bpf_atomics=yes|no and task_storage=yes|no. The value for `key`, or "" when it is not named (any
// mode is accepted).
std::string expected_mode(const std::string& key);
// EXPECT_EQ of every named family against `modes`: {family: mode} (a report's "probes").
void expect_modes(const nlohmann::json& modes, const std::string& context);
std::string workload_bin();

// A child process with its stdin/stdout/stderr on pipes.
class Process {
 public:
  explicit Process(const std::vector<std::string>& argv);
  ~Process();  // SIGKILLs and reaps a child still running
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void write_stdin(const std::string& s);
  // Reads stdout up to a line containing `needle`; nullopt on EOF or timeout.
  std::optional<std::string> wait_stdout_line(const std::string& needle, std::chrono::milliseconds timeout);
  std::optional<std::string> wait_stderr_line(const std::string& needle, std::chrono::milliseconds timeout);
  void signal(int sig);
  // Waits for exit; returns the exit code (128+sig when killed), nullopt on timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  // All output read so far plus whatever is left once the process has exited.
  std::string out();
  std::string err();

 private:
  std::optional<std::string> wait_line(int fd, std::string& buf, const std::string& needle, std::chrono::milliseconds timeout);
  void drain();
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  std::string out_buf_, err_buf_;
  std::optional<int> status_;
};

// A redis-server on 127.0.0.1, in its own temporary directory; shut down by the destructor.
class RedisServer {
 public:
  // port 0 picks a free one; a fixed port lets a test restart "the same" Redis. `binary`: another
  // server of the family (a Valkey or a from-source Redis, tests/servers/fetch.sh).
  explicit RedisServer(const std::vector<std::string>& extra_args = {}, int port = 0,
                       const std::string& binary = "redis-server");
  ~RedisServer();
  int port() const { return port_; }
  pid_t pid() const { return proc_->pid(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::unique_ptr<redis::Client> client() const;
  // Runs a command, failing the test on error.
  std::string cmd(const std::vector<std::string>& args) const;
  std::string info_field(const std::string& key) const;
  const std::string& dir() const { return dir_; }

 private:
  int port_ = 0;
  std::string password_;  // from --requirepass, for the test's own connections
  std::string dir_;
  std::unique_ptr<Process> proc_;
};

// A server of the Redis family besides Debian's redis-server: one tests/servers/fetch.sh fetched or
// built into its cache (valkey-8.0.1, redis-8.0.2).
struct ServerBuild {
  std::string name;
  std::string binary;
  // The config that makes a replica sync through its own RDB connection, one fork per replica
  // (Redis 8: repl-rdb-channel; Valkey 8: dual-channel-replication-enabled); empty before them.
  std::string channel_config;
};
// Runs tests/servers/fetch.sh (idempotent; the first run downloads and builds into its cache) and
// returns the server named `name`, or nullopt with *why set.
std::optional<ServerBuild> fetched_server(const std::string& name, std::string* why);
// Declares `var`, the fetched build `name` (std::optional<ServerBuild>), in a TEST body or a void
// helper; where fetching fails, fails the test under THPTRACE_REQUIRE_BPF=1 and skips it otherwise
// (like REQUIRE_BPF, a macro so that FAIL and GTEST_SKIP return from the test). `var` is a name
// being declared, which parentheses would not allow.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define REQUIRE_FETCHED_SERVER(var, name)                                \
  std::string var##_why;                                                 \
  const auto var = ::thptrace::test::fetched_server((name), &var##_why); \
  if (!(var)) {                                                          \
    if (::thptrace::test::bpf_required()) FAIL() << var##_why;           \
    GTEST_SKIP() << var##_why;                                           \
  }                                                                      \
  static_assert(true)
// NOLINTEND(bugprone-macro-parentheses)

int free_port();
// A new directory in the temporary directory. Made in a test, it is removed when the test ends
// (TempDirLife::test); one that outlives the test that made it (a function-local static shared by
// several tests) is its owner's to remove (TempDirLife::owner).
enum class TempDirLife { test, owner };
std::string make_temp_dir(const std::string& prefix, TempDirLife life = TempDirLife::test);

// Names of loaded BPF programs (bpftool prog show), and those of them that are thptrace's.
std::vector<std::string> loaded_bpf_program_names();
std::vector<std::string> leftover_thptrace_programs();

// A capture report, checked against docs/reference/report.schema.json (throws when it does not match).
nlohmann::json read_json(const std::string& path);

// GET http://127.0.0.1:port/path; the body, or nullopt when nothing answered.
std::optional<std::string> http_get(int port, const std::string& path);
// The value of one series ("name{labels}" exactly as exposed, or a bare name) in a scrape.
std::optional<double> metric_value(const std::string& scrape, const std::string& series);
// The value of the one series of metric `name` whose labels include `labels` (whatever else it
// carries, such as a container's namespace, pod and container); nullopt when none or several do.
std::optional<double> metric_value_with(const std::string& scrape, const std::string& name,
                                        const std::map<std::string, std::string>& labels);

// Sets /sys/kernel/mm/transparent_hugepage/enabled (or another THP mode file: a folio size's
// hugepages-<N>kB/enabled) for the scope and restores it after, also when the test fails
// (destructor) or the process is interrupted (atexit and signal handler).
class ThpModeGuard {
 public:
  explicit ThpModeGuard(const std::string& mode, std::string path = proc::kThpEnabledPath);
  ~ThpModeGuard();
  ThpModeGuard(const ThpModeGuard&) = delete;
  ThpModeGuard& operator=(const ThpModeGuard&) = delete;
  static bool writable();

 private:
  std::string path_, saved_;
};

// Polls pred every `step` until it holds or `timeout` has passed; whether it held.
template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds timeout,
                std::chrono::milliseconds step = std::chrono::milliseconds(50)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(step);
  }
  return pred();
}

// Until INFO's `key` reads `want` on any server with info_field (RedisServer, SecureRedis). An INFO
// that fails (a server frozen past the client's timeout: one fsync-bound on a throttled disk) is
// asked again until `timeout`.
template <class Server>
bool wait_info(const Server& r, const std::string& key, const std::string& want, std::chrono::milliseconds timeout) {
  return wait_until(
      [&] {
        try {
          return r.info_field(key) == want;
        } catch (const std::runtime_error&) {
          return false;
        }
      },
      timeout);
}

// DEBUG POPULATE of `keys` keys named PREFIX:N with values of `bytes`, in steps of 20,000 (each makes
// the keys up to its count that are missing): each step is a command the client waits for (5 s),
// which a TCG guest on a busy host took past that for 100,000.
template <class Server>
void populate(const Server& r, uint64_t keys, const std::string& prefix = "key", int bytes = 400) {
  for (uint64_t n = std::min<uint64_t>(keys, 20000);; n = std::min(keys, n + 20000)) {
    r.cmd({"DEBUG", "POPULATE", std::to_string(n), prefix, std::to_string(bytes)});
    if (n == keys) break;
  }
}

// One figure of a forecast held to what happened, as tests/bench/predict_accuracy.sh reads it:
// "predict-outcome WHAT | FIGURE | METHOD | value V low L high H truth T" on stdout.
void print_predict_outcome(const std::string& what, const std::string& figure, const std::string& method, double value,
                           double low, double high, double truth);

// How a WriteLoad picks its keys: each of `keys` in turn (uniform), the first tenth of them over and
// over (hot), or, a write in four, a key never written before and the others in turn (growing: the
// dataset grows by a quarter of the writes, values in memory the allocator had not touched).
enum class WritePattern { uniform, hot, growing };
const char* write_pattern_name(WritePattern p);

// SETs of 400 bytes from one connection of `r` (any server with client()) until destroyed: the parent
// keeps dirtying pages while its children live. As fast as the server answers, or, with `per_second`,
// at that rate (each write sent at its time, or at once when behind): clients of a server in
// production send at the rate of their demand, which a fork does not slow, where a loop at full speed
// writes less while the fork's copies and its child take the server's time.
template <class Server>
class WriteLoad {
 public:
  explicit WriteLoad(const Server& r, std::string prefix = "key:", uint64_t keys = 200000,
                     WritePattern pattern = WritePattern::uniform, double per_second = 0)
      : thread_([this, &r, prefix = std::move(prefix), keys, pattern, per_second] {
          auto c = r.client();
          uint64_t i = 0;
          const uint64_t cycle = pattern == WritePattern::hot ? std::max<uint64_t>(1, keys / 10) : keys;
          const auto start = std::chrono::steady_clock::now();
          while (c && !stop_) {
            if (per_second > 0)
              std::this_thread::sleep_until(start +
                                            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                std::chrono::duration<double>(static_cast<double>(i) / per_second)));
            const std::string key = pattern == WritePattern::growing && i % 4 == 3
                                        ? prefix + "new:" + std::to_string(i++)
                                        : prefix + std::to_string(i++ % cycle);
            c->command({"SET", key, std::string(400, 'x')});
            ++writes_;
          }
        }) {}
  ~WriteLoad() {
    stop_ = true;
    thread_.join();
  }
  WriteLoad(const WriteLoad&) = delete;
  WriteLoad& operator=(const WriteLoad&) = delete;
  uint64_t writes() const { return writes_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> writes_{0};
  std::thread thread_;
};

// A memory cgroup made for a test (cgroup v1's memory controller, or v2 with +memory) and removed by
// the destructor, after its processes are gone. ok() is false where none can be made.
class MemoryCgroup {
 public:
  MemoryCgroup();
  ~MemoryCgroup();
  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;
  bool ok() const { return !dir_.empty(); }
  int version() const { return version_; }
  const std::string& dir() const { return dir_; }
  bool add(pid_t pid) const;
  // A file's number: the v1 name or the v2 name, by the hierarchy's version.
  uint64_t read(const std::string& v1, const std::string& v2) const;
  uint64_t usage() const { return read("memory.usage_in_bytes", "memory.current"); }
  uint64_t limit() const { return read("memory.limit_in_bytes", "memory.max"); }
  bool set_limit(uint64_t bytes) const;

 private:
  int version_ = 0;
  std::string dir_;
};

}  // namespace thptrace::test
