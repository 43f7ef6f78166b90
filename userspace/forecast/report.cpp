// SPDX-License-Identifier: Apache-2.0
#include "forecast/report.h"

#include <fmt/core.h>

#include "common/text.h"
#include "common/units.h"

namespace thptrace::forecast {
namespace {

using ordered_json = nlohmann::ordered_json;

ordered_json figure_json(const Figure& f) {
  return {{"value", f.value}, {"low", f.low}, {"high", f.high}, {"method", method_name(f.method)}, {"basis", f.basis}};
}

template <typename T>
ordered_json or_null(const std::optional<T>& v) {
  return v ? ordered_json(*v) : ordered_json(nullptr);
}

// One line of a figure: its value, its range and where it came from.
std::string figure_line(const char* what, const std::string& value, const std::string& low, const std::string& high,
                        const Figure& f) {
  return fmt::format("  {:<16} {:>12}  ({} to {})  {}: {}\n", what, value, low, high, method_name(f.method), f.basis);
}

}  // namespace

std::string to_text(const PredictReport& r) {
  std::string out = fmt::format("thptrace {} — predict for pid {} ({}), measured for {:.1f} s\n", r.version, r.pid,
                                text::printable(r.comm), r.measured_s);
  const auto& in = r.inputs;
  out += fmt::format("memory: RSS {}, anonymous {}, page tables {}", mib_text(static_cast<double>(in.rss_bytes)),
                     mib_text(static_cast<double>(in.anon_bytes)), mib_text(static_cast<double>(in.page_table_bytes)));
  out += in.cgroup_limit_bytes ? ", memory cgroup limit " + mib_text(static_cast<double>(*in.cgroup_limit_bytes))
                               : std::string(", no memory cgroup limit");
  if (in.mem_available_bytes) out += ", host MemAvailable " + mib_text(static_cast<double>(*in.mem_available_bytes));
  out += "\n";
  if (r.main_thread_cpu) {
    out += fmt::format("main thread: {:.0f}% of a CPU while measured", *r.main_thread_cpu * 100);
    out += *r.main_thread_cpu >= kSaturatedCpu
               ? "; near saturation, it cannot keep this pace while a fork's copies take its time too: the "
                 "copies predicted are an upper bound\n"
               : "\n";
  }
  if (const auto& c = r.inputs.cpu_load; c && r.prediction.child_cpu_share) {
    const double share = *r.prediction.child_cpu_share;
    out += fmt::format("cpus: {:.1f} threads runnable on {} CPUs while measured", c->runnable, c->cpus);
    if (c->pressure_some) out += fmt::format(" (some waited for one {:.0f}% of the time)", *c->pressure_some * 100);
    out += share < kChildCompetes
               ? fmt::format(
                     "; the fork's child will have about {:.0f}% of a CPU and may live up to {:.1f}x as "
                     "long as with one of its own: the ranges' high ends say so\n",
                     share * 100, 1 / share)
               : "; the fork's child will have a CPU of its own\n";
  }
  if (r.redis) {
    const auto& x = *r.redis;
    out += fmt::format(
        "redis {} at {}: latest_fork_usec={} rdb_last_cow_size={} rdb_last_bgsave_time_sec={} "
        "written {:.2f} MiB/s ({})\n",
        text::printable(x.version), text::printable(x.address),
        x.latest_fork_usec ? std::to_string(*x.latest_fork_usec) : "?",
        x.rdb_last_cow_size ? std::to_string(*x.rdb_last_cow_size) : "?",
        x.rdb_last_bgsave_time_sec ? std::to_string(*x.rdb_last_bgsave_time_sec) : "?",
        in.repl_bytes_per_s / (1024.0 * 1024), in.repl_rate_basis);
  }
  if (r.rehearsal.run) {
    const uint64_t pages = r.rehearsal.curve.empty() ? 0 : r.rehearsal.curve.back().second;
    out += fmt::format(
        "rehearsal (soft-dirty): the clear stalled the process {:.2f} ms; {} pages ({}) written in "
        "{:.1f} s\n",
        r.rehearsal.walk_ms.value_or(0), pages, mib_text(static_cast<double>(pages * kPageBytes)),
        r.rehearsal.curve.empty() ? 0.0 : r.rehearsal.curve.back().first);
    if (!r.rehearsal.held_mappings.empty())
      out +=
          "  held from the moment they turned soft-dirty as a whole (a mapping grown or merged after the "
          "clear): " +
          r.rehearsal.held_mappings + "\n";
  } else {
    out += "rehearsal (soft-dirty): not run: " + r.rehearsal.why_not + "\n";
  }
  const auto& p = r.prediction;
  out +=
      fmt::format("\nthe next {} fork{}:\n", correlate::reason_name(p.reason),
                  p.replica_buffer_peak_bytes ? fmt::format(" ({} replica{})", in.replicas, in.replicas == 1 ? "" : "s")
                                              : std::string());
  const auto& fz = p.fork_freeze_ms;
  out += figure_line("fork freeze", fmt::format("{:.1f} ms", fz.value), fmt::format("{:.1f}", fz.low),
                     fmt::format("{:.1f} ms", fz.high), fz);
  const auto& lt = p.child_lifetime_s;
  out += figure_line("child lifetime", fmt::format("{:.1f} s", lt.value), fmt::format("{:.1f}", lt.low),
                     fmt::format("{:.1f} s", lt.high), lt);
  if (p.copied_bytes)
    out += figure_line("copied", mib_text(p.copied_bytes->value), mib_text(p.copied_bytes->low),
                       mib_text(p.copied_bytes->high), *p.copied_bytes);
  else
    out += fmt::format("  {:<16} {:>12}  ({})\n", "copied", "unknown", p.copied_unknown_why);
  if (p.replica_buffer_peak_bytes)
    out += figure_line("replica buffer", mib_text(p.replica_buffer_peak_bytes->value),
                       mib_text(p.replica_buffer_peak_bytes->low), mib_text(p.replica_buffer_peak_bytes->high),
                       *p.replica_buffer_peak_bytes);
  for (const auto& c : p.limits)
    out += fmt::format("  limit {}: {} needed of {} ({} to {}): {}\n", c.name, mib_text(c.need.value),
                       mib_text(static_cast<double>(c.limit_bytes)), mib_text(c.need.low), mib_text(c.need.high),
                       verdict_name(c.verdict));
  if (p.limits.empty()) out += "  no limit known (no memory cgroup limit, MemAvailable unreadable, no --redis)\n";
  if (p.max_replicas)
    out += fmt::format("  the memory limits hold the buffers of at most {} replicas\n", *p.max_replicas);
  out += fmt::format("verdict: {}{}\n", verdict_name(p.verdict),
                     p.first_limit.empty() ? std::string() : " (" + p.first_limit + ")");
  return out;
}

ordered_json to_json(const PredictReport& r) {
  ordered_json j;
  j["thptrace_version"] = r.version;
  j["target"] = {{"pid", r.pid}, {"comm", text::valid_utf8(r.comm)}, {"main_thread_cpu", or_null(r.main_thread_cpu)}};
  j["measured_s"] = r.measured_s;
  const auto& in = r.inputs;
  if (in.cpu_load)
    j["cpu"] = {{"runnable", in.cpu_load->runnable},
                {"cpus", in.cpu_load->cpus},
                {"pressure_some", or_null(in.cpu_load->pressure_some)},
                {"child_share", or_null(r.prediction.child_cpu_share)}};
  else
    j["cpu"] = nullptr;
  j["memory"] = {{"rss_bytes", in.rss_bytes},
                 {"anon_bytes", in.anon_bytes},
                 {"page_table_bytes", in.page_table_bytes},
                 {"cgroup_limit_bytes", or_null(in.cgroup_limit_bytes)},
                 {"cgroup_usage_bytes", or_null(in.cgroup_usage_bytes)},
                 {"mem_available_bytes", or_null(in.mem_available_bytes)}};
  ordered_json curve = ordered_json::array();
  for (const auto& [s, pages] : r.rehearsal.curve) curve.push_back({{"after_s", s}, {"bytes", pages * kPageBytes}});
  j["rehearsal"] = {{"run", r.rehearsal.run},
                    {"why_not", r.rehearsal.run ? ordered_json(nullptr) : ordered_json(r.rehearsal.why_not)},
                    {"walk_ms", or_null(r.rehearsal.walk_ms)},
                    {"held_mappings", r.rehearsal.held_mappings.empty() ? ordered_json(nullptr)
                                                                        : ordered_json(r.rehearsal.held_mappings)},
                    {"curve", curve}};
  if (r.redis) {
    const auto& x = *r.redis;
    j["redis"] = {{"address", text::valid_utf8(x.address)},
                  {"version", text::valid_utf8(x.version)},
                  {"repl_diskless_sync", text::valid_utf8(x.repl_diskless_sync)},
                  {"latest_fork_usec", or_null(x.latest_fork_usec)},
                  {"rdb_last_cow_size", or_null(x.rdb_last_cow_size)},
                  {"rdb_last_bgsave_time_sec", or_null(x.rdb_last_bgsave_time_sec)},
                  {"maxmemory", or_null(x.maxmemory)},
                  {"repl_bytes_per_s", in.repl_bytes_per_s},
                  {"repl_rate_basis", in.repl_rate_basis},
                  {"replica_output_buffer_limit",
                   {{"hard_bytes", in.replica_hard_bytes},
                    {"soft_bytes", in.replica_soft_bytes},
                    {"soft_seconds", in.replica_soft_seconds}}},
                  {"shared_replication_buffer", in.shared_replication_buffer}};
  }
  const auto& p = r.prediction;
  ordered_json limits = ordered_json::array();
  for (const auto& c : p.limits)
    limits.push_back({{"name", c.name},
                      {"limit_bytes", c.limit_bytes},
                      {"need_bytes", figure_json(c.need)},
                      {"verdict", verdict_name(c.verdict)}});
  j["predicted"] = {{"reason", correlate::reason_name(p.reason)},
                    {"replicas", in.replicas},
                    {"method", method_name(p.method)},
                    {"growth", p.growth ? ordered_json{{"factor", p.growth->factor}, {"basis", p.growth->basis}}
                                        : ordered_json(nullptr)},
                    {"fork_freeze_ms", figure_json(p.fork_freeze_ms)},
                    {"child_lifetime_s", figure_json(p.child_lifetime_s)},
                    {"copied_bytes", p.copied_bytes ? figure_json(*p.copied_bytes) : ordered_json(nullptr)},
                    {"copied_unknown_why", p.copied_bytes ? ordered_json(nullptr) : ordered_json(p.copied_unknown_why)},
                    {"replica_output_buffer_peak_bytes",
                     p.replica_buffer_peak_bytes ? figure_json(*p.replica_buffer_peak_bytes) : ordered_json(nullptr)},
                    {"peak_extra_memory_bytes",
                     p.peak_extra_memory_bytes ? figure_json(*p.peak_extra_memory_bytes) : ordered_json(nullptr)},
                    {"limits", limits},
                    {"verdict", verdict_name(p.verdict)},
                    {"first_limit", p.first_limit.empty() ? ordered_json(nullptr) : ordered_json(p.first_limit)},
                    {"max_replicas", or_null(p.max_replicas)}};
  return j;
}

}  // namespace thptrace::forecast
