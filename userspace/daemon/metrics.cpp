// SPDX-License-Identifier: Apache-2.0
#include "daemon/metrics.h"

#include <prometheus/text_serializer.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "common/caps.h"
#include "common/error.h"
#include "common/text.h"
#include "thptrace/version.h"

namespace thptrace::daemon {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

const Histogram::BucketBoundaries kForkSeconds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                  0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};
const Histogram::BucketBoundaries kLifetimeSeconds = {0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800};
const Histogram::BucketBoundaries kReplicas = {0, 1, 2, 3, 4, 6, 8, 16, 32};
const Histogram::BucketBoundaries kSyncSeconds = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800};
const Histogram::BucketBoundaries kStallSeconds = {0.00001, 0.0001, 0.001, 0.01, 0.1, 1, 10};
// The latency probe's requests (redis/latency_probe.h): 1-2-5 steps from 25 µs to 5 s, plus the 300 µs
// the THP study counts a request over as a timeout.
const Histogram::BucketBoundaries kClientSeconds = {
    0.000025, 0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5};
// An fsync: 10 µs (a file with nothing dirty) to 10 s (a saturated disk), in 1-2-5 steps.
const Histogram::BucketBoundaries kFsyncSeconds = {0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001,
                                                   0.002,   0.005,   0.01,    0.02,   0.05,   0.1,    0.2,
                                                   0.5,     1,       2,       5,      10};
