// SPDX-License-Identifier: Apache-2.0
#pragma once
// --discover: how to reach a redis-server found in /proc, learnt from the process itself (its
// listening sockets, in its own network namespace), not from a config file the daemon may not see.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "proc/net.h"
#include "redis/watcher.h"

namespace thptrace::daemon {

struct DiscoveredServer {
  std::string label;                // the title's address, else the first route's; "redis-server" if none
  std::vector<redis::Route> routes;  // in the order to try them
  pid_t netns_pid = 0;              // pid when its network or mount namespace is not ours
  // Why its network namespace, another one, cannot be entered ("" when it can or is ours): its TCP
  // routes then go to its own addresses from outside (Route::outside), its loopback is out of reach.
  std::string netns_refused;
};

// The routes to a server with these listeners: its unix sockets first, then each TCP listener in
// plain (loopback first, the title's port first), then each again with TLS (`tls`; a TLS port cannot
// be told from a plain one in /proc, and a plain PING to it fails at once). Wildcard listeners are
// reached on loopback. title_address is address_from_title()'s, "" when none.
//
// outside_ips, when given, are the server's own addresses in a network namespace we cannot enter:
// TCP listeners are then reached from outside, a wildcard on each of these addresses, a specific
// address as it is, a loopback one not at all; the label is the first such route (its title's
// address would name a loopback we cannot reach).
DiscoveredServer plan_routes(const proc::Listeners& listeners, const std::string& title_address,
                             const std::shared_ptr<const redis::TlsContext>& tls,
                             const std::vector<std::string>* outside_ips = nullptr);

// plan_routes() for a running process.
DiscoveredServer discover_server(pid_t pid, const std::string& title_address,
                                 std::shared_ptr<const redis::TlsContext> tls);

}  // namespace thptrace::daemon
