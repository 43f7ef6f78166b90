// SPDX-License-Identifier: Apache-2.0
#include "daemon/discovery.h"

#include <algorithm>

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
                             const std::vector<std::string>* outside_ips) {
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
  for (const auto& a : tcp) out.routes.push_back({a, nullptr, outside});
  if (tls)
    for (const auto& a : tcp) out.routes.push_back({a, tls, outside});
  // No listener found (its /proc unreadable): the title's address, as before discovery read sockets.
  if (out.routes.empty() && title && !outside) {
    out.routes.push_back({*title, nullptr});
    if (tls) out.routes.push_back({*title, tls});
  }
  const auto first_tcp = std::find_if(out.routes.begin(), out.routes.end(), [](const auto& r) { return r.outside; });
  if (first_tcp != out.routes.end())
    out.label = first_tcp->address.str();
  else if (title && !outside)
    out.label = title->str();
  else if (!out.routes.empty()) out.label = out.routes.front().address.str();
  else out.label = "redis-server";
  return out;
}

DiscoveredServer discover_server(pid_t pid, const std::string& title_address,
                                 std::shared_ptr<const redis::TlsContext> tls) {
  const auto listeners = proc::listeners_of(pid);
  if (proc::in_other_network_namespace(pid)) {
    if (std::string why = redis::netns_entry_error(pid); !why.empty()) {
      const auto ips = proc::local_ipv4_of(pid);
      DiscoveredServer out = plan_routes(listeners, title_address, tls, &ips);
      out.netns_pid = pid;
      out.netns_refused = std::move(why);
      return out;
    }
  }
  DiscoveredServer out = plan_routes(listeners, title_address, tls);
  if (proc::in_other_namespaces(pid)) out.netns_pid = pid;
  return out;
}

}  // namespace thptrace::daemon
