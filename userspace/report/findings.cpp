// SPDX-License-Identifier: Apache-2.0
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <string_view>
#include <tuple>

#include "common/units.h"
#include "report/copies.h"
#include "report/report.h"

namespace thptrace::report {
namespace {

using correlate::Reason;
using nlohmann::ordered_json;

// Among findings of the same severity and impact, which comes first.
enum class Priority {
  loop,           // a full-sync loop: it goes round until a limit is changed
  lost,           // what the host or the capture lost: OOM kills, dropped events
  state,          // what changes how the rest reads: the target exited, another process, opted out of THP
  cause,          // where the time went: THP splits, fsync contention, a fork clients felt
  figure,         // each fork's figures: copies, their code paths, server latency, compaction
  detail,         // partial stacks, the freeze, khugepaged
  setting,        // a host setting that explains the figures: THP never
  quiet,          // nothing to act on: THP madvise unused, steady fsyncs
  missing_input,  // what the capture was not given: no --redis
  nothing,        // no fork happened
};

// A finding while they are gathered.
struct Draft {
  Priority priority;
  std::string text;
  std::string id;
  Severity severity = Severity::info;
  std::optional<double> impact_ms;
  ordered_json evidence = ordered_json::object();
};

// Past this many fork windows with latency figures, they fold into one finding.
constexpr size_t kLatencySentences = 3;
// Forks whose dominant copy path gets a sentence.
constexpr size_t kCopySentences = 3;
// A freeze this long is one clients notice (a warning, not just information).
constexpr double kFreezeWarnMs = 10.0;
// A page of its own, and the PMD's folio, in KiB (4 KiB base pages).
constexpr uint32_t kSmallPageKb = 4, kPmdFolioKb = 2048;

std::string bytes_config(uint64_t b) {
  if (b % (1 << 20) == 0) return fmt::format("{}mb", b >> 20);
  if (b % 1024 == 0) return fmt::format("{}kb", b >> 10);
  return std::to_string(b);
}

// The full-sync loop in one sentence an operator can act on: which replicas, how often, the limit in
// force, what the buffers reached, and the limit that would have held.
std::string loop_finding(const ReplicationSection& x) {
  const auto& worst = x.loops.front();
  std::string who = fmt::format("replica {} full-synced {} times in this capture ({} dropped before online)",
                                worst.address, worst.syncs, worst.dropped);
  if (x.loops.size() > 1) who += fmt::format(" ({} more replicas likewise)", x.loops.size() - 1);
  std::string cause;
  const std::string limit =
      x.limit ? fmt::format("`client-output-buffer-limit replica {} {} {}`", bytes_config(x.limit->hard_bytes),
                            bytes_config(x.limit->soft_bytes), x.limit->soft_seconds)
              : std::string("the replica output buffer limit");
  std::string buffers =
      fmt::format("replication buffers peaked at {}", mib_text(static_cast<double>(x.replication_buffer_peak_bytes)));
  if (x.replica_output_buffer_peak_bytes)
    buffers += fmt::format(", a replica's output buffer at {}",
                           mib_text(static_cast<double>(*x.replica_output_buffer_peak_bytes)));
  if (x.loop_cause == "output_buffer_limit") {
    cause = fmt::format(": its output buffer overflowed {}{} ({})", limit,
                        x.output_buffer_limit_disconnections
                            ? fmt::format(", {} disconnections by that limit", *x.output_buffer_limit_disconnections)
                            : std::string(),
                        buffers);
    if (x.suggested_hard_limit_bytes)
      cause += fmt::format(
          "; a hard limit of at least {} would have held (the replication stream grew {}/s): `CONFIG SET "
          "client-output-buffer-limit \"replica {} {} {}\"`",
          mib_text(static_cast<double>(*x.suggested_hard_limit_bytes)), mib_text(x.stream_bytes_per_s),
          bytes_config(*x.suggested_hard_limit_bytes),
          x.limit && x.limit->soft_bytes
              ? bytes_config(std::max(x.limit->soft_bytes, *x.suggested_hard_limit_bytes / 2))
              : "0",
          x.limit ? x.limit->soft_seconds : 0);
  } else if (x.loop_cause == "repl_timeout") {
    cause = fmt::format(": its sync outlasted `repl-timeout {}` ({}); raise repl-timeout above the time a sync takes",
                        x.repl_timeout_s.value_or(0), buffers);
  } else {
    cause = fmt::format(" (the cause is not known: {} is {}, {})", limit.front() == '`' ? limit : "the limit",
                        "in force", buffers);
  }
  return fmt::format("Full-sync loop: {}{}.", who, cause);
}

// Where the copies came from (--sample-copies): the dominant code path of the forks that copied the
// most, stacks that stop short, samples the kernel dropped.
void copy_findings(const Report& r, std::vector<Draft>& f) {
  std::vector<const correlate::ForkEpisode*> sampled;
  for (const auto& e : r.forks)
    if (e.copies && e.copies->samples > 0) sampled.push_back(&e);
  std::stable_sort(sampled.begin(), sampled.end(),
                   [](const auto* a, const auto* b) { return a->cow_faults > b->cow_faults; });
  for (size_t i = 0; i < sampled.size() && i < kCopySentences; ++i) {
    const auto& e = *sampled[i];
    const auto* top = e.copies->dominant_path();
    if (!top) continue;
    const auto& m = e.copies->mappings.front();
    // A Redis's copies by the command that wrote them: what an operator can act on.
    constexpr double kNamedShare = 0.01;
    const std::string by_command = commands_text(*e.copies, kNamedShare);
    ordered_json commands = ordered_json::object();
    for (const auto& c : e.copies->commands)
      if (c.share >= kNamedShare) commands[c.name] = c.share;
    f.push_back({Priority::figure,
                 fmt::format("In the {} fork window (child {}), {:.0f}% of the sampled copies came from {} "
                             "(about {} of its {} copies); {:.0f}% were in {} memory.{}",
                             correlate::reason_name(e.reason), e.child_pid, top->share * 100, top->name,
                             std::llround(top->share * static_cast<double>(e.cow_faults)), e.cow_faults, m.share * 100,
                             m.name, by_command.empty() ? "" : " By the command that wrote: " + by_command + "."),
                 "dominant_copy_path",
                 Severity::info,
                 std::nullopt,
                 {{"child_pid", e.child_pid}, {"path", top->name}, {"share", top->share}, {"by_command", commands}}});
  }
  for (const auto* e : sampled)
    if (!e->copies->stacks_partial.empty()) {
      f.push_back({Priority::detail,
                   fmt::format("Call stacks of the sampled copies stop at the function that wrote: {}, so each "
                               "copy is attributed to that function, not to the code that called it.",
                               e->copies->stacks_partial),
                   "partial_stacks",
                   Severity::info,
                   std::nullopt,
                   {{"stacks_partial", e->copies->stacks_partial}}});
      break;
    }
  if (r.copy_samples_dropped > 0)
    f.push_back({Priority::cause,
                 fmt::format("{} sampled copies were dropped (the samples ring buffer was full): the shares "
                             "stand, the estimated totals are low.",
                             r.copy_samples_dropped),
                 "copy_samples_dropped",
                 Severity::warning,
                 std::nullopt,
                 {{"copy_samples_dropped", r.copy_samples_dropped}}});
  if (r.disk_windows_unknown > 0)
    f.push_back({Priority::cause,
                 fmt::format("The capture let go of its {} oldest disk calls to keep its memory bounded: {} fork "
                             "windows (or windows before them) began before the oldest it kept and have no fsync "
                             "figures.",
                             r.disk_calls_dropped, r.disk_windows_unknown),
                 "disk_windows_unknown",
                 Severity::warning,
                 std::nullopt,
                 {{"disk_calls_dropped", r.disk_calls_dropped}, {"disk_windows_unknown", r.disk_windows_unknown}}});
}

// A full-sync loop, drops by the output buffer limit, forks wasted on dropped replicas.
void replication_findings(const Report& r, std::vector<Draft>& f) {
  if (const auto& x = r.replication; x && !x->loops.empty())
    f.push_back({Priority::loop,
                 loop_finding(*x),
                 "full_sync_loop",
                 Severity::critical,
                 std::nullopt,
                 {{"address", x->loops.front().address},
                  {"syncs", x->loops.front().syncs},
                  {"dropped", x->loops.front().dropped},
                  {"loop_cause", x->loop_cause}}});
  // Disconnections by the limit without a second full sync: the replica came back with a partial
  // resync (the backlog still held its offset), but each drop is a reconnect and a resend.
  if (const auto& x = r.replication; x && x->loops.empty() && x->output_buffer_limit_disconnections.value_or(0) > 0)
    f.push_back(
        {Priority::state,
         fmt::format(
             "Redis dropped a replica {} time{} for overcoming its output buffer limit{} (replica "
             "output buffer peak {}): the writes during a sync outgrow the limit; raise it.",
             *x->output_buffer_limit_disconnections, *x->output_buffer_limit_disconnections == 1 ? "" : "s",
             x->limit
                 ? fmt::format(" `client-output-buffer-limit replica {} {} {}`", bytes_config(x->limit->hard_bytes),
                               bytes_config(x->limit->soft_bytes), x->limit->soft_seconds)
                 : std::string(),
             x->replica_output_buffer_peak_bytes ? mib_text(static_cast<double>(*x->replica_output_buffer_peak_bytes))
                                                 : std::string("not seen")),
         "replica_output_buffer_drops",
         Severity::warning,
         std::nullopt,
         {{"disconnections", *x->output_buffer_limit_disconnections}}});
  if (const auto& x = r.replication; x && x->wasted_forks > 0)
    f.push_back({Priority::state,
                 fmt::format("{} full-sync fork{} served only replicas that were dropped before they came online "
                             "(Redis then kills the child): wasted, {} copied on write for nothing.",
                             x->wasted_forks, x->wasted_forks == 1 ? "" : "s",
                             mib_text(static_cast<double>(x->wasted_copied_bytes))),
                 "wasted_full_sync_forks",
                 Severity::warning,
                 std::nullopt,
                 {{"wasted_forks", x->wasted_forks}, {"wasted_copied_bytes", x->wasted_copied_bytes}}});
}

// The walk that says what backed the heap: the start's (before any fork split a folio), else the
// end's; and which it is.
std::pair<const proc::FolioShares*, const char*> folio_walk(const Report& r) {
  if (r.anon_folios_start) return {&*r.anon_folios_start, "start"};
  if (r.anon_folios_end) return {&*r.anon_folios_end, "end"};
  return {nullptr, ""};
}

// KiB of a walk in folios larger than a page.
uint64_t large_folio_kb(const proc::FolioShares& s) {
  uint64_t kb = 0;
  for (const auto& [size, held] : s.kb)
    if (size > kSmallPageKb) kb += held;
  return kb;
}

// What backs the heap, in sizes, from the process's own pages (pagemap and kpageflags): PMD-sized
// pages make the page tables a fork copies smaller; smaller folios (Linux 6.8+) do not, though fork
// batches the entries of each (6.9+); a first write after fork to any of them copies 4 KiB.
Draft folios_backed(const Report& r, const proc::FolioShares& walk, const char* when) {
  const uint64_t total = walk.total_kb();
  const uint64_t large = large_folio_kb(walk);
  const bool pmd =
      std::any_of(walk.kb.begin(), walk.kb.end(), [](const auto& x) { return x.first >= kPmdFolioKb && x.second > 0; });
  const bool smaller = std::any_of(walk.kb.begin(), walk.kb.end(), [](const auto& x) {
    return x.first > kSmallPageKb && x.first < kPmdFolioKb && x.second > 0;
  });
  std::string effect;
  if (pmd) effect += " PMD-sized pages make the page tables a fork copies smaller, so fork is faster.";
  if (smaller)
    effect +=
        " Folios below that size do not make them smaller (fork copies an entry for each 4 KiB of "
        "them, batched per folio since Linux 6.9), and AnonHugePages does not count them.";
  ordered_json evidence = {{"anonymous_kb", total},
                           {"large_folio_kb", large},
                           {"folios_kb", by_size_json(walk.kb)},
                           {"walk", when},
                           {"anon_huge_pages_kb_max", r.anon_huge_pages_kb_max}};
  if (const std::string small = r.system.small_folios_enabled(); !small.empty()) evidence["small_folios"] = small;
  return {Priority::cause,
          fmt::format("Folios larger than 4 KiB held {} of this process's {} of anonymous memory at the {} "
                      "(pagemap): {}.{} Every first write after fork to one of them faults and copies 4 KiB.",
                      mib_text(static_cast<double>(large) * 1024), mib_text(static_cast<double>(total) * 1024), when,
                      folio_shares_text(walk), effect),
          "thp_backed",
          Severity::info,
          std::nullopt,
          std::move(evidence)};
}

// How the process stands with THP: opted out, never, backed by huge pages or smaller folios, or none
// under madvise.
void thp_findings(const Report& r, std::vector<Draft>& f) {
  if (r.system.thp_enabled == "always" && r.thp_enabled_for_process == false) {
    std::string why =
        r.redis && r.redis->disable_thp == "yes"
            ? "Redis's `disable-thp yes` (the default since 6.2) called prctl(PR_SET_THP_DISABLE) at start-up"
            : "the process called prctl(PR_SET_THP_DISABLE)";
    f.push_back({Priority::state,
                 fmt::format("THP is `always` system-wide, but this process opted out (THP_enabled: 0 in "
                             "/proc/{}/status): {}, so its heap is not backed by huge pages and fork "
                             "copy-on-write works on 4 KiB pages.",
                             r.pid, why),
                 "thp_opted_out",
                 Severity::info,
                 std::nullopt,
                 {{"thp_enabled", r.system.thp_enabled}, {"thp_enabled_for_process", false}}});
  } else if (const auto& [walk, when] = folio_walk(r); walk && large_folio_kb(*walk) > 0) {
    f.push_back(folios_backed(r, *walk, when));
  } else if (const std::string small = r.system.small_folios_enabled();
             !small.empty() && r.anon_huge_pages_kb_max == 0) {
    // Multi-size THP (Linux 6.8+): each size has its own mode, and the top-level one only decides
    // the sizes that inherit it.
    f.push_back(
        {Priority::quiet,
         fmt::format("This process has no PMD-sized huge page (AnonHugePages 0 kB), but this host can back "
                     "anonymous memory with folios of {}, which AnonHugePages does not count: a write "
                     "after fork copies 4 KiB of such a folio, as of a huge page.{}",
                     small,
                     walk ? fmt::format(" None of its memory was in one at the {} (pagemap).", when) : std::string()),
         "thp_small_folios",
         Severity::info,
         std::nullopt,
         {{"thp_enabled", r.system.thp_enabled}, {"small_folios", small}, {"anon_huge_pages_kb_max", 0}}});
  } else if (r.system.thp_enabled == "never") {
    f.push_back({Priority::setting,
                 "THP is `never` on this host: the heap is backed by 4 KiB pages only.",
                 "thp_never",
                 Severity::info,
                 std::nullopt,
                 {{"thp_enabled", "never"}}});
  } else if (r.anon_huge_pages_kb_max > 0) {
    // PMD-sized pages, and where smaller sizes are on (Linux 6.8+: `small`, from the branch above),
    // those too, which AnonHugePages does not count: what backs the heap, in sizes.
    ordered_json evidence = {{"anon_huge_pages_kb_max", r.anon_huge_pages_kb_max}};
    if (!small.empty()) evidence["small_folios"] = small;
    f.push_back({Priority::cause,
                 fmt::format("Transparent huge pages back up to {} of this process's memory (AnonHugePages): "
                             "page tables are smaller so fork is faster, but every first write after fork "
                             "faults on a huge mapping.{}",
                             mib_text(static_cast<double>(r.anon_huge_pages_kb_max) * 1024),
                             small.empty() ? std::string()
                                           : fmt::format(" Folios of {} can back the rest of it, which "
                                                         "AnonHugePages does not count.",
                                                         small)),
                 "thp_backed", Severity::info, std::nullopt, std::move(evidence)});
  } else if (r.system.thp_enabled == "madvise") {
    f.push_back({Priority::quiet,
                 "THP is `madvise` and this process has no huge pages (AnonHugePages 0 kB): copy-on-write "
                 "after fork works on 4 KiB pages.",
                 "thp_madvise_unused",
                 Severity::info,
                 std::nullopt,
                 {{"thp_enabled", "madvise"}, {"anon_huge_pages_kb_max", 0}}});
  }
}

// What the forks did to memory: PMD splits, syncs over disk, the copies, the fork time per GB.
void fork_findings(const Report& r, std::vector<Draft>& f) {
  uint64_t splits = 0;
  bool vmstat_splits = false;
  for (const auto& e : r.forks) {
    splits += e.thp_splits;
    vmstat_splits = vmstat_splits || e.thp_splits_source == "vmstat";
  }
  if (splits > 0)
    f.push_back({Priority::cause,
                 fmt::format("The kernel split {} huge PMDs during fork windows{} instead of copying 2 MiB "
                             "pages: since Linux 5.8 a write to a shared huge page splits it and copies 4 KiB.",
                             splits, vmstat_splits ? " (system-wide, from /proc/vmstat thp_split_pmd)" : ""),
                 "thp_splits",
                 Severity::info,
                 std::nullopt,
                 {{"thp_splits", splits}, {"source", vmstat_splits ? "vmstat" : "kernel"}}});

  const auto disk_syncs =
      std::count_if(r.forks.begin(), r.forks.end(), [](const auto& e) { return e.reason == Reason::full_sync_disk; });
  if (disk_syncs > 0)
    f.push_back({Priority::figure,
                 fmt::format("{} full sync{} went over disk: the fork child wrote a whole RDB file before "
                             "the replica got a byte.",
                             disk_syncs, disk_syncs == 1 ? "" : "s"),
                 "full_sync_over_disk",
                 Severity::info,
                 std::nullopt,
                 {{"full_syncs_over_disk", disk_syncs}}});

  uint64_t cow = 0;
  std::optional<double> stall_ms;
  bool estimated = false;
  for (const auto& e : r.forks) {
    cow += e.cow_faults;
    if (e.copy_stall_ms) stall_ms = stall_ms.value_or(0) + *e.copy_stall_ms;
    estimated = estimated || e.copy_stall_source == "estimate";
  }
  // The copies' stall is the server's time, spread over the child's life, not one client's wait: it
  // is evidence, and the finding has no impact_ms of its own.
  if (cow > 0)
    f.push_back({Priority::figure,
                 fmt::format("While fork children lived, the parent copied {} pages ({}) on write{}.", cow,
                             mib_text(static_cast<double>(cow * kPageBytes)),
                             stall_ms ? fmt::format(", which stopped the threads that wrote for {}{:.1f} ms in all{}",
                                                    estimated ? "about " : "", *stall_ms,
                                                    estimated ? " (estimated from a copy's cost measured here)" : "")
                                      : std::string(": each copy stops the thread that wrote")),
                 "copies",
                 Severity::warning,
                 std::nullopt,
                 {{"parent_copies", cow},
                  {"parent_copied_bytes", cow * kPageBytes},
                  {"stall_ms", stall_ms ? ordered_json(*stall_ms) : ordered_json(nullptr)},
                  {"stall_source", stall_ms ? (estimated ? "estimate" : "kernel") : ""}}});

  copy_findings(r, f);

  // The longest freeze: every client waited for it.
  const correlate::ForkEpisode* longest = nullptr;
  for (const auto& e : r.forks)
    if (e.fork_duration_us && (!longest || *e.fork_duration_us > *longest->fork_duration_us)) longest = &e;
  if (longest) {
    const double ms = *longest->fork_duration_us / 1e3;
    std::string per_gib;
    ordered_json evidence = {{"child_pid", longest->child_pid}, {"fork_duration_us", *longest->fork_duration_us}};
    if (longest->rss_kb_at_fork && *longest->rss_kb_at_fork > 0) {
      const double gib = static_cast<double>(*longest->rss_kb_at_fork) / (1024.0 * 1024.0);
      per_gib = fmt::format(", {:.1f} ms per GiB of its {:.2f} GiB RSS at the fork", ms / gib, gib);
      evidence["rss_kb_at_fork"] = *longest->rss_kb_at_fork;
      evidence["ms_per_gib"] = ms / gib;
    }
    f.push_back({Priority::detail,
                 fmt::format("The {} fork (child {}) froze the server for {:.1f} ms{}: every client waited that "
                             "long.",
                             correlate::reason_name(longest->reason), longest->child_pid, ms, per_gib),
                 "fork_freeze", ms >= kFreezeWarnMs ? Severity::warning : Severity::info, ms, std::move(evidence)});
  }
}

// Fewer calls than this in a window say nothing of its latency.
constexpr uint64_t kFsyncCallsToCompare = 5;
// A fork window's p99 this many times its window before's, or its slowest call kFsyncMaxSlowdown times
// the slowest before and at least kFsyncMaxMs: the disk slowed while the child lived. The slowest
// call counts because a child's sync holds the disk for long stretches: the calls it delays are few
// (the event loop waits in them), often under 1% of a window's calls.
constexpr double kFsyncSlowdown = 2.0;
constexpr double kFsyncMaxSlowdown = 4.0;
constexpr double kFsyncMaxMs = 10.0;

// Whether the fsyncs of a watched process slowed while a fork child lived (the child writing its RDB
// or its rewritten AOF next to the process's own syncs), from the fork whose fsync p99 rose most,
// and which settings trade it; or that they did not, so the disk was not what the clients felt.
void disk_findings(const Report& r, std::vector<Draft>& f) {
  struct Pick {
    const correlate::ForkEpisode* fork;
    const char* kind;
    correlate::FsyncLatency during, before;
    double ratio;
  };
  std::optional<Pick> worst;
  for (const auto& e : r.forks) {
    if (!e.fsync_during || !e.fsync_before) continue;
    for (const auto& [kind, member] :
         {std::pair{"main", &correlate::FsyncWindow::main}, std::pair{"bio_aof", &correlate::FsyncWindow::bio_aof}}) {
      const auto& d = (*e.fsync_during).*member;
      const auto& b = (*e.fsync_before).*member;
      if (!d || !b || d->count < kFsyncCallsToCompare || b->count < kFsyncCallsToCompare || b->p99_us <= 0) continue;
      // The slowdown: the p99's ratio, or the slowest call's scaled to the same threshold.
      const double by_max = d->max_us >= kFsyncMaxMs * 1e3 && b->max_us > 0
                                ? d->max_us / b->max_us * kFsyncSlowdown / kFsyncMaxSlowdown
                                : 0;
      const double ratio = std::max(d->p99_us / b->p99_us, by_max);
      if (!worst || ratio > worst->ratio) worst = Pick{&e, kind, *d, *b, ratio};
    }
  }
  if (!worst) return;
  const auto& e = *worst->fork;
  const bool main = std::string_view(worst->kind) == "main";
  const auto* p = r.redis && r.redis->persistence ? &*r.redis->persistence : nullptr;
  ordered_json evidence = {{"child_pid", e.child_pid},           {"thread", worst->kind},
                           {"p99_us", worst->during.p99_us},     {"p99_us_before", worst->before.p99_us},
                           {"max_us", worst->during.max_us},     {"count", worst->during.count},
                           {"count_before", worst->before.count}};
  if (p) {
    evidence["appendfsync"] = p->appendfsync;
    evidence["no_appendfsync_on_rewrite"] = p->no_appendfsync_on_rewrite;
  }
  if (e.aof_delayed_fsync) evidence["aof_delayed_fsync"] = *e.aof_delayed_fsync;
  std::string numbers = fmt::format(
      "p99 {:.2f} ms against {:.2f} ms in the window before, the slowest {:.1f} ms against {:.1f} ms, {} calls "
      "against {}",
      worst->during.p99_us / 1e3, worst->before.p99_us / 1e3, worst->during.max_us / 1e3, worst->before.max_us / 1e3,
      worst->during.count, worst->before.count);
  // What the child wrote meanwhile: the other side of the contention.
  if (e.child_io && e.child_io->written_bytes && e.child_lifetime_ms && *e.child_lifetime_ms > 0) {
    const double mib = static_cast<double>(e.child_io->written_bytes) / (1 << 20);
    const double rate = mib / (*e.child_lifetime_ms / 1e3);
    evidence["child_written_bytes"] = e.child_io->written_bytes;
    evidence["child_write_mib_per_s"] = rate;
    numbers += fmt::format("; the child wrote {:.1f} MiB at {:.1f} MiB/s", mib, rate);
  }
  if (e.fsync_during && e.fsync_during->aof_write) {
    evidence["aof_write_blocked_ms"] = e.fsync_during->aof_write->blocked_ms;
    numbers += fmt::format("; the event loop spent {:.1f} ms in its AOF writes", e.fsync_during->aof_write->blocked_ms);
  }
  if (worst->ratio < kFsyncSlowdown) {
    f.push_back({Priority::quiet,
                 fmt::format("The {} thread's fsyncs did not slow while the {} fork's child lived (child {}: {}): "
                             "the disk was not what this fork's clients waited for.",
                             worst->kind, correlate::reason_name(e.reason), e.child_pid, numbers),
                 "fsync_steady", Severity::info, std::nullopt, std::move(evidence)});
    return;
  }
  std::string trade;
  if (p && p->appendfsync == "always" && p->no_appendfsync_on_rewrite != "yes")
    trade =
        " With appendfsync always the event loop waits for each fsync: no-appendfsync-on-rewrite yes stops "
        "them while a child saves or rewrites, at the price of writes acknowledged without an fsync until the "
        "child ends (lost if the host crashes then).";
  else if (p && p->appendfsync == "everysec")
    trade = fmt::format(
        " With appendfsync everysec the bio thread makes them; when one takes over 2 s the event loop postpones "
        "its AOF write (aof_delayed_fsync {} during the fork), and no-appendfsync-on-rewrite yes skips them while a "
        "child lives, at the price of up to that long of writes lost if the host crashes then.",
        e.aof_delayed_fsync ? std::to_string(*e.aof_delayed_fsync) : std::string("unknown"));
  f.push_back({Priority::cause,
               fmt::format("The {} thread's fsyncs slowed while the {} fork's child lived (child {}: {}): the child's "
                           "writes and the process's syncs share the disk.{}",
                           worst->kind, correlate::reason_name(e.reason), e.child_pid, numbers, trade),
               "fsync_contention", main ? Severity::warning : Severity::info,
               main ? std::optional<double>(worst->during.max_us / 1e3) : std::nullopt, std::move(evidence)});
}

// A main thread that waited this long for a CPU in a fork's window, this share of the window at least,
// and this many times its share of the window before, was held back by the CPU (the fork's child, or
// other work of the host). A thread that sleeps and wakes waits a little at each wake-up on a busy
// host: 6 ms in 0.9 s for one that woke twice beside two busy loops on 2 CPUs.
constexpr double kCpuWaitMs = 10.0;
constexpr double kCpuWaitShare = 0.05;
constexpr double kCpuWaitRise = 2.0;

// The fork whose window held the main thread longest in the run queue, when that wait rose against
// the window before: on a small host the child serialising the dataset competes with the event loop
// for a CPU, and clients wait for both. No impact: like the copies' stall, the wait is the event
// loop's, spread over the window, not one client's.
void cpu_wait_findings(const Report& r, std::vector<Draft>& f) {
  const correlate::ForkEpisode* worst = nullptr;
  for (const auto& e : r.forks)
    if (e.main_thread_during && (!worst || e.main_thread_during->runqueue_ms > worst->main_thread_during->runqueue_ms))
      worst = &e;
  if (!worst) return;
  const auto& d = *worst->main_thread_during;
  const auto& b = worst->main_thread_before;
  const double share = d.span_ms > 0 ? d.runqueue_ms / d.span_ms : 0;
  const double share_before = b && b->span_ms > 0 ? b->runqueue_ms / b->span_ms : 0;
  if (d.runqueue_ms < kCpuWaitMs || share < kCpuWaitShare || (b && share < kCpuWaitRise * share_before)) return;
  // Who ran instead: what held the CPU it waited for (the sched family), largest first; else as far as
  // the kernel's clocks tell, the child's own time on a CPU.
  const auto& child = worst->child_cpu;
  std::string who = child ? fmt::format(" while the child itself ran {:.0f} ms on a CPU over its {:.0f} ms life",
                                        child->on_cpu_ms, worst->child_lifetime_ms.value_or(d.span_ms))
                          : std::string(" and another thread ran, the fork's child or other work of the host");
  if (const auto& w = worst->main_wait; w && w->total_ms() > 0) {
    std::vector<std::pair<double, const char*>> holders = {{w->child_ms, "the fork's child"},
                                                           {w->others_ms, "other processes"},
                                                           {w->threads_ms, "the server's other threads"},
                                                           {w->idle_ms, "an idle CPU waking"}};
    std::stable_sort(holders.begin(), holders.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::string> named;
    for (const auto& [ms, name] : holders)
      if (ms >= 0.05) named.push_back(fmt::format("{} {:.1f} ms", name, ms));
    who = fmt::format(", and its CPU was held by {}", fmt::join(named, ", "));
  }
  ordered_json evidence = {{"child_pid", worst->child_pid},
                           {"runqueue_ms", d.runqueue_ms},
                           {"on_cpu_ms", d.on_cpu_ms},
                           {"span_ms", d.span_ms},
                           {"runqueue_ms_before", b ? ordered_json(b->runqueue_ms) : ordered_json(nullptr)},
                           {"span_ms_before", b ? ordered_json(b->span_ms) : ordered_json(nullptr)}};
  if (child) evidence["child_on_cpu_ms"] = child->on_cpu_ms;
  if (const auto& w = worst->main_wait) {
    evidence["behind_fork_child_ms"] = w->child_ms;
    evidence["behind_own_threads_ms"] = w->threads_ms;
    evidence["behind_other_processes_ms"] = w->others_ms;
    evidence["behind_idle_cpu_ms"] = w->idle_ms;
  }
  f.push_back(
      {Priority::cause,
       fmt::format("The main thread waited {:.1f} ms for a CPU while the {} fork's child lived (child {}: "
                   "{:.0f}% of {:.0f} ms, against {} in the window before): it was runnable{}.",
                   d.runqueue_ms, correlate::reason_name(worst->reason), worst->child_pid, share * 100, d.span_ms,
                   b ? fmt::format("{:.0f}%", share_before * 100) : std::string("nothing measured"), who),
       "cpu_wait_in_fork", Severity::warning, std::nullopt, std::move(evidence)});
}

// Redis's server-side latency in the fork windows against the windows before.
void latency_findings(const Report& r, std::vector<Draft>& f) {
  // What the clients felt (the latency probe): the fork whose window held the slowest request.
  const correlate::ForkEpisode* felt = nullptr;
  for (const auto& e : r.forks)
    if (e.client_latency_during && (!felt || e.client_latency_during->max_us > felt->client_latency_during->max_us))
      felt = &e;
  if (felt && r.client_probe) {
    const auto& d = *felt->client_latency_during;
    const auto& b = felt->client_latency_before;
    ordered_json evidence = {
        {"child_pid", felt->child_pid},   {"max_us", d.max_us},
        {"p999_us", d.p999_us},           {"p999_us_before", b ? ordered_json(b->p999_us) : ordered_json(nullptr)},
        {"over_timeout", d.over_timeout}, {"samples", d.samples}};
    // A window before that was as slow (the load's own spikes) says the fork was not what clients
    // felt: said as that, not as a slowdown it caused.
    if (b && b->samples > 0 && d.p999_us <= b->p999_us && d.over_timeout <= b->over_timeout) {
      evidence["max_us_before"] = b->max_us;
      evidence["over_timeout_before"] = b->over_timeout;
      f.push_back({Priority::figure,
                   fmt::format("Clients felt no more during the {} fork (child {}) than in the window before it: "
                               "p99.9 {:.2f} ms against {:.2f} ms, the slowest request {:.1f} ms against {:.1f} ms; "
                               "{} of {} requests took over {} µs, against {} of {} before.",
                               correlate::reason_name(felt->reason), felt->child_pid, d.p999_us / 1e3, b->p999_us / 1e3,
                               d.max_us / 1e3, b->max_us / 1e3, d.over_timeout, d.samples,
                               r.client_probe->client_timeout_us, b->over_timeout, b->samples),
                   "fork_not_felt", Severity::info, std::nullopt, std::move(evidence)});
    } else {
      f.push_back({Priority::cause,
                   fmt::format("Clients felt the {} fork (child {}): the slowest probe request waited {:.1f} ms and "
                               "p99.9 was {:.2f} ms, against {} in the window before; {} of {} requests took over "
                               "{} µs.",
                               correlate::reason_name(felt->reason), felt->child_pid, d.max_us / 1e3, d.p999_us / 1e3,
                               b ? fmt::format("{:.2f} ms", b->p999_us / 1e3) : std::string("nothing measured"),
                               d.over_timeout, d.samples, r.client_probe->client_timeout_us),
                   "clients_felt_fork", d.over_timeout > 0 ? Severity::warning : Severity::info, d.max_us / 1e3,
                   std::move(evidence)});
    }
  }

  // Latency windows: one sentence per fork while there are few; past that one sentence with counts
  // and the worst window, so that a capture of hundreds of forks (a full-sync loop) stays readable.
  std::vector<const correlate::ForkEpisode*> windows;
  for (const auto& e : r.forks)
    if (e.latency_during && e.latency_before) windows.push_back(&e);
  if (windows.size() <= kLatencySentences) {
    for (const auto* e : windows) {
      const auto& d = *e->latency_during;
      const auto& b = *e->latency_before;
      f.push_back(
          {Priority::figure,
           fmt::format("During the {} fork window (child {}), Redis's server-side p99.9 was ≤ {:.0f} µs "
                       "(p50 ≤ {:.0f} µs) against ≤ {:.0f} µs (p50 ≤ {:.0f} µs) in the window before.",
                       correlate::reason_name(e->reason), e->child_pid, d.p999_us, d.p50_us, b.p999_us, b.p50_us),
           "server_latency_in_fork",
           Severity::info,
           std::nullopt,
           {{"child_pid", e->child_pid}, {"p999_us_during", d.p999_us}, {"p999_us_before", b.p999_us}}});
    }
  } else {
    const auto worst = *std::max_element(windows.begin(), windows.end(), [](const auto* a, const auto* b) {
      return a->latency_during->p999_us < b->latency_during->p999_us;
    });
    const auto worse = std::count_if(windows.begin(), windows.end(), [](const auto* e) {
      return e->latency_during->p999_us > e->latency_before->p999_us;
    });
    f.push_back({Priority::figure,
                 fmt::format("In {} of {} fork windows Redis's server-side p99.9 was higher than in the window "
                             "before; the worst, during the {} fork window (child {}), was ≤ {:.0f} µs against "
                             "≤ {:.0f} µs before.",
                             worse, windows.size(), correlate::reason_name(worst->reason), worst->child_pid,
                             worst->latency_during->p999_us, worst->latency_before->p999_us),
                 "server_latency_in_forks",
                 Severity::info,
                 std::nullopt,
                 {{"windows", windows.size()}, {"higher", worse}, {"worst_child_pid", worst->child_pid}}});
  }
}

// What Redis left out or contradicted: unreachable, unanswered for a while, no address, another process.
void redis_findings(const Report& r, std::vector<Draft>& f) {
  if (r.redis && !r.redis->reachable)
    f.push_back({Priority::state,
                 fmt::format("Redis at {} was not reachable ({}): fork reasons and server-side latency are "
                             "missing; the kernel figures are complete.",
                             r.redis->address, r.redis->error),
                 "redis_unreachable",
                 Severity::warning,
                 std::nullopt,
                 {{"address", r.redis->address}, {"error", r.redis->error}}});
  // It answered, then stopped for a while (frozen, overloaded, restarted): the figures of that time
  // come from the kernel alone. When the traced process itself exited, its end says why.
  if (r.redis && r.redis->reachable && !r.redis->unanswered.empty()) {
    const auto& u = r.redis->unanswered;
    const auto& last = u.back();
    if (!(r.target_exited && !last.to_ns)) {
      f.push_back(
          {Priority::cause,
           fmt::format(
               "Redis at {} stopped answering {} during the capture, last from +{:.1f} s {} ({}): for "
               "that time fork reasons come from the uprobes only and there are no server-side "
               "latency figures; the kernel figures are complete.",
               r.redis->address, u.size() == 1 ? std::string("once") : fmt::format("{} times", u.size()),
               r.seconds_since_start(last.from_ns),
               last.to_ns ? fmt::format("to +{:.1f} s", r.seconds_since_start(last.to_ns)) : std::string("to the end"),
               last.error),
           "redis_unanswered",
           Severity::warning,
           std::nullopt,
           {{"address", r.redis->address}, {"times", u.size()}}});
    }
  }
  if (!r.redis && r.comm.rfind("redis", 0) == 0)
    f.push_back({Priority::missing_input,
                 "No --redis address was given: fork reasons come from uprobes only and there are no "
                 "server-side latency windows.",
                 "no_redis_address", Severity::info, std::nullopt, ordered_json::object()});
  // Redis reports its pid in its own PID namespace (1 in a container).
  if (r.redis && r.redis->reachable && r.redis->process_id &&
      r.redis->process_id != (r.pid_in_namespace ? r.pid_in_namespace : r.pid))
    f.push_back({Priority::state,
                 fmt::format("Redis at {} reports process_id {}, not the traced pid {}: its figures describe "
                             "another process.",
                             r.redis->address, r.redis->process_id, r.pid),
                 "redis_other_process",
                 Severity::warning,
                 std::nullopt,
                 {{"process_id", r.redis->process_id}, {"pid", r.pid}}});
}

// The memory cgroup: usage near its limit during forks, OOM kills.
void memory_findings(const Report& r, std::vector<Draft>& f) {
  if (const auto& c = r.memory.cgroup) {
    const auto in_mib = [](uint64_t b) { return static_cast<double>(b) / (1 << 20); };
    if (c->limit_bytes && *c->limit_bytes > 0 &&
        static_cast<double>(c->usage_max_bytes) >= (1.0 - kHeadroomWarnShare) * static_cast<double>(*c->limit_bytes)) {
      const uint64_t headroom = *c->headroom_bytes();
      std::string rate;
      if (r.memory.fork_window_s > 0 && r.memory.copied_bytes > 0) {
        const double per_s = static_cast<double>(r.memory.copied_bytes) / r.memory.fork_window_s;
        rate = fmt::format(
            " At the rate the forks copied ({:.1f} MiB/s while a child lived), the {:.1f} MiB left "
            "would last about {:.0f} s of a fork.",
            in_mib(static_cast<uint64_t>(per_s)), in_mib(headroom), static_cast<double>(headroom) / per_s);
      }
      f.push_back(
          {Priority::state,
           fmt::format("The memory cgroup's usage peaked at {:.1f} MiB, {:.0f}% of its {:.1f} MiB limit ({}): "
                       "copy-on-write during a longer fork, or more writes, can reach it and the kernel "
                       "would OOM-kill a process in it.{}",
                       in_mib(c->usage_max_bytes),
                       100.0 * static_cast<double>(c->usage_max_bytes) / static_cast<double>(*c->limit_bytes),
                       in_mib(*c->limit_bytes), c->path, rate),
           "memory_headroom",
           Severity::critical,
           std::nullopt,
           {{"usage_max_bytes", c->usage_max_bytes}, {"limit_bytes", *c->limit_bytes}, {"headroom_bytes", headroom}}});
    }
    if (c->oom_kills > 0)
      f.push_back({Priority::lost,
                   fmt::format("The kernel OOM-killed {} process(es) in this memory cgroup ({}) during the capture.",
                               c->oom_kills, c->path),
                   "oom_kills",
                   Severity::critical,
                   std::nullopt,
                   {{"oom_kills", c->oom_kills}, {"path", c->path}}});
  }
}

}  // namespace

std::vector<std::string> finding_texts(const Report& r) {
  auto all = findings(r);
  std::vector<std::string> out;
  out.reserve(all.size());
  for (auto& f : all) out.push_back(std::move(f.text));
  return out;
}

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::critical: return "critical";
    case Severity::warning: return "warning";
    case Severity::info: return "info";
  }
  return "info";
}