// A copy is one base page, as in the report: x86_64, the only architecture thptrace builds for.
constexpr double kPageBytes = 4096;
Histogram::BucketBoundaries cow_fault_buckets() {
  Histogram::BucketBoundaries b;
  for (double v = 1; v <= std::pow(4.0, 12); v *= 4) b.push_back(v);
  return b;
}

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
  using prometheus::MetricType;
  MetricFamily forks{"thptrace_redis_forks_total", "Forks Redis has made since it started (INFO total_forks).",
                     MetricType::Counter, {}};
  MetricFamily syncs{"thptrace_redis_sync_full_total", "Full resynchronizations Redis has served (INFO sync_full).",
                     MetricType::Counter, {}};
  MetricFamily latency{"thptrace_redis_command_latency_seconds",
                       "Redis's server-side command latency (LATENCY HISTOGRAM summed over commands; power-of-two "
                       "microsecond buckets; _sum is NaN: Redis gives no sum).",
                       MetricType::Histogram,
                       {}};
  MetricFamily failures{"thptrace_redis_poll_failures_total",
                        "Polls of Redis that failed (connect, AUTH, INFO refused or unanswered); each makes the next "
                        "wait longer, up to 30 s.",
                        MetricType::Counter,
                        {}};
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
      forks_(BuildCounter()
                 .Name("thptrace_forks_total")
                 .Help("Forks of a watched process, by reason.")
                 .Register(*registry_)),
      fork_duration_(BuildHistogram()
                         .Name("thptrace_fork_duration_seconds")
                         .Help("Time the parent spent in fork() (libc call, else the clone syscall).")
                         .Register(*registry_)),
      child_lifetime_(BuildHistogram()
                          .Name("thptrace_fork_child_lifetime_seconds")
                          .Help("Time from fork to the child's exit.")
                          .Register(*registry_)),
      fork_cow_faults_(BuildHistogram()
                           .Name("thptrace_fork_cow_faults")
                           .Help("Copy-on-write faults the parent took while one fork child lived.")
                           .Register(*registry_)),
      fork_replicas_(BuildHistogram()
                         .Name("thptrace_fork_replicas")
                         .Help("Replicas one full-sync fork served (INFO replication), by fork.")
                         .Register(*registry_)),
      replica_sync_(BuildHistogram()
                        .Name("thptrace_replica_sync_duration_seconds")
                        .Help("A replica's full sync from its request (first listed) to online.")
                        .Register(*registry_)),
      replica_syncs_(BuildCounter()
                         .Name("thptrace_replica_syncs_total")
                         .Help("Replicas' full syncs that ended, by outcome (online, or dropped before online).")
                         .Register(*registry_)),
      sync_loop_repeats_(
          BuildCounter()
              .Name("thptrace_full_sync_loop_repeats_total")
              .Help("Full syncs of a replica that had already full-synced in the hour before (it was dropped, before "
                    "or after online): a full-sync loop going round.")
              .Register(*registry_)),
      cow_faults_(BuildCounter()
                      .Name("thptrace_cow_faults_total")
                      .Help("Write faults on present pages taken by the watched process: copies while a fork "
                            "child lives and reuse of pages no longer shared alike.")
                      .Register(*registry_)),
      child_cow_faults_(BuildCounter()
                            .Name("thptrace_child_cow_faults_total")
                            .Help("Write faults on present pages taken by the watched process's fork children.")
                            .Register(*registry_)),
      copies_(BuildCounter()
                  .Name("thptrace_copies_total")
                  .Help("Pages the watched process copied on write while a fork child of it lived, added when the "
                        "fork's child has exited.")
                  .Register(*registry_)),
      copied_bytes_(BuildCounter()
                        .Name("thptrace_copied_bytes_total")
                        .Help("Bytes those copies took: copies times the base page size.")
                        .Register(*registry_)),
      reuse_faults_(BuildCounter()
                        .Name("thptrace_reuse_faults_total")
                        .Help("Write faults on present pages while no fork child of the watched process lived: pages "
                              "no longer shared, taken over without a copy.")
                        .Register(*registry_)),
      thp_splits_(BuildCounter()
                      .Name("thptrace_thp_splits_total")
                      .Help("Huge PMDs split by copy-on-write in the watched process (fentry mode) or system-wide "
                            "during its fork windows (/proc/vmstat thp_split_pmd).")
                      .Register(*registry_)),
      thp_collapses_(BuildCounter()
                         .Name("thptrace_thp_collapses_total")
                         .Help("khugepaged collapses of the watched process's memory.")
                         .Register(*registry_)),
      stall_(BuildHistogram()
                 .Name("thptrace_stall_seconds")
                 .Help("Direct compaction and direct reclaim stalls of the watched process, by kind.")
                 .Register(*registry_)),
      client_latency_(BuildHistogram()
                          .Name("thptrace_redis_client_latency_seconds")
                          .Help("The latency probe's PINGs, each timed from its due time, by phase: fork while a "
                                "fork child of the server lived, idle otherwise.")
                          .Register(*registry_)),
      fsync_(BuildHistogram()
                 .Name("thptrace_fsync_seconds")
                 .Help("fsync, fdatasync and sync_file_range calls of the watched process, timed in the kernel from "
                       "entry to return, by thread (main: the event loop; bio_aof: Redis's AOF fsync thread; other) "
                       "and phase (fork while a fork child of it lived, idle otherwise).")
                 .Register(*registry_)),
      aof_write_(BuildHistogram()
                     .Name("thptrace_aof_write_seconds")
                     .Help("write() calls of the watched process's main thread to regular files (Redis's event loop "
                           "writing its AOF), timed in the kernel from entry to return, by phase (fork while a fork "
                           "child of it lived, idle otherwise).")
                     .Register(*registry_)),
      last_fork_time_(BuildGauge()
                          .Name("thptrace_last_fork_timestamp_seconds")
                          .Help("Unix time the last fork of the watched process of each reason started, set when its "
                                "child has exited.")
                          .Register(*registry_)),
      last_fork_duration_(BuildGauge()
                              .Name("thptrace_last_fork_duration_seconds")
                              .Help("How long the last fork froze the watched process (its libc fork() call), set "
                                    "when its child has exited.")
                              .Register(*registry_)),
      last_fork_copied_(BuildGauge()
                            .Name("thptrace_last_fork_copied_bytes")
                            .Help("Bytes the watched process copied on write while the child of its last fork lived.")
                            .Register(*registry_)),
      in_progress_(BuildGauge()
                       .Name("thptrace_fork_in_progress")
                       .Help("Fork children of the watched process alive now.")
                       .Register(*registry_)),
      anon_huge_(BuildGauge()
                     .Name("thptrace_anon_huge_pages_bytes")
                     .Help("AnonHugePages of the watched process (smaps_rollup).")
                     .Register(*registry_)),
      rss_(BuildGauge().Name("thptrace_rss_bytes").Help("Resident set of the watched process.").Register(*registry_)),
      cgroup_usage_(BuildGauge()
                        .Name("thptrace_memory_cgroup_usage_bytes")
                        .Help("Usage of the memory cgroup the watched process is charged to (v1 memory.usage_in_bytes, "
                              "v2 memory.current).")
                        .Register(*registry_)),
      cgroup_limit_(
          BuildGauge()
              .Name("thptrace_memory_cgroup_limit_bytes")
              .Help("Limit of that memory cgroup (v1 memory.limit_in_bytes, v2 memory.max); absent when it has none.")
              .Register(*registry_)),
      thp_info_(BuildGauge()
                    .Name("thptrace_thp_enabled_info")
                    .Help("The system's THP modes (/sys/kernel/mm/transparent_hugepage).")
                    .Register(*registry_)),
      thp_process_(BuildGauge()
                       .Name("thptrace_thp_process_enabled")
                       .Help("1 unless the watched process opted out of THP (THP_enabled: 0, e.g. Redis disable-thp).")
                       .Register(*registry_)),
      dropped_(BuildCounter()
                   .Name("thptrace_events_dropped_total")
                   .Help("Kernel events lost because the ring buffer was full.")
                   .Register(*registry_)),
      probe_info_(BuildGauge()
                      .Name("thptrace_probe_info")
                      .Help("Attach mode of each probe family on this kernel.")
                      .Register(*registry_)),
      redis_up_(
          BuildGauge().Name("thptrace_redis_up").Help("1 when Redis answered the last poll.").Register(*registry_)),
      cow_size_(BuildGauge()
                    .Name("thptrace_redis_current_cow_size_bytes")
                    .Help("Redis INFO current_cow_size of the live fork child.")
                    .Register(*registry_)),
      fork_ratio_(BuildGauge()
                      .Name("thptrace_redis_current_fork_ratio")
                      .Help("Redis INFO current_fork_perc / 100: progress of the live fork child.")
                      .Register(*registry_)),
      keys_processed_(BuildGauge()
                          .Name("thptrace_redis_current_save_keys_processed")
                          .Help("Redis INFO current_save_keys_processed.")
                          .Register(*registry_)),
      latest_fork_(BuildGauge()
                       .Name("thptrace_redis_latest_fork_seconds")
                       .Help("Redis INFO latest_fork_usec, in seconds.")
                       .Register(*registry_)),
      predicted_freeze_(BuildGauge()
                            .Name("thptrace_predicted_fork_freeze_seconds")
                            .Help("The next fork's freeze of every client, predicted from the last fork traced.")
                            .Register(*registry_)),
      predicted_lifetime_(BuildGauge()
                              .Name("thptrace_predicted_child_lifetime_seconds")
                              .Help("The next fork's child lifetime by reason, from the last fork traced of that "
                                    "reason (else of any).")
                              .Register(*registry_)),
      predicted_copies_(BuildGauge()
                            .Name("thptrace_predicted_copy_bytes")
                            .Help("Bytes the next fork of that reason will copy on write over its child's life "
                                  "(parent and child), from the last fork traced.")
                            .Register(*registry_)),
      predicted_memory_(BuildGauge()
                            .Name("thptrace_predicted_fork_memory_bytes")
                            .Help("Memory the next fork of that reason needs beyond RSS: its copies, and for a "
                                  "full sync the replication buffer the stream fills meanwhile.")
                            .Register(*registry_)),
      predicted_headroom_(BuildGauge()
                              .Name("thptrace_predicted_headroom_bytes")
                              .Help("Bytes left under a memory limit (cgroup: the memory cgroup's limit against RSS "
                                    "and the fork's need; mem_available: the host's MemAvailable against the need) "
                                    "at the next fork of that reason; below 0 it would not fit.")
                              .Register(*registry_)),
      build_info_(BuildGauge().Name("thptrace_build_info").Help("thptrace's version.").Register(*registry_)),
      untracked_forks_(BuildCounter()
                           .Name("thptrace_untracked_forks_total")
                           .Help("Forks of a watched process whose child could not be tracked (every active slot or "
                                 "the episodes map full): no COW faults are attributed to them.")
                           .Register(*registry_)),
      untraced_(BuildGauge()
                    .Name("thptrace_target_untraced")
                    .Help("1 while a target's process is not traced because the targets map is full.")
                    .Register(*registry_)),
      watch_failures_(BuildCounter()
                          .Name("thptrace_target_watch_failures_total")
                          .Help("Processes the daemon could not add to the in-kernel targets map (map full).")
                          .Register(*registry_)),
      reaped_(BuildCounter()
                  .Name("thptrace_episodes_reaped_total")
                  .Help("Episodes removed from the in-kernel map by the daemon: lost_exit (closed, its record "
                        "lost and collected), dead (its child gone without an exit seen).")
                  .Register(*registry_)),
      map_entries_(BuildGauge()
                       .Name("thptrace_bpf_map_entries")
                       .Help("Entries of an in-kernel map (targets, episodes).")
                       .Register(*registry_)),
      map_max_entries_(BuildGauge()
                           .Name("thptrace_bpf_map_max_entries")
                           .Help("Capacity of an in-kernel map (targets, episodes).")
                           .Register(*registry_)),
      program_runs_(BuildCounter()
                        .Name("thptrace_bpf_program_run_count_total")
                        .Help("Runs of each of thptrace's BPF programs (moves only while kernel.bpf_stats_enabled=1).")
                        .Register(*registry_)),
      program_run_time_(BuildCounter()
                            .Name("thptrace_bpf_program_run_time_seconds_total")
                            .Help("Time spent in each of thptrace's BPF programs (moves only while "
                                  "kernel.bpf_stats_enabled=1).")
                            .Register(*registry_)),
      bpf_stats_enabled_(BuildGauge()
                             .Name("thptrace_bpf_stats_enabled")
                             .Help("1 when kernel.bpf_stats_enabled is on, so BPF program run counts and times move.")
                             .Register(*registry_)) {
  build_info_.Add({{"version", kVersion}}).Set(1);
  dropped_.Add({});
  watch_failures_.Add({});
  for (const char* outcome : {"lost_exit", "dead"}) reaped_.Add({{"outcome", outcome}});
  bpf_stats_enabled_.Add({});
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
  // The fork counter of every reason exists at zero, so increase() sees a reason's first fork. The
  // three per-reason histograms come with a reason's first fork instead: created for every reason they
  // were three quarters of a target's ~470 series, zero for ever for the reasons that target never
  // has, and what made a scrape of 50 targets 23,608 lines (2.1 MB, gzip included in every
  // Prometheus scrape).
  for (const auto r : correlate::kAllReasons) forks_.Add(of(t, {{"reason", correlate::reason_name(r)}}));
  for (const char* kind : {"compaction", "reclaim"}) stall_.Add(of(t, {{"kind", kind}}), kStallSeconds);
  fork_replicas_.Add(of(t), kReplicas);
  replica_sync_.Add(of(t), kSyncSeconds);
  for (const char* outcome : {"online", "dropped"}) replica_syncs_.Add(of(t, {{"outcome", outcome}}));
  sync_loop_repeats_.Add(of(t));
  cow_faults_.Add(of(t));
  child_cow_faults_.Add(of(t));
  copies_.Add(of(t));
  copied_bytes_.Add(of(t));
  reuse_faults_.Add(of(t));
  thp_splits_.Add(of(t));
  thp_collapses_.Add(of(t));
  in_progress_.Add(of(t));
  redis_up_.Add(of(t));
  untracked_forks_.Add(of(t));
  untraced_.Add(of(t));
}

