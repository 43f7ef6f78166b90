// SPDX-License-Identifier: Apache-2.0
#include "daemon/metrics.h"

#include <prometheus/text_serializer.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "common/caps.h"
#include "common/error.h"
#include "common/text.h"
#include "common/units.h"
#include "thptrace/version.h"

namespace thptrace::daemon {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// civetweb serves one connection per worker thread, and a worker waits for a request as long as
// request_timeout_ms: a client that connects and sends nothing, or half a request, holds one that
// long. Enough workers that a few such clients leave one free for the scraper, a wait short enough
// that they are soon let go (a scraper sends its request at once), and no keep-alive, so an idle
// scraper's connection does not hold a worker either.
std::vector<std::string> civetweb_options(const std::string& listen) {
  return {"listening_ports", listen, "num_threads", "16", "request_timeout_ms", "3000", "enable_keep_alive", "no"};
}

// The registry whose label values are valid UTF-8 in every scrape. A target's label can come from a
// process's name; prometheus-cpp escapes quotes, backslashes and line breaks but passes other bytes,
// and one invalid byte makes the whole exposition unreadable to Prometheus.
class ValidLabelRegistry : public prometheus::Registry {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    auto families = Registry::Collect();
    for (auto& f : families)
      for (auto& m : f.metric)
        for (auto& l : m.label)
          if (!text::is_valid_utf8(l.value)) l.value = text::valid_utf8(l.value);
    return families;
  }
};

// Removes the series of family f whose target label is t. prometheus-cpp hands a series back only
// through Add(): each is found by its labels in Collect() and re-added (a no-op returning it) to be
// removed. args: what Add() needs to build a series of T, unused since the series exists.
template <typename T, typename... Args>
void remove_series_of(prometheus::Family<T>& f, const std::string& t, const Args&... args) {
  for (const auto& mf : f.Collect())
    for (const auto& m : mf.metric) {
      prometheus::Labels labels;
      for (const auto& l : m.label) labels[l.name] = l.value;
      if (labels.count("target") && labels["target"] == t) f.Remove(&f.Add(labels, args...));
    }
}

// The empty family of a metric RedisMirror serves, from its description.
prometheus::MetricFamily mirrored(size_t metric) {
  const MetricSpec& m = kMetrics[metric];
  return {std::string(m.name),
          std::string(m.help),
          m.type == MetricType::counter ? prometheus::MetricType::Counter : prometheus::MetricType::Histogram,
          {}};
}

}  // namespace

void TargetNames::set(const std::string& target, const proc::ContainerNames& n) {
  std::lock_guard lock(mu_);
  names_[target] = n;
}

void TargetNames::forget(const std::string& target) {
  std::lock_guard lock(mu_);
  names_.erase(target);
}

prometheus::Labels TargetNames::labels(const std::string& target, const prometheus::Labels& extra) const {
  prometheus::Labels l = extra;
  l["target"] = text::valid_utf8(target);
  std::lock_guard lock(mu_);
  const auto it = names_.find(target);
  const proc::ContainerNames none;
  const auto& n = it == names_.end() ? none : it->second;
  // Empty is absent to Prometheus: a bare host's series keep just `target`.
  if (!n.ns.empty()) l["namespace"] = n.ns;
  if (!n.pod.empty()) l["pod"] = n.pod;
  if (!n.container.empty()) l["container"] = n.container;
  return l;
}

void RedisMirror::update(const std::string& target, const redis::Snapshot& s) {
  std::lock_guard lock(mu_);
  auto& kept = latest_[target];
  // An idle poll asks INFO alone (common/cadence.h): the histogram stays the last one read until the
  // next poll that asks LATENCY HISTOGRAM. A poll Redis did not answer clears it.
  std::optional<redis::LatencyHistogram> latency = s.latency ? s.latency : (s.up ? kept.latency : std::nullopt);
  kept = s;
  kept.latency = latency;
}

void RedisMirror::forget(const std::string& target) {
  std::lock_guard lock(mu_);
  latest_.erase(target);
}

