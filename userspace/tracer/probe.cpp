// SPDX-License-Identifier: Apache-2.0
#include "tracer/probe.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>

#include "common/btf.h"
#include "kernel/abi.h"
#include "proc/proc.h"
#include "tracer/entry_points.h"

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

struct BtfFree {
  void operator()(btf* b) const { btf__free(b); }
};

// The kernel's BTF, parsed on first use (several MiB of heap). Only choosing the modes needs it:
// choose_modes() lets it go, so that a daemon does not hold it for months.
std::unique_ptr<btf, BtfFree>& vmlinux_slot() {
  static std::unique_ptr<btf, BtfFree> b;
  return b;
}

const btf* vmlinux() {
  auto& b = vmlinux_slot();
  if (!b) {
    btf* loaded = btf__load_vmlinux_btf();
    if (!libbpf_get_error(loaded)) b.reset(loaded);
  }
  return b.get();
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

// x86 reports a fault taken in kernel mode (copy_to_user into a page shared after fork) on
// page_fault_kernel, not page_fault_user (arch/x86/mm/fault.c, trace_page_fault_entries, 3.13+).
FamilyChoice kernel_copies_choice(FeatureProbe& fp, const AttachModes& r) {
  const char* lost = ": write faults the kernel takes in read()/recv() into a buffer shared with a fork child are not counted";
  switch (r.cow_fault.mode) {
    case Mode::fentry: return {Mode::fentry, "do_wp_page sees the kernel's own write faults with the rest"};
    case Mode::tp_btf:
      if (fp.tp_btf("page_fault_kernel")) return {Mode::tp_btf, "tp_btf/page_fault_kernel loads and attaches"};
      [[fallthrough]];
    case Mode::raw_tp: {
      const std::string why = r.cow_fault.mode == Mode::tp_btf ? fp.last_failure() + "; " : "";
      if (fp.raw_tp("page_fault_kernel")) return {Mode::raw_tp, why + "raw_tp/page_fault_kernel works"};
      return {Mode::unavailable, why + fp.last_failure() + lost};
    }
    default: return {Mode::unavailable, std::string("the cow_fault family is unavailable") + lost};
  }
}

}  // namespace

bool FeatureProbe::vmlinux_btf() { return vmlinux_btf_present() && vmlinux(); }

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

bool FeatureProbe::task_storage() {
  const int r = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, nullptr);
  if (r != 1)
    last_failure_ = r == 0 ? "no BPF task storage (Linux 5.11)" : "BPF task storage probe failed: " + errno_text(r);
  return r == 1;
}

int FeatureProbe::ringbuf() { return libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, nullptr); }