void Metrics::remove_target(const std::string& t) {
  const Histogram::BucketBoundaries none;
  for (auto* f : {&forks_, &replica_syncs_, &sync_loop_repeats_, &cow_faults_, &child_cow_faults_, &copies_,
                  &copied_bytes_, &reuse_faults_, &thp_splits_, &thp_collapses_, &untracked_forks_})
    remove_series_of(*f, t);
  for (auto* f : {&fork_duration_, &child_lifetime_, &fork_cow_faults_, &fork_replicas_, &replica_sync_, &stall_,
                  &client_latency_, &fsync_, &aof_write_})
    remove_series_of(*f, t, none);
  for (auto* f : {&last_fork_time_,   &last_fork_duration_, &last_fork_copied_,
                  &in_progress_,      &anon_huge_,          &rss_,
                  &cgroup_usage_,     &cgroup_limit_,       &thp_process_,
                  &redis_up_,         &cow_size_,           &fork_ratio_,
                  &keys_processed_,   &latest_fork_,        &untraced_,
                  &predicted_freeze_, &predicted_lifetime_, &predicted_copies_,
                  &predicted_memory_, &predicted_headroom_})
    remove_series_of(*f, t);
  mirror_->forget(t);
  names_->forget(t);
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
    probe_info_.Add({{"family", f.name}, {"mode", tracer::mode_name(m.at(f.family).mode)}}).Set(1);
}

