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
// read /proc. The socket tables are proc/net.h's.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proc/net.h"

namespace thptrace::proc {

// Field 22 of /proc/PID/stat (start time, clock ticks after boot); the name in field 2 may hold
// spaces and parentheses.
std::optional<uint64_t> parse_stat_start_ticks(std::string_view stat);
// Fields 14 and 15 of a /proc/PID[/task/TID]/stat line summed (utime + stime, clock ticks).
std::optional<uint64_t> parse_stat_cpu_ticks(std::string_view stat);
// The first number of /proc/uptime, seconds.
std::optional<double> parse_uptime(std::string_view text);
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

// Seconds since pid started; nullopt when unreadable.
std::optional<double> process_age_s(pid_t pid);
// The CPU time thread tid of process pid has used, seconds.
std::optional<double> thread_cpu_seconds(pid_t pid, pid_t tid);

}  // namespace thptrace::proc
