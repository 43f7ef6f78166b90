// SPDX-License-Identifier: Apache-2.0
#include "proc/container.h"

#include <dirent.h>
#include <unistd.h>

#include <cctype>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "common/text.h"
#include "proc/proc.h"

namespace thptrace::proc {
namespace {

constexpr size_t kIdLength = 64;
constexpr size_t kMaxName = 253;  // a Kubernetes name (DNS subdomain) is at most this long
constexpr size_t kMaxConfig = 4 << 20, kMaxContainersJson = 16 << 20;
constexpr int kMaxAncestors = 8;  // runc init, conmon or the shim, and their parents

bool is_hex_id(std::string_view s) {
  if (s.size() != kIdLength) return false;
  for (const char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c)) || std::isupper(static_cast<unsigned char>(c))) return false;
  return true;
}

// A name as every writer may take it: valid UTF-8, control characters written visibly (a label value,
// a report line and a log line alike), cut to a Kubernetes name's length.
std::string clean(std::string_view s) { return text::printable(s.substr(0, kMaxName)); }

// The first string value of `keys` in the object j.
std::string first_of(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (const auto it = j.find(k); it != j.end() && it->is_string()) return clean(it->get<std::string>());
  return {};
}

// Where runtimes keep a container's OCI config.json, under the host's root.
std::vector<std::string> bundle_configs(const std::string& root, const std::string& id) {
  std::vector<std::string> out = {
      root + "/run/containers/storage/overlay-containers/" + id + "/userdata/config.json",      // CRI-O, podman
      root + "/var/lib/containers/storage/overlay-containers/" + id + "/userdata/config.json",  // podman
  };
  // containerd, one directory per namespace (k8s.io, moby, default).
  const std::string tasks = root + "/run/containerd/io.containerd.runtime.v2.task";
  if (std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(tasks.c_str()), ::closedir); d)
    while (const dirent* e = ::readdir(d.get()))
      if (e->d_name[0] != '.') {
        std::string path = tasks;
        path.append("/").append(e->d_name).append("/").append(id).append("/config.json");
        out.push_back(std::move(path));
      }
  return out;
}

}  // namespace

std::string container_id_from_cgroup(std::string_view cgroup) {
  std::string found;
  for (size_t at = 0; at < cgroup.size();) {
    // Tokens split at every character that is not a hex digit: an id stands alone between them.
    size_t end = at;
    while (end < cgroup.size() && std::isxdigit(static_cast<unsigned char>(cgroup[end]))) ++end;
    if (is_hex_id(cgroup.substr(at, end - at))) found = cgroup.substr(at, end - at);
    at = end + 1;
  }
  return found;
}

ContainerNames names_from_oci_config(std::string_view config_json) {
  ContainerNames n;
  const auto j = nlohmann::json::parse(config_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return n;
  const auto a = j.find("annotations");
  if (a == j.end() || !a->is_object()) return n;
  n.ns = first_of(*a, {"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace"});
  n.pod = first_of(*a, {"io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"});
  n.container = first_of(*a, {"io.kubernetes.cri.container-name", "io.kubernetes.container.name"});
  return n;
}

std::string podman_name(std::string_view containers_json, const std::string& id) {
  const auto j = nlohmann::json::parse(containers_json, nullptr, false);
  if (j.is_discarded() || !j.is_array()) return {};
  for (const auto& c : j) {
    if (!c.is_object() || c.value("id", nlohmann::json()) != id) continue;
    const auto names = c.find("names");
    if (names != c.end() && names->is_array() && !names->empty() && names->front().is_string())
      return clean(names->front().get<std::string>());
  }
  return {};
}

nlohmann::ordered_json container_json(const ContainerNames& n) {
  return {{"id", n.id}, {"namespace", n.ns}, {"pod", n.pod}, {"name", n.container}};
}

ContainerNames container_from(const nlohmann::json& j) {
  return {j.at("id").get<std::string>(), j.at("namespace").get<std::string>(), j.at("pod").get<std::string>(),
          j.at("name").get<std::string>()};
}

ContainerNames container_names(pid_t pid) {
  ContainerNames n;
  const auto cgroup = read_file("/proc/" + std::to_string(pid) + "/cgroup", 64 << 10);
  if (!cgroup) return n;
  n.id = container_id_from_cgroup(*cgroup);
  if (n.id.empty()) return n;
  // The runtime's files are on the host: seen through the root of PID 1 (the host's init, in the
  // host's PID namespace), else of the container's ancestors (containerd-shim, conmon: processes of
  // the host's mount namespace that a daemon may read where PID 1 is refused to it), else our own.
  std::vector<std::string> roots = {"/proc/1/root"};
  pid_t at = pid;
  for (int depth = 0; depth < kMaxAncestors; ++depth) {
    const auto status = read_status(at);
    if (!status || status->ppid <= 1) break;
    at = status->ppid;
    roots.push_back("/proc/" + std::to_string(at) + "/root");
  }
  roots.emplace_back();
  for (const auto& root : roots) {
    if (!root.empty() && ::access((root + "/").c_str(), X_OK) != 0) continue;
    bool found = false;
    for (const auto& path : bundle_configs(root, n.id)) {
      const auto config = read_file(path, kMaxConfig);
      if (!config) continue;
      const auto names = names_from_oci_config(*config);
      n.ns = names.ns;
      n.pod = names.pod;
      n.container = names.container;
      found = true;
      break;
    }
    if (n.container.empty())
      if (const auto list =
              read_file(root + "/var/lib/containers/storage/overlay-containers/containers.json", kMaxContainersJson)) {
        n.container = podman_name(*list, n.id);
        found = true;
      }
    if (found) break;
  }
  return n;
}

}  // namespace thptrace::proc
