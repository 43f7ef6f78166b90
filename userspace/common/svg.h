// SPDX-License-Identifier: Apache-2.0
#pragma once
// What every hand-written SVG of thptrace needs (the bench's latency timeline, the capture's
// --svg): text escaped for XML, and round numbers for axes.

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "common/text.h"

namespace thptrace::svg {

// s as XML text or an attribute value: whatever bytes it holds (a process name, a Redis address),
// the result is valid UTF-8 with no markup and no character XML 1.0 forbids (common/text.h).
inline std::string escape(std::string_view s) { return text::xml_escape(s); }

// The smallest 1, 2 or 5 × 10^k at or above v (1 for v <= 0): round axis tops, steps and widths.
inline double round_up_125(double v) {
  if (v <= 0) return 1;
  const double mag = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= v) return m * mag;
  return 10 * mag;
}

// A tick step of 1, 2 or 5 × 10^k giving at most about ten ticks over `span`.
inline double tick_step(double span) { return round_up_125(std::max(span / 10.0, 1e-3)); }

}  // namespace thptrace::svg
