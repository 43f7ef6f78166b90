// SPDX-License-Identifier: Apache-2.0
#include "daemon/discovery.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/text.h"
#include "proc/proc.h"
#include "redis/transport.h"

namespace thptrace::daemon {
namespace {

bool is_loopback(const std::string& ip) { return ip.rfind("127.", 0) == 0 || ip == "::1"; }

// Where to connect to reach a listener: wildcards on loopback, of the same family.
std::string reachable_ip(const std::string& ip) {
  if (ip == "0.0.0.0") return "127.0.0.1";
  if (ip == "::") return "::1";
  return ip;
}

}  // namespace

DiscoveredServer plan_routes(const proc::Listeners& listeners, const std::string& title_address,
                             const std::shared_ptr<const redis::TlsContext>& tls,
                             const std::vector<std::string>* outside_ips, bool tls_first) {
  DiscoveredServer out;
  for (const auto& u : listeners.unix_sockets) {
    redis::Address a;
    a.path = u.path;
    if (a.path.size() <= redis::kMaxUnixPath) out.routes.push_back({a, nullptr});
  }
  const auto title = redis::parse_address(title_address);
  std::vector<redis::Address> tcp;
  const auto add = [&](const redis::Address& a) {
    if (std::none_of(tcp.begin(), tcp.end(), [&](const auto& b) { return b.host == a.host && b.port == a.port; }))
      tcp.push_back(a);
  };
  for (const auto& l : listeners.tcp) {
    if (!outside_ips) {
      add({reachable_ip(l.ip), l.port, ""});
    } else if (l.ip == "0.0.0.0" || l.ip == "::") {
      for (const auto& ip : *outside_ips) add({ip, l.port, ""});
    } else if (!is_loopback(l.ip)) {
      add({l.ip, l.port, ""});
    }
  }
  // Loopback first, IPv4 before IPv6, the title's port before the others (a cluster bus port is
  // another listener, and not Redis's protocol), then by port.
  std::stable_sort(tcp.begin(), tcp.end(), [&](const redis::Address& a, const redis::Address& b) {
    const auto rank = [&](const redis::Address& x) {
      return std::tuple(!is_loopback(x.host), x.host.find(':') != std::string::npos, !(title && x.port == title->port),
                        x.port);
    };
    return rank(a) < rank(b);
  });
  const bool outside = outside_ips != nullptr;
  // The label: an address the process listens on, the first TCP one, else its first unix socket.
  if (!tcp.empty())
    out.label = tcp.front().str();
  else if (!out.routes.empty())
    out.label = out.routes.front().address.str();
  else
    out.label = "redis-server";
  std::vector<redis::Route> tls_routes;
  if (tls)
    for (const auto& a : tcp) tls_routes.push_back({a, tls, outside});
  if (tls_first) out.routes.insert(out.routes.begin(), tls_routes.begin(), tls_routes.end());
  for (const auto& a : tcp) out.routes.push_back({a, nullptr, outside});
  if (!tls_first) out.routes.insert(out.routes.end(), tls_routes.begin(), tls_routes.end());
  // No listener found (its /proc unreadable): the title's address is tried, but names nothing.
  if (out.routes.empty() && title && !outside) {
    if (tls && tls_first) out.routes.push_back({*title, tls});
    out.routes.push_back({*title, nullptr});
    if (tls && !tls_first) out.routes.push_back({*title, tls});
  }
  return out;
}

bool runs_allowed_executable(pid_t pid, const std::vector<std::string>& executables, std::string* why) {
  const std::string exe_link = "/proc/" + std::to_string(pid) + "/exe";
  struct stat running {};
  // stat() of the magic link is the running file itself, wherever (and in whatever mount
  // namespace) its path now is, renamed or deleted.
  if (::stat(exe_link.c_str(), &running) != 0) {
    if (why) *why = "its executable cannot be read (" + std::string(std::strerror(errno)) + ")";
    return false;
  }
  for (const auto& path : executables) {
    struct stat allowed {};
    if (::stat(path.c_str(), &allowed) == 0 && allowed.st_dev == running.st_dev && allowed.st_ino == running.st_ino)
      return true;
  }
  if (why) {
    std::string path = proc::exe_path(pid);
    if (path.size() > 256) path = path.substr(0, 256) + "...";
    *why = "its executable " + text::printable(path.empty() ? "?" : path) + " is not one of --discover-credentials-exe";
  }
  return false;
}

void withhold_credentials(DiscoveredServer& s, const CredentialPolicy& policy, bool exe_allowed,
                          const std::string& why_not_exe) {
  if (exe_allowed) return;
  for (auto& r : s.routes) {
    if (r.tls) continue;
    const bool listed = std::any_of(policy.addresses.begin(), policy.addresses.end(),
                                    [&](const redis::Address& a) { return a.str() == r.address.str(); });
    if (!listed)
      r.withheld = why_not_exe + ", and " + r.address.str() + " is not one of --discover-credentials-address";
  }
}

std::string container_scoped_label(const std::string& label, const proc::ContainerNames& names, bool own_netns) {
  if (names.id.empty()) return label;
  const auto a = redis::parse_address(label);
  const bool local =
      label.rfind("unix:", 0) == 0 || (own_netns && a && (a->host.rfind("127.", 0) == 0 || a->host == "::1"));
  if (!local) return label;
  if (!names.pod.empty()) return label + "@" + (names.ns.empty() ? "" : names.ns + "/") + names.pod;
  if (!names.container.empty()) return label + "@" + names.container;
  return label + "@" + names.id.substr(0, 12);
}

DiscoveredServer discover_server(pid_t pid, const std::string& title_address,
                                 const std::shared_ptr<const redis::TlsContext>& tls, bool tls_first) {
  const auto listeners = proc::listeners_of(pid);
  if (proc::in_other_network_namespace(pid)) {
    if (std::string why = redis::netns_entry_error(pid); !why.empty()) {
      const auto ips = proc::local_ipv4_of(pid);
      DiscoveredServer out = plan_routes(listeners, title_address, tls, &ips, tls_first);
      out.netns_pid = pid;
      out.netns_refused = std::move(why);
      return out;
    }
  }
  DiscoveredServer out = plan_routes(listeners, title_address, tls, nullptr, tls_first);
  if (proc::in_other_namespaces(pid)) out.netns_pid = pid;
  return out;
}

std::vector<pid_t> redis_server_pids() {
  std::vector<pid_t> out;
  for (const pid_t pid : proc::pids()) {
    const auto comm = proc::read_file("/proc/" + std::to_string(pid) + "/comm", 64);
    if (comm && (comm->rfind("redis-server", 0) == 0 || comm->rfind("valkey-server", 0) == 0)) out.push_back(pid);
  }
  return out;
}

std::string address_from_title(const std::string& cmdline) {
  // Redis rewrites its title to "redis-server HOST:PORT" (plus " [cluster]" and the like).
  std::string title = cmdline;
  std::replace(title.begin(), title.end(), '\0', ' ');
  const auto sp = title.find(' ');
  if (sp == std::string::npos) return {};
  std::string addr = title.substr(sp + 1);
  addr = addr.substr(0, addr.find(' '));
  auto parsed = redis::parse_address(addr);
  if (!parsed) return {};
  if (parsed->host == "*" || parsed->host == "0.0.0.0" || parsed->host == "::" || parsed->host.empty())
    parsed->host = "127.0.0.1";
  return parsed->str();
}

void apply_credential_policy(DiscoveredServer& s, pid_t pid, bool by_pod, bool has_password,
                             const CredentialPolicy& policy) {
  if (has_password)
    std::stable_partition(s.routes.begin(), s.routes.end(), [](const auto& r) { return r.tls != nullptr; });
  std::string why_not_exe;
  const bool exe_allowed = by_pod || runs_allowed_executable(pid, policy.executables, &why_not_exe);
  withhold_credentials(s, policy, exe_allowed, why_not_exe);
}

}  // namespace thptrace::daemon
