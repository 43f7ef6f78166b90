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

ordered_json latency_json(const std::optional<correlate::LatencyWindow>& w) {
  if (!w) return nullptr;
  return {{"calls", w->calls}, {"p50_us", w->p50_us}, {"p99_us", w->p99_us}, {"p999_us", w->p999_us}, {"max_us", w->max_us}};
}

// CLOCK_REALTIME ns as RFC 3339 in UTC with milliseconds: 2026-12-02T12:00:00.000Z.
std::string rfc3339_utc(int64_t ns) {
  const time_t secs = static_cast<time_t>(ns / 1'000'000'000);
  tm t{};
  ::gmtime_r(&secs, &t);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour,
                     t.tm_min, t.tm_sec, (ns % 1'000'000'000) / 1'000'000);
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

ordered_json client_latency_json(const std::optional<redis::ClientLatency>& c) {
  if (!c) return nullptr;
  return {{"samples", c->samples}, {"p50_us", c->p50_us}, {"p99_us", c->p99_us},
          {"p999_us", c->p999_us}, {"max_us", c->max_us}, {"over_timeout", c->over_timeout}};
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

std::string fmt_opt(const std::optional<double>& v, const char* spec) {
  return v ? fmt::format(fmt::runtime(spec), *v) : std::string("-");
}

// One replica's sync under its fork's row: how it got the fork, each state with the time since its
// request, and how it ended.
std::string replica_line(const correlate::ReplicaSync& s) {
  std::string how;
  switch (s.joined) {
    case correlate::ReplicaSync::Joined::rode: how = "rode a fork in progress"; break;
    case correlate::ReplicaSync::Joined::started: how = "its request started the fork"; break;
    case correlate::ReplicaSync::Joined::waited:
      how = fmt::format("waited {:.0f} ms for the fork", s.wait_ms.value_or(0));
      break;
    case correlate::ReplicaSync::Joined::unknown: how = "requested before the capture"; break;
  }
  std::string states;
  if (s.outcome == correlate::ReplicaSync::Outcome::online && !s.sync_ms()) {
    states = "online, synced between two polls";
  } else {
    for (const auto& x : s.states)
      states += fmt::format("{}{} +{:.0f} ms", states.empty() ? "" : ", ", x.state,
                            static_cast<double>(x.first_seen_ns - s.first_seen_ns) / 1e6);
  }
  std::string end;
  if (s.outcome == correlate::ReplicaSync::Outcome::dropped)
    end = fmt::format("; dropped after {:.0f} ms", static_cast<double>(s.last_seen_ns - s.first_seen_ns) / 1e6);
  else if (s.outcome == correlate::ReplicaSync::Outcome::syncing)
    end = "; still syncing at the end";
  return fmt::format("           replica {} ({}): {}{}; offset {}", s.address, how, states, end, s.offset);
}

// A fork's row, continued: what the latency probe's requests felt during it and before it.
std::string client_latency_line(const redis::ClientLatency& d, const std::optional<redis::ClientLatency>& b,
                                uint64_t timeout_us) {
  const auto figures = [timeout_us](const redis::ClientLatency& c) {
    return fmt::format("max {:.2f} ms, p99.9 {:.2f} ms, p50 {:.0f} µs, {} of {} over {} µs", c.max_us / 1e3,
                       c.p999_us / 1e3, c.p50_us, c.over_timeout, c.samples, timeout_us);
  };
  return fmt::format("           clients felt: {} during; {}", figures(d),
                     b ? figures(*b) + " before" : std::string("nothing measured before"));
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

}  // namespace

ordered_json to_json(const Report& r) {
  ordered_json j;
  j["report_version"] = kReportVersion;
  j["thptrace_version"] = r.version;
  if (!r.hostname.empty() || !r.boot_id.empty()) j["host"] = {{"name", r.hostname}, {"boot_id", r.boot_id}};
  j["system"] = {{"kernel_release", r.system.kernel_release},
                 {"thp_enabled", r.system.thp_enabled},
                 {"thp_defrag", r.system.thp_defrag}};
  j["target"] = {{"pid", r.pid},
                 {"comm", r.comm},
                 {"thp_enabled_for_process", r.thp_enabled_for_process ? ordered_json(*r.thp_enabled_for_process) : ordered_json(nullptr)},
                 {"anon_huge_pages_kb", {{"start", r.anon_huge_pages_kb_start}, {"max", r.anon_huge_pages_kb_max}, {"end", r.anon_huge_pages_kb_end}}},
                 {"rss_kb_max", r.rss_kb_max},
                 {"exited", r.target_exited}};
  j["probes"] = {{"fork", tracer::mode_name(r.probes.fork.mode)},
                 {"cow_fault", tracer::mode_name(r.probes.cow_fault.mode)},
                 {"thp", tracer::mode_name(r.probes.thp.mode)},
                 {"stall", tracer::mode_name(r.probes.stall.mode)},
                 {"redis", tracer::mode_name(r.probes.redis.mode)},
                 {"redis_why", r.probes.redis.why},
                 {"kernel_copies", tracer::mode_name(r.probes.kernel_copies.mode)},
                 {"huge_alloc", r.huge_alloc.mode == tracer::Mode::unavailable ? "off" : tracer::mode_name(r.huge_alloc.mode)},
                 {"forced_fallback", r.probes.forced_fallback}};
  j["capture"] = {{"duration_s", r.duration_s}, {"start_monotonic_ns", r.start_monotonic_ns}};
  if (r.start_realtime_ns) {
    j["capture"]["start_utc"] = rfc3339_utc(r.start_realtime_ns);
    j["capture"]["end_utc"] = rfc3339_utc(r.end_realtime_ns);
  }
  if (r.sample_every) {
    j["capture"]["sample_copies"] = r.sample_every;
    j["capture"]["copy_samples_dropped"] = r.copy_samples_dropped;
  }
  if (r.client_probe)
    j["client_latency"] = {{"probe_hz", r.client_probe->hz},
                           {"client_timeout_us", r.client_probe->client_timeout_us},
                           {"missed", r.client_probe->missed},
                           {"whole_capture", client_latency_json(r.client_probe->whole)}};
  ordered_json forks = ordered_json::array();
  for (const auto& e : r.forks) {
    ordered_json f = {{"child_pid", e.child_pid},
                      {"reason", correlate::reason_name(e.reason)},
                      {"reason_source", e.reason_source},
                      {"fork_duration_us", opt(e.fork_duration_us)},
                      {"clone_syscall_us", opt(e.clone_syscall_us)},
                      {"child_lifetime_ms", opt(e.child_lifetime_ms)},
                      {"fork_ts_ms", offset_ms(e.fork_ts_ns, r.start_monotonic_ns)},
                      {"exit_ts_ms", offset_ms(e.exit_ts_ns, r.start_monotonic_ns)},
                      {"cow_faults", e.cow_faults},
                      {"child_cow_faults", e.child_cow_faults},
                      {"thp_splits", e.thp_splits},
                      {"thp_splits_source", e.thp_splits_source},
                      {"huge_cow_faults", e.huge_cow_faults},
                      {"huge_page_allocs", e.huge_allocs},
                      {"fault_avg_ns", opt(e.fault_avg_ns)},
                      {"fault_latency_log2_ns", e.fault_latency_log2},
                      {"compaction_stalls", e.compaction_stalls},
                      {"compaction_ms", e.compaction_ms},
                      {"reclaim_stalls", e.reclaim_stalls},
                      {"reclaim_ms", e.reclaim_ms},
                      {"latency_during", latency_json(e.latency_during)},
                      {"latency_before", latency_json(e.latency_before)},
                      {"replicas", replicas_json(e.replicas, r.start_monotonic_ns)}};
    if (r.client_probe) {
      f["client_latency_during"] = client_latency_json(e.client_latency_during);
      f["client_latency_before"] = client_latency_json(e.client_latency_before);
    }
    if (e.copies) f["copies"] = copies_json(*e.copies);
    forks.push_back(std::move(f));
  }
  j["forks"] = std::move(forks);
  j["totals"] = {{"forks", r.forks.size()},
                 {"cow_faults", r.totals.cow_faults},
                 {"child_cow_faults", r.totals.child_cow_faults},
                 {"thp_splits", r.totals.thp_splits},
                 {"thp_collapses", r.totals.thp_collapses},
                 {"khugepaged_scans", r.totals.khugepaged_scans},
                 {"huge_page_allocs", r.totals.huge_allocs},
                 {"compaction_stalls", r.totals.compaction_stalls},
                 {"reclaim_stalls", r.totals.reclaim_stalls},
                 {"dropped_events", r.totals.dropped_events}};
  if (r.redis && r.redis->reachable) {
    j["redis"] = {{"address", r.redis->address},
                  {"version", r.redis->version},
                  {"process_id", r.redis->process_id},
                  {"disable_thp", r.redis->disable_thp},
                  {"repl_diskless_sync", r.redis->repl_diskless_sync},
                  {"latest_fork_usec", r.redis->latest_fork_usec},
                  {"total_forks_delta", r.redis->total_forks_delta},
                  {"rdb_last_cow_size", r.redis->rdb_last_cow_size}};
    if (!r.redis->run_id.empty()) j["redis"]["run_id"] = r.redis->run_id;
    if (!r.redis->role.empty()) j["redis"]["role"] = r.redis->role;
    if (!r.redis->unanswered.empty()) {
      auto& u = j["redis"]["unanswered"] = ordered_json::array();
      for (const auto& o : r.redis->unanswered)
        u.push_back({{"from_ms", offset_ms(o.from_ns, r.start_monotonic_ns)},
                     {"to_ms", offset_ms(o.to_ns, r.start_monotonic_ns)},
                     {"error", o.error}});
    }
    if (!r.redis->refused.empty()) j["redis"]["refused"] = r.redis->refused;
  } else if (r.redis) {
    j["redis_error"] = r.redis->error;
  }
  j["memory"] = {{"copied_bytes", r.memory.copied_bytes},
                 {"fork_window_s", r.memory.fork_window_s},
                 {"mem_available_min_bytes", opt(r.memory.mem_available_min_bytes)},
                 {"cgroup", nullptr}};
  if (const auto& c = r.memory.cgroup)
    j["memory"]["cgroup"] = {{"version", c->version},
                             {"path", c->path},
                             {"limit_bytes", opt(c->limit_bytes)},
                             {"usage_max_bytes", c->usage_max_bytes},
                             {"peak_bytes", opt(c->peak_bytes)},
                             {"headroom_bytes", opt(c->headroom_bytes())},
                             {"oom_kills", c->oom_kills}};
  if (const auto& x = r.replication) {
    ordered_json loops = ordered_json::array();
    for (const auto& l : x->loops)
      loops.push_back({{"address", l.address}, {"syncs", l.syncs}, {"dropped", l.dropped}});
    ordered_json limit = nullptr;
    if (x->limit)
      limit = {{"hard_bytes", x->limit->hard_bytes},
               {"soft_bytes", x->limit->soft_bytes},
               {"soft_seconds", x->limit->soft_seconds}};
    j["replication"] = {{"full_syncs", x->full_syncs},
                        {"replica_syncs", x->replica_syncs},
                        {"dropped_syncs", x->dropped_syncs},
                        {"output_buffer_limit_disconnections", opt(x->output_buffer_limit_disconnections)},
                        {"replication_buffer_peak_bytes", x->replication_buffer_peak_bytes},
                        {"replica_output_buffer_peak_bytes", opt(x->replica_output_buffer_peak_bytes)},
                        {"replica_output_buffer_limit", std::move(limit)},
                        {"repl_timeout_s", opt(x->repl_timeout_s)},
                        {"stream_bytes_per_s", x->stream_bytes_per_s},
                        {"loops", std::move(loops)},
                        {"loop_cause", x->loop_cause},
                        {"suggested_hard_limit_bytes", opt(x->suggested_hard_limit_bytes)},
                        {"wasted_forks", x->wasted_forks},
                        {"wasted_copied_bytes", x->wasted_copied_bytes}};
  }
  j["findings"] = findings(r);
  make_valid(j);
  return j;
}

std::vector<bool> shown_forks(const std::vector<correlate::ForkEpisode>& forks) {
  std::vector<bool> shown(forks.size(), forks.size() <= kForkTableRows);
  if (forks.size() <= kForkTableRows) return shown;
  std::vector<size_t> by_cow(forks.size());
  for (size_t i = 0; i < by_cow.size(); ++i) by_cow[i] = i;
  std::stable_sort(by_cow.begin(), by_cow.end(),
                   [&](size_t a, size_t b) { return forks[a].cow_faults > forks[b].cow_faults; });
  for (size_t i = 0; i < kWorstForksShown; ++i) shown[by_cow[i]] = true;
  for (size_t i = forks.size() - kRecentForksShown; i < forks.size(); ++i) shown[i] = true;
  return shown;
}

std::string to_text(const Report& r) {
  std::string out;
  // Each line made printable once here: a name cannot end a line early or hold a terminal escape.
  auto line = [&out](const std::string& s) { out += text::printable(s) + "\n"; };
  line(fmt::format("thptrace {} — capture of pid {} ({}) for {:.1f} s", r.version, r.pid, r.comm, r.duration_s));
  if (r.start_realtime_ns)
    line(fmt::format("host {}, from {} to {}", r.hostname.empty() ? "?" : r.hostname, rfc3339_utc(r.start_realtime_ns),
                     rfc3339_utc(r.end_realtime_ns)));
  line(fmt::format("kernel {}  THP enabled={} defrag={}  process THP_enabled={}", r.system.kernel_release,
                   r.system.thp_enabled, r.system.thp_defrag,
                   r.thp_enabled_for_process ? (*r.thp_enabled_for_process ? "1" : "0") : "n/a"));
  line(fmt::format("AnonHugePages start/max/end: {}/{}/{} kB   RSS max: {} kB", r.anon_huge_pages_kb_start,
                   r.anon_huge_pages_kb_max, r.anon_huge_pages_kb_end, r.rss_kb_max));
  line(fmt::format("probes: fork={} cow_fault={} thp={} stall={} redis={}{}", tracer::mode_name(r.probes.fork.mode),
                   tracer::mode_name(r.probes.cow_fault.mode), tracer::mode_name(r.probes.thp.mode),
                   tracer::mode_name(r.probes.stall.mode), tracer::mode_name(r.probes.redis.mode),
                   r.probes.forced_fallback ? " (fallback forced)" : ""));
  if (r.probes.redis.mode == tracer::Mode::uprobe || r.probes.redis.mode == tracer::Mode::info_polling)
    line(fmt::format("redis fork reasons: {}", r.probes.redis.why));
  if (r.probes.kernel_copies.mode == tracer::Mode::unavailable)
    line(fmt::format("kernel-made copies: not counted ({})", r.probes.kernel_copies.why));
  if (r.huge_alloc.mode == tracer::Mode::unavailable)
    line(fmt::format("huge page allocations: not counted ({})", r.huge_alloc.why));
  else
    line(fmt::format("huge page allocations: counted with {} ({})", tracer::mode_name(r.huge_alloc.mode), r.huge_alloc.why));
  if (r.redis && r.redis->reachable)
    line(fmt::format("redis {} at {}: disable-thp={} repl-diskless-sync={} latest_fork_usec={} total_forks +{}",
                     r.redis->version, r.redis->address, r.redis->disable_thp, r.redis->repl_diskless_sync,
                     r.redis->latest_fork_usec, r.redis->total_forks_delta));
  if (r.redis)
    for (const auto& o : r.redis->unanswered)
      line(fmt::format(
          "redis did not answer from +{:.1f} s {}: {}", r.seconds_since_start(o.from_ns),
          o.to_ns ? fmt::format("to +{:.1f} s", r.seconds_since_start(o.to_ns)) : std::string("to the end"), o.error));
  if (r.redis && r.redis->reachable)
    for (const auto& why : r.redis->refused) line(fmt::format("redis figure missing: {}", why));
  if (const auto& c = r.memory.cgroup) {
    const auto mib = [](uint64_t b) { return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20)); };
    line(fmt::format("memory cgroup v{} {}: limit {}, usage peak {}{}, oom kills {}", c->version, c->path,
                     c->limit_bytes ? mib(*c->limit_bytes) : std::string("none"), mib(c->usage_max_bytes),
                     c->limit_bytes ? fmt::format(" ({:.0f}% of it)",
                                                  100.0 * static_cast<double>(c->usage_max_bytes) /
                                                      static_cast<double>(std::max<uint64_t>(*c->limit_bytes, 1)))
                                    : std::string(),
                     c->oom_kills));
  }
  if (const auto& x = r.replication) {
    const auto mib = [](uint64_t b) { return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20)); };
    std::string limit = "unknown";
    if (x->limit)
      limit = fmt::format("{} hard, {} soft for {} s", mib(x->limit->hard_bytes), mib(x->limit->soft_bytes),
                          x->limit->soft_seconds);
    line(fmt::format(
        "replication: {} full syncs (INFO sync_full +{}), {} dropped before online; replica output "
        "buffer limit {}; replication buffers peak {}{}{}",
        x->replica_syncs, x->full_syncs, x->dropped_syncs, limit, mib(x->replication_buffer_peak_bytes),
        x->replica_output_buffer_peak_bytes
            ? fmt::format(", replica output buffer peak {}", mib(*x->replica_output_buffer_peak_bytes))
            : std::string(),
        x->output_buffer_limit_disconnections
            ? fmt::format(", output buffer limit disconnections +{}", *x->output_buffer_limit_disconnections)
            : std::string()));
  }
  line("");
  line(fmt::format("forks: {}", r.forks.size()));
  if (!r.forks.empty()) {
    line(fmt::format("  {:>8} {:<19} {:>10} {:>11} {:>10} {:>10} {:>7} {:>21} {:>21}", "child", "reason", "fork_us",
                     "lifetime_ms", "cow", "child_cow", "splits", "p50/p99.9 us during", "p50/p99.9 us before"));
    const auto shown = shown_forks(r.forks);
    for (size_t i = 0; i < r.forks.size(); ++i) {
      if (!shown[i]) continue;
      const auto& e = r.forks[i];
      auto lat = [](const std::optional<correlate::LatencyWindow>& w) {
        return w ? fmt::format("{:.0f}/{:.0f}", w->p50_us, w->p999_us) : std::string("-");
      };
      line(fmt::format("  {:>8} {:<19} {:>10} {:>11} {:>10} {:>10} {:>7} {:>21} {:>21}", e.child_pid,
                       correlate::reason_name(e.reason), fmt_opt(e.fork_duration_us, "{:.0f}"),
                       e.child_lifetime_ms ? fmt::format("{:.1f}", *e.child_lifetime_ms) : std::string("alive"),
                       e.cow_faults, e.child_cow_faults, e.thp_splits, lat(e.latency_during), lat(e.latency_before)));
      if (r.client_probe && e.client_latency_during)
        line(client_latency_line(*e.client_latency_during, e.client_latency_before, r.client_probe->client_timeout_us));
      if (e.fault_avg_ns)
        line(fmt::format("           COW fault handler: avg {:.0f} ns; huge-PMD faults {}", *e.fault_avg_ns,
                         e.huge_cow_faults));
      for (size_t k = 0; k < e.replicas.size() && k < kReplicasShown; ++k) line(replica_line(e.replicas[k]));
      if (e.replicas.size() > kReplicasShown)
        line(fmt::format("           ... {} more replicas (the JSON report has them all)",
                         e.replicas.size() - kReplicasShown));
      if (e.copies)
        for (const auto& l : copies_lines(*e.copies)) line(l);
    }
    const auto hidden = static_cast<size_t>(std::count(shown.begin(), shown.end(), false));
    if (hidden > 0)
      line(fmt::format("  ... {} more forks not shown: the table keeps the {} with the most copy-on-write faults "
                       "and the {} most recent; the JSON report has every fork.",
                       hidden, kWorstForksShown, kRecentForksShown));
  }
  line("");
  line(fmt::format("totals: cow_faults={} child_cow_faults={} thp_splits={} thp_collapses={} compaction_stalls={} "
                   "reclaim_stalls={} dropped_events={}",
                   r.totals.cow_faults, r.totals.child_cow_faults, r.totals.thp_splits, r.totals.thp_collapses,
                   r.totals.compaction_stalls, r.totals.reclaim_stalls, r.totals.dropped_events));
  line("");
  line("findings:");
  int i = 1;
  for (const auto& f : findings(r)) line(fmt::format("  {}. {}", i++, f));
  return out;
}

