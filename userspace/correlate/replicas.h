// SPDX-License-Identifier: Apache-2.0
#pragma once
// The replicas' full syncs as the primary's INFO replication shows them, poll after poll: each
// replica's sync from its first appearance (its request) through each state it was seen in
// (wait_bgsave, send_bulk, online; Redis 8 send_bulk_and_stream; Valkey 8 bg_transfer) to online,
// or to its drop. The Correlator feeds every poll here and asks which syncs a fork served. Times
// have the resolution of the polls (100 ms in a capture): a state that lasted less than one poll
// interval may not be seen at all.

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "redis/watcher.h"

namespace thptrace::correlate {

struct ReplicaState {
  std::string state;
  uint64_t first_seen_ns = 0;  // the poll that first showed it (answer time)
};

// One full sync of one replica.
struct ReplicaSync {
  enum class Outcome { syncing, online, dropped };
  // How the sync got its fork: it joined a fork already running for another replica (rode), its
  // request came with the fork (started), or it was seen waiting before the fork began (waited:
  // another fork was running, or repl-diskless-sync-delay batched replicas).
  enum class Joined { unknown, rode, started, waited };

  std::string address;               // ip:port, the replica's listening port
  uint64_t absent_ns = 0;            // the last poll that did not list it; 0: listed from the first poll
  uint64_t first_seen_ns = 0;        // the first poll that listed it in this sync
  uint64_t last_seen_ns = 0;         // the last poll that listed it in this sync
  uint64_t online_ns = 0;            // the first poll that showed it online; 0 when not (yet)
  std::vector<ReplicaState> states;  // in the order seen
  int64_t offset = 0;                // the replication offset it acknowledged at online (or when last seen)
  Outcome outcome = Outcome::syncing;
  // Filled when a fork is given to it (Correlator::complete).
  uint32_t child_pid = 0;
  Joined joined = Joined::unknown;
  std::optional<double> wait_ms;  // first seen to the fork's start, when it waited
  uint64_t id = 0;                // order of appearance, unique within one tracker

  // Request (first seen) to online, in ms; nullopt unless online, and nullopt when the first poll
  // that listed it showed it online already: it synced between two polls, and how long it took is
  // not measured (at most online_ns - absent_ns).
  std::optional<double> sync_ms() const {
    if (!online_ns || online_ns <= first_seen_ns) return std::nullopt;
    return static_cast<double>(online_ns - first_seen_ns) / 1e6;
  }
  // The poll that first showed it past the wait for an RDB: the latest moment its fork can have
  // started. last_seen_ns when it never got there.
  uint64_t wait_end_ns() const;
};
const char* outcome_name(ReplicaSync::Outcome o);
const char* joined_name(ReplicaSync::Joined j);

// A fork's window, as the tracker needs it to give syncs their fork.
struct ForkWindow {
  uint32_t child_pid = 0;
  uint64_t fork_ts_ns = 0;
  uint64_t exit_ts_ns = 0;  // 0 while the child lives
  bool may_serve = true;    // false for an AOF rewrite or a module's fork
};

class ReplicaTracker {
 public:
  // Feeds one INFO poll of a server that answered, in time order.
  void on_snapshot(const redis::Snapshot& s);
  void on_fork(const ForkWindow& w);

  // The syncs the fork of child_pid served, as known now, with their fork fields filled in.
  std::vector<ReplicaSync> served_by(uint32_t child_pid) const;
  // Syncs that ended (online or dropped) since the last call, each once, with their fork.
  std::vector<ReplicaSync> take_finished();
  // Every sync seen so far (the capture's end), with their fork.
  std::vector<ReplicaSync> all() const;

  // Forgets syncs that ended and fork windows that closed before ts (the daemon's bounded history).
  void drop_before(uint64_t ts_ns);

 private:
  // The fork window that served s: the latest that may serve and whose child lived, or that Redis
  // still showed in progress, at some moment between s's request and the end of its wait. nullptr
  // when none did.
  const ForkWindow* fork_of(const ReplicaSync& s) const;
  ReplicaSync with_fork(const ReplicaSync& s) const;
  void close(size_t open_index, ReplicaSync::Outcome outcome);

  std::deque<ReplicaSync> ended_;    // in the order they ended
  std::vector<ReplicaSync> open_;    // one per address listed in the last poll, not online
  std::vector<std::string> steady_;  // addresses listed online in the last poll
  std::deque<ForkWindow> forks_;     // in fork order
  // Answer times of the polls that showed an RDB child in progress (rdb_bgsave_in_progress): Redis
  // learns of a child's exit only in its cron, so a replica that asks between the exit and then
  // still joins that child's RDB.
  std::deque<uint64_t> rdb_child_polls_;
  uint64_t last_poll_ns_ = 0;
  bool seen_poll_ = false;
  uint64_t next_id_ = 1;
  size_t ended_taken_ = 0;  // ended_[0, ended_taken_) were returned by take_finished
};

}  // namespace thptrace::correlate