std::vector<prometheus::MetricFamily> RedisMirror::Collect() const {
  using prometheus::ClientMetric;
  using prometheus::MetricFamily;
  MetricFamily forks = mirrored(metric_index("thptrace_redis_forks_total", MetricType::counter));
  MetricFamily syncs = mirrored(metric_index("thptrace_redis_sync_full_total", MetricType::counter));
  MetricFamily latency = mirrored(metric_index("thptrace_redis_command_latency_seconds", MetricType::histogram));
  MetricFamily failures = mirrored(metric_index("thptrace_redis_poll_failures_total", MetricType::counter));
  const auto client_labels = [this](const std::string& target) {
    std::vector<prometheus::ClientMetric::Label> out;
    for (const auto& [name, value] : names_->labels(target)) out.push_back({name, value});
    return out;
  };
  std::lock_guard lock(mu_);
  for (const auto& [target, s] : latest_) {
    ClientMetric p;
    p.label = client_labels(target);
    p.counter.value = static_cast<double>(s.failed_polls);
    failures.metric.push_back(p);
    if (!s.up) continue;
    ClientMetric f;
    f.label = client_labels(target);
    f.counter.value = static_cast<double>(s.total_forks);
    forks.metric.push_back(f);
    ClientMetric y;
    y.label = client_labels(target);
    y.counter.value = static_cast<double>(s.sync_full);
    syncs.metric.push_back(y);
    if (!s.latency) continue;
    ClientMetric h;
    h.label = client_labels(target);
    for (size_t i = 0; i < redis::LatencyHistogram::kBuckets; ++i) {
      const double upper = std::ldexp(1.0, static_cast<int>(i)) / 1e6;
      h.histogram.bucket.push_back({s.latency->cumulative[i], upper});
    }
    h.histogram.bucket.push_back({s.latency->total(), std::numeric_limits<double>::infinity()});
    h.histogram.sample_count = s.latency->total();
    // LATENCY HISTOGRAM has counts only: a sum made up from the buckets would make every sum/count
    // average an invention, so it is NaN and the quantiles come from the buckets.
    h.histogram.sample_sum = std::numeric_limits<double>::quiet_NaN();
    latency.metric.push_back(h);
  }
  return {forks, syncs, latency, failures};
}

Metrics::Metrics()
    : registry_(std::make_shared<ValidLabelRegistry>()),
      names_(std::make_shared<TargetNames>()),
      mirror_(std::make_shared<RedisMirror>(names_)),
      counters_(kMetrics.size()),
      gauges_(kMetrics.size()),
      histograms_(kMetrics.size()),
      buckets_(kMetrics.size()) {
  for (size_t i = 0; i < kMetrics.size(); ++i) {
    const MetricSpec& m = kMetrics[i];
    if (m.mirrored) continue;
    const std::string name(m.name), help(m.help);
    switch (m.type) {
      case MetricType::counter: counters_[i] = &BuildCounter().Name(name).Help(help).Register(*registry_); break;
      case MetricType::gauge: gauges_[i] = &BuildGauge().Name(name).Help(help).Register(*registry_); break;
      case MetricType::histogram:
        histograms_[i] = &BuildHistogram().Name(name).Help(help).Register(*registry_);
        buckets_[i].assign(m.buckets.begin(), m.buckets.end());
        break;
    }
    if (m.owner == Owner::host && m.at_zero) make_at_zero(i, *m.at_zero, {});
  }
  gauge<"thptrace_build_info">({{"version", kVersion}}).Set(1);
}

void Metrics::make_at_zero(size_t metric, const ZeroSeries& z, const prometheus::Labels& owner) {
  std::vector<prometheus::Labels> series;
  if (z.label.empty()) series.push_back(owner);
  for (const auto v : z.values) {
    prometheus::Labels l = owner;
    l[std::string(z.label)] = std::string(v);
    series.push_back(std::move(l));
  }
  for (const auto& l : series) {
    if (counters_[metric]) counters_[metric]->Add(l);
    if (gauges_[metric]) gauges_[metric]->Add(l);
    if (histograms_[metric]) histograms_[metric]->Add(l, buckets_[metric]);
  }
}

