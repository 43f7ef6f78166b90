// SPDX-License-Identifier: Apache-2.0
#include "hostile.h"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace thptrace::test {
namespace {

HostileStats parse_stats(const nlohmann::json& j) {
  HostileStats s;
  s.connections = j.value("connections", 0);
  s.open = j.value("open", 0);
  s.commands = j.value("commands", 0);
  if (j.contains("by_command"))
    for (const auto& [k, v] : j.at("by_command").items()) s.by_command[k] = v.get<int>();
  if (j.contains("auth"))
    for (const auto& a : j.at("auth")) s.auth.push_back(a.get<std::vector<std::string>>());
  return s;
}

}  // namespace

std::string hostile_redis_script() { return std::string(THPTRACE_SOURCE_DIR) + "/tests/hostile/hostile_redis.py"; }

HostileRedis::HostileRedis(const std::vector<std::string>& modes, const std::string& program_name)
    : dir_(make_temp_dir("thptrace-hostile-")) {
  stats_path_ = dir_ + "/stats.json";
  std::string program = "python3";
  if (!program_name.empty()) {
    program = dir_ + "/" + program_name;
    std::filesystem::copy_file(std::filesystem::canonical("/usr/bin/python3"), program);
    std::filesystem::permissions(program, std::filesystem::perms::owner_all, std::filesystem::perm_options::add);
  }
  std::vector<std::string> argv = {program, hostile_redis_script(), "--port", "0", "--stats", stats_path_};
  argv.insert(argv.end(), modes.begin(), modes.end());
  proc_ = std::make_unique<Process>(argv);
  const auto line = proc_->wait_stdout_line("port ", std::chrono::seconds(20));
  if (!line) throw std::runtime_error("hostile_redis.py did not start: " + proc_->err());
  port_ = std::stoi(line->substr(line->find("port ") + 5));
}

HostileRedis::~HostileRedis() {
  stop();
  std::filesystem::remove_all(dir_);
}

HostileStats HostileRedis::stats() const {
  std::ifstream in(stats_path_);
  if (!in) return {};
  try {
    return parse_stats(nlohmann::json::parse(in));
  } catch (const std::exception&) {
    return {};  // replaced under our feet: os.replace makes that rare, not impossible
  }
}

HostileStats HostileRedis::stop() {
  proc_->signal(SIGTERM);
  if (!proc_->wait(std::chrono::seconds(5))) {
    proc_->signal(SIGKILL);
    proc_->wait(std::chrono::seconds(5));
  }
  return stats();
}

}  // namespace thptrace::test
