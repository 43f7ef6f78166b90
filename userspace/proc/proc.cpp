// SPDX-License-Identifier: Apache-2.0
#include "proc/proc.h"

#include <fmt/format.h>

#include <dirent.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <charconv>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>

#include "proc/fields.h"

namespace thptrace::proc {
namespace {

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r");
  return s.substr(first, last - first + 1);
}

template <typename T>
bool to_number(std::string_view s, T& out) {
  s = trim(s);
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr != s.data();
}

// Calls fn(key, value) for every "Key:  value" line.
template <typename Fn>
void for_each_colon_line(std::string_view text, Fn fn) {
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    fn(line.substr(0, colon), trim(line.substr(colon + 1)));
  }
}

// "12345 kB" -> 12345
bool kb_value(std::string_view v, uint64_t& out) {
  const auto sp = v.find(' ');
  return to_number(v.substr(0, sp), out);
}

}  // namespace

std::optional<ProcessStatus> parse_status(std::string_view text) {
  ProcessStatus st;
  bool have_name = false, have_tgid = false;
  for_each_colon_line(text, [&](std::string_view key, std::string_view value) {
    if (key == "Name") {
      st.name = std::string(value);
      have_name = true;
    } else if (key == "Tgid") {
      have_tgid = to_number(value, st.tgid);
    } else if (key == "PPid") {
      to_number(value, st.ppid);
    } else if (key == "VmRSS") {
      kb_value(value, st.vm_rss_kb);
    } else if (key == "VmPTE") {
      kb_value(value, st.vm_pte_kb);
    } else if (key == "State") {
      st.exited = value.starts_with('Z') || value.starts_with('X');
    } else if (key == "THP_enabled") {
      int v = 0;
      if (to_number(value, v)) st.thp_enabled = v != 0;
    }
  });
  if (!have_name || !have_tgid) return std::nullopt;
  return st;
}

std::optional<SmapsRollup> parse_smaps_rollup(std::string_view text) {
  SmapsRollup r;
  bool have_rss = false;
  for_each_colon_line(text, [&](std::string_view key, std::string_view value) {
    if (key == "Rss")
      have_rss = kb_value(value, r.rss_kb);
    else if (key == "Anonymous")
      kb_value(value, r.anonymous_kb);
    else if (key == "AnonHugePages")
      kb_value(value, r.anon_huge_pages_kb);
  });
  if (!have_rss) return std::nullopt;
  return r;
}

std::optional<uint64_t> parse_statm_rss_kb(std::string_view text, uint64_t page_size) {
  const size_t sp = text.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;
  // An exited process its parent has not reaped (a zombie) has no memory: its line is all zeros. A
  // live process has a size.
  if (uint64_t size = 0; !to_number(text.substr(0, sp), size) || size == 0) return std::nullopt;
  text.remove_prefix(sp + 1);
  const size_t end = text.find_first_of(" \n");
  uint64_t pages = 0;
  if (end == 0 || !to_number(text.substr(0, end), pages) || pages > UINT64_MAX / page_size) return std::nullopt;
  return pages * page_size / 1024;
}

std::optional<SchedStat> parse_schedstat(std::string_view text) {
  SchedStat s;
  for (uint64_t* field : {&s.on_cpu_ns, &s.runqueue_ns}) {
    const size_t end = text.find_first_of(" \n");
    if (end == 0 || end == std::string_view::npos) return std::nullopt;
    // Digits only, to the separator: the kernel writes nothing else there.
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + end, *field);
    if (ec != std::errc() || ptr != text.data() + end) return std::nullopt;
    text.remove_prefix(end + 1);
  }
  return s;
}

std::map<std::string, uint64_t> parse_vmstat(std::string_view text) {
  std::map<std::string, uint64_t> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    const auto sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0) continue;
    uint64_t v = 0;
    if (to_number(line.substr(sp + 1), v)) out.emplace(std::string(line.substr(0, sp)), v);
  }
  return out;
}

std::string parse_bracketed_mode(std::string_view text) {
  const auto open = text.find('[');
  if (open == std::string_view::npos) return {};
  const auto close = text.find(']', open);
  if (close == std::string_view::npos) return {};
  return std::string(text.substr(open + 1, close - open - 1));
}

bool parse_smaps_hugepage_advice(std::string_view smaps) {
  bool advised = false;
  for_each_colon_line(smaps, [&](std::string_view key, std::string_view flags) {
    while (!advised && key == "VmFlags" && !flags.empty()) {
      const auto sp = flags.find(' ');
      advised = flags.substr(0, sp) == "hg";
      flags = sp == std::string_view::npos ? std::string_view{} : trim(flags.substr(sp + 1));
    }
  });
  return advised;
}

HugePageEligibility huge_page_eligibility(pid_t pid, const std::string& system_mode) {
  if (system_mode.empty()) return {false, "this kernel has no transparent huge pages"};
  if (system_mode == "never") return {false, "THP is never"};
  const auto status = read_status(pid);
  if (status && status->thp_enabled == false)
    return {false, "the process opted out of THP (THP_enabled: 0, as Redis's disable-thp does)"};
  if (system_mode != "madvise") return {true, "THP is " + system_mode};
  // smaps walks the page tables to fill in its sizes (its cost per GiB mapped: measurements.md),
  // paid once.
  constexpr size_t kMaxSmaps = 64 << 20;
  const auto smaps = read_file("/proc/" + std::to_string(pid) + "/smaps", kMaxSmaps);
  if (!smaps) return {true, "THP is madvise and the process's smaps cannot be read"};
  if (smaps->size() >= kMaxSmaps) return {true, "THP is madvise and the process maps too much to check"};
  if (parse_smaps_hugepage_advice(*smaps)) return {true, "THP is madvise and the process has MADV_HUGEPAGE regions"};
  return {false, "THP is madvise and the process has no MADV_HUGEPAGE region"};
}

