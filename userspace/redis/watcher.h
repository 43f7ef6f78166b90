// SPDX-License-Identifier: Apache-2.0
#pragma once
// Polls one Redis instance on its own thread (INFO and LATENCY HISTOGRAM: fast while a fork, a save or
// a sync is on, slowly otherwise, see common/cadence.h) and keeps a timeline of snapshots on
// CLOCK_MONOTONIC, so forks seen in the kernel can be labelled (when uprobes are unavailable) and their
// latency windows measured.
// Every failure backs off (backoff.h): a failed connect, AUTH or INFO makes the next try wait,
// doubling from Options::retry up to Options::retry_max, until a poll succeeds again; an optional
// command the server refuses (LATENCY HISTOGRAM, CONFIG GET, CLIENT LIST) is skipped on a backoff of
// its own while the polls go on. A Redis that is down or refuses is a state, not an error.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/cadence.h"
#include "redis/backoff.h"
#include "redis/client.h"

namespace thptrace::redis {

struct Snapshot {
  // INFO was sent at sent_ns and answered at ts_ns (CLOCK_MONOTONIC): the state it shows held at
  // some moment in between, so it is surely before an event after ts_ns and surely after one before
  // sent_ns. Under load the two can be milliseconds apart.
  uint64_t ts_ns = 0;
  uint64_t sent_ns = 0;  // 0 when unknown (then taken as ts_ns)
  bool up = false;
  int64_t process_id = 0;
  int64_t total_forks = 0;
  int64_t latest_fork_usec = 0;
  int64_t sync_full = 0;
  int64_t rdb_saves = 0;     // Redis ≥ 7.0: RDB saves started (BGSAVE, a full sync to disk)
  int64_t aof_rewrites = 0;  // Redis ≥ 7.0: AOF rewrites started
  bool rdb_bgsave_in_progress = false;
  bool aof_rewrite_in_progress = false;
  bool replica_waiting_bgsave = false;  // a replica in state wait_bgsave
  int64_t current_cow_size = 0;
  double current_fork_perc = 0;
  int64_t current_save_keys_processed = 0;
  int64_t rdb_last_cow_size = 0;
  int64_t aof_last_cow_size = 0;
  std::string repl_diskless_sync;  // CONFIG GET at the time of the snapshot: "" when unknown
  std::optional<LatencyHistogram> latency;
  // INFO replication's replica lines, in INFO's order.
  std::vector<ReplicaInfo> replicas;
  // INFO stats (Redis >= 7.4, Valkey >= 8.0); -1 when INFO lacks it.
  int64_t client_output_buffer_limit_disconnections = -1;
  int64_t mem_total_replication_buffers = 0;  // INFO memory (Redis >= 7.0)
  int64_t master_repl_offset = 0;             // INFO replication: bytes written to the replication stream
  // INFO persistence: times the event loop postponed an AOF write because the bio thread's fsync was
  // still running (appendfsync everysec); -1 when INFO lacks it.
  int64_t aof_delayed_fsync = -1;
  // The largest replica output buffer (CLIENT LIST TYPE replica, omem), asked only while a replica
  // is not online (a sync is on); -1 when not asked.
  int64_t replica_output_buffer_max = -1;
  // Replica lines INFO listed; more than replicas.size() when over kMaxReplicas.
  size_t replicas_listed = 0;
  // Polls that failed (connect, AUTH, INFO) since the watcher started, as of this snapshot.
  uint64_t failed_polls = 0;
};

// A time the server did not answer after it had answered: from the first poll (or reconnect) that
// failed to the next poll that answered.
struct Outage {
  uint64_t from_ns = 0;  // CLOCK_MONOTONIC
  uint64_t to_ns = 0;    // 0: it had not answered again when last asked
  std::string error;     // the first failure's
};

// Facts read once per connection.
struct ServerFacts {
  std::string version;
  int64_t process_id = 0;
  std::string disable_thp;         // "yes" | "no" | "" (Redis < 6.2 has no such option)
  std::string repl_diskless_sync;  // "yes" | "no"
  std::string executable;
  std::string run_id;  // INFO server run_id
  std::string role;    // INFO replication role at the connection ("master", "slave"); "" when not read
  std::string client_output_buffer_limit;  // CONFIG GET client-output-buffer-limit, all classes
  std::string repl_timeout;                // seconds
  std::string repl_diskless_sync_delay;    // seconds
  // What decides the AOF's and the RDB's syncs (CONFIG GET; "" when not read).
  std::string appendonly, appendfsync, no_appendfsync_on_rewrite, aof_rewrite_incremental_fsync,
      rdb_save_incremental_fsync;
};

Snapshot snapshot_from_info(const InfoMap& info, uint64_t ts_ns);

// One way to reach a server: an address, with or without TLS.
struct Route {
  Address address;
  std::shared_ptr<const TlsContext> tls{};  // null: no TLS
  // Reached from our own network namespace although the server is in another (Options::netns_pid):
  // the container's own address, when that namespace cannot be entered.
  bool outside = false;
  // Why the password is not sent on this route ("" when it may be): a discovered server the operator
  // did not allow (daemon/discovery.h). It is then asked without AUTH, and a NOAUTH says this.
  std::string withheld{};
};

// Connects by the first of routes that answers (each with its TLS, its namespace: netns_pid unless
// the route is outside, and without AUTH where the route withholds it); null and why in *error when
// none does (each route's sentence, tagged when there are several). *used: the index of the route.
std::unique_ptr<Client> connect_first(const std::vector<Route>& routes, const ConnectOptions& base, pid_t netns_pid,
                                      const std::atomic<bool>& stop, size_t* used, std::string* error);

class Watcher {
 public:
  struct Options {
    Address address;
    std::string user;  // ACL user; "" for the default user
    std::string password;
    std::shared_ptr<const TlsContext> tls{};  // null: no TLS
    pid_t netns_pid = 0;                    // reach the addresses from that process's namespaces
    bool outside = false;                   // address: see Route::outside
    std::string withheld{};                 // address: see Route::withheld
    // Tried in order after address/tls, on every connect, when those fail (--discover's other
    // listeners of the same server); the first that answers is kept until its connection breaks.
    std::vector<Route> more_routes{};
    std::chrono::milliseconds interval{100};
    // Between polls while no fork is in progress (wake() says when one is); 0: always `interval`.
    std::chrono::milliseconds idle_interval{0};
    // How often an idle poll also asks LATENCY HISTOGRAM and CONFIG GET (Cadence); 0: every
    // poll. A snapshot without them has no latency and an empty repl_diskless_sync (unknown).
    std::chrono::milliseconds idle_extras_interval{0};
    std::chrono::milliseconds timeout{1000};
    // The wait after a first failure, doubled after each next one up to retry_max (backoff.h).
    std::chrono::milliseconds retry{Backoff::kFirst};
    std::chrono::milliseconds retry_max{Backoff::kCap};
    bool keep_history = true;
    std::function<void(const Snapshot&)> on_snapshot;  // called on the watcher thread
  };

