// SPDX-License-Identifier: Apache-2.0
// The load generator alone (loadgen_main, the code of `thptrace-bench loadgen`): the benchmark scripts
// take the binary as an argument and accept this one too.

#include "loadgen/command.h"

int main(int argc, char** argv) { return thptrace::loadgen::loadgen_main(argc, argv); }
