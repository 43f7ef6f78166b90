// SPDX-License-Identifier: Apache-2.0
#pragma once
// tests/hostile/hostile_redis.py as a test's fixture: a fake Redis on 127.0.0.1 that answers as its
// modes say (--noperm-info, --huge-info BYTES, --replicas N, --silent, --invalid-utf8,
// --require-auth; the script lists them) and counts what it was sent, so a test can assert how
// often thptrace came back.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness.h"

namespace thptrace::test {

// What the fake saw so far.
struct HostileStats {
  int connections = 0;  // accepted, in all
  int open = 0;         // still open
  int commands = 0;
  std::map<std::string, int> by_command;       // "INFO", "AUTH", "CONFIG", ... (the first word)
  std::vector<std::vector<std::string>> auth;  // every AUTH's arguments, in order
  int count(const std::string& command) const {
    const auto it = by_command.find(command);
    return it == by_command.end() ? 0 : it->second;
  }
};

class HostileRedis {
 public:
  // Starts the script with these mode flags on a free port; fails the calling test (an exception
  // gtest reports) when it does not say its port within 20 s.
  // With program_name ("redis-server"), the script runs on a copy of python3 of that name, so the
  // process's comm is that name, as a fake server's would be.
  explicit HostileRedis(const std::vector<std::string>& modes, const std::string& program_name = "");
  ~HostileRedis();  // SIGTERM, then SIGKILL if it lingers
  HostileRedis(const HostileRedis&) = delete;
  HostileRedis& operator=(const HostileRedis&) = delete;

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  pid_t pid() const { return proc_->pid(); }
  // Read from the script's stats file (rewritten within 100 ms of a change).
  HostileStats stats() const;
  // Stops the server and returns the final counts.
  HostileStats stop();

 private:
  std::string dir_;
  std::string stats_path_;
  int port_ = 0;
  std::unique_ptr<Process> proc_;
};

std::string hostile_redis_script();

}  // namespace thptrace::test
