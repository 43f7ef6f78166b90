// SPDX-License-Identifier: Apache-2.0
// thptrace-bench: the load generator and the experiments, a binary apart from thptrace so that the
// one that runs with CAP_BPF on every host carries neither. `thptrace loadgen|bench ...` run this
// with the same arguments; the experiments run the thptrace installed beside it for each capture.
#include <fmt/core.h>

#include <cstring>
#include <exception>
#include <iostream>

#include "bench/bench.h"
#include "loadgen/command.h"
#include "thptrace/version.h"

using namespace thptrace;

namespace {

const char* kUsage =
    "usage: thptrace-bench bench [--scenarios LIST] [--keys N] [--server PATH] ...   (thptrace-bench bench --help)\n"
    "       thptrace-bench loadgen [--host HOST] [--port PORT] [--rate N] ...         (thptrace-bench loadgen --help)\n"
    "       thptrace-bench --help | --version\n"
    "  (also run as `thptrace bench ...` and `thptrace loadgen ...`)\n";

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && std::strcmp(argv[1], "loadgen") == 0) return loadgen::loadgen_main(argc - 1, argv + 1);
    if (argc >= 2 && std::strcmp(argv[1], "bench") == 0) return bench::bench_main(argc - 1, argv + 1);
    if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
      std::cout << kUsage;
      return 0;
    }
    if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
      std::cout << "thptrace-bench " << kVersion << "\n";
      return 0;
    }
    if (argc < 2) {
      std::cerr << kUsage;
      return 2;
    }
    fmt::print(stderr, "thptrace-bench: unknown command '{}': expected bench or loadgen (see thptrace-bench --help).\n",
               argv[1]);
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "thptrace-bench: unexpected error: {}\n", e.what());
    return 1;
  }
}
