// SPDX-License-Identifier: Apache-2.0
#include "proc/net.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <unordered_set>
#include <utility>

#include "proc/proc.h"

namespace thptrace::proc {
namespace {

constexpr std::string_view kTcpListen = "0A";       // TCP_LISTEN in include/net/tcp_states.h
constexpr unsigned long kUnixAcceptCon = 0x10000;  // __SO_ACCEPTCON in the Flags column
constexpr unsigned long kSockStream = 1;

std::vector<std::string_view> fields(std::string_view line, size_t max) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (out.size() < max) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i >= line.size()) break;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    out.push_back(line.substr(start, i - start));
  }
  return out;
}

template <typename T>
bool hex_value(std::string_view s, T* out) {
  if (s.empty()) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return ec == std::errc() && p == s.data() + s.size();
}

template <typename T>
bool dec_value(std::string_view s, T* out) {
  if (s.empty()) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 10);
  return ec == std::errc() && p == s.data() + s.size();
}

// "0100007F:4267" -> 127.0.0.1, 17000. The kernel prints the address as 32-bit words in host order
// (seq_printf "%08X" of each __be32 word), so each word's bytes are reversed on little-endian x86.
bool parse_endpoint(std::string_view s, bool v6, std::string* ip, int* port) {
  const auto colon = s.find(':');
  const size_t hex_len = v6 ? 32 : 8;
  if (colon != hex_len || !hex_value(s.substr(colon + 1), port) || *port < 0 || *port > 65535) return false;
  unsigned char bytes[16];
  for (size_t w = 0; w < hex_len / 8; ++w) {
    uint32_t word = 0;
    if (!hex_value(s.substr(w * 8, 8), &word)) return false;
    std::memcpy(bytes + w * 4, &word, 4);  // host order, as the kernel stored it
  }
  char text[INET6_ADDRSTRLEN];
  if (!inet_ntop(v6 ? AF_INET6 : AF_INET, bytes, text, sizeof text)) return false;
  *ip = text;
  return true;
}

std::set<uint64_t> socket_inodes(pid_t pid) {
  std::set<uint64_t> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char link[64];
    const ssize_t n = ::readlinkat(dirfd(d), e->d_name, link, sizeof link - 1);
    if (n <= 0) continue;
    const std::string_view target(link, static_cast<size_t>(n));
    uint64_t inode = 0;
    if (target.rfind("socket:[", 0) == 0 && target.back() == ']' &&
        dec_value(target.substr(8, target.size() - 9), &inode))
      out.insert(inode);
  }
  ::closedir(d);
  return out;
}

// Calls f with each line of text, its header (the first line) left out when skip_header.
template <typename F>
void for_each_line(std::string_view text, bool skip_header, F&& f) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (!std::exchange(skip_header, false)) f(line);
  }
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

std::vector<TcpListener> parse_tcp_listeners(std::string_view text, bool v6) {
  std::vector<TcpListener> out;
  for_each_line(text, true, [&](std::string_view line) {
    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
    const auto f = fields(line, 10);
    TcpListener l;
    if (f.size() < 10 || f[3] != kTcpListen || !parse_endpoint(f[1], v6, &l.ip, &l.port) || l.port == 0 ||
        !dec_value(f[9], &l.inode))
      return;
    out.push_back(std::move(l));
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
    if (f.size() < 8 || !hex_value(f[3], &flags) || !hex_value(f[4], &type) || !dec_value(f[6], &l.inode)) return;
    if (!(flags & kUnixAcceptCon) || type != kSockStream || f[7].front() != '/') return;
    l.path = std::string(line.substr(static_cast<size_t>(f[7].data() - line.data())));
    out.push_back(std::move(l));
  });
  return out;
}

Listeners listeners_of(pid_t pid) {
  Listeners out;
  const auto mine = socket_inodes(pid);
  if (mine.empty()) return out;
  const std::string net = "/proc/" + std::to_string(pid) + "/net/";
  for (const bool v6 : {false, true})
    for (auto& l : parse_tcp_listeners(read_file(net + (v6 ? "tcp6" : "tcp")).value_or(""), v6))
      if (mine.count(l.inode)) out.tcp.push_back(std::move(l));
  for (auto& l : parse_unix_listeners(read_file(net + "unix", 16 << 20).value_or("")))
    if (mine.count(l.inode)) out.unix_sockets.push_back(std::move(l));
  return out;
}

bool in_other_namespaces(pid_t pid) { return namespace_differs(pid, "net") || namespace_differs(pid, "mnt"); }

bool in_other_network_namespace(pid_t pid) { return namespace_differs(pid, "net"); }

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

std::vector<std::string> local_ipv4_of(pid_t pid) {
  return parse_local_ipv4(read_file("/proc/" + std::to_string(pid) + "/net/fib_trie", 1 << 20).value_or(""));
}

}  // namespace thptrace::proc
