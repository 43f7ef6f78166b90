#pragma once
// The two pieces every hand-written SVG of thptrace needs (the bench's latency timeline, the
// capture's --svg): text escaped for XML, and axis ticks at round numbers.

#include <algorithm>
#include <cmath>
#include <string>

namespace thptrace::svg {

// s with the characters XML gives a meaning to (& < > ") written as entities.
inline std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// A tick step of 1, 2 or 5 × 10^k giving at most about ten ticks over `span`.
inline double tick_step(double span) {
  const double raw = std::max(span / 10.0, 1e-3);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

}  // namespace thptrace::svg
