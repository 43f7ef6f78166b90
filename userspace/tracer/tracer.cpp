// SPDX-License-Identifier: Apache-2.0
#include "tracer/tracer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/core.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <map>
#include <system_error>
#include <thread>

#include "common/btf.h"
#include "common/error.h"
#include "common/log.h"
#include "proc/foreign_file.h"
#include "proc/maps.h"
#include "proc/proc.h"
#include "proc/sampler.h"
#include "thptrace_bpf.skel.h"
#include "tracer/entry_points.h"

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

bool built_for(Build b, const ProbeReport& modes) {
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
  const char* family;
  Mode mode;
  Build build = Build::any;
};

std::vector<ProgramSet> program_table(::thptrace_bpf* s) {
  auto& p = s->progs;
  return {
      {p.fork_btf, "fork", Mode::tp_btf, Build::atomics},
      {p.fork_raw, "fork", Mode::raw_tp, Build::atomics},
      {p.exit_btf, "fork", Mode::tp_btf, Build::atomics},
      {p.exit_raw, "fork", Mode::raw_tp, Build::atomics},
      {p.fork_btf_compat, "fork", Mode::tp_btf, Build::compat},
      {p.fork_raw_compat, "fork", Mode::raw_tp, Build::compat},
      {p.exit_btf_compat, "fork", Mode::tp_btf, Build::compat},
      {p.exit_raw_compat, "fork", Mode::raw_tp, Build::compat},
      {p.sys_enter_btf, "fork", Mode::tp_btf},
      {p.sys_enter_raw, "fork", Mode::raw_tp},
      {p.sys_exit_btf, "fork", Mode::tp_btf},
      {p.sys_exit_raw, "fork", Mode::raw_tp},
      {p.wp_fentry, "cow_fault", Mode::fentry, Build::task_storage},
      {p.wp_fexit, "cow_fault", Mode::fentry, Build::task_storage},
      {p.huge_wp_fentry, "cow_fault", Mode::fentry, Build::task_storage},
      {p.huge_wp_fexit, "cow_fault", Mode::fentry, Build::task_storage},
      {p.wp_fentry_compat, "cow_fault", Mode::fentry, Build::no_task_storage},
      {p.wp_fexit_compat, "cow_fault", Mode::fentry, Build::no_task_storage},
      {p.huge_wp_fentry_compat, "cow_fault", Mode::fentry, Build::no_task_storage},
      {p.huge_wp_fexit_compat, "cow_fault", Mode::fentry, Build::no_task_storage},
      {p.fault_btf, "cow_fault", Mode::tp_btf},
      {p.fault_raw, "cow_fault", Mode::raw_tp},
      {p.kfault_btf, "kernel_copies", Mode::tp_btf},
      {p.kfault_raw, "kernel_copies", Mode::raw_tp},
      {p.khugepaged_scan_btf, "thp", Mode::tp_btf},
      {p.khugepaged_scan_raw, "thp", Mode::raw_tp},
      {p.collapse_btf, "thp", Mode::tp_btf},
      {p.collapse_raw, "thp", Mode::raw_tp},
      {p.compaction_begin_btf, "stall", Mode::tp_btf},
      {p.compaction_begin_raw, "stall", Mode::raw_tp},
      {p.compaction_end_btf, "stall", Mode::tp_btf},
      {p.compaction_end_raw, "stall", Mode::raw_tp},
      {p.reclaim_begin_btf, "stall", Mode::tp_btf},
      {p.reclaim_begin_raw, "stall", Mode::raw_tp},
      {p.reclaim_end_btf, "stall", Mode::tp_btf},
      {p.reclaim_end_raw, "stall", Mode::raw_tp},
  };
}

std::vector<bpf_program*> redis_programs(::thptrace_bpf* s) {
  auto& p = s->progs;
  return {p.rdb_bgsave_enter,  p.rdb_bgsave_exit,  p.rdb_sockets_enter, p.rdb_sockets_exit, p.aof_rewrite_enter,
          p.aof_rewrite_exit,  p.repl_bgsave_enter, p.repl_bgsave_exit, p.redis_fork_enter, p.redis_fork_exit};
}

// Huge-page allocation counting rides with the COW family but has no fentry twin: in fentry mode it
// uses the tp_btf program when tp_btf works, else raw_tp.
bool want_page_alloc(Mode cow, Mode twin, bool tp_btf_ok) {
  if (cow == Mode::fentry) return twin == (tp_btf_ok ? Mode::tp_btf : Mode::raw_tp);
  return twin == cow;
}

FamilyChoice& family_choice(ProbeReport& r, const std::string& family) {
  if (family == "fork") return r.fork;
  if (family == "cow_fault") return r.cow_fault;
  if (family == "thp") return r.thp;
  if (family == "stall") return r.stall;
  if (family == "kernel_copies") return r.kernel_copies;
  return r.redis;
}

