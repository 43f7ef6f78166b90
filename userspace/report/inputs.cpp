// SPDX-License-Identifier: Apache-2.0
#include "report/inputs.h"

#include <array>
#include <charconv>

#include "kernel/abi.h"

namespace thptrace::report {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// The ABI structs are written field by field (not as bytes) so a recording survives a field added
// to them: a field the file lacks reads as zero. The field lists are kernel/abi.h's.

template <typename T, size_t N>
ordered_json array_json(const T (&a)[N]) {
  bool any = false;
  for (const auto& v : a) any = any || v != 0;
  if (!any) return ordered_json::array();
  return ordered_json(std::vector<T>(a, a + N));
}

template <typename T, size_t N>
void array_from(const json& j, const char* key, T (&a)[N]) {
  if (!j.contains(key)) return;
  const auto& v = j.at(key);
  for (size_t i = 0; i < N && i < v.size(); ++i) a[i] = v.at(i).get<T>();
}

template <typename T>
void field_from(const json& j, const char* key, T& out) {
  if (j.contains(key)) out = j.at(key).get<T>();
}

}  // namespace

ordered_json episode_json(const thptrace_episode& e) {
  ordered_json j;
#define X(name, m) j[#name] = e.m;
  THPTRACE_EPISODE_FIELDS(X)
#undef X
  j["fault_lat"] = array_json(e.faults.lat);
  return j;
}

thptrace_episode episode_from(const json& j) {
  thptrace_episode e{};
#define X(name, m) field_from(j, #name, e.m);
  THPTRACE_EPISODE_FIELDS(X)
#undef X
  array_from(j, "fault_lat", e.faults.lat);
  return e;
}

ordered_json event_json(const thptrace_event& e) {
  ordered_json j;
#define X(name, m) j[#name] = e.m;
  THPTRACE_EVENT_FIELDS(X)
#undef X
  if (e.type == EV_CHILD_EXIT) j["episode"] = episode_json(e.episode);
  return j;
}

thptrace_event event_from(const json& j) {
  thptrace_event e{};
#define X(name, m) field_from(j, #name, e.m);
  THPTRACE_EVENT_FIELDS(X)
#undef X
  if (j.contains("episode")) e.episode = episode_from(j.at("episode"));
  return e;
}

ordered_json target_json(const thptrace_target& t) {
  ordered_json j;
  j["active"] = array_json(t.active);
#define X(name, m) j[#name] = t.m;
  THPTRACE_TARGET_FIELDS(X)
#undef X
  j["fault_lat"] = array_json(t.faults.lat);
  return j;
}

thptrace_target target_from(const json& j) {
  thptrace_target t{};
  array_from(j, "active", t.active);
#define X(name, m) field_from(j, #name, t.m);
  THPTRACE_TARGET_FIELDS(X)
#undef X
  array_from(j, "fault_lat", t.faults.lat);
  return t;
}

tracer::Mode mode_from(const std::string& name) {
  for (const auto m : {tracer::Mode::fentry, tracer::Mode::tp_btf, tracer::Mode::raw_tp, tracer::Mode::uprobe,
                       tracer::Mode::info_polling, tracer::Mode::unavailable})
    if (name == tracer::mode_name(m)) return m;
  return tracer::Mode::unavailable;
}

ordered_json choice_json(const tracer::FamilyChoice& c) {
  return {{"mode", tracer::mode_name(c.mode)}, {"why", c.why}};
}
tracer::FamilyChoice choice_from(const json& j) {
  return {mode_from(j.at("mode").get<std::string>()), j.at("why").get<std::string>()};
}

template <typename T>
ordered_json optional_json(const std::optional<T>& v) {
  return v ? ordered_json(*v) : ordered_json(nullptr);
}
template <typename T>
std::optional<T> optional_from(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return j.at(key).get<T>();
}