void Metrics::serve(const std::string& addr, const WebConfig& web) {
  try {
    // Its threads are started here, and parse what the network sends: they hold no capability.
    exposer_ = in_thread_holding("thptrace-http", {},
                                 [&] { return std::make_unique<prometheus::Exposer>(civetweb_options(addr)); });
  } catch (const std::exception& e) {
    throw FatalError(kExitRuntime, "cannot listen on " + addr + " for the metrics endpoint: " + e.what());
  }
  // Before the registry: /metrics is never served without it.
  if (!web.basic_auth_users.empty()) {
    exposer_->RegisterAuth(
        [users = web.basic_auth_users](const std::string& user, const std::string& password) {
          const auto it = users.find(user);
          return bcrypt_matches(password, it == users.end() ? std::string() : it->second);
        },
        "thptrace");
  }
  exposer_->RegisterCollectable(registry_);
  exposer_->RegisterCollectable(mirror_);
}

void Metrics::add_target(const std::string& t) {
  // The three per-reason histograms come with a reason's first fork, not at zero: made for every
  // reason they were three quarters of a target's series, zero for ever for the reasons that target
  // never has (measurements.md, the scrape of 50 targets).
  for (size_t i = 0; i < kMetrics.size(); ++i)
    if (kMetrics[i].owner == Owner::target && kMetrics[i].at_zero) make_at_zero(i, *kMetrics[i].at_zero, of(t));
}

void Metrics::remove_target(const std::string& t) {
  const Histogram::BucketBoundaries none;
  for (size_t i = 0; i < kMetrics.size(); ++i) {
    if (kMetrics[i].owner != Owner::target) continue;
    if (counters_[i]) remove_series_of(*counters_[i], t);
    if (gauges_[i]) remove_series_of(*gauges_[i], t);
    if (histograms_[i]) remove_series_of(*histograms_[i], t, none);
  }
  mirror_->forget(t);
  names_->forget(t);
  target_folio_sizes_.erase(t);
}

void Metrics::set_names(const std::string& t, const proc::ContainerNames& names) {
  TargetNames wanted;
  wanted.set(t, names);
  if (wanted.labels(t) == of(t)) return;
  remove_target(t);
  names_->set(t, names);
  add_target(t);
}

void Metrics::set_probe_modes(const tracer::AttachModes& m) {
  for (const auto& f : tracer::kFamilies)
    gauge<"thptrace_probe_info">({{"family", f.name}, {"mode", tracer::mode_name(m.at(f.family).mode)}}).Set(1);
}

void Metrics::set_thp_mode(const std::string& enabled, const std::string& defrag) {
  std::lock_guard lock(mu_);
  if (thp_mode_ == std::make_pair(enabled, defrag)) return;
  if (!thp_mode_.first.empty() || !thp_mode_.second.empty())
    gauges<"thptrace_thp_enabled_info">().Remove(
        &gauge<"thptrace_thp_enabled_info">({{"enabled", thp_mode_.first}, {"defrag", thp_mode_.second}}));
  thp_mode_ = {enabled, defrag};
  gauge<"thptrace_thp_enabled_info">({{"enabled", enabled}, {"defrag", defrag}}).Set(1);
}

void Metrics::on_fork_started(const std::string& t) { gauge<"thptrace_fork_in_progress">(of(t)).Increment(); }

void Metrics::on_fork_lost(const std::string& t) {
  auto& g = gauge<"thptrace_fork_in_progress">(of(t));
  if (g.Value() > 0) g.Decrement();
}