Mode family_mode(const ProbeReport& r, const std::string& family) {
  if (family == "fork") return r.fork.mode;
  if (family == "cow_fault") return r.cow_fault.mode;
  if (family == "thp") return r.thp.mode;
  if (family == "stall") return r.stall.mode;
  if (family == "kernel_copies") return r.kernel_copies.mode;
  return r.redis.mode;
}

// The next mode down a family's chain, for when the kernel refuses the real programs of `m`.
Mode next_mode(Mode m) {
  switch (m) {
    case Mode::fentry: return Mode::tp_btf;
    case Mode::tp_btf: return Mode::raw_tp;
    case Mode::uprobe: return Mode::info_polling;
    default: return Mode::unavailable;
  }
}

// Marks for loading the programs of `modes` (only those of `only_family` when it is set; "libc" names
// the libc fork-timing pair, which every mode loads). Returns the huge-page allocation program
// chosen, or nullptr.
bpf_program* select_programs(::thptrace_bpf* s, const ProbeReport& modes, const char* only_family) {
  const auto in = [only_family](const char* family) { return !only_family || std::strcmp(only_family, family) == 0; };
  for (const auto& [prog, family, mode, b] : program_table(s))
    bpf_program__set_autoload(prog, in(family) && family_mode(modes, family) == mode && built_for(b, modes));
  // A kernel before 5.11 refuses to create a task storage map, which only the fentry programs use.
  bpf_map__set_autocreate(s->maps.wp_starts, modes.cow_fault.mode == Mode::fentry && modes.task_storage);
  const bool cow = in("cow_fault") && modes.cow_fault.mode != Mode::unavailable;
  const bool alloc_btf = want_page_alloc(modes.cow_fault.mode, Mode::tp_btf, modes.fork.mode == Mode::tp_btf);
  bpf_program__set_autoload(s->progs.page_alloc_btf, cow && alloc_btf);
  bpf_program__set_autoload(s->progs.page_alloc_raw, cow && !alloc_btf);
  for (bpf_program* p : redis_programs(s)) bpf_program__set_autoload(p, in("redis") && modes.redis.mode == Mode::uprobe);
  // libc fork timing is a uprobe pair in every mode (uprobes do not depend on the kernel's BTF or
  // tracing attach types); where it cannot attach, fork duration is the clone syscall's.
  bpf_program__set_autoload(s->progs.libc_fork_enter, in("libc"));
  bpf_program__set_autoload(s->progs.libc_fork_exit, in("libc"));
  if (!cow) return nullptr;
  return alloc_btf ? s->progs.page_alloc_btf : s->progs.page_alloc_raw;
}

}  // namespace

void Tracer::SkelDeleter::operator()(::thptrace_bpf* s) const { thptrace_bpf__destroy(s); }
void Tracer::LinkDeleter::operator()(bpf_link* l) const { bpf_link__destroy(l); }
void Tracer::RingDeleter::operator()(ring_buffer* r) const { ring_buffer__free(r); }

// Opens the object and loads the programs of modes_ (only `only_family`'s when set). Returns 0 or a
// negative errno; on success with only_family unset the skeleton is kept.
int Tracer::load(const char* only_family, const TracerOptions& sizes) {
  std::unique_ptr<::thptrace_bpf, SkelDeleter> skel(thptrace_bpf__open());
  if (!skel) throw FatalError(kExitRuntime, std::string("cannot open the BPF object: ") + std::strerror(errno));
  bpf_program* alloc = select_programs(skel.get(), modes_, only_family);
  bpf_map__set_max_entries(skel->maps.events, static_cast<__u32>(sizes.ringbuf_bytes));
  bpf_map__set_max_entries(skel->maps.targets, std::max<uint32_t>(sizes.max_targets, 1));
  // One entry per watched Redis process, so it fills no sooner than the targets map.
  bpf_map__set_max_entries(skel->maps.redis_anchors, std::max<uint32_t>(sizes.max_targets, 1));
  bpf_map__set_max_entries(skel->maps.episodes, std::max<uint32_t>(sizes.max_episodes, 1));
  // Per-CPU fault counters: a region per CPU, an entry per line owner (at most one per target).
  skel->rodata->pcpu_regions = pcpu_regions_;
  skel->rodata->pcpu_slots = pcpu_slots_;
  bpf_map__set_max_entries(skel->maps.pcpu, pcpu_regions_ * pcpu_slots_);
  // Off, the samples ring is never written: its smallest size.
  skel->rodata->sample_every = sizes.sample_every;
  const size_t samples_bytes = sizes.sample_every ? sizes.sample_ringbuf_bytes : 4096;
  bpf_map__set_max_entries(skel->maps.samples, static_cast<__u32>(samples_bytes));
  skel->rodata->sample_wakeup_bytes = samples_bytes / 2;
  if (const int err = thptrace_bpf__load(skel.get()); err) return err < 0 ? err : -err;
  if (!only_family) {
    skel_ = std::move(skel);
    huge_alloc_prog_ = alloc;
  }
  return 0;
}

