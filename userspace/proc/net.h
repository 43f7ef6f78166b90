// SPDX-License-Identifier: Apache-2.0
#pragma once
// The listening sockets of one process, from /proc/PID/net/{tcp,tcp6,unix} (the tables of that
// process's network namespace) joined with the socket inodes of its /proc/PID/fd: how the daemon's
// --discover learns where a redis-server listens without asking it.

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace thptrace::proc {

struct TcpListener {
  std::string ip;  // "127.0.0.1", "0.0.0.0", "::1", "::"
  int port = 0;
  uint64_t inode = 0;
};

struct UnixListener {
  std::string path;  // a file path; abstract sockets ("@...") are left out
  uint64_t inode = 0;
};

// The LISTEN rows of /proc/net/tcp (v6 = false) or tcp6 (v6 = true); malformed rows are skipped.
std::vector<TcpListener> parse_tcp_listeners(std::string_view text, bool v6);
// The listening stream sockets with a path of /proc/net/unix; malformed rows are skipped.
std::vector<UnixListener> parse_unix_listeners(std::string_view text);

struct Listeners {
  std::vector<TcpListener> tcp;
  std::vector<UnixListener> unix_sockets;
};

// What pid itself listens on (sockets whose inode one of its fds holds), in its own network
// namespace; empty when its /proc entries cannot be read.
Listeners listeners_of(pid_t pid);

// "/proc/PID/ns/net" and "/proc/PID/ns/mnt" differ from ours: its addresses and paths are not ours.
bool in_other_namespaces(pid_t pid);
// "/proc/PID/ns/net" differs from ours.
bool in_other_network_namespace(pid_t pid);

// The IPv4 addresses of a network namespace's own interfaces, loopback left out: the leaves of
// /proc/net/fib_trie followed by "/32 host LOCAL" (each is listed in both the Main and the Local
// table; once here). Where a wildcard listener of a container is reached from outside its namespace.
std::vector<std::string> parse_local_ipv4(std::string_view fib_trie);
// parse_local_ipv4() of pid's network namespace; empty when unreadable.
std::vector<std::string> local_ipv4_of(pid_t pid);

}  // namespace thptrace::proc
