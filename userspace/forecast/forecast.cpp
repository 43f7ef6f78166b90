// SPDX-License-Identifier: Apache-2.0
#include "forecast/forecast.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "common/units.h"

namespace thptrace::forecast {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kMiB = 1024.0 * 1024;

// The model's rates: a fork's freeze per GiB of RSS and a child's save rate per GiB of RSS, as forks
// of Redis measured them on hosts of this project's kind (docs/guide/predict.md says the figures),
// each with a range wide enough for other hosts.
constexpr double kFreezeMsPerGiB = 30, kFreezeMsPerGiBLow = 15, kFreezeMsPerGiBHigh = 60;
// The same for memory in PMD-sized pages, whose page tables fork copies an entry a 2 MiB page: 30 to
// 45 times faster than 4 KiB pages on this project's machine type (docs/development/measurements.md).
constexpr double kFreezeMsPerHugeGiB = 0.75, kFreezeMsPerHugeGiBLow = 0.3, kFreezeMsPerHugeGiBHigh = 2;
constexpr double kSaveGiBPerS = 0.3, kSaveGiBPerSLow = 0.1, kSaveGiBPerSHigh = 0.6;
// A full sync's replication buffer grows from the fork until the replica reads its stream: the
// child's life plus the transfer and the replica's load, about as long again.
constexpr double kSyncLives = 2, kSyncLivesLow = 1, kSyncLivesHigh = 3;
// What a save's child copies by its own writes (its stack, its buffers, the allocator's pages it
// reuses), which no rehearsal of the parent can see: about a hundred pages whatever the dataset
// (docs/guide/predict.md).
constexpr double kChildOwnBytes = 420 * 1024, kChildOwnBytesLow = 256 * 1024, kChildOwnBytesHigh = 1024 * 1024;
// A need this close to its limit (or whose range reaches past it) is tight.
constexpr double kTight = 0.9;

Figure freeze_of(const Inputs& in) {
  const bool traced = in.traced && in.traced->fork_us > 0;
  if (traced || (in.last_fork_usec && *in.last_fork_usec > 0)) {
    const double ms = (traced ? in.traced->fork_us : *in.last_fork_usec) / 1e3;
    // The same process forks in about the same time while its size holds; the test's tolerance too.
    return {ms, std::max(0.0, std::min(ms * 0.5, ms - 2)), std::max(ms * 1.5, ms + 2), Method::history,
            traced ? "the last fork traced" : "latest_fork_usec of the last fork"};
  }
  const double huge = static_cast<double>(std::min(in.anon_huge_bytes, in.rss_bytes)) / kGiB;
  const double gib = static_cast<double>(in.rss_bytes) / kGiB - huge;
  std::string basis =
      fmt::format("{:.0f} ms per GiB of RSS ({:.0f}-{:.0f})", kFreezeMsPerGiB, kFreezeMsPerGiBLow, kFreezeMsPerGiBHigh);
  if (huge > 0)
    basis = fmt::format("{} in pages of 4 KiB, {:.2f} per GiB ({:.1f}-{:.0f}) of the {:.2f} GiB in PMD-sized pages",
                        basis, kFreezeMsPerHugeGiB, kFreezeMsPerHugeGiBLow, kFreezeMsPerHugeGiBHigh, huge);
  return {gib * kFreezeMsPerGiB + huge * kFreezeMsPerHugeGiB, gib * kFreezeMsPerGiBLow + huge * kFreezeMsPerHugeGiBLow,
          gib * kFreezeMsPerGiBHigh + huge * kFreezeMsPerHugeGiBHigh, Method::model, std::move(basis)};
}

Figure lifetime_of(const Inputs& in) {
  if (in.traced && in.traced->child_seconds > 0) {
    // To the millisecond; the next save of the same data varies by about a quarter on a shared host.
    const double s = in.traced->child_seconds;
    return {s, s * 0.75, s * 1.25, Method::history, "the last traced fork's child"};
  }
  if (in.last_rdb_seconds && *in.last_rdb_seconds >= 0) {
    // Redis takes it as the difference of two whole-second clocks (time(NULL) at the fork and at the
    // child's end), so a save of L seconds reads floor(L) or ceil(L): s says the child lived between
    // s - 1 and s + 1, and s on average. A zero is a save under a second.
    const double s = *in.last_rdb_seconds;
    // Apart from the whole seconds' ±1, the file's figure misses the fork and the child's exit, and
    // INFO's end is seen by the server's cron (every 100 ms at hz 10).
    if (in.last_rdb_file_seconds && *in.last_rdb_file_seconds > 0 && std::abs(*in.last_rdb_file_seconds - s) < 1.25) {
      const double f = *in.last_rdb_file_seconds;
      return {f, f * 0.75, f * 1.25, Method::history,
              "the last save's RDB file, from its creation to its rename (statx)"};
    }
    if (s < 1) return {0.5, 0, 1, Method::history, "rdb_last_bgsave_time_sec of the last save (under a second)"};
    return {s, s - 1, s + 1, Method::history, "rdb_last_bgsave_time_sec of the last save (whole seconds, ±1)"};
  }
  const double gib = static_cast<double>(in.rss_bytes) / kGiB;
  return {
      gib / kSaveGiBPerS, gib / kSaveGiBPerSHigh, gib / kSaveGiBPerSLow, Method::model,
      fmt::format("{:.1f} GiB of RSS saved a second ({:.1f}-{:.1f})", kSaveGiBPerS, kSaveGiBPerSLow, kSaveGiBPerSHigh)};
}

Figure sum(const Figure& a, const Figure& b, double b_times, const std::string& basis) {
  return {a.value + b.value * b_times, a.low + b.low * b_times, a.high + b.high * b_times, a.method, basis};
}

LimitCheck check(std::string name, uint64_t limit, Figure need) {
  LimitCheck c{std::move(name), limit, std::move(need), Verdict::fits};
  const auto l = static_cast<double>(limit);
  if (c.need.value > l)
    c.verdict = Verdict::will_exceed;
  else if (c.need.high > l || c.need.value > kTight * l)
    c.verdict = Verdict::tight;
  return c;
}

bool full_sync(correlate::Reason r) {
  return r == correlate::Reason::full_sync_disk || r == correlate::Reason::full_sync_diskless;
}

}  // namespace