std::optional<std::string> read_file(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string out;
  char buf[4096];
  // Each chunk's count decides, not the stream state, so the last partial chunk is kept. (A comma
  // here once made the loop re-append the last chunk forever when the file was longer than max_bytes.)
  while (out.size() < max_bytes && in.read(buf, sizeof buf).gcount() > 0)
    out.append(buf, static_cast<size_t>(in.gcount()));
  if (out.size() > max_bytes) out.resize(max_bytes);
  return out;
}

std::vector<pid_t> pids() {
  std::vector<pid_t> out;
  const std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir("/proc"), ::closedir);
  if (!d) return out;
  while (const dirent* e = ::readdir(d.get())) {
    pid_t pid = 0;
    if (detail::number(std::string_view(e->d_name), pid) && pid > 0) out.push_back(pid);
  }
  return out;
}

bool process_exists(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  const auto st = read_status(pid);
  return !st || !st->exited;
}

std::optional<ProcessStatus> read_status(pid_t pid) {
  const auto text = read_file("/proc/" + std::to_string(pid) + "/status");
  return text ? parse_status(*text) : std::nullopt;
}

std::optional<SmapsRollup> read_smaps_rollup(pid_t pid) {
  const auto text = read_file("/proc/" + std::to_string(pid) + "/smaps_rollup");
  return text ? parse_smaps_rollup(*text) : std::nullopt;
}

std::optional<uint64_t> read_statm_rss_kb(pid_t pid) {
  static const uint64_t page_size = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const auto text = read_file("/proc/" + std::to_string(pid) + "/statm", 256);
  return text ? parse_statm_rss_kb(*text, page_size) : std::nullopt;
}

std::optional<SchedStat> read_schedstat(pid_t pid, pid_t tid) {
  const auto text = read_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/schedstat", 256);
  return text ? parse_schedstat(*text) : std::nullopt;
}

std::map<std::string, uint64_t> read_vmstat() {
  const auto text = read_file("/proc/vmstat");
  return text ? parse_vmstat(*text) : std::map<std::string, uint64_t>{};
}

std::string SystemInfo::folio_mode(uint32_t kb) const {
  const auto it = folio_modes.find(kb);
  if (it == folio_modes.end()) return {};
  return it->second == "inherit" ? thp_enabled : it->second;
}

std::string SystemInfo::small_folios_enabled() const {
  std::string out;
  if (folio_modes.empty()) return out;
  const uint32_t pmd_kb = folio_modes.rbegin()->first;
  for (const auto& [kb, mode] : folio_modes) {
    const std::string m = folio_mode(kb);
    if (kb >= pmd_kb || m.empty() || m == "never") continue;
    out += fmt::format("{}{} KiB ({})", out.empty() ? "" : ", ", kb, mode == "inherit" ? "inherit: " + m : m);
  }
  return out;
}

std::map<uint32_t, std::string> read_folio_modes(const std::string& thp_dir) {
  std::map<uint32_t, std::string> modes;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(thp_dir, ec)) {
    const std::string name = e.path().filename().string();
    // "hugepages-64kB"
    if (name.size() <= 12 || name.rfind("hugepages-", 0) != 0 || name.substr(name.size() - 2) != "kB") continue;
    uint32_t kb = 0;
    if (!detail::number(std::string_view(name).substr(10, name.size() - 12), kb) || kb == 0) continue;
    if (const auto t = read_file(e.path().string() + "/enabled", 256)) {
      const std::string mode = parse_bracketed_mode(*t);
      if (!mode.empty()) modes[kb] = mode;
    }
    if (modes.size() >= 64) break;  // a kernel has one per page order up to the PMD's
  }
  return modes;
}

FolioCounters read_folio_counters(const std::string& thp_dir) {
  FolioCounters out;
  for (const auto& [kb, mode] : read_folio_modes(thp_dir)) {
    const std::string stats = thp_dir + "/hugepages-" + std::to_string(kb) + "kB/stats/";
    for (const char* name : kFolioCounters) {
      uint64_t v = 0;
      if (const auto t = read_file(stats + name, 32);
          t && detail::number(trim(std::string_view(*t).substr(0, t->find('\n'))), v))
        out[kb][name] = v;
    }
  }
  return out;
}

SystemInfo read_system_info() {
  SystemInfo info;
  struct utsname u {};
  if (::uname(&u) == 0) info.kernel_release = u.release;
  if (const auto t = read_file(kThpEnabledPath)) info.thp_enabled = parse_bracketed_mode(*t);
  if (const auto t = read_file(kThpDefragPath)) info.thp_defrag = parse_bracketed_mode(*t);
  return info;
}

std::string exe_path(pid_t pid) {
  char buf[4096];
  const auto link = "/proc/" + std::to_string(pid) + "/exe";
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return {};
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace thptrace::proc