Tracer::Tracer(const ProbeReport& modes, const TracerOptions& options) : modes_(modes) {
  libbpf_set_print(libbpf_print);
  if (!modes.unsupported.empty()) throw FatalError(kExitRuntime, modes.unsupported + ".");
  if (!modes.btf && modes.fork.mode == Mode::unavailable) throw RuntimeError(kNoBtfSentence);
  size_t rb = 4096;
  while (rb < options.ringbuf_bytes) rb <<= 1;
  TracerOptions sizes = options;
  sizes.ringbuf_bytes = rb;
  size_t srb = 4096;
  while (srb < options.sample_ringbuf_bytes) srb <<= 1;
  sizes.sample_ringbuf_bytes = srb;
  sample_every_ = options.sample_every;
  const int ncpu = libbpf_num_possible_cpus();
  pcpu_regions_ = static_cast<uint32_t>(std::clamp(ncpu, 1, THPTRACE_MAX_CPUS));
  pcpu_slots_ = std::max<uint32_t>(options.max_targets, 1);
  pcpu_used_.assign(pcpu_slots_, false);

  // The stand-in programs choose_modes() loads say which attach types the kernel has, not whether it
  // takes the real programs (5.10 has tp_btf yet refused the fork programs' compare-and-exchange).
  // So the real object is loaded, and when the kernel refuses it, each family is loaded alone and a
  // refused one moves down its chain (fentry, tp_btf, raw_tp) until the whole object loads. Modes
  // only move down, so this ends; on a kernel that takes everything it is one load, as before.
  for (;;) {
    if (modes_.fork.mode == Mode::unavailable || modes_.cow_fault.mode == Mode::unavailable)
      throw FatalError(kExitRuntime, "cannot load BPF programs (" +
                                         (modes_.fork.mode == Mode::unavailable ? modes_.fork.why : modes_.cow_fault.why) +
                                         "): run as root or grant CAP_BPF and CAP_PERFMON");
    const int err = load(nullptr, sizes);
    if (err == 0) break;
    // EPERM too is looked at per family: a kernel can refuse one attach type with it (fentry here,
    // on the CI host) while taking the rest.
    bool moved = false;
    for (const char* family : {"fork", "cow_fault", "thp", "stall", "redis", "kernel_copies"}) {
      FamilyChoice& c = family_choice(modes_, family);
      if (c.mode == Mode::unavailable || c.mode == Mode::info_polling) continue;
      const int ferr = load(family, sizes);
      if (ferr == 0) continue;
      // Task storage exists (5.11) but tracing programs may not use it (before 5.13): the fentry
      // programs' *_compat build keeps the start times in a hash map instead.
      if (c.mode == Mode::fentry && std::strcmp(family, "cow_fault") == 0 && modes_.task_storage) {
        modes_.task_storage = false;
        if (load(family, sizes) == 0) {
          c.why += fmt::format("; the task storage build was refused ({}): fault start times in a hash map",
                               std::strerror(-ferr));
          moved = true;
          continue;
        }
        modes_.task_storage = true;
      }
      const Mode next = next_mode(c.mode);
      log::warn("the kernel refuses the {} family's {} programs ({}); it takes {} (--verbose shows the verifier log)",
                family, mode_name(c.mode), std::strerror(-ferr), mode_name(next));
      c.why = fmt::format("{}; the real {} programs were refused ({}): {}", c.why, mode_name(c.mode),
                          std::strerror(-ferr), mode_name(next));
      c.mode = next;
      moved = true;
    }
    // Under fentry do_wp_page counts the kernel's own write faults; a COW family moved down to a
    // tracepoint needs page_fault_kernel in the same mode for them.
    if (modes_.kernel_copies.mode == Mode::fentry && modes_.cow_fault.mode != Mode::fentry)
      modes_.kernel_copies = {modes_.cow_fault.mode, "follows the cow_fault family, moved down from fentry"};
    if (!moved && (err == -EPERM || err == -EACCES))
      throw FatalError(kExitRuntime,
                       "the kernel refused to load thptrace's BPF programs (permission denied): run as root or "
                       "grant CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE on kernels older than 5.11");
    if (!moved)
      throw FatalError(kExitRuntime, std::string("cannot load thptrace's BPF programs: ") + std::strerror(-err) +
                                         " (run with --verbose for the verifier log)");
  }
  ring_.reset(ring_buffer__new(bpf_map__fd(skel_->maps.events), &Tracer::on_ring_record, this, nullptr));
  if (!ring_) throw FatalError(kExitRuntime, std::string("cannot set up the ring buffer: ") + std::strerror(errno));
  if (sample_every_ &&
      ring_buffer__add(ring_.get(), bpf_map__fd(skel_->maps.samples), &Tracer::on_sample_record, this) != 0)
    throw FatalError(kExitRuntime, std::string("cannot set up the samples ring buffer: ") + std::strerror(errno));
  void* hot = mmap(nullptr, sizeof(thptrace_hot) * THPTRACE_HOT_LINES, PROT_READ | PROT_WRITE, MAP_SHARED,
                   bpf_map__fd(skel_->maps.hot), 0);
  if (hot == MAP_FAILED) throw FatalError(kExitRuntime, std::string("cannot map the hot map: ") + std::strerror(errno));
  hot_ = static_cast<thptrace_hot*>(hot);
  pcpu_bytes_ = sizeof(thptrace_pcpu) * pcpu_regions_ * pcpu_slots_;
  void* pcpu = mmap(nullptr, pcpu_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, bpf_map__fd(skel_->maps.pcpu), 0);
  if (pcpu == MAP_FAILED)
    throw FatalError(kExitRuntime, std::string("cannot map the per-CPU counters: ") + std::strerror(errno));
  pcpu_ = static_cast<thptrace_pcpu*>(pcpu);
}