ordered_json cgroup_json(const std::optional<proc::CgroupMemory>& m) {
  if (!m) return nullptr;
  return {{"version", m->version},
          {"dir", m->dir},
          {"limit_bytes", optional_json(m->limit_bytes)},
          {"usage_bytes", m->usage_bytes},
          {"peak_bytes", optional_json(m->peak_bytes)},
          {"oom_kills", m->oom_kills}};
}
// Recordings from before the memory figures have no such key: nullopt, as if no cgroup was readable.
std::optional<proc::CgroupMemory> cgroup_from(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  const auto& c = j.at(key);
  proc::CgroupMemory m;
  m.version = c.at("version").get<int>();
  m.dir = c.at("dir").get<std::string>();
  m.limit_bytes = optional_from<uint64_t>(c, "limit_bytes");
  m.usage_bytes = c.at("usage_bytes").get<uint64_t>();
  m.peak_bytes = optional_from<uint64_t>(c, "peak_bytes");
  m.oom_kills = c.at("oom_kills").get<uint64_t>();
  return m;
}

// clang-format off
#define THPTRACE_SNAPSHOT_FIELDS(X) \
  X(ts_ns) \
  X(sent_ns) \
  X(up) \
  X(process_id) \
  X(total_forks) \
  X(latest_fork_usec) \
  X(sync_full) \
  X(rdb_bgsave_in_progress) \
  X(aof_rewrite_in_progress) \
  X(replica_waiting_bgsave) \
  X(current_cow_size) \
  X(current_fork_perc) \
  X(current_save_keys_processed) \
  X(rdb_last_cow_size) \
  X(aof_last_cow_size) \
  X(repl_diskless_sync) \
  X(client_output_buffer_limit_disconnections) \
  X(mem_total_replication_buffers) \
  X(master_repl_offset) \
  X(replica_output_buffer_max)
// clang-format on

ordered_json snapshot_json(const redis::Snapshot& s) {
  ordered_json j;
#define X(f) j[#f] = s.f;
  THPTRACE_SNAPSHOT_FIELDS(X)
#undef X
  // Counters added later: written when non-zero, so that older recordings read back the same.
  if (s.rdb_saves) j["rdb_saves"] = s.rdb_saves;
  if (s.aof_rewrites) j["aof_rewrites"] = s.aof_rewrites;
  if (s.aof_delayed_fsync >= 0) j["aof_delayed_fsync"] = s.aof_delayed_fsync;
  if (s.latency) j["latency"] = {{"calls", s.latency->calls}, {"cumulative", s.latency->cumulative}};
  if (!s.replicas.empty()) {
    j["replicas"] = ordered_json::array();
    for (const auto& r : s.replicas)
      j["replicas"].push_back(
          {{"ip", r.ip}, {"port", r.port}, {"state", r.state}, {"offset", r.offset}, {"lag", r.lag}});
  }
  return j;
}

redis::Snapshot snapshot_from(const json& j) {
  redis::Snapshot s;
#define X(f) field_from(j, #f, s.f);
  THPTRACE_SNAPSHOT_FIELDS(X)
#undef X
  field_from(j, "rdb_saves", s.rdb_saves);
  field_from(j, "aof_rewrites", s.aof_rewrites);
  field_from(j, "aof_delayed_fsync", s.aof_delayed_fsync);
  if (j.contains("latency")) {
    redis::LatencyHistogram h;
    h.calls = j.at("latency").at("calls").get<uint64_t>();
    const auto& c = j.at("latency").at("cumulative");
    for (size_t i = 0; i < h.cumulative.size() && i < c.size(); ++i) h.cumulative[i] = c.at(i).get<uint64_t>();
    s.latency = h;
  }
  if (j.contains("replicas"))
    for (const auto& x : j.at("replicas")) {
      redis::ReplicaInfo r;
      field_from(x, "ip", r.ip);
      field_from(x, "port", r.port);
      field_from(x, "state", r.state);
      field_from(x, "offset", r.offset);
      field_from(x, "lag", r.lag);
      s.replicas.push_back(std::move(r));
    }
  return s;
}

ordered_json probe_sample_json(const redis::ProbeSample& s) { return {s.due_ns, s.latency_ns, s.failed ? 1 : 0}; }

ordered_json sched_stat_json(const std::optional<proc::SchedStat>& s) {
  if (!s) return nullptr;
  return {{"on_cpu_ns", s->on_cpu_ns}, {"runqueue_ns", s->runqueue_ns}};
}