std::string json_text(const Report& r) {
  // to_json made every string valid; replace is the last defence of a writer that must not throw.
  return to_json(r).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

namespace {

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

// The inverse of offset_ms: exact, since an offset of a few hours in ms keeps its ns in a double.
uint64_t ts_from(const json& v, uint64_t start_ns) {
  if (v.is_null()) return 0;
  return static_cast<uint64_t>(static_cast<int64_t>(start_ns) + std::llround(v.get<double>() * 1e6));
}

std::optional<redis::ClientLatency> client_latency_from(const json& v) {
  if (v.is_null()) return std::nullopt;
  return redis::ClientLatency{v.at("samples").get<uint64_t>(), v.at("p50_us").get<double>(),
                              v.at("p99_us").get<double>(),    v.at("p999_us").get<double>(),
                              v.at("max_us").get<double>(),    v.at("over_timeout").get<uint64_t>()};
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
  const auto& sys = j.at("system");
  r.system = {sys.at("kernel_release").get<std::string>(), sys.at("thp_enabled").get<std::string>(),
              sys.at("thp_defrag").get<std::string>()};
  const auto& target = j.at("target");
  r.pid = target.at("pid").get<int>();
  r.comm = target.at("comm").get<std::string>();
  if (!target.at("thp_enabled_for_process").is_null())
    r.thp_enabled_for_process = target.at("thp_enabled_for_process").get<bool>();
  const auto& ahp = target.at("anon_huge_pages_kb");
  r.anon_huge_pages_kb_start = ahp.at("start").get<uint64_t>();
  r.anon_huge_pages_kb_max = ahp.at("max").get<uint64_t>();
  r.anon_huge_pages_kb_end = ahp.at("end").get<uint64_t>();
  r.rss_kb_max = target.at("rss_kb_max").get<uint64_t>();
  r.target_exited = target.at("exited").get<bool>();
  const auto& probes = j.at("probes");
  r.probes.fork.mode = mode_named(probes.at("fork").get<std::string>());
  r.probes.cow_fault.mode = mode_named(probes.at("cow_fault").get<std::string>());
  r.probes.thp.mode = mode_named(probes.at("thp").get<std::string>());
  r.probes.stall.mode = mode_named(probes.at("stall").get<std::string>());
  r.probes.redis.mode = mode_named(probes.at("redis").get<std::string>());
  // Optional in the schema: reports from before the per-process Redis entry points and kernel copies.
  if (probes.contains("redis_why")) r.probes.redis.why = probes.at("redis_why").get<std::string>();
  if (probes.contains("kernel_copies"))
    r.probes.kernel_copies.mode = mode_named(probes.at("kernel_copies").get<std::string>());
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
  r.sample_every = j.at("capture").value("sample_copies", 0U);
  r.copy_samples_dropped = j.at("capture").value("copy_samples_dropped", uint64_t{0});
  for (const auto& f : j.at("forks")) {
    correlate::ForkEpisode e;
    e.parent_tgid = static_cast<uint32_t>(r.pid);
    e.child_pid = f.at("child_pid").get<uint32_t>();
    e.reason = reason_named(f.at("reason").get<std::string>());
    e.reason_source = f.at("reason_source").get<std::string>();
    e.fork_duration_us = opt_from(f, "fork_duration_us");
    e.clone_syscall_us = opt_from(f, "clone_syscall_us");
    e.child_lifetime_ms = opt_from(f, "child_lifetime_ms");
    e.fork_ts_ns = ts_from(f.at("fork_ts_ms"), r.start_monotonic_ns);
    e.exit_ts_ns = ts_from(f.at("exit_ts_ms"), r.start_monotonic_ns);
    e.cow_faults = f.at("cow_faults").get<uint64_t>();
    e.child_cow_faults = f.at("child_cow_faults").get<uint64_t>();
    e.thp_splits = f.at("thp_splits").get<uint64_t>();
    e.thp_splits_source = f.at("thp_splits_source").get<std::string>();
    e.huge_cow_faults = f.at("huge_cow_faults").get<uint64_t>();
    e.huge_allocs = f.at("huge_page_allocs").get<uint64_t>();
    e.fault_avg_ns = opt_from(f, "fault_avg_ns");
    e.fault_latency_log2 = f.at("fault_latency_log2_ns").get<std::vector<uint64_t>>();
    e.compaction_stalls = f.at("compaction_stalls").get<uint64_t>();
    e.compaction_ms = f.at("compaction_ms").get<double>();
    e.reclaim_stalls = f.at("reclaim_stalls").get<uint64_t>();
    e.reclaim_ms = f.at("reclaim_ms").get<double>();
    e.latency_during = latency_from(f.at("latency_during"));
    e.latency_before = latency_from(f.at("latency_before"));
    if (f.contains("replicas"))  // optional in the schema: reports from before the replicas
      for (const auto& x : f.at("replicas")) e.replicas.push_back(replica_from(x, r.start_monotonic_ns));
    if (f.contains("copies")) e.copies = copies_from(f.at("copies"));
    if (f.contains("client_latency_during")) {
      e.client_latency_during = client_latency_from(f.at("client_latency_during"));
      e.client_latency_before = client_latency_from(f.at("client_latency_before"));
    }
    r.forks.push_back(std::move(e));
  }
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
    if (x.contains("unanswered"))
      for (const auto& o : x.at("unanswered"))
        rs.unanswered.push_back({ts_from(o.at("from_ms"), r.start_monotonic_ns),
                                 ts_from(o.at("to_ms"), r.start_monotonic_ns), o.at("error").get<std::string>()});
    if (x.contains("refused")) rs.refused = x.at("refused").get<std::vector<std::string>>();
    r.redis = rs;
  } else if (j.contains("redis_error")) {
    RedisSection rs;
    rs.error = j.at("redis_error").get<std::string>();
    r.redis = rs;
  }
  // Optional in the schema: reports without replicas, or from before them.
  if (j.contains("replication")) {
    const auto& x = j.at("replication");
    const auto u64 = [](const json& v) -> std::optional<uint64_t> {
      return v.is_null() ? std::nullopt : std::optional(v.get<uint64_t>());
    };
    ReplicationSection rs;
    rs.full_syncs = x.at("full_syncs").get<uint64_t>();
    rs.replica_syncs = x.at("replica_syncs").get<uint64_t>();
    rs.dropped_syncs = x.at("dropped_syncs").get<uint64_t>();
    rs.output_buffer_limit_disconnections = u64(x.at("output_buffer_limit_disconnections"));
    rs.replication_buffer_peak_bytes = x.at("replication_buffer_peak_bytes").get<uint64_t>();
    rs.replica_output_buffer_peak_bytes = u64(x.at("replica_output_buffer_peak_bytes"));
    if (const auto& l = x.at("replica_output_buffer_limit"); !l.is_null())
      rs.limit = redis::OutputBufferLimit{l.at("hard_bytes").get<uint64_t>(), l.at("soft_bytes").get<uint64_t>(),
                                          l.at("soft_seconds").get<uint64_t>()};
    rs.repl_timeout_s = u64(x.at("repl_timeout_s"));
    rs.stream_bytes_per_s = x.at("stream_bytes_per_s").get<double>();
    for (const auto& l : x.at("loops"))
      rs.loops.push_back(
          {l.at("address").get<std::string>(), l.at("syncs").get<uint64_t>(), l.at("dropped").get<uint64_t>()});
    rs.loop_cause = x.at("loop_cause").get<std::string>();
    rs.suggested_hard_limit_bytes = u64(x.at("suggested_hard_limit_bytes"));
    rs.wasted_forks = x.at("wasted_forks").get<uint64_t>();
    rs.wasted_copied_bytes = x.at("wasted_copied_bytes").get<uint64_t>();
    r.replication = rs;
  }
  // Optional in the schema: reports from before the memory figures.
  if (j.contains("memory")) {
    const auto& m = j.at("memory");
    const auto u64 = [](const json& x) -> std::optional<uint64_t> {
      return x.is_null() ? std::nullopt : std::optional(x.get<uint64_t>());
    };
    r.memory.copied_bytes = m.at("copied_bytes").get<uint64_t>();
    r.memory.fork_window_s = m.at("fork_window_s").get<double>();
    r.memory.mem_available_min_bytes = u64(m.at("mem_available_min_bytes"));
    if (!m.at("cgroup").is_null()) {
      const auto& x = m.at("cgroup");
      CgroupSection c;
      c.version = x.at("version").get<int>();
      c.path = x.at("path").get<std::string>();
      c.limit_bytes = u64(x.at("limit_bytes"));
      c.usage_max_bytes = x.at("usage_max_bytes").get<uint64_t>();
      c.peak_bytes = u64(x.at("peak_bytes"));
      c.oom_kills = x.at("oom_kills").get<uint64_t>();
      r.memory.cgroup = c;
    }
  }
  return r;
}

}  // namespace thptrace::report
