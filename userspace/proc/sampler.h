// SPDX-License-Identifier: Apache-2.0
#pragma once
// Periodic samples of a target's memory (smaps_rollup, status) and of the kernel's THP counters
// (/proc/vmstat thp_*), timestamped on CLOCK_MONOTONIC like the BPF events so the correlator can take
// deltas over a fork episode's window.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/cadence.h"
#include "proc/proc.h"

namespace thptrace::proc {

struct Sample {
  uint64_t ts_ns = 0;
  bool target_alive = false;
  uint64_t rss_kb = 0;
  uint64_t anon_huge_pages_kb = 0;
  std::optional<bool> thp_enabled;
  std::map<std::string, uint64_t> thp_vmstat;  // the thp_* counters only
  // The memory cgroup the target is charged to (usage now) and the system's MemAvailable: what a
  // fork's copy-on-write runs against.
  std::optional<uint64_t> cgroup_usage_bytes;
  std::optional<uint64_t> cgroup_limit_bytes;  // nullopt: no cgroup, or no limit
  std::optional<uint64_t> mem_available_bytes;
  // The target's main thread's scheduler clocks (proc.h SchedStat); unset where they cannot be read.
  std::optional<SchedStat> main_thread;
};

// A sample series; pure data so it can be built by hand in tests.
class SampleSeries {
 public:
  void add(Sample s);
  const std::vector<Sample>& samples() const { return samples_; }
  // For a capture that thins its series as it goes (report/retention.h): keep them in time order.
  std::vector<Sample>& edit() { return samples_; }
  // The last sample taken at or before ts (or the first sample when all are later).
  const Sample* at_or_before(uint64_t ts_ns) const;
  // The first sample taken at or after ts (or the last sample when all are earlier).
  const Sample* at_or_after(uint64_t ts_ns) const;
  // Delta of a vmstat counter between the sample before `from` and the sample after `to`.
  std::optional<uint64_t> vmstat_delta(const std::string& name, uint64_t from_ns, uint64_t to_ns) const;
  // Forgets the samples taken before ts, keeping at least the newest keep.
  void drop_before(uint64_t ts_ns, size_t keep);

 private:
  std::vector<Sample> samples_;
};

uint64_t monotonic_ns();
// The machine's side of a sample: the same for every target, so a daemon watching many reads it
// once per round rather than once per target.
struct SystemCounters {
  std::map<std::string, uint64_t> thp_vmstat;  // the thp_* counters only
  std::optional<uint64_t> mem_available_bytes;
};
SystemCounters read_system_counters();
// The machine's side read by the caller (`system`), the target's read here. RSS is status's VmRSS
// (smaps_rollup's Rss only where status has none). walk = false leaves smaps_rollup out, and with it
// AnonHugePages (0): reading it walks every page table of the process, which is what it costs.
Sample take_sample(pid_t pid, const SystemCounters& system, bool walk = true);
// The cheap part of a sample on top of the last full one: the machine's side (`system`), the time,
// whether the process lives and its RSS (statm). The rest (AnonHugePages, THP_enabled, the memory
// cgroup) stays as `last` had it.
Sample refresh_sample(pid_t pid, const SystemCounters& system, Sample last);

// When a long-running watcher (the daemon) takes a full sample of a target rather than refreshing
// the last one: smaps_rollup walks every page table of the process (most of an idle daemon's CPU when
// it did so each second for 50 Redis), so it is read each round only while a fork of the target is in
// progress and in the round after it ended, at once after a khugepaged collapse of its memory, and
// otherwise once per `idle` interval. Pure logic on the caller's clock, for the unit tests.
class SampleCadence {
 public:
  using Clock = std::chrono::steady_clock;
  explicit SampleCadence(std::chrono::milliseconds idle) : idle_(idle) {}
  // Whether the round at `now` takes a full sample. busy: a fork of the target is in progress;
  // collapses: the kernel's count of khugepaged collapses of the target's memory.
  bool full_due(Clock::time_point now, bool busy, uint64_t collapses) {
    const bool due = !have_full_ || busy || was_busy_ || collapses != collapses_ || now >= last_full_ + idle_;
    was_busy_ = busy;
    collapses_ = collapses;
    if (due) {
      last_full_ = now;
      have_full_ = true;
    }
    return due;
  }
  // Another process: its first round takes a full sample.
  void reset() { *this = SampleCadence(idle_); }

 private:
  std::chrono::milliseconds idle_;
  Clock::time_point last_full_{};
  bool have_full_ = false;
  bool was_busy_ = false;
  uint64_t collapses_ = 0;
};

// Samples a target on its own thread until stopped or destroyed: every `interval` while a fork of it
// is in progress and for a second after (Cadence), every `idle` otherwise, and once at once when
// woken (the kernel reported a fork or a child's exit). smaps_rollup (the AnonHugePages of a sample)
// is read only while its page-table walks take at most 1% of the time: after a walk that took d, the
// next is no sooner than 100·d later (and never sooner than the next interval); the samples in between
// carry the last walk's AnonHugePages. A walk takes the page-table locks the faults take, so frequent
// walks slow the process's copy-on-write faults far more than the BPF programs do
// (tests/bench/bpf_cost.sh, --interval-ms 1000 against 100; docs/development/measurements.md).
class Sampler {
 public:
  Sampler(pid_t pid, std::chrono::milliseconds interval, std::chrono::milliseconds idle);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // A sample at once (after the one being taken, if any); busy: whether a fork of the target is in
  // progress from now on.
  void wake(bool busy);
  // The samples since the last take() (all of them, before the first).
  SampleSeries take();
  // Takes one final sample, stops the thread and returns the samples not taken yet.
  SampleSeries stop();

 private:
  void run();
  void halt();  // ends the thread: wakes it from its sleep between samples and joins it

  Sample sample();  // one sample, walking the page tables when due

  pid_t pid_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point next_walk_{};
  uint64_t anon_huge_pages_kb_ = 0;  // from the last walk
  std::mutex mu_;
  std::condition_variable wake_;  // stop() and wake() end the thread's sleep between samples
  bool stop_ = false;             // under mu_
  Cadence cadence_;               // under mu_
  SampleSeries series_;
  std::thread thread_;
};

}  // namespace thptrace::proc