void Metrics::on_episode(const std::string& t, const correlate::ForkEpisode& e,
                         std::optional<double> fork_unix_seconds) {
  const prometheus::Labels l = of(t, {{"reason", correlate::reason_name(e.reason)}});
  counter<"thptrace_forks_total">(l).Increment();
  if (e.fork_duration_us) histogram<"thptrace_fork_duration_seconds">(l).Observe(*e.fork_duration_us / 1e6);
  if (e.child_lifetime_ms) histogram<"thptrace_fork_child_lifetime_seconds">(l).Observe(*e.child_lifetime_ms / 1e3);
  histogram<"thptrace_fork_cow_faults">(l).Observe(static_cast<double>(e.cow_faults));
  counter<"thptrace_copies_total">(of(t)).Increment(static_cast<double>(e.cow_faults));
  counter<"thptrace_parent_copied_bytes_total">(of(t)).Increment(static_cast<double>(e.cow_faults * kPageBytes));
  // The last fork, for the dashboard's first row: made at a target's first fork, as a gauge at zero
  // would read as a fork that froze nothing.
  if (fork_unix_seconds) gauge<"thptrace_last_fork_timestamp_seconds">(l).Set(*fork_unix_seconds);
  if (e.fork_duration_us) gauge<"thptrace_last_fork_duration_seconds">(of(t)).Set(*e.fork_duration_us / 1e6);
  gauge<"thptrace_last_fork_parent_copied_bytes">(of(t)).Set(static_cast<double>(e.cow_faults * kPageBytes));
  if (e.reason == correlate::Reason::full_sync_disk || e.reason == correlate::Reason::full_sync_diskless ||
      e.reason == correlate::Reason::full_sync_rdb_channel || !e.replicas.empty())
    histogram<"thptrace_fork_replicas">(of(t)).Observe(static_cast<double>(e.replicas.size()));
  // Made at a target's first child seen to exit with its clocks.
  if (e.child_cpu) {
    counter<"thptrace_fork_child_cpu_seconds_total">(of(t, {{"state", "on_cpu"}}))
        .Increment(e.child_cpu->on_cpu_ms / 1e3);
    counter<"thptrace_fork_child_cpu_seconds_total">(of(t, {{"state", "runqueue"}}))
        .Increment(e.child_cpu->runqueue_ms / 1e3);
  }
  auto& g = gauge<"thptrace_fork_in_progress">(of(t));
  if (g.Value() > 0) g.Decrement();
}

void Metrics::on_replica_sync(const std::string& t, const correlate::ReplicaSync& s, bool repeat) {
  if (s.outcome == correlate::ReplicaSync::Outcome::syncing) return;
  counter<"thptrace_replica_syncs_total">(of(t, {{"outcome", correlate::outcome_name(s.outcome)}})).Increment();
  if (const auto ms = s.sync_ms()) histogram<"thptrace_replica_sync_duration_seconds">(of(t)).Observe(*ms / 1e3);
  if (repeat) counter<"thptrace_full_sync_loop_repeats_total">(of(t)).Increment();
}

void Metrics::observe_client_latency(const std::string& t, bool during_fork, double seconds) {
  // Made at a target's first probe: a target without one has no such series.
  histogram<"thptrace_redis_client_latency_seconds">(of(t, {{"phase", during_fork ? "fork" : "idle"}}))
      .Observe(seconds);
}

void Metrics::observe_fsync(const std::string& t, const char* thread, bool during_fork, double seconds) {
  // Made at a target's first call of a kind: a process that never syncs has no such series.
  histogram<"thptrace_fsync_seconds">(of(t, {{"thread", thread}, {"phase", during_fork ? "fork" : "idle"}}))
      .Observe(seconds);
}

void Metrics::observe_aof_write(const std::string& t, bool during_fork, double seconds) {
  histogram<"thptrace_aof_write_seconds">(of(t, {{"phase", during_fork ? "fork" : "idle"}})).Observe(seconds);
}

void Metrics::on_stall(const std::string& t, bool compaction, double seconds) {
  histogram<"thptrace_stall_seconds">(of(t, {{"kind", compaction ? "compaction" : "reclaim"}})).Observe(seconds);
}

