// SPDX-License-Identifier: Apache-2.0
#include "loadgen/output.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <ostream>

namespace thptrace::loadgen {
namespace {

double to_us(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }
double to_us(double ns) { return ns / 1000.0; }

const char* mode_name(const LoadgenResult& r) { return r.open_loop ? "open" : "closed"; }

void write_percentile_row(std::ostream& out, std::string_view series, const LoadgenResult& r,
                          const LogLinearHistogram& h, uint64_t error_replies, double throughput) {
  const LatencySummary s = LatencySummary::of(h);
  fmt::print(out, "{},{},{},{},{},{:.1f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f}\n", series,
             mode_name(r), r.rate, s.count, error_replies, throughput, to_us(s.mean_ns), to_us(s.min_ns),
             to_us(s.p50_ns), to_us(s.p90_ns), to_us(s.p99_ns), to_us(s.p99_9_ns), to_us(s.p99_99_ns), to_us(s.max_ns));
}

nlohmann::json summary_json(const LogLinearHistogram& h) {
  const LatencySummary s = LatencySummary::of(h);
  return {{"count", s.count},           {"mean", to_us(s.mean_ns)},     {"min", to_us(s.min_ns)},
          {"p50", to_us(s.p50_ns)},     {"p90", to_us(s.p90_ns)},       {"p99", to_us(s.p99_ns)},
          {"p99_9", to_us(s.p99_9_ns)}, {"p99_99", to_us(s.p99_99_ns)}, {"max", to_us(s.max_ns)}};
}

std::ofstream open_for_writing(const std::filesystem::path& path) {
  std::ofstream out(path, std::ios::out | std::ios::trunc);
  if (!out) throw LoadgenError(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
  return out;
}

void finish_writing(std::ofstream& out, const std::filesystem::path& path) {
  out.flush();
  if (!out) throw LoadgenError(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
}

// "1.234 ms"-style, with a unit that keeps 3-4 significant digits.
std::string human(uint64_t ns) {
  if (ns < 10'000) return fmt::format("{:.2f} us", to_us(ns));
  if (ns < 10'000'000) return fmt::format("{:.3f} ms", static_cast<double>(ns) / 1e6);
  return fmt::format("{:.1f} ms", static_cast<double>(ns) / 1e6);
}

}  // namespace

void write_percentiles_csv(std::ostream& out, const LoadgenResult& r) {
  out << "series,mode,rate,count,error_replies,throughput_ops_per_s,mean_us,min_us,p50_us,p90_us,p99_us,p99_9_us,"
         "p99_99_us,max_us\n";
  write_percentile_row(out, "probe", r, r.probe_latency, r.probe_error_replies, r.probe_throughput());
  write_percentile_row(out, "probe_service_time", r, r.probe_service_time, r.probe_error_replies, r.probe_throughput());
  write_percentile_row(out, "writer_batch", r, r.writer_batch_latency, r.writer_error_replies, r.writer_throughput());
}

void write_timeline_csv(std::ostream& out, const LoadgenResult& r) {
  out << "offset_ms,probe_count,p50_us,p99_us,max_us,writer_ops\n";
  for (const TimelineRow& row : r.timeline) {
    const double offset_ms = std::chrono::duration<double, std::milli>(row.offset).count();
    if (row.probe_count == 0) {
      fmt::print(out, "{:.1f},0,,,,{}\n", offset_ms, row.writer_ops);
    } else {
      fmt::print(out, "{:.1f},{},{:.3f},{:.3f},{:.3f},{}\n", offset_ms, row.probe_count, to_us(row.p50_ns),
                 to_us(row.p99_ns), to_us(row.max_ns), row.writer_ops);
    }
  }
}

nlohmann::json to_json(const LoadgenResult& r, const LoadgenOptions& o) {
  nlohmann::json timeline = nlohmann::json::array();
  for (const TimelineRow& row : r.timeline) {
    nlohmann::json j = {{"offset_ms", std::chrono::duration<double, std::milli>(row.offset).count()},
                        {"probe_count", row.probe_count},
                        {"writer_ops", row.writer_ops}};
    if (row.probe_count == 0) {
      j["p50_us"] = nullptr;
      j["p99_us"] = nullptr;
      j["max_us"] = nullptr;
    } else {
      j["p50_us"] = to_us(row.p50_ns);
      j["p99_us"] = to_us(row.p99_ns);
      j["max_us"] = to_us(row.max_ns);
    }
    timeline.push_back(std::move(j));
  }
  return {
      {"options",
       {{"host", o.connection.host},
        {"port", o.connection.port},
        {"keys", o.dataset.keys},
        {"value_size", o.dataset.value_size},
        {"seed", o.dataset.seed},
        {"writers", o.writers},
        {"batch", o.batch},
        {"rate", o.rate},
        {"duration_s", std::chrono::duration<double>(o.duration).count()},
        {"read_only", o.read_only},
        {"interval_ms", std::chrono::duration<double, std::milli>(o.interval).count()}}},
      {"mode", mode_name(r)},
      {"start_monotonic_ns", r.start_monotonic_ns},
      {"elapsed_s", std::chrono::duration<double>(r.elapsed).count()},
      {"latency_unit", "us"},
      {"probe",
       {{"ops", r.probe_ops},
        {"error_replies", r.probe_error_replies},
        {"misses", r.probe_misses},
        {"unsent", r.probe_unsent},
        {"throughput_ops_per_s", r.probe_throughput()},
        {"latency", summary_json(r.probe_latency)},
        {"service_time", summary_json(r.probe_service_time)}}},
      {"writers",
       {{"connections", o.writers},
        {"ops", r.writer_ops},
        {"error_replies", r.writer_error_replies},
        {"throughput_ops_per_s", r.writer_throughput()},
        {"batch_latency", summary_json(r.writer_batch_latency)}}},
      {"timeline", std::move(timeline)},
      {"first_error_reply",
       r.first_error_reply.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.first_error_reply)},
      {"failure", r.failure.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.failure)},
  };
}

std::filesystem::path timeline_csv_path(const std::filesystem::path& csv_path) {
  std::filesystem::path out = csv_path;
  out.replace_filename(csv_path.stem().string() + "_timeline" + csv_path.extension().string());
  return out;
}

void write_csv_files(const std::filesystem::path& csv_path, const LoadgenResult& result) {
  {
    std::ofstream out = open_for_writing(csv_path);
    write_percentiles_csv(out, result);
    finish_writing(out, csv_path);
  }
  const auto timeline_path = timeline_csv_path(csv_path);
  std::ofstream out = open_for_writing(timeline_path);
  write_timeline_csv(out, result);
  finish_writing(out, timeline_path);
}

void write_json_file(const std::filesystem::path& json_path, const LoadgenResult& result,
                     const LoadgenOptions& options) {
  std::ofstream out = open_for_writing(json_path);
  out << to_json(result, options).dump(2) << '\n';
  finish_writing(out, json_path);
}

void write_summary(std::ostream& out, const LoadgenResult& r) {
  const double seconds = std::chrono::duration<double>(r.elapsed).count();
  if (r.open_loop) {
    fmt::print(out, "probe: open loop at {} req/s, latency from the intended send time (corrected)\n", r.rate);
  } else {
    fmt::print(out, "probe: closed loop\n");
  }
  const LatencySummary p = LatencySummary::of(r.probe_latency);
  fmt::print(out, "  {} requests in {:.2f} s ({:.0f} req/s), {} error replies", r.probe_ops, seconds,
             r.probe_throughput(), r.probe_error_replies);
  if (r.read_only) fmt::print(out, ", {} misses", r.probe_misses);
  if (r.open_loop) fmt::print(out, ", {} unsent", r.probe_unsent);
  fmt::print(out, "\n  p50 {}  p90 {}  p99 {}  p99.9 {}  p99.99 {}  max {}\n", human(p.p50_ns), human(p.p90_ns),
             human(p.p99_ns), human(p.p99_9_ns), human(p.p99_99_ns), human(p.max_ns));
  if (r.open_loop) {
    const LatencySummary s = LatencySummary::of(r.probe_service_time);
    fmt::print(out, "  uncorrected (service time): p50 {}  p99 {}  p99.9 {}  max {}\n", human(s.p50_ns),
               human(s.p99_ns), human(s.p99_9_ns), human(s.max_ns));
  }
  if (r.writer_batch_latency.count() > 0) {
    const LatencySummary w = LatencySummary::of(r.writer_batch_latency);
    fmt::print(out, "writers: {} commands ({:.0f} cmd/s), {} error replies; batch round trip p50 {}  p99 {}  max {}\n",
               r.writer_ops, r.writer_throughput(), r.writer_error_replies, human(w.p50_ns), human(w.p99_ns),
               human(w.max_ns));
  }
  if (!r.first_error_reply.empty()) fmt::print(out, "first error reply: {}\n", r.first_error_reply);
}

}  // namespace thptrace::loadgen
