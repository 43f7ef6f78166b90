// SPDX-License-Identifier: Apache-2.0
#include "proc/resolve.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <unordered_set>

#include "proc/proc.h"

namespace thptrace::proc {
namespace {

std::vector<std::string_view> split_ws(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

template <typename T>
bool hex_number(std::string_view s, T& out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
  return ec == std::errc() && ptr == s.data() + s.size() && !s.empty();
}

template <typename T>
bool dec_number(std::string_view s, T& out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size() && !s.empty();
}

// An IPv6 text address; IPv4-mapped ones (::ffff:a.b.c.d) as their IPv4 text.
std::string ip6_text(const in6_addr& a) {
  if (IN6_IS_ADDR_V4MAPPED(&a)) {
    in_addr v4;
    std::memcpy(&v4, &a.s6_addr[12], 4);
    char buf[INET_ADDRSTRLEN];
    return inet_ntop(AF_INET, &v4, buf, sizeof buf);
  }
  char buf[INET6_ADDRSTRLEN];
  return inet_ntop(AF_INET6, &a, buf, sizeof buf);
}

// "0100007F:18EB" (IPv4, the address as the host-order u32 the kernel prints) or 32 hex digits
// (IPv6: four host-order u32s) and a port.
std::optional<Endpoint> hex_endpoint(std::string_view s) {
  const auto colon = s.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const auto addr = s.substr(0, colon);
  Endpoint e;
  if (!hex_number(s.substr(colon + 1), e.port)) return std::nullopt;
  if (addr.size() == 8) {
    uint32_t v = 0;
    if (!hex_number(addr, v)) return std::nullopt;
    in_addr a;
    std::memcpy(&a, &v, 4);
    char buf[INET_ADDRSTRLEN];
    e.ip = inet_ntop(AF_INET, &a, buf, sizeof buf);
    return e;
  }
  if (addr.size() == 32) {
    in6_addr a;
    for (int i = 0; i < 4; ++i) {
      uint32_t w = 0;
      if (!hex_number(addr.substr(static_cast<size_t>(i) * 8, 8), w)) return std::nullopt;
      std::memcpy(&a.s6_addr[i * 4], &w, 4);
    }
    e.ip = ip6_text(a);
    return e;
  }
  return std::nullopt;
}

std::vector<pid_t> all_pids() {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    pid_t pid = 0;
    if (dec_number(std::string_view(e->d_name), pid) && pid > 0) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

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

}  // namespace

std::string Endpoint::str() const {
  if (ip.find(':') != std::string::npos) return "[" + ip + "]:" + std::to_string(port);
  return ip + ":" + std::to_string(port);
}

std::vector<TcpSocket> parse_net_tcp(std::string_view text) {
  std::vector<TcpSocket> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const auto line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
    const auto f = split_ws(line);
    if (f.size() < 10 || f[0].empty() || f[0].back() != ':') continue;
    TcpSocket s;
    const auto local = hex_endpoint(f[1]);
    const auto remote = hex_endpoint(f[2]);
    if (!local || !remote || !hex_number(f[3], s.state) || !dec_number(f[9], s.inode)) continue;
    s.local = *local;
    s.remote = *remote;
    out.push_back(std::move(s));
  }
  return out;
}

std::optional<Endpoint> parse_endpoint(std::string_view text) {
  std::string_view host, port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find("]:");
    if (close == std::string_view::npos) return std::nullopt;
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  Endpoint e;
  if (!dec_number(port, e.port)) return std::nullopt;
  const std::string h(host);
  in_addr v4;
  in6_addr v6;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) {
    char buf[INET_ADDRSTRLEN];
    e.ip = inet_ntop(AF_INET, &v4, buf, sizeof buf);
  } else if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    e.ip = ip6_text(v6);
  } else {
    return std::nullopt;
  }
  return e;
}

std::optional<uint64_t> parse_socket_link(std::string_view target) {
  constexpr std::string_view prefix = "socket:[";
  if (target.rfind(prefix, 0) != 0 || target.size() < prefix.size() + 2 || target.back() != ']') return std::nullopt;
  uint64_t inode = 0;
  if (!dec_number(target.substr(prefix.size(), target.size() - prefix.size() - 1), inode)) return std::nullopt;
  return inode;
}

