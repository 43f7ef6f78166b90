// SPDX-License-Identifier: Apache-2.0
#include "bench/results.h"

#include <fmt/format.h>

#include <fstream>

#include "loadgen/loadgen.h"

namespace thptrace::bench {
namespace {

// A CSV field: quoted when it holds a comma, a quote or a line break (RFC 4180).
std::string field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string opt(const std::optional<double>& v, const char* spec = "{:.1f}") {
  return v ? fmt::format(fmt::runtime(spec), *v) : std::string();
}

std::string info_or_empty(const redis::InfoMap& info, const std::string& key) { return redis::info_str(info, key); }

// Writes `text` to dir/name through a temporary file, so a reader never sees half a file.
void write_file(const std::filesystem::path& dir, const std::string& name, const std::string& text) {
  const auto path = dir / name;
  const auto tmp = dir / (name + ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << text;
    out.flush();
    if (!out) throw BenchError(fmt::format("cannot write {}", path.string()));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw BenchError(fmt::format("cannot write {}: {}", path.string(), ec.message()));
}

std::string percentiles_csv(const std::vector<ScenarioResult>& results) {
  std::string out =
      "scenario,phase,p50_us,p90_us,p99_us,p99_9_us,p99_99_us,max_us,count,mean_us,duration_s,probe_ops_per_s,"
      "writer_ops_per_s,probe_mode\n";
  for (const auto& r : results)
    for (const auto& p : r.phases) {
      const auto s = loadgen::LatencySummary::of(p.load.probe_latency);
      out += fmt::format("{},{},{},{},{},{},{},{},{},{:.1f},{:.3f},{:.0f},{:.0f},{}\n", r.spec.name, p.name,
                         us(s.p50_ns), us(s.p90_ns), us(s.p99_ns), us(s.p99_9_ns), us(s.p99_99_ns), us(s.max_ns),
                         s.count, s.mean_ns / 1000.0, std::chrono::duration<double>(p.load.elapsed).count(),
                         p.load.probe_throughput(), p.load.writer_throughput(),
                         p.load.open_loop ? fmt::format("open_{:g}_per_s", p.load.rate) : "closed");
    }
  return out;
}

std::string timeline_csv(const std::vector<ScenarioResult>& results) {
  std::string out = "scenario,t_ms,p50_us,p99_us,max_us,phase,probe_count,writer_ops\n";
  for (const auto& r : results)
    for (const auto& p : r.phases)
      for (const auto& row : p.load.timeline) {
        const double t_ms = static_cast<double>(p.start_ns - r.zero_ns) / 1e6 +
                            std::chrono::duration<double, std::milli>(row.offset).count();
        const bool has = row.probe_count > 0;
        out +=
            fmt::format("{},{:.1f},{},{},{},{},{},{}\n", r.spec.name, t_ms, has ? us(row.p50_ns) : "",
                        has ? us(row.p99_ns) : "", has ? us(row.max_ns) : "", p.name, row.probe_count, row.writer_ops);
      }
  return out;
}

std::string fork_and_mem_csv(const std::vector<ScenarioResult>& results) {
  std::string out =
      "scenario,reason,fork_duration_us,child_lifetime_ms,cow_faults,thp_splits,anon_huge_pages_kb_max,rss_kb_max,"
      "rdb_last_cow_size_bytes,aof_last_cow_size_bytes,child_pid,reason_source,child_cow_faults,fork_t_ms,exit_t_ms,"
      "phase,latest_fork_usec,during_s,used_memory_bytes,probe_max_us_near_fork,replicas\n";
  for (const auto& r : results) {
    const auto common_mem =
        fmt::format("{},{},{},{}", r.anon_huge_pages_kb_max, r.rss_kb_max,
                    info_or_empty(r.info_end, "rdb_last_cow_size"), info_or_empty(r.info_end, "aof_last_cow_size"));
    const auto tail = fmt::format("{},{},{}", info_or_empty(r.info_end, "latest_fork_usec"),
                                  r.trigger_ns ? fmt::format("{:.3f}", r.during_s()) : "",
                                  info_or_empty(r.info_after_load, "used_memory"));
    // A scenario without a fork still gets its memory row: four empty fork fields, six more.
    if (r.forks.empty()) out += fmt::format("{},none,,,,,{},,,,,,,{},,\n", r.spec.name, common_mem, tail);
    for (const auto& f : r.forks)
      out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.spec.name, f.reason,
                         opt(f.fork_duration_us), opt(f.child_lifetime_ms, "{:.3f}"), f.cow_faults, f.thp_splits,
                         common_mem, f.child_pid, f.reason_source, f.child_cow_faults, ms_from_zero(r, f.fork_ns),
                         ms_from_zero(r, f.exit_ns), field(f.phase), tail, us(probe_max_near_fork(r, f)),
                         f.replicas.size());
  }
  return out;
}

// One row per replica sync the capture gave a fork: its states with the ms since its request, and
// when the replica's own link came up (the bench's poll of the replica).
std::string replica_syncs_csv(const std::vector<ScenarioResult>& results) {
  std::string out =
      "scenario,child_pid,reason,address,joined,wait_ms,sync_ms,outcome,states,request_t_ms,online_t_ms,"
      "link_up_t_ms\n";
  for (const auto& r : results)
    for (const auto& f : r.forks)
      for (const auto& s : f.replicas) {
        std::string states;
        for (const auto& x : s.states)
          states += fmt::format("{}{}@{:.1f}", states.empty() ? "" : ";", x.state,
                                static_cast<double>(x.first_seen_ns - s.first_seen_ns) / 1e6);
        uint64_t link_up_ns = 0;
        for (size_t i = 0; i < r.replica_addresses.size() && i < r.replica_link_up_ns.size(); ++i)
          if (r.replica_addresses[i] == s.address) link_up_ns = r.replica_link_up_ns[i];
        out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{}\n", r.spec.name, f.child_pid, f.reason, s.address,
                           correlate::joined_name(s.joined), opt(s.wait_ms), opt(s.sync_ms()),
                           correlate::outcome_name(s.outcome), field(states), ms_from_zero(r, s.first_seen_ns),
                           ms_from_zero(r, s.online_ns), ms_from_zero(r, link_up_ns));
      }
  return out;
}

std::string metadata_csv(const BenchOptions& o, const RunInfo& info, const std::vector<ScenarioResult>& results) {
  std::string out = "scope,key,value\n";
  auto row = [&out](const std::string& scope, const std::string& key, const std::string& value) {
    out += fmt::format("{},{},{}\n", field(scope), field(key), field(value));
  };
  const redis::InfoMap* any_info = nullptr;
  for (const auto& r : results)
    if (!r.info_after_load.empty()) {
      any_info = &r.info_after_load;
      break;
    }
  row("run", "utc_start", info.utc_start);
  row("run", "utc_end", info.utc_end);
  row("run", "thptrace_version", info.thptrace_version);
  row("run", "kernel_release", info.kernel_release);
  row("run", "cpus", std::to_string(info.cpus));
  row("run", "mem_total_kb", std::to_string(info.mem_total_kb));
  row("run", "server_path", info.server.path);
  row("run", "server_name", info.server.name);
  row("run", "server_version", info.server.version);
  row("run", "server_rdb_channel", info.server.rdb_channel_config.empty() ? "none" : info.server.rdb_channel_config);
  row("run", "redis_version", any_info ? info_or_empty(*any_info, "redis_version") : "");
  row("run", "mem_allocator", any_info ? info_or_empty(*any_info, "mem_allocator") : "");
  row("run", "host_thp_enabled", info.host_thp_enabled);
  row("run", "host_thp_defrag", info.host_thp_defrag);
  row("run", "host_thp_enabled_after_run", info.host_thp_enabled_after);
  row("run", "loadavg_start", info.loadavg_start);
  row("run", "loadavg_end", info.loadavg_end);
  row("run", "dataset_keys", std::to_string(o.keys));
  row("run", "dataset_value_size_bytes", std::to_string(o.value_size));
  row("run", "dataset_seed", std::to_string(o.seed));
  row("run", "writers", std::to_string(o.writers));
  row("run", "writer_batch", std::to_string(o.batch));
  row("run", "probe_rate_per_s", o.rate > 0 ? fmt::format("{:g}", o.rate) : "closed loop");
  row("run", "seconds_per_phase", fmt::format("{:g}", o.seconds_per_phase));
  row("run", "interrupted", info.interrupted ? "yes" : "no");
  for (const auto& n : info.notes) row("run", "note", n);
  for (const auto& [name, why] : info.skipped) row(name, "not_run", why);
  for (const auto& r : results) {
    const auto& s = r.spec.name;
    row(s, "description", r.spec.description);
    row(s, "thp_enabled_observed", r.system_thp_enabled);
    row(s, "thp_defrag_observed", r.system_thp_defrag);
    row(s, "process_thp_enabled", r.process_thp_enabled ? (*r.process_thp_enabled ? "1" : "0") : "");
    row(s, "disable_thp", r.disable_thp);
    row(s, "used_memory_after_load", info_or_empty(r.info_after_load, "used_memory"));
    row(s, "used_memory_rss_after_load", info_or_empty(r.info_after_load, "used_memory_rss"));
    row(s, "keys_after_load", info_or_empty(r.info_after_load, "db0"));
    row(s, "probes", r.probes);
    row(s, "faults", std::to_string(r.faults.size()));
    for (const auto& f : r.faults) row(s, "fault", f);
    for (const auto& n : r.notes) row(s, "note", n);
  }
  return out;
}

}  // namespace

