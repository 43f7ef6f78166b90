// SPDX-License-Identifier: Apache-2.0
#pragma once
// Feature probing, done once at start-up: which attach type each probe family gets on the running
// kernel, and why. Modelled on bcc's fentry_can_attach/probe_tp_btf: load (and attach) a two-
// instruction program of each kind and see whether the kernel takes it.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernel/modes.h"

namespace thptrace::tracer {

// Individual checks; each result is memoised for the life of the process.
class FeatureProbe {
 public:
  bool vmlinux_btf();
  bool fentry(const std::string& func);
  bool tp_btf(const std::string& tracepoint);
  bool raw_tp(const std::string& tracepoint);
  // BPF_CMPXCHG (Linux 5.12): loads a program that holds one.
  bool bpf_atomics();
  // BPF_MAP_TYPE_TASK_STORAGE can be created (5.11). Whether tracing programs may use it (5.13) only
  // the real programs' load tells: the Tracer then takes the *_compat build.
  bool task_storage();
  // 1 when the kernel has BPF ring buffers (5.8), 0 when it has not, < 0 when it cannot be told
  // (no privilege).
  int ringbuf();
  // Last errno-style reason of a failed check, for "why".
  const std::string& last_failure() const { return last_failure_; }

 private:
  std::string last_failure_;
};

// Which Redis processes the redis family serves: none (""), the processes of one binary (a capture:
// its exported symbols decide the family), or each followed process by its own binary (the daemon:
// Tracer::follow decides per process).
struct RedisScope {
  RedisScope() = default;
  RedisScope(std::string binary) : exe(std::move(binary)) {}  // NOLINT(google-explicit-constructor)
  RedisScope(const char* binary) : exe(binary) {}             // NOLINT(google-explicit-constructor)
  static RedisScope each_process() {
    RedisScope s;
    s.per_process = true;
    return s;
  }
  std::string exe;
  bool per_process = false;
};

// Chooses a mode per family from cheap stand-in programs: the request the Tracer's loader starts
// from. The loader loads the real programs and moves a family the kernel refuses down its chain
// (Tracer::modes() is the final answer). With force_fallback every family takes the last mode of its
// chain (raw_tp for kernel families, INFO polling for Redis) so those paths are testable on any kernel.
// disk (--disk): auto takes the disk family where fentry loads on its four system calls and leaves
// it off elsewhere: its fallback, the sys_enter/sys_exit tracepoints, puts every system call of the
// host on the kernel's slow path while attached (tests/bench/host_overhead.sh, figures in
// docs/development/measurements.md); on takes that fallback too; off never traces the disk.
enum class DiskTracing { automatic, on, off };
AttachModes choose_modes(bool force_fallback, const RedisScope& redis, DiskTracing disk = DiskTracing::automatic);
// "auto", "on" or "off" as --disk takes it; nullopt for anything else. Inline: the option parsers
// (and the fuzz targets that link them alone) need no BPF code for it.
inline std::optional<DiskTracing> disk_tracing_named(const std::string& name) {
  if (name == "auto") return DiskTracing::automatic;
  if (name == "on") return DiskTracing::on;
  if (name == "off") return DiskTracing::off;
  return std::nullopt;
}

}  // namespace thptrace::tracer