std::optional<proc::SchedStat> sched_stat_from(const json& j) {
  if (!j.is_object()) return std::nullopt;
  return proc::SchedStat{j.at("on_cpu_ns").get<uint64_t>(), j.at("runqueue_ns").get<uint64_t>()};
}

redis::ProbeSample probe_sample_from(const json& j) {
  const auto row = j.get<std::array<uint64_t, 3>>();
  return {row[0], row[1], row[2] != 0};
}

ordered_json client_latency_json(const std::optional<redis::ClientLatency>& c) {
  if (!c) return nullptr;
  return {{"samples", c->samples}, {"p50_us", c->p50_us}, {"p99_us", c->p99_us},
          {"p999_us", c->p999_us}, {"max_us", c->max_us}, {"over_timeout", c->over_timeout}};
}

std::optional<redis::ClientLatency> client_latency_from(const json& v) {
  if (v.is_null()) return std::nullopt;
  return redis::ClientLatency{v.at("samples").get<uint64_t>(), v.at("p50_us").get<double>(),
                              v.at("p99_us").get<double>(),    v.at("p999_us").get<double>(),
                              v.at("max_us").get<double>(),    v.at("over_timeout").get<uint64_t>()};
}

ordered_json fsync_json(const std::optional<correlate::FsyncWindow>& w) {
  if (!w) return nullptr;
  const auto kind = [](const std::optional<correlate::FsyncLatency>& k) -> ordered_json {
    if (!k) return nullptr;
    return {{"count", k->count}, {"p50_us", k->p50_us}, {"p99_us", k->p99_us}, {"max_us", k->max_us}};
  };
  ordered_json writes = nullptr;
  if (w->aof_write)
    writes = {{"count", w->aof_write->count},
              {"blocked_ms", w->aof_write->blocked_ms},
              {"p99_us", w->aof_write->p99_us},
              {"max_us", w->aof_write->max_us}};
  return {{"main", kind(w->main)}, {"bio_aof", kind(w->bio_aof)}, {"other", kind(w->other)}, {"aof_write", writes}};
}

std::optional<correlate::FsyncWindow> fsync_from(const nlohmann::json& v) {
  if (v.is_null()) return std::nullopt;
  const auto kind = [](const nlohmann::json& k) -> std::optional<correlate::FsyncLatency> {
    if (k.is_null()) return std::nullopt;
    return correlate::FsyncLatency{k.at("count").get<uint64_t>(), k.at("p50_us").get<double>(),
                                   k.at("p99_us").get<double>(), k.at("max_us").get<double>()};
  };
  correlate::FsyncWindow w{kind(v.at("main")), kind(v.at("bio_aof")), kind(v.at("other")), std::nullopt};
  if (const auto it = v.find("aof_write"); it != v.end() && !it->is_null())
    w.aof_write = correlate::FileWrites{it->at("count").get<uint64_t>(), it->at("blocked_ms").get<double>(),
                                        it->at("p99_us").get<double>(), it->at("max_us").get<double>()};
  return w;
}

ordered_json system_json(const proc::SystemInfo& s) {
  ordered_json j = {{"kernel_release", s.kernel_release}, {"thp_enabled", s.thp_enabled}, {"thp_defrag", s.thp_defrag}};
  if (!s.folio_modes.empty()) {
    j["folio_modes"] = ordered_json::object();
    for (const auto& [kb, mode] : s.folio_modes) j["folio_modes"][std::to_string(kb)] = mode;
  }
  return j;
}

proc::SystemInfo system_from(const nlohmann::json& j) {
  proc::SystemInfo s;
  s.kernel_release = j.at("kernel_release").get<std::string>();
  s.thp_enabled = j.at("thp_enabled").get<std::string>();
  s.thp_defrag = j.at("thp_defrag").get<std::string>();
  if (const auto f = j.find("folio_modes"); f != j.end())
    for (const auto& [key, mode] : f->items()) {
      uint32_t kb = 0;
      const auto [p, ec] = std::from_chars(key.data(), key.data() + key.size(), kb);
      if (ec == std::errc() && p == key.data() + key.size()) s.folio_modes[kb] = mode.get<std::string>();
    }
  return s;
}

