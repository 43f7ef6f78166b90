// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the container runtime calls a process, read from what it leaves on the host, without the
// Kubernetes API: the container id from the process's cgroup path, then the OCI bundle's
// config.json that containerd, CRI-O and podman write, whose annotations carry the pod's namespace
// and name and the container's name; else the runtime's own name for the container (podman's
// containers.json). Every file is the host's and read as hostile: bounded, parsed without trusting
// it, names cut to what Kubernetes allows and made valid UTF-8.

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace thptrace::proc {

struct ContainerNames {
  std::string id;                  // the container's id (64 hex digits); "" on a bare host
  std::string ns, pod, container;  // Kubernetes namespace and pod, the container's name; "" when unknown
  bool operator==(const ContainerNames&) const = default;
};

// The container id in /proc/PID/cgroup's text: the last 64-hex-digit name in any line's path
// (docker-ID.scope, /docker/ID, cri-containerd-ID.scope, crio-ID.scope, libpod-ID, kubepods/.../ID);
// "" when there is none.
std::string container_id_from_cgroup(std::string_view cgroup);

// The names an OCI config.json's annotations give (containerd's io.kubernetes.cri.*, CRI-O's and
// podman's io.kubernetes.pod.* and io.kubernetes.container.name). Empty fields when it has none
// or is not JSON.
ContainerNames names_from_oci_config(std::string_view config_json);

// podman's name for container `id` in its containers.json ([{"id": ..., "names": [...]}, ...]); "".
std::string podman_name(std::string_view containers_json, const std::string& id);

// The names as the report and the recorded inputs write them: {id, namespace, pod, name}. container_from
// throws nlohmann::json::exception when a key is missing or not a string.
nlohmann::ordered_json container_json(const ContainerNames& n);
ContainerNames container_from(const nlohmann::json& j);

// The names of the container pid runs in, from the host's files (through the root of PID 1 or of the
// container's runtime process when one can be read, so a daemon in a container of its own with the
// host's PID namespace reads the host's); all empty on a bare host.
ContainerNames container_names(pid_t pid);

}  // namespace thptrace::proc
