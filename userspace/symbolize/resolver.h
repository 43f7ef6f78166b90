#pragma once
// Resolves the sampled copies of one process while it lives: the mapping an address falls in (from
// /proc/PID/maps, read when a fork starts and again on a miss) and the function of each frame of the
// call stack (elfutils' libdwfl over the same mappings, the files opened through /proc/PID/root so
// that a process in a container is read from its own filesystem). Every address is symbolized once.

#include <linux/types.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "correlate/copies.h"

struct Dwfl;

namespace thptrace::symbolize {

// One line of /proc/PID/maps.
struct Mapping {
  uint64_t start = 0, end = 0;
  std::string perms;  // "rw-p"
  uint64_t offset = 0;
  std::string path;  // "" for an anonymous mapping
};
std::vector<Mapping> parse_maps(const std::string& text);
// What a copy in a mapping is reported as: "[heap]", "[stack]" (every thread stack the kernel
// names), "anonymous" (jemalloc's arenas and other mmapped memory), or a file's name.
std::string mapping_label(const Mapping& m);

struct Frame {
  std::string function;  // the symbol, or "module+0xoffset" when the module has none there, "?" outside
  std::string module;    // the file name of the module, "" outside every module
};

class Resolver {
 public:
  explicit Resolver(pid_t pid);
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // Reads /proc/PID/maps again and reports its modules afresh (a fork starting: the mappings the
  // copies will be in).
  void refresh();
  // The mapping and the symbolized stack of one sample of this process.
  correlate::CopySample resolve(uint64_t ts_ns, uint64_t address, const __u64* stack, uint32_t frames);

 private:
  const Mapping* mapping_of(uint64_t address) const;
  // A frame's function; `return_address` frames are looked up one byte back, inside the call.
  Frame frame_of(uint64_t address, bool return_address);
  // Re-reads the maps at most this often on a miss: a burst of misses costs one read.
  void refresh_on_miss();

  pid_t pid_;
  std::string root_;  // /proc/PID/root
  std::vector<Mapping> maps_;
  std::unique_ptr<Dwfl, void (*)(Dwfl*)> dwfl_;
  std::unordered_map<uint64_t, Frame> cache_;  // by looked-up address
  uint64_t last_refresh_ns_ = 0;
};

}  // namespace thptrace::symbolize
