// SPDX-License-Identifier: Apache-2.0
#pragma once
// The daemon's Prometheus metrics (docs/reference/metrics.md), served by prometheus-cpp's pull exposer. Labels are
// bounded: target (a Redis address or a process title), reason, kind, family, mode — never a pid.

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "correlate/episode.h"
#include "daemon/metric_specs.h"
#include "daemon/web_config.h"
#include "forecast/forecast.h"
#include "proc/container.h"
#include "proc/proc.h"
#include "redis/watcher.h"
#include "tracer/probe.h"

namespace thptrace::daemon {

// Every target's series carry its container's Kubernetes names beside `target` (namespace, pod,
// container; empty on a bare host). Shared by the metrics and the mirror, read by the scrape thread.
class TargetNames {
 public:
  void set(const std::string& target, const proc::ContainerNames& n);
  void forget(const std::string& target);
  // target, namespace, pod, container, then `extra`.
  prometheus::Labels labels(const std::string& target, const prometheus::Labels& extra = {}) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, proc::ContainerNames> names_;
};

// Figures mirrored from Redis as they are (counters Redis keeps itself, and its latency histogram),
// which prometheus-cpp's own metric types cannot hold: a counter there can only be incremented.
class RedisMirror : public prometheus::Collectable {
 public:
  explicit RedisMirror(std::shared_ptr<const TargetNames> names) : names_(std::move(names)) {}
  void update(const std::string& target, const redis::Snapshot& s);
  void forget(const std::string& target);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::shared_ptr<const TargetNames> names_;
  mutable std::mutex mu_;
  std::map<std::string, redis::Snapshot> latest_;
};

// A metric's name as a template argument (Metrics::counter<"thptrace_forks_total">).
template <size_t N>
struct MetricName {
  consteval MetricName(const char (&s)[N]) { std::copy_n(s, N, chars); }
  constexpr std::string_view view() const { return {chars, N - 1}; }
  char chars[N];
};

class Metrics {
 public:
  Metrics();
  // Starts serving /metrics on addr ("HOST:PORT"), behind basic auth when web names users.
  // Throws FatalError when it cannot listen.
  void serve(const std::string& addr, const WebConfig& web = {});

  // Creates every labelled series of a target at zero, so rate() and increase() see the first event.
  void add_target(const std::string& target);
  // Removes every series labelled with target (a discovered server that exited), Redis's mirrored
  // figures included; add_target() makes them again at zero.
  void remove_target(const std::string& target);
  // The target's container names (proc::container_names of its process). When they change, its
  // series are made again under the new names, at zero: another container is another series.
  void set_names(const std::string& target, const proc::ContainerNames& names);
  void set_probe_modes(const tracer::AttachModes& modes);
  void set_thp_mode(const std::string& enabled, const std::string& defrag);

  void on_fork_started(const std::string& target);
  // A started fork that will never be exported (its child is gone without an exit record).
  void on_fork_lost(const std::string& target);
  // fork_unix_seconds: when the fork started, as Unix time (the last-fork timestamp; unset without).
  void on_episode(const std::string& target, const correlate::ForkEpisode& e,
                  std::optional<double> fork_unix_seconds = std::nullopt);
  void on_stall(const std::string& target, bool compaction, double seconds);
  // One request of the latency probe: during_fork when a fork child of the target lived then.
  void observe_client_latency(const std::string& target, bool during_fork, double seconds);
  // One fsync, fdatasync or sync_file_range of the target (the disk family) by thread kind (main,
  // bio_aof, other): during_fork when a fork child of the target lived when it returned.
  void observe_fsync(const std::string& target, const char* thread, bool during_fork, double seconds);
  // One write() of the target's main thread to a regular file (its AOF).
  void observe_aof_write(const std::string& target, bool during_fork, double seconds);
  // One replica's full sync that ended (online or dropped); repeat: the replica had been dropped
  // before online shortly before (the full-sync loop went round once more).
  void on_replica_sync(const std::string& target, const correlate::ReplicaSync& s, bool repeat);
  void add_cow_faults(const std::string& target, uint64_t parent, uint64_t child);
  // Write faults on present pages while none of the target's fork children lived: pages no longer
  // shared, taken over without a copy.
  void add_reuse_faults(const std::string& target, uint64_t n);
  // The main thread's time since the last reading: on a CPU and waiting for one.
  void add_main_thread(const std::string& target, bool during_fork, double on_cpu_ns, double runqueue_ns);
  // The main thread's wait for a CPU by what held it (the sched family's counters' growth).
  void add_main_thread_cpu_wait(const std::string& target, const thptrace_cpu_wait& ns);
  void add_thp(const std::string& target, uint64_t splits, uint64_t collapses);
  void add_dropped(uint64_t n);
  void set_memory(const std::string& target, uint64_t rss_bytes, uint64_t anon_huge_bytes, std::optional<bool> thp_enabled);
  // The memory cgroup the target is charged to: usage now and its limit (none: no series).
  void set_cgroup_memory(const std::string& target, std::optional<uint64_t> usage_bytes,
                         std::optional<uint64_t> limit_bytes);
  void set_redis(const std::string& target, const redis::Snapshot& s);
  // The next fork's forecast from the target's history (forecast::predict): freeze_ms for any reason,
  // then per reason the child's life, the bytes copied, the memory needed beyond RSS and the headroom
  // left under each memory limit known (made at the target's first traced fork).
  void set_forecast_freeze(const std::string& target, double freeze_ms);
  void set_forecast(const std::string& target, const forecast::Prediction& p);
  // The text exposition of every thptrace_* series (what /metrics serves, without the exposer's own).
  std::string exposition() const;

