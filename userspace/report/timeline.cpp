// SPDX-License-Identifier: Apache-2.0
// The capture's timeline (--svg), written by hand like the bench's: what the clients felt (the latency
// probe's slowest request per time bucket) with each fork's freeze marked, copy-on-write faults per
// bucket (the parent's copies while a child lives apart from its writes after, which copy nothing;
// the children's) from the in-kernel counters read every 10 ms, the target's RSS and AnonHugePages
// from /proc, THP splits, the main thread's share of each interval between two /proc samples on a CPU
// and waiting for one, each fork window shaded and labelled with its reason and Redis's server-side
// latency during it, and each replica's sync through its states. The x axis is the wall
// clock (UTC) when the capture recorded it.
#include "report/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "common/svg.h"

namespace thptrace::report {
namespace {

using svg::escape;

constexpr double kWidth = 1000, kLeft = 118, kRight = 24, kPlotWidth = kWidth - kLeft - kRight;
constexpr double kClientHeight = 90, kCowHeight = 150, kMemHeight = 110, kSplitHeight = 60, kThreadHeight = 80,
                 kReplicaRow = 13, kGap = 42, kTop = 76;
// Time buckets: 10 ms, or wider (a 1-2-5 step) so that a long capture has at most this many.
constexpr size_t kMaxBuckets = 1500;
constexpr size_t kMaxReplicaRows = 12;

// The capture's time axis: ms since its start, and the x of a time; the wall clock at its start
// (CLOCK_REALTIME ns, 0 when not recorded) for the tick labels.
struct Axis {
  uint64_t start_ns = 0;
  double end_ms = 1;
  int64_t start_realtime_ns = 0;
  double ms(uint64_t ts_ns) const { return (static_cast<double>(ts_ns) - static_cast<double>(start_ns)) / 1e6; }
  double x(double t_ms) const { return kLeft + std::clamp(t_ms / end_ms, 0.0, 1.0) * kPlotWidth; }
  double x_ns(uint64_t ts_ns) const { return x(ms(ts_ns)); }
};

// The bucket width for a capture of span_ms: kCounterIntervalNs, or the smallest 1-2-5 width that
// keeps kMaxBuckets.
double bucket_ms_for(double span_ms) {
  return std::max(static_cast<double>(kCounterIntervalNs) / 1e6,
                  svg::round_up_125(span_ms / static_cast<double>(kMaxBuckets)));
}

// The bucket a time falls in, among n of bucket_ms from the axis's start.
size_t bucket_of(const Axis& a, uint64_t ts_ns, double bucket_ms, size_t n) {
  return static_cast<size_t>(std::clamp(a.ms(ts_ns) / bucket_ms, 0.0, static_cast<double>(n - 1)));
}

// A running counter's growth per bucket. A read can see a child's count twice for an instant (its
// exit moves it from the episode to the target between two lookups): the series is taken as its
// running maximum, so no bucket is negative and the total is the last read's.
template <typename Get>
std::vector<double> per_bucket(const std::vector<CounterSample>& c, const Axis& a, double bucket_ms, size_t n,
                               Get get) {
  std::vector<double> out(n, 0);
  uint64_t high = c.empty() ? 0 : get(c.front());
  for (size_t i = 1; i < c.size(); ++i) {
    const uint64_t v = std::max(high, get(c[i]));
    out[bucket_of(a, c[i].ts_ns, bucket_ms, n)] += static_cast<double>(v - high);
    high = v;
  }
  return out;
}

// The bucket values as data (a reader of the SVG, such as the tests, need not trace the path back).
std::string values(const std::vector<double>& v) {
  std::string out;
  for (double x : v) out += fmt::format("{}{:.0f}", out.empty() ? "" : ",", x);
  return out;
}

std::string count_label(double v) {
  if (v >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:g}k", v / 1e3);
  return fmt::format("{:g}", v);
}

// A step outline of bucket values over [0, end), as an SVG path on the panel whose bottom is y0.
std::string step_path(const std::vector<double>& v, double bucket_ms, const Axis& a, double y0, double scale) {
  std::string d = fmt::format("M{:.1f},{:.1f} ", a.x(0), y0);
  for (size_t i = 0; i < v.size(); ++i) {
    const double y = y0 - v[i] * scale;
    d += fmt::format("L{:.1f},{:.1f} L{:.1f},{:.1f} ", a.x(static_cast<double>(i) * bucket_ms), y,
                     a.x(static_cast<double>(i + 1) * bucket_ms), y);
  }
  d += fmt::format("L{:.1f},{:.1f} Z", a.x(static_cast<double>(v.size()) * bucket_ms), y0);
  return d;
}

void frame(std::string& out, double top, double height, const std::string& title) {
  out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"title\">{}</text>\n", kLeft, top - 8, escape(title));
  out += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{}\" height=\"{}\" class=\"frame\"/>\n", kLeft, top,
                     kPlotWidth, height);
}

