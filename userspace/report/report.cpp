// SPDX-License-Identifier: Apache-2.0
#include "report/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <stdexcept>

#include "common/text.h"
#include "report/copies.h"

namespace thptrace::report {
namespace {

using nlohmann::ordered_json;

ordered_json opt(const std::optional<double>& v) { return v ? ordered_json(*v) : ordered_json(nullptr); }
ordered_json opt(const std::optional<uint64_t>& v) { return v ? ordered_json(*v) : ordered_json(nullptr); }
ordered_json opt(const std::optional<int64_t>& v) { return v ? ordered_json(*v) : ordered_json(nullptr); }

ordered_json latency_json(const std::optional<correlate::LatencyWindow>& w) {
  if (!w) return nullptr;
  return {{"calls", w->calls}, {"p50_us", w->p50_us}, {"p99_us", w->p99_us}, {"p999_us", w->p999_us}, {"max_us", w->max_us}};
}

// Its reader (to the ms it keeps); throws std::invalid_argument on another form.
int64_t realtime_from_rfc3339(const std::string& s) {
  tm t{};
  int ms = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &t.tm_year, &t.tm_mon, &t.tm_mday, &t.tm_hour, &t.tm_min,
                  &t.tm_sec, &ms) != 7)
    throw std::invalid_argument("not an RFC 3339 UTC time: " + s);
  t.tm_year -= 1900;
  t.tm_mon -= 1;
  return static_cast<int64_t>(::timegm(&t)) * 1'000'000'000 + int64_t{ms} * 1'000'000;
}

// A kernel timestamp as ms from the capture's start (negative before it); null when unset (0).
ordered_json offset_ms(uint64_t ts_ns, uint64_t start_ns) {
  if (ts_ns == 0) return nullptr;
  return (static_cast<double>(ts_ns) - static_cast<double>(start_ns)) / 1e6;
}

ordered_json replicas_json(const std::vector<correlate::ReplicaSync>& syncs, uint64_t start_ns) {
  ordered_json out = ordered_json::array();
  for (const auto& s : syncs) {
    ordered_json states = ordered_json::array();
    for (const auto& x : s.states)
      states.push_back(
          {{"state", x.state}, {"after_ms", static_cast<double>(x.first_seen_ns - s.first_seen_ns) / 1e6}});
    out.push_back({{"address", s.address},
                   {"joined", correlate::joined_name(s.joined)},
                   {"wait_ms", opt(s.wait_ms)},
                   {"first_seen_ms", offset_ms(s.first_seen_ns, start_ns)},
                   {"last_seen_ms", offset_ms(s.last_seen_ns, start_ns)},
                   {"states", std::move(states)},
                   {"sync_ms", opt(s.sync_ms())},
                   {"outcome", correlate::outcome_name(s.outcome)},
                   {"offset", s.offset}});
  }
  return out;
}

// Every string value of the document made valid UTF-8 in place: names from /proc, symbols and Redis
// replies reach the report unchecked, and the JSON writer throws on an invalid byte. The keys are
// this file's own.
void make_valid(ordered_json& j) {
  if (j.is_string()) {
    auto& s = j.get_ref<std::string&>();
    if (!text::is_valid_utf8(s)) s = text::valid_utf8(s);
  } else if (j.is_structured()) {
    for (auto& x : j) make_valid(x);
  }
}

using nlohmann::json;

tracer::Mode mode_named(const std::string& name) {
  for (const auto m : {tracer::Mode::fentry, tracer::Mode::tp_btf, tracer::Mode::raw_tp, tracer::Mode::uprobe,
                       tracer::Mode::info_polling, tracer::Mode::unavailable})
    if (name == tracer::mode_name(m)) return m;
  throw std::invalid_argument("unknown attach mode " + name);
}

correlate::Reason reason_named(const std::string& name) {
  for (const auto r : correlate::kAllReasons)
    if (name == correlate::reason_name(r)) return r;
  throw std::invalid_argument("unknown fork reason " + name);
}

std::optional<double> opt_from(const json& j, const char* key) {
  const auto& v = j.at(key);
  return v.is_null() ? std::nullopt : std::optional<double>(v.get<double>());
}

std::optional<uint64_t> opt_u64(const json& v) { return v.is_null() ? std::nullopt : std::optional(v.get<uint64_t>()); }

// The inverse of offset_ms: exact, since an offset of a few hours in ms keeps its ns in a double.
uint64_t ts_from(const json& v, uint64_t start_ns) {
  if (v.is_null()) return 0;
  return static_cast<uint64_t>(static_cast<int64_t>(start_ns) + std::llround(v.get<double>() * 1e6));
}