namespace {

// Releasing a uprobe link waits for the kernel's grace periods (uprobe_unregister), about 55 ms here.
// One after another that made a daemon watching 50 Redis (12 uprobes each) take 45 s to stop; from
// 16 threads at once the waits overlap in part (30 s; attach_redis's sharing does the rest). The
// calling thread takes part, so a thread that cannot be started costs only speed.
template <class Link>
void release_together(std::vector<Link> links) {
  constexpr size_t kThreads = 16;
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t k = next++; k < links.size(); k = next++) links[k].reset();
  };
  std::vector<std::thread> helpers;
  try {
    while (helpers.size() + 1 < std::min(kThreads, links.size())) helpers.emplace_back(work);
  } catch (const std::system_error&) {
    // fewer helpers
  }
  work();
  for (auto& t : helpers) t.join();
}

}  // namespace

Tracer::~Tracer() {
  // Links first, then the ring buffer, then the object (the destructors of the members run in
  // reverse order of declaration, which is this order).
  std::vector<LinkPtr> uprobes;
  for (auto& [pid, links] : uprobe_links_) std::ranges::move(links, std::back_inserter(uprobes));
  for (auto& [binary, shared] : redis_uprobes_) std::ranges::move(shared.links, std::back_inserter(uprobes));
  uprobe_links_.clear();
  redis_uprobes_.clear();
  release_together(std::move(uprobes));
  huge_alloc_link_.reset();
  clone_links_.clear();
  links_.clear();
  if (hot_) munmap(hot_, sizeof(thptrace_hot) * THPTRACE_HOT_LINES);
  if (pcpu_) munmap(pcpu_, pcpu_bytes_);
}

void Tracer::attach() {
  bpf_object* obj = skel_->obj;
  bpf_program* prog = nullptr;
  bpf_object__for_each_program(prog, obj) {
    if (!bpf_program__autoload(prog) || prog == huge_alloc_prog_ || std::ranges::count(clone_syscall_programs(), prog))
      continue;
    const char* sec = bpf_program__section_name(prog);
    if (std::strncmp(sec, "uprobe", 6) == 0 || std::strncmp(sec, "uretprobe", 9) == 0) continue;
    bpf_link* link = bpf_program__attach(prog);
    if (!link) {
      const int e = errno;
      throw FatalError(kExitRuntime, std::string("cannot attach BPF program ") + bpf_program__name(prog) + " (" +
                                         sec + "): " + std::strerror(e));
    }
    links_.emplace_back(link);
  }
}

std::array<bpf_program*, 4> Tracer::clone_syscall_programs() const {
  const auto& p = skel_->progs;
  return {p.sys_enter_btf, p.sys_enter_raw, p.sys_exit_btf, p.sys_exit_raw};
}

bool Tracer::time_clone_syscalls(pid_t pid, std::string* why) {
  if (clone_links_.empty()) {
    std::vector<LinkPtr> links;
    for (bpf_program* prog : clone_syscall_programs()) {
      if (!bpf_program__autoload(prog)) continue;
      bpf_link* link = bpf_program__attach(prog);
      if (!link) {
        if (why) *why = std::string("cannot attach ") + bpf_program__name(prog) + ": " + std::strerror(errno);
        return false;
      }
      links.emplace_back(link);
    }
    clone_links_ = std::move(links);
  }
  clone_timed_.insert(pid);
  return true;
}

bool Tracer::attach_huge_alloc_counting(std::string* why) {
  if (huge_alloc_link_) return true;
  huge_alloc_link_.reset(bpf_program__attach(huge_alloc_prog_));
  if (!huge_alloc_link_ && why)
    *why = std::string("cannot attach ") + bpf_program__name(huge_alloc_prog_) + ": " + std::strerror(errno);
  return huge_alloc_link_ != nullptr;
}

Mode Tracer::huge_alloc_mode() const {
  if (!huge_alloc_link_) return Mode::unavailable;
  return huge_alloc_prog_ == skel_->progs.page_alloc_btf ? Mode::tp_btf : Mode::raw_tp;
}