void y_labels(std::string& out, double top, double height, double hi, const std::string& unit) {
  for (int i = 0; i <= 2; ++i) {
    const double v = hi * i / 2, y = top + height - height * i / 2;
    out += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>\n", kLeft,
                       kLeft + kPlotWidth, y, y);
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"ylabel\">{}{}</text>\n", kLeft - 6, y + 4, count_label(v),
                       unit);
  }
}

// The fork windows over one panel: fork to child exit (to the end when it outlived the capture).
// The copy-on-write panel's carry the fork's facts as data- attributes and a tooltip; the others'
// are plain bands of class band_class.
void fork_bands(std::string& out, const Report& r, const Axis& a, double top, double height, bool labelled,
                const char* band_class = "forkband") {
  double last_label_x = -1e9;
  for (const auto& f : r.forks) {
    const double x0 = a.x_ns(f.fork_ts_ns);
    const double x1 = f.exit_ts_ns ? a.x_ns(f.exit_ts_ns) : kLeft + kPlotWidth;
    if (!labelled) {
      out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" class=\"{}\"/>\n", x0, top,
                         std::max(x1 - x0, 1.5), height, band_class);
      continue;
    }
    const std::string reason = correlate::reason_name(f.reason);
    std::string latency;
    if (f.latency_during && f.latency_during->calls)
      latency = fmt::format(" · p99.9 {:.3g} ms", f.latency_during->p999_us / 1e3);
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" class=\"fork\" data-child=\"{}\" "
        "data-reason=\"{}\" data-start-ms=\"{:.3f}\" data-end-ms=\"{}\"><title>fork {} ({}): {} + {} COW "
        "faults{}</title></rect>\n",
        x0, top, std::max(x1 - x0, 1.5), height, f.child_pid, reason, a.ms(f.fork_ts_ns),
        f.exit_ts_ns ? fmt::format("{:.3f}", a.ms(f.exit_ts_ns)) : std::string("null"), f.child_pid, reason,
        f.cow_faults, f.child_cow_faults, escape(latency));
    if (x0 - last_label_x < 110) continue;  // the tooltip still says it
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"forklabel\">{}{}</text>\n", x0 + 3, top + 12,
                       escape(reason), escape(latency));
    last_label_x = x0;
  }
}

