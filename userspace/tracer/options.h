// SPDX-License-Identifier: Apache-2.0
#pragma once
// The flags (and config-file keys) that say how the kernel side is loaded, the same in the capture
// and the daemon: --force-fallback, --disk and --ringbuf-kb. Inline, as disk_tracing_named is: the
// option parsers (and the fuzz targets that link them alone) need no BPF code for them.

#include <boost/program_options.hpp>
#include <cstddef>
#include <string>

#include "common/error.h"
#include "tracer/probe.h"

namespace thptrace::tracer {

struct LoadFlags {
  bool force_fallback = false;  // every family in its fallback mode
  DiskTracing disk = DiskTracing::automatic;
  size_t ringbuf_kb = 256;
};

inline void add_load_options(boost::program_options::options_description& desc) {
  namespace po = boost::program_options;
  desc.add_options()("force-fallback", "use the fallback attach mode of every probe family")(
      "disk", po::value<std::string>()->default_value("auto"),
      "fsync and AOF write tracing: auto (where fentry loads on the system calls), on (also through the "
      "sys_enter/sys_exit tracepoints, which slow every system call of the host), off")(
      "ringbuf-kb", po::value<size_t>()->default_value(256), "ring buffer size, KiB");
}

// The flags from parsed options; FatalError (usage) with one sentence for a bad value.
inline LoadFlags load_flags(const boost::program_options::variables_map& vm) {
  LoadFlags f;
  f.force_fallback = vm.count("force-fallback") > 0;
  const auto disk = disk_tracing_named(vm["disk"].as<std::string>());
  if (!disk) throw FatalError(kExitUsage, "--disk: expected auto, on or off.");
  f.disk = *disk;
  f.ringbuf_kb = vm["ringbuf-kb"].as<size_t>();
  if (f.ringbuf_kb < 4 || f.ringbuf_kb > 1024 * 1024)
    throw FatalError(kExitUsage, "--ringbuf-kb: expected 4 to 1048576.");
  return f;
}

}  // namespace thptrace::tracer
