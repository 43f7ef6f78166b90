// SPDX-License-Identifier: Apache-2.0
#pragma once
// `thptrace --pid PID --svg PATH`: the capture drawn over time, for a person to look at the fork
// windows rather than read them (docs/guide/timeline.md says what each panel shows).

#include <string>

#include "report/inputs.h"
#include "report/report.h"

namespace thptrace::report {

// The SVG element (no XML declaration). Faults per time bucket come from inputs.counters, read by a
// capture with --svg; without them the fault panel says so.
std::string timeline_svg(const Report& r, const CaptureInputs& inputs);
// A file's content: a standalone SVG document, or an HTML page around it when html.
std::string timeline_document(const Report& r, const CaptureInputs& inputs, bool html);

}  // namespace thptrace::report
