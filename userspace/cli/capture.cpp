#include "cli/capture.h"

#include <cstdlib>
#include <fstream>
#include <iostream>

#include "cli/session.h"
#include "common/error.h"
#include "common/log.h"
#include "report/report.h"
#include "report/timeline.h"

namespace thptrace::cli {

int run_capture(const CaptureOptions& o) {
  const CaptureTarget target = validate_capture(o);
  CaptureSession session(o, target);
  const report::CaptureInputs inputs = session.run();
  if (const char* path = std::getenv("THPTRACE_RECORD_INPUTS"))
    std::ofstream(path) << report::inputs_to_json(inputs).dump(1, ' ', false,
                                                               nlohmann::ordered_json::error_handler_t::replace)
                        << "\n";
  const report::Report r = report::assemble(inputs);
  std::cout << report::to_text(r) << std::flush;
  int code = kExitOk;
  if (std::string error; !o.json_path.empty() && !report::write_json_file(r, o.json_path, &error)) {
    log::warn("{}", error);
    code = kExitRuntime;
  }
  if (!o.svg_path.empty()) {
    const bool html = o.svg_path.ends_with(".html");
    if (std::string error;
        !report::write_file_atomically(o.svg_path, report::timeline_document(r, inputs, html), &error)) {
      log::warn("{}", error);
      code = kExitRuntime;
    }
  }
  return code;
}

}  // namespace thptrace::cli
