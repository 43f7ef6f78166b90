// SPDX-License-Identifier: Apache-2.0
#pragma once
// Real containers for the runtime tests: podman with runc and the cgroupfs manager (crun refuses this
// host's hybrid cgroup layout), images built without a registry by scripts/container-image.sh.
// Every container publishes only on 127.0.0.1 and is removed by its owner's destructor, also when
// the test fails; containers a killed test run left behind are removed by the next run.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "harness.h"
#include "redis/client.h"

namespace thptrace::test {

// Skips the test when podman is missing, or fails it when THPTRACE_REQUIRE_BPF=1 (CI), where
// scripts/install-deps.sh has installed it.
#define REQUIRE_PODMAN()                                                   \
  do {                                                                     \
    const std::string why = ::thptrace::test::podman_unavailable_reason(); \
    if (!why.empty()) {                                                    \
      if (::thptrace::test::bpf_required()) FAIL() << why;                 \
      GTEST_SKIP() << why;                                                 \
    }                                                                      \
  } while (0)

std::string podman_unavailable_reason();  // "" when podman runs containers here
// `podman` with the options every call here needs.
std::vector<std::string> podman_argv(const std::vector<std::string>& args);
// Runs podman; stdout (trimmed) on success, throws std::runtime_error with stderr otherwise.
std::string podman(const std::vector<std::string>& args, std::chrono::seconds timeout = std::chrono::seconds(120));
// The image from `scripts/container-image.sh KIND [ARG]`, built once per test process.
std::string container_image(const std::string& kind, const std::string& arg = "");
// A container name unique to this test process; names of dead test processes are swept.
std::string container_name();

class RedisContainer {
 public:
  enum class Network { host, bridge };
  // A redis-server (--save "", --repl-diskless-sync no) in its own PID and mount namespaces; with
  // host networking on a free 127.0.0.1 port, or in its own network namespace on 6379, published on
  // a free 127.0.0.1 port.
  // `annotations` (KEY=VALUE) go into the container's OCI config, as a Kubernetes runtime writes them.
  explicit RedisContainer(Network network, const std::vector<std::string>& extra_args = {},
                          const std::vector<std::string>& annotations = {});
  ~RedisContainer();
  RedisContainer(const RedisContainer&) = delete;
  RedisContainer& operator=(const RedisContainer&) = delete;

  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }  // host pid of redis-server
  int host_port() const { return host_port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(host_port_); }
  std::string bridge_ip() const { return bridge_ip_; }  // "" with host networking
  std::unique_ptr<redis::Client> client() const;
  std::string cmd(const std::vector<std::string>& args) const;
  std::string info_field(const std::string& key) const;
  bool wait_info(const std::string& key, const std::string& want, std::chrono::seconds timeout) const;

 private:
  std::string name_;
  pid_t pid_ = 0;
  int host_port_ = 0;
  std::string bridge_ip_;
};

}  // namespace thptrace::test
