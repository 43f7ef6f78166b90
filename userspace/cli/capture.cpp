// SPDX-License-Identifier: Apache-2.0
#include "cli/capture.h"

#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>

#include "cli/session.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/log.h"
#include "report/report.h"
#include "report/timeline.h"

namespace thptrace::cli {
namespace {

// Writes one file the operator asked for. A writer that fails, or throws on a value it cannot
// write, costs its own file only: one sentence on stderr, false, and the other files are written.
bool write_output(const char* what, const std::string& path, const std::function<std::string()>& render) {
  std::string error;
  try {
    if (write_file_atomically(path, render(), &error)) return true;
  } catch (const std::exception& e) {
    error = e.what();
  }
  log::warn("cannot write {} to {}: {}.", what, path, error);
  return false;
}

}  // namespace

int run_capture(const CaptureOptions& o) {
  const CaptureTarget target = validate_capture(o);
  CaptureSession session(o, target);
  const report::CaptureInputs inputs = session.run();
  int code = kExitOk;
  if (const char* path = std::getenv("THPTRACE_RECORD_INPUTS"))
    if (!write_output("the recorded inputs", path, [&] {
          return report::inputs_to_json(inputs).dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) +
                 "\n";
        }))
      code = kExitRuntime;
  const report::Report r = report::assemble(inputs);
  try {
    std::cout << report::to_text(r) << std::flush;
  } catch (const std::exception& e) {
    log::warn("cannot print the text report: {}.", e.what());
    code = kExitRuntime;
  }
  if (!o.json_path.empty() && !write_output("the JSON report", o.json_path, [&] { return report::json_text(r); }))
    code = kExitRuntime;
  if (!o.svg_path.empty() && !write_output("the timeline", o.svg_path, [&] {
        return report::timeline_document(r, inputs, o.svg_path.ends_with(".html"));
      }))
    code = kExitRuntime;
  return code;
}

}  // namespace thptrace::cli
