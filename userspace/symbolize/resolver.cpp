// SPDX-License-Identifier: Apache-2.0
#include "symbolize/resolver.h"

#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>

#include "common/log.h"
#include "proc/foreign_file.h"
#include "proc/proc.h"
#include "proc/sampler.h"

namespace thptrace::symbolize {

namespace {

// libdwfl's find_elf for the modules refresh() reports: *userdata is the module's ModuleSource, so
// the file is the one the process maps (proc/foreign_file.h), opened as it sees it. libdwfl owns the
// descriptor returned.
int find_elf(Dwfl_Module* /*mod*/, void** userdata, const char* /*module_name*/, Dwarf_Addr /*base*/, char** file_name,
             Elf** elfp) {
  *elfp = nullptr;
  const auto* src = static_cast<const ModuleSource*>(*userdata);
  if (!src || src->path.empty() || src->path[0] != '/') return -1;
  proc::ForeignFile f = proc::open_process_file(src->pid, src->path, proc::kMaxElfBytes, src->range);
  if (!f.fd) return -1;
  *file_name = strdup(src->path.c_str());
  return f.fd.release();
}

// "/usr/lib/debug/.build-id/ab/cdef....debug" for the module's build id; "" without one.
std::string build_id_debug_path(Dwfl_Module* mod) {
  const unsigned char* bits = nullptr;
  GElf_Addr vaddr = 0;
  const int n = dwfl_module_build_id(mod, &bits, &vaddr);
  if (n < 2 || !bits) return {};
  std::string hex;
  for (int i = 0; i < n; ++i) hex += fmt::format("{:02x}", bits[i]);
  return "/usr/lib/debug/.build-id/" + hex.substr(0, 2) + "/" + hex.substr(2) + ".debug";
}

// libdwfl's find_debuginfo: the debug file of the module's build id, in the process's filesystem
// first, then the host's. Never by .gnu_debuglink name or beside the file: those are paths the
// container wrote. debuginfod (host paths and servers by build id) only when asked.
int find_debuginfo(Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base, const char* file_name,
                   const char* debuglink_file, GElf_Word debuglink_crc, char** debuginfo_file_name) {
  const auto* src = static_cast<const ModuleSource*>(*userdata);
  if (!src) return -1;
  const std::string path = build_id_debug_path(mod);
  if (!path.empty()) {
    if (proc::ForeignFile f = proc::open_process_file(src->pid, path, proc::kMaxElfBytes); f.fd) return f.fd.release();
    if (const proc::FileFd host(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC)); host)
      if (proc::ForeignFile f = proc::open_in_root(host.get(), path, proc::kMaxElfBytes); f.fd) return f.fd.release();
  }
  if (!src->debuginfod) return -1;
  return dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file, debuglink_crc,
                                      debuginfo_file_name);
}

char* debuginfo_path = nullptr;
const Dwfl_Callbacks kCallbacks = {
    .find_elf = find_elf,
    .find_debuginfo = find_debuginfo,
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

// libdwfl's thread callbacks for unwinding one sample: a single thread, whose registers and stack
// are the sample's (Resolver::Unwinding); nothing is read from the live process.
pid_t next_thread(Dwfl* /*dwfl*/, void* dwfl_arg, void** thread_argp) {
  if (*thread_argp) return 0;
  *thread_argp = dwfl_arg;
  return static_cast<Resolver::Unwinding*>(dwfl_arg)->pid;
}

bool memory_read(Dwfl* /*dwfl*/, Dwarf_Addr addr, Dwarf_Word* result, void* dwfl_arg) {
  const auto* u = static_cast<Resolver::Unwinding*>(dwfl_arg);
  if (!u->user) return false;
  const uint64_t sp = u->user->regs[UserContext::kSp];
  if (addr < sp || addr - sp > u->user->stack.size() || u->user->stack.size() - (addr - sp) < sizeof(Dwarf_Word))
    return false;
  std::memcpy(result, u->user->stack.data() + (addr - sp), sizeof(Dwarf_Word));
  return true;
}

// x86_64's DWARF registers 0..15 (rax rdx rcx rbx rsi rdi rbp rsp r8 ... r15), by their index in
// struct pt_regs (r15 r14 r13 r12 bp bx r11 r10 r9 r8 ax cx dx si di orig_ax ip cs flags sp ss).
constexpr std::array<size_t, 16> kDwarfFromPtRegs = {10, 12, 11, 5, 13, 14, 4, 19, 9, 8, 7, 6, 3, 2, 1, 0};

bool set_initial_registers(Dwfl_Thread* thread, void* thread_arg) {
  const auto* u = static_cast<Resolver::Unwinding*>(thread_arg);
  if (!u->user) return false;
  std::array<Dwarf_Word, kDwarfFromPtRegs.size()> regs{};
  for (size_t i = 0; i < regs.size(); ++i) regs[i] = u->user->regs[kDwarfFromPtRegs[i]];
  if (!dwfl_thread_state_registers(thread, 0, regs.size(), regs.data())) return false;
  dwfl_thread_state_register_pc(thread, u->user->regs[UserContext::kIp]);
  return true;
}

const Dwfl_Thread_Callbacks kThreadCallbacks = {
    .next_thread = next_thread,
    .get_thread = nullptr,
    .memory_read = memory_read,
    .set_initial_registers = set_initial_registers,
    .detach = nullptr,
    .thread_detach = nullptr,
};

constexpr size_t kMaxDwarfFrames = 64;

[[maybe_unused]] int on_frame(Dwfl_Frame* state, void* arg) {
  auto* walk = static_cast<std::vector<std::pair<uint64_t, bool>>*>(arg);
  Dwarf_Addr pc = 0;
  bool activation = false;
  if (!dwfl_frame_pc(state, &pc, &activation)) return DWARF_CB_ABORT;
  walk->emplace_back(pc, !activation);
  return walk->size() >= kMaxDwarfFrames ? DWARF_CB_ABORT : DWARF_CB_OK;
}

constexpr uint64_t kMissRefreshNs = 50'000'000;
constexpr uint64_t kUserSpaceEnd = 0x800000000000ULL;  // x86_64 user addresses are below it

}  // namespace