std::optional<correlate::LatencyWindow> latency_from(const json& v) {
  if (v.is_null()) return std::nullopt;
  return correlate::LatencyWindow{v.at("calls").get<uint64_t>(), v.at("p50_us").get<double>(),
                                  v.at("p99_us").get<double>(), v.at("p999_us").get<double>(),
                                  v.at("max_us").get<double>()};
}

correlate::ReplicaSync replica_from(const json& x, uint64_t start_ns) {
  correlate::ReplicaSync s;
  s.address = x.at("address").get<std::string>();
  const auto joined = x.at("joined").get<std::string>();
  for (const auto j : {correlate::ReplicaSync::Joined::unknown, correlate::ReplicaSync::Joined::rode,
                       correlate::ReplicaSync::Joined::started, correlate::ReplicaSync::Joined::waited})
    if (joined == correlate::joined_name(j)) s.joined = j;
  s.wait_ms = opt_from(x, "wait_ms");
  s.first_seen_ns = ts_from(x.at("first_seen_ms"), start_ns);
  for (const auto& st : x.at("states"))
    s.states.push_back({st.at("state").get<std::string>(),
                        s.first_seen_ns + static_cast<uint64_t>(std::llround(st.at("after_ms").get<double>() * 1e6))});
  s.last_seen_ns = ts_from(x.at("last_seen_ms"), start_ns);
  if (const auto ms = opt_from(x, "sync_ms"))
    s.online_ns = s.first_seen_ns + static_cast<uint64_t>(std::llround(*ms * 1e6));
  const auto outcome = x.at("outcome").get<std::string>();
  for (const auto o : {correlate::ReplicaSync::Outcome::syncing, correlate::ReplicaSync::Outcome::online,
                       correlate::ReplicaSync::Outcome::dropped})
    if (outcome == correlate::outcome_name(o)) s.outcome = o;
  s.offset = x.at("offset").get<int64_t>();
  return s;
}

// What the child wrote and how fast, over its whole life (MiB/s).
ordered_json child_io_json(const correlate::ForkEpisode& e) {
  if (!e.child_io) return nullptr;
  const auto& io = *e.child_io;
  const auto rate = [&e](uint64_t bytes) -> ordered_json {
    if (!e.child_lifetime_ms || *e.child_lifetime_ms <= 0) return nullptr;
    return static_cast<double>(bytes) / (1024.0 * 1024.0) / (*e.child_lifetime_ms / 1e3);
  };
  return {{"written_bytes", io.written_bytes},
          {"storage_bytes", io.storage_bytes},
          {"write_mib_per_s", rate(io.written_bytes)}};
}

// One key of forks[]: how it is written and read back, so a per-fork fact is named once. `written`
// says whether the key is in this report (null: always); `optional` that older reports may lack it.
struct ForkContext {
  uint64_t start_ns;  // timestamps are ms from the capture's start
  bool client_probe;  // the capture ran the latency probe
};
struct ForkField {
  const char* key;
  ordered_json (*write)(const correlate::ForkEpisode&, const ForkContext&);
  void (*read)(const json&, const ForkContext&, correlate::ForkEpisode&);
  bool (*written)(const correlate::ForkEpisode&, const ForkContext&) = nullptr;
  bool optional = false;
};

template <auto Member>
ForkField plain(const char* key) {
  return {key, [](const correlate::ForkEpisode& e, const ForkContext&) { return ordered_json(e.*Member); },
          [](const json& v, const ForkContext&, correlate::ForkEpisode& e) { v.get_to(e.*Member); }};
}

template <auto Member>
ForkField nullable(const char* key) {
  return {key, [](const correlate::ForkEpisode& e, const ForkContext&) { return opt(e.*Member); },
          [](const json& v, const ForkContext&, correlate::ForkEpisode& e) {
            e.*Member = v.is_null() ? std::nullopt : std::optional<double>(v.get<double>());
          }};
}

template <auto Member>
ForkField timestamp(const char* key) {
  return {key, [](const correlate::ForkEpisode& e, const ForkContext& c) { return offset_ms(e.*Member, c.start_ns); },
          [](const json& v, const ForkContext& c, correlate::ForkEpisode& e) { e.*Member = ts_from(v, c.start_ns); }};
}

template <auto Member>
ForkField server_latency(const char* key) {
  return {key, [](const correlate::ForkEpisode& e, const ForkContext&) { return latency_json(e.*Member); },
          [](const json& v, const ForkContext&, correlate::ForkEpisode& e) { e.*Member = latency_from(v); }};
}

// Written when the disk family ran (its `during` is then set, if empty).
template <auto Member>
ForkField fsync(const char* key) {
  return {key, [](const correlate::ForkEpisode& e, const ForkContext&) { return fsync_json(e.*Member); },
          [](const json& v, const ForkContext&, correlate::ForkEpisode& e) { e.*Member = fsync_from(v); },
          [](const correlate::ForkEpisode& e, const ForkContext&) { return e.fsync_during.has_value(); }, true};
}