const char* method_name(Method m) {
  switch (m) {
    case Method::soft_dirty: return "soft_dirty";
    case Method::history: return "history";
    case Method::model: return "model";
  }
  return "model";
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::fits: return "fits";
    case Verdict::tight: return "tight";
    case Verdict::will_exceed: return "will_exceed";
  }
  return "fits";
}

double dirty_pages_at(const std::vector<std::pair<double, uint64_t>>& curve, double t, uint64_t max_pages) {
  if (curve.empty() || t <= 0) return 0;
  double at = 0;
  double prev_t = 0, prev_p = 0;
  bool inside = false;
  for (const auto& [ct, cp] : curve) {
    const auto p = static_cast<double>(cp);
    if (t <= ct) {
      at = ct > prev_t ? prev_p + (p - prev_p) * (t - prev_t) / (ct - prev_t) : p;
      inside = true;
      break;
    }
    prev_t = ct;
    prev_p = p;
  }
  if (!inside) {
    // Past the rehearsal: its last half's rate goes on (a write set still growing), capped at every page.
    const double last_t = curve.back().first;
    const auto last_p = static_cast<double>(curve.back().second);
    const auto mid = std::find_if(curve.begin(), curve.end(), [&](const auto& x) { return x.first >= last_t / 2; });
    double rate = last_t > 0 ? last_p / last_t : 0;
    if (mid != curve.end() && mid->first < last_t)
      rate = (last_p - static_cast<double>(mid->second)) / (last_t - mid->first);
    at = last_p + std::max(0.0, rate) * (t - last_t);
  }
  return std::min(at, static_cast<double>(max_pages));
}

std::optional<Growth> growth_since_history(const Inputs& in) {
  Growth g;
  if (in.traced) {
    if (in.traced->rss_bytes == 0 || in.rss_bytes == 0) return std::nullopt;
    g.factor = static_cast<double>(in.rss_bytes) / static_cast<double>(in.traced->rss_bytes);
    g.basis = fmt::format("RSS {} now, {} at the last traced fork", mib_text(static_cast<double>(in.rss_bytes)),
                          mib_text(static_cast<double>(in.traced->rss_bytes)));
  } else if (in.used_memory_now && in.last_save_used_memory && *in.last_save_used_memory > 0) {
    g.factor = static_cast<double>(*in.used_memory_now) / static_cast<double>(*in.last_save_used_memory);
    g.basis =
        fmt::format("used_memory {} now, {} as the last save began", mib_text(static_cast<double>(*in.used_memory_now)),
                    mib_text(static_cast<double>(*in.last_save_used_memory)));
  } else {
    return std::nullopt;
  }
  if (std::abs(g.factor - 1) < kGrowthNoise) return std::nullopt;
  return g;
}