  // Long-run health of the kernel side (daemon/kernel_maps.cpp).
  void add_untracked_forks(const std::string& target, uint64_t n);
  // A target whose process the targets map has no room for: 1 while untraced.
  void set_untraced(const std::string& target, bool untraced);
  void add_watch_failure();
  void add_reaped(uint64_t lost_exits, uint64_t dead);
  void set_map_entries(const std::string& map, size_t entries, size_t max_entries);
  // Per BPF program: run count and run time since load (kernel.bpf_stats_enabled), as deltas.
  void add_program_cost(const std::string& program, uint64_t runs, uint64_t run_ns);
  void set_bpf_stats_enabled(bool enabled);
  // The host's anonymous folios of each size (proc::FolioCounters' nr_anon), by size in KiB.
  void set_anon_folios(const proc::FolioCounters& counters);
  // A target's anonymous memory by folio size (a walk, proc/folios.h): every size it had before
  // and has now, 0 for one it no longer has.
  void set_target_anon_folios(const std::string& target, const std::map<uint32_t, uint64_t>& kb);

 private:
  prometheus::Labels of(const std::string& target, const prometheus::Labels& extra = {}) const {
    return names_->labels(target, extra);
  }

  // A metric of kMetrics by its name, checked when it compiles: its series of labels l.
  template <MetricName N>
  prometheus::Counter& counter(const prometheus::Labels& l) {
    return counters_[metric_index(N.view(), MetricType::counter)]->Add(l);
  }
  template <MetricName N>
  prometheus::Family<prometheus::Gauge>& gauges() {
    return *gauges_[metric_index(N.view(), MetricType::gauge)];
  }
  template <MetricName N>
  prometheus::Gauge& gauge(const prometheus::Labels& l) {
    return gauges<N>().Add(l);
  }
  template <MetricName N>
  prometheus::Histogram& histogram(const prometheus::Labels& l) {
    constexpr size_t i = metric_index(N.view(), MetricType::histogram);
    return histograms_[i]->Add(l, buckets_[i]);
  }
  // Makes the series `z` names for an owner whose labels are `owner`.
  void make_at_zero(size_t metric, const ZeroSeries& z, const prometheus::Labels& owner);

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<TargetNames> names_;
  std::shared_ptr<RedisMirror> mirror_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  // By index in kMetrics, each null but in the vector of its metric's type.
  std::vector<prometheus::Family<prometheus::Counter>*> counters_;
  std::vector<prometheus::Family<prometheus::Gauge>*> gauges_;
  std::vector<prometheus::Family<prometheus::Histogram>*> histograms_;
  std::vector<prometheus::Histogram::BucketBoundaries> buckets_;
  std::mutex mu_;
  std::pair<std::string, std::string> thp_mode_;
  // The folio sizes each target's walks found, so that a size it no longer has reads 0.
  std::map<std::string, std::set<uint32_t>> target_folio_sizes_;
};

}  // namespace thptrace::daemon
