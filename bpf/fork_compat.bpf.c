// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The fork family's fork and exit programs for kernels without BPF compare-and-exchange (before
 * 5.12): the same source as fork.bpf.c, built with THPTRACE_NO_ATOMICS, its programs named *_compat.
 * Userspace loads these or the originals, never both (see choose_modes). */
#define THPTRACE_NO_ATOMICS 1
#include "fork.bpf.c"