void Metrics::add_cow_faults(const std::string& t, uint64_t parent, uint64_t child) {
  counter<"thptrace_cow_faults_total">(of(t)).Increment(static_cast<double>(parent));
  counter<"thptrace_child_cow_faults_total">(of(t)).Increment(static_cast<double>(child));
}

void Metrics::add_main_thread(const std::string& t, bool during_fork, double on_cpu_ns, double runqueue_ns) {
  const char* phase = during_fork ? "fork" : "idle";
  counter<"thptrace_main_thread_seconds_total">(of(t, {{"state", "on_cpu"}, {"phase", phase}}))
      .Increment(on_cpu_ns / 1e9);
  counter<"thptrace_main_thread_seconds_total">(of(t, {{"state", "runqueue"}, {"phase", phase}}))
      .Increment(runqueue_ns / 1e9);
}

void Metrics::add_main_thread_cpu_wait(const std::string& t, const thptrace_cpu_wait& ns) {
  for (const auto& [held_by, v] : {std::pair{"fork_child", ns.child_ns}, std::pair{"own_threads", ns.threads_ns},
                                   std::pair{"other_processes", ns.others_ns}, std::pair{"idle_cpu", ns.idle_ns}})
    counter<"thptrace_main_thread_cpu_wait_seconds_total">(of(t, {{"held_by", held_by}}))
        .Increment(static_cast<double>(v) / 1e9);
}

void Metrics::add_reuse_faults(const std::string& t, uint64_t n) {
  counter<"thptrace_reuse_faults_total">(of(t)).Increment(static_cast<double>(n));
}

void Metrics::add_thp(const std::string& t, uint64_t splits, uint64_t collapses) {
  counter<"thptrace_thp_splits_total">(of(t)).Increment(static_cast<double>(splits));
  counter<"thptrace_thp_collapses_total">(of(t)).Increment(static_cast<double>(collapses));
}

void Metrics::add_dropped(uint64_t n) {
  counter<"thptrace_events_dropped_total">({}).Increment(static_cast<double>(n));
}

void Metrics::set_memory(const std::string& t, uint64_t rss, uint64_t anon_huge, std::optional<bool> thp_enabled) {
  gauge<"thptrace_rss_bytes">(of(t)).Set(static_cast<double>(rss));
  gauge<"thptrace_anon_huge_pages_bytes">(of(t)).Set(static_cast<double>(anon_huge));
  if (thp_enabled) gauge<"thptrace_thp_process_enabled">(of(t)).Set(*thp_enabled ? 1 : 0);
}

void Metrics::set_cgroup_memory(const std::string& t, std::optional<uint64_t> usage, std::optional<uint64_t> limit) {
  if (usage) gauge<"thptrace_memory_cgroup_usage_bytes">(of(t)).Set(static_cast<double>(*usage));
  if (limit) {
    gauge<"thptrace_memory_cgroup_limit_bytes">(of(t)).Set(static_cast<double>(*limit));
  } else if (auto& limits = gauges<"thptrace_memory_cgroup_limit_bytes">(); limits.Has(of(t))) {
    limits.Remove(&limits.Add(of(t)));
  }
}

void Metrics::set_redis(const std::string& t, const redis::Snapshot& s) {
  gauge<"thptrace_redis_up">(of(t)).Set(s.up ? 1 : 0);
  mirror_->update(t, s);
  if (!s.up) return;
  gauge<"thptrace_redis_current_cow_size_bytes">(of(t)).Set(static_cast<double>(s.current_cow_size));
  gauge<"thptrace_redis_current_fork_ratio">(of(t)).Set(s.current_fork_perc / 100.0);
  gauge<"thptrace_redis_current_save_keys_processed">(of(t)).Set(static_cast<double>(s.current_save_keys_processed));
  gauge<"thptrace_redis_latest_fork_seconds">(of(t)).Set(static_cast<double>(s.latest_fork_usec) / 1e6);
}

void Metrics::set_forecast_freeze(const std::string& t, double freeze_ms) {
  gauge<"thptrace_predicted_fork_freeze_seconds">(of(t)).Set(freeze_ms / 1e3);
}