std::string mapping_label(const Mapping& m) {
  if (m.path.empty()) return "anonymous";
  if (m.path == "[heap]") return "[heap]";
  if (m.path.starts_with("[stack")) return "[stack]";
  if (m.path.starts_with("[anon")) return "anonymous";
  if (m.path[0] == '[') return m.path;
  return base_name(m.path);
}

Resolver::Resolver(pid_t pid, ResolverOptions options)
    : pid_(pid),
      options_(options),
      dwfl_(dwfl_begin(&kCallbacks), dwfl_end),
      unwinding_(std::make_unique<Unwinding>(Unwinding{.pid = pid})) {
  const std::string exe = proc::exe_path(pid);
  exe_name_ = base_name(exe);
  auto comm = proc::read_file("/proc/" + std::to_string(pid) + "/comm", 64).value_or("");
  while (!comm.empty() && (comm.back() == '\n' || comm.back() == '\r')) comm.pop_back();
  exe_label_ = comm.empty() || comm == exe_name_ ? exe_name_ : comm + " (" + exe + ")";
  exe_command_ = comm.empty() ? exe_name_ : comm;
  refresh();
}

const std::string& Resolver::shown_name(const std::string& file_name) const {
  return !exe_name_.empty() && file_name == exe_name_ ? exe_command_ : file_name;
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
  std::vector<std::unique_ptr<ModuleSource>> sources;
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
        if (userdata) {
          sources.push_back(
              std::make_unique<ModuleSource>(ModuleSource{pid_, options_.debuginfod, maps_[i].range(), maps_[i].path}));
          *userdata = sources.back().get();
        }
      }
    }
    i = j;
  }
  dwfl_report_end(dwfl_.get(), nullptr, nullptr);
  sources_ = std::move(sources);  // every module left points into the new set
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
    f.function = fn ? fn : fmt::format("{}+0x{:x}", shown_name(f.module), at - start);
  }
  cache_.emplace(at, f);
  return f;
}

std::vector<std::string> Resolver::frames_of(const std::vector<std::pair<uint64_t, bool>>& walk,
                                             std::string* leaf_module, bool* whole) {
  std::vector<std::string> out;
  bool root = false;
  for (size_t i = 0; i < walk.size(); ++i) {
    const auto [a, return_address] = walk[i];
    if (a == 0 || a >= kUserSpaceEnd) break;
    const Frame f = frame_of(a, return_address);
    if (i == 0) *leaf_module = !exe_name_.empty() && f.module == exe_name_ ? exe_label_ : f.module;
    // A frame in no module ends the walk: past it are a binary's spilled registers, not callers.
    if (f.module.empty() && i > 0) break;
    out.push_back(f.function);
    if (correlate::is_stack_root(f.function)) {
      root = true;
      break;
    }
  }
  *whole = root || out.size() >= correlate::kWholeStackFrames;
  return out;
}

std::vector<std::pair<uint64_t, bool>> Resolver::unwind([[maybe_unused]] const UserContext& user) {
  std::vector<std::pair<uint64_t, bool>> walk;
#if defined(__x86_64__)
  if (!dwfl_ || user.stack.empty()) return walk;
  if (!unwinding_->attached) {
    if (!dwfl_attach_state(dwfl_.get(), nullptr, pid_, &kThreadCallbacks, unwinding_.get())) {
      if (!unwind_warned_) log::warn("cannot unwind sampled stacks from .eh_frame: {}", dwfl_errmsg(-1));
      unwind_warned_ = true;
      return walk;
    }
    unwinding_->attached = true;
  }
  unwinding_->user = &user;
  // Ends with -1 where the unwind stops (the thread's start has no caller): the frames so far stand.
  // A walk that stops at its first frame is said once a capture, with libdwfl's reason.
  if (dwfl_getthread_frames(dwfl_.get(), pid_, on_frame, &walk) != 0 && walk.size() <= 1 && !unwind_warned_) {
    log::warn("a sampled stack did not unwind past {:#x} ({} bytes of stack): {}", user.regs[UserContext::kIp],
              user.stack.size(), dwfl_errmsg(-1));
    unwind_warned_ = true;
  }
  unwinding_->user = nullptr;
#endif
  return walk;
}

correlate::CopySample Resolver::resolve(uint64_t ts_ns, uint64_t address, const __u64* stack, uint32_t frames,
                                        const UserContext* user) {
  correlate::CopySample s;
  s.ts_ns = ts_ns;
  s.address = address;
  const Mapping* m = mapping_of(address);
  if (!m) {
    refresh_on_miss();
    m = mapping_of(address);
  }
  s.mapping = m ? shown_name(mapping_label(*m)) : "unmapped";
  std::vector<std::pair<uint64_t, bool>> walk;
  for (uint32_t i = 0; i < frames; ++i) walk.emplace_back(stack[i], i > 0);
  s.frames = frames_of(walk, &s.leaf_module, &s.whole);
  if (!s.whole && user) {
    std::string leaf;
    bool whole = false;
    auto dwarf = frames_of(unwind(*user), &leaf, &whole);
    if (dwarf.size() > s.frames.size()) {
      s.frames = std::move(dwarf);
      s.leaf_module = std::move(leaf);
      s.whole = whole;
      s.dwarf = true;
    }
  }
  return s;
}

}  // namespace thptrace::symbolize