// The wall clock (UTC) of a tick s seconds into the capture: HH:MM:SS, with tenths when the ticks are
// closer than a second. Without a recorded wall clock, the seconds since the start.
std::string tick_label(const Axis& a, double s, double step) {
  if (a.start_realtime_ns == 0) return fmt::format("{:g} s", s);
  const int64_t ns = a.start_realtime_ns + static_cast<int64_t>(std::llround(s * 1e9));
  const std::string t = rfc3339_utc((ns + 500'000) / 1'000'000 * 1'000'000);  // to the nearest ms
  return t.substr(11, step < 1 ? 10 : 8);  // 2026-12-02T18:51:40.521Z -> 18:51:40(.5)
}

void x_ticks(std::string& out, const Axis& a, double bottom) {
  const double step = svg::tick_step(a.end_ms / 1000.0);
  // On the wall clock, the ticks fall on its whole steps (19:02:52, not the capture's start + 1 s).
  const double phase =
      a.start_realtime_ns ? std::fmod(static_cast<double>(a.start_realtime_ns % 3'600'000'000'000) / 1e9, step) : 0;
  for (double s = phase > 1e-9 ? step - phase : 0; s * 1000.0 <= a.end_ms + 1e-6; s += step)
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"xlabel\">{}</text>\n", a.x(s * 1000.0), bottom + 14,
                       tick_label(a, s, step));
}

// Each fork's freeze: from the fork's entry for as long as it took (fork_duration_us), at least a
// hairline, with the time in a tooltip and as data.
void freeze_marks(std::string& out, const Report& r, const Axis& a, double top, double height) {
  for (const auto& f : r.forks) {
    if (!f.fork_duration_us) continue;
    const double start_ms = a.ms(f.fork_ts_ns) - *f.fork_duration_us / 1e3;
    const double x0 = a.x(start_ms), x1 = a.x(a.ms(f.fork_ts_ns));
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" class=\"freeze\" data-child=\"{}\" "
        "data-freeze-ms=\"{:.3f}\"><title>fork (child {}) froze the server for {:.1f} ms</title></rect>\n",
        x0, top, std::max(x1 - x0, 1.5), height, f.child_pid, *f.fork_duration_us / 1e3, f.child_pid,
        *f.fork_duration_us / 1e3);
  }
}

const char* state_class(const std::string& state) {
  if (state == "wait_bgsave") return "st-wait";
  if (state == "send_bulk") return "st-bulk";
  if (state == "online") return "st-online";
  return "st-channel";  // Redis 8 send_bulk_and_stream, Valkey 8 bg_transfer
}

void replica_rows(std::string& out, const std::vector<const correlate::ReplicaSync*>& syncs, const Axis& a,
                  double top) {
  for (size_t i = 0; i < syncs.size() && i < kMaxReplicaRows; ++i) {
    const auto& s = *syncs[i];
    const double y = top + static_cast<double>(i) * kReplicaRow;
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"ylabel\">{}</text>\n", kLeft - 6, y + 9, escape(s.address));
    for (size_t k = 0; k < s.states.size(); ++k) {
      const auto& st = s.states[k];
      const uint64_t from = st.first_seen_ns;
      if (st.state == "online") {
        out += fmt::format(
            "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"3\" height=\"{}\" class=\"st-online\"><title>{} "
            "online</title></rect>\n",
            a.x_ns(from) - 1.5, y + 1, kReplicaRow - 3, escape(s.address));
        continue;
      }
      const uint64_t to = k + 1 < s.states.size() ? s.states[k + 1].first_seen_ns : s.last_seen_ns;
      out += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" class=\"{}\"><title>{} {}</title></rect>\n",
          a.x_ns(from), y + 1, std::max(a.x_ns(to) - a.x_ns(from), 2.0), kReplicaRow - 3, state_class(st.state),
          escape(s.address), escape(st.state));
    }
    if (s.outcome == correlate::ReplicaSync::Outcome::dropped)
      out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"dropped\">✕</text>\n", a.x_ns(s.last_seen_ns) + 2,
                         y + 9);
  }
  if (syncs.size() > kMaxReplicaRows)
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"ylabel\">+{} more</text>\n", kLeft - 6,
                       top + static_cast<double>(kMaxReplicaRows) * kReplicaRow + 9, syncs.size() - kMaxReplicaRows);
}