void Metrics::set_thp_mode(const std::string& enabled, const std::string& defrag) {
  std::lock_guard lock(mu_);
  if (thp_mode_ == std::make_pair(enabled, defrag)) return;
  if (!thp_mode_.first.empty() || !thp_mode_.second.empty())
    thp_info_.Remove(&thp_info_.Add({{"enabled", thp_mode_.first}, {"defrag", thp_mode_.second}}));
  thp_mode_ = {enabled, defrag};
  thp_info_.Add({{"enabled", enabled}, {"defrag", defrag}}).Set(1);
}

void Metrics::on_fork_started(const std::string& t) { in_progress_.Add(of(t)).Increment(); }

void Metrics::on_fork_lost(const std::string& t) {
  auto& g = in_progress_.Add(of(t));
  if (g.Value() > 0) g.Decrement();
}

void Metrics::on_episode(const std::string& t, const correlate::ForkEpisode& e,
                         std::optional<double> fork_unix_seconds) {
  const prometheus::Labels l = of(t, {{"reason", correlate::reason_name(e.reason)}});
  forks_.Add(l).Increment();
  if (e.fork_duration_us) fork_duration_.Add(l, kForkSeconds).Observe(*e.fork_duration_us / 1e6);
  if (e.child_lifetime_ms) child_lifetime_.Add(l, kLifetimeSeconds).Observe(*e.child_lifetime_ms / 1e3);
  fork_cow_faults_.Add(l, cow_fault_buckets()).Observe(static_cast<double>(e.cow_faults));
  copies_.Add(of(t)).Increment(static_cast<double>(e.cow_faults));
  copied_bytes_.Add(of(t)).Increment(static_cast<double>(e.cow_faults) * kPageBytes);
  // The last fork, for the dashboard's first row: made at a target's first fork, as a gauge at zero
  // would read as a fork that froze nothing.
  if (fork_unix_seconds) last_fork_time_.Add(l).Set(*fork_unix_seconds);
  if (e.fork_duration_us) last_fork_duration_.Add(of(t)).Set(*e.fork_duration_us / 1e6);
  last_fork_copied_.Add(of(t)).Set(static_cast<double>(e.cow_faults) * kPageBytes);
  if (e.reason == correlate::Reason::full_sync_disk || e.reason == correlate::Reason::full_sync_diskless ||
      e.reason == correlate::Reason::full_sync_rdb_channel || !e.replicas.empty())
    fork_replicas_.Add(of(t), kReplicas).Observe(static_cast<double>(e.replicas.size()));
  auto& g = in_progress_.Add(of(t));
  if (g.Value() > 0) g.Decrement();
}