namespace {

ordered_json probes_json(const tracer::AttachModes& probes) {
  ordered_json p = {{"btf", probes.btf}, {"kernel_release", probes.kernel_release}};
  for (const auto& f : tracer::kFamilies) p[f.name] = choice_json(probes.at(f.family));
  p["forced_fallback"] = probes.forced_fallback;
  return p;
}

tracer::AttachModes probes_from(const json& p) {
  tracer::AttachModes probes;
  probes.btf = p.at("btf").get<bool>();
  probes.kernel_release = p.at("kernel_release").get<std::string>();
  // Recorded before kernel-made copies or the disk were families: unavailable, as they were then.
  for (const auto& f : tracer::kFamilies)
    if (!tracer::family_is_optional(f.family) || p.contains(f.name)) probes.at(f.family) = choice_from(p.at(f.name));
  probes.forced_fallback = p.at("forced_fallback").get<bool>();
  return probes;
}

ordered_json sample_json(const proc::Sample& s) {
  return {{"ts_ns", s.ts_ns},
          {"target_alive", s.target_alive},
          {"rss_kb", s.rss_kb},
          {"anon_huge_pages_kb", s.anon_huge_pages_kb},
          {"thp_enabled", optional_json(s.thp_enabled)},
          {"thp_vmstat", s.thp_vmstat},
          {"cgroup_usage_bytes", optional_json(s.cgroup_usage_bytes)},
          {"cgroup_limit_bytes", optional_json(s.cgroup_limit_bytes)},
          {"mem_available_bytes", optional_json(s.mem_available_bytes)},
          {"main_thread", sched_stat_json(s.main_thread)}};
}

proc::Sample sample_from(const json& s) {
  proc::Sample x;
  x.ts_ns = s.at("ts_ns").get<uint64_t>();
  x.target_alive = s.at("target_alive").get<bool>();
  x.rss_kb = s.at("rss_kb").get<uint64_t>();
  x.anon_huge_pages_kb = s.at("anon_huge_pages_kb").get<uint64_t>();
  x.thp_enabled = optional_from<bool>(s, "thp_enabled");
  x.thp_vmstat = s.at("thp_vmstat").get<std::map<std::string, uint64_t>>();
  x.cgroup_usage_bytes = optional_from<uint64_t>(s, "cgroup_usage_bytes");
  x.cgroup_limit_bytes = optional_from<uint64_t>(s, "cgroup_limit_bytes");
  x.mem_available_bytes = optional_from<uint64_t>(s, "mem_available_bytes");
  if (const auto m = s.find("main_thread"); m != s.end()) x.main_thread = sched_stat_from(*m);
  return x;
}

ordered_json facts_json(const redis::ServerFacts& f) {
  ordered_json j = {{"version", f.version},           {"process_id", f.process_id},
                    {"disable_thp", f.disable_thp},   {"repl_diskless_sync", f.repl_diskless_sync},
                    {"executable", f.executable},     {"client_output_buffer_limit", f.client_output_buffer_limit},
                    {"repl_timeout", f.repl_timeout}, {"repl_diskless_sync_delay", f.repl_diskless_sync_delay}};
  // Written only when read (recordings from before them have neither).
  if (!f.run_id.empty()) j["run_id"] = f.run_id;
  if (!f.role.empty()) j["role"] = f.role;
  if (!f.appendfsync.empty())
    j["persistence"] = {{"appendonly", f.appendonly},
                        {"appendfsync", f.appendfsync},
                        {"no_appendfsync_on_rewrite", f.no_appendfsync_on_rewrite},
                        {"aof_rewrite_incremental_fsync", f.aof_rewrite_incremental_fsync},
                        {"rdb_save_incremental_fsync", f.rdb_save_incremental_fsync}};
  return j;
}

redis::ServerFacts facts_from(const json& f) {
  redis::ServerFacts x;
  x.version = f.at("version").get<std::string>();
  x.process_id = f.at("process_id").get<int64_t>();
  x.disable_thp = f.at("disable_thp").get<std::string>();
  x.repl_diskless_sync = f.at("repl_diskless_sync").get<std::string>();
  x.executable = f.at("executable").get<std::string>();
  // Optional: recordings from before the replication figures.
  x.client_output_buffer_limit = f.value("client_output_buffer_limit", std::string());
  x.repl_timeout = f.value("repl_timeout", std::string());
  x.repl_diskless_sync_delay = f.value("repl_diskless_sync_delay", std::string());
  x.run_id = f.value("run_id", std::string());
  x.role = f.value("role", std::string());
  if (f.contains("persistence")) {
    const auto& p = f.at("persistence");
    x.appendonly = p.value("appendonly", std::string());
    x.appendfsync = p.value("appendfsync", std::string());
    x.no_appendfsync_on_rewrite = p.value("no_appendfsync_on_rewrite", std::string());
    x.aof_rewrite_incremental_fsync = p.value("aof_rewrite_incremental_fsync", std::string());
    x.rdb_save_incremental_fsync = p.value("rdb_save_incremental_fsync", std::string());
  }
  return x;
}

ordered_json copy_sample_json(const correlate::CopySample& x) {
  return {{"ts_ns", x.ts_ns},   {"address", x.address},         {"mapping", x.mapping},
          {"frames", x.frames}, {"leaf_module", x.leaf_module}, {"whole", x.whole},
          {"dwarf", x.dwarf}};
}

correlate::CopySample copy_sample_from(const json& x) {
  return {x.at("ts_ns").get<uint64_t>(),
          x.at("address").get<uint64_t>(),
          x.at("mapping").get<std::string>(),
          x.at("frames").get<std::vector<std::string>>(),
          x.at("leaf_module").get<std::string>(),
          x.at("whole").get<bool>(),
          x.value("dwarf", false)};
}

ordered_json latency_probe_json(const CaptureInputs& in) {
  ordered_json p = {{"hz", in.latency_probe_hz},
                    {"client_timeout_us", in.client_timeout_us},
                    {"missed", in.probe_missed},
                    {"dropped", in.probe_dropped}};
  if (in.probe_whole) p["whole"] = client_latency_json(in.probe_whole);
  auto& rows = p["samples"] = ordered_json::array();
  for (const auto& x : in.probe_samples) rows.push_back(probe_sample_json(x));
  return p;
}

void latency_probe_from(const json& p, CaptureInputs& in) {
  in.latency_probe_hz = p.at("hz").get<uint32_t>();
  in.client_timeout_us = p.at("client_timeout_us").get<uint64_t>();
  in.probe_missed = p.at("missed").get<uint64_t>();
  in.probe_dropped = p.at("dropped").get<uint64_t>();
  if (p.contains("whole")) in.probe_whole = client_latency_from(p.at("whole"));
  for (const auto& x : p.at("samples")) in.probe_samples.push_back(probe_sample_from(x));
}

}  // namespace

