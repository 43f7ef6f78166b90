// SPDX-License-Identifier: Apache-2.0
#pragma once
// Resolves the sampled copies of one process while it lives: the mapping an address falls in (from
// /proc/PID/maps, read when a fork starts and again on a miss) and the function of each frame of the
// call stack (elfutils' libdwfl over the same mappings). Files are opened as the process sees them,
// and only safely (proc/foreign_file.h): a process in a container is read from its own filesystem,
// never a host file it links to. Debug files are looked up by build id in the process's root, then
// the host's /usr/lib/debug; debuginfod only when asked (ResolverOptions::debuginfod). Every address
// is symbolized once.

#include <linux/types.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/user_context.h"
#include "correlate/copies.h"
#include "proc/maps.h"

struct Dwfl;

namespace thptrace::symbolize {

using proc::Mapping;
inline std::vector<Mapping> parse_maps(std::string_view text) { return proc::parse_maps(text); }
// What a copy in a mapping is reported as: "[heap]", "[stack]" (every thread stack the kernel
// names), "anonymous" (jemalloc's arenas and other mmapped memory), or a file's name.
std::string mapping_label(const Mapping& m);

struct Frame {
  std::string function;  // the symbol, or "module+0xoffset" when the module has none there, "?" outside
  std::string module;    // the file name of the module, "" outside every module
};

struct ResolverOptions {
  // Ask the debuginfod servers of DEBUGINFOD_URLS for debug files this host and the process lack.
  bool debuginfod = false;
};

// Where a module's files are: the process and one of the module's mappings (map_files).
struct ModuleSource {
  pid_t pid = 0;
  bool debuginfod = false;
  proc::MappedRange range;
  std::string path;  // as the process names it
};

class Resolver {
 public:
  explicit Resolver(pid_t pid, ResolverOptions options = {});
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // Reads /proc/PID/maps again and reports its modules afresh (a fork starting: the mappings the
  // copies will be in).
  void refresh();
  // The mapping and the symbolized stack of one sample of this process: the kernel's frame-pointer
  // walk, or, where that stops short and the sample carries the thread's registers and top of stack
  // (`user`), the unwind from the binaries' .eh_frame (libdwfl), when it reaches further.
  correlate::CopySample resolve(uint64_t ts_ns, uint64_t address, const __u64* stack, uint32_t frames,
                                const UserContext* user = nullptr);

  // What libdwfl's unwinder reads through its callbacks: the process, and the sample being unwound.
  struct Unwinding {
    pid_t pid = 0;
    const UserContext* user = nullptr;
    bool attached = false;  // dwfl_attach_state succeeded
  };

 private:
  const Mapping* mapping_of(uint64_t address) const;
  // A frame's function; `return_address` frames are looked up one byte back, inside the call.
  Frame frame_of(uint64_t address, bool return_address);
  // Re-reads the maps at most this often on a miss: a burst of misses costs one read.
  void refresh_on_miss();
  // The return addresses of one sample unwound from .eh_frame (the faulting ip first); empty when
  // the unwinder cannot be attached.
  std::vector<std::pair<uint64_t, bool>> unwind(const UserContext& user);
  // The frames of a walk (address, is a return address), as resolve() reports them; *whole: it
  // reached the start of the thread, or gave kWholeStackFrames resolved frames.
  std::vector<std::string> frames_of(const std::vector<std::pair<uint64_t, bool>>& walk, std::string* leaf_module,
                                     bool* whole);

  pid_t pid_;
  ResolverOptions options_;
  // The process's own binary as its operator knows it: the command name, then the file (the target
  // of a symlink such as Debian's redis-server -> redis-check-rdb) in parentheses; exe_command_ the
  // command name alone, which names its unsymbolized frames and its data mapping.
  std::string exe_name_, exe_label_, exe_command_;
  // The name a module or mapping file is shown by: the command's for the process's own binary.
  const std::string& shown_name(const std::string& file_name) const;
  std::vector<Mapping> maps_;
  // What each reported module's find_elf and find_debuginfo read (their userdata): replaced as a
  // whole on each refresh, after the modules are reported again.
  std::vector<std::unique_ptr<ModuleSource>> sources_;
  std::unique_ptr<Dwfl, void (*)(Dwfl*)> dwfl_;
  std::unordered_map<uint64_t, Frame> cache_;  // by looked-up address
  std::unique_ptr<Unwinding> unwinding_;       // a stable address for libdwfl's callbacks
  uint64_t last_refresh_ns_ = 0;
  bool unwind_warned_ = false;  // an unwind that failed has been logged
};

}  // namespace thptrace::symbolize