template <auto Member>
ForkField client_latency(const char* key) {
  return {key, [](const correlate::ForkEpisode& e, const ForkContext&) { return client_latency_json(e.*Member); },
          [](const json& v, const ForkContext&, correlate::ForkEpisode& e) { e.*Member = client_latency_from(v); },
          [](const correlate::ForkEpisode&, const ForkContext& c) { return c.client_probe; }, true};
}

ordered_json thread_time_json(const std::optional<correlate::ThreadTime>& t) {
  if (!t) return nullptr;
  return {{"span_ms", t->span_ms},
          {"on_cpu_ms", t->on_cpu_ms},
          {"runqueue_ms", t->runqueue_ms},
          {"off_cpu_ms", t->off_cpu_ms}};
}

std::optional<correlate::ThreadTime> thread_time_from(const json& v) {
  if (v.is_null()) return std::nullopt;
  return correlate::ThreadTime{v.at("span_ms").get<double>(), v.at("on_cpu_ms").get<double>(),
                               v.at("runqueue_ms").get<double>(), v.at("off_cpu_ms").get<double>()};
}

ordered_json cpu_wait_json(const std::optional<correlate::ForkEpisode::CpuWait>& w) {
  if (!w) return nullptr;
  return {{"fork_child_ms", w->child_ms},
          {"own_threads_ms", w->threads_ms},
          {"other_processes_ms", w->others_ms},
          {"idle_cpu_ms", w->idle_ms}};
}

std::optional<correlate::ForkEpisode::CpuWait> cpu_wait_from(const json& v) {
  if (v.is_null()) return std::nullopt;
  return correlate::ForkEpisode::CpuWait{v.at("fork_child_ms").get<double>(), v.at("own_threads_ms").get<double>(),
                                         v.at("other_processes_ms").get<double>(), v.at("idle_cpu_ms").get<double>()};
}