// The timeline's style sheet.
constexpr const char* kStyle =
    "<style>\n"
    ".title{font-size:12px;font-weight:bold;fill:#222}\n"
    ".frame{fill:#fff;stroke:#999;stroke-width:1}\n"
    ".grid{stroke:#e4e4e4;stroke-width:1}\n"
    ".fork,.forkband{fill:#f28e2b;opacity:0.22}\n"
    ".forklabel{fill:#a0520c;font-size:10px}\n"
    ".ylabel{text-anchor:end;fill:#444;font-size:10px}\n"
    ".xlabel{text-anchor:middle;fill:#444;font-size:10px}\n"
    ".cow-parent{fill:#1f77b4;fill-opacity:0.55;stroke:#1f77b4;stroke-width:0.8}\n"
    ".cow-reuse{fill:#9e9e9e;fill-opacity:0.45;stroke:#9e9e9e;stroke-width:0.6}\n"
    ".clientband{fill:#f28e2b;opacity:0.12}\n"
    ".threadband{fill:#f28e2b;opacity:0.12}\n"
    ".thread-on{fill:none;stroke:#2ca02c;stroke-width:1.4}\n"
    ".thread-wait{fill:none;stroke:#d62728;stroke-width:1.8}\n"
    ".freeze{fill:#d62728;opacity:0.85}\n"
    ".client{fill:#ff7f0e;fill-opacity:0.35;stroke:#c4520a;stroke-width:1}\n"
    ".cow-child{fill:none;stroke:#d62728;stroke-width:1.2}\n"
    ".rss{fill:none;stroke:#2ca02c;stroke-width:1.6}\n"
    ".ahp{fill:none;stroke:#9467bd;stroke-width:1.6;stroke-dasharray:5 3}\n"
    ".splits{fill:#8c564b;fill-opacity:0.7;stroke:#8c564b;stroke-width:0.6}\n"
    ".st-wait{fill:#bbbbbb}.st-bulk{fill:#1f77b4}.st-channel{fill:#9467bd}.st-online{fill:#2ca02c}\n"
    ".dropped{fill:#d62728;font-size:10px}\n"
    ".note{fill:#666;font-size:10px}\n"
    "</style>\n"
    "<rect width=\"100%\" height=\"100%\" fill=\"#fafafa\"/>\n";

// The sum of a panel's buckets, as its data-total says.
uint64_t total(const std::vector<double>& v) {
  double t = 0;
  for (double x : v) t += x;
  return static_cast<uint64_t>(std::llround(t));
}

// Whether bucket i (of bucket_ms) meets a fork window: its faults are copies.
bool in_fork_window(const Report& r, const Axis& a, size_t i, double bucket_ms) {
  const double from = static_cast<double>(i) * bucket_ms, to = from + bucket_ms;
  return std::any_of(r.forks.begin(), r.forks.end(), [&](const correlate::ForkEpisode& f) {
    const double fork_ms = a.ms(f.fork_ts_ns), exit_ms = f.exit_ts_ns ? a.ms(f.exit_ts_ns) : a.end_ms;
    return from <= exit_ms && to > fork_ms;
  });
}

// Copy-on-write faults per bucket: the parent's copies (buckets a fork window meets) filled blue, its
// writes outside every window (reuse, no copy) filled grey, the children's as a line.
void cow_panel(std::string& out, const Report& r, const CaptureInputs& in, const Axis& a, double bucket_ms,
               double cow_top, const std::vector<double>& faults, const std::vector<double>& child) {
  std::vector<double> parent(faults.size(), 0), reuse(faults.size(), 0);
  for (size_t i = 0; i < faults.size(); ++i) (in_fork_window(r, a, i, bucket_ms) ? parent : reuse)[i] = faults[i];
  // After the child's exit the pages it shared stay write-protected
  // until written: those writes still fault (the running counters count them) but take the page
  // back without a copy (do_wp_page's reuse), which the title says.
  const double cow_hi = svg::round_up_125(
      std::max(*std::max_element(faults.begin(), faults.end()), *std::max_element(child.begin(), child.end())));
  frame(out, cow_top, kCowHeight,
        fmt::format("Write faults on shared pages per {:g} ms: parent's copies while a child lives (blue), its "
                    "writes after (grey, no copy), children (line)",
                    bucket_ms));
  y_labels(out, cow_top, kCowHeight, cow_hi, "");
  fork_bands(out, r, a, cow_top, kCowHeight, true);
  if (in.counters.empty())
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"note\">no counter reads in this capture</text>\n",
                       kLeft + 8, cow_top + kCowHeight / 2);
  out += fmt::format("<path d=\"{}\" class=\"cow-parent\" data-total=\"{}\" data-buckets=\"{}\"/>\n",
                     step_path(parent, bucket_ms, a, cow_top + kCowHeight, kCowHeight / cow_hi), total(parent),
                     values(parent));
  out += fmt::format("<path d=\"{}\" class=\"cow-reuse\" data-total=\"{}\" data-buckets=\"{}\"/>\n",
                     step_path(reuse, bucket_ms, a, cow_top + kCowHeight, kCowHeight / cow_hi), total(reuse),
                     values(reuse));
  std::string child_line;
  for (size_t i = 0; i < child.size(); ++i)
    child_line += fmt::format("{}{:.1f},{:.1f} ", i ? "L" : "M", a.x((static_cast<double>(i) + 0.5) * bucket_ms),
                              cow_top + kCowHeight - child[i] * kCowHeight / cow_hi);
  out += fmt::format("<path d=\"{}\" class=\"cow-child\" data-total=\"{}\" data-buckets=\"{}\"/>\n", child_line,
                     total(child), values(child));
  x_ticks(out, a, cow_top + kCowHeight);
}

