// SPDX-License-Identifier: Apache-2.0
// The symbolizer reads the file a process maps, not what its path has become: here a copy of this
// test binary, mapped, whose path then leads to a FIFO (a tmpfs mounted over its directory, in a
// mount namespace of a child's own): an open for reading of it would never return.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "correlate/copies.h"
#include "proc/maps.h"
#include "proc/proc.h"
#include "symbolize/resolver.h"

namespace fs = std::filesystem;
using namespace thptrace;

namespace {

// In the child: 0 when the frame in the mapped copy is named, else a code saying which step failed.
int symbolize_copy_behind_a_fifo(const fs::path& self, const fs::path& dir) {
  if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 10;
  const fs::path copy = dir / "copy";
  fs::copy_file(self, copy);
  const int fd = ::open(copy.c_str(), O_RDONLY | O_CLOEXEC);
  const auto size = static_cast<size_t>(fs::file_size(copy));
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) return 11;
  if (::mount("none", dir.c_str(), "tmpfs", 0, nullptr) != 0 || ::mkfifo(copy.c_str(), 0600) != 0) return 12;
  // is_stack_root in the copy: at the same offset from its start as in this process's image (a PIE
  // whose segments' addresses are their file offsets, mapped whole here).
  uint64_t ours = 0;
  for (const auto& m : proc::parse_maps(proc::read_file("/proc/self/maps", 16 << 20).value_or("")))
    if (m.offset == 0 && fs::path(m.path) == self) ours = ours ? ours : m.start;
  if (!ours) return 13;
  const uint64_t address =
      reinterpret_cast<uint64_t>(base) + (reinterpret_cast<uint64_t>(&correlate::is_stack_root) - ours);
  symbolize::Resolver r(::getpid());
  const __u64 stack[] = {address};
  const auto s = r.resolve(1, address, stack, 1);
  std::fprintf(stderr, "mapping %s, frame %s\n", s.mapping.c_str(), s.frames.empty() ? "-" : s.frames[0].c_str());
  if (s.mapping != "copy" || s.frames.size() != 1) return 14;
  return s.frames[0].find("is_stack_root") != std::string::npos ? 0 : 15;
}

}  // namespace

// Needs CAP_SYS_ADMIN (a mount namespace, and map_files): skipped without.
TEST(SymbolizeForeign, AMappedFileWhosePathNowLeadsToAFifo) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: a mount namespace and /proc/PID/map_files";
  const fs::path self = fs::read_symlink("/proc/self/exe");
  // Where the copy may be mapped executable: /tmp may be noexec, the build tree is not.
  std::string tmpl = (self.parent_path() / "thptrace-resolver.XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const fs::path dir = tmpl;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(symbolize_copy_behind_a_fifo(self, dir));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  fs::remove_all(dir);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10 namespace, 11 mmap, 12 mount, 13 own image, 14 no frame, 15 not named";
}
