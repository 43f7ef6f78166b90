#include "daemon/discovery.h"

#include <algorithm>

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
                             std::shared_ptr<const redis::TlsContext> tls) {
  DiscoveredServer out;
  for (const auto& u : listeners.unix_sockets) {
    redis::Address a;
    a.path = u.path;
    if (a.path.size() <= redis::kMaxUnixPath) out.routes.push_back({a, nullptr});
  }
  const auto title = redis::parse_address(title_address);
  std::vector<redis::Address> tcp;
  for (const auto& l : listeners.tcp) {
    redis::Address a{reachable_ip(l.ip), l.port, ""};
    if (std::none_of(tcp.begin(), tcp.end(), [&](const auto& b) { return b.host == a.host && b.port == a.port; }))
      tcp.push_back(a);
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
  for (const auto& a : tcp) out.routes.push_back({a, nullptr});
  if (tls)
    for (const auto& a : tcp) out.routes.push_back({a, tls});
  // No listener found (its /proc unreadable): the title's address, as before discovery read sockets.
  if (out.routes.empty() && title) {
    out.routes.push_back({*title, nullptr});
    if (tls) out.routes.push_back({*title, tls});
  }
  if (title) out.label = title->str();
  else if (!out.routes.empty()) out.label = out.routes.front().address.str();
  else out.label = "redis-server";
  return out;
}

DiscoveredServer discover_server(pid_t pid, const std::string& title_address,
                                 std::shared_ptr<const redis::TlsContext> tls) {
  DiscoveredServer out = plan_routes(proc::listeners_of(pid), title_address, std::move(tls));
  if (proc::in_other_namespaces(pid)) out.netns_pid = pid;
  return out;
}

}  // namespace thptrace::daemon
