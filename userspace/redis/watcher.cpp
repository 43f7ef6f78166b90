// SPDX-License-Identifier: Apache-2.0
#include "redis/watcher.h"

#include <algorithm>
#include <utility>

#include "common/log.h"
#include "proc/sampler.h"

namespace thptrace::redis {

Snapshot snapshot_from_info(const InfoMap& info, uint64_t ts_ns) {
  Snapshot s;
  s.ts_ns = ts_ns;
  s.up = true;
  s.process_id = info_int(info, "process_id").value_or(0);
  s.total_forks = info_int(info, "total_forks").value_or(0);
  s.latest_fork_usec = info_int(info, "latest_fork_usec").value_or(0);
  s.sync_full = info_int(info, "sync_full").value_or(0);
  s.rdb_saves = info_int(info, "rdb_saves").value_or(0);
  s.aof_rewrites = info_int(info, "aof_rewrites").value_or(0);
  s.rdb_bgsave_in_progress = info_int(info, "rdb_bgsave_in_progress").value_or(0) != 0;
  s.aof_rewrite_in_progress = info_int(info, "aof_rewrite_in_progress").value_or(0) != 0;
  s.current_cow_size = info_int(info, "current_cow_size").value_or(0);
  s.current_save_keys_processed = info_int(info, "current_save_keys_processed").value_or(0);
  s.rdb_last_cow_size = info_int(info, "rdb_last_cow_size").value_or(0);
  s.aof_last_cow_size = info_int(info, "aof_last_cow_size").value_or(0);
  try {
    s.current_fork_perc = std::stod(info_str(info, "current_fork_perc"));
  } catch (const std::exception&) {
    s.current_fork_perc = 0;
  }
  s.replicas = parse_replicas(info, &s.replicas_listed);
  for (const auto& r : s.replicas)
    if (r.state == "wait_bgsave") s.replica_waiting_bgsave = true;
  s.client_output_buffer_limit_disconnections =
      info_int(info, "client_output_buffer_limit_disconnections").value_or(-1);
  s.mem_total_replication_buffers = info_int(info, "mem_total_replication_buffers").value_or(0);
  s.master_repl_offset = info_int(info, "master_repl_offset").value_or(0);
  s.aof_delayed_fsync = info_int(info, "aof_delayed_fsync").value_or(-1);
  return s;
}

Watcher::Watcher(Options options)
    : options_(std::move(options)),
      cadence_(options_.interval, options_.idle_interval.count() ? options_.idle_interval : options_.interval,
               options_.idle_extras_interval),
      thread_([this] { run(); }) {}

Watcher::~Watcher() { stop(); }

std::vector<Snapshot> Watcher::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wakeup_.notify_all();
  if (thread_.joinable()) thread_.join();
  return take();
}

std::vector<Snapshot> Watcher::take() {
  std::lock_guard lock(mu_);
  return std::exchange(history_, {});
}

std::optional<ServerFacts> Watcher::facts() const {
  std::lock_guard lock(mu_);
  return facts_;
}
bool Watcher::ever_up() const {
  std::lock_guard lock(mu_);
  return ever_up_;
}
std::string Watcher::last_error() const {
  std::lock_guard lock(mu_);
  return last_error_;
}

std::map<std::string, std::string> Watcher::refused_commands() const {
  std::lock_guard lock(mu_);
  return refused_;
}

std::vector<Outage> Watcher::outages() const {
  std::lock_guard lock(mu_);
  return outages_;
}

void Watcher::note_failure(uint64_t ts_ns, const std::string& error) {
  last_error_ = error;
  if (!ever_up_ || (!outages_.empty() && !outages_.back().to_ns)) return;
  if (outages_.size() == kMaxOutages) outages_.erase(outages_.begin());
  outages_.push_back({ts_ns, 0, error});
}

