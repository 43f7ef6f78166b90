#include "tracer/probe.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <set>

#include "proc/proc.h"

namespace thptrace::tracer {
namespace {

// r0 = 0; exit
const bpf_insn kTrivialProgram[] = {
    {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .src_reg = 0, .off = 0, .imm = 0},
    {.code = BPF_JMP | BPF_EXIT, .dst_reg = 0, .src_reg = 0, .off = 0, .imm = 0},
};

// *(u64 *)(r10 - 8) = 0; r0 = 0; r1 = 1; r0 = cmpxchg(r10 - 8, r0, r1); r0 = 0; exit
const bpf_insn kCmpxchgProgram[] = {
    {.code = BPF_ST | BPF_MEM | BPF_DW, .dst_reg = BPF_REG_10, .src_reg = 0, .off = -8, .imm = 0},
    {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .src_reg = 0, .off = 0, .imm = 0},
    {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_1, .src_reg = 0, .off = 0, .imm = 1},
    {.code = BPF_STX | BPF_ATOMIC | BPF_DW, .dst_reg = BPF_REG_10, .src_reg = BPF_REG_1, .off = -8, .imm = BPF_CMPXCHG},
    {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .src_reg = 0, .off = 0, .imm = 0},
    {.code = BPF_JMP | BPF_EXIT, .dst_reg = 0, .src_reg = 0, .off = 0, .imm = 0},
};

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

const btf* vmlinux() {
  static const btf* b = btf__load_vmlinux_btf();
  return libbpf_get_error(b) ? nullptr : b;
}

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

// Loads a TRACING program against a BTF id and attaches it; true when both work.
bool try_tracing(bpf_attach_type type, int btf_id, std::string& failure) {
  LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = type, .attach_btf_id = static_cast<__u32>(btf_id));
  const int fd = bpf_prog_load(BPF_PROG_TYPE_TRACING, "thptrace_probe", "GPL", kTrivialProgram, 2, &opts);
  if (fd < 0) {
    failure = "load failed: " + errno_text(errno);
    return false;
  }
  FdCloser prog{fd};
  const int link = bpf_raw_tracepoint_open(nullptr, fd);
  if (link < 0) {
    failure = "attach failed: " + errno_text(errno);
    return false;
  }
  ::close(link);
  return true;
}

}  // namespace

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::fentry: return "fentry";
    case Mode::tp_btf: return "tp_btf";
    case Mode::raw_tp: return "raw_tp";
    case Mode::uprobe: return "uprobe";
    case Mode::info_polling: return "info_polling";
    case Mode::unavailable: return "unavailable";
  }
  return "unavailable";
}

bool FeatureProbe::vmlinux_btf() { return ::access("/sys/kernel/btf/vmlinux", R_OK) == 0 && vmlinux(); }

bool FeatureProbe::fentry(const std::string& func) {
  static std::map<std::string, std::pair<bool, std::string>> memo;
  if (auto it = memo.find(func); it != memo.end()) {
    last_failure_ = it->second.second;
    return it->second.first;
  }
  std::string failure;
  bool ok = false;
  if (!vmlinux()) {
    failure = "no kernel BTF";
  } else if (const int id = btf__find_by_name_kind(vmlinux(), func.c_str(), BTF_KIND_FUNC); id <= 0) {
    failure = func + " is not in the kernel's BTF (inlined or renamed)";
  } else {
    ok = try_tracing(BPF_TRACE_FENTRY, id, failure);
    if (!ok) failure = "fentry on " + func + " " + failure;
  }
  memo[func] = {ok, failure};
  last_failure_ = failure;
  return ok;
}

