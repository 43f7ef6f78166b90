// SPDX-License-Identifier: Apache-2.0
// latency_timeline.svg, written by hand (no plotting dependency): one panel per scenario, probe
// p99 and max per 100 ms interval on a log scale, the during phase tinted, each fork window
// (fork to child exit, from the capture) shaded, each replica's link up marked.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bench/results.h"
#include "common/svg.h"

namespace thptrace::bench {
namespace {

using svg::escape;
using svg::tick_step;

constexpr double kWidth = 1000, kLeft = 72, kRight = 24, kPanelHeight = 150, kPanelGap = 48, kTop = 64;
constexpr double kPlotWidth = kWidth - kLeft - kRight;

std::string latency_label(double us) {
  if (us >= 1e6) return fmt::format("{:g} s", us / 1e6);
  if (us >= 1e3) return fmt::format("{:g} ms", us / 1e3);
  return fmt::format("{:g} µs", us);
}

struct Point {
  double t_ms;
  double p99_us, max_us;
  bool has;
};

std::vector<Point> points_of(const ScenarioResult& r) {
  std::vector<Point> pts;
  for (const auto& p : r.phases)
    for (const auto& row : p.load.timeline) {
      const double t = static_cast<double>(p.start_ns - r.zero_ns) / 1e6 +
                       std::chrono::duration<double, std::milli>(row.offset).count() + 50.0;  // row midpoint
      pts.push_back(
          {t, static_cast<double>(row.p99_ns) / 1e3, static_cast<double>(row.max_ns) / 1e3, row.probe_count > 0});
    }
  return pts;
}

// A polyline path of one series, broken where an interval had no sample.
template <typename X, typename Y>
std::string path_of(const std::vector<Point>& pts, double Point::*series, X x, Y y) {
  std::string d;
  bool pen_down = false;
  for (const auto& p : pts) {
    if (!p.has || p.*series <= 0) {
      pen_down = false;
      continue;
    }
    d += fmt::format("{}{:.1f},{:.1f} ", pen_down ? "L" : "M", x(p.t_ms), y(p.*series));
    pen_down = true;
  }
  return d;
}

void panel(std::string& out, const ScenarioResult& r, double top) {
  const auto pts = points_of(r);
  double t_end = 1;
  double lo = 1e12, hi = 0;
  for (const auto& p : pts) {
    t_end = std::max(t_end, p.t_ms + 50);
    if (!p.has) continue;
    if (p.p99_us > 0) lo = std::min(lo, p.p99_us);
    hi = std::max(hi, p.max_us);
  }
  for (const auto& f : r.forks)
    if (f.exit_ns) t_end = std::max(t_end, (static_cast<double>(f.exit_ns) - static_cast<double>(r.zero_ns)) / 1e6);
  if (hi <= 0) lo = 10, hi = 1000;
  const double y_lo = std::pow(10.0, std::floor(std::log10(std::max(lo, 0.1))));
  double y_hi = std::pow(10.0, std::ceil(std::log10(hi)));
  if (y_hi <= y_lo * 10) y_hi = y_lo * 100;
  const double bottom = top + kPanelHeight;
  auto x = [&](double t_ms) { return kLeft + std::clamp(t_ms / t_end, 0.0, 1.0) * kPlotWidth; };
  auto y = [&](double v_us) {
    const double f = (std::log10(std::max(v_us, y_lo)) - std::log10(y_lo)) / (std::log10(y_hi) - std::log10(y_lo));
    return bottom - std::clamp(f, 0.0, 1.0) * kPanelHeight;
  };
  auto t_of = [&](uint64_t ns) { return (static_cast<double>(ns) - static_cast<double>(r.zero_ns)) / 1e6; };

  out += fmt::format("<g><text x=\"{}\" y=\"{:.1f}\" class=\"title\">{}</text>\n", kLeft, top - 10,
                     escape(r.spec.name + " — " + r.spec.description));
  out += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{}\" height=\"{}\" class=\"frame\"/>\n", kLeft, top,
                     kPlotWidth, kPanelHeight);
  // The during phase, as Redis's state bounded it.
  if (r.trigger_ns && r.done_ns > r.trigger_ns) {
    const double x0 = x(t_of(r.trigger_ns)), x1 = x(t_of(r.done_ns));
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" class=\"during\"/>\n", x0, top,
                       std::max(x1 - x0, 1.0), kPanelHeight);
  }
  // Fork windows: fork to child exit (or the end of the panel when the child outlived the capture).
  for (const auto& f : r.forks) {
    if (!f.fork_ns) continue;
    const double x0 = x(t_of(f.fork_ns));
    const double x1 = f.exit_ns ? x(t_of(f.exit_ns)) : kLeft + kPlotWidth;
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" class=\"fork\"/>\n", x0, top,
                       std::max(x1 - x0, 2.0), kPanelHeight);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"forklabel\">fork: {}</text>\n", x0 + 3, top + 12,
                       escape(f.reason));
  }
  // Each replica's link up (its own master_link_status, the bench's poll): when it came online.
  for (size_t i = 0; i < r.replica_link_up_ns.size(); ++i) {
    if (!r.replica_link_up_ns[i]) continue;
    const double xu = x(t_of(r.replica_link_up_ns[i]));
    out += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" class=\"online\"/>\n", xu,
                       top, bottom);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"onlinelabel\">{}up</text>\n", xu + 2,
                       top + 24 + 11 * static_cast<double>(i),
                       r.replica_link_up_ns.size() > 1 ? fmt::format("replica {} ", i + 1) : std::string("replica "));
  }
  // Decade grid and labels.
  for (double v = y_lo; v <= y_hi * 1.001; v *= 10) {
    out += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>\n", kLeft,
                       kLeft + kPlotWidth, y(v), y(v));
    out +=
        fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"ylabel\">{}</text>\n", kLeft - 6, y(v) + 4, latency_label(v));
  }
  const double step = tick_step(t_end / 1000.0);
  for (double s = 0; s * 1000.0 <= t_end; s += step)
    out +=
        fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"xlabel\">{:g} s</text>\n", x(s * 1000.0), bottom + 14, s);
  // Phase boundaries and names.
  for (size_t i = 0; i < r.phases.size(); ++i) {
    const double x0 = x(t_of(r.phases[i].start_ns));
    if (i > 0)
      out += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" class=\"phase\"/>\n", x0, x0,
                         top, bottom);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"phaselabel\">{}</text>\n", x0 + 3, bottom - 4,
                       escape(r.phases[i].name));
  }
  out += fmt::format("<path d=\"{}\" class=\"max\"/>\n", path_of(pts, &Point::max_us, x, y));
  out += fmt::format("<path d=\"{}\" class=\"p99\"/>\n</g>\n", path_of(pts, &Point::p99_us, x, y));
}

}  // namespace