void Watcher::set_credentials(std::string user, std::string password, const std::shared_ptr<const TlsContext>& tls) {
  std::lock_guard lock(mu_);
  options_.user = std::move(user);
  options_.password = std::move(password);
  if (options_.tls) options_.tls = tls;
  for (auto& r : options_.more_routes)
    if (r.tls) r.tls = tls;
  reconnect_ = true;
}

void Watcher::wake(bool busy) {
  {
    std::lock_guard lock(mu_);
    cadence_.wake(Cadence::Clock::now(), busy);
  }
  wakeup_.notify_all();
}

void Watcher::set_busy(bool busy) {
  {
    std::lock_guard lock(mu_);
    // Called once a second for every target: the poller is woken only when the state changed.
    if (!cadence_.set_busy(Cadence::Clock::now(), busy)) return;
  }
  wakeup_.notify_all();
}

void Watcher::wait_for_next_poll() {
  std::unique_lock lock(mu_);
  // Woken early by wake() (a fork: the due time moves closer) or by stop().
  cadence_.wait(wakeup_, lock, [this] { return stop_.load(); });
}

std::string Watcher::route() const {
  std::lock_guard lock(mu_);
  return route_.empty() ? options_.address.str() : route_;
}

std::unique_ptr<Client> connect_first(const std::vector<Route>& routes, const ConnectOptions& base, pid_t netns_pid,
                                      const std::atomic<bool>& stop, size_t* used, std::string* error) {
  std::string why;
  for (size_t i = 0; i < routes.size() && !stop; ++i) {
    const Route& r = routes[i];
    ConnectOptions o = base;
    o.tls = r.tls;
    o.netns_pid = r.outside ? 0 : netns_pid;
    if (!r.withheld.empty()) o.user = o.password = "";  // asked as the default user, without AUTH
    ConnectError e;
    auto client = Client::connect(r.address, o, &e);
    if (used) *used = i;
    if (client) return client;
    // One route: its sentence as it is. Several: each, tagged with its route.
    if (routes.size() == 1)
      why = e.sentence;
    else
      why += (why.empty() ? "" : "; ") + std::string(r.tls ? "TLS: " : "") + e.sentence;
  }
  if (error) *error = why;
  return nullptr;
}

std::unique_ptr<Client> Watcher::connect_any(std::string* error) {
  std::vector<Route> routes;
  ConnectOptions connect_options;
  pid_t netns_pid = 0;
  {
    std::lock_guard lock(mu_);
    routes.push_back({options_.address, options_.tls, options_.outside, options_.withheld});
    routes.insert(routes.end(), options_.more_routes.begin(), options_.more_routes.end());
    connect_options = {
        .user = options_.user, .password = options_.password, .timeout = options_.timeout, .ping = routes.size() > 1};
    netns_pid = options_.netns_pid;
  }
  size_t used = routes.size();
  auto client = connect_first(routes, connect_options, netns_pid, stop_, &used, error);
  if (used < routes.size()) {
    std::lock_guard lock(mu_);
    route_ = routes[used].address.str() + (routes[used].tls ? " (TLS)" : "");
    withheld_ = routes[used].withheld;
  }
  return client;
}

std::string Watcher::failure(const Client& client, const char* command) const {
  if (client.refused()) {
    std::lock_guard lock(mu_);
    if (!withheld_.empty() && client.last_error().rfind("NOAUTH", 0) == 0)
      return "it needs AUTH, and the credentials are not sent to it: " + withheld_;
    return std::string(command) + " refused: " + client.last_error();
  }
  // The transport's own sentences ("Redis at X did not reply in time") already name the server.
  const std::string& error = client.last_error();
  const std::string where = options_.address.str();
  std::string sentence = "lost the connection";
  if (error.find(where) == std::string::npos) sentence += " to Redis at " + where;
  return sentence + ": " + error;
}