void Metrics::set_forecast(const std::string& t, const forecast::Prediction& p) {
  const prometheus::Labels l = of(t, {{"reason", correlate::reason_name(p.reason)}});
  gauge<"thptrace_predicted_child_lifetime_seconds">(l).Set(p.child_lifetime_s.value);
  if (p.copied_bytes) gauge<"thptrace_predicted_copy_bytes">(l).Set(p.copied_bytes->value);
  if (p.peak_extra_memory_bytes) gauge<"thptrace_predicted_fork_memory_bytes">(l).Set(p.peak_extra_memory_bytes->value);
  for (const auto& c : p.limits) {
    // The memory limits only: the replica output buffer's is a limit of Redis's, not of memory.
    const char* limit = c.name == forecast::kCgroupLimit    ? "cgroup"
                        : c.name == forecast::kMemAvailable ? "mem_available"
                                                            : nullptr;
    if (!limit) continue;
    gauge<"thptrace_predicted_headroom_bytes">(of(t, {{"reason", correlate::reason_name(p.reason)}, {"limit", limit}}))
        .Set(static_cast<double>(c.limit_bytes) - c.need.value);
  }
}

void Metrics::add_untracked_forks(const std::string& t, uint64_t n) {
  counter<"thptrace_untracked_forks_total">(of(t)).Increment(static_cast<double>(n));
}

void Metrics::set_untraced(const std::string& t, bool untraced) {
  gauge<"thptrace_target_untraced">(of(t)).Set(untraced ? 1 : 0);
}

void Metrics::add_watch_failure() { counter<"thptrace_target_watch_failures_total">({}).Increment(); }

void Metrics::add_reaped(uint64_t lost_exits, uint64_t dead) {
  counter<"thptrace_episodes_reaped_total">({{"outcome", "lost_exit"}}).Increment(static_cast<double>(lost_exits));
  counter<"thptrace_episodes_reaped_total">({{"outcome", "dead"}}).Increment(static_cast<double>(dead));
}

void Metrics::set_map_entries(const std::string& map, size_t entries, size_t max_entries) {
  gauge<"thptrace_bpf_map_entries">({{"map", map}}).Set(static_cast<double>(entries));
  gauge<"thptrace_bpf_map_max_entries">({{"map", map}}).Set(static_cast<double>(max_entries));
}

void Metrics::add_program_cost(const std::string& program, uint64_t runs, uint64_t run_ns) {
  counter<"thptrace_bpf_program_run_count_total">({{"program", program}}).Increment(static_cast<double>(runs));
  counter<"thptrace_bpf_program_run_time_seconds_total">({{"program", program}})
      .Increment(static_cast<double>(run_ns) / 1e9);
}

void Metrics::set_anon_folios(const proc::FolioCounters& counters) {
  for (const auto& [kb, values] : counters)
    if (const auto n = values.find("nr_anon"); n != values.end())
      gauge<"thptrace_anon_folio_bytes">({{"size_kb", std::to_string(kb)}})
          .Set(static_cast<double>(n->second) * static_cast<double>(kb) * 1024);
}

void Metrics::set_target_anon_folios(const std::string& t, const std::map<uint32_t, uint64_t>& kb) {
  auto& sizes = target_folio_sizes_[t];
  for (const auto& [size, held] : kb) sizes.insert(size);
  for (const uint32_t size : sizes) {
    const auto it = kb.find(size);
    gauge<"thptrace_target_anon_folio_bytes">(of(t, {{"size_kb", std::to_string(size)}}))
        .Set(it == kb.end() ? 0.0 : static_cast<double>(it->second) * 1024);
  }
}

void Metrics::set_bpf_stats_enabled(bool enabled) { gauge<"thptrace_bpf_stats_enabled">({}).Set(enabled ? 1 : 0); }

std::string Metrics::exposition() const {
  auto families = registry_->Collect();
  for (auto& f : mirror_->Collect()) families.push_back(std::move(f));
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace thptrace::daemon
