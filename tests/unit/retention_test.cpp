// SPDX-License-Identifier: Apache-2.0
// What a long capture keeps of its time series (report/retention.h), and the probe's figures kept as
// they come (redis::LatencyTotals).
#include "report/retention.h"

#include <gtest/gtest.h>

#include <random>

#include "redis/latency_probe.h"

namespace thptrace::report {
namespace {

constexpr uint64_t kS = 1'000'000'000;

struct Item {
  uint64_t ts_ns = 0;
  int value = 0;  // the cell's largest is kept
  int state = 0;  // each change is kept
  bool operator==(const Item&) const = default;
};

thptrace_event fork_at(uint32_t pid, uint32_t child, uint64_t ts) {
  thptrace_event e{};
  e.type = EV_FORK;
  e.tgid = pid;
  e.child_pid = child;
  e.ts_ns = ts;
  return e;
}

thptrace_event exit_at(uint32_t pid, uint32_t child, uint64_t fork_ts, uint64_t ts) {
  thptrace_event e{};
  e.type = EV_CHILD_EXIT;
  e.tgid = child;
  e.child_pid = child;
  e.ts_ns = ts;
  e.episode.parent_tgid = pid;
  e.episode.child_pid = child;
  e.episode.fork_ts_ns = fork_ts;
  e.episode.exit_ts_ns = ts;
  return e;
}

size_t thin_items(Retention& r, std::vector<Item>& items, uint64_t now) {
  return r.thin(
      items, now, [](const Item& i) { return i.ts_ns; },
      [&](const std::vector<size_t>& cell) {
        std::vector<size_t> keep{cell.front()};
        size_t best = cell.front();
        for (const size_t i : cell)
          if (items[i].value > items[best].value) best = i;
        if (best != cell.front()) keep.push_back(best);
        return keep;
      },
      [](const Item& a, const Item& b) { return a.state != b.state; });
}

bool has(const std::vector<Item>& items, uint64_t ts) {
  return std::any_of(items.begin(), items.end(), [&](const Item& i) { return i.ts_ns == ts; });
}

const RetentionOptions kOptions{.recent_ns = 60 * kS, .margin_ns = 2 * kS, .cell_ns = 60 * kS, .max_cells = 1024};

TEST(Retention, KeepsForkWindowsTheWindowsBeforeAndTheRecentWhole) {
  Retention r(100, 0, kOptions);
  r.on_event(fork_at(100, 200, 300 * kS));
  r.on_event(exit_at(100, 200, 300 * kS, 310 * kS));
  std::vector<Item> items;
  for (uint64_t t = 0; t < 1000; ++t) items.push_back({t * kS, t == 130 ? 7 : 0, t >= 500 && t < 503 ? 1 : 0});
  const size_t gone = thin_items(r, items, 1000 * kS);
  EXPECT_EQ(gone + items.size(), 1000u);
  // The window [300, 310), the one before [290, 300), 2 s each side.
  for (uint64_t t = 288; t < 312; ++t) EXPECT_TRUE(has(items, t * kS)) << t;
  EXPECT_FALSE(has(items, 287 * kS));
  EXPECT_FALSE(has(items, 313 * kS));
  // From the horizon (940 s) on, and the cell it cuts (from 900 s).
  for (uint64_t t = 900; t < 1000; ++t) EXPECT_TRUE(has(items, t * kS)) << t;
  // Elsewhere, the first of each 60 s cell and its largest; each change of state.
  EXPECT_TRUE(has(items, 0));
  EXPECT_TRUE(has(items, 120 * kS));
  EXPECT_TRUE(has(items, 130 * kS));
  EXPECT_FALSE(has(items, 131 * kS));
  EXPECT_TRUE(has(items, 500 * kS));
  EXPECT_FALSE(has(items, 501 * kS));
  EXPECT_TRUE(has(items, 503 * kS));
  EXPECT_FALSE(has(items, 504 * kS));
  // The spans let go: none of them holds a kept item or the guarded window.
  ASSERT_FALSE(r.let_go().empty());
  for (const auto& g : r.let_go()) {
    for (const auto& i : items) EXPECT_FALSE(g.holds(i.ts_ns)) << i.ts_ns;
    EXPECT_FALSE(g.from_ns < 310 * kS && 290 * kS < g.to_ns);
  }
}

TEST(Retention, ALivingChildsWindowBeforeIsKeptHoweverLongItLives) {
  Retention r(100, 0, kOptions);
  r.on_event(fork_at(100, 200, 500 * kS));
  std::vector<Item> items;
  for (uint64_t t = 0; t < 1000; ++t) items.push_back({t * kS, 0, 0});
  thin_items(r, items, 1000 * kS);
  // It has lived 500 s: its window before reaches back to 0 (less the margin).
  EXPECT_EQ(items.size(), 1000u);
  thin_items(r, items, 1200 * kS);
  EXPECT_EQ(items.size(), 1000u);
  // Once it has exited, its window and the one before stay whole; what follows is thinned.
  r.on_event(exit_at(100, 200, 500 * kS, 1000 * kS));
  for (uint64_t t = 1000; t < 1400; ++t) items.push_back({t * kS, 0, 0});
  thin_items(r, items, 1400 * kS);
  for (uint64_t t = 0; t <= 1002; ++t) EXPECT_TRUE(has(items, t * kS)) << t;
  EXPECT_FALSE(has(items, 1100 * kS));
}

// However long the capture, what it keeps outside its forks' windows and the last minutes is bounded.
TEST(Retention, BoundedHoweverLong) {
  const RetentionOptions o{.recent_ns = 60 * kS, .margin_ns = 2 * kS, .cell_ns = 60 * kS, .max_cells = 64};
  Retention r(100, 0, o);
  std::vector<Item> items;
  size_t most = 0;
  for (uint64_t t = 0; t < 48 * 3600; ++t) {  // two days of one item a second, thinned each minute
    items.push_back({t * kS, static_cast<int>(t % 7), 0});
    if (t % 60 == 59) {
      thin_items(r, items, (t + 1) * kS);
      most = std::max(most, items.size());
    }
  }
  // The recent minute, the cell the horizon cuts (waiting until it is whole), and two items for each
  // of at most max_cells + 1 cells.
  const size_t widest_cell_s = 60 * 64;  // two days span 48 * 60 = 2,880 minutes: 64 cells of 64 minutes
  EXPECT_LE(most, 60 + widest_cell_s + 2 * (o.max_cells + 1));
}

// Thinning as the capture goes keeps what thinning once at its end would: a coarser cell's choice is
// among a finer one's.
TEST(Retention, ThinningAsItGoesKeepsWhatThinningOnceWould) {
  const RetentionOptions o{.recent_ns = 30 * kS, .margin_ns = 2 * kS, .cell_ns = 10 * kS, .max_cells = 16};
  std::mt19937 rng(7);
  std::vector<Item> all;
  std::vector<thptrace_event> events;
  for (uint64_t t = 0; t < 4000; ++t) {
    all.push_back({t * kS + rng() % 1000, static_cast<int>(rng() % 1000), static_cast<int>(t / 333 % 2)});
    if (t % 400 == 100) {
      events.push_back(fork_at(100, static_cast<uint32_t>(t), t * kS));
      events.push_back(exit_at(100, static_cast<uint32_t>(t), t * kS, (t + 5) * kS));
    }
  }
  const uint64_t end = 4000 * kS;
  Retention once(100, 0, o), going(100, 0, o);
  for (const auto& e : events) once.on_event(e);
  std::vector<Item> at_end = all;
  thin_items(once, at_end, end);

  std::vector<Item> kept;
  size_t next = 0, next_event = 0;
  for (uint64_t now = 7 * kS; now <= end; now += 7 * kS) {
    while (next < all.size() && all[next].ts_ns < now) kept.push_back(all[next++]);
    while (next_event < events.size() && events[next_event].ts_ns < now) going.on_event(events[next_event++]);
    thin_items(going, kept, now);
  }
  while (next < all.size()) kept.push_back(all[next++]);
  thin_items(going, kept, end);
  // The same, but in the cell the last horizon cuts: once at the end waits for it to be whole, as it
  // goes its finer cells were thinned while they were whole.
  const uint64_t cut = once.cell_of(once.horizon(end), end);
  const auto before_cut = [&](std::vector<Item> v) {
    std::erase_if(v, [&](const Item& i) { return once.cell_of(i.ts_ns, end) >= cut; });
    return v;
  };
  EXPECT_EQ(before_cut(kept), before_cut(at_end));
  EXPECT_GT(before_cut(kept).size(), 100u);
  EXPECT_LT(kept.size(), all.size() / 4);
}

// The probe's figures over the whole capture, kept as they come: the counts and the maximum exact,
// the percentiles at most 1.1% over the nearest rank of every request.
TEST(LatencyTotals, WithinTheirBucketOfTheExactFigures) {
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> latency(std::log(200'000.0), 1.0);
  std::vector<redis::ProbeSample> samples;
  redis::LatencyTotals totals(5000);
  for (uint64_t i = 0; i < 100'000; ++i) {
    redis::ProbeSample s{i * 10'000'000, static_cast<uint64_t>(latency(rng)), i % 9973 == 0};
    samples.push_back(s);
    totals.add(s);
  }
  const auto exact = redis::client_latency(samples, 0, UINT64_MAX, 5000);
  const auto kept = totals.figures();
  ASSERT_TRUE(exact && kept);
  EXPECT_EQ(kept->samples, exact->samples);
  EXPECT_EQ(kept->over_timeout, exact->over_timeout);
  EXPECT_DOUBLE_EQ(kept->max_us, exact->max_us);
  for (const auto& [k, e] : {std::pair{kept->p50_us, exact->p50_us}, std::pair{kept->p99_us, exact->p99_us},
                             std::pair{kept->p999_us, exact->p999_us}}) {
    EXPECT_GE(k, e * (1 - 1e-9));
    EXPECT_LE(k, e * 1.011);
  }
  EXPECT_FALSE(redis::LatencyTotals(5000).figures());
}

}  // namespace
}  // namespace thptrace::report
