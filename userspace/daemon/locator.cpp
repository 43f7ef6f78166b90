// SPDX-License-Identifier: Apache-2.0
#include "daemon/locator.h"

#include <linux/capability.h>

#include <string>
#include <utility>

#include "common/caps.h"
#include "proc/proc.h"
#include "redis/locate.h"

namespace thptrace::daemon {

bool LocatePacing::try_start(Clock::time_point now) {
  if (in_flight_ || (last_start_ && now < *last_start_ + every_)) return false;
  in_flight_ = true;
  last_start_ = now;
  return true;
}

bool TargetLocate::hold(redis::Snapshot& s) {
  if (!awaiting_first_ || !pacing.in_flight() || held_.size() >= kMaxHeld) return false;
  held_.push_back(std::move(s));
  return true;
}

std::vector<redis::Snapshot> TargetLocate::release() {
  awaiting_first_ = false;
  return take_held();
}

TargetLocate::Tell TargetLocate::failed(const std::string& error) {
  Tell tell = Tell::nothing;
  if (error != last_error_) {
    tell = Tell::debug;
  } else if (!error_told_) {
    tell = Tell::warn;
    error_told_ = true;
  }
  last_error_ = error;
  return tell;
}

void TargetLocate::found() {
  last_error_.clear();
  error_told_ = false;
}

Locator::~Locator() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    queue_.clear();
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Locator::submit(Request r) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(r));
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  wake_.notify_all();
}

std::vector<Locator::Result> Locator::take() {
  std::lock_guard lock(mu_);
  return std::exchange(done_, {});
}

void Locator::run() {
  // This thread reads a server's replies: it holds only what finding the server's process takes,
  // reading other users' /proc/PID/fd (effective), and entering a container's network namespace
  // (CAP_SYS_ADMIN, raised by the transport around setns only).
  if (std::string why;
      !restrict_this_thread("thptrace-locate", {CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_SYS_ADMIN}, &why))
    warn_unrestricted("thptrace-locate", why);
  set_effective({CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH}, true);
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Request r = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Result out{.target = r.target, .process_id = r.process_id, .found = locate(r)};
    lock.lock();
    done_.push_back(std::move(out));
  }
}

proc::Resolution locate(const Locator::Request& r) {
  proc::Resolution found{.pid = 0, .how = {}, .error = "no TCP route to ask CLIENT INFO on"};
  if (r.tcp) {
    redis::ConnectOptions options = r.connect;
    options.tls = r.tcp->tls;
    if (r.tcp->outside) options.netns_pid = 0;
    found = redis::locate_server(r.tcp->address, options);
  }
  if (!found.pid && r.process_id > 0) {
    // A unix socket only, or the socket tables said nothing: process_id is the server's pid when it
    // is a process of our own PID namespace (NSpid has that one entry).
    const auto ns =
        proc::parse_nspid(proc::read_file("/proc/" + std::to_string(r.process_id) + "/status").value_or(""));
    if (ns.size() == 1 && ns.front() == r.process_id)
      found = {.pid = static_cast<pid_t>(r.process_id),
               .how = "INFO's process_id, a process of our PID namespace",
               .error = {}};
  }
  return found;
}

}  // namespace thptrace::daemon
