// SPDX-License-Identifier: Apache-2.0
#include "common/companion.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <system_error>

namespace thptrace {

namespace {

bool is_executable_file(const std::filesystem::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

}  // namespace

std::optional<std::filesystem::path> find_companion(std::string_view name) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec && self.is_absolute()) {
    const auto beside = self.parent_path() / name;
    if (is_executable_file(beside)) return beside;
  }
  const char* path = std::getenv("PATH");
  const std::string_view dirs = path ? path : "";
  for (size_t start = 0; start <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::filesystem::path dir(dirs.substr(start, end - start));
    if (dir.is_absolute() && is_executable_file(dir / name)) return dir / name;
    start = end + 1;
  }
  return std::nullopt;
}

}  // namespace thptrace