ordered_json inputs_to_json(const CaptureInputs& in) {
  ordered_json j;
  j["version"] = in.version;
  j["system"] = system_json(in.system);
  j["pid"] = in.pid;
  if (in.pid_in_namespace) j["pid_in_namespace"] = in.pid_in_namespace;
  if (in.start_realtime_ns) j["realtime_ns"] = {in.start_realtime_ns, in.end_realtime_ns};
  if (!in.hostname.empty() || !in.boot_id.empty()) j["host"] = {{"name", in.hostname}, {"boot_id", in.boot_id}};
  j["comm"] = in.comm;
  if (!in.container.id.empty()) j["container"] = proc::container_json(in.container);
  j["status_thp_enabled"] = optional_json(in.status_thp_enabled);
  j["probes"] = probes_json(in.probes);
  j["huge_alloc"] = choice_json(in.huge_alloc);
  j["start_ns"] = in.start_ns;
  j["end_ns"] = in.end_ns;
  j["events"] = ordered_json::array();
  for (const auto& e : in.events) j["events"].push_back(event_json(e));
  if (in.disk_summarised) {
    j["disk"] = {{"calls_dropped", in.disk_calls_dropped}, {"windows", ordered_json::array()}};
    for (const auto& d : in.disk_windows)
      j["disk"]["windows"].push_back(
          {{"from_ns", d.window.from_ns}, {"to_ns", d.window.to_ns}, {"calls", fsync_json(d.calls)}});
  }
  j["final_episodes"] = ordered_json::array();
  for (const auto& e : in.final_episodes) j["final_episodes"].push_back(episode_json(e));
  j["target"] = target_json(in.target);
  j["dropped"] = in.dropped;
  j["samples"] = ordered_json::array();
  for (const auto& s : in.samples.samples()) j["samples"].push_back(sample_json(s));
  j["redis_address"] = optional_json(in.redis_address);
  j["timeline"] = ordered_json::array();
  for (const auto& s : in.timeline) j["timeline"].push_back(snapshot_json(s));
  j["facts"] = in.facts ? facts_json(*in.facts) : ordered_json(nullptr);
  j["redis_error"] = in.redis_error;
  j["cgroup_start"] = cgroup_json(in.cgroup_start);
  j["cgroup_end"] = cgroup_json(in.cgroup_end);
  if (!in.redis_refused.empty()) j["redis_refused"] = in.redis_refused;
  if (!in.redis_outages.empty()) {
    auto& o = j["redis_outages"] = ordered_json::array();
    for (const auto& x : in.redis_outages)
      o.push_back({{"from_ns", x.from_ns}, {"to_ns", x.to_ns}, {"error", x.error}});
  }
  if (!in.counters.empty()) {
    auto& c = j["counters"] = ordered_json::array();
    for (const auto& x : in.counters)
      c.push_back({x.ts_ns, x.cow_faults, x.child_cow_faults, x.thp_splits});  // 4 numbers a row: a long series
  }
  if (!in.folio_readings.empty()) {
    auto& f = j["folio_readings"] = ordered_json::array();
    for (const auto& r : in.folio_readings) f.push_back({{"ts_ns", r.ts_ns}, {"counters", by_size_json(r.counters)}});
  }
  if (in.folios_start || in.folios_end || !in.folio_walk_why.empty())
    j["target_folios"] = {{"start", folio_shares_json(in.folios_start)},
                          {"end", folio_shares_json(in.folios_end)},
                          {"why", in.folio_walk_why}};
  if (in.copy_cost_ns) j["copy_cost_ns"] = *in.copy_cost_ns;
  if (in.sample_every) {
    j["sample_every"] = in.sample_every;
    j["copy_samples_dropped"] = in.copy_samples_dropped;
    auto& c = j["copy_samples"] = ordered_json::array();
    for (const auto& x : in.copy_samples) c.push_back(copy_sample_json(x));
  }
  if (in.latency_probe_hz) j["latency_probe"] = latency_probe_json(in);
  if (!in.series_let_go.empty()) {
    auto& g = j["series_let_go"] = ordered_json::array();
    for (const auto& w : in.series_let_go) g.push_back({w.from_ns, w.to_ns});
  }
  return j;
}