bool FeatureProbe::tp_btf(const std::string& tracepoint) {
  static std::map<std::string, std::pair<bool, std::string>> memo;
  if (auto it = memo.find(tracepoint); it != memo.end()) {
    last_failure_ = it->second.second;
    return it->second.first;
  }
  std::string failure;
  bool ok = false;
  const std::string type = "btf_trace_" + tracepoint;
  if (!vmlinux()) {
    failure = "no kernel BTF";
  } else if (const int id = btf__find_by_name_kind(vmlinux(), type.c_str(), BTF_KIND_TYPEDEF); id <= 0) {
    failure = "tracepoint " + tracepoint + " is not in the kernel's BTF";
  } else {
    ok = try_tracing(BPF_TRACE_RAW_TP, id, failure);
    if (!ok) failure = "tp_btf/" + tracepoint + " " + failure;
  }
  memo[tracepoint] = {ok, failure};
  last_failure_ = failure;
  return ok;
}

bool FeatureProbe::raw_tp(const std::string& tracepoint) {
  static std::map<std::string, std::pair<bool, std::string>> memo;
  if (auto it = memo.find(tracepoint); it != memo.end()) {
    last_failure_ = it->second.second;
    return it->second.first;
  }
  std::string failure;
  bool ok = false;
  const int fd = bpf_prog_load(BPF_PROG_TYPE_RAW_TRACEPOINT, "thptrace_probe", "GPL", kTrivialProgram, 2, nullptr);
  if (fd < 0) {
    failure = "raw_tp load failed: " + errno_text(errno);
  } else {
    FdCloser prog{fd};
    const int link = bpf_raw_tracepoint_open(tracepoint.c_str(), fd);
    if (link < 0) {
      failure = "raw_tp/" + tracepoint + " attach failed: " + errno_text(errno);
    } else {
      ::close(link);
      ok = true;
    }
  }
  memo[tracepoint] = {ok, failure};
  last_failure_ = failure;
  return ok;
}

bool FeatureProbe::bpf_atomics() {
  static const std::pair<bool, std::string> memo = [] {
    const int fd = bpf_prog_load(BPF_PROG_TYPE_RAW_TRACEPOINT, "thptrace_probe", "GPL", kCmpxchgProgram,
                                 sizeof kCmpxchgProgram / sizeof kCmpxchgProgram[0], nullptr);
    if (fd < 0) return std::pair<bool, std::string>{false, "BPF compare-and-exchange refused: " + errno_text(errno)};
    ::close(fd);
    return std::pair<bool, std::string>{true, ""};
  }();
  if (!memo.first) last_failure_ = memo.second;
  return memo.first;
}

int FeatureProbe::ringbuf() { return libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, nullptr); }

const std::vector<std::string>& redis_uprobe_symbols() {
  static const std::vector<std::string> s = {"rdbSaveBackground", "rdbSaveToSlavesSockets",
                                             "rewriteAppendOnlyFileBackground", "startBgsaveForReplication",
                                             "redisFork"};
  return s;
}

const std::vector<std::string>& redis_required_symbols() {
  // redisFork only marks module forks; a Redis without it still gets every other reason.
  static const std::vector<std::string> s(redis_uprobe_symbols().begin(), redis_uprobe_symbols().end() - 1);
  return s;
}

std::vector<std::string> missing_symbols(const std::string& elf_path, const std::vector<std::string>& symbols) {
  std::set<std::string> want(symbols.begin(), symbols.end());
  elf_version(EV_CURRENT);
  const int fd = ::open(elf_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return symbols;
  FdCloser closer{fd};
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  if (!elf) return symbols;
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr && !want.empty()) {
    GElf_Shdr shdr;
    if (!gelf_getshdr(scn, &shdr) || (shdr.sh_type != SHT_SYMTAB && shdr.sh_type != SHT_DYNSYM)) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data || shdr.sh_entsize == 0) continue;
    const size_t n = shdr.sh_size / shdr.sh_entsize;
    for (size_t i = 0; i < n; ++i) {
      GElf_Sym sym;
      if (!gelf_getsym(data, static_cast<int>(i), &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
          sym.st_value == 0)
        continue;
      if (const char* name = elf_strptr(elf, shdr.sh_link, sym.st_name)) want.erase(name);
    }
  }
  elf_end(elf);
  std::vector<std::string> missing;
  for (const auto& s : symbols)
    if (want.count(s)) missing.push_back(s);
  return missing;
}

