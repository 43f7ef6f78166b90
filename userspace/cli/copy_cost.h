// SPDX-License-Identifier: Apache-2.0
#pragma once
// The cost of one copy-on-write fault on this host, measured before a capture starts: where the
// kernel does not let thptrace time its faults (the tracepoint modes), a fork's copy stall is its
// copies times this, said to be an estimate.

#include <cstddef>
#include <optional>
#include <string>

namespace thptrace::cli {

// Populates a private anonymous region of `pages` 4 KiB pages (no huge pages), forks, and times the
// parent's first write to every page while the child waits, by the thread's CPU clock: each write
// copies a page, and the time the thread waited for a CPU is not counted. Takes the median of
// `rounds` such runs, each on a region of its own. Returns CPU ns per copy, or nullopt with *why.
std::optional<double> measure_copy_ns(size_t pages, int rounds, std::string* why);

}  // namespace thptrace::cli
