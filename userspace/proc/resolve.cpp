// SPDX-License-Identifier: Apache-2.0
#include "proc/resolve.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "proc/fields.h"
#include "proc/proc.h"

namespace thptrace::proc {
namespace {

using detail::fields;
using detail::number;

bool listens_on(pid_t pid, uint16_t port) {
  const auto mine = socket_inodes(pid);
  for (const auto& s : tcp_sockets_of_namespace(pid))
    if (s.state == kTcpListen && s.local.port == port && std::find(mine.begin(), mine.end(), s.inode) != mine.end())
      return true;
  return false;
}

pid_t innermost_pid(pid_t pid) {
  const auto text = read_file("/proc/" + std::to_string(pid) + "/status");
  if (!text) return 0;
  const auto ns = parse_nspid(*text);
  return ns.empty() ? 0 : ns.back();
}

// Field `n` (1-based, n >= 3) of a /proc/PID/stat line as a number: "pid (comm) state ppid ...", the
// fields counted after the last ')', which ends comm whatever it holds.
std::optional<uint64_t> stat_field(std::string_view stat, size_t n) {
  const auto close = stat.rfind(')');
  if (close == std::string_view::npos || n < 3) return std::nullopt;
  const auto f = fields(stat.substr(close + 1));  // f[0] is field 3 (state)
  uint64_t v = 0;
  if (f.size() < n - 2 || !number(f[n - 3], v)) return std::nullopt;
  return v;
}

}  // namespace

std::optional<uint64_t> parse_stat_start_ticks(std::string_view stat) { return stat_field(stat, 22); }

std::optional<uint64_t> parse_stat_cpu_ticks(std::string_view stat) {
  const auto utime = stat_field(stat, 14), stime = stat_field(stat, 15);
  if (!utime || !stime) return std::nullopt;
  return *utime + *stime;
}

std::optional<double> parse_uptime(std::string_view text) {
  const auto f = fields(text.substr(0, text.find('\n')));
  if (f.empty()) return std::nullopt;
  double v = 0;
  const auto [ptr, ec] = std::from_chars(f[0].data(), f[0].data() + f[0].size(), v);
  if (ec != std::errc() || ptr != f[0].data() + f[0].size() || !(v >= 0)) return std::nullopt;
  return v;
}

std::vector<pid_t> parse_nspid(std::string_view status) {
  std::vector<pid_t> out;
  while (!status.empty()) {
    const auto nl = status.find('\n');
    const auto line = status.substr(0, nl);
    status = nl == std::string_view::npos ? std::string_view{} : status.substr(nl + 1);
    if (line.rfind("NSpid:", 0) != 0) continue;
    for (const auto f : fields(line.substr(6))) {
      pid_t p = 0;
      if (!number(f, p)) return {};
      out.push_back(p);
    }
    break;
  }
  return out;
}

bool start_matches_uptime(double age_s, int64_t uptime_s) {
  // uptime_in_seconds is truncated and counted from initServer(), a little after exec; a 2 s margin
  // also covers a slow start. Two servers that started within 2 s of each other are told apart by
  // their sockets, not by this.
  return std::fabs(age_s - static_cast<double>(uptime_s)) <= 2.5;
}

std::optional<double> process_age_s(pid_t pid) {
  const auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto up = read_file("/proc/uptime");
  if (!stat || !up) return std::nullopt;
  const auto ticks = parse_stat_start_ticks(*stat);
  const auto now = parse_uptime(*up);
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (!ticks || !now || hz <= 0) return std::nullopt;
  return *now - static_cast<double>(*ticks) / static_cast<double>(hz);
}

std::optional<double> thread_cpu_seconds(pid_t pid, pid_t tid) {
  const auto stat = read_file(fmt::format("/proc/{}/task/{}/stat", pid, tid));
  const auto ticks = stat ? parse_stat_cpu_ticks(*stat) : std::nullopt;
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (!ticks || hz <= 0) return std::nullopt;
  return static_cast<double>(*ticks) / static_cast<double>(hz);
}

namespace {

// The processes that hold a socket of `inodes`, among `candidates`.
std::vector<pid_t> holders_of(const std::set<uint64_t>& inodes, const std::vector<pid_t>& candidates) {
  std::vector<pid_t> holders;
  for (const pid_t pid : candidates)
    for (const uint64_t i : socket_inodes(pid))
      if (inodes.count(i)) {
        holders.push_back(pid);
        break;
      }
  return holders;
}

// The processes holding the server's end of our connection, in whichever network namespace has it
// (one reader per namespace); *how says where. Empty when none does.
std::vector<pid_t> holders_of_connection(const Endpoint& server_side, const Endpoint& client_side, std::string* how) {
  std::map<uint64_t, std::vector<pid_t>> by_ns;
  for (const pid_t pid : pids())
    if (const uint64_t ns = net_namespace(pid)) by_ns[ns].push_back(pid);
  for (const auto& [ns, members] : by_ns) {
    std::set<uint64_t> inodes;
    for (const auto& s : tcp_sockets_of_namespace(members.front()))
      if (s.state == kTcpEstablished && s.local == server_side && s.remote == client_side && s.inode)
        inodes.insert(s.inode);
    if (inodes.empty()) continue;
    *how = fmt::format("it holds the socket of our connection ({} <- {}) in network namespace {}", server_side.str(),
                       client_side.str(), ns);
    if (auto holders = holders_of(inodes, members); !holders.empty()) return holders;
  }
  return {};
}

// The processes of our own network namespace that listen on `address`'s port (on its address or
// all); *how says so. For servers that do not report their end of our connection (Redis < 6.2).
std::vector<pid_t> holders_of_listener(const std::string& address, std::string* how) {
  const auto addr = parse_endpoint(address);
  if (!addr) return {};
  const uint64_t ours = net_namespace(::getpid());
  std::set<uint64_t> inodes;
  for (const auto& s : tcp_sockets_of_namespace(::getpid()))
    if (s.state == kTcpListen && s.local.port == addr->port && (s.local.wildcard() || s.local.ip == addr->ip))
      inodes.insert(s.inode);
  if (inodes.empty()) return {};
  std::vector<pid_t> ours_pids;
  for (const pid_t pid : pids())
    if (net_namespace(pid) == ours) ours_pids.push_back(pid);
  *how = fmt::format("it owns the socket listening on {} in our network namespace", addr->str());
  return holders_of(inodes, ours_pids);
}

// Among the holders (a fork child, BGSAVE's, holds the same sockets): the one whose pid in its
// namespace is the claimed process_id, else the oldest; 0 with *error set when none is the claimed one.
pid_t server_among(const std::vector<pid_t>& holders, const ServerClaim& claim, std::string* error) {
  pid_t claimed = 0;
  for (const pid_t p : holders)
    if (claim.process_id > 0 && innermost_pid(p) == claim.process_id) claimed = p;
  if (claimed) return claimed;
  if (claim.process_id > 0) {
    *error = fmt::format(
        "the server at {} reports process_id {}, but the process holding its socket, host pid {}, "
        "has pid {} in its own namespace.",
        claim.address, claim.process_id, holders.front(), innermost_pid(holders.front()));
    return 0;
  }
  return *std::max_element(holders.begin(), holders.end(), [](pid_t a, pid_t b) {
    return process_age_s(a).value_or(0) < process_age_s(b).value_or(0);
  });
}

}  // namespace

Resolution resolve_server(const ServerClaim& claim) {
  Resolution r;
  std::string how;
  std::vector<pid_t> holders;
  if (claim.server_side && claim.client_side) {
    holders = holders_of_connection(*claim.server_side, *claim.client_side, &how);
    if (holders.empty()) {
      r.error = fmt::format("no process on this host holds the socket of our connection to {} ({} as the server sees it): "
                            "the server runs on another host, or /proc of its processes cannot be read (CAP_SYS_PTRACE).",
                            claim.address, claim.server_side->str());
      return r;
    }
  } else {
    // No CLIENT INFO laddr (Redis < 6.2): a process that listens on the port in our own namespace.
    holders = holders_of_listener(claim.address, &how);
    if (holders.empty()) {
      r.error = fmt::format("cannot tell which process serves {}: it does not report its end of our connection "
                            "(CLIENT INFO laddr, Redis 6.2+) and no local process listens on that address.",
                            claim.address);
      return r;
    }
  }
  const pid_t chosen = server_among(holders, claim, &r.error);
  if (!chosen) return r;
  if (claim.uptime_s) {
    const auto age = process_age_s(chosen);
    if (age && !start_matches_uptime(*age, *claim.uptime_s)) {
      r.error = fmt::format("the server at {} has been up {} s, but host pid {}, which holds its socket, started {:.0f} s ago.",
                            claim.address, *claim.uptime_s, chosen, *age);
      return r;
    }
  }
  if (claim.server_side && !listens_on(chosen, claim.server_side->port)) {
    r.error = fmt::format("host pid {} holds the socket of our connection to {} but does not listen on port {}.", chosen,
                          claim.address, claim.server_side->port);
    return r;
  }
  r.pid = chosen;
  r.how = how;
  return r;
}

}  // namespace thptrace::proc
