// SPDX-License-Identifier: Apache-2.0
#include "proc/sampler.h"

#include <algorithm>
#include <ctime>
#include <utility>

#include "proc/cgroup.h"

namespace thptrace::proc {

uint64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void SampleSeries::add(Sample s) { samples_.push_back(std::move(s)); }

void SampleSeries::drop_before(uint64_t ts_ns, size_t keep) {
  size_t old = 0;
  while (samples_.size() - old > keep && samples_[old].ts_ns < ts_ns) ++old;
  samples_.erase(samples_.begin(), samples_.begin() + static_cast<std::ptrdiff_t>(old));
}

const Sample* SampleSeries::at_or_before(uint64_t ts_ns) const {
  if (samples_.empty()) return nullptr;
  auto it = std::upper_bound(samples_.begin(), samples_.end(), ts_ns,
                             [](uint64_t t, const Sample& s) { return t < s.ts_ns; });
  return it == samples_.begin() ? &samples_.front() : &*std::prev(it);
}

const Sample* SampleSeries::at_or_after(uint64_t ts_ns) const {
  if (samples_.empty()) return nullptr;
  auto it = std::lower_bound(samples_.begin(), samples_.end(), ts_ns,
                             [](const Sample& s, uint64_t t) { return s.ts_ns < t; });
  return it == samples_.end() ? &samples_.back() : &*it;
}

std::optional<uint64_t> SampleSeries::vmstat_delta(const std::string& name, uint64_t from_ns,
                                                   uint64_t to_ns) const {
  const Sample* a = at_or_before(from_ns);
  const Sample* b = at_or_after(to_ns);
  if (!a || !b) return std::nullopt;
  const auto ia = a->thp_vmstat.find(name);
  const auto ib = b->thp_vmstat.find(name);
  if (ia == a->thp_vmstat.end() || ib == b->thp_vmstat.end() || ib->second < ia->second)
    return std::nullopt;
  return ib->second - ia->second;
}

SystemCounters read_system_counters() {
  SystemCounters c;
  for (auto& [k, v] : read_vmstat())
    if (k.rfind("thp_", 0) == 0) c.thp_vmstat.emplace(k, v);
  c.mem_available_bytes = read_mem_available();
  return c;
}

Sample take_sample(pid_t pid, const SystemCounters& system, bool walk) {
  Sample s;
  s.ts_ns = monotonic_ns();
  s.thp_vmstat = system.thp_vmstat;
  s.mem_available_bytes = system.mem_available_bytes;
  if (const auto st = read_status(pid); st && !st->exited) {
    s.target_alive = true;
    s.thp_enabled = st->thp_enabled;
    s.rss_kb = st->vm_rss_kb;
    s.main_thread = read_schedstat(pid, pid);
  }
  if (const auto r = walk ? read_smaps_rollup(pid) : std::nullopt) {
    if (!s.rss_kb) s.rss_kb = r->rss_kb;
    s.anon_huge_pages_kb = r->anon_huge_pages_kb;
  }
  if (s.target_alive)
    if (const auto m = read_memory_cgroup(pid)) {
      s.cgroup_usage_bytes = m->usage_bytes;
      s.cgroup_limit_bytes = m->limit_bytes;
    }
  return s;
}

Sample refresh_sample(pid_t pid, const SystemCounters& system, Sample last) {
  last.ts_ns = monotonic_ns();
  last.thp_vmstat = system.thp_vmstat;
  last.mem_available_bytes = system.mem_available_bytes;
  const auto rss = read_statm_rss_kb(pid);
  last.target_alive = rss.has_value();
  if (rss) last.rss_kb = *rss;
  last.main_thread = rss ? read_schedstat(pid, pid) : std::nullopt;
  return last;
}

Sampler::Sampler(pid_t pid, std::chrono::milliseconds interval, std::chrono::milliseconds idle)
    : pid_(pid), interval_(interval), cadence_(interval, idle), thread_([this] { run(); }) {}

void Sampler::wake(bool busy) {
  {
    std::lock_guard lock(mu_);
    cadence_.wake(Cadence::Clock::now(), busy);
  }
  wake_.notify_all();
}

Sampler::~Sampler() { halt(); }

void Sampler::halt() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Sample Sampler::sample() {
  // The walk's share of the time: 1 in kWalkBudget.
  constexpr int kWalkBudget = 100;
  const auto system = read_system_counters();
  const auto start = std::chrono::steady_clock::now();
  if (start < next_walk_) {
    Sample s = take_sample(pid_, system, false);
    s.anon_huge_pages_kb = anon_huge_pages_kb_;
    return s;
  }
  Sample s = take_sample(pid_, system, true);
  anon_huge_pages_kb_ = s.anon_huge_pages_kb;
  const auto took = std::chrono::steady_clock::now() - start;
  next_walk_ = start + std::max<std::chrono::steady_clock::duration>(interval_, took * kWalkBudget);
  return s;
}

void Sampler::run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    // Before the sample: a wake from here on gets a sample of its own.
    cadence_.on_sent(Cadence::Clock::now());
    lock.unlock();
    Sample s = sample();
    lock.lock();
    series_.add(std::move(s));
    // One wake-up a sample: a sleep in short steps woke the machine 100 times a second.
    cadence_.wait(wake_, lock, [this] { return stop_; });
  }
}

SampleSeries Sampler::take() {
  std::lock_guard lock(mu_);
  return std::exchange(series_, {});
}

SampleSeries Sampler::stop() {
  halt();
  next_walk_ = {};  // the last sample walks, whatever the budget says
  Sample last = sample();
  std::lock_guard lock(mu_);
  series_.add(std::move(last));
  return std::exchange(series_, {});
}

}  // namespace thptrace::proc
