// SPDX-License-Identifier: Apache-2.0
#include "correlate/replicas.h"

#include <algorithm>

namespace thptrace::correlate {
namespace {

// Waiting for an RDB: Redis reports its states WAIT_BGSAVE_START, WAIT_BGSAVE_END and Redis 8's
// WAIT_RDB_CHANNEL all as wait_bgsave (replstateToString, src/server.c).
bool waiting(const std::string& state) { return state == "wait_bgsave"; }

// A child seen exiting this long before a poll that still lists its replica waiting may still be
// the one it waited for: Redis notices a child's end in serverCron (every 1000/hz ms, 100 ms by
// default), and the poll itself takes time.
constexpr uint64_t kExitNoticeNs = 300'000'000;

}  // namespace

const char* outcome_name(ReplicaSync::Outcome o) {
  switch (o) {
    case ReplicaSync::Outcome::syncing: return "syncing";
    case ReplicaSync::Outcome::online: return "online";
    case ReplicaSync::Outcome::dropped: return "dropped";
  }
  return "syncing";
}

const char* joined_name(ReplicaSync::Joined j) {
  switch (j) {
    case ReplicaSync::Joined::unknown: return "unknown";
    case ReplicaSync::Joined::rode: return "rode";
    case ReplicaSync::Joined::started: return "started";
    case ReplicaSync::Joined::waited: return "waited";
  }
  return "unknown";
}

uint64_t ReplicaSync::wait_end_ns() const {
  for (const auto& s : states)
    if (!waiting(s.state)) return s.first_seen_ns;
  return last_seen_ns;
}

void ReplicaTracker::on_snapshot(const redis::Snapshot& s) {
  const uint64_t ts = s.ts_ns;
  if (s.rdb_bgsave_in_progress) rdb_child_polls_.push_back(ts);
  std::vector<bool> listed(open_.size(), false);
  std::vector<std::string> steady_now;
  for (const auto& r : s.replicas) {
    const std::string address = r.address();
    const auto it =
        std::find_if(open_.begin(), open_.end(), [&](const ReplicaSync& o) { return o.address == address; });
    const bool was_steady = std::find(steady_.begin(), steady_.end(), address) != steady_.end();
    if (it != open_.end()) {
      const auto i = static_cast<size_t>(it - open_.begin());
      // Back to waiting after it left the wait: a new full sync (the old one failed between polls).
      if (waiting(r.state) && !waiting(it->states.back().state)) {
        close(i, ReplicaSync::Outcome::dropped);
        listed.erase(listed.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        listed[i] = true;
        if (it->states.back().state != r.state) it->states.push_back({r.state, ts});
        it->last_seen_ns = ts;
        it->offset = r.offset;
        if (r.state == "online") {
          it->online_ns = ts;
          steady_now.push_back(address);
          listed.erase(listed.begin() + static_cast<std::ptrdiff_t>(i));
          close(i, ReplicaSync::Outcome::online);
        }
        continue;
      }
    }
    if (r.state == "online" && (was_steady || !seen_poll_)) {  // in sync, or since before the capture
      steady_now.push_back(address);
      continue;
    }
    ReplicaSync n;
    n.id = next_id_++;
    n.address = address;
    n.absent_ns = seen_poll_ ? last_poll_ns_ : 0;
    n.first_seen_ns = n.last_seen_ns = ts;
    n.states.push_back({r.state, ts});
    n.offset = r.offset;
    if (r.state == "online") {  // it synced between two polls
      n.online_ns = ts;
      n.outcome = ReplicaSync::Outcome::online;
      ended_.push_back(std::move(n));
      steady_now.push_back(address);
    } else {
      open_.push_back(std::move(n));
      listed.push_back(true);
    }
  }
  // Open syncs no longer listed were dropped (the primary closed the link, or the replica gave up).
  for (size_t i = open_.size(); i-- > 0;)
    if (!listed[i]) close(i, ReplicaSync::Outcome::dropped);
  steady_ = std::move(steady_now);
  last_poll_ns_ = ts;
  seen_poll_ = true;
}

void ReplicaTracker::close(size_t i, ReplicaSync::Outcome outcome) {
  open_[i].outcome = outcome;
  ended_.push_back(std::move(open_[i]));
  open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(i));
}

void ReplicaTracker::on_fork(const ForkWindow& w) {
  for (auto& f : forks_)
    if (f.child_pid == w.child_pid) {
      if (w.fork_ts_ns) f.fork_ts_ns = w.fork_ts_ns;
      if (w.exit_ts_ns) f.exit_ts_ns = w.exit_ts_ns;
      f.may_serve = w.may_serve;
      return;
    }
  const auto at = std::upper_bound(forks_.begin(), forks_.end(), w.fork_ts_ns,
                                   [](uint64_t ts, const ForkWindow& f) { return ts < f.fork_ts_ns; });
  forks_.insert(at, w);
}

const ForkWindow* ReplicaTracker::fork_of(const ReplicaSync& s) const {
  const uint64_t from = s.absent_ns;
  const uint64_t to = s.wait_end_ns();
  const bool wait_ended =
      std::any_of(s.states.begin(), s.states.end(), [](const auto& x) { return !waiting(x.state); });
  // The state that ended the wait says whether its child had finished by then: a plain sync leaves
  // wait_bgsave only once its child's RDB is complete (send_bulk after a disk save, online after a
  // diskless stream), and so does a Valkey 8 dual-channel one (bg_transfer shows once its rdb
  // channel's line, in wait_bgsave while the child streams, is gone: the primary's log has the
  // transfer done by then), while a Redis 8 rdb-channel replica leaves it for send_bulk_and_stream
  // while its child still streams. In the first case a fork that began just before the poll that
  // saw the wait end is the next one (diskless, delay 0: the replicas that came too late for the
  // first fork get theirs as soon as it ends), not its own.
  const auto ended_by = std::find_if(s.states.begin(), s.states.end(), [](const auto& x) { return !waiting(x.state); });
  const bool child_done_at_wait_end =
      ended_by != s.states.end() &&
      (ended_by->state == "send_bulk" || ended_by->state == "online" || ended_by->state == "bg_transfer");
  // f is the last fork begun before the end of s's wait, and Redis still showed an RDB child in
  // progress between s's last absence and that end: s may have asked after f's child exited and
  // still joined its RDB (a disk sync attaches to a save Redis has not yet seen finish).
  const auto redis_still_saw = [&](size_t i) {
    if (i + 1 < forks_.size() && forks_[i + 1].fork_ts_ns <= to) return false;
    const auto p = std::lower_bound(rdb_child_polls_.begin(), rdb_child_polls_.end(), from);
    return p != rdb_child_polls_.end() && *p <= to;
  };
  const ForkWindow* best = nullptr;
  const ForkWindow* best_done = nullptr;
  for (size_t i = 0; i < forks_.size(); ++i) {
    const ForkWindow& f = forks_[i];
    if (!f.may_serve || f.fork_ts_ns > to) continue;
    if (f.exit_ts_ns && f.exit_ts_ns < from && !redis_still_saw(i)) continue;
    // Still waiting at its last poll: a child that had long exited by then was not its fork.
    if (!wait_ended && f.exit_ts_ns && f.exit_ts_ns + kExitNoticeNs < s.last_seen_ns) continue;
    if (!best || f.fork_ts_ns >= best->fork_ts_ns) best = &f;
    if (f.exit_ts_ns && f.exit_ts_ns <= to && (!best_done || f.fork_ts_ns >= best_done->fork_ts_ns)) best_done = &f;
  }
  return child_done_at_wait_end && best_done ? best_done : best;
}

ReplicaSync ReplicaTracker::with_fork(const ReplicaSync& s) const {
  ReplicaSync out = s;
  const ForkWindow* f = fork_of(s);
  if (!f) return out;
  out.child_pid = f->child_pid;
  if (f->fork_ts_ns > s.first_seen_ns) {
    out.joined = ReplicaSync::Joined::waited;
    out.wait_ms = static_cast<double>(f->fork_ts_ns - s.first_seen_ns) / 1e6;
    return out;
  }
  if (s.absent_ns == 0) return out;  // listed from the first poll: its request came before the capture
  if (f->fork_ts_ns < s.absent_ns) {
    out.joined = ReplicaSync::Joined::rode;
    return out;
  }
  // The fork began between its last absence and its first appearance. Another sync of the same fork
  // seen a poll earlier asked first: this one joined it.
  out.joined = ReplicaSync::Joined::started;
  const auto earlier = [&](const ReplicaSync& o) {
    return o.id != s.id && o.first_seen_ns < s.first_seen_ns && o.first_seen_ns >= f->fork_ts_ns && fork_of(o) == f;
  };
  if (std::any_of(ended_.begin(), ended_.end(), earlier) || std::any_of(open_.begin(), open_.end(), earlier))
    out.joined = ReplicaSync::Joined::rode;
  return out;
}

std::vector<ReplicaSync> ReplicaTracker::served_by(uint32_t child_pid) const {
  std::vector<ReplicaSync> out;
  const auto add = [&](const ReplicaSync& s) {
    const ForkWindow* f = fork_of(s);
    if (f && f->child_pid == child_pid) out.push_back(with_fork(s));
  };
  for (const auto& s : ended_) add(s);
  for (const auto& s : open_) add(s);
  std::sort(out.begin(), out.end(), [](const ReplicaSync& a, const ReplicaSync& b) { return a.id < b.id; });
  return out;
}

std::vector<ReplicaSync> ReplicaTracker::take_finished() {
  std::vector<ReplicaSync> out;
  for (; ended_taken_ < ended_.size(); ++ended_taken_) out.push_back(with_fork(ended_[ended_taken_]));
  return out;
}

std::vector<ReplicaSync> ReplicaTracker::all() const {
  std::vector<ReplicaSync> out;
  for (const auto& s : ended_) out.push_back(with_fork(s));
  for (const auto& s : open_) out.push_back(with_fork(s));
  std::sort(out.begin(), out.end(), [](const ReplicaSync& a, const ReplicaSync& b) { return a.id < b.id; });
  return out;
}

void ReplicaTracker::drop_before(uint64_t ts_ns) {
  while (ended_taken_ > 0 && !ended_.empty() && ended_.front().last_seen_ns < ts_ns) {
    ended_.pop_front();
    --ended_taken_;
  }
  std::erase_if(forks_, [ts_ns](const ForkWindow& f) { return f.exit_ts_ns && f.exit_ts_ns < ts_ns; });
  while (!rdb_child_polls_.empty() && rdb_child_polls_.front() < ts_ns) rdb_child_polls_.pop_front();
}

}  // namespace thptrace::correlate