uint64_t probe_max_near_fork(const ScenarioResult& r, const ForkRecord& f) {
  if (!f.fork_ns) return 0;
  const uint64_t to = f.exit_ns ? f.exit_ns : f.fork_ns;
  uint64_t worst = 0;
  for (const auto& p : r.phases)
    for (size_t i = 0; i < p.load.timeline.size(); ++i) {
      const auto& row = p.load.timeline[i];
      const uint64_t start = p.start_ns + static_cast<uint64_t>(row.offset.count());
      const uint64_t end = i + 1 < p.load.timeline.size()
                               ? p.start_ns + static_cast<uint64_t>(p.load.timeline[i + 1].offset.count())
                               : p.end_ns;
      if (row.probe_count > 0 && start <= to && end >= f.fork_ns) worst = std::max(worst, row.max_ns);
    }
  return worst;
}

std::string us(uint64_t ns) { return fmt::format("{:.1f}", static_cast<double>(ns) / 1000.0); }

std::string ms_from_zero(const ScenarioResult& r, uint64_t ts) {
  if (ts == 0) return {};
  return fmt::format("{:.1f}", (static_cast<double>(ts) - static_cast<double>(r.zero_ns)) / 1e6);
}

std::vector<std::string> self_check_faults(const std::vector<ScenarioResult>& results) {
  std::vector<std::string> out;
  for (const auto& r : results)
    for (const auto& f : r.faults) out.push_back(fmt::format("{}: {}", r.spec.name, f));
  return out;
}

void write_results(const std::filesystem::path& dir, const BenchOptions& options, const RunInfo& info,
                   const std::vector<ScenarioResult>& results) {
  write_file(dir, "latency_percentiles.csv", percentiles_csv(results));
  write_file(dir, "latency_timeline.csv", timeline_csv(results));
  write_file(dir, "fork_and_mem.csv", fork_and_mem_csv(results));
  write_file(dir, "replica_syncs.csv", replica_syncs_csv(results));
  write_file(dir, "run_metadata.csv", metadata_csv(options, info, results));
  write_file(dir, "latency_timeline.svg", timeline_svg(results));
  write_file(dir, "summary.md", summary_markdown(options, info, results));
}

}  // namespace thptrace::bench
