// SPDX-License-Identifier: Apache-2.0
#include "container_harness.h"

#include <signal.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace thptrace::test {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// Removes test containers whose creating process is gone (a run that was killed).
void sweep_stale_containers() {
  std::string names;
  try {
    names = podman({"ps", "-a", "--filter", "name=^thptrace-test-", "--format", "{{.Names}}"});
  } catch (const std::exception&) {
    return;
  }
  size_t pos = 0;
  while (pos < names.size()) {
    const size_t nl = names.find('\n', pos);
    const std::string name = names.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? names.size() : nl + 1;
    // thptrace-test-PID-N
    const auto dash = name.find('-', 14);
    const pid_t owner = static_cast<pid_t>(std::atol(name.substr(14, dash - 14).c_str()));
    if (owner > 0 && ::kill(owner, 0) != 0 && errno == ESRCH) {
      try {
        podman({"rm", "-f", "-t", "0", name});
      } catch (const std::exception&) {
      }
    }
  }
}

}  // namespace

std::vector<std::string> podman_argv(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"podman", "--cgroup-manager", "cgroupfs", "--runtime", "runc"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

std::string podman(const std::vector<std::string>& args, std::chrono::seconds timeout) {
  Process p(podman_argv(args));
  const auto code = p.wait(timeout);
  if (code != 0) {
    std::string cmd;
    for (const auto& a : args) cmd += " " + a;
    throw std::runtime_error("podman" + cmd + " failed: " + trim(p.err()));
  }
  return trim(p.out());
}

std::string podman_unavailable_reason() {
  static const std::string why = [] {
    if (::access("/usr/bin/podman", X_OK) != 0) return std::string("podman is not installed (scripts/install-deps.sh)");
    if (::access("/usr/sbin/runc", X_OK) != 0 && ::access("/usr/bin/runc", X_OK) != 0)
      return std::string("runc is not installed (scripts/install-deps.sh)");
    sweep_stale_containers();
    return std::string();
  }();
  return why;
}

std::string container_image(const std::string& kind, const std::string& arg) {
  static std::mutex mu;
  static std::map<std::string, std::string> built;
  std::lock_guard lock(mu);
  const std::string key = kind + " " + arg;
  if (auto it = built.find(key); it != built.end()) return it->second;
  std::vector<std::string> argv = {"bash", std::string(THPTRACE_SOURCE_DIR) + "/scripts/container-image.sh", kind};
  if (!arg.empty()) argv.push_back(arg);
  Process p(argv);
  // A fresh machine downloads the packages once (a few minutes on a slow mirror).
  const auto code = p.wait(std::chrono::seconds(900));
  if (code != 0) throw std::runtime_error("scripts/container-image.sh " + key + " failed: " + trim(p.err()));
  const std::string out = trim(p.out());
  return built[key] = out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
}

std::string container_name() {
  static int n = 0;
  return "thptrace-test-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
}

RedisContainer::RedisContainer(Network network, const std::vector<std::string>& extra_args,
                               const std::vector<std::string>& annotations)
    : name_(container_name()) {
  const std::string image = container_image("redis");
  host_port_ = free_port();
  std::vector<std::string> args = {
      "run", "-d", "--name", name_, "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096"};
  for (const auto& a : annotations) args.insert(args.end(), {"--annotation", a});
  int inner_port = 6379;
  if (network == Network::host) {
    args.insert(args.end(), {"--network", "host"});
    inner_port = host_port_;
  } else {
    args.insert(args.end(), {"-p", "127.0.0.1:" + std::to_string(host_port_) + ":6379"});
  }
  args.insert(args.end(),
              {image, "redis-server", "--port", std::to_string(inner_port), "--bind",
               network == Network::host ? "127.0.0.1" : "0.0.0.0", "--protected-mode", "no", "--save", "",
               "--appendonly", "no", "--repl-diskless-sync", "no", "--enable-debug-command", "yes", "--dir", "/data"});
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  try {
    podman(args);
    pid_ = static_cast<pid_t>(std::stol(podman({"inspect", name_, "--format", "{{.State.Pid}}"})));
    if (network == Network::bridge)
      bridge_ip_ = podman({"inspect", name_, "--format", "{{.NetworkSettings.IPAddress}}"});
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < until) {
      if (auto c = client(); c && c->command({"PING"}) == "PONG") return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw std::runtime_error("redis-server in container " + name_ + " did not answer on " + address());
  } catch (...) {
    try {
      podman({"rm", "-f", "-t", "0", name_});
    } catch (const std::exception&) {
    }
    throw;
  }
}

RedisContainer::~RedisContainer() {
  try {
    podman({"rm", "-f", "-t", "0", name_});
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}

std::unique_ptr<redis::Client> RedisContainer::client() const {
  std::string error;
  return redis::Client::connect({"127.0.0.1", host_port_}, "", std::chrono::milliseconds(30000), &error);
}

std::string RedisContainer::cmd(const std::vector<std::string>& args) const {
  auto c = client();
  if (!c) throw std::runtime_error("cannot connect to redis in " + name_);
  auto r = c->command(args);
  if (!r) throw std::runtime_error(args[0] + " failed in " + name_ + ": " + c->last_error());
  return *r;
}

std::string RedisContainer::info_field(const std::string& key) const {
  return redis::info_str(redis::parse_info(cmd({"INFO", "everything"})), key);
}

bool RedisContainer::wait_info(const std::string& key, const std::string& want, std::chrono::seconds timeout) const {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (info_field(key) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace thptrace::test
