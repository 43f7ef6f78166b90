// SPDX-License-Identifier: Apache-2.0
#pragma once
// The host state a bench run may change (the system THP mode) and the signals that must not leave
// it changed. The mode is restored by ThpMode's destructor (normal end, error), by the signal
// handlers themselves (SIGINT/SIGTERM/SIGHUP, and before a fatal SIGSEGV/SIGABRT/SIGBUS kills us)
// and at exit(); only SIGKILL can leave it changed.

#include <atomic>
#include <string>

namespace thptrace::bench {

// Routes SIGINT, SIGTERM and SIGHUP to interrupted() for the lifetime of the object; a second
// such signal ends the process at once (after restoring the THP mode). Restores the previous
// handlers on destruction.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  static const std::atomic<bool>& interrupted();
};

// Owns the system THP mode (/sys/kernel/mm/transparent_hugepage/enabled) for a run: remembers
// the host's mode on construction and puts it back on destruction, on signals and at exit.
// One at a time.
class ThpMode {
 public:
  static bool writable();
  // The bracketed word of the file ("always", "madvise", "never"), "" when absent.
  static std::string current();

  ThpMode();
  ~ThpMode();
  ThpMode(const ThpMode&) = delete;
  ThpMode& operator=(const ThpMode&) = delete;

  // Writes `mode`; throws BenchError when the kernel refuses it or a signal already asked us to
  // stop (the handler restored the host's mode, and we must not undo that).
  void set(const std::string& mode);
  void restore();
  const std::string& host_mode() const { return saved_; }

 private:
  std::string saved_;
};

}  // namespace thptrace::bench
