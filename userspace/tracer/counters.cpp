// SPDX-License-Identifier: Apache-2.0
#include "tracer/counters.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "common/error.h"
#include "proc/proc.h"
#include "proc/sampler.h"
#include "thptrace_bpf.skel.h"

namespace thptrace::tracer {

KernelCounters::KernelCounters(::thptrace_bpf* skel, CounterShape shape) : skel_(skel), shape_(shape) {
  pcpu_used_.assign(shape_.slots, false);
  void* hot = mmap(nullptr, sizeof(thptrace_hot) * THPTRACE_HOT_LINES, PROT_READ | PROT_WRITE, MAP_SHARED,
                   bpf_map__fd(skel_->maps.hot), 0);
  if (hot == MAP_FAILED) throw FatalError(kExitRuntime, std::string("cannot map the hot map: ") + std::strerror(errno));
  hot_ = static_cast<thptrace_hot*>(hot);
  pcpu_bytes_ = sizeof(thptrace_pcpu) * shape_.regions * shape_.slots;
  void* pcpu = mmap(nullptr, pcpu_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, bpf_map__fd(skel_->maps.pcpu), 0);
  if (pcpu == MAP_FAILED) {
    munmap(hot_, sizeof(thptrace_hot) * THPTRACE_HOT_LINES);
    throw FatalError(kExitRuntime, std::string("cannot map the per-CPU counters: ") + std::strerror(errno));
  }
  pcpu_ = static_cast<thptrace_pcpu*>(pcpu);
}

KernelCounters::~KernelCounters() {
  munmap(hot_, sizeof(thptrace_hot) * THPTRACE_HOT_LINES);
  munmap(pcpu_, pcpu_bytes_);
}

thptrace_hot* KernelCounters::hot_line(pid_t tgid) const { return &hot_[thptrace_hot_index(static_cast<__u32>(tgid))]; }

bool KernelCounters::watch(pid_t tgid, std::string* why) {
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
    for (uint32_t r = 0; r < shape_.regions; r++) {
      auto* words = reinterpret_cast<uint64_t*>(&pcpu_[r * shape_.slots + static_cast<uint32_t>(slot)]);
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

thptrace_faults KernelCounters::pcpu_sum(int slot) const {
  thptrace_faults sum{};
  for (uint32_t r = 0; r < shape_.regions; r++) {
    // One CPU's counters, each word read whole: that CPU's faults add to them meanwhile.
    thptrace_faults one{};
    auto* from = reinterpret_cast<uint64_t*>(&pcpu_[r * shape_.slots + static_cast<uint32_t>(slot)].faults);
    auto* to = reinterpret_cast<uint64_t*>(&one);
    for (size_t i = 0; i < sizeof(thptrace_faults) / sizeof(uint64_t); i++) to[i] = std::atomic_ref(from[i]).load();
    add_faults(sum, one);
  }
  return sum;
}

void KernelCounters::unwatch(pid_t tgid) {
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

std::optional<thptrace_target> KernelCounters::target(pid_t tgid) const {
  thptrace_target t{};
  const __u32 key = static_cast<__u32>(tgid);
  if (bpf_map__lookup_elem(skel_->maps.targets, &key, sizeof key, &t, sizeof t, 0)) return std::nullopt;
  // A line owner's fault counters are per CPU, never in the map.
  if (const auto it = watched_.find(tgid); it != watched_.end() && it->second >= 0) {
    add_faults(t.faults, pcpu_sum(it->second));
  }
  return t;
}

bool KernelCounters::owns_hot_line(pid_t tgid) const {
  return watched_.contains(tgid) && std::atomic_ref(hot_line(tgid)->tgid).load() == static_cast<__u32>(tgid);
}

std::vector<thptrace_episode> KernelCounters::episodes_of(pid_t parent) const {
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
        if (slot >= 0)
          add_faults(ep.faults, pcpu_sum(slot));
        else
          ep.faults = {};  // not possible while the parent is watched; the base alone means nothing
        ep.based = 0;
      }
      out.push_back(ep);
    }
    key = next;
    prev = &key;
  }
  return out;
}

void KernelCounters::forget_episode(pid_t child) {
  const __u32 key = static_cast<__u32>(child);
  bpf_map__delete_elem(skel_->maps.episodes, &key, sizeof key, 0);
}

Reaped KernelCounters::reap_episodes(uint64_t grace_ns) {
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

size_t KernelCounters::episode_count() const { return count_keys(bpf_map__fd(skel_->maps.episodes), sizeof(__u32)); }
size_t KernelCounters::target_count() const { return count_keys(bpf_map__fd(skel_->maps.targets), sizeof(__u32)); }

uint32_t KernelCounters::hot_slow(pid_t tgid) const { return std::atomic_ref(hot_line(tgid)->slow).load(); }

uint64_t KernelCounters::copy_samples_dropped() const {
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

uint64_t KernelCounters::live_forks() const {
  const __u32 zero = 0;
  __u64 n = 0;
  return bpf_map_lookup_elem(bpf_map__fd(skel_->maps.live_forks), &zero, &n) == 0 ? n : 0;
}

uint64_t KernelCounters::dropped() const {
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return 0;
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
  const __u32 zero = 0;
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.dropped), &zero, per_cpu.data())) return 0;
  uint64_t sum = 0;
  for (auto v : per_cpu) sum += v;
  return sum;
}

bool KernelCounters::maps_readable() const {
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu > 0 ? ncpu : 1));
  const __u32 zero = 0;
  return bpf_map_lookup_elem(bpf_map__fd(skel_->maps.dropped), &zero, per_cpu.data()) == 0 || errno != EPERM;
}

}  // namespace thptrace::tracer
