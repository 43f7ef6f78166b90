// SPDX-License-Identifier: Apache-2.0
#pragma once
// The processes a bench run starts: redis-server instances on 127.0.0.1 and the thptrace capture.
// Each is owned by an object whose destructor stops it, so an error or an interruption leaves
// nothing running; a child also gets a parent-death signal, for the case where we are killed.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "redis/client.h"
#include "redis/parse.h"

namespace thptrace::bench {

// Sleeps `d` in short steps; false (early) once `interrupted` is set.
bool sleep_unless(std::chrono::nanoseconds d, const std::atomic<bool>& interrupted);

// The absolute path of `name` found in PATH, "" when absent.
std::string find_in_path(const std::string& name);

// One child process, stdout and stderr to files. The child runs in its own process group (a
// Ctrl-C on the terminal reaches only us, and we stop it in order) and gets `death_signal` if
// the thread that spawned it dies, so spawn from the main thread. Move-less: identity matters.
class ChildProcess {
 public:
  // Executes `path` (argv[0] when empty) with `argv`.
  ChildProcess(const std::vector<std::string>& argv, const std::filesystem::path& stdout_path,
               const std::filesystem::path& stderr_path, int death_signal, const std::string& path = {});
  ~ChildProcess();  // SIGKILLs and reaps a child still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Non-blocking: the exit code (128+signal when killed) once it has exited.
  std::optional<int> poll_exit();
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  void signal(int sig);

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// A server (`server`: redis-server, or a Valkey or Redis build given by --server) on a free
// 127.0.0.1 port in `dir` (created; removed by the destructor unless keep_dir() was called),
// logging to dir/redis.log, never saving on its own (`--save ""`).
class RedisInstance {
 public:
  RedisInstance(const std::string& server, std::filesystem::path dir, const std::vector<std::string>& extra_args);
  ~RedisInstance();  // SHUTDOWN NOSAVE, then SIGKILL if it lingers
  RedisInstance(const RedisInstance&) = delete;
  RedisInstance& operator=(const RedisInstance&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::filesystem::path& dir() const { return dir_; }

  // Runs a command on the control connection (reconnecting once if it broke); throws
  // BenchError with Redis's error text.
  std::string command(const std::vector<std::string>& args);
  redis::InfoMap info(const std::string& section = "everything");
  // CONFIG GET of each key: the keys the server knows, with their values.
  std::map<std::string, std::string> config_get(const std::vector<std::string>& keys);
  // An INFO field, "" when absent.
  std::string info_field(const std::string& section, const std::string& key);

  // Keep the directory (its redis.log is evidence of a failed run).
  void keep_dir() { keep_dir_ = true; }
  void stop();

 private:
  redis::Client& client();

  std::filesystem::path dir_;
  int port_ = 0;
  pid_t pid_ = 0;
  bool keep_dir_ = false;
  std::unique_ptr<ChildProcess> process_;
  std::unique_ptr<redis::Client> client_;
};

// `thptrace --pid PID --redis ADDR --json PATH` run from the thptrace binary `thptrace`, so the kernel
// side is the real capture. Its text report and log go beside the JSON.
class Capture {
 public:
  // Starts the capture and waits until it says it is tracing; throws BenchError with its log
  // when it exits first or does not get there within 60 s.
  Capture(const std::string& thptrace, pid_t pid, const std::string& redis_address,
          const std::filesystem::path& json_path, const std::atomic<bool>& interrupted);
  ~Capture();  // SIGINT, then SIGKILL if it does not finish
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  // Ends the capture with SIGINT (it then writes its report); returns its exit code, nullopt
  // if it had to be killed.
  std::optional<int> stop();
  // The last lines of its stderr, for an error sentence.
  std::string log_tail() const;

 private:
  std::filesystem::path json_path_, log_path_;
  std::unique_ptr<ChildProcess> process_;
};

}  // namespace thptrace::bench
