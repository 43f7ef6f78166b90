#include "proc/net.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
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

}  // namespace

std::vector<TcpListener> parse_tcp_listeners(std::string_view text, bool v6) {
  std::vector<TcpListener> out;
  size_t pos = 0;
  bool header = true;
  while (pos < text.size()) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (std::exchange(header, false)) continue;
    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
    const auto f = fields(line, 10);
    TcpListener l;
    if (f.size() < 10 || f[3] != kTcpListen || !parse_endpoint(f[1], v6, &l.ip, &l.port) || l.port == 0 ||
        !dec_value(f[9], &l.inode))
      continue;
    out.push_back(std::move(l));
  }
  return out;
}

std::vector<UnixListener> parse_unix_listeners(std::string_view text) {
  std::vector<UnixListener> out;
  size_t pos = 0;
  bool header = true;
  while (pos < text.size()) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (std::exchange(header, false)) continue;
    // Num RefCount Protocol Flags Type St Inode Path: the path is the rest of the line.
    const auto f = fields(line, 8);
    unsigned long flags = 0, type = 0;
    UnixListener l;
    if (f.size() < 8 || !hex_value(f[3], &flags) || !hex_value(f[4], &type) || !dec_value(f[6], &l.inode)) continue;
    if (!(flags & kUnixAcceptCon) || type != kSockStream || f[7].front() != '/') continue;
    l.path = std::string(line.substr(static_cast<size_t>(f[7].data() - line.data())));
    out.push_back(std::move(l));
  }
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

bool in_other_namespaces(pid_t pid) {
  const auto link = [](const std::string& path) {
    char buf[64];
    const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  };
  const std::string p = "/proc/" + std::to_string(pid) + "/ns/";
  for (const char* ns : {"net", "mnt"}) {
    const std::string theirs = link(p + ns);
    if (!theirs.empty() && theirs != link(std::string("/proc/self/ns/") + ns)) return true;
  }
  return false;
}

}  // namespace thptrace::proc