thptrace_hot* Tracer::hot_line(pid_t tgid) const { return &hot_[thptrace_hot_index(static_cast<__u32>(tgid))]; }

bool Tracer::watch(pid_t tgid, std::string* why) {
  if (watched_.contains(tgid)) return true;
  thptrace_target t{};
  const __u32 key = static_cast<__u32>(tgid);
  if (bpf_map__update_elem(skel_->maps.targets, &key, sizeof key, &t, sizeof t, BPF_NOEXIST) && errno != EEXIST) {
    const int e = errno;
    if (why)
      *why = e == E2BIG ? "the targets map is full (" + std::to_string(bpf_map__max_entries(skel_->maps.targets)) +
                              " processes are watched already)"
                        : std::string("the kernel refused to add it to the targets map: ") + std::strerror(e);
    return false;
  }

  // Own the hot line when it is free; else count on the slow path and say so on the line. The
  // owner's per-CPU counters are reset while the line reads CLAIMING, which matches no pid, so no
  // fault counts there until the owner's pid is stored. There is a free counter slot for every
  // target the map can hold; without one (cannot happen) the target counts on the slow path.
  thptrace_hot* h = hot_line(tgid);
  const auto free_slot = std::find(pcpu_used_.begin(), pcpu_used_.end(), false);
  __u32 expected = 0;
  const bool owner = free_slot != pcpu_used_.end() &&
                     std::atomic_ref(h->tgid).compare_exchange_strong(expected, THPTRACE_HOT_CLAIMING);
  int slot = -1;
  if (owner) {
    slot = static_cast<int>(free_slot - pcpu_used_.begin());
    *free_slot = true;
    for (uint32_t r = 0; r < pcpu_regions_; r++) {
      auto* words = reinterpret_cast<uint64_t*>(&pcpu_[r * pcpu_slots_ + static_cast<uint32_t>(slot)]);
      for (size_t i = 0; i < sizeof(thptrace_pcpu) / sizeof(uint64_t); i++) std::atomic_ref(words[i]).store(0);
    }
    std::atomic_ref(h->pcpu_slot).store(static_cast<__u32>(slot));
    // Live episodes of an earlier owner of the line are not ours (fork.bpf.c's close checks it).
    std::atomic_ref(h->live).store(0);
    std::atomic_ref(h->tgid).store(static_cast<__u32>(tgid));
  } else {
    std::atomic_ref(h->slow).fetch_add(1);
  }
  watched_.emplace(tgid, slot);
  return true;
}

thptrace_pcpu Tracer::pcpu_sum(int slot) const {
  thptrace_pcpu sum{};
  auto* out = reinterpret_cast<uint64_t*>(&sum);
  for (uint32_t r = 0; r < pcpu_regions_; r++) {
    auto* words = reinterpret_cast<uint64_t*>(&pcpu_[r * pcpu_slots_ + static_cast<uint32_t>(slot)]);
    for (size_t i = 0; i < sizeof(thptrace_pcpu) / sizeof(uint64_t); i++) out[i] += std::atomic_ref(words[i]).load();
  }
  return sum;
}

void Tracer::unwatch(pid_t tgid) {
  if (clone_timed_.erase(tgid) && clone_timed_.empty()) clone_links_.clear();
  const auto it = watched_.find(tgid);
  if (it == watched_.end()) return;
  thptrace_hot* h = hot_line(tgid);
  if (it->second >= 0) {
    std::atomic_ref(h->tgid).store(0);
    pcpu_used_[static_cast<size_t>(it->second)] = false;
  } else {
    std::atomic_ref(h->slow).fetch_sub(1);
  }
  watched_.erase(it);
  const __u32 key = static_cast<__u32>(tgid);
  bpf_map__delete_elem(skel_->maps.targets, &key, sizeof key, 0);
}

bool Tracer::attach_redis(pid_t pid, std::string* why) {
  if (modes_.redis.mode != Mode::uprobe) {
    if (why) *why = "the redis family is in mode " + std::string(mode_name(modes_.redis.mode));
    return false;
  }
  // Through the process's own view of its binary, so it works across mount namespaces.
  const std::string binary = "/proc/" + std::to_string(pid) + "/exe";
  struct stat st {};
  if (::stat(binary.c_str(), &st) != 0) {
    if (why) *why = "cannot read " + binary + ": " + std::strerror(errno);
    return false;
  }
  const BinaryKey key{st.st_dev, st.st_ino};
  if (const auto known = redis_binary_of_.find(pid); known == redis_binary_of_.end() || known->second != key)
    detach_redis(pid);  // another binary (exec) or none
  auto it = redis_uprobes_.find(key);
  if (it == redis_uprobes_.end()) it = redis_uprobes_.emplace(key, attach_redis_binary(binary)).first;
  SharedUprobes& shared = it->second;
  if (why) *why = shared.why;
  if (!shared.anchors) {
    if (shared.users.empty()) redis_uprobes_.erase(it);
    return false;
  }
  const __u32 k = static_cast<__u32>(pid);
  if (bpf_map__update_elem(skel_->maps.redis_anchors, &k, sizeof k, &shared.anchors, sizeof shared.anchors, BPF_ANY)) {
    if (why)
      *why = std::string("cannot record the entry points of pid ") + std::to_string(pid) + ": " + std::strerror(errno);
    if (shared.users.empty()) redis_uprobes_.erase(it);
    return false;
  }
  shared.users.insert(pid);
  redis_binary_of_[pid] = key;
  return true;
}

