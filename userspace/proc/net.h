// SPDX-License-Identifier: Apache-2.0
#pragma once
// A process's sockets as the kernel lists them, one parser per file: /proc/PID/net/tcp and tcp6
// (every TCP socket of that process's network namespace), /proc/PID/net/unix, /proc/PID/net/fib_trie
// (the namespace's own addresses) and the socket links among /proc/PID/fd. What the daemon's
// --discover learns of where a redis-server listens without asking it, and what proc/resolve.h
// matches a server's claim against. Parsers take the files' text (unit-tested and fuzzed on it); the
// live readers read /proc.

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

struct UnixListener {
  std::string path;  // a file path; abstract sockets ("@...") are left out
  uint64_t inode = 0;
};

// /proc/PID/net/tcp or tcp6: one entry per well-formed line (the header and bad lines are skipped).
std::vector<TcpSocket> parse_net_tcp(std::string_view text);
// The listening stream sockets with a path of /proc/net/unix; malformed rows are skipped.
std::vector<UnixListener> parse_unix_listeners(std::string_view text);
// The IPv4 addresses of a network namespace's own interfaces, loopback left out, in order, each once
// and only in canonical dotted form: the leaves of /proc/net/fib_trie followed by "/32 host LOCAL"
// (each is listed in both the Main and the Local table). Where a wildcard listener of a container is
// reached from outside its namespace.
std::vector<std::string> parse_local_ipv4(std::string_view fib_trie);
// "1.2.3.4:6379", "[::1]:6379", "::ffff:1.2.3.4:6379" (as Redis writes laddr/addr) -> Endpoint.
std::optional<Endpoint> parse_endpoint(std::string_view text);
// The target of a /proc/PID/fd link: "socket:[12345]" -> 12345.
std::optional<uint64_t> parse_socket_link(std::string_view target);

// Inode of /proc/PID/ns/net; 0 when unreadable.
uint64_t net_namespace(pid_t pid);
// Every TCP socket of the network namespace pid is in.
std::vector<TcpSocket> tcp_sockets_of_namespace(pid_t pid);
// The socket inodes among pid's open files.
std::vector<uint64_t> socket_inodes(pid_t pid);

struct Listeners {
  std::vector<Endpoint> tcp;  // port never 0
  std::vector<UnixListener> unix_sockets;
};

// What pid itself listens on (sockets whose inode one of its fds holds), in its own network
// namespace; empty when its /proc entries cannot be read.
Listeners listeners_of(pid_t pid);

// "/proc/PID/ns/net" and "/proc/PID/ns/mnt" differ from ours: its addresses and paths are not ours.
bool in_other_namespaces(pid_t pid);
// "/proc/PID/ns/net" differs from ours.
bool in_other_network_namespace(pid_t pid);
// parse_local_ipv4() of pid's network namespace; empty when unreadable.
std::vector<std::string> local_ipv4_of(pid_t pid);

}  // namespace thptrace::proc
