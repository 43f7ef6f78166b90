// SPDX-License-Identifier: Apache-2.0
// What the runtimes leave on the host, as they write it: the container id in the cgroup paths of
// podman (cgroupfs and systemd), containerd under Kubernetes (cgroup v1 and v2), CRI-O and Docker;
// the names in an OCI config.json's annotations (containerd's and CRI-O's/podman's keys); podman's
// own name for a container. Hostile input gives empty names, never an exception.
#include <gtest/gtest.h>

#include <unistd.h>

#include "daemon/discovery.h"
#include "proc/container.h"
#include "proc/proc.h"

using namespace thptrace::proc;

namespace {
const std::string kId = "94fe4324422bed49ea4bd0a23287b2b3c2dfee154114f0d2440db69b890eb566";
}

TEST(ContainerNames, IdFromEveryRuntimesCgroupPath) {
  EXPECT_EQ(container_id_from_cgroup("9:name=systemd:/libpod_parent/libpod-" + kId + "\n8:pids:/libpod_parent/libpod-" +
                                     kId + "\n"),
            kId);
  EXPECT_EQ(container_id_from_cgroup("0::/machine.slice/libpod-" + kId + ".scope/container\n"), kId);
  EXPECT_EQ(
      container_id_from_cgroup("0::/kubepods.slice/kubepods-burstable.slice/"
                               "kubepods-burstable-pod4f1c2a3e_8b7d_4c1e_9f00_123456789abc.slice/cri-containerd-" +
                               kId + ".scope\n"),
      kId);
  EXPECT_EQ(
      container_id_from_cgroup("11:memory:/kubepods/burstable/pod4f1c2a3e-8b7d-4c1e-9f00-123456789abc/" + kId + "\n"),
      kId);
  EXPECT_EQ(container_id_from_cgroup("0::/kubepods.slice/crio-" + kId + ".scope\n"), kId);
  EXPECT_EQ(container_id_from_cgroup("12:cpu,cpuacct:/docker/" + kId + "\n"), kId);
  // A bare host, a user session, and near misses: no id.
  EXPECT_EQ(container_id_from_cgroup("0::/user.slice/user-0.slice/session-3.scope\n"), "");
  EXPECT_EQ(container_id_from_cgroup("0::/system.slice/redis-server.service\n"), "");
  EXPECT_EQ(container_id_from_cgroup("0::/x/" + kId.substr(1) + "\n"), "");  // 63 digits
  EXPECT_EQ(container_id_from_cgroup("0::/x/" + kId + "0\n"), "");           // 65 digits
  EXPECT_EQ(container_id_from_cgroup(""), "");
}

TEST(ContainerNames, KubernetesNamesFromTheBundlesAnnotations) {
  // containerd's CRI plugin.
  auto n = names_from_oci_config(R"({"ociVersion":"1.1.0","annotations":{
      "io.kubernetes.cri.container-type":"container","io.kubernetes.cri.container-name":"redis",
      "io.kubernetes.cri.sandbox-name":"cache-0","io.kubernetes.cri.sandbox-namespace":"shop"}})");
  EXPECT_EQ(n.ns, "shop");
  EXPECT_EQ(n.pod, "cache-0");
  EXPECT_EQ(n.container, "redis");
  // CRI-O, and podman given the same annotations.
  n = names_from_oci_config(R"({"annotations":{"io.kubernetes.pod.name":"web-0","io.kubernetes.pod.namespace":"prod",
      "io.kubernetes.container.name":"valkey","io.container.manager":"libpod"}})");
  EXPECT_EQ(n, (ContainerNames{"", "prod", "web-0", "valkey"}));
  // No Kubernetes, or not what a config should be: nothing, and no exception.
  EXPECT_EQ(names_from_oci_config(R"({"annotations":{"io.container.manager":"libpod"}})"), ContainerNames{});
  for (const char* bad :
       {"", "{", "[]", "null", R"({"annotations":[]})", R"({"annotations":{"io.kubernetes.pod.name":7}})"})
    EXPECT_EQ(names_from_oci_config(bad), ContainerNames{}) << bad;
  // A name is cut to Kubernetes' 253 and made valid UTF-8.
  const std::string huge(10000, 'a');
  n = names_from_oci_config(R"({"annotations":{"io.kubernetes.pod.name":")" + huge + "\xff\"}}");
  EXPECT_TRUE(n.pod.empty() || n.pod.size() == 253u);
  n = names_from_oci_config(R"({"annotations":{"io.kubernetes.pod.name":"a\u00e9b"}})");
  EXPECT_EQ(n.pod,
            "a\xc3\xa9"
            "b");
  // A control character cannot break a line or a label: it is written visibly.
  n = names_from_oci_config(R"({"annotations":{"io.kubernetes.pod.name":"a\nb\u001b[31m"}})");
  EXPECT_EQ(n.pod, "a\\x0ab\\x1b[31m");
}

TEST(ContainerNames, PodmansOwnName) {
  const std::string list =
      R"([{"id":"0000000000000000000000000000000000000000000000000000000000000000","names":["other"]},
      {"id":")" +
      kId + R"(","names":["redis-a"],"image":"x"}])";
  EXPECT_EQ(podman_name(list, kId), "redis-a");
  EXPECT_EQ(podman_name(list, std::string(64, 'f')), "");
  for (const char* bad : {"", "{}", "[1,2]", R"([{"id":5}])", R"([{"id":"x","names":"y"}])"})
    EXPECT_EQ(podman_name(bad, "x"), "") << bad;
}

TEST(ContainerNames, ABareHostProcessHasNone) {
  EXPECT_EQ(container_names(::getpid()).id.empty(), container_id_from_cgroup(*read_file("/proc/self/cgroup")).empty());
  EXPECT_EQ(container_names(999'999'999), ContainerNames{});
}

// Two bridge containers both listening on 127.0.0.1:6379 get labels of their own; an address that
// names the server on the host, or a server on the host, keeps its label.
TEST(ContainerNames, ALoopbackLabelInAContainerCarriesItsName) {
  using thptrace::daemon::container_scoped_label;
  EXPECT_EQ(container_scoped_label("127.0.0.1:6379", {kId, "shop", "cache-0", "redis"}, true),
            "127.0.0.1:6379@shop/cache-0");
  EXPECT_EQ(container_scoped_label("127.0.0.1:6379", {kId, "", "", "redis-a"}, true), "127.0.0.1:6379@redis-a");
  EXPECT_EQ(container_scoped_label("[::1]:6379", {kId, "", "", ""}, true), "[::1]:6379@94fe4324422b");
  EXPECT_EQ(container_scoped_label("unix:/run/redis.sock", {kId, "", "", "b"}, true), "unix:/run/redis.sock@b");
  EXPECT_EQ(container_scoped_label("10.88.0.7:6379", {kId, "shop", "cache-0", "redis"}, true), "10.88.0.7:6379");
  EXPECT_EQ(container_scoped_label("127.0.0.1:6379", {}, true), "127.0.0.1:6379");
  EXPECT_EQ(container_scoped_label("redis-server", {kId, "", "", "a"}, true), "redis-server");
  // With host networking its loopback address is the host's; its unix socket is still its own.
  EXPECT_EQ(container_scoped_label("127.0.0.1:6379", {kId, "", "", "a"}, false), "127.0.0.1:6379");
  EXPECT_EQ(container_scoped_label("unix:/run/redis.sock", {kId, "", "", "b"}, false), "unix:/run/redis.sock@b");
}