Tracer::SharedUprobes Tracer::attach_redis_binary(const std::string& binary) {
  auto entry_points = find_entry_points(binary);
  auto& p = skel_->progs;
  const std::map<uint32_t, std::pair<bpf_program*, bpf_program*>> programs = {
      {REDIS_ANCHOR_FORK, {p.redis_fork_enter, p.redis_fork_exit}},
      {REDIS_ANCHOR_REPLICATION, {p.repl_bgsave_enter, p.repl_bgsave_exit}},
      {REDIS_ANCHOR_RDB_SOCKETS, {p.rdb_sockets_enter, p.rdb_sockets_exit}},
      {REDIS_ANCHOR_RDB_BACKGROUND, {p.rdb_bgsave_enter, p.rdb_bgsave_exit}},
      {REDIS_ANCHOR_AOF_REWRITE, {p.aof_rewrite_enter, p.aof_rewrite_exit}},
  };
  SharedUprobes shared;
  // Each entry point on its own: one that does not attach costs only the labels that need it.
  for (auto& found : entry_points.found) {
    if (found.symbol.empty()) continue;
    const auto& [enter, exit] = programs.at(found.entry->anchor);
    LinkPtr pair[2];
    for (const bool ret : {false, true}) {
      LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = ret, .func_name = found.symbol.c_str());
      // Every process running the binary (-1): the programs act only for watched ones.
      pair[ret].reset(bpf_program__attach_uprobe_opts(ret ? exit : enter, -1, binary.c_str(), 0, &opts));
      if (!pair[ret]) {
        found.why = "cannot attach a uprobe on " + found.symbol + ": " + std::strerror(errno);
        found.symbol.clear();
        break;
      }
    }
    if (found.symbol.empty()) continue;
    for (auto& l : pair) shared.links.push_back(std::move(l));
  }
  shared.anchors = entry_points.anchors();
  shared.why = describe(entry_points);
  return shared;
}

void Tracer::detach_redis(pid_t pid) {
  const auto node = redis_binary_of_.extract(pid);
  if (!node) return;
  const __u32 key = static_cast<__u32>(pid);
  bpf_map__delete_elem(skel_->maps.redis_anchors, &key, sizeof key, 0);
  const auto it = redis_uprobes_.find(node.mapped());
  if (it == redis_uprobes_.end()) return;
  it->second.users.erase(pid);
  if (it->second.users.empty()) {
    release_together(std::move(it->second.links));
    redis_uprobes_.erase(it);
  }
}

void Tracer::detach_uprobes(pid_t pid) {
  if (auto node = uprobe_links_.extract(pid)) release_together(std::move(node.mapped()));
  detach_redis(pid);
}

bool Tracer::attach_libc_fork(pid_t pid, std::string* why) {
  if (attach_libc_fork_pair(pid, why)) return true;
  if (std::string more; !time_clone_syscalls(pid, &more) && why) *why += "; " + more;
  return false;
}

bool Tracer::attach_libc_fork_pair(pid_t pid, std::string* why) {
  // The libc the process maps, opened as the process sees it (the mapped file itself, or a walk
  // confined to its root: proc/foreign_file.h) and named to libbpf and the kernel by our own fd link.
  const auto maps = proc::read_file("/proc/" + std::to_string(pid) + "/maps", 4 << 20);
  std::optional<proc::Mapping> mapping;
  for (auto& m : maps ? proc::parse_maps(*maps) : std::vector<proc::Mapping>{})
    if (m.path.starts_with('/') && m.path.ends_with("/libc.so.6")) {
      mapping = std::move(m);
      break;
    }
  if (!mapping) {
    if (why) *why = "the process maps no libc.so.6";
    return false;
  }
  const std::string& libc = mapping->path;
  const proc::ForeignFile file = proc::open_process_file(pid, libc, proc::kMaxElfBytes, mapping->range());
  if (!file.fd) {
    if (why) *why = "cannot open " + libc + " of the process: " + file.error;
    return false;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(file.fd.get());
  std::vector<LinkPtr> links;
  for (const bool ret : {false, true}) {
    LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = ret, .func_name = "fork");
    bpf_link* link = bpf_program__attach_uprobe_opts(ret ? skel_->progs.libc_fork_exit : skel_->progs.libc_fork_enter,
                                                     pid, path.c_str(), 0, &opts);
    if (!link) {
      if (why) *why = "cannot attach a uprobe on fork in " + libc + ": " + std::strerror(errno);
      return false;
    }
    links.emplace_back(link);
  }
  auto& mine = uprobe_links_[pid];
  for (auto& l : links) mine.push_back(std::move(l));
  return true;
}