// What the clients felt: the latency probe's slowest request per bucket, by the time it was due (a
// freeze shows at its full length at its start), each fork's freeze marked in red.
void client_panel(std::string& out, const Report& r, const CaptureInputs& in, const Axis& a, double bucket_ms, size_t n,
                  double top) {
  std::vector<double> worst_us(n, 0);
  for (const auto& p : in.probe_samples) {
    auto& w = worst_us[bucket_of(a, p.due_ns, bucket_ms, n)];
    w = std::max(w, static_cast<double>(p.latency_ns) / 1e3);
  }
  const double hi_ms = svg::round_up_125(std::max(*std::max_element(worst_us.begin(), worst_us.end()) / 1e3, 1.0));
  frame(out, top, kClientHeight,
        fmt::format("What clients felt: the slowest probe request per {:g} ms (ms, from when it was due); red: the "
                    "fork's freeze",
                    bucket_ms));
  y_labels(out, top, kClientHeight, hi_ms, " ms");
  fork_bands(out, r, a, top, kClientHeight, false, "clientband");
  if (in.probe_samples.empty())
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"note\">{}</text>\n", kLeft + 8, top + kClientHeight / 2,
                       in.latency_probe_hz ? "the probe got no answer in this capture"
                                           : "no latency probe in this capture (--redis, --latency-probe HZ)");
  std::vector<double> worst_ms(n);
  for (size_t i = 0; i < n; ++i) worst_ms[i] = worst_us[i] / 1e3;
  out += fmt::format("<path d=\"{}\" class=\"client\" data-max-us=\"{:.0f}\" data-buckets=\"{}\"/>\n",
                     step_path(worst_ms, bucket_ms, a, top + kClientHeight, kClientHeight / hi_ms),
                     *std::max_element(worst_us.begin(), worst_us.end()), values(worst_us));
  freeze_marks(out, r, a, top, kClientHeight);
  x_ticks(out, a, top + kClientHeight);
}

// Memory: RSS and AnonHugePages from /proc.
void memory_panel(std::string& out, const Report& r, const CaptureInputs& in, const Axis& a, double mem_top) {
  uint64_t mem_max_kb = 0;
  for (const auto& s : in.samples.samples()) mem_max_kb = std::max(mem_max_kb, s.rss_kb);
  const double mem_hi = svg::round_up_125(static_cast<double>(mem_max_kb) / 1024.0);
  frame(out, mem_top, kMemHeight, "Memory, MiB: RSS (solid), AnonHugePages (dashed)");
  y_labels(out, mem_top, kMemHeight, mem_hi, "");
  fork_bands(out, r, a, mem_top, kMemHeight, false);
  std::string rss, ahp;
  for (const auto& s : in.samples.samples()) {
    if (!s.target_alive) continue;
    const double x = a.x_ns(s.ts_ns);
    const auto y = [&](uint64_t kb) {
      return mem_top + kMemHeight - static_cast<double>(kb) / 1024.0 / mem_hi * kMemHeight;
    };
    rss += fmt::format("{}{:.1f},{:.1f} ", rss.empty() ? "M" : "L", x, y(s.rss_kb));
    ahp += fmt::format("{}{:.1f},{:.1f} ", ahp.empty() ? "M" : "L", x, y(s.anon_huge_pages_kb));
  }
  out += fmt::format("<path d=\"{}\" class=\"rss\"/>\n<path d=\"{}\" class=\"ahp\"/>\n", rss, ahp);
  x_ticks(out, a, mem_top + kMemHeight);
}