// In the order the report writes them.
const std::vector<ForkField>& fork_fields() {
  using E = correlate::ForkEpisode;
  static const std::vector<ForkField> fields = {
      plain<&E::child_pid>("child_pid"),
      {"reason", [](const E& e, const ForkContext&) { return ordered_json(correlate::reason_name(e.reason)); },
       [](const json& v, const ForkContext&, E& e) { e.reason = reason_named(v.get<std::string>()); }},
      plain<&E::reason_source>("reason_source"),
      nullable<&E::fork_duration_us>("fork_duration_us"),
      nullable<&E::clone_syscall_us>("clone_syscall_us"),
      nullable<&E::child_lifetime_ms>("child_lifetime_ms"),
      timestamp<&E::fork_ts_ns>("fork_ts_ms"),
      timestamp<&E::exit_ts_ns>("exit_ts_ms"),
      {"child_io", [](const E& e, const ForkContext&) { return child_io_json(e); },
       [](const json& v, const ForkContext&, E& e) {
         if (!v.is_null())
           e.child_io = E::ChildIo{v.at("written_bytes").get<uint64_t>(), v.at("storage_bytes").get<uint64_t>()};
       },
       nullptr, true},
      plain<&E::cow_faults>("cow_faults"),
      plain<&E::child_cow_faults>("child_cow_faults"),
      {"rss_kb_at_fork", [](const E& e, const ForkContext&) { return opt(e.rss_kb_at_fork); },
       [](const json& v, const ForkContext&, E& e) { e.rss_kb_at_fork = opt_u64(v); }, nullptr, true},
      plain<&E::thp_splits>("thp_splits"),
      plain<&E::thp_splits_source>("thp_splits_source"),
      plain<&E::huge_cow_faults>("huge_cow_faults"),
      plain<&E::huge_allocs>("huge_page_allocs"),
      nullable<&E::fault_avg_ns>("fault_avg_ns"),
      plain<&E::fault_latency_log2>("fault_latency_log2_ns"),
      plain<&E::compaction_stalls>("compaction_stalls"),
      plain<&E::compaction_ms>("compaction_ms"),
      plain<&E::reclaim_stalls>("reclaim_stalls"),
      plain<&E::reclaim_ms>("reclaim_ms"),
      // How long the parent was stopped, by cause; only copies and their source are read back, the
      // rest is the fields above.
      {"stall_ms",
       [](const E& e, const ForkContext&) {
         return ordered_json{{"freeze", e.fork_duration_us ? ordered_json(*e.fork_duration_us / 1e3) : nullptr},
                             {"copies", opt(e.copy_stall_ms)},
                             {"copies_source", e.copy_stall_source},
                             {"compaction", e.compaction_ms},
                             {"reclaim", e.reclaim_ms}};
       },
       [](const json& v, const ForkContext&, E& e) {
         const auto& c = v.at("copies");
         e.copy_stall_ms = c.is_null() ? std::nullopt : std::optional<double>(c.get<double>());
         e.copy_stall_source = v.at("copies_source").get<std::string>();
       },
       nullptr, true},
      server_latency<&E::latency_during>("latency_during"),
      server_latency<&E::latency_before>("latency_before"),
      {"replicas", [](const E& e, const ForkContext& c) { return replicas_json(e.replicas, c.start_ns); },
       [](const json& v, const ForkContext& c, E& e) {
         for (const auto& x : v) e.replicas.push_back(replica_from(x, c.start_ns));
       },
       nullptr, true},
      client_latency<&E::client_latency_during>("client_latency_during"),
      client_latency<&E::client_latency_before>("client_latency_before"),
      fsync<&E::fsync_during>("fsync_during"),
      {"aof_delayed_fsync", [](const E& e, const ForkContext&) { return opt(e.aof_delayed_fsync); },
       [](const json& v, const ForkContext&, E& e) {
         e.aof_delayed_fsync = v.is_null() ? std::nullopt : std::optional<int64_t>(v.get<int64_t>());
       },
       [](const E& e, const ForkContext&) { return e.fsync_during.has_value(); }, true},
      fsync<&E::fsync_before>("fsync_before"),
      {"main_thread",
       [](const E& e, const ForkContext&) {
         return ordered_json{{"during", thread_time_json(e.main_thread_during)},
                             {"before", thread_time_json(e.main_thread_before)},
                             {"waited_behind", cpu_wait_json(e.main_wait)}};
       },
       [](const json& v, const ForkContext&, E& e) {
         e.main_thread_during = thread_time_from(v.at("during"));
         e.main_thread_before = thread_time_from(v.at("before"));
         if (const auto w = v.find("waited_behind"); w != v.end()) e.main_wait = cpu_wait_from(*w);
       },
       nullptr, true},
      {"child_cpu",
       [](const E& e, const ForkContext&) {
         return ordered_json{{"on_cpu_ms", e.child_cpu->on_cpu_ms}, {"runqueue_ms", e.child_cpu->runqueue_ms}};
       },
       [](const json& v, const ForkContext&, E& e) {
         e.child_cpu = E::ChildCpu{v.at("on_cpu_ms").get<double>(), v.at("runqueue_ms").get<double>()};
       },
       [](const E& e, const ForkContext&) { return e.child_cpu.has_value(); }, true},
      {"folios", [](const E& e, const ForkContext&) { return by_size_json(*e.folios); },
       [](const json& v, const ForkContext&, E& e) { e.folios = by_size_from<std::map<std::string, int64_t>>(v); },
       [](const E& e, const ForkContext&) { return e.folios.has_value(); }, true},
      {"copies", [](const E& e, const ForkContext&) { return copies_json(*e.copies); },
       [](const json& v, const ForkContext&, E& e) { e.copies = copies_from(v); },
       [](const E& e, const ForkContext&) { return e.copies.has_value(); }, true},
  };
  return fields;
}

ordered_json fork_json(const correlate::ForkEpisode& e, const ForkContext& c) {
  ordered_json f = ordered_json::object();
  for (const auto& field : fork_fields())
    if (!field.written || field.written(e, c)) f[field.key] = field.write(e, c);
  return f;
}

correlate::ForkEpisode fork_from(const json& f, const ForkContext& c, uint32_t parent) {
  correlate::ForkEpisode e;
  e.parent_tgid = parent;
  for (const auto& field : fork_fields())
    if (!field.optional || f.contains(field.key)) field.read(f.at(field.key), c, e);
  return e;
}

}  // namespace