bool Watcher::ask_optional(Client& client, OptionalCommand& gate, const char* command,
                           const std::function<bool()>& ask) {
  const auto now = Backoff::Clock::now();
  if (!gate.due(now)) return false;
  const bool answered = ask();
  if (!client.refused()) {
    // Answered, or the connection broke (the poll's own failure then says so).
    if (answered && gate.answered()) {
      log::warn("Redis at {}: {} answered again", options_.address.str(), command);
      std::lock_guard lock(mu_);
      refused_.erase(command);
    }
    return answered;
  }
  const std::string why = failure(client, command);
  if (gate.fail(now, why)) {
    log::warn("Redis at {}: {}; that figure is missing, asked again later", options_.address.str(), why);
    std::lock_guard lock(mu_);
    refused_[command] = why;
  }
  return false;
}

bool Watcher::poll_once(Client& client, bool extras, std::string* error) {
  const uint64_t sent = proc::monotonic_ns();
  const auto text = client.info();
  if (!text) {
    *error = failure(client, "INFO");
    return false;
  }
  Snapshot s = snapshot_from_info(parse_info(*text), proc::monotonic_ns());
  s.sent_ns = sent;
  if (s.replicas_listed > s.replicas.size() && !std::exchange(replicas_capped_logged_, true))
    log::warn("Redis at {} lists {} replicas; only the first {} are read", options_.address.str(), s.replicas_listed,
              s.replicas.size());
  if (extras) {
    ask_optional(client, latency_gate_, "LATENCY HISTOGRAM", [&] {
      s.latency = client.latency_histogram();
      return s.latency.has_value();
    });
    ask_optional(client, config_gate_, "CONFIG GET", [&] {
      const auto cfg = client.config_get({"repl-diskless-sync"});
      if (const auto it = cfg.find("repl-diskless-sync"); it != cfg.end()) s.repl_diskless_sync = printable(it->second);
      return !client.refused() && !client.broken();
    });
  }
  const bool replica_syncs =
      std::any_of(s.replicas.begin(), s.replicas.end(), [](const ReplicaInfo& r) { return r.state != "online"; });
  // A replica's output buffer only matters while it syncs: CLIENT LIST is asked only then.
  if (replica_syncs)
    ask_optional(client, client_list_gate_, "CLIENT LIST", [&] {
      const auto list = client.command({"CLIENT", "LIST", "TYPE", "replica"});
      if (list)
        if (const auto omem = max_client_omem(*list)) s.replica_output_buffer_max = static_cast<int64_t>(*omem);
      return list.has_value();
    });
  if (client.broken()) {
    *error = failure(client, "the poll");
    return false;
  }
  s.failed_polls = failed_polls_;
  {
    std::lock_guard lock(mu_);
    ever_up_ = true;
    if (!outages_.empty() && !outages_.back().to_ns) outages_.back().to_ns = s.ts_ns;
    if (options_.keep_history) history_.push_back(s);
    // Fast while the server says a save, a rewrite or a sync is on, fork or not: a replica waits
    // for its RDB before the fork (repl-diskless-sync-delay) and receives it after the child exits.
    cadence_.hold(Cadence::Clock::now(),
                  replica_syncs || s.replica_waiting_bgsave || s.rdb_bgsave_in_progress || s.aof_rewrite_in_progress);
  }
  if (options_.on_snapshot) options_.on_snapshot(s);
  return true;
}

