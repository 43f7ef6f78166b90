// A stand-in for `thptrace loadgen` until the thptrace binary exists: the benchmark scripts take
// the binary as an argument, and this one runs the same loadgen_main.

#include "loadgen/command.h"

int main(int argc, char** argv) { return thptrace::loadgen::loadgen_main(argc, argv); }