namespace {

// A kernel family: tp_btf when its tracepoints all load, else raw_tp, else unavailable.
FamilyChoice tracepoint_family(FeatureProbe& fp, bool force_fallback, bool btf, const std::vector<std::string>& tps) {
  std::string why;
  if (!force_fallback && btf) {
    bool ok = true;
    for (const auto& tp : tps) ok = ok && fp.tp_btf(tp);
    if (ok) return FamilyChoice{Mode::tp_btf, "tp_btf loads and attaches"};
    why = fp.last_failure() + "; ";
  } else if (force_fallback) {
    why = "fallback forced; ";
  } else {
    why = "no kernel BTF; ";
  }
  bool ok = true;
  for (const auto& tp : tps) ok = ok && fp.raw_tp(tp);
  if (ok) return FamilyChoice{Mode::raw_tp, why + "raw_tp works"};
  return FamilyChoice{Mode::unavailable, why + fp.last_failure()};
}

// The disk family: the four system calls' entry points where fentry loads (only these calls run
// the programs, not every system call of the machine: bpf/disk.bpf.c says why not the VFS's); else
// sys_enter/sys_exit, only when asked for (--disk on).
FamilyChoice disk_choice(FeatureProbe& fp, bool force_fallback, bool btf, DiskTracing disk) {
  if (disk == DiskTracing::off) return {Mode::unavailable, "off (--disk off)"};
  const std::string sys = THPTRACE_SYSCALL_WRAPPER_PREFIX;
  if (!force_fallback && btf && fp.fentry(sys + "fsync") && fp.fentry(sys + "fdatasync") &&
      fp.fentry(sys + "sync_file_range") && fp.fentry(sys + "write"))
    return {Mode::fentry, "fentry/fexit on the fsync, fdatasync, sync_file_range and write system calls load"};
  const std::string why = force_fallback ? std::string("fallback forced") : fp.last_failure();
  if (disk == DiskTracing::on) {
    FamilyChoice c = tracepoint_family(fp, force_fallback, btf, {"sys_enter", "sys_exit"});
    c.why = why + "; sys_enter/sys_exit: " + c.why;
    return c;
  }
  return {Mode::unavailable, why +
                                 "; off: its fallback, sys_enter/sys_exit, slows every system call of the host while "
                                 "attached (--disk on takes it)"};
}

// The COW fault family: fentry/fexit on the wp handlers where they load, else the page-fault
// tracepoint.
FamilyChoice cow_fault_choice(FeatureProbe& fp, bool force_fallback, bool btf, bool task_storage) {
  const std::string starts =
      task_storage ? "fault start times in task storage" : fp.last_failure() + ": fault start times in a hash map";
  if (!force_fallback && btf && fp.fentry("do_wp_page") && fp.fentry("do_huge_pmd_wp_page"))
    return {Mode::fentry, "fentry/fexit on do_wp_page and do_huge_pmd_wp_page load; " + starts};
  const std::string why = force_fallback ? std::string("fallback forced") : fp.last_failure();
  FamilyChoice c = tracepoint_family(fp, force_fallback, btf, {"page_fault_user", "mm_page_alloc"});
  c.why = why + "; page_fault_user: " + c.why;
  return c;
}

// The Redis family: uprobes on the fork entry points its binary gives, else INFO polling.
FamilyChoice redis_choice(bool force_fallback, const RedisScope& redis) {
  if (!redis.per_process && redis.exe.empty()) return {Mode::unavailable, "no redis-server process watched"};
  if (force_fallback) return {Mode::info_polling, "fallback forced: fork reasons from INFO"};
  if (redis.per_process) return {Mode::uprobe, "per process: the fork entry points its binary gives"};
  // Each entry point on its own: a missing one costs the labels that need it (entry_points.h).
  const auto entry_points = find_entry_points(redis.exe);
  return {entry_points.anchors() ? Mode::uprobe : Mode::info_polling, redis.exe + ": " + describe(entry_points)};
}

}  // namespace

AttachModes choose_modes(bool force_fallback, const RedisScope& redis, DiskTracing disk) {
  FeatureProbe fp;
  AttachModes r;
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
  r.fork = tracepoint_family(fp, force_fallback, r.btf,
                             {"sched_process_fork", "sched_process_exit", "sys_enter", "sys_exit"});
  if (r.fork.mode != Mode::unavailable && !r.bpf_atomics)
    r.fork.why += "; no BPF compare-and-exchange (Linux 5.12): the *_compat fork and exit programs, whose "
                  "episode slots are claimed without it";
  r.thp = tracepoint_family(fp, force_fallback, r.btf, {"mm_khugepaged_scan_pmd", "mm_collapse_huge_page"});
  r.stall = tracepoint_family(
      fp, force_fallback, r.btf,
      {"mm_compaction_begin", "mm_compaction_end", "mm_vmscan_direct_reclaim_begin", "mm_vmscan_direct_reclaim_end"});
  r.sched = tracepoint_family(fp, force_fallback, r.btf, {"sched_switch", "sched_wakeup"});
  r.disk_tracepoints = disk == DiskTracing::on;
  r.disk = disk_choice(fp, force_fallback, r.btf, disk);
  r.task_storage = fp.task_storage();
  r.cow_fault = cow_fault_choice(fp, force_fallback, r.btf, r.task_storage);
  r.kernel_copies = kernel_copies_choice(fp, r);
  r.redis = redis_choice(force_fallback, redis);
  vmlinux_slot().reset();  // the checks' results stay memoised; a later new check parses it again
  return r;
}

}  // namespace thptrace::tracer