namespace {

// Field `n` (1-based, n >= 3) of a /proc/PID/stat line as a number: "pid (comm) state ppid ...", the
// fields counted after the last ')', which ends comm whatever it holds.
std::optional<uint64_t> stat_field(std::string_view stat, size_t n) {
  const auto close = stat.rfind(')');
  if (close == std::string_view::npos || n < 3) return std::nullopt;
  const auto f = split_ws(stat.substr(close + 1));  // f[0] is field 3 (state)
  uint64_t v = 0;
  if (f.size() < n - 2 || !dec_number(f[n - 3], v)) return std::nullopt;
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
  const auto f = split_ws(text.substr(0, text.find('\n')));
  if (f.empty()) return std::nullopt;
  double v = 0;
  const auto [ptr, ec] = std::from_chars(f[0].data(), f[0].data() + f[0].size(), v);
  if (ec != std::errc() || ptr != f[0].data() + f[0].size() || !(v >= 0)) return std::nullopt;
  return v;
}

std::vector<std::string> parse_fib_trie_local_addresses(std::string_view text) {
  // "     |-- 10.88.0.10\n        /32 host LOCAL\n": the address line, then its kind.
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;  // a namespace may hold many addresses: no scan of `out` per line
  std::string last;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const auto line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (const auto p = line.find("|-- "); p != std::string_view::npos) {
      last = std::string(line.substr(p + 4));
      while (!last.empty() && (last.back() == ' ' || last.back() == '\r')) last.pop_back();
    } else if (line.find("/32 host LOCAL") != std::string_view::npos && !last.empty()) {
      // The canonical dotted form only: inet_pton stops at a NUL the line may hold.
      in_addr a;
      char canonical[INET_ADDRSTRLEN];
      if (inet_pton(AF_INET, last.c_str(), &a) == 1 && inet_ntop(AF_INET, &a, canonical, sizeof canonical) &&
          last == canonical && last.rfind("127.", 0) != 0 && seen.insert(last).second)
        out.push_back(last);
    }
  }
  return out;
}

