// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a capture keeps of its time series as it goes (the /proc samples, the INFO snapshots, the
// latency probe's requests, the timeline's counters), so that its memory does not grow with its
// length: an hour of samples and polls kept 62 MB (docs/development/measurements.md).
//
// Kept whole: every item inside a fork's window or the window before it, kMarginNs wider on each
// side (what assemble reads, and the samples nearest a window's ends), and every item from the
// horizon on (the last kRecentNs, and the window before a living child's fork: a fork yet to come
// has a window before it too). Elsewhere each series keeps, per cell, the items its rule names (the
// first, its extremes, each change of state): cells of kCellNs, doubled as often as it takes for the
// capture to span at most kMaxCells of them. So a capture holds at most kMaxCells cells' items
// besides its forks' windows and the last kRecentNs, however long it runs.
//
// A window before a fork that reaches back past the horizon (a child that lived longer than
// kRecentNs) may have lost items: let_go() lists the spans where any was, and assemble leaves the
// figures of such a window unknown rather than reading them from what is left.

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "correlate/window.h"
#include "kernel/abi.h"
#include "report/inputs.h"

namespace thptrace::report {

struct RetentionOptions {
  uint64_t recent_ns = 600'000'000'000;  // 10 min
  uint64_t margin_ns = 5'000'000'000;    // at least the idle interval between samples, twice
  uint64_t cell_ns = 60'000'000'000;     // 1 min
  size_t max_cells = 1024;               // 17 hours of 1-min cells, then 2-min cells, ...
};

class Retention {
 public:
  Retention(uint32_t pid, uint64_t start_ns, RetentionOptions options = {});

  // Notes the target's forks and its children's exits.
  void on_event(const thptrace_event& e);
  // Items at or after this are kept whole, as of now.
  uint64_t horizon(uint64_t now_ns) const;
  // Whether ts is inside a closed fork window, or the window before it, or their margins.
  bool guarded(uint64_t ts_ns) const;
  // The cell ts falls in, as of now (cells grow as the capture does; a coarser cell holds whole finer ones).
  uint64_t cell_of(uint64_t ts_ns, uint64_t now_ns) const;
  // Where items were let go, oldest first: each span runs from the first to the last of items let go
  // with no kept item between them; overlapping spans merged.
  const std::vector<correlate::Window>& let_go() const { return let_go_; }

  // Thins `items` (in time order by ts) as of now_ns. Of each whole cell's unguarded items older than
  // the horizon, keeps the indices `keep(cell)` returns (cell: those items' indices into items, in
  // order), and every item that `changed(previous, item)` says differs in state from the one before
  // it (an equality of some of their fields). Returns the number let go.
  template <class T, class Ts, class Keep, class Changed>
  size_t thin(std::vector<T>& items, uint64_t now_ns, Ts ts, Keep keep, Changed changed);

 private:
  // An item at ts was let go; run: the item before it was too (no kept item lies between them).
  void note_let_go(uint64_t ts_ns, bool run);
  // Merges the spans noted since the last call into let_go_.
  void merge_let_go();

  uint32_t pid_;
  uint64_t start_ns_;
  RetentionOptions options_;
  std::map<uint32_t, uint64_t> open_;       // the children alive, by their creation
  std::vector<correlate::Window> guarded_;  // closed windows with the window before, margins added; merged
  std::vector<correlate::Window> let_go_;
  std::vector<correlate::Window> pending_;  // noted by the thin() in progress
};

// What thin_series let go of each series.
struct SeriesLetGo {
  size_t samples = 0, snapshots = 0, probe_samples = 0, counters = 0;
};

// Thins the capture's series, each by its rule, and sets in.series_let_go. Of each cell, the /proc
// samples keep the first and those with its largest RSS and AnonHugePages and its least
// MemAvailable (the report's extremes), and each change of whether the target lives or of its
// THP_enabled; the INFO snapshots keep the first and each change of state (up, forks, saves, flags,
// the replicas' states, the last saves' copies); the probe's requests keep the slowest (what the
// timeline draws per bucket), by their due time; the counters keep the first.
SeriesLetGo thin_series(Retention& retention, CaptureInputs& in, uint64_t now_ns);

template <class T, class Ts, class Keep, class Changed>
size_t Retention::thin(std::vector<T>& items, uint64_t now_ns, Ts ts, Keep keep, Changed changed) {
  const uint64_t horizon_ns = horizon(now_ns);
  std::vector<char> kept(items.size(), 1);
  std::vector<size_t> cell;
  uint64_t cell_id = 0;
  const auto close_cell = [&] {
    if (cell.empty()) return;
    for (const size_t i : cell) kept[i] = 0;
    for (const size_t i : keep(cell)) kept[i] = 1;
    cell.clear();
  };
  for (size_t i = 0; i < items.size(); ++i) {
    const uint64_t t = ts(items[i]);
    if (t >= horizon_ns) break;
    if (guarded(t) || (i > 0 && changed(items[i - 1], items[i]))) continue;
    const uint64_t c = cell_of(t, now_ns);
    // A cell the horizon cuts is not whole yet: its items wait.
    if (cell_of(horizon_ns, now_ns) == c) break;
    if (c != cell_id) close_cell();
    cell_id = c;
    cell.push_back(i);
  }
  close_cell();
  size_t out = 0, gone = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!kept[i]) {
      note_let_go(ts(items[i]), i > 0 && !kept[i - 1]);
      ++gone;
      continue;
    }
    if (out != i) items[out] = std::move(items[i]);
    ++out;
  }
  items.resize(out);
  merge_let_go();
  return gone;
}

}  // namespace thptrace::report