std::unique_ptr<Client> Watcher::open(std::string* error) {
  auto client = connect_any(error);
  if (!client) return nullptr;
  ServerFacts f;
  const auto text = client->info("server");
  if (!text) {
    *error = failure(*client, "INFO");
    return nullptr;
  }
  const auto info = parse_info(*text);
  f.version = printable(info_str(info, "redis_version"), 64);
  f.process_id = info_int(info, "process_id").value_or(0);
  f.executable = printable(info_str(info, "executable"), 4096);
  f.run_id = printable(info_str(info, "run_id"), 64);
  if (const auto replication = client->info("replication"))
    f.role = printable(info_str(parse_info(*replication), "role"), 32);
  if (client->broken()) {
    *error = failure(*client, "INFO");
    return nullptr;
  }
  std::map<std::string, std::string> cfg;
  ask_optional(*client, config_gate_, "CONFIG GET", [&] {
    cfg = client->config_get({"disable-thp", "repl-diskless-sync", "client-output-buffer-limit", "repl-timeout",
                              "repl-diskless-sync-delay", "appendonly", "appendfsync", "no-appendfsync-on-rewrite",
                              "aof-rewrite-incremental-fsync", "rdb-save-incremental-fsync"});
    return !client->refused() && !client->broken();
  });
  if (client->broken()) {
    *error = failure(*client, "CONFIG GET");
    return nullptr;
  }
  // Outside text, made printable here once; the two numbers are kept only when they are numbers.
  const auto get = [&cfg](const char* key) {
    const auto it = cfg.find(key);
    return it == cfg.end() ? std::string() : printable(it->second);
  };
  const auto number = [&get](const char* key) {
    std::string v = get(key);
    const bool digits =
        !v.empty() && v.size() <= 18 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
    return digits ? v : std::string();
  };
  f.disable_thp = get("disable-thp");
  f.repl_diskless_sync = get("repl-diskless-sync");
  f.client_output_buffer_limit = get("client-output-buffer-limit");
  f.repl_timeout = number("repl-timeout");
  f.repl_diskless_sync_delay = number("repl-diskless-sync-delay");
  // yes/no and always/everysec/no: anything longer is not one of them.
  const auto word = [&get](const char* key) {
    std::string v = get(key);
    return v.size() <= 8 ? v : std::string();
  };
  f.appendonly = word("appendonly");
  f.appendfsync = word("appendfsync");
  f.no_appendfsync_on_rewrite = word("no-appendfsync-on-rewrite");
  f.aof_rewrite_incremental_fsync = word("aof-rewrite-incremental-fsync");
  f.rdb_save_incremental_fsync = word("rdb-save-incremental-fsync");
  std::lock_guard lock(mu_);
  facts_ = f;
  cadence_.on_connected();
  return client;
}

void Watcher::on_failed_poll(uint64_t ts_ns, const std::string& error, Backoff& backoff) {
  ++failed_polls_;
  {
    std::lock_guard lock(mu_);
    note_failure(ts_ns, error);
  }
  up_ = false;
  Snapshot down;
  down.ts_ns = proc::monotonic_ns();
  down.failed_polls = failed_polls_;
  if (options_.on_snapshot) options_.on_snapshot(down);
  const auto wait = backoff.failed(Backoff::Clock::now());
  // Not cut short by wake(): a fork does not make a refusing server answer. New credentials do.
  std::unique_lock lock(mu_);
  wakeup_.wait_for(lock, wait, [this] { return stop_.load() || reconnect_; });
}

void Watcher::run() {
  std::unique_ptr<Client> client;
  Backoff backoff(options_.retry, options_.retry_max);
  while (!stop_) {
    {
      std::lock_guard lock(mu_);
      if (std::exchange(reconnect_, false)) client.reset();
    }
    std::string error;
    uint64_t asked = proc::monotonic_ns();
    if (!client) client = open(&error);
    if (client) {
      bool extras = false;
      {
        // Before poll_once takes the poll's sent time: a wake from here on gets a poll of its own.
        std::lock_guard lock(mu_);
        extras = cadence_.on_sent(Cadence::Clock::now());
      }
      asked = proc::monotonic_ns();
      if (poll_once(*client, extras, &error)) {
        backoff.succeeded();
        up_ = true;
        wait_for_next_poll();
        continue;
      }
      client.reset();
    }
    if (stop_) break;
    on_failed_poll(asked, error, backoff);
  }
}

}  // namespace thptrace::redis
