// SPDX-License-Identifier: Apache-2.0
#pragma once
// The probe families and their attach modes: one table of names, hooks and fallback chains. Every
// place that lists the families (the loader, the report, the recorded inputs, the metrics, `thptrace
// probe`) walks kFamilies, so a new family is one row here, its programs in the loader's table
// (tracer/loader.cpp) and its BPF file. Here, not in tracer/, so that what only names families and
// modes (the report) needs no libbpf; in the tracer's namespace, whose vocabulary it is.

#include <array>
#include <string_view>

namespace thptrace::tracer {

enum class Mode { fentry, tp_btf, raw_tp, uprobe, info_polling, unavailable };
constexpr const char* mode_name(Mode m) {
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

enum class Family { fork, cow_fault, thp, stall, redis, kernel_copies, disk, sched };

struct FamilyInfo {
  Family family;
  const char* name;   // in reports, metrics (family label) and `thptrace probe`
  const char* hooks;  // what its programs attach to, for `thptrace probe` and docs
  // The modes it may take, best first; a family the kernel refuses moves to the next one.
  std::array<Mode, 3> chain;
};

// In the order every listing uses.
inline constexpr std::array<FamilyInfo, 8> kFamilies = {{
    {Family::fork,
     "fork",
     "sched_process_fork/exit; sys_enter/exit for clone timing; a uprobe pair on libc fork()",
     {Mode::tp_btf, Mode::raw_tp, Mode::unavailable}},
    {Family::cow_fault,
     "cow_fault",
     "fentry/fexit do_wp_page and do_huge_pmd_wp_page, else page_fault_user",
     {Mode::fentry, Mode::tp_btf, Mode::raw_tp}},
    {Family::thp,
     "thp",
     "mm_khugepaged_scan_pmd, mm_collapse_huge_page",
     {Mode::tp_btf, Mode::raw_tp, Mode::unavailable}},
    {Family::stall,
     "stall",
     "mm_compaction_begin/end, mm_vmscan_direct_reclaim_begin/end",
     {Mode::tp_btf, Mode::raw_tp, Mode::unavailable}},
    {Family::redis,
     "redis",
     "uprobes on the server's fork entry points, else INFO polling",
     {Mode::uprobe, Mode::info_polling, Mode::unavailable}},
    {Family::kernel_copies,
     "kernel_copies",
     "do_wp_page under fentry, else page_fault_kernel",
     {Mode::fentry, Mode::tp_btf, Mode::raw_tp}},
    {Family::disk,
     "disk",
     "fentry/fexit on the fsync, fdatasync, sync_file_range and write system calls, else sys_enter/sys_exit",
     {Mode::fentry, Mode::tp_btf, Mode::raw_tp}},
    {Family::sched,
     "sched",
     "sched_switch, sched_wakeup: what held the CPU while the main thread waited for one",
     {Mode::tp_btf, Mode::raw_tp, Mode::unavailable}},
}};

constexpr const FamilyInfo& family_info(Family f) {
  for (const auto& i : kFamilies)
    if (i.family == f) return i;
  return kFamilies[0];
}

// A family that recordings and reports from before it existed lack: read as unavailable, as it was.
constexpr bool family_is_optional(Family f) {
  return f == Family::kernel_copies || f == Family::disk || f == Family::sched;
}

// The mode after m in f's chain: where f goes when the kernel refuses its programs in mode m.
constexpr Mode next_mode(Family f, Mode m) {
  const auto& chain = family_info(f).chain;
  for (size_t i = 0; i + 1 < chain.size(); i++)
    if (chain[i] == m) return chain[i + 1];
  return Mode::unavailable;
}

}  // namespace thptrace::tracer
