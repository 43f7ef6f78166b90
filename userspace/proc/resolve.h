// SPDX-License-Identifier: Apache-2.0
#pragma once
// Which host process is the server behind an address? Answered from what the kernel says, never from
// the pid a server reports about itself: a Redis in its own PID namespace (a container) reports
// process_id 1, and a published port is often held open by a runtime helper (podman's conmon,
// docker-proxy) while the traffic is NATed into the container's network namespace.
//
// The method: the server reports both ends of one of our connections as it sees them (Redis's
// CLIENT INFO laddr/addr). That pair is looked up among the established TCP sockets of every network
// namespace (/proc/PID/net/tcp{,6}); the process holding that socket's inode among its open files
// (/proc/PID/fd) is the server. Cross-checks: it owns a listening socket on that port in that
// namespace, its innermost pid (NSpid in /proc/PID/status) is the process_id the server reports, and
// its start time agrees with the server's uptime_in_seconds.
//
// Parsers take the files' text so they can be unit-tested on recorded /proc text; the live lookups
// read /proc.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace thptrace::proc {

// An IP address in text (IPv4-mapped IPv6 written as IPv4) and a port.
struct Endpoint {
  std::string ip;
  uint16_t port = 0;
  bool operator==(const Endpoint&) const = default;
  bool wildcard() const { return ip == "0.0.0.0" || ip == "::"; }
  bool loopback() const { return ip.rfind("127.", 0) == 0 || ip == "::1"; }
  // "IP:PORT", or "[IP]:PORT" for IPv6.
  std::string str() const;
};

inline constexpr int kTcpEstablished = 0x01;  // include/net/tcp_states.h
inline constexpr int kTcpListen = 0x0A;

struct TcpSocket {
  Endpoint local;
  Endpoint remote;
  int state = 0;
  uint64_t inode = 0;
};

// /proc/PID/net/tcp or tcp6: one entry per well-formed line (the header and bad lines are skipped).
std::vector<TcpSocket> parse_net_tcp(std::string_view text);
// "1.2.3.4:6379", "[::1]:6379", "::ffff:1.2.3.4:6379" (as Redis writes laddr/addr) -> Endpoint.
std::optional<Endpoint> parse_endpoint(std::string_view text);
// The target of a /proc/PID/fd link: "socket:[12345]" -> 12345.
std::optional<uint64_t> parse_socket_link(std::string_view target);
// Field 22 of /proc/PID/stat (start time, clock ticks after boot); the name in field 2 may hold
// spaces and parentheses.
std::optional<uint64_t> parse_stat_start_ticks(std::string_view stat);
// Fields 14 and 15 of a /proc/PID[/task/TID]/stat line summed (utime + stime, clock ticks).
std::optional<uint64_t> parse_stat_cpu_ticks(std::string_view stat);
// The first number of /proc/uptime, seconds.
std::optional<double> parse_uptime(std::string_view text);
// The local (host) IPv4 addresses of a network namespace from its /proc/PID/net/fib_trie, loopback
// excluded, in order of appearance, without duplicates.
std::vector<std::string> parse_fib_trie_local_addresses(std::string_view text);
// "NSpid:\t4242\t1" -> {4242, 1}: the pid in each PID namespace, outermost first.
std::vector<pid_t> parse_nspid(std::string_view status);

// Did a process that is `age_s` old start when a server that has been up `uptime_s` (INFO
// uptime_in_seconds, whole seconds, counted from a moment just after exec) started?
bool start_matches_uptime(double age_s, int64_t uptime_s);

// What a server says about one of our connections and itself.
struct ServerClaim {
  std::string address;                  // what we connected to, for messages
  std::optional<Endpoint> server_side;  // CLIENT INFO laddr
  std::optional<Endpoint> client_side;  // CLIENT INFO addr
  int64_t process_id = 0;               // INFO process_id: its pid in its own PID namespace
  std::optional<int64_t> uptime_s;      // INFO uptime_in_seconds
};

struct Resolution {
  pid_t pid = 0;       // host pid (in our PID namespace); 0 when not found
  std::string how;     // how it was found, one clause
  std::string error;   // when pid == 0: one sentence
};

// Finds the process of the server that made `claim`, while the connection the claim is about is
// still open. A fork child shares its parent's sockets: of several holders, the one whose innermost
// pid is the claimed process_id wins, else the oldest.
Resolution resolve_server(const ServerClaim& claim);

// The live pieces, exposed for tests and discovery.
// Inode of /proc/PID/ns/net; 0 when unreadable.
uint64_t net_namespace(pid_t pid);
// Every TCP socket of the network namespace pid is in.
std::vector<TcpSocket> tcp_sockets_of_namespace(pid_t pid);
// The socket inodes among pid's open files.
std::vector<uint64_t> socket_inodes(pid_t pid);
// pid's listening TCP endpoints (in its network namespace).
std::vector<Endpoint> listening_endpoints(pid_t pid);
// Seconds since pid started; nullopt when unreadable.
std::optional<double> process_age_s(pid_t pid);
// The CPU time thread tid of process pid has used, seconds.
std::optional<double> thread_cpu_seconds(pid_t pid, pid_t tid);

// An address from our network namespace that reaches the server pid listens as, or nullopt:
// its own listening address when it shares our network namespace (a wildcard becomes loopback),
// else the first non-loopback address of its namespace (a container's address on its bridge) at the
// port it listens on. Prefers `port` when pid listens on several.
std::optional<Endpoint> reachable_address(pid_t pid, uint16_t preferred_port = 6379);

}  // namespace thptrace::proc
