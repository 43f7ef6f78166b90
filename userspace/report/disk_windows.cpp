// SPDX-License-Identifier: Apache-2.0
#include "report/disk_windows.h"

namespace thptrace::report {

DiskWindows::DiskWindows(uint32_t pid, CaptureInputs& in, size_t capacity) : pid_(pid), in_(in), log_(capacity) {
  in_.disk_summarised = true;
}

bool DiskWindows::on_event(const thptrace_event& e) {
  if (e.type == EV_DISK) {
    if (e.tgid == pid_)
      if (const auto c = correlate::disk_call(e)) log_.add(*c);
    return true;
  }
  if (e.type == EV_FORK && e.tgid == pid_) open_[e.child_pid] = e.ts_ns;
  if (e.type == EV_CHILD_EXIT && e.episode.parent_tgid == pid_ && e.episode.exit_ts_ns) {
    open_.erase(e.child_pid);
    closed_.push_back({e.episode.fork_ts_ns, e.episode.exit_ts_ns});
  }
  return false;
}

void DiskWindows::settle(uint64_t now_ns) {
  std::erase_if(closed_, [&](const correlate::Window& w) {
    if (w.to_ns + kDiskSettleNs > now_ns) return false;
    summarise(w);
    return true;
  });
}

void DiskWindows::finish(const std::vector<thptrace_episode>& final_episodes) {
  for (const auto& w : closed_) summarise(w);
  closed_.clear();
  for (const auto& ep : final_episodes) {
    if (ep.parent_tgid != pid_) continue;
    summarise({ep.fork_ts_ns, ep.exit_ts_ns ? ep.exit_ts_ns : in_.end_ns});
    open_.erase(ep.child_pid);
  }
  for (const auto& [child, fork_ts] : open_) summarise({fork_ts, in_.end_ns});
  open_.clear();
  in_.disk_calls_dropped = log_.dropped();
}

void DiskWindows::summarise(const correlate::Window& w) {
  const auto add = [&](const correlate::Window& x) {
    for (const auto& d : in_.disk_windows)
      if (d.window == x) return;
    in_.disk_windows.push_back({x, log_.window(x)});
  };
  add(w);
  if (const auto before = w.before(in_.start_ns)) add(*before);
}

}  // namespace thptrace::report