void Metrics::on_replica_sync(const std::string& t, const correlate::ReplicaSync& s, bool repeat) {
  if (s.outcome == correlate::ReplicaSync::Outcome::syncing) return;
  replica_syncs_.Add(of(t, {{"outcome", correlate::outcome_name(s.outcome)}})).Increment();
  if (const auto ms = s.sync_ms()) replica_sync_.Add(of(t), kSyncSeconds).Observe(*ms / 1e3);
  if (repeat) sync_loop_repeats_.Add(of(t)).Increment();
}

void Metrics::observe_client_latency(const std::string& t, bool during_fork, double seconds) {
  // Made at a target's first probe: a target without one has no such series.
  client_latency_.Add(of(t, {{"phase", during_fork ? "fork" : "idle"}}), kClientSeconds).Observe(seconds);
}

void Metrics::observe_fsync(const std::string& t, const char* thread, bool during_fork, double seconds) {
  // Made at a target's first call of a kind: a process that never syncs has no such series.
  fsync_.Add(of(t, {{"thread", thread}, {"phase", during_fork ? "fork" : "idle"}}), kFsyncSeconds).Observe(seconds);
}

void Metrics::observe_aof_write(const std::string& t, bool during_fork, double seconds) {
  aof_write_.Add(of(t, {{"phase", during_fork ? "fork" : "idle"}}), kFsyncSeconds).Observe(seconds);
}

void Metrics::on_stall(const std::string& t, bool compaction, double seconds) {
  stall_.Add(of(t, {{"kind", compaction ? "compaction" : "reclaim"}}), kStallSeconds).Observe(seconds);
}

void Metrics::add_cow_faults(const std::string& t, uint64_t parent, uint64_t child) {
  cow_faults_.Add(of(t)).Increment(static_cast<double>(parent));
  child_cow_faults_.Add(of(t)).Increment(static_cast<double>(child));
}

void Metrics::add_reuse_faults(const std::string& t, uint64_t n) {
  reuse_faults_.Add(of(t)).Increment(static_cast<double>(n));
}

void Metrics::add_thp(const std::string& t, uint64_t splits, uint64_t collapses) {
  thp_splits_.Add(of(t)).Increment(static_cast<double>(splits));
  thp_collapses_.Add(of(t)).Increment(static_cast<double>(collapses));
}