std::vector<report::Finding> findings(const Report& r) {
  std::vector<Draft> f;
  replication_findings(r, f);
  if (r.totals.dropped_events > 0)
    f.push_back({Priority::lost,
                 fmt::format("{} kernel events were dropped because the ring buffer was full: episode "
                             "boundaries may be missing (fault counts are kept in maps and are complete).",
                             r.totals.dropped_events),
                 "dropped_events",
                 Severity::warning,
                 std::nullopt,
                 {{"dropped_events", r.totals.dropped_events}}});

  thp_findings(r, f);
  fork_findings(r, f);
  latency_findings(r, f);
  if (r.totals.compaction_stalls + r.totals.reclaim_stalls > 0)
    f.push_back(
        {Priority::figure,
         fmt::format("The process stalled {} times in direct compaction ({:.1f} ms) and {} times in "
                     "direct reclaim ({:.1f} ms).",
                     r.totals.compaction_stalls, r.totals.compaction_ms, r.totals.reclaim_stalls, r.totals.reclaim_ms),
         "direct_compaction_reclaim",
         Severity::warning,
         r.totals.compaction_ms + r.totals.reclaim_ms,
         {{"compaction_stalls", r.totals.compaction_stalls},
          {"compaction_ms", r.totals.compaction_ms},
          {"reclaim_stalls", r.totals.reclaim_stalls},
          {"reclaim_ms", r.totals.reclaim_ms}}});
  if (r.totals.thp_collapses > 0)
    f.push_back({Priority::detail,
                 fmt::format("khugepaged collapsed {} ranges of this process into huge pages.", r.totals.thp_collapses),
                 "khugepaged_collapses",
                 Severity::info,
                 std::nullopt,
                 {{"thp_collapses", r.totals.thp_collapses}}});

  redis_findings(r, f);
  if (r.target_exited)
    f.push_back(
        {Priority::state,
         fmt::format("The traced process {} exited during the capture; the report covers what was seen until then.",
                     r.pid),
         "target_exited",
         Severity::info,
         std::nullopt,
         {{"pid", r.pid}}});
  if (r.forks.empty())
    f.push_back({Priority::nothing, "No fork happened during the capture.", "no_fork", Severity::info, std::nullopt,
                 ordered_json::object()});
  if (r.totals.untracked_forks > 0)
    f.push_back({Priority::cause,
                 fmt::format("{} forks overlapped more than {} live children and their faults were not "
                             "attributed.",
                             r.totals.untracked_forks, THPTRACE_MAX_ACTIVE),
                 "untracked_forks",
                 Severity::warning,
                 std::nullopt,
                 {{"untracked_forks", r.totals.untracked_forks}}});

  memory_findings(r, f);
  disk_findings(r, f);
  cpu_wait_findings(r, f);

  // Critical first; then by the client-visible ms they account for; then as they were ordered.
  const auto rank = [](const Draft& d) {
    return std::make_tuple(d.severity == Severity::critical ? 0 : 1, -d.impact_ms.value_or(0.0),
                           static_cast<int>(d.severity), d.priority);
  };
  std::stable_sort(f.begin(), f.end(), [&](const Draft& a, const Draft& b) { return rank(a) < rank(b); });
  std::vector<report::Finding> out;
  out.reserve(f.size());
  for (auto& x : f) out.push_back({std::move(x.id), x.severity, x.impact_ms, std::move(x.text), std::move(x.evidence)});
  return out;
}

}  // namespace thptrace::report
