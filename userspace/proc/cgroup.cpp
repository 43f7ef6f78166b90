// SPDX-License-Identifier: Apache-2.0
#include "proc/cgroup.h"

#include <charconv>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "proc/proc.h"

namespace thptrace::proc {
namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    const size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

std::optional<uint64_t> to_u64(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// mountinfo escapes blanks in paths as octal (\040).
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const auto oct = s.substr(i + 1, 3);
      if (oct.find_first_not_of("01234567") == std::string_view::npos) {
        out.push_back(static_cast<char>((oct[0] - '0') * 64 + (oct[1] - '0') * 8 + (oct[2] - '0')));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

std::optional<uint64_t> read_u64(const std::string& path) {
  const auto text = read_file(path, 4096);
  return text ? to_u64(*text) : std::nullopt;
}

}  // namespace

std::optional<CgroupRef> parse_memory_cgroup(std::string_view text) {
  std::optional<CgroupRef> v2;
  for (const auto line : split(text, '\n')) {
    // hierarchy-ID:controller-list:cgroup-path; the path may itself hold ':'.
    const size_t a = line.find(':');
    if (a == std::string_view::npos) continue;
    const size_t b = line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    const auto id = line.substr(0, a);
    const auto controllers = line.substr(a + 1, b - a - 1);
    const auto path = line.substr(b + 1);
    if (path.empty() || path[0] != '/') continue;
    if (id == "0" && controllers.empty()) {
      v2 = CgroupRef{2, std::string(path)};
      continue;
    }
    for (const auto c : split(controllers, ','))
      if (c == "memory") return CgroupRef{1, std::string(path)};
  }
  return v2;
}

std::optional<std::string> memory_cgroup_dir(std::string_view mountinfo, const CgroupRef& ref) {
  for (const auto line : split(mountinfo, '\n')) {
    // id parent major:minor root mount-point options [optional fields...] - fstype source super-options
    const auto fields = split(line, ' ');
    size_t dash = 0;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (dash < 5 || dash + 3 >= fields.size()) continue;
    const auto fstype = fields[dash + 1];
    const auto super = fields[dash + 3];
    bool match = false;
    if (ref.version == 2) {
      match = fstype == "cgroup2";
    } else if (fstype == "cgroup") {
      for (const auto o : split(super, ','))
        if (o == "memory") match = true;
    }
    if (!match) continue;
    const std::string root = unescape(fields[3]);
    const std::string mount_point = unescape(fields[4]);
    // The cgroup's path is relative to the hierarchy's root; the mount shows the part below `root`.
    if (root == "/") return mount_point + (ref.path == "/" ? "" : ref.path);
    if (ref.path == root) return mount_point;
    if (ref.path.size() > root.size() && ref.path.compare(0, root.size(), root) == 0 && ref.path[root.size()] == '/')
      return mount_point + ref.path.substr(root.size());
  }
  return std::nullopt;
}

std::optional<uint64_t> parse_memory_limit(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text == "max") return std::nullopt;
  const auto v = to_u64(text);
  // cgroup v1 shows "no limit" as PAGE_COUNTER_MAX pages: 2^63 - 1 rounded down to a page.
  if (!v || *v >= (uint64_t{1} << 62)) return std::nullopt;
  return v;
}

uint64_t parse_oom_kills(std::string_view text) {
  for (const auto line : split(text, '\n')) {
    const auto f = split(line, ' ');
    if (f.size() == 2 && f[0] == "oom_kill")
      if (const auto v = to_u64(f[1])) return *v;
  }
  return 0;
}

namespace {

// memory_cgroup_dir() of each cgroup seen, so that a sample reads /proc/self/mountinfo (hundreds of
// lines on a container host) once per cgroup, not once per target per sample. An entry is dropped
// when its directory stops answering (the cgroup removed, the hierarchy remounted).
class CgroupDirs {
 public:
  std::optional<std::string> find(const CgroupRef& ref) {
    std::lock_guard lock(mu_);
    const auto it = dirs_.find({ref.version, ref.path});
    if (it != dirs_.end()) return it->second;
    return std::nullopt;
  }
  std::optional<std::string> resolve(const CgroupRef& ref) {
    const auto mounts = read_file("/proc/self/mountinfo", 1 << 20);
    if (!mounts) return std::nullopt;
    auto dir = memory_cgroup_dir(*mounts, ref);
    if (!dir) return std::nullopt;
    std::lock_guard lock(mu_);
    if (dirs_.size() >= kMaxEntries) dirs_.clear();  // cgroups of processes long gone
    dirs_[{ref.version, ref.path}] = *dir;
    return dir;
  }
  void forget(const CgroupRef& ref) {
    std::lock_guard lock(mu_);
    dirs_.erase({ref.version, ref.path});
  }

 private:
  static constexpr size_t kMaxEntries = 1024;
  std::mutex mu_;
  std::map<std::pair<int, std::string>, std::string> dirs_;
};

CgroupDirs& cgroup_dirs() {
  static CgroupDirs dirs;
  return dirs;
}

}  // namespace

std::optional<CgroupMemory> read_memory_cgroup(pid_t pid) {
  const auto cg = read_file("/proc/" + std::to_string(pid) + "/cgroup", 1 << 16);
  if (!cg) return std::nullopt;
  const auto ref = parse_memory_cgroup(*cg);
  if (!ref) return std::nullopt;
  const bool v1 = ref->version == 1;
  const char* usage_file = v1 ? "/memory.usage_in_bytes" : "/memory.current";
  std::optional<std::string> dir = cgroup_dirs().find(*ref);
  std::optional<uint64_t> usage;
  if (dir) usage = read_u64(*dir + usage_file);
  if (!usage) {
    if (dir) cgroup_dirs().forget(*ref);
    dir = cgroup_dirs().resolve(*ref);
    if (!dir) return std::nullopt;
    usage = read_u64(*dir + usage_file);
    if (!usage) return std::nullopt;  // no memory controller in this cgroup
  }
  CgroupMemory m;
  m.version = ref->version;
  m.dir = *dir;
  m.usage_bytes = *usage;
  if (const auto t = read_file(*dir + (v1 ? "/memory.limit_in_bytes" : "/memory.max"), 4096))
    m.limit_bytes = parse_memory_limit(*t);
  m.peak_bytes = read_u64(*dir + (v1 ? "/memory.max_usage_in_bytes" : "/memory.peak"));
  if (const auto t = read_file(*dir + (v1 ? "/memory.oom_control" : "/memory.events"), 4096))
    m.oom_kills = parse_oom_kills(*t);
  return m;
}

std::optional<uint64_t> parse_mem_available(std::string_view meminfo) {
  for (const auto line : split(meminfo, '\n')) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    auto rest = line.substr(13);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    if (rest.size() > 3 && rest.substr(rest.size() - 3) == " kB") rest.remove_suffix(3);
    if (const auto kb = to_u64(rest)) return *kb * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> read_mem_available() {
  const auto t = read_file("/proc/meminfo", 1 << 16);
  return t ? parse_mem_available(*t) : std::nullopt;
}

}  // namespace thptrace::proc