// CLOCK_REALTIME ns as RFC 3339 in UTC with milliseconds: 2026-12-02T12:00:00.000Z.
std::string rfc3339_utc(int64_t ns) {
  const time_t secs = static_cast<time_t>(ns / 1'000'000'000);
  tm t{};
  ::gmtime_r(&secs, &t);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour,
                     t.tm_min, t.tm_sec, (ns % 1'000'000'000) / 1'000'000);
}

namespace {

ordered_json redis_json(const RedisSection& x, uint64_t start_ns) {
  ordered_json out = {{"address", x.address},
                      {"version", x.version},
                      {"process_id", x.process_id},
                      {"disable_thp", x.disable_thp},
                      {"repl_diskless_sync", x.repl_diskless_sync},
                      {"latest_fork_usec", x.latest_fork_usec},
                      {"total_forks_delta", x.total_forks_delta},
                      {"rdb_last_cow_size", x.rdb_last_cow_size}};
  if (!x.run_id.empty()) out["run_id"] = x.run_id;
  if (!x.role.empty()) out["role"] = x.role;
  if (const auto& p = x.persistence)
    out["persistence"] = {
        {"appendonly", p->appendonly},
        {"appendfsync", p->appendfsync},
        {"no_appendfsync_on_rewrite", p->no_appendfsync_on_rewrite},
        {"aof_rewrite_incremental_fsync", p->aof_rewrite_incremental_fsync},
        {"rdb_save_incremental_fsync", p->rdb_save_incremental_fsync},
        {"aof_delayed_fsync",
         p->aof_delayed_fsync_delta >= 0 ? ordered_json(p->aof_delayed_fsync_delta) : ordered_json(nullptr)}};
  if (!x.unanswered.empty()) {
    auto& u = out["unanswered"] = ordered_json::array();
    for (const auto& o : x.unanswered)
      u.push_back(
          {{"from_ms", offset_ms(o.from_ns, start_ns)}, {"to_ms", offset_ms(o.to_ns, start_ns)}, {"error", o.error}});
  }
  if (!x.refused.empty()) out["refused"] = x.refused;
  return out;
}

ordered_json memory_json(const MemorySection& m) {
  ordered_json out = {{"copied_bytes", m.copied_bytes},
                      {"fork_window_s", m.fork_window_s},
                      {"mem_available_min_bytes", opt(m.mem_available_min_bytes)},
                      {"cgroup", nullptr}};
  if (const auto& c = m.cgroup)
    out["cgroup"] = {{"version", c->version},
                     {"path", c->path},
                     {"limit_bytes", opt(c->limit_bytes)},
                     {"usage_max_bytes", c->usage_max_bytes},
                     {"peak_bytes", opt(c->peak_bytes)},
                     {"headroom_bytes", opt(c->headroom_bytes())},
                     {"oom_kills", c->oom_kills}};
  return out;
}

ordered_json replication_json(const ReplicationSection& x) {
  ordered_json loops = ordered_json::array();
  for (const auto& l : x.loops) loops.push_back({{"address", l.address}, {"syncs", l.syncs}, {"dropped", l.dropped}});
  ordered_json limit = nullptr;
  if (x.limit)
    limit = {{"hard_bytes", x.limit->hard_bytes},
             {"soft_bytes", x.limit->soft_bytes},
             {"soft_seconds", x.limit->soft_seconds}};
  return {{"full_syncs", x.full_syncs},
          {"replica_syncs", x.replica_syncs},
          {"dropped_syncs", x.dropped_syncs},
          {"output_buffer_limit_disconnections", opt(x.output_buffer_limit_disconnections)},
          {"replication_buffer_peak_bytes", x.replication_buffer_peak_bytes},
          {"replica_output_buffer_peak_bytes", opt(x.replica_output_buffer_peak_bytes)},
          {"replica_output_buffer_limit", std::move(limit)},
          {"repl_timeout_s", opt(x.repl_timeout_s)},
          {"stream_bytes_per_s", x.stream_bytes_per_s},
          {"loops", std::move(loops)},
          {"loop_cause", x.loop_cause},
          {"suggested_hard_limit_bytes", opt(x.suggested_hard_limit_bytes)},
          {"wasted_forks", x.wasted_forks},
          {"wasted_copied_bytes", x.wasted_copied_bytes}};
}

// The forks' stalls added up: freeze and copies over the forks that have them (null when none has).
ordered_json stall_totals(const std::vector<correlate::ForkEpisode>& forks) {
  std::optional<double> freeze, copies;
  double compaction = 0, reclaim = 0;
  for (const auto& e : forks) {
    if (e.fork_duration_us) freeze = freeze.value_or(0) + *e.fork_duration_us / 1e3;
    if (e.copy_stall_ms) copies = copies.value_or(0) + *e.copy_stall_ms;
    compaction += e.compaction_ms;
    reclaim += e.reclaim_ms;
  }
  return {{"freeze", opt(freeze)}, {"copies", opt(copies)}, {"compaction", compaction}, {"reclaim", reclaim}};
}

}  // namespace

ordered_json to_json(const Report& r) {
  ordered_json j;
  j["report_version"] = kReportVersion;
  j["thptrace_version"] = r.version;
  if (!r.hostname.empty() || !r.boot_id.empty()) j["host"] = {{"name", r.hostname}, {"boot_id", r.boot_id}};
  j["system"] = system_json(r.system);
  j["target"] = {
      {"pid", r.pid},
      {"comm", r.comm},
      {"thp_enabled_for_process",
       r.thp_enabled_for_process ? ordered_json(*r.thp_enabled_for_process) : ordered_json(nullptr)},
      {"anon_huge_pages_kb",
       {{"start", r.anon_huge_pages_kb_start}, {"max", r.anon_huge_pages_kb_max}, {"end", r.anon_huge_pages_kb_end}}},
      {"rss_kb_max", r.rss_kb_max},
      {"anon_folios",
       {{"start", folio_shares_json(r.anon_folios_start)},
        {"end", folio_shares_json(r.anon_folios_end)},
        {"why", r.anon_folios_why}}},
      {"exited", r.target_exited}};
  if (!r.container.id.empty()) j["target"]["container"] = proc::container_json(r.container);
  for (const auto& f : tracer::kFamilies) {
    j["probes"][f.name] = tracer::mode_name(r.probes.at(f.family).mode);
    if (f.family == tracer::Family::redis) j["probes"]["redis_why"] = r.probes.redis.why;
    if (f.family == tracer::Family::disk) j["probes"]["disk_why"] = r.probes.disk.why;
  }
  j["probes"]["huge_alloc"] =
      r.huge_alloc.mode == tracer::Mode::unavailable ? "off" : tracer::mode_name(r.huge_alloc.mode);
  j["probes"]["forced_fallback"] = r.probes.forced_fallback;
  j["capture"] = {{"duration_s", r.duration_s}, {"start_monotonic_ns", r.start_monotonic_ns}};
  if (r.start_realtime_ns) {
    j["capture"]["start_utc"] = rfc3339_utc(r.start_realtime_ns);
    j["capture"]["end_utc"] = rfc3339_utc(r.end_realtime_ns);
  }
  if (r.copy_cost_ns) j["capture"]["copy_cost_ns"] = *r.copy_cost_ns;
  if (r.sample_every) {
    j["capture"]["sample_copies"] = r.sample_every;
    j["capture"]["copy_samples_dropped"] = r.copy_samples_dropped;
  }
  if (r.disk_calls_dropped) j["capture"]["disk_calls_dropped"] = r.disk_calls_dropped;
  if (r.disk_windows_unknown) j["capture"]["disk_windows_unknown"] = r.disk_windows_unknown;
  if (r.client_probe)
    j["client_latency"] = {{"probe_hz", r.client_probe->hz},
                           {"client_timeout_us", r.client_probe->client_timeout_us},
                           {"missed", r.client_probe->missed},
                           {"whole_capture", client_latency_json(r.client_probe->whole)}};
  ordered_json forks = ordered_json::array();
  const ForkContext context{r.start_monotonic_ns, r.client_probe.has_value()};
  for (const auto& e : r.forks) forks.push_back(fork_json(e, context));
  j["forks"] = std::move(forks);
  const uint64_t copies = total_copies(r);
  j["totals"] = {{"forks", r.forks.size()},
                 {"cow_faults", r.totals.cow_faults},
                 {"copies", copies},
                 {"reuse_faults", r.totals.cow_faults > copies ? r.totals.cow_faults - copies : 0},
                 {"child_cow_faults", r.totals.child_cow_faults},
                 {"thp_splits", r.totals.thp_splits},
                 {"thp_collapses", r.totals.thp_collapses},
                 {"khugepaged_scans", r.totals.khugepaged_scans},
                 {"huge_page_allocs", r.totals.huge_allocs},
                 {"compaction_stalls", r.totals.compaction_stalls},
                 {"reclaim_stalls", r.totals.reclaim_stalls},
                 {"dropped_events", r.totals.dropped_events}};
  j["totals"]["stall_ms"] = stall_totals(r.forks);
  if (r.redis && r.redis->reachable)
    j["redis"] = redis_json(*r.redis, r.start_monotonic_ns);
  else if (r.redis)
    j["redis_error"] = r.redis->error;
  j["memory"] = memory_json(r.memory);
  if (r.replication) j["replication"] = replication_json(*r.replication);
  j["findings"] = ordered_json::array();
  for (const auto& x : findings(r))
    j["findings"].push_back({{"id", x.id},
                             {"severity", severity_name(x.severity)},
                             {"impact_ms", opt(x.impact_ms)},
                             {"text", x.text},
                             {"evidence", x.evidence}});
  make_valid(j);
  return j;
}

uint64_t total_copies(const Report& r) {
  uint64_t copies = 0;
  for (const auto& f : r.forks) copies += f.cow_faults;
  return copies;
}

std::string json_text(const Report& r) {
  // to_json made every string valid; replace is the last defence of a writer that must not throw.
  return to_json(r).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

namespace {

std::optional<RedisSection> redis_from(const json& j, uint64_t start_ns) {
  if (j.contains("redis_error")) {
    RedisSection rs;
    rs.error = j.at("redis_error").get<std::string>();
    return rs;
  }
  if (j.contains("redis")) {
    const auto& x = j.at("redis");
    RedisSection rs;
    rs.reachable = true;
    rs.address = x.at("address").get<std::string>();
    rs.version = x.at("version").get<std::string>();
    rs.process_id = x.at("process_id").get<int64_t>();
    rs.disable_thp = x.at("disable_thp").get<std::string>();
    rs.repl_diskless_sync = x.at("repl_diskless_sync").get<std::string>();
    rs.latest_fork_usec = x.at("latest_fork_usec").get<int64_t>();
    rs.total_forks_delta = x.at("total_forks_delta").get<int64_t>();
    rs.rdb_last_cow_size = x.at("rdb_last_cow_size").get<int64_t>();
    rs.run_id = x.value("run_id", std::string());
    rs.role = x.value("role", std::string());
    if (x.contains("persistence")) {
      const auto& p = x.at("persistence");
      const auto& d = p.at("aof_delayed_fsync");
      rs.persistence = RedisSection::Persistence{p.at("appendonly").get<std::string>(),
                                                 p.at("appendfsync").get<std::string>(),
                                                 p.at("no_appendfsync_on_rewrite").get<std::string>(),
                                                 p.at("aof_rewrite_incremental_fsync").get<std::string>(),
                                                 p.at("rdb_save_incremental_fsync").get<std::string>(),
                                                 d.is_null() ? int64_t{-1} : d.get<int64_t>()};
    }
    if (x.contains("unanswered"))
      for (const auto& o : x.at("unanswered"))
        rs.unanswered.push_back(
            {ts_from(o.at("from_ms"), start_ns), ts_from(o.at("to_ms"), start_ns), o.at("error").get<std::string>()});
    if (x.contains("refused")) rs.refused = x.at("refused").get<std::vector<std::string>>();
    return rs;
  }
  return std::nullopt;
}

ReplicationSection replication_from(const json& x) {
  ReplicationSection rs;
  rs.full_syncs = x.at("full_syncs").get<uint64_t>();
  rs.replica_syncs = x.at("replica_syncs").get<uint64_t>();
  rs.dropped_syncs = x.at("dropped_syncs").get<uint64_t>();
  rs.output_buffer_limit_disconnections = opt_u64(x.at("output_buffer_limit_disconnections"));
  rs.replication_buffer_peak_bytes = x.at("replication_buffer_peak_bytes").get<uint64_t>();
  rs.replica_output_buffer_peak_bytes = opt_u64(x.at("replica_output_buffer_peak_bytes"));
  if (const auto& l = x.at("replica_output_buffer_limit"); !l.is_null())
    rs.limit = redis::OutputBufferLimit{l.at("hard_bytes").get<uint64_t>(), l.at("soft_bytes").get<uint64_t>(),
                                        l.at("soft_seconds").get<uint64_t>()};
  rs.repl_timeout_s = opt_u64(x.at("repl_timeout_s"));
  rs.stream_bytes_per_s = x.at("stream_bytes_per_s").get<double>();
  for (const auto& l : x.at("loops"))
    rs.loops.push_back(
        {l.at("address").get<std::string>(), l.at("syncs").get<uint64_t>(), l.at("dropped").get<uint64_t>()});
  rs.loop_cause = x.at("loop_cause").get<std::string>();
  rs.suggested_hard_limit_bytes = opt_u64(x.at("suggested_hard_limit_bytes"));
  rs.wasted_forks = x.at("wasted_forks").get<uint64_t>();
  rs.wasted_copied_bytes = x.at("wasted_copied_bytes").get<uint64_t>();
  return rs;
}

MemorySection memory_from(const json& m) {
  MemorySection out;
  out.copied_bytes = m.at("copied_bytes").get<uint64_t>();
  out.fork_window_s = m.at("fork_window_s").get<double>();
  out.mem_available_min_bytes = opt_u64(m.at("mem_available_min_bytes"));
  if (!m.at("cgroup").is_null()) {
    const auto& x = m.at("cgroup");
    CgroupSection c;
    c.version = x.at("version").get<int>();
    c.path = x.at("path").get<std::string>();
    c.limit_bytes = opt_u64(x.at("limit_bytes"));
    c.usage_max_bytes = x.at("usage_max_bytes").get<uint64_t>();
    c.peak_bytes = opt_u64(x.at("peak_bytes"));
    c.oom_kills = x.at("oom_kills").get<uint64_t>();
    out.cgroup = c;
  }
  return out;
}

}  // namespace

Report from_json(const nlohmann::json& j) {
  Report r;
  r.version = j.at("thptrace_version").get<std::string>();
  if (j.contains("host")) {
    r.hostname = j.at("host").at("name").get<std::string>();
    r.boot_id = j.at("host").at("boot_id").get<std::string>();
  }
  if (j.at("capture").contains("start_utc")) {
    r.start_realtime_ns = realtime_from_rfc3339(j.at("capture").at("start_utc").get<std::string>());
    r.end_realtime_ns = realtime_from_rfc3339(j.at("capture").at("end_utc").get<std::string>());
  }
  r.system = system_from(j.at("system"));
  const auto& target = j.at("target");
  r.pid = target.at("pid").get<int>();
  r.comm = target.at("comm").get<std::string>();
  if (target.contains("container")) r.container = proc::container_from(target.at("container"));
  if (!target.at("thp_enabled_for_process").is_null())
    r.thp_enabled_for_process = target.at("thp_enabled_for_process").get<bool>();
  const auto& ahp = target.at("anon_huge_pages_kb");
  r.anon_huge_pages_kb_start = ahp.at("start").get<uint64_t>();
  r.anon_huge_pages_kb_max = ahp.at("max").get<uint64_t>();
  r.anon_huge_pages_kb_end = ahp.at("end").get<uint64_t>();
  r.rss_kb_max = target.at("rss_kb_max").get<uint64_t>();
  if (target.contains("anon_folios")) {  // reports from 2.4
    const auto& f = target.at("anon_folios");
    r.anon_folios_start = folio_shares_from(f.at("start"));
    r.anon_folios_end = folio_shares_from(f.at("end"));
    r.anon_folios_why = f.at("why").get<std::string>();
  }
  r.target_exited = target.at("exited").get<bool>();
  const auto& probes = j.at("probes");
  // kernel_copies and disk are optional in the schema: reports from before they were families.
  for (const auto& f : tracer::kFamilies)
    if (!tracer::family_is_optional(f.family) || probes.contains(f.name))
      r.probes.at(f.family).mode = mode_named(probes.at(f.name).get<std::string>());
  // Optional in the schema: reports from before the per-process Redis entry points.
  if (probes.contains("redis_why")) r.probes.redis.why = probes.at("redis_why").get<std::string>();
  if (probes.contains("disk_why")) r.probes.disk.why = probes.at("disk_why").get<std::string>();
  const auto huge_alloc = probes.at("huge_alloc").get<std::string>();
  r.huge_alloc.mode = huge_alloc == "off" ? tracer::Mode::unavailable : mode_named(huge_alloc);
  r.probes.forced_fallback = probes.at("forced_fallback").get<bool>();
  r.duration_s = j.at("capture").at("duration_s").get<double>();
  if (j.contains("client_latency")) {
    const auto& c = j.at("client_latency");
    r.client_probe = ClientProbeSection{c.at("probe_hz").get<uint32_t>(), c.at("client_timeout_us").get<uint64_t>(),
                                        c.at("missed").get<uint64_t>(), client_latency_from(c.at("whole_capture"))};
  }
  r.start_monotonic_ns = j.at("capture").at("start_monotonic_ns").get<uint64_t>();
  if (j.at("capture").contains("copy_cost_ns")) r.copy_cost_ns = j.at("capture").at("copy_cost_ns").get<double>();
  r.sample_every = j.at("capture").value("sample_copies", 0U);
  r.copy_samples_dropped = j.at("capture").value("copy_samples_dropped", uint64_t{0});
  r.disk_calls_dropped = j.at("capture").value("disk_calls_dropped", uint64_t{0});
  r.disk_windows_unknown = j.at("capture").value("disk_windows_unknown", uint64_t{0});
  const ForkContext context{r.start_monotonic_ns, r.client_probe.has_value()};
  for (const auto& f : j.at("forks")) r.forks.push_back(fork_from(f, context, static_cast<uint32_t>(r.pid)));
  const auto& t = j.at("totals");
  r.totals.forks = t.at("forks").get<uint64_t>();
  r.totals.cow_faults = t.at("cow_faults").get<uint64_t>();
  r.totals.child_cow_faults = t.at("child_cow_faults").get<uint64_t>();
  r.totals.thp_splits = t.at("thp_splits").get<uint64_t>();
  r.totals.thp_collapses = t.at("thp_collapses").get<uint64_t>();
  r.totals.khugepaged_scans = t.at("khugepaged_scans").get<uint64_t>();
  r.totals.huge_allocs = t.at("huge_page_allocs").get<uint64_t>();
  r.totals.compaction_stalls = t.at("compaction_stalls").get<uint64_t>();
  r.totals.reclaim_stalls = t.at("reclaim_stalls").get<uint64_t>();
  r.totals.dropped_events = t.at("dropped_events").get<uint64_t>();
  r.redis = redis_from(j, r.start_monotonic_ns);
  // Optional in the schema: reports without replicas, or from before them.
  if (j.contains("replication")) r.replication = replication_from(j.at("replication"));
  // Optional in the schema: reports from before the memory figures.
  if (j.contains("memory")) r.memory = memory_from(j.at("memory"));
  return r;
}

}  // namespace thptrace::report
