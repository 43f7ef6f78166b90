// SPDX-License-Identifier: Apache-2.0
#pragma once
// --discover: how to reach a redis-server found in /proc, learnt from the process itself (its
// listening sockets, in its own network namespace), not from a config file the daemon may not see.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "proc/container.h"
#include "proc/net.h"
#include "redis/watcher.h"

namespace thptrace::daemon {

// The redis-server and valkey-server processes running now, by their comm.
std::vector<pid_t> redis_server_pids();

// A redis-server's listening address from its process title ("redis-server 127.0.0.1:6379"), as
// HOST:PORT with a wildcard host replaced by 127.0.0.1; "" when the title has none.
std::string address_from_title(const std::string& cmdline);

struct DiscoveredServer {
  std::string label;                // the title's address, else the first route's; "redis-server" if none
  std::vector<redis::Route> routes;  // in the order to try them
  pid_t netns_pid = 0;              // pid when its network or mount namespace is not ours
  // Why its network namespace, another one, cannot be entered ("" when it can or is ours): its TCP
  // routes then go to its own addresses from outside (Route::outside), its loopback is out of reach.
  std::string netns_refused;
};

// The label of a discovered server in a container of its own: a loopback address in a network
// namespace not ours (own_netns), or a unix socket in a mount namespace not ours, names nothing on
// the host (two bridge containers both listen on 127.0.0.1:6379), so it gets the container's name:
// "127.0.0.1:6379@NAMESPACE/POD" under Kubernetes, else "@NAME" (the runtime's), else "@" and the
// id's first 12 digits. Any other label, or no container, is kept: a host-network container's
// loopback address is the host's.
std::string container_scoped_label(const std::string& label, const proc::ContainerNames& names, bool own_netns);

// The routes to a server with these listeners: its unix sockets first, then each TCP listener in
// plain (loopback first, the title's port first), then each again with TLS (`tls`; a TLS port cannot
// be told from a plain one in /proc, and a plain PING to it fails at once). With tls_first (there is a
// password to send) the TLS routes come first of all. Wildcard listeners are reached on loopback.
// title_address is address_from_title()'s, "" when none: it only orders the listeners, and is tried
// itself only when no listener could be read.
//
// The label is the first TCP listener's route, else the first unix socket's: an address the process
// was seen to listen on, never its title alone (anyone can name a process "redis-server 10.0.0.1:6379");
// "redis-server" when there is none.
//
// outside_ips, when given, are the server's own addresses in a network namespace we cannot enter:
// TCP listeners are then reached from outside, a wildcard on each of these addresses, a specific
// address as it is, a loopback one not at all.
DiscoveredServer plan_routes(const proc::Listeners& listeners, const std::string& title_address,
                             const std::shared_ptr<const redis::TlsContext>& tls,
                             const std::vector<std::string>* outside_ips = nullptr, bool tls_first = false);

// plan_routes() for a running process.
DiscoveredServer discover_server(pid_t pid, const std::string& title_address,
                                 const std::shared_ptr<const redis::TlsContext>& tls, bool tls_first);

// Who a discovered server's credentials may go to, as the operator said: its executable
// (--discover-credentials-exe, compared by device and inode with the file /proc/PID/exe opens, so a
// copy or a look-alike name does not pass), or the address of a route (--discover-credentials-address).
// A TLS route always may: its certificate and address are verified before AUTH is sent.
struct CredentialPolicy {
  std::vector<std::string> executables;  // absolute paths
  std::vector<redis::Address> addresses;
};

// Whether pid runs one of `executables`; when not, why in *why ("its executable /tmp/x/redis-server
// is not one of --discover-credentials-exe").
bool runs_allowed_executable(pid_t pid, const std::vector<std::string>& executables, std::string* why);

// Marks each route of s that may not carry the credentials (Route::withheld), given whether the
// process runs an allowed executable (else why_not_exe says why).
void withhold_credentials(DiscoveredServer& s, const CredentialPolicy& policy, bool exe_allowed,
                          const std::string& why_not_exe);

// The credential policy for a discovered server about to be sent a login: with a password
// (has_password), its TLS routes first (the password goes where a certificate was verified first;
// plan_routes' order kept otherwise); and each route it may not go to withheld. A --redis-auth rule
// that matched its pod (by_pod) is the operator's word for where the login goes (the runtime, not the
// process, recorded the pod's name); else the process must run an allowed executable, or the route
// be an allowed address or TLS.
void apply_credential_policy(DiscoveredServer& s, pid_t pid, bool by_pod, bool has_password,
                             const CredentialPolicy& policy);

}  // namespace thptrace::daemon