std::string timeline_svg(const std::vector<ScenarioResult>& results) {
  const size_t n = std::max<size_t>(results.size(), 1);
  const double height = kTop + static_cast<double>(n) * (kPanelHeight + kPanelGap) + 10;
  std::string out = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{:.0f}\" viewBox=\"0 0 {} {:.0f}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n",
      kWidth, height, kWidth, height);
  out +=
      "<style>\n"
      ".title{font-size:12px;font-weight:bold;fill:#222}\n"
      ".frame{fill:#fff;stroke:#999;stroke-width:1}\n"
      ".grid{stroke:#e4e4e4;stroke-width:1}\n"
      ".during{fill:#fbeec2;opacity:0.7}\n"
      ".fork{fill:#f28e2b;opacity:0.35}\n"
      ".forklabel{fill:#a0520c;font-size:10px}\n"
      ".phase{stroke:#888;stroke-dasharray:4 3;stroke-width:1}\n"
      ".phaselabel{fill:#666;font-size:10px}\n"
      ".ylabel{text-anchor:end;fill:#444;font-size:10px}\n"
      ".xlabel{text-anchor:middle;fill:#444;font-size:10px}\n"
      ".p99{fill:none;stroke:#1f77b4;stroke-width:1.6}\n"
      ".max{fill:none;stroke:#d62728;stroke-width:0.9;opacity:0.8}\n"
      ".online{stroke:#2ca02c;stroke-width:1.4}\n"
      ".onlinelabel{fill:#1b6e1b;font-size:10px}\n"
      "</style>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#fafafa\"/>\n";
  out += fmt::format(
      "<text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">Probe latency per 100 ms interval "
      "(log scale)</text>\n",
      kLeft);
  // Legend.
  const double ly = 42;
  out += fmt::format(
      "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\" class=\"p99\"/><text x=\"{3}\" y=\"{4}\">p99</text>\n"
      "<line x1=\"{5}\" x2=\"{6}\" y1=\"{2}\" y2=\"{2}\" class=\"max\"/><text x=\"{7}\" y=\"{4}\">max</text>\n"
      "<rect x=\"{8}\" y=\"{9}\" width=\"18\" height=\"10\" class=\"during\"/><text x=\"{10}\" y=\"{4}\">during "
      "phase (Redis state)</text>\n"
      "<rect x=\"{11}\" y=\"{9}\" width=\"18\" height=\"10\" class=\"fork\"/><text x=\"{12}\" y=\"{4}\">fork child "
      "alive (tracer)</text>\n"
      "<line x1=\"{13}\" x2=\"{13}\" y1=\"{9}\" y2=\"{14}\" class=\"online\"/><text x=\"{15}\" y=\"{4}\">replica "
      "link up</text>\n",
      kLeft, kLeft + 24, ly, kLeft + 28, ly + 4, kLeft + 70, kLeft + 94, kLeft + 98, kLeft + 140, ly - 5, kLeft + 162,
      kLeft + 330, kLeft + 352, kLeft + 520, ly + 5, kLeft + 526);
  for (size_t i = 0; i < results.size(); ++i)
    panel(out, results[i], kTop + 24 + static_cast<double>(i) * (kPanelHeight + kPanelGap));
  if (results.empty()) out += fmt::format("<text x=\"{}\" y=\"{}\">no scenario finished</text>\n", kLeft, kTop + 40);
  out += "</svg>\n";
  return out;
}

}  // namespace thptrace::bench