int Tracer::on_ring_record(void* ctx, void* data, size_t size) {
  auto* self = static_cast<Tracer*>(ctx);
  if (size < sizeof(thptrace_event) || !self->on_event_) return 0;
  thptrace_event e;
  std::memcpy(&e, data, sizeof e);
  // No exception may cross libbpf's C frames.
  try {
    (*self->on_event_)(e);
  } catch (const std::exception& ex) {
    log::warn("dropping an event: {}", ex.what());
  }
  return 0;
}

int Tracer::on_sample_record(void* ctx, void* data, size_t size) {
  auto* self = static_cast<Tracer*>(ctx);
  if (size < sizeof(thptrace_copy_sample)) return 0;
  thptrace_copy_sample s;
  std::memcpy(&s, data, sizeof s);
  if (s.type != EV_COPY_SAMPLE) return 0;
  s.frames = std::min<__u32>(s.frames, THPTRACE_STACK_DEPTH);
  try {
    self->copy_samples_.push_back(s);
  } catch (const std::exception& ex) {  // no exception may cross libbpf's C frames
    log::warn("dropping a copy sample: {}", ex.what());
  }
  return 0;
}

uint64_t Tracer::copy_samples_dropped() const {
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return 0;
  std::vector<thptrace_sample_state> per_cpu(static_cast<size_t>(ncpu));
  const __u32 key = 0;
  if (bpf_map__lookup_elem(skel_->maps.sample_state, &key, sizeof key, per_cpu.data(),
                           per_cpu.size() * sizeof(thptrace_sample_state), 0))
    return 0;
  uint64_t n = 0;
  for (const auto& s : per_cpu) n += s.dropped;
  return n;
}

int Tracer::poll(int timeout_ms, const std::function<void(const thptrace_event&)>& on_event) {
  on_event_ = &on_event;
  int n = ring_buffer__poll(ring_.get(), timeout_ms);
  // Copy samples wake no one until their ring is half full (sample_wakeup_bytes), so epoll does not
  // report that ring: read every ring, whatever woke us.
  if (sample_every_ && n >= 0) {
    const int more = ring_buffer__consume(ring_.get());
    n = more < 0 ? more : n + more;
  }
  on_event_ = nullptr;
  return n;
}

std::optional<thptrace_target> Tracer::target(pid_t tgid) const {
  thptrace_target t{};
  const __u32 key = static_cast<__u32>(tgid);
  if (bpf_map__lookup_elem(skel_->maps.targets, &key, sizeof key, &t, sizeof t, 0)) return std::nullopt;
  // A line owner's fault counters are per CPU, never in the map.
  if (const auto it = watched_.find(tgid); it != watched_.end() && it->second >= 0) {
    const thptrace_pcpu p = pcpu_sum(it->second);
    t.cow_faults += p.cow_faults;
    t.huge_cow_faults += p.huge_cow_faults;
    t.thp_splits += p.thp_splits;
    t.fault_ns_total += p.fault_ns_total;
    t.fault_ns_count += p.fault_ns_count;
    for (int i = 0; i < THPTRACE_LAT_SLOTS; i++) t.fault_lat[i] += p.fault_lat[i];
  }
  return t;
}

bool Tracer::owns_hot_line(pid_t tgid) const {
  return watched_.contains(tgid) && std::atomic_ref(hot_line(tgid)->tgid).load() == static_cast<__u32>(tgid);
}

std::vector<thptrace_episode> Tracer::episodes_of(pid_t parent) const {
  // A live episode of a line owner holds minus the owner's per-CPU sums at its fork (based): adding
  // the sums now gives the faults since (unsigned arithmetic wraps to the exact difference).
  // The sums are read after the episode, so that they include its base.
  const auto owner = watched_.find(parent);
  const int slot = owner != watched_.end() ? owner->second : -1;
  std::vector<thptrace_episode> out;
  const int fd = bpf_map__fd(skel_->maps.episodes);
  __u32 key = 0, next = 0;
  __u32* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    thptrace_episode ep{};
    if (bpf_map_lookup_elem(fd, &next, &ep) == 0 && ep.parent_tgid == static_cast<__u32>(parent)) {
      if (ep.based && !ep.exit_ts_ns) {
        if (slot >= 0) {
          const thptrace_pcpu now_sums = pcpu_sum(slot);
          const thptrace_pcpu* now = &now_sums;
          ep.cow_faults += now->cow_faults;
          ep.huge_cow_faults += now->huge_cow_faults;
          ep.thp_splits += now->thp_splits;
          ep.fault_ns_total += now->fault_ns_total;
          ep.fault_ns_count += now->fault_ns_count;
          for (int i = 0; i < THPTRACE_LAT_SLOTS; i++) ep.fault_lat[i] += now->fault_lat[i];
        } else {
          // Not possible while the parent is watched; the base alone means nothing.
          ep.cow_faults = ep.huge_cow_faults = ep.thp_splits = ep.fault_ns_total = ep.fault_ns_count = 0;
          std::fill(std::begin(ep.fault_lat), std::end(ep.fault_lat), 0);
        }
        ep.based = 0;
      }
      out.push_back(ep);
    }
    key = next;
    prev = &key;
  }
  return out;
}

