// SPDX-License-Identifier: Apache-2.0
#include "proc/net.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>
#include <utility>

#include "proc/fields.h"
#include "proc/proc.h"

namespace thptrace::proc {
namespace {

using detail::fields;
using detail::for_each_line;
using detail::number;

constexpr unsigned long kUnixAcceptCon = 0x10000;  // __SO_ACCEPTCON in the Flags column
constexpr unsigned long kSockStream = 1;

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

// "0100007F:18EB" (IPv4) or 32 hex digits (IPv6) and a port. The kernel prints the address as 32-bit
// words in host order (seq_printf "%08X" of each __be32 word), so each word's bytes are stored back
// as they are.
std::optional<Endpoint> hex_endpoint(std::string_view s) {
  const auto colon = s.find(':');
  if (colon != 8 && colon != 32) return std::nullopt;
  Endpoint e;
  if (!number(s.substr(colon + 1), e.port, 16)) return std::nullopt;
  unsigned char bytes[16];
  for (size_t w = 0; w < colon / 8; ++w) {
    uint32_t word = 0;
    if (!number(s.substr(w * 8, 8), word, 16)) return std::nullopt;
    std::memcpy(bytes + w * 4, &word, 4);
  }
  if (colon == 8) {
    char buf[INET_ADDRSTRLEN];
    e.ip = inet_ntop(AF_INET, bytes, buf, sizeof buf);
  } else {
    in6_addr a;
    std::memcpy(&a, bytes, sizeof a);
    e.ip = ip6_text(a);
  }
  return e;
}

std::string link_of(const std::string& path) {
  char buf[64];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

bool namespace_differs(pid_t pid, const char* ns) {
  const std::string theirs = link_of("/proc/" + std::to_string(pid) + "/ns/" + ns);
  return !theirs.empty() && theirs != link_of(std::string("/proc/self/ns/") + ns);
}

}  // namespace

std::string Endpoint::str() const {
  if (ip.find(':') != std::string::npos) return "[" + ip + "]:" + std::to_string(port);
  return ip + ":" + std::to_string(port);
}

std::vector<TcpSocket> parse_net_tcp(std::string_view text) {
  std::vector<TcpSocket> out;
  for_each_line(text, false, [&](std::string_view line) {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
    const auto f = fields(line, 10);
    if (f.size() < 10 || f[0].back() != ':') return;  // the header, or not a row
    TcpSocket s;
    const auto local = hex_endpoint(f[1]);
    const auto remote = hex_endpoint(f[2]);
    if (!local || !remote || !number(f[3], s.state, 16) || !number(f[9], s.inode)) return;
    s.local = *local;
    s.remote = *remote;
    out.push_back(std::move(s));
  });
  return out;
}

std::vector<UnixListener> parse_unix_listeners(std::string_view text) {
  std::vector<UnixListener> out;
  for_each_line(text, true, [&](std::string_view line) {
    // Num RefCount Protocol Flags Type St Inode Path: the path is the rest of the line.
    const auto f = fields(line, 8);
    unsigned long flags = 0, type = 0;
    UnixListener l;
    if (f.size() < 8 || !number(f[3], flags, 16) || !number(f[4], type, 16) || !number(f[6], l.inode)) return;
    if (!(flags & kUnixAcceptCon) || type != kSockStream || f[7].front() != '/') return;
    l.path = std::string(line.substr(static_cast<size_t>(f[7].data() - line.data())));
    out.push_back(std::move(l));
  });
  return out;
}

std::vector<std::string> parse_local_ipv4(std::string_view fib_trie) {
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;  // a namespace may hold many addresses: no scan of `out` per line
  std::string leaf;
  for_each_line(fib_trie, false, [&](std::string_view line) {
    const auto f = fields(line, 4);
    if (f.size() == 2 && f[0] == "|--") {
      leaf = std::string(f[1]);
    } else if (f.size() >= 3 && f[0] == "/32" && f[1] == "host" && f[2] == "LOCAL" && !leaf.empty()) {
      // Only an address in its canonical dotted form: inet_pton stops at a NUL, so "192.0.2.2\0junk"
      // would pass it (found by fuzz_proc_net).
      in_addr a{};
      char text[INET_ADDRSTRLEN];
      if (leaf.rfind("127.", 0) != 0 && inet_pton(AF_INET, leaf.c_str(), &a) == 1 &&
          inet_ntop(AF_INET, &a, text, sizeof text) && leaf == text && seen.insert(leaf).second)
        out.push_back(leaf);
    } else if (f.empty() || f[0].front() != '/') {
      leaf.clear();  // a node ("+--"), a table's name: the leaf's own lines ("/N scope TYPE") ended
    }
  });
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
  if (!number(port, e.port)) return std::nullopt;
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
  if (!number(target.substr(prefix.size(), target.size() - prefix.size() - 1), inode)) return std::nullopt;
  return inode;
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

Listeners listeners_of(pid_t pid) {
  Listeners out;
  auto mine = socket_inodes(pid);
  if (mine.empty()) return out;
  std::sort(mine.begin(), mine.end());
  const auto held = [&](uint64_t inode) { return std::binary_search(mine.begin(), mine.end(), inode); };
  for (const auto& s : tcp_sockets_of_namespace(pid))
    if (s.state == kTcpListen && s.local.port != 0 && held(s.inode)) out.tcp.push_back(s.local);
  for (auto& l : parse_unix_listeners(read_file("/proc/" + std::to_string(pid) + "/net/unix", 16 << 20).value_or("")))
    if (held(l.inode)) out.unix_sockets.push_back(std::move(l));
  return out;
}

bool in_other_namespaces(pid_t pid) { return namespace_differs(pid, "net") || namespace_differs(pid, "mnt"); }

bool in_other_network_namespace(pid_t pid) { return namespace_differs(pid, "net"); }

std::vector<std::string> local_ipv4_of(pid_t pid) {
  return parse_local_ipv4(read_file("/proc/" + std::to_string(pid) + "/net/fib_trie", 1 << 20).value_or(""));
}

}  // namespace thptrace::proc