  explicit Watcher(Options options);
  ~Watcher();
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  // The snapshots since the last take() (all of them, before the first; none when keep_history is false).
  std::vector<Snapshot> take();
  // Stops polling and returns the snapshots not taken yet.
  std::vector<Snapshot> stop();

  std::optional<ServerFacts> facts() const;
  // Whether a snapshot was ever taken while Redis was up.
  bool ever_up() const;
  // Why the last failed poll failed ("INFO refused: NOPERM ..."); "" before any failed.
  std::string last_error() const;
  // Polls that failed since the start (each waited for by the backoff).
  uint64_t failed_polls() const { return failed_polls_; }
  // Why an optional command's figure is missing, by command ("LATENCY HISTOGRAM": "LATENCY
  // HISTOGRAM refused: ERR ..."); empty when each was answered at its last try.
  std::map<std::string, std::string> refused_commands() const;
  // The times it stopped answering after it had answered, oldest first (the last kMaxOutages).
  std::vector<Outage> outages() const;
  static constexpr size_t kMaxOutages = 64;
  // Connected and answering at the last poll.
  bool up() const { return up_; }
  // The address of the route in use, or of the last one tried ("unix:/run/redis.sock").
  std::string route() const;
  // New credentials (a rotated password, key or certificate): the next connection uses them, and
  // the current one is replaced at the next poll so a wrong new key shows at once.
  void set_credentials(std::string user, std::string password, const std::shared_ptr<const TlsContext>& tls);
  // The kernel reported a fork, a child's exit or the server's exit: a poll is sent at once (after
  // the one in flight, if any). busy: whether a fork of the server is in progress from now on.
  void wake(bool busy);
  // The forks in progress as the daemon sees them once a second (no poll of its own).
  void set_busy(bool busy);

 private:
  void run();
  // extras: LATENCY HISTOGRAM and CONFIG GET as well as INFO. False, and why in *error, when INFO
  // did not come (the client is then to be replaced).
  bool poll_once(Client& client, bool extras, std::string* error);
  // Tries every route in order; the client of the first that answers, else null and why in *error.
  std::unique_ptr<Client> connect_any(std::string* error);
  // connect_any, then the facts of the new connection (INFO server, CONFIG GET); null and why in
  // *error when either the connection or INFO failed.
  std::unique_ptr<Client> open(std::string* error);
  // The sentence of a command that failed on client: refused by the server, or the connection lost.
  std::string failure(const Client& client, const char* command) const;
  // Asks an optional command when its backoff allows; false when it was not asked or failed (a
  // refusal logged once per change of reason).
  bool ask_optional(Client& client, OptionalCommand& gate, const char* command, const std::function<bool()>& ask);
  // Counts a failed poll, tells on_snapshot the server is down, and waits out the backoff.
  void on_failed_poll(uint64_t ts_ns, const std::string& error, Backoff& backoff);
  // Sleeps until the cadence says the next poll is due (or stop).
  void wait_for_next_poll();

  Options options_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable wakeup_;  // with mu_: stop, or a wake
  Cadence cadence_;                 // under mu_
  std::vector<Snapshot> history_;
  std::optional<ServerFacts> facts_;
  bool ever_up_ = false;
  std::string last_error_;
  std::vector<Outage> outages_;  // under mu_
  // Under mu_: a failure at ts; opens an outage when the server had answered and none is open.
  void note_failure(uint64_t ts_ns, const std::string& error);
  bool reconnect_ = false;  // under mu_: set_credentials() was called
  std::string route_;       // under mu_
  std::string withheld_;    // under mu_: the Route::withheld of the route in use
  std::atomic<bool> up_{false};
  std::atomic<uint64_t> failed_polls_{0};
  // The watcher thread's own: optional commands' backoffs, and the replica cap last logged.
  OptionalCommand latency_gate_, config_gate_, client_list_gate_;
  bool replicas_capped_logged_ = false;
  std::map<std::string, std::string> refused_;  // under mu_: copies of the gates' reasons
  std::thread thread_;
};

}  // namespace thptrace::redis