// The main thread from its scheduler clocks at the /proc samples: the share of each interval between
// two samples it ran on a CPU (green) and waited for one, runnable (red), as a level over the interval.
// The samples come every 100 ms while a fork child lives, at the idle interval otherwise.
void thread_panel(std::string& out, const Report& r, const CaptureInputs& in, const Axis& a, double top) {
  frame(out, top, kThreadHeight,
        "The main thread between /proc samples, % of the time: on a CPU (green), waiting for a CPU (red)");
  y_labels(out, top, kThreadHeight, 100, "%");
  fork_bands(out, r, a, top, kThreadHeight, false, "threadband");
  std::string on, wait;
  double max_wait = 0;
  const auto& s = in.samples.samples();
  const auto y = [&](double share) { return top + kThreadHeight - std::clamp(share, 0.0, 1.0) * kThreadHeight; };
  for (size_t i = 1; i < s.size(); ++i) {
    const auto &a0 = s[i - 1].main_thread, &a1 = s[i].main_thread;
    const auto grown = a0 && a1 ? proc::sched_growth(*a0, *a1) : std::nullopt;
    if (!grown || s[i].ts_ns <= s[i - 1].ts_ns) continue;
    const auto span = static_cast<double>(s[i].ts_ns - s[i - 1].ts_ns);
    const double on_share = static_cast<double>(grown->on_cpu_ns) / span;
    const double wait_share = static_cast<double>(grown->runqueue_ns) / span;
    max_wait = std::max(max_wait, std::min(wait_share, 1.0));
    const double x0 = a.x_ns(s[i - 1].ts_ns), x1 = a.x_ns(s[i].ts_ns);
    on += fmt::format("M{:.1f},{:.1f}H{:.1f}", x0, y(on_share), x1);
    wait += fmt::format("M{:.1f},{:.1f}H{:.1f}", x0, y(wait_share), x1);
  }
  if (on.empty())
    out += fmt::format(
        "<text x=\"{}\" y=\"{:.1f}\" class=\"note\">no scheduler clocks of the main thread in this "
        "capture</text>\n",
        kLeft + 8, top + kThreadHeight / 2);
  out += fmt::format("<path d=\"{}\" class=\"thread-on\"/>\n", on);
  out += fmt::format("<path d=\"{}\" class=\"thread-wait\" data-max-pct=\"{:.1f}\"/>\n", wait, max_wait * 100);
  x_ticks(out, a, top + kThreadHeight);
}

}  // namespace

