#include "symbolize/resolver.h"

#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <fmt/core.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>

#include "proc/proc.h"
#include "proc/sampler.h"

namespace thptrace::symbolize {

namespace {

// libdwfl's find_elf for the modules report_modules() reports: *userdata holds the Resolver's
// /proc/PID/root, so a path in the process's own mount namespace opens the file it maps.
int find_elf(Dwfl_Module* /*mod*/, void** userdata, const char* module_name, Dwarf_Addr /*base*/, char** file_name,
             Elf** elfp) {
  *elfp = nullptr;
  if (!module_name || module_name[0] != '/') return -1;
  const auto* root = static_cast<const std::string*>(*userdata);
  const std::string path = (root ? *root : std::string()) + module_name;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  *file_name = strdup(path.c_str());
  return fd;
}

char* debuginfo_path = nullptr;
const Dwfl_Callbacks kCallbacks = {
    .find_elf = find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &debuginfo_path,
};

std::string base_name(std::string path) {
  if (const auto d = path.find(" (deleted)"); d != std::string::npos) path.resize(d);
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A file worth reporting to libdwfl: one the process executes code from.
bool is_code_file(const Mapping& m) {
  return m.path.size() > 1 && m.path[0] == '/' && m.perms.size() >= 3 && m.perms[2] == 'x' &&
         m.path.find(" (deleted)") == std::string::npos && !m.path.starts_with("/memfd:");
}

constexpr uint64_t kMissRefreshNs = 50'000'000;
constexpr uint64_t kUserSpaceEnd = 0x800000000000ULL;  // x86_64 user addresses are below it

}  // namespace

std::vector<Mapping> parse_maps(const std::string& text) {
  std::vector<Mapping> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    Mapping m;
    char perms[8] = {};
    int consumed = 0;
    uint64_t start = 0, end = 0, offset = 0;
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %*s %*s%n", &start, &end, perms, &offset,
                    &consumed) < 4 ||
        consumed <= 0)
      continue;
    m.start = start;
    m.end = end;
    m.perms = perms;
    m.offset = offset;
    std::string rest = line.substr(static_cast<size_t>(consumed));
    const auto first = rest.find_first_not_of(' ');
    m.path = first == std::string::npos ? std::string() : rest.substr(first);
    out.push_back(std::move(m));
  }
  return out;
}

std::string mapping_label(const Mapping& m) {
  if (m.path.empty()) return "anonymous";
  if (m.path == "[heap]") return "[heap]";
  if (m.path.starts_with("[stack")) return "[stack]";
  if (m.path.starts_with("[anon")) return "anonymous";
  if (m.path[0] == '[') return m.path;
  return base_name(m.path);
}

Resolver::Resolver(pid_t pid)
    : pid_(pid), root_("/proc/" + std::to_string(pid) + "/root"), dwfl_(dwfl_begin(&kCallbacks), dwfl_end) {
  refresh();
}

Resolver::~Resolver() = default;

void Resolver::refresh() {
  last_refresh_ns_ = proc::monotonic_ns();
  const auto text = proc::read_file("/proc/" + std::to_string(pid_) + "/maps", 16 << 20);
  if (!text) return;  // the process is gone: what was read last still resolves
  maps_ = parse_maps(*text);
  if (!dwfl_) return;
  // One module per run of mappings of one code file, from its first mapping (the ELF header's,
  // offset 0) to its last: what dwfl_linux_proc_report reports, with our own find_elf.
  dwfl_report_begin(dwfl_.get());
  for (size_t i = 0; i < maps_.size();) {
    size_t j = i + 1;
    while (j < maps_.size() && maps_[j].path == maps_[i].path && maps_[j].start == maps_[j - 1].end) ++j;
    bool code = false;
    for (size_t k = i; k < j; ++k) code = code || is_code_file(maps_[k]);
    if (code) {
      if (Dwfl_Module* mod = dwfl_report_module(dwfl_.get(), maps_[i].path.c_str(), maps_[i].start, maps_[j - 1].end)) {
        void** userdata = nullptr;
        dwfl_module_info(mod, &userdata, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
        if (userdata) *userdata = &root_;
      }
    }
    i = j;
  }
  dwfl_report_end(dwfl_.get(), nullptr, nullptr);
}

void Resolver::refresh_on_miss() {
  if (proc::monotonic_ns() - last_refresh_ns_ >= kMissRefreshNs) refresh();
}

const Mapping* Resolver::mapping_of(uint64_t address) const {
  auto it =
      std::upper_bound(maps_.begin(), maps_.end(), address, [](uint64_t a, const Mapping& m) { return a < m.start; });
  if (it == maps_.begin()) return nullptr;
  --it;
  return address < it->end ? &*it : nullptr;
}

Frame Resolver::frame_of(uint64_t address, bool return_address) {
  const uint64_t at = return_address && address ? address - 1 : address;
  if (const auto it = cache_.find(at); it != cache_.end()) return it->second;
  Dwfl_Module* mod = dwfl_ ? dwfl_addrmodule(dwfl_.get(), at) : nullptr;
  if (!mod && dwfl_) {
    refresh_on_miss();
    mod = dwfl_addrmodule(dwfl_.get(), at);
  }
  Frame f{"?", ""};
  if (mod) {
    Dwarf_Addr start = 0;
    const char* name = dwfl_module_info(mod, nullptr, &start, nullptr, nullptr, nullptr, nullptr, nullptr);
    f.module = base_name(name ? name : "?");
    GElf_Off offset = 0;
    GElf_Sym sym;
    const char* fn = dwfl_module_addrinfo(mod, at, &offset, &sym, nullptr, nullptr, nullptr);
    f.function = fn ? fn : fmt::format("{}+0x{:x}", f.module, at - start);
  }
  cache_.emplace(at, f);
  return f;
}

correlate::CopySample Resolver::resolve(uint64_t ts_ns, uint64_t address, const __u64* stack, uint32_t frames) {
  correlate::CopySample s;
  s.ts_ns = ts_ns;
  s.address = address;
  const Mapping* m = mapping_of(address);
  if (!m) {
    refresh_on_miss();
    m = mapping_of(address);
  }
  s.mapping = m ? mapping_label(*m) : "unmapped";
  bool root = false;
  for (uint32_t i = 0; i < frames; ++i) {
    const uint64_t a = stack[i];
    if (a == 0 || a >= kUserSpaceEnd) break;
    const Frame f = frame_of(a, i > 0);
    if (i == 0) s.leaf_module = f.module;
    // A frame in no module ends the walk: past it are a binary's spilled registers, not callers.
    if (f.module.empty() && i > 0) break;
    s.frames.push_back(f.function);
    if (correlate::is_stack_root(f.function)) {
      root = true;
      break;
    }
  }
  s.whole = root || s.frames.size() >= correlate::kWholeStackFrames;
  return s;
}

}  // namespace thptrace::symbolize