namespace {

// A figure from history, for a dataset that has grown (or shrunk) by g since: its value scaled, its
// range stretched to hold the last fork's range and the scaled one.
void scale_for_growth(const Growth& g, Figure& f) {
  if (f.method != Method::history) return;
  f.value *= g.factor;
  f.low *= std::min(1.0, g.factor);
  f.high *= std::max(1.0, g.factor);
  f.basis += fmt::format("; x{:.2f} for the dataset's {} since ({})", g.factor, g.factor > 1 ? "growth" : "shrinking",
                         g.basis);
}

// A child that will share a CPU lives longer: the high end of its life's range stretched by the
// inverse of its share.
void widen_for_cpu(const Inputs& in, Prediction& p) {
  if (!in.cpu_load) return;
  const auto& c = *in.cpu_load;
  const double share = std::min(1.0, static_cast<double>(c.cpus) / (std::max(0.0, c.runnable) + 1));
  p.child_cpu_share = share;
  if (share >= kChildCompetes) return;
  auto& l = p.child_lifetime_s;
  l.high /= share;
  l.basis += fmt::format("; up to {:.1f}x as long: {:.1f} threads runnable on {} CPUs leave the child {:.0f}% of one",
                         1 / share, c.runnable, c.cpus, share * 100);
}

// The bytes the fork will copy: read from the rehearsal's curve at the child's predicted life, else the
// last fork's (traced, or Redis's rdb_last_cow_size), else unknown (copied_unknown_why).
void copies_of(const Inputs& in, Prediction& p) {
  const auto max_pages = static_cast<uint64_t>(static_cast<double>(in.anon_bytes) / kPageBytes);
  if (!in.dirty_curve.empty()) {
    const auto& l = p.child_lifetime_s;
    p.copied_bytes =
        Figure{dirty_pages_at(in.dirty_curve, l.value, max_pages) * kPageBytes + kChildOwnBytes,
               dirty_pages_at(in.dirty_curve, l.low, max_pages) * kPageBytes + kChildOwnBytesLow,
               dirty_pages_at(in.dirty_curve, l.high, max_pages) * kPageBytes + kChildOwnBytesHigh, Method::soft_dirty,
               fmt::format("pages written over {:.1f} s of rehearsal, read at the child's lifetime, "
                           "and {:.0f} KiB the child copies by its own writes",
                           in.dirty_curve.back().first, kChildOwnBytes / 1024)};
  } else if (in.traced || in.last_rdb_cow_bytes) {
    const auto b = static_cast<double>(in.traced ? in.traced->copied_bytes : *in.last_rdb_cow_bytes);
    p.copied_bytes = Figure{b, b * 0.75, b * 1.25, Method::history,
                            in.traced ? "the pages the last traced fork copied" : "rdb_last_cow_size of the last save"};
    // The parent writes on over the longer life of a larger dataset's save, up to all it has.
    if (p.growth) {
      scale_for_growth(*p.growth, *p.copied_bytes);
      auto& c = *p.copied_bytes;
      c.high = std::min(c.high, std::max(c.value, static_cast<double>(in.anon_bytes)));
    }
    // The parent writes on over a longer life: its copies grow with it, up to all it has.
    if (p.child_cpu_share && *p.child_cpu_share < kChildCompetes) {
      auto& c = *p.copied_bytes;
      const double before = c.high;
      c.high = std::max(c.high, std::min(c.high / *p.child_cpu_share, static_cast<double>(in.anon_bytes)));
      c.basis += fmt::format("; up to {:.1f}x as many over the child's longer life", c.high / before);
    }
  } else {
    p.copied_unknown_why = in.server_answered ? "no soft-dirty rehearsal, and Redis has not saved since it started"
                                              : "no soft-dirty rehearsal, and no Redis (--redis) to tell its last save";
  }
  p.method = p.copied_bytes ? p.copied_bytes->method : Method::model;
}

// The memory the fork adds: its copies and, for a full sync, the replicas' output buffers.
void extra_memory_of(const Inputs& in, correlate::Reason reason, Prediction& p) {
  Figure extra = p.copied_bytes ? *p.copied_bytes : Figure{0, 0, 0, Method::model, ""};
  const unsigned buffers = full_sync(reason) ? (in.shared_replication_buffer ? 1 : std::max(1u, in.replicas)) : 0;
  if (full_sync(reason)) {
    const auto& l = p.child_lifetime_s;
    const double r = in.repl_bytes_per_s;
    p.replica_buffer_peak_bytes = Figure{
        r * l.value * kSyncLives, r * l.low * kSyncLivesLow, r * l.high * kSyncLivesHigh, Method::model,
        fmt::format("{:.2f} MiB/s written ({}), for {:.0f} child lifetimes", r / kMiB, in.repl_rate_basis, kSyncLives)};
    extra = sum(extra, *p.replica_buffer_peak_bytes, buffers, "");
  }
  extra.basis = buffers > 1 ? fmt::format("copies and {} replicas' output buffers", buffers)
                            : (buffers ? "copies and the replication buffer" : "copies");
  p.peak_extra_memory_bytes = extra;
}

// Each limit the fork's memory meets, and the verdict: the worst limit's, named by the one with the
// least room left.
void limits_of(const Inputs& in, Prediction& p) {
  const Figure& extra = *p.peak_extra_memory_bytes;  // extra_memory_of set it
  const Figure base{static_cast<double>(in.rss_bytes), static_cast<double>(in.rss_bytes),
                    static_cast<double>(in.rss_bytes), extra.method, ""};
  if (in.cgroup_limit_bytes)
    p.limits.push_back(check(kCgroupLimit, *in.cgroup_limit_bytes,
                             sum(base, extra, 1, "the process's RSS, its copies and replication buffers")));
  if (in.mem_available_bytes) p.limits.push_back(check(kMemAvailable, *in.mem_available_bytes, extra));
  if (p.replica_buffer_peak_bytes) {
    if (in.replica_hard_bytes)
      p.limits.push_back(
          check("client-output-buffer-limit replica (hard)", in.replica_hard_bytes, *p.replica_buffer_peak_bytes));
    // The soft limit drops a replica only when its buffer stays above it for soft_seconds.
    const double over_for = p.child_lifetime_s.value * kSyncLives;
    if (in.replica_soft_bytes && static_cast<double>(in.replica_soft_seconds) < over_for)
      p.limits.push_back(check(fmt::format("client-output-buffer-limit replica (soft, {} s)", in.replica_soft_seconds),
                               in.replica_soft_bytes, *p.replica_buffer_peak_bytes));
  }
  double least_room = INFINITY;
  for (const auto& c : p.limits) {
    const double room = static_cast<double>(c.limit_bytes) - c.need.value;
    if (c.verdict > p.verdict || (c.verdict == p.verdict && c.verdict != Verdict::fits && room < least_room)) {
      p.verdict = c.verdict;
      p.first_limit = c.name;
      least_room = room;
    }
  }
}

// Memory limits: how many replicas' buffers fit beside the process and its copies.
std::optional<unsigned> max_replicas_of(const Inputs& in, const Prediction& p) {
  const double copies = p.copied_bytes ? p.copied_bytes->value : 0;
  double room = INFINITY;
  if (in.cgroup_limit_bytes)
    room = std::min(room, static_cast<double>(*in.cgroup_limit_bytes) - static_cast<double>(in.rss_bytes) - copies);
  if (in.mem_available_bytes) room = std::min(room, static_cast<double>(*in.mem_available_bytes) - copies);
  if (!std::isfinite(room)) return std::nullopt;
  return static_cast<unsigned>(std::max(0.0, std::floor(room / p.replica_buffer_peak_bytes->value)));
}

}  // namespace

Prediction predict(const Inputs& in, correlate::Reason reason) {
  Prediction p;
  p.reason = reason;
  p.fork_freeze_ms = freeze_of(in);
  p.child_lifetime_s = lifetime_of(in);
  p.growth = growth_since_history(in);
  if (p.growth) {
    scale_for_growth(*p.growth, p.fork_freeze_ms);
    scale_for_growth(*p.growth, p.child_lifetime_s);
  }
  widen_for_cpu(in, p);
  copies_of(in, p);
  extra_memory_of(in, reason, p);
  limits_of(in, p);
  if (full_sync(reason) && !in.shared_replication_buffer && p.replica_buffer_peak_bytes &&
      p.replica_buffer_peak_bytes->value > 0)
    if (const auto n = max_replicas_of(in, p)) p.max_replicas = *n;
  return p;
}

}  // namespace thptrace::forecast
