// SPDX-License-Identifier: Apache-2.0
#pragma once
// thptrace and thptrace-bench are two binaries installed side by side: the privileged one carries
// no load generator, and each runs the other for the commands it does not hold.

#include <filesystem>
#include <optional>
#include <string_view>

namespace thptrace {

// The executable `name` installed with this one: in the directory of /proc/self/exe, else in the
// first PATH directory that has it. Only absolute PATH entries count (an empty or relative entry
// means the current directory, which a root process must not run programs from). nullopt when no
// executable regular file of that name is found.
std::optional<std::filesystem::path> find_companion(std::string_view name);

}  // namespace thptrace