void Metrics::add_dropped(uint64_t n) { dropped_.Add({}).Increment(static_cast<double>(n)); }

void Metrics::set_memory(const std::string& t, uint64_t rss, uint64_t anon_huge, std::optional<bool> thp_enabled) {
  rss_.Add(of(t)).Set(static_cast<double>(rss));
  anon_huge_.Add(of(t)).Set(static_cast<double>(anon_huge));
  if (thp_enabled) thp_process_.Add(of(t)).Set(*thp_enabled ? 1 : 0);
}

void Metrics::set_cgroup_memory(const std::string& t, std::optional<uint64_t> usage, std::optional<uint64_t> limit) {
  if (usage) cgroup_usage_.Add(of(t)).Set(static_cast<double>(*usage));
  if (limit) {
    cgroup_limit_.Add(of(t)).Set(static_cast<double>(*limit));
  } else if (cgroup_limit_.Has(of(t))) {
    cgroup_limit_.Remove(&cgroup_limit_.Add(of(t)));
  }
}

void Metrics::set_redis(const std::string& t, const redis::Snapshot& s) {
  redis_up_.Add(of(t)).Set(s.up ? 1 : 0);
  mirror_->update(t, s);
  if (!s.up) return;
  cow_size_.Add(of(t)).Set(static_cast<double>(s.current_cow_size));
  fork_ratio_.Add(of(t)).Set(s.current_fork_perc / 100.0);
  keys_processed_.Add(of(t)).Set(static_cast<double>(s.current_save_keys_processed));
  latest_fork_.Add(of(t)).Set(static_cast<double>(s.latest_fork_usec) / 1e6);
}

void Metrics::set_forecast_freeze(const std::string& t, double freeze_ms) {
  predicted_freeze_.Add(of(t)).Set(freeze_ms / 1e3);
}

void Metrics::set_forecast(const std::string& t, const forecast::Prediction& p) {
  const prometheus::Labels l = of(t, {{"reason", correlate::reason_name(p.reason)}});
  predicted_lifetime_.Add(l).Set(p.child_lifetime_s.value);
  if (p.copied_bytes) predicted_copies_.Add(l).Set(p.copied_bytes->value);
  if (p.peak_extra_memory_bytes) predicted_memory_.Add(l).Set(p.peak_extra_memory_bytes->value);
  for (const auto& c : p.limits) {
    // The memory limits only: the replica output buffer's is a limit of Redis's, not of memory.
    const char* limit = c.name == forecast::kCgroupLimit    ? "cgroup"
                        : c.name == forecast::kMemAvailable ? "mem_available"
                                                            : nullptr;
    if (!limit) continue;
    predicted_headroom_.Add(of(t, {{"reason", correlate::reason_name(p.reason)}, {"limit", limit}}))
        .Set(static_cast<double>(c.limit_bytes) - c.need.value);
  }
}

void Metrics::add_untracked_forks(const std::string& t, uint64_t n) {
  untracked_forks_.Add(of(t)).Increment(static_cast<double>(n));
}

void Metrics::set_untraced(const std::string& t, bool untraced) { untraced_.Add(of(t)).Set(untraced ? 1 : 0); }

void Metrics::add_watch_failure() { watch_failures_.Add({}).Increment(); }

void Metrics::add_reaped(uint64_t lost_exits, uint64_t dead) {
  reaped_.Add({{"outcome", "lost_exit"}}).Increment(static_cast<double>(lost_exits));
  reaped_.Add({{"outcome", "dead"}}).Increment(static_cast<double>(dead));
}

void Metrics::set_map_entries(const std::string& map, size_t entries, size_t max_entries) {
  map_entries_.Add({{"map", map}}).Set(static_cast<double>(entries));
  map_max_entries_.Add({{"map", map}}).Set(static_cast<double>(max_entries));
}

void Metrics::add_program_cost(const std::string& program, uint64_t runs, uint64_t run_ns) {
  program_runs_.Add({{"program", program}}).Increment(static_cast<double>(runs));
  program_run_time_.Add({{"program", program}}).Increment(static_cast<double>(run_ns) / 1e9);
}

void Metrics::set_bpf_stats_enabled(bool enabled) { bpf_stats_enabled_.Add({}).Set(enabled ? 1 : 0); }

std::string Metrics::exposition() const {
  auto families = registry_->Collect();
  for (auto& f : mirror_->Collect()) families.push_back(std::move(f));
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace thptrace::daemon
