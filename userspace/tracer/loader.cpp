// SPDX-License-Identifier: Apache-2.0
#include "tracer/loader.h"

#include <bpf/libbpf.h>
#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "common/btf.h"
#include "common/error.h"
#include "common/log.h"
#include "thptrace_bpf.skel.h"

namespace thptrace::tracer {
namespace {

int libbpf_print(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (!log::verbose() || level == LIBBPF_DEBUG) return 0;
  return vfprintf(stderr, fmt, args);
}

// Which build of a program: fork.bpf.c's fork and exit programs use BPF compare-and-exchange (5.12)
// and have *_compat twins without it (fork_compat.bpf.c); the fentry COW programs keep a fault's start
// in task storage (tracing programs: 5.13) and have *_compat twins that keep it in a hash map; every
// other program is one build.
enum class Build { any, atomics, compat, task_storage, no_task_storage };

bool built_for(Build b, const AttachModes& modes) {
  switch (b) {
    case Build::atomics: return modes.bpf_atomics;
    case Build::compat: return !modes.bpf_atomics;
    case Build::task_storage: return modes.task_storage;
    case Build::no_task_storage: return !modes.task_storage;
    case Build::any: break;
  }
  return true;
}

// Programs by family and mode. A program's twin in another mode or build is never loaded.
struct ProgramSet {
  bpf_program* prog;
  Family family;
  Mode mode;
  Build build = Build::any;
};

std::vector<ProgramSet> program_table(::thptrace_bpf* s) {
  auto& p = s->progs;
  using F = Family;
  return {
      {p.fork_btf, F::fork, Mode::tp_btf, Build::atomics},
      {p.fork_raw, F::fork, Mode::raw_tp, Build::atomics},
      {p.exit_btf, F::fork, Mode::tp_btf, Build::atomics},
      {p.exit_raw, F::fork, Mode::raw_tp, Build::atomics},
      {p.fork_btf_compat, F::fork, Mode::tp_btf, Build::compat},
      {p.fork_raw_compat, F::fork, Mode::raw_tp, Build::compat},
      {p.exit_btf_compat, F::fork, Mode::tp_btf, Build::compat},
      {p.exit_raw_compat, F::fork, Mode::raw_tp, Build::compat},
      {p.sys_enter_btf, F::fork, Mode::tp_btf},
      {p.sys_enter_raw, F::fork, Mode::raw_tp},
      {p.sys_exit_btf, F::fork, Mode::tp_btf},
      {p.sys_exit_raw, F::fork, Mode::raw_tp},
      {p.wp_fentry, F::cow_fault, Mode::fentry, Build::task_storage},
      {p.wp_fexit, F::cow_fault, Mode::fentry, Build::task_storage},
      {p.huge_wp_fentry, F::cow_fault, Mode::fentry, Build::task_storage},
      {p.huge_wp_fexit, F::cow_fault, Mode::fentry, Build::task_storage},
      {p.wp_fentry_compat, F::cow_fault, Mode::fentry, Build::no_task_storage},
      {p.wp_fexit_compat, F::cow_fault, Mode::fentry, Build::no_task_storage},
      {p.huge_wp_fentry_compat, F::cow_fault, Mode::fentry, Build::no_task_storage},
      {p.huge_wp_fexit_compat, F::cow_fault, Mode::fentry, Build::no_task_storage},
      {p.fault_btf, F::cow_fault, Mode::tp_btf},
      {p.fault_raw, F::cow_fault, Mode::raw_tp},
      {p.kfault_btf, F::kernel_copies, Mode::tp_btf},
      {p.kfault_raw, F::kernel_copies, Mode::raw_tp},
      {p.khugepaged_scan_btf, F::thp, Mode::tp_btf},
      {p.khugepaged_scan_raw, F::thp, Mode::raw_tp},
      {p.collapse_btf, F::thp, Mode::tp_btf},
      {p.collapse_raw, F::thp, Mode::raw_tp},
      {p.compaction_begin_btf, F::stall, Mode::tp_btf},
      {p.compaction_begin_raw, F::stall, Mode::raw_tp},
      {p.compaction_end_btf, F::stall, Mode::tp_btf},
      {p.compaction_end_raw, F::stall, Mode::raw_tp},
      {p.reclaim_begin_btf, F::stall, Mode::tp_btf},
      {p.reclaim_begin_raw, F::stall, Mode::raw_tp},
      {p.reclaim_end_btf, F::stall, Mode::tp_btf},
      {p.reclaim_end_raw, F::stall, Mode::raw_tp},
      {p.rdb_bgsave_enter, F::redis, Mode::uprobe},
      {p.rdb_bgsave_exit, F::redis, Mode::uprobe},
      {p.rdb_sockets_enter, F::redis, Mode::uprobe},
      {p.rdb_sockets_exit, F::redis, Mode::uprobe},
      {p.aof_rewrite_enter, F::redis, Mode::uprobe},
      {p.aof_rewrite_exit, F::redis, Mode::uprobe},
      {p.repl_bgsave_enter, F::redis, Mode::uprobe},
      {p.repl_bgsave_exit, F::redis, Mode::uprobe},
      {p.redis_fork_enter, F::redis, Mode::uprobe},
      {p.redis_fork_exit, F::redis, Mode::uprobe},
      {p.disk_enter_btf, F::disk, Mode::tp_btf},
      {p.disk_enter_raw, F::disk, Mode::raw_tp},
      {p.disk_exit_btf, F::disk, Mode::tp_btf},
      {p.disk_exit_raw, F::disk, Mode::raw_tp},
      {p.disk_fsync_fentry, F::disk, Mode::fentry},
      {p.disk_fsync_fexit, F::disk, Mode::fentry},
      {p.disk_fdatasync_fentry, F::disk, Mode::fentry},
      {p.disk_fdatasync_fexit, F::disk, Mode::fentry},
      {p.disk_range_fentry, F::disk, Mode::fentry},
      {p.disk_range_fexit, F::disk, Mode::fentry},
      {p.disk_write_fentry, F::disk, Mode::fentry},
      {p.disk_write_fexit, F::disk, Mode::fentry},
      {p.switch_btf, F::sched, Mode::tp_btf},
      {p.switch_raw, F::sched, Mode::raw_tp},
      {p.wakeup_btf, F::sched, Mode::tp_btf},
      {p.wakeup_raw, F::sched, Mode::raw_tp},
  };
}

// Huge-page allocation counting rides with the COW family but has no fentry twin: in fentry mode it
// uses the tp_btf program when tp_btf works, else raw_tp.
bool want_page_alloc(Mode cow, Mode twin, bool tp_btf_ok) {
  if (cow == Mode::fentry) return twin == (tp_btf_ok ? Mode::tp_btf : Mode::raw_tp);
  return twin == cow;
}

// Marks for loading the programs of `modes` (only those of `only` when it is set: the libc
// fork-timing pair, which every mode has, loads only with the whole object). Returns the huge-page
// allocation program chosen, or nullptr.
bpf_program* select_programs(::thptrace_bpf* s, const AttachModes& modes, std::optional<Family> only) {
  const auto in = [only](Family f) { return !only || *only == f; };
  for (const auto& [prog, family, mode, b] : program_table(s))
    bpf_program__set_autoload(prog, in(family) && modes.at(family).mode == mode && built_for(b, modes));
  // A kernel before 5.11 refuses to create a task storage map, which only the fentry programs use.
  bpf_map__set_autocreate(s->maps.wp_starts, modes.cow_fault.mode == Mode::fentry && modes.task_storage);
  const bool cow = in(Family::cow_fault) && modes.cow_fault.mode != Mode::unavailable;
  const bool alloc_btf = want_page_alloc(modes.cow_fault.mode, Mode::tp_btf, modes.fork.mode == Mode::tp_btf);
  bpf_program__set_autoload(s->progs.page_alloc_btf, cow && alloc_btf);
  bpf_program__set_autoload(s->progs.page_alloc_raw, cow && !alloc_btf);
  // libc fork timing is a uprobe pair in every mode (uprobes do not depend on the kernel's BTF or
  // tracing attach types); where it cannot attach, fork duration is the clone syscall's.
  bpf_program__set_autoload(s->progs.libc_fork_enter, !only);
  bpf_program__set_autoload(s->progs.libc_fork_exit, !only);
  if (!cow) return nullptr;
  return alloc_btf ? s->progs.page_alloc_btf : s->progs.page_alloc_raw;
}

// Opens the object and loads the programs of `modes` (only `only`'s when set). Returns the
// skeleton, or a negative errno in *err.
SkelPtr open_and_load(const AttachModes& modes, std::optional<Family> only, const TracerOptions& sizes,
                      CounterShape shape, bpf_program** alloc, int* err) {
  SkelPtr skel(thptrace_bpf__open());
  if (!skel) throw FatalError(kExitRuntime, std::string("cannot open the BPF object: ") + std::strerror(errno));
  *alloc = select_programs(skel.get(), modes, only);
  bpf_map__set_max_entries(skel->maps.events, static_cast<__u32>(sizes.ringbuf_bytes));
  bpf_map__set_max_entries(skel->maps.targets, std::max<uint32_t>(sizes.max_targets, 1));
  // One entry per watched Redis process, so it fills no sooner than the targets map.
  bpf_map__set_max_entries(skel->maps.redis_anchors, std::max<uint32_t>(sizes.max_targets, 1));
  bpf_map__set_max_entries(skel->maps.episodes, std::max<uint32_t>(sizes.max_episodes, 1));
  // Per-CPU fault counters: a region per CPU, an entry per line owner (at most one per target).
  skel->rodata->pcpu_regions = shape.regions;
  skel->rodata->pcpu_slots = shape.slots;
  bpf_map__set_max_entries(skel->maps.pcpu, shape.regions * shape.slots);
  // Off, the samples ring is never written: its smallest size.
  skel->rodata->sample_every = sizes.sample_every;
  skel->rodata->dwarf_stacks = sizes.sample_every && sizes.dwarf_stacks;
  const size_t samples_bytes = !sizes.sample_every  ? 4096
                               : sizes.dwarf_stacks ? std::max<size_t>(sizes.sample_ringbuf_bytes, 8 << 20)
                                                    : sizes.sample_ringbuf_bytes;
  bpf_map__set_max_entries(skel->maps.samples, static_cast<__u32>(samples_bytes));
  skel->rodata->sample_wakeup_bytes = samples_bytes / 2;
  *err = thptrace_bpf__load(skel.get());
  if (*err > 0) *err = -*err;
  if (*err) skel.reset();
  return skel;
}

size_t power_of_two_at_least(size_t bytes) {
  size_t n = 4096;
  while (n < bytes) n <<= 1;
  return n;
}

// Loads each family alone and moves one the kernel refuses down its chain. Returns whether any moved.
bool move_refused_families(AttachModes& modes, const TracerOptions& sizes, CounterShape shape) {
  bool moved = false;
  bpf_program* unused = nullptr;
  for (const auto& info : kFamilies) {
    FamilyChoice& c = modes.at(info.family);
    if (c.mode == Mode::unavailable || c.mode == Mode::info_polling) continue;
    int ferr = 0;
    open_and_load(modes, info.family, sizes, shape, &unused, &ferr);
    if (ferr == 0) continue;
    // Task storage exists (5.11) but tracing programs may not use it (before 5.13): the fentry
    // programs' *_compat build keeps the start times in a hash map instead.
    if (c.mode == Mode::fentry && info.family == Family::cow_fault && modes.task_storage) {
      modes.task_storage = false;
      int cerr = 0;
      open_and_load(modes, info.family, sizes, shape, &unused, &cerr);
      if (cerr == 0) {
        c.why += fmt::format("; the task storage build was refused ({}): fault start times in a hash map",
                             std::strerror(-ferr));
        moved = true;
        continue;
      }
      modes.task_storage = true;
    }
    // Without --disk on the disk family does not take the tracepoints, which slow every system call.
    const Mode next =
        info.family == Family::disk && !modes.disk_tracepoints ? Mode::unavailable : next_mode(info.family, c.mode);
    log::warn("the kernel refuses the {} family's {} programs ({}); it takes {} (--verbose shows the verifier log)",
              info.name, mode_name(c.mode), std::strerror(-ferr), mode_name(next));
    c.why = fmt::format("{}; the real {} programs were refused ({}): {}", c.why, mode_name(c.mode),
                        std::strerror(-ferr), mode_name(next));
    c.mode = next;
    moved = true;
  }
  // Under fentry do_wp_page counts the kernel's own write faults; a COW family moved down to a
  // tracepoint needs page_fault_kernel in the same mode for them.
  if (modes.kernel_copies.mode == Mode::fentry && modes.cow_fault.mode != Mode::fentry)
    modes.kernel_copies = {modes.cow_fault.mode, "follows the cow_fault family, moved down from fentry"};
  return moved;
}

}  // namespace

void SkelDeleter::operator()(::thptrace_bpf* s) const { thptrace_bpf__destroy(s); }

std::array<bpf_program*, 4> clone_syscall_programs(const ::thptrace_bpf* s) {
  const auto& p = s->progs;
  return {p.sys_enter_btf, p.sys_enter_raw, p.sys_exit_btf, p.sys_exit_raw};
}

std::array<bpf_program*, 4> sched_programs(const ::thptrace_bpf* s) {
  const auto& p = s->progs;
  return {p.switch_btf, p.switch_raw, p.wakeup_btf, p.wakeup_raw};
}

LoadedObject load_object(const AttachModes& requested, const TracerOptions& options, CounterShape shape) {
  libbpf_set_print(libbpf_print);
  if (!requested.unsupported.empty()) throw FatalError(kExitRuntime, requested.unsupported + ".");
  if (!requested.btf && requested.fork.mode == Mode::unavailable) throw RuntimeError(kNoBtfSentence);
  TracerOptions sizes = options;
  sizes.ringbuf_bytes = power_of_two_at_least(options.ringbuf_bytes);
  sizes.sample_ringbuf_bytes = power_of_two_at_least(options.sample_ringbuf_bytes);

  // The stand-in programs choose_modes() loads say which attach types the kernel has, not whether it
  // takes the real programs (5.10 has tp_btf yet refused the fork programs' compare-and-exchange).
  // So the real object is loaded, and when the kernel refuses it, each family is loaded alone and a
  // refused one moves down its chain until the whole object loads. Modes only move down, so this
  // ends; on a kernel that takes everything it is one load.
  LoadedObject out{.skel = nullptr, .modes = requested};
  AttachModes& modes = out.modes;
  for (;;) {
    if (modes.fork.mode == Mode::unavailable || modes.cow_fault.mode == Mode::unavailable)
      throw FatalError(kExitRuntime, "cannot load BPF programs (" +
                                         (modes.fork.mode == Mode::unavailable ? modes.fork.why : modes.cow_fault.why) +
                                         "): run as root or grant CAP_BPF and CAP_PERFMON");
    int err = 0;
    out.skel = open_and_load(modes, std::nullopt, sizes, shape, &out.huge_alloc_prog, &err);
    if (err == 0) return out;
    // EPERM too is looked at per family: a kernel can refuse one attach type with it (fentry on
    // some hosts) while taking the rest.
    const bool moved = move_refused_families(modes, sizes, shape);
    if (!moved && (err == -EPERM || err == -EACCES))
      throw FatalError(kExitRuntime,
                       "the kernel refused to load thptrace's BPF programs (permission denied): run as root or "
                       "grant CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE on kernels older than 5.11");
    if (!moved)
      throw FatalError(kExitRuntime, std::string("cannot load thptrace's BPF programs: ") + std::strerror(-err) +
                                         " (run with --verbose for the verifier log)");
  }
}

}  // namespace thptrace::tracer