std::vector<pid_t> parse_nspid(std::string_view status) {
  std::vector<pid_t> out;
  while (!status.empty()) {
    const auto nl = status.find('\n');
    const auto line = status.substr(0, nl);
    status = nl == std::string_view::npos ? std::string_view{} : status.substr(nl + 1);
    if (line.rfind("NSpid:", 0) != 0) continue;
    for (const auto f : split_ws(line.substr(6))) {
      pid_t p = 0;
      if (!dec_number(f, p)) return {};
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

uint64_t net_namespace(pid_t pid) {
  struct stat st {};
  if (::stat(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), &st) != 0) return 0;
  return st.st_ino;
}

std::vector<TcpSocket> tcp_sockets_of_namespace(pid_t pid) {
  std::vector<TcpSocket> out;
  for (const char* f : {"/net/tcp", "/net/tcp6"}) {
    const auto text = read_file("/proc/" + std::to_string(pid) + f, 64 << 20);
    if (!text) continue;
    auto part = parse_net_tcp(*text);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

std::vector<uint64_t> socket_inodes(pid_t pid) {
  std::vector<uint64_t> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  char buf[64];
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const ssize_t n = ::readlinkat(::dirfd(d), e->d_name, buf, sizeof buf);
    if (n <= 0) continue;
    if (const auto inode = parse_socket_link(std::string_view(buf, static_cast<size_t>(n)))) out.push_back(*inode);
  }
  ::closedir(d);
  return out;
}

std::vector<Endpoint> listening_endpoints(pid_t pid) {
  std::vector<Endpoint> out;
  const auto mine = socket_inodes(pid);
  for (const auto& s : tcp_sockets_of_namespace(pid))
    if (s.state == kTcpListen && std::find(mine.begin(), mine.end(), s.inode) != mine.end()) out.push_back(s.local);
  return out;
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

Resolution resolve_server(const ServerClaim& claim) {
  Resolution r;
  std::vector<pid_t> holders;
  std::string how;
  if (claim.server_side && claim.client_side) {
    // The namespaces, one reader each; then the socket of our connection as the server sees it.
    std::map<uint64_t, std::vector<pid_t>> by_ns;
    for (const pid_t pid : all_pids())
      if (const uint64_t ns = net_namespace(pid)) by_ns[ns].push_back(pid);
    for (const auto& [ns, pids] : by_ns) {
      std::set<uint64_t> inodes;
      for (const auto& s : tcp_sockets_of_namespace(pids.front()))
        if (s.state == kTcpEstablished && s.local == *claim.server_side && s.remote == *claim.client_side && s.inode)
          inodes.insert(s.inode);
      if (inodes.empty()) continue;
      for (const pid_t pid : pids)
        for (const uint64_t i : socket_inodes(pid))
          if (inodes.count(i)) {
            holders.push_back(pid);
            break;
          }
      how = fmt::format("it holds the socket of our connection ({} <- {}) in network namespace {}",
                        claim.server_side->str(), claim.client_side->str(), ns);
      if (!holders.empty()) break;
    }
    if (holders.empty()) {
      r.error = fmt::format("no process on this host holds the socket of our connection to {} ({} as the server sees it): "
                            "the server runs on another host, or /proc of its processes cannot be read (CAP_SYS_PTRACE).",
                            claim.address, claim.server_side->str());
      return r;
    }
  } else {
    // No CLIENT INFO laddr (Redis < 6.2): a process that listens on the port in our own namespace.
    const auto addr = parse_endpoint(claim.address);
    if (addr) {
      const uint64_t ours = net_namespace(::getpid());
      std::set<uint64_t> inodes;
      for (const auto& s : tcp_sockets_of_namespace(::getpid()))
        if (s.state == kTcpListen && s.local.port == addr->port && (s.local.wildcard() || s.local.ip == addr->ip))
          inodes.insert(s.inode);
      for (const pid_t pid : all_pids()) {
        if (inodes.empty() || net_namespace(pid) != ours) continue;
        for (const uint64_t i : socket_inodes(pid))
          if (inodes.count(i)) {
            holders.push_back(pid);
            break;
          }
      }
      how = fmt::format("it owns the socket listening on {} in our network namespace", addr->str());
    }
    if (holders.empty()) {
      r.error = fmt::format("cannot tell which process serves {}: it does not report its end of our connection "
                            "(CLIENT INFO laddr, Redis 6.2+) and no local process listens on that address.",
                            claim.address);
      return r;
    }
  }
  // A fork child (BGSAVE) holds the same sockets: the one whose pid in its namespace is the claimed
  // process_id, else the oldest.
  pid_t chosen = 0;
  for (const pid_t p : holders)
    if (claim.process_id > 0 && innermost_pid(p) == claim.process_id) chosen = p;
  if (!chosen) {
    if (claim.process_id > 0) {
      r.error = fmt::format("the server at {} reports process_id {}, but the process holding its socket, host pid {}, "
                            "has pid {} in its own namespace.",
                            claim.address, claim.process_id, holders.front(), innermost_pid(holders.front()));
      return r;
    }
    chosen = *std::max_element(holders.begin(), holders.end(), [](pid_t a, pid_t b) {
      return process_age_s(a).value_or(0) < process_age_s(b).value_or(0);
    });
  }
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

std::optional<Endpoint> reachable_address(pid_t pid, uint16_t preferred_port) {
  auto listening = listening_endpoints(pid);
  if (listening.empty()) return std::nullopt;
  std::stable_sort(listening.begin(), listening.end(), [&](const Endpoint& a, const Endpoint& b) {
    // The preferred port first, then IPv4.
    const auto rank = [&](const Endpoint& e) { return (e.port == preferred_port ? 0 : 2) + (e.ip.find(':') == std::string::npos ? 0 : 1); };
    return rank(a) < rank(b);
  });
  if (net_namespace(pid) == net_namespace(::getpid())) {
    Endpoint e = listening.front();
    if (e.wildcard()) e.ip = e.ip == "::" ? "::1" : "127.0.0.1";
    // A wildcard IPv6 socket usually takes IPv4 too; loopback IPv4 is what clients use.
    if (e.ip == "::1" && std::any_of(listening.begin(), listening.end(), [](const Endpoint& l) { return l.ip == "0.0.0.0"; }))
      e.ip = "127.0.0.1";
    return e;
  }
  for (const auto& l : listening)
    if (!l.wildcard() && !l.loopback()) return l;
  const auto trie = read_file("/proc/" + std::to_string(pid) + "/net/fib_trie", 4 << 20);
  const auto locals = trie ? parse_fib_trie_local_addresses(*trie) : std::vector<std::string>{};
  for (const auto& l : listening)
    if (l.wildcard() && !locals.empty()) return Endpoint{locals.front(), l.port};
  return std::nullopt;
}

}  // namespace thptrace::proc