void Tracer::forget_episode(pid_t child) {
  const __u32 key = static_cast<__u32>(child);
  bpf_map__delete_elem(skel_->maps.episodes, &key, sizeof key, 0);
}

Reaped Tracer::reap_episodes(uint64_t grace_ns) {
  Reaped r;
  const int fd = bpf_map__fd(skel_->maps.episodes);
  const uint64_t now = proc::monotonic_ns();
  std::vector<__u32> keys;
  __u32 key = 0, next = 0;
  for (__u32* prev = nullptr; bpf_map_get_next_key(fd, prev, &next) == 0; prev = &key) {
    keys.push_back(next);
    key = next;
  }
  for (const __u32 child : keys) {
    thptrace_episode ep{};
    if (bpf_map_lookup_elem(fd, &child, &ep)) continue;  // closed and delivered meanwhile
    if (ep.exit_ts_ns) {
      // Closed by the exit program, whose record did not fit. The grace leaves a program that is
      // still closing it (its record may yet be submitted) to finish.
      if (now < ep.exit_ts_ns + grace_ns) continue;
      if (bpf_map_delete_elem(fd, &child) == 0) r.lost_exits.push_back(ep);
      continue;
    }
    // Not closed. The exit tracepoint fires before /proc/PID goes away, so a child that is gone had
    // its exit seen or missed for good (it died before the exit program was attached). A pid that
    // now names another process's child is a reuse: the episode is as dead.
    const auto st = proc::read_status(static_cast<pid_t>(child));
    if (st && st->ppid == static_cast<pid_t>(ep.parent_tgid)) {
      r.live++;
      continue;
    }
    // Re-read: the exit program may have closed it since the first read.
    if (bpf_map_lookup_elem(fd, &child, &ep) || ep.exit_ts_ns) continue;
    if (bpf_map_delete_elem(fd, &child)) continue;
    // Give back its slow-path reference as the exit program would. (Its parent's active slot, if
    // the parent is still watched, stays taken until the parent is unwatched: userspace cannot
    // clear it without racing the kernel's counter updates in the same map value.)
    if (ep.tracked) {
      thptrace_hot* h = hot_line(static_cast<pid_t>(child));
      std::atomic_ref<__u32> slow(h->slow);
      for (__u32 v = slow.load(); v > 0 && !slow.compare_exchange_weak(v, v - 1);) {
      }
    }
    r.dead++;
  }
  return r;
}

namespace {
size_t count_keys(int fd, size_t key_size) {
  std::vector<char> key(key_size), next(key_size);
  size_t n = 0;
  for (void* prev = nullptr; bpf_map_get_next_key(fd, prev, next.data()) == 0; prev = key.data()) {
    key = next;
    n++;
  }
  return n;
}
}  // namespace

size_t Tracer::episode_count() const { return count_keys(bpf_map__fd(skel_->maps.episodes), sizeof(__u32)); }
size_t Tracer::target_count() const { return count_keys(bpf_map__fd(skel_->maps.targets), sizeof(__u32)); }

uint32_t Tracer::hot_slow(pid_t tgid) const { return std::atomic_ref(hot_line(tgid)->slow).load(); }

std::vector<ProgramStats> Tracer::program_stats() const {
  std::vector<ProgramStats> out;
  bpf_program* prog = nullptr;
  bpf_object__for_each_program(prog, skel_->obj) {
    const int fd = bpf_program__fd(prog);
    if (fd < 0) continue;  // not loaded: a twin of another mode
    bpf_prog_info info{};
    __u32 len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd, &info, &len)) continue;
    out.push_back({bpf_program__name(prog), info.id, info.run_cnt, info.run_time_ns});
  }
  return out;
}

uint64_t Tracer::dropped() const {
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return 0;
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
  const __u32 zero = 0;
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.dropped), &zero, per_cpu.data())) return 0;
  uint64_t sum = 0;
  for (auto v : per_cpu) sum += v;
  return sum;
}

bool Tracer::maps_readable() const {
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu > 0 ? ncpu : 1));
  const __u32 zero = 0;
  return bpf_map_lookup_elem(bpf_map__fd(skel_->maps.dropped), &zero, per_cpu.data()) == 0 || errno != EPERM;
}

size_t Tracer::link_count() const {
  size_t n = links_.size() + clone_links_.size() + (huge_alloc_link_ ? 1 : 0);
  for (const auto& [pid, links] : uprobe_links_) n += links.size();
  for (const auto& [binary, shared] : redis_uprobes_) n += shared.links.size();
  return n;
}

}  // namespace thptrace::tracer
