// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "loadgen/loadgen.h"

namespace thptrace::loadgen {

// Bad command-line usage is thptrace::UsageError (exit 2); what() is one sentence, printed before
// "see --help".

// The parsed `thptrace loadgen` command line.
struct LoadgenCommand {
  LoadgenOptions options;
  bool load = true;
  // Load the dataset, then exit without a run.
  bool load_only = false;
  bool help = false;
  // Read (first line) into options.connection.password by loadgen_main, not by the parser.
  std::filesystem::path password_file;
  std::filesystem::path csv_path;
  std::filesystem::path json_path;
};

// Parses the flags (argv[0], the command's name, is skipped). Throws UsageError.
LoadgenCommand parse_loadgen_command(int argc, const char* const* argv);

// The --help text.
std::string loadgen_usage();

// `thptrace loadgen`: loads the dataset unless --no-load, runs the probe and writers, prints a
// summary on stdout, a live progress line on stderr when stderr is a terminal, and writes
// --csv/--json. Returns 0 on success, 1 on a runtime failure (cannot connect, connection lost,
// cannot write a result file) and 2 on bad usage, each failure printed as one sentence on
// stderr. SIGINT/SIGTERM end the run early (results are still written); SIGPIPE is ignored.
int loadgen_main(int argc, char** argv);

}  // namespace thptrace::loadgen
