// SPDX-License-Identifier: Apache-2.0
#pragma once
// Readers and parsers for the /proc and /sys files thptrace samples. Parsers take the file's text so
// they can be unit-tested and fuzzed without a running system; readers wrap them.

#include <sys/types.h>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace thptrace::proc {

// /proc/PID/status, the fields thptrace uses.
struct ProcessStatus {
  std::string name;
  pid_t tgid = 0;
  pid_t ppid = 0;
  uint64_t vm_rss_kb = 0;
  uint64_t vm_pte_kb = 0;  // the page tables a fork copies
  // "THP_enabled:" is 0 when the process opted out with prctl(PR_SET_THP_DISABLE) (Redis
  // disable-thp yes does that when the system mode is always). Absent before Linux 5.0.
  std::optional<bool> thp_enabled;
  // "State: Z (zombie)" or "X (dead)": the process has exited and waits for its parent to reap it.
  bool exited = false;
};

// /proc/PID/smaps_rollup, sizes in kB.
struct SmapsRollup {
  uint64_t rss_kb = 0;
  uint64_t anonymous_kb = 0;
  uint64_t anon_huge_pages_kb = 0;
};

// /sys/kernel/mm/transparent_hugepage/{enabled,defrag} and the kernel release.
struct SystemInfo {
  std::string kernel_release;
  std::string thp_enabled;  // always | madvise | never, or "" when THP is not built in
  std::string thp_defrag;
  // Each anonymous folio size's mode, by size in kB (Linux 6.8+, hugepages-<N>kB/enabled): always,
  // inherit (thp_enabled's), madvise or never. The largest is the PMD's, the one AnonHugePages
  // counts. Empty where the kernel knows one huge-page size only. Read by read_folio_modes(), not by
  // read_system_info(), which the daemon calls every second and which has no use for them.
  std::map<uint32_t, std::string> folio_modes;

  // A size's mode, inherit resolved.
  std::string folio_mode(uint32_t kb) const;
  // The sizes below the PMD's that are not `never` ("64 KiB (always)", ...): folios that can back
  // anonymous memory and that AnonHugePages does not count. "" when none.
  std::string small_folios_enabled() const;
};

std::optional<ProcessStatus> parse_status(std::string_view text);
std::optional<SmapsRollup> parse_smaps_rollup(std::string_view text);
// /proc/PID/statm's resident field ("size resident shared ..." in pages), in kB: VmRSS, read from the
// mm's counters without walking its page tables as smaps_rollup does.
std::optional<uint64_t> parse_statm_rss_kb(std::string_view text, uint64_t page_size);
// A thread's scheduler clocks, /proc/PID/task/TID/schedstat ("on-CPU-ns run-queue-ns timeslices"):
// the time it ran, and the time it was runnable but waited for a CPU, since it started.
struct SchedStat {
  uint64_t on_cpu_ns = 0, runqueue_ns = 0;
};
// What the clocks grew by from `earlier` to `later`; nullopt when either went back (another thread's,
// or a reused tid's, were read).
inline std::optional<SchedStat> sched_growth(const SchedStat& earlier, const SchedStat& later) {
  if (later.on_cpu_ns < earlier.on_cpu_ns || later.runqueue_ns < earlier.runqueue_ns) return std::nullopt;
  return SchedStat{later.on_cpu_ns - earlier.on_cpu_ns, later.runqueue_ns - earlier.runqueue_ns};
}
std::optional<SchedStat> parse_schedstat(std::string_view text);
// All "name value" lines of /proc/vmstat; malformed lines are skipped.
std::map<std::string, uint64_t> parse_vmstat(std::string_view text);
// "always [madvise] never" -> "madvise"; "" when no bracketed word is present.
std::string parse_bracketed_mode(std::string_view text);

// Whether a mapping in /proc/PID/smaps text was madvise(MADV_HUGEPAGE)d: "hg" among the flags of
// a "VmFlags:" line.
bool parse_smaps_hugepage_advice(std::string_view smaps);

// Could the process be given a transparent huge page at fault time, under the system THP mode
// `system_mode` (always | madvise | never | "")? `why` is one clause saying which fact decided.
struct HugePageEligibility {
  bool eligible = false;
  std::string why;
};
HugePageEligibility huge_page_eligibility(pid_t pid, const std::string& system_mode);

// Reads a whole (small) file; nullopt when it cannot be opened. Reads at most max_bytes.
std::optional<std::string> read_file(const std::string& path, size_t max_bytes = 1 << 20);

// The pids of the processes /proc lists now (of its PID namespace).
std::vector<pid_t> pids();
// A process that has not exited (a zombie its parent has not reaped has exited).
bool process_exists(pid_t pid);
std::optional<ProcessStatus> read_status(pid_t pid);
std::optional<SmapsRollup> read_smaps_rollup(pid_t pid);
std::optional<uint64_t> read_statm_rss_kb(pid_t pid);
// The scheduler clocks of thread `tid` of process `pid` (its main thread: tid == pid).
std::optional<SchedStat> read_schedstat(pid_t pid, pid_t tid);
std::map<std::string, uint64_t> read_vmstat();
SystemInfo read_system_info();
// The target of /proc/PID/exe, or "" when it cannot be read.
std::string exe_path(pid_t pid);

inline constexpr const char* kThpEnabledPath = "/sys/kernel/mm/transparent_hugepage/enabled";
inline constexpr const char* kThpDefragPath = "/sys/kernel/mm/transparent_hugepage/defrag";
inline constexpr const char* kThpDir = "/sys/kernel/mm/transparent_hugepage";
// The counters of each anonymous folio size (Linux 6.8+, hugepages-<N>kB/stats/: kFolioCounters,
// those the kernel has), by size in kB; empty where the kernel has none. System-wide, as /proc/vmstat.
using FolioCounters = std::map<uint32_t, std::map<std::string, uint64_t>>;
// anon_fault_alloc (folios of the size allocated at a fault), anon_fault_fallback (a fault that
// wanted one and fell back to a smaller size), split, split_deferred (queued to be split once
// partially unmapped), split_failed, nr_anon (a gauge: anonymous folios of the size now, 6.13+),
// nr_anon_partially_mapped (a gauge) and swpout.
inline constexpr const char* kFolioCounters[] = {
    "anon_fault_alloc", "anon_fault_fallback",      "split", "split_deferred", "split_failed",
    "nr_anon",          "nr_anon_partially_mapped", "swpout"};
// Whether a folio counter is a gauge (its delta may be negative), not an event count.
inline bool folio_counter_is_gauge(const std::string& name) { return name.rfind("nr_", 0) == 0; }
FolioCounters read_folio_counters(const std::string& thp_dir = kThpDir);
// The modes of hugepages-<N>kB/enabled under thp_dir, by N; empty when there are none.
std::map<uint32_t, std::string> read_folio_modes(const std::string& thp_dir = kThpDir);

}  // namespace thptrace::proc
