// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared by the fuzz targets: an invariant check that stays on in every build type (assert() would
// vanish under NDEBUG) and aborts, which libFuzzer reports as a crash with the input that broke it.

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)