ProbeReport choose_modes(bool force_fallback, const std::string& redis_exe) {
  FeatureProbe fp;
  ProbeReport r;
  r.forced_fallback = force_fallback;
  r.kernel_release = proc::read_system_info().kernel_release;
  r.btf = fp.vmlinux_btf();
  // The minimum kernel: CO-RE needs the kernel's BTF (CONFIG_DEBUG_INFO_BTF, 5.4+), and every event
  // travels through a BPF ring buffer (5.8, commit 457f44363a88); the rest (tp_btf and mmapable
  // arrays, 5.5) is older than that.
  if (!r.btf)
    r.unsupported = "the kernel has no BTF (/sys/kernel/btf/vmlinux is missing): thptrace needs Linux 5.8 or later "
                    "built with CONFIG_DEBUG_INFO_BTF=y";
  else if (fp.ringbuf() == 0)
    r.unsupported = "the kernel has no BPF ring buffer (BPF_MAP_TYPE_RINGBUF): thptrace needs Linux 5.8 or later";
  r.bpf_atomics = fp.bpf_atomics();

  // A kernel family: tp_btf when its tracepoints all load, else raw_tp, else unavailable.
  auto tracepoint_family = [&](const std::vector<std::string>& tps) {
    FamilyChoice c;
    if (!force_fallback && r.btf) {
      bool ok = true;
      for (const auto& tp : tps) ok = ok && fp.tp_btf(tp);
      if (ok) return FamilyChoice{Mode::tp_btf, "tp_btf loads and attaches"};
      c.why = fp.last_failure() + "; ";
    } else if (force_fallback) {
      c.why = "fallback forced; ";
    } else {
      c.why = "no kernel BTF; ";
    }
    bool ok = true;
    for (const auto& tp : tps) ok = ok && fp.raw_tp(tp);
    if (ok) return FamilyChoice{Mode::raw_tp, c.why + "raw_tp works"};
    return FamilyChoice{Mode::unavailable, c.why + fp.last_failure()};
  };

  r.fork = tracepoint_family({"sched_process_fork", "sched_process_exit", "sys_enter", "sys_exit"});
  if (r.fork.mode != Mode::unavailable && !r.bpf_atomics)
    r.fork.why += "; no BPF compare-and-exchange (Linux 5.12): the *_compat fork and exit programs, whose "
                  "episode slots are claimed without it";
  r.thp = tracepoint_family({"mm_khugepaged_scan_pmd", "mm_collapse_huge_page"});
  r.stall = tracepoint_family({"mm_compaction_begin", "mm_compaction_end", "mm_vmscan_direct_reclaim_begin",
                               "mm_vmscan_direct_reclaim_end"});
  if (!force_fallback && r.btf && fp.fentry("do_wp_page") && fp.fentry("do_huge_pmd_wp_page")) {
    r.cow_fault = {Mode::fentry, "fentry/fexit on do_wp_page and do_huge_pmd_wp_page load"};
  } else {
    const std::string why = force_fallback ? std::string("fallback forced") : fp.last_failure();
    r.cow_fault = tracepoint_family({"page_fault_user", "mm_page_alloc"});
    r.cow_fault.why = why + "; page_fault_user: " + r.cow_fault.why;
  }

  if (redis_exe.empty()) {
    r.redis = {Mode::unavailable, "no redis-server process watched"};
  } else if (force_fallback) {
    r.redis = {Mode::info_polling, "fallback forced: fork reasons from INFO"};
  } else if (const auto missing = missing_symbols(redis_exe, redis_required_symbols()); !missing.empty()) {
    r.redis = {Mode::info_polling, redis_exe + " does not export " + missing.front() + " (LTO build?): fork reasons from INFO"};
  } else {
    r.redis = {Mode::uprobe, redis_exe + " exports the fork entry points"};
  }
  return r;
}

}  // namespace thptrace::tracer