ordered_json folio_shares_json(const std::optional<proc::FolioShares>& s) {
  if (!s) return nullptr;
  return {{"kb", by_size_json(s->kb)}, {"pages", s->pages}, {"every", s->every}, {"walk_us", s->walk_ns / 1000}};
}

std::optional<proc::FolioShares> folio_shares_from(const json& j) {
  if (j.is_null()) return std::nullopt;
  proc::FolioShares s;
  s.kb = by_size_from<uint64_t>(j.at("kb"));
  s.pages = j.at("pages").get<uint64_t>();
  s.every = j.at("every").get<uint64_t>();
  s.walk_ns = j.at("walk_us").get<uint64_t>() * 1000;
  return s;
}

CaptureInputs inputs_from_json(const json& j) {
  CaptureInputs in;
  in.version = j.at("version").get<std::string>();
  in.system = system_from(j.at("system"));
  in.pid = j.at("pid").get<int>();
  if (j.contains("realtime_ns")) {
    in.start_realtime_ns = j.at("realtime_ns").at(0).get<int64_t>();
    in.end_realtime_ns = j.at("realtime_ns").at(1).get<int64_t>();
  }
  if (j.contains("host")) {
    in.hostname = j.at("host").at("name").get<std::string>();
    in.boot_id = j.at("host").at("boot_id").get<std::string>();
  }
  in.pid_in_namespace = j.value("pid_in_namespace", 0);
  in.comm = j.at("comm").get<std::string>();
  if (j.contains("container")) in.container = proc::container_from(j.at("container"));
  in.status_thp_enabled = optional_from<bool>(j, "status_thp_enabled");
  in.probes = probes_from(j.at("probes"));
  in.huge_alloc = choice_from(j.at("huge_alloc"));
  in.start_ns = j.at("start_ns").get<uint64_t>();
  in.end_ns = j.at("end_ns").get<uint64_t>();
  for (const auto& e : j.at("events")) in.events.push_back(event_from(e));
  // Recorded before captures summarised their disk calls: the events hold them.
  if (const auto d = j.find("disk"); d != j.end()) {
    in.disk_summarised = true;
    in.disk_calls_dropped = d->at("calls_dropped").get<uint64_t>();
    for (const auto& w : d->at("windows"))
      in.disk_windows.push_back(
          {{w.at("from_ns").get<uint64_t>(), w.at("to_ns").get<uint64_t>()}, fsync_from(w.at("calls"))});
  }
  for (const auto& e : j.at("final_episodes")) in.final_episodes.push_back(episode_from(e));
  in.target = target_from(j.at("target"));
  in.dropped = j.at("dropped").get<uint64_t>();
  for (const auto& s : j.at("samples")) in.samples.add(sample_from(s));
  in.redis_address = optional_from<std::string>(j, "redis_address");
  for (const auto& s : j.at("timeline")) in.timeline.push_back(snapshot_from(s));
  if (j.contains("facts") && !j.at("facts").is_null()) in.facts = facts_from(j.at("facts"));
  in.redis_error = j.at("redis_error").get<std::string>();
  in.cgroup_start = cgroup_from(j, "cgroup_start");
  in.cgroup_end = cgroup_from(j, "cgroup_end");
  if (j.contains("redis_refused")) in.redis_refused = j.at("redis_refused").get<std::map<std::string, std::string>>();
  if (j.contains("redis_outages"))
    for (const auto& x : j.at("redis_outages"))
      in.redis_outages.push_back(
          {x.at("from_ns").get<uint64_t>(), x.at("to_ns").get<uint64_t>(), x.at("error").get<std::string>()});
  if (j.contains("counters"))
    for (const auto& x : j.at("counters")) {
      const auto row = x.get<std::array<uint64_t, 4>>();
      in.counters.push_back({row[0], row[1], row[2], row[3]});
    }
  if (j.contains("folio_readings"))
    for (const auto& x : j.at("folio_readings"))
      in.folio_readings.push_back({.ts_ns = x.at("ts_ns").get<uint64_t>(),
                                   .counters = by_size_from<std::map<std::string, uint64_t>>(x.at("counters"))});
  if (j.contains("target_folios")) {
    const auto& f = j.at("target_folios");
    in.folios_start = folio_shares_from(f.at("start"));
    in.folios_end = folio_shares_from(f.at("end"));
    in.folio_walk_why = f.at("why").get<std::string>();
  }
  if (j.contains("copy_cost_ns")) in.copy_cost_ns = j.at("copy_cost_ns").get<double>();
  in.sample_every = j.value("sample_every", 0U);
  in.copy_samples_dropped = j.value("copy_samples_dropped", uint64_t{0});
  if (j.contains("copy_samples"))
    for (const auto& x : j.at("copy_samples")) in.copy_samples.push_back(copy_sample_from(x));
  if (j.contains("latency_probe")) latency_probe_from(j.at("latency_probe"), in);
  if (j.contains("series_let_go"))
    for (const auto& w : j.at("series_let_go")) {
      const auto span = w.get<std::array<uint64_t, 2>>();
      in.series_let_go.push_back({span[0], span[1]});
    }
  return in;
}

}  // namespace thptrace::report
