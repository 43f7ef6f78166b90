// SPDX-License-Identifier: Apache-2.0
#include "report/retention.h"

#include <string>
#include <utility>

namespace thptrace::report {

namespace {

// Adds w to spans (sorted by start, disjoint), merging what it overlaps or touches.
void add_merged(std::vector<correlate::Window>& spans, correlate::Window w) {
  auto it = std::lower_bound(spans.begin(), spans.end(), w, [](const correlate::Window& a, const correlate::Window& b) {
    return a.from_ns < b.from_ns;
  });
  if (it != spans.begin() && std::prev(it)->to_ns >= w.from_ns) --it;
  auto last = it;
  while (last != spans.end() && last->from_ns <= w.to_ns) {
    w.from_ns = std::min(w.from_ns, last->from_ns);
    w.to_ns = std::max(w.to_ns, last->to_ns);
    ++last;
  }
  it = spans.erase(it, last);
  spans.insert(it, w);
}

}  // namespace

Retention::Retention(uint32_t pid, uint64_t start_ns, RetentionOptions options)
    : pid_(pid), start_ns_(start_ns), options_(options) {}

void Retention::on_event(const thptrace_event& e) {
  if (e.type == EV_FORK && e.tgid == pid_) open_[e.child_pid] = e.ts_ns;
  if (e.type == EV_CHILD_EXIT && e.episode.parent_tgid == pid_ && e.episode.exit_ts_ns) {
    open_.erase(e.child_pid);
    const correlate::Window w{e.episode.fork_ts_ns, e.episode.exit_ts_ns};
    const uint64_t from = w.before() ? w.before()->from_ns : 0;
    add_merged(guarded_, {from > options_.margin_ns ? from - options_.margin_ns : 0, w.to_ns + options_.margin_ns});
  }
}

uint64_t Retention::horizon(uint64_t now_ns) const {
  uint64_t h = now_ns > options_.recent_ns ? now_ns - options_.recent_ns : 0;
  for (const auto& [child, fork_ts] : open_) {
    // The window before a living child's fork is as long as it has lived.
    const uint64_t age = now_ns > fork_ts ? now_ns - fork_ts : 0;
    const uint64_t from = fork_ts > age + options_.margin_ns ? fork_ts - age - options_.margin_ns : 0;
    h = std::min(h, from);
  }
  return h;
}

bool Retention::guarded(uint64_t ts_ns) const {
  const auto it = std::upper_bound(guarded_.begin(), guarded_.end(), ts_ns,
                                   [](uint64_t t, const correlate::Window& w) { return t < w.from_ns; });
  return it != guarded_.begin() && std::prev(it)->holds(ts_ns);
}

uint64_t Retention::cell_of(uint64_t ts_ns, uint64_t now_ns) const {
  const uint64_t span = now_ns > start_ns_ ? now_ns - start_ns_ : 0;
  uint64_t width = options_.cell_ns;
  while (span / width >= options_.max_cells) width *= 2;
  return (ts_ns > start_ns_ ? ts_ns - start_ns_ : 0) / width;
}

void Retention::note_let_go(uint64_t ts_ns, bool run) {
  if (run && !pending_.empty()) {
    pending_.back().to_ns = ts_ns + 1;
    return;
  }
  pending_.push_back({ts_ns, ts_ns + 1});
}

void Retention::merge_let_go() {
  for (const auto& w : pending_) add_merged(let_go_, w);
  pending_.clear();
}

namespace {

// The indices of cell the key orders first (ties: the earliest), each once.
template <class Less>
void add_first_by(const std::vector<size_t>& cell, std::vector<size_t>& out, Less less) {
  size_t best = cell.front();
  for (const size_t i : cell)
    if (less(i, best)) best = i;
  if (std::find(out.begin(), out.end(), best) == out.end()) out.push_back(best);
}

auto same_snapshot_state(const redis::Snapshot& a, const redis::Snapshot& b) {
  const auto states = [](const redis::Snapshot& s) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& r : s.replicas) out.emplace_back(r.address(), r.state);
    return out;
  };
  return a.up == b.up && a.process_id == b.process_id && a.total_forks == b.total_forks && a.sync_full == b.sync_full &&
         a.rdb_saves == b.rdb_saves && a.aof_rewrites == b.aof_rewrites &&
         a.rdb_bgsave_in_progress == b.rdb_bgsave_in_progress &&
         a.aof_rewrite_in_progress == b.aof_rewrite_in_progress &&
         a.replica_waiting_bgsave == b.replica_waiting_bgsave && a.rdb_last_cow_size == b.rdb_last_cow_size &&
         a.aof_last_cow_size == b.aof_last_cow_size && a.repl_diskless_sync == b.repl_diskless_sync &&
         a.replicas_listed == b.replicas_listed &&
         a.client_output_buffer_limit_disconnections == b.client_output_buffer_limit_disconnections &&
         a.failed_polls == b.failed_polls && states(a) == states(b);
}

}  // namespace

SeriesLetGo thin_series(Retention& retention, CaptureInputs& in, uint64_t now_ns) {
  SeriesLetGo out;
  auto& samples = in.samples.edit();
  out.samples = retention.thin(
      samples, now_ns, [](const proc::Sample& s) { return s.ts_ns; },
      [&](const std::vector<size_t>& cell) {
        std::vector<size_t> keep{cell.front()};
        add_first_by(cell, keep, [&](size_t a, size_t b) { return samples[a].rss_kb > samples[b].rss_kb; });
        add_first_by(cell, keep,
                     [&](size_t a, size_t b) { return samples[a].anon_huge_pages_kb > samples[b].anon_huge_pages_kb; });
        add_first_by(cell, keep, [&](size_t a, size_t b) {
          return samples[a].mem_available_bytes.value_or(UINT64_MAX) <
                 samples[b].mem_available_bytes.value_or(UINT64_MAX);
        });
        return keep;
      },
      [](const proc::Sample& a, const proc::Sample& b) {
        return a.target_alive != b.target_alive || a.thp_enabled != b.thp_enabled;
      });
  out.snapshots = retention.thin(
      in.timeline, now_ns, [](const redis::Snapshot& s) { return s.ts_ns; },
      [](const std::vector<size_t>& cell) { return std::vector<size_t>{cell.front()}; },
      [](const redis::Snapshot& a, const redis::Snapshot& b) { return !same_snapshot_state(a, b); });
  auto& probes = in.probe_samples;
  out.probe_samples = retention.thin(
      probes, now_ns, [](const redis::ProbeSample& s) { return s.due_ns; },
      [&](const std::vector<size_t>& cell) {
        std::vector<size_t> keep;
        add_first_by(cell, keep, [&](size_t a, size_t b) { return probes[a].latency_ns > probes[b].latency_ns; });
        return keep;
      },
      [](const redis::ProbeSample&, const redis::ProbeSample&) { return false; });
  out.counters = retention.thin(
      in.counters, now_ns, [](const CounterSample& c) { return c.ts_ns; },
      [](const std::vector<size_t>& cell) { return std::vector<size_t>{cell.front()}; },
      [](const CounterSample&, const CounterSample&) { return false; });
  in.series_let_go = retention.let_go();
  return out;
}

}  // namespace thptrace::report
