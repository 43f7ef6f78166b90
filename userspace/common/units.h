// SPDX-License-Identifier: Apache-2.0
#pragma once
// Sizes in one place: the page a copy-on-write fault copies, and MiB as every report writes them.

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace thptrace {

// A copy on write copies one base page, whatever maps it (a write to a huge page after fork splits
// its PMD first, since Linux 5.8): 4 KiB on x86_64. The kernel counts faults; bytes are faults times
// this.
inline constexpr uint64_t kPageBytes = 4096;

inline constexpr uint64_t kMiB = uint64_t{1} << 20;

// "12.3 MiB".
inline std::string mib_text(double bytes) { return fmt::format("{:.1f} MiB", bytes / static_cast<double>(kMiB)); }

}  // namespace thptrace