std::string timeline_svg(const Report& r, const CaptureInputs& in) {
  Axis a{in.start_ns, std::max(static_cast<double>(in.end_ns - in.start_ns) / 1e6, 1.0), in.start_realtime_ns};
  const double bucket_ms = bucket_ms_for(a.end_ms);
  const auto n = static_cast<size_t>(std::ceil(a.end_ms / bucket_ms));
  const auto parent = per_bucket(in.counters, a, bucket_ms, n, [](const CounterSample& c) { return c.cow_faults; });
  const auto child =
      per_bucket(in.counters, a, bucket_ms, n, [](const CounterSample& c) { return c.child_cow_faults; });
  const bool kernel_splits = r.probes.cow_fault.mode == tracer::Mode::fentry;
  std::vector<double> splits;
  if (kernel_splits) {
    splits = per_bucket(in.counters, a, bucket_ms, n, [](const CounterSample& c) { return c.thp_splits; });
  } else {  // the machine's thp_split_pmd between two /proc samples, put in the later one's bucket
    splits.assign(n, 0);
    const auto& s = in.samples.samples();
    for (size_t i = 1; i < s.size(); ++i) {
      const auto now = s[i].thp_vmstat.find("thp_split_pmd"), before = s[i - 1].thp_vmstat.find("thp_split_pmd");
      if (now == s[i].thp_vmstat.end() || before == s[i - 1].thp_vmstat.end() || now->second < before->second) continue;
      splits[bucket_of(a, s[i].ts_ns, bucket_ms, n)] += static_cast<double>(now->second - before->second);
    }
  }
  std::vector<const correlate::ReplicaSync*> syncs;
  for (const auto& f : r.forks)
    for (const auto& s : f.replicas) syncs.push_back(&s);

  const double client_top = kTop + 24, cow_top = client_top + kClientHeight + kGap;
  const double mem_top = cow_top + kCowHeight + kGap, split_top = mem_top + kMemHeight + kGap;
  const double thread_top = split_top + kSplitHeight + kGap;
  const double replica_top = thread_top + kThreadHeight + kGap;
  const double replica_height = static_cast<double>(std::min(syncs.size(), kMaxReplicaRows + 1)) * kReplicaRow;
  const double height = (syncs.empty() ? thread_top + kThreadHeight : replica_top + replica_height) + 30;

  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline\" width=\"{0}\" height=\"{1:.0f}\" viewBox=\"0 0 {0} "
      "{1:.0f}\" "
      "font-family=\"sans-serif\" font-size=\"11\" data-pid=\"{2}\" data-duration-ms=\"{3:.3f}\" "
      "data-bucket-ms=\"{4:g}\" data-plot-left=\"{5}\" data-plot-width=\"{6}\">\n",
      kWidth, height, r.pid, a.end_ms, bucket_ms, kLeft, kPlotWidth);
  out += kStyle;
  out += fmt::format("<text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n", kLeft,
                     escape(fmt::format("thptrace: pid {} ({}), {:.1f} s, {} fork{}", r.pid, r.comm, a.end_ms / 1e3,
                                        r.forks.size(), r.forks.size() == 1 ? "" : "s")));
  out += fmt::format(
      "<text x=\"{}\" y=\"40\" class=\"note\">{}</text>\n", kLeft,
      escape(fmt::format("kernel {}, THP {}; COW faults counted by {}; shaded: a fork's child alive{}",
                         r.system.kernel_release, r.system.thp_enabled, tracer::mode_name(r.probes.cow_fault.mode),
                         in.start_realtime_ns ? "; time: UTC, from " + rfc3339_utc(in.start_realtime_ns) : "")));

  client_panel(out, r, in, a, bucket_ms, n, client_top);

  cow_panel(out, r, in, a, bucket_ms, cow_top, parent, child);

  memory_panel(out, r, in, a, mem_top);

  // THP splits.
  const double split_hi = svg::round_up_125(*std::max_element(splits.begin(), splits.end()));
  frame(out, split_top, kSplitHeight,
        kernel_splits ? fmt::format("THP splits per {:g} ms (this process, fentry)", bucket_ms)
                      : std::string("THP splits (thp_split_pmd, the whole machine, per /proc sample)"));
  y_labels(out, split_top, kSplitHeight, split_hi, "");
  fork_bands(out, r, a, split_top, kSplitHeight, false);
  out += fmt::format("<path d=\"{}\" class=\"splits\" data-total=\"{}\"/>\n",
                     step_path(splits, bucket_ms, a, split_top + kSplitHeight, kSplitHeight / split_hi), total(splits));
  x_ticks(out, a, split_top + kSplitHeight);

  thread_panel(out, r, in, a, thread_top);

  // The replicas' syncs, as the primary's INFO showed them.
  if (!syncs.empty()) {
    frame(out, replica_top, replica_height,
          "Replica syncs: wait_bgsave (grey), send_bulk (blue), rdb channel (purple), online (green)");
    fork_bands(out, r, a, replica_top, replica_height, false);
    replica_rows(out, syncs, a, replica_top);
    x_ticks(out, a, replica_top + replica_height);
  }
  out += "</svg>\n";
  return out;
}

std::string timeline_document(const Report& r, const CaptureInputs& in, bool html) {
  if (!html) return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + timeline_svg(r, in);
  return fmt::format(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>thptrace: pid {}</title></head>\n"
      "<body style=\"margin:0;background:#fafafa\">\n{}</body></html>\n",
      r.pid, timeline_svg(r, in));
}

}  // namespace thptrace::report
