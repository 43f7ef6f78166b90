// SPDX-License-Identifier: Apache-2.0
#include "correlate/disk.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace thptrace::correlate {
namespace {

// The nearest-rank percentile of sorted values: the smallest with at least q of them at or below it.
double percentile(const std::vector<double>& sorted, double q) {
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

std::optional<FsyncLatency> latency_of(std::vector<double> us) {
  if (us.empty()) return std::nullopt;
  std::sort(us.begin(), us.end());
  return FsyncLatency{us.size(), percentile(us, 0.5), percentile(us, 0.99), us.back()};
}

}  // namespace

const char* thread_kind_name(uint64_t kind) {
  switch (kind) {
    case THREAD_MAIN: return "main";
    case THREAD_BIO_AOF: return "bio_aof";
    default: return "other";
  }
}

uint64_t FsyncWindow::count() const {
  uint64_t n = 0;
  for (const auto* k : {&main, &bio_aof, &other})
    if (*k) n += (*k)->count;
  return n;
}

std::optional<DiskCall> disk_call(const thptrace_event& e) {
  if (e.type != EV_DISK || e.ts_ns < e.start_ns) return std::nullopt;
  return DiskCall{e.start_ns, e.ts_ns, static_cast<uint32_t>(e.value), static_cast<uint32_t>(e.value2)};
}

namespace {

// The calls among `calls` that returned in `window`, summarised.
template <typename Calls>
FsyncWindow summarise(const Calls& calls, const Window& window) {
  std::array<std::vector<double>, 3> us;  // by enum thptrace_thread_kind
  std::vector<double> writes_us;
  for (const DiskCall& c : calls) {
    if (!window.holds(c.end_ns)) continue;
    const double took_us = static_cast<double>(c.end_ns - c.start_ns) / 1e3;
    if (c.call == DISK_WRITE) {
      writes_us.push_back(took_us);
      continue;
    }
    const size_t kind = c.kind < us.size() ? size_t{c.kind} : size_t{THREAD_OTHER};
    us[kind].push_back(took_us);
  }
  FsyncWindow w{latency_of(std::move(us[THREAD_MAIN])), latency_of(std::move(us[THREAD_BIO_AOF])),
                latency_of(std::move(us[THREAD_OTHER])), std::nullopt};
  if (!writes_us.empty()) {
    double sum = 0;
    for (const double x : writes_us) sum += x;
    const auto l = latency_of(std::move(writes_us));
    w.aof_write = FileWrites{l->count, sum / 1e3, l->p99_us, l->max_us};
  }
  return w;
}

}  // namespace

FsyncWindow fsync_window(const std::vector<thptrace_event>& events, uint32_t tgid, const Window& window) {
  std::vector<DiskCall> calls;
  for (const auto& e : events)
    if (e.tgid == tgid)
      if (const auto c = disk_call(e)) calls.push_back(*c);
  return summarise(calls, window);
}

void DiskLog::add(const DiskCall& c) {
  calls_.push_back(c);
  if (calls_.size() <= capacity_) return;
  // A call let go may have arrived after one that returned later (the ring's order across CPUs):
  // windows stay complete from just past the latest return let go.
  complete_from_ns_ = std::max(complete_from_ns_, calls_.front().end_ns + 1);
  calls_.pop_front();
  ++dropped_;
}

std::optional<FsyncWindow> DiskLog::window(const Window& window) const {
  if (window.from_ns < complete_from_ns_) return std::nullopt;
  return summarise(calls_, window);
}

}  // namespace thptrace::correlate
