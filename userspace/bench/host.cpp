// SPDX-License-Identifier: Apache-2.0
#include "bench/host.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "bench/bench.h"
#include "proc/proc.h"

namespace thptrace::bench {
namespace {

// Read by signal handlers, so plain static storage and lock-free atomics only.
std::atomic<bool> g_interrupted{false};
std::atomic<bool> g_thp_changed{false};
char g_thp_saved[32];
size_t g_thp_saved_len = 0;
static_assert(std::atomic<bool>::is_always_lock_free);

// Async-signal-safe: open, write, close.
void restore_thp_now() noexcept {
  if (!g_thp_changed.load()) return;
  const int fd = ::open(proc::kThpEnabledPath, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  if (::write(fd, g_thp_saved, g_thp_saved_len) == static_cast<ssize_t>(g_thp_saved_len)) g_thp_changed.store(false);
  ::close(fd);
}

void on_stop_signal(int sig) {
  restore_thp_now();
  if (g_interrupted.exchange(true)) {
    // The second Ctrl-C: stop waiting for a clean unwind. Our children get their parent-death
    // signal (redis-server SIGKILL, the capture SIGTERM).
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

void on_fatal_signal(int sig) {
  restore_thp_now();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void restore_at_exit() { restore_thp_now(); }

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr int kFatalSignals[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL};

}  // namespace

StopSignals::StopSignals() {
  g_interrupted.store(false);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  for (int sig : kStopSignals) ::sigaction(sig, &action, nullptr);
  action.sa_handler = on_fatal_signal;
  for (int sig : kFatalSignals) ::sigaction(sig, &action, nullptr);
}

StopSignals::~StopSignals() {
  for (int sig : kStopSignals) ::signal(sig, SIG_DFL);
  for (int sig : kFatalSignals) ::signal(sig, SIG_DFL);
}

const std::atomic<bool>& StopSignals::interrupted() { return g_interrupted; }

bool ThpMode::writable() { return ::access(proc::kThpEnabledPath, W_OK) == 0; }

std::string ThpMode::current() {
  return proc::parse_bracketed_mode(proc::read_file(proc::kThpEnabledPath).value_or(""));
}

ThpMode::ThpMode() : saved_(current()) {
  if (saved_.empty() || saved_.size() >= sizeof g_thp_saved)
    throw BenchError(fmt::format("cannot read the THP mode from {}", proc::kThpEnabledPath));
  std::memcpy(g_thp_saved, saved_.data(), saved_.size());
  g_thp_saved_len = saved_.size();
  static bool hooked = false;
  if (!hooked) {
    std::atexit(restore_at_exit);
    hooked = true;
  }
}

ThpMode::~ThpMode() { restore(); }

void ThpMode::set(const std::string& mode) {
  if (g_interrupted.load()) throw Interrupted();
  // Marked changed before the write: a signal arriving in between then restores, never misses.
  g_thp_changed.store(true);
  const int fd = ::open(proc::kThpEnabledPath, O_WRONLY | O_CLOEXEC);
  const bool ok = fd >= 0 && ::write(fd, mode.data(), mode.size()) == static_cast<ssize_t>(mode.size());
  const int e = errno;
  if (fd >= 0) ::close(fd);
  if (!ok) {
    restore();
    throw BenchError(
        fmt::format("cannot set the THP mode to {} in {}: {}", mode, proc::kThpEnabledPath, std::strerror(e)));
  }
  if (g_interrupted.load()) {
    restore();
    throw Interrupted();
  }
}

void ThpMode::restore() {
  // Unconditional: a signal may have restored the mode between set()'s flag and its write.
  g_thp_changed.store(true);
  restore_thp_now();
}

}  // namespace thptrace::bench
