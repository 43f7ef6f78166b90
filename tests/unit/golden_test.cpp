// SPDX-License-Identifier: Apache-2.0
// Recorded runs replayed: a capture's inputs give the same report (text and JSON) and a daemon's
// inputs the same metrics as the code that recorded them (tests/unit/data/record.sh), byte for byte.
// An intended change of output re-records them and names the change in its commit; one that only adds
// to the output (a field, a family) rewrites the expected files from the same recordings instead:
// THPTRACE_UPDATE_GOLDEN=1 build/tests/unit_tests --gtest_filter='Golden*:Recorded/*', then read the diff
// (daemon.metrics.txt, a real scrape with families the replay cannot make, is edited by hand).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

#include "daemon/exporter.h"
#include "daemon/metrics.h"
#include "report/disk_windows.h"
#include "report/inputs.h"
#include "report/report.h"
#include "report/retention.h"

using namespace thptrace;
using nlohmann::json;

namespace {

std::string data_path(const std::string& name) { return std::string(THPTRACE_TEST_DATA) + "/" + name; }

std::string read_text(const std::string& name) {
  std::ifstream in(data_path(name));
  EXPECT_TRUE(in) << name;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool updating() {
  const char* v = std::getenv("THPTRACE_UPDATE_GOLDEN");
  return v && std::string_view(v) == "1";
}

// Under THPTRACE_UPDATE_GOLDEN=1, writes text as the expected file `name`.
void update(const std::string& name, const std::string& text) {
  if (!updating()) return;
  std::ofstream out(data_path(name), std::ios::trunc);
  out << text;
  EXPECT_TRUE(out.good()) << name;
}

report::CaptureInputs read_inputs(const std::string& name) {
  return report::inputs_from_json(json::parse(read_text(name)));
}

// The families the daemon sets itself from the kernel maps' state at each reaping of the kernel maps
// (daemon/kernel_maps.cpp): occupancy, reaping, untraced targets and the programs' own cost. They are not derived from
// the recorded inputs, so the replay leaves them out of both sides.
bool upkeep_family(const std::string& line) {
  for (const char* name :
       {"thptrace_bpf_map_", "thptrace_bpf_program_", "thptrace_bpf_stats_enabled", "thptrace_target_untraced",
        "thptrace_target_watch_failures_total", "thptrace_episodes_reaped_total"})
    if (line.find(name) != std::string::npos) return true;
  return false;
}

std::string without_upkeep_families(const std::string& exposition) {
  std::istringstream in(exposition);
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (!upkeep_family(line)) out += line + "\n";
  return out;
}

// Replays a daemon's recorded inputs (daemon.inputs.jsonl) into a fresh Exporter and its metrics.
std::string replay_daemon(const std::string& name) {
  daemon::Metrics metrics;
  std::unique_ptr<daemon::Exporter> exporter;
  std::map<std::string, daemon::Exporter::TargetId> ids;
  std::istringstream lines(read_text(name));
  for (std::string line; std::getline(lines, line);) {
    const json step = json::parse(line);
    if (step.contains("probes")) {
      tracer::AttachModes modes;
      const auto& p = step["probes"];
      for (const auto& f : tracer::kFamilies)
        if (p.contains(f.name)) modes.at(f.family) = report::choice_from(p[f.name]);
      exporter = std::make_unique<daemon::Exporter>(metrics, modes);
      if (const auto o = step.find("realtime_offset_ns"); o != step.end())
        exporter->set_realtime_offset(o->get<int64_t>());
      continue;
    }
    if (!exporter) throw std::runtime_error("the recording does not start with the probe modes");
    if (step.contains("add_target")) {
      const auto label = step["add_target"].get<std::string>();
      ids[label] = exporter->add_target(label, step["watched"].get<bool>());
    } else if (step.contains("remove_target")) {
      exporter->remove_target(ids.at(step["remove_target"].get<std::string>()));
    } else if (step.contains("follow")) {
      proc::ContainerNames names;
      if (const auto c = step.find("container"); c != step.end()) names = proc::container_from(*c);
      exporter->follow(ids.at(step["follow"].get<std::string>()), step["pid"].get<pid_t>(), names);
    } else if (step.contains("forget")) {
      exporter->forget(ids.at(step["forget"].get<std::string>()), step["child_pid"].get<uint32_t>());
    } else if (step.contains("snapshot")) {
      exporter->on_snapshot(ids.at(step["target"].get<std::string>()), report::snapshot_from(step["snapshot"]));
    } else if (step.contains("event")) {
      exporter->on_event(ids.at(step["target"].get<std::string>()), report::event_from(step["event"]));
      if (step.contains("now")) exporter->export_settled(step["now"].get<uint64_t>());
    } else if (step.contains("settle")) {
      if (!step["settle"].get<bool>()) exporter->export_settled(step["now"].get<uint64_t>());
    } else if (step.contains("settled")) {
      exporter->export_settled(step["settled"].get<uint64_t>());
    } else if (step.contains("housekeeping")) {
      daemon::Exporter::Readings h;
      h.now_ns = step["housekeeping"].get<uint64_t>();
      h.system.thp_enabled = step["thp_enabled"].get<std::string>();
      h.system.thp_defrag = step["thp_defrag"].get<std::string>();
      if (step.contains("thp_split_pmd")) h.thp_split_pmd = step["thp_split_pmd"].get<uint64_t>();
      for (const auto& t : step["targets"]) {
        daemon::Exporter::Readings::Reading r;
        r.target = ids.at(t["target"].get<std::string>());
        if (t.contains("counters")) r.counters = report::target_from(t["counters"]);
        const auto& s = t["sample"];
        r.sample.target_alive = s["target_alive"].get<bool>();
        r.sample.rss_kb = s["rss_kb"].get<uint64_t>();
        r.sample.anon_huge_pages_kb = s["anon_huge_pages_kb"].get<uint64_t>();
        if (!s["thp_enabled"].is_null()) r.sample.thp_enabled = s["thp_enabled"].get<bool>();
        if (s.contains("cgroup_usage_bytes")) r.sample.cgroup_usage_bytes = s["cgroup_usage_bytes"].get<uint64_t>();
        if (s.contains("cgroup_limit_bytes")) r.sample.cgroup_limit_bytes = s["cgroup_limit_bytes"].get<uint64_t>();
        if (s.contains("mem_available_bytes")) r.sample.mem_available_bytes = s["mem_available_bytes"].get<uint64_t>();
        if (s.contains("main_thread")) r.sample.main_thread = report::sched_stat_from(s["main_thread"]);
        h.targets.push_back(std::move(r));
      }
      h.dropped = step["dropped"].get<uint64_t>();
      exporter->on_readings(h);
      exporter->export_settled(h.now_ns);
    } else if (step.contains("probe")) {
      std::vector<redis::ProbeSample> samples;
      for (const auto& x : step["samples"]) samples.push_back(report::probe_sample_from(x));
      exporter->on_probe_samples(ids.at(step["probe"].get<std::string>()), samples);
    } else if (step.contains("end")) {
      exporter->export_remaining();
    }
  }
  return metrics.exposition();
}

class GoldenCapture : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(GoldenCapture, ReportIsByteIdentical) {
  const auto r = report::assemble(read_inputs(GetParam() + ".inputs.json"));
  update(GetParam() + ".report.txt", report::to_text(r));
  update(GetParam() + ".report.json", report::to_json(r).dump(2) + "\n");
  EXPECT_EQ(report::to_text(r), read_text(GetParam() + ".report.txt"));
  EXPECT_EQ(report::to_json(r).dump(2) + "\n", read_text(GetParam() + ".report.json"));
}

TEST_P(GoldenCapture, InputsRoundTrip) {
  const auto j = json::parse(read_text(GetParam() + ".inputs.json"));
  update(GetParam() + ".inputs.json", report::inputs_to_json(report::inputs_from_json(j)).dump(1) + "\n");
  EXPECT_EQ(json(report::inputs_to_json(report::inputs_from_json(j))), j);
}

// What `report` writes, a reader (bench) gets back equal: to_json(from_json(j)) == j.
TEST_P(GoldenCapture, ReportJsonRoundTrip) {
  const auto j = json::parse(read_text(GetParam() + ".report.json"));
  EXPECT_EQ(json(report::to_json(report::from_json(j))), j);
}

// A recorded capture's events as today's capture takes them: its disk calls summarised as they come
// (report::DiskWindows, each window settled as the events' clock passes it), no EV_DISK record kept.
report::CaptureInputs summarised(const report::CaptureInputs& recorded, size_t capacity) {
  report::CaptureInputs in = recorded;
  in.events.clear();
  report::DiskWindows disk(static_cast<uint32_t>(in.pid), in, capacity);
  for (const auto& e : recorded.events) {
    if (!disk.on_event(e)) in.events.push_back(e);
    disk.settle(e.ts_ns);
  }
  disk.finish(in.final_episodes);
  return in;
}

// Bounded memory, the same report: summarising the disk calls as they come changes no figure.
TEST_P(GoldenCapture, DiskCallsSummarisedAsTheyComeGiveTheSameReport) {
  const auto recorded = read_inputs(GetParam() + ".inputs.json");
  const auto in = summarised(recorded, report::kDiskLogCalls);
  EXPECT_EQ(in.disk_calls_dropped, 0u);
  EXPECT_EQ(report::to_json(report::assemble(in)).dump(2), report::to_json(report::assemble(recorded)).dump(2));
  // And through the recording's JSON.
  EXPECT_EQ(report::to_json(report::assemble(report::inputs_from_json(json(report::inputs_to_json(in))))).dump(2),
            report::to_json(report::assemble(recorded)).dump(2));
}

// A log too small for a window says nothing of it rather than a count short of the truth.
TEST(GoldenCaptureDisk, AWindowWhoseCallsWereLetGoIsUnknown) {
  const auto recorded = read_inputs("capture_fallback.inputs.json");
  const auto full = report::assemble(recorded);
  const auto r = report::assemble(summarised(recorded, 8));
  ASSERT_EQ(r.forks.size(), full.forks.size());
  size_t unknown = 0;
  for (size_t i = 0; i < r.forks.size(); ++i) {
    ASSERT_TRUE(full.forks[i].fsync_during.has_value());
    const auto& f = r.forks[i].fsync_during;
    if (!f) {
      ++unknown;
      continue;
    }
    // What it does say is the whole truth: no more than 8 calls fell in the window.
    EXPECT_EQ(f->count() + (f->aof_write ? f->aof_write->count : 0),
              full.forks[i].fsync_during->count() +
                  (full.forks[i].fsync_during->aof_write ? full.forks[i].fsync_during->aof_write->count : 0));
  }
  EXPECT_GT(unknown, 0u);
  // Said once, with how many windows.
  EXPECT_GE(r.disk_windows_unknown, unknown);
  const auto findings = report::to_json(r)["findings"];
  EXPECT_EQ(
      std::count_if(findings.begin(), findings.end(), [](const auto& x) { return x["id"] == "disk_windows_unknown"; }),
      1);
}

// A recorded capture's series as a long capture keeps them (report/retention.h), taken as they come
// each 100 ms of its clock: nothing recent kept whole, cells of 500 ms, the margin the capture takes
// (twice the sampler's interval); the probe's whole figures kept as they come.
report::CaptureInputs thinned(const report::CaptureInputs& recorded, report::SeriesLetGo& gone) {
  report::CaptureInputs in = recorded;
  in.samples = {};
  in.timeline.clear();
  in.probe_samples.clear();
  in.counters.clear();
  const auto& samples = recorded.samples.samples();
  std::vector<uint64_t> gaps;
  for (size_t i = 1; i < samples.size(); ++i) gaps.push_back(samples[i].ts_ns - samples[i - 1].ts_ns);
  std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
  const uint64_t interval = gaps[gaps.size() / 2];
  report::Retention retention(static_cast<uint32_t>(in.pid), in.start_ns,
                              {.recent_ns = 0, .margin_ns = 2 * interval, .cell_ns = 500'000'000, .max_cells = 1024});
  redis::LatencyTotals totals(in.client_timeout_us);
  size_t s = 0, t = 0, p = 0, e = 0;
  const auto gather = [&](uint64_t now) {
    for (; s < samples.size() && samples[s].ts_ns < now; ++s) in.samples.add(samples[s]);
    for (; t < recorded.timeline.size() && recorded.timeline[t].ts_ns < now; ++t)
      in.timeline.push_back(recorded.timeline[t]);
    for (; p < recorded.probe_samples.size() && recorded.probe_samples[p].due_ns < now; ++p) {
      totals.add(recorded.probe_samples[p]);
      in.probe_samples.push_back(recorded.probe_samples[p]);
    }
    for (; e < recorded.events.size() && recorded.events[e].ts_ns < now; ++e) retention.on_event(recorded.events[e]);
  };
  for (uint64_t now = in.start_ns + 100'000'000; now < in.end_ns; now += 100'000'000) {
    gather(now);
    const auto g = report::thin_series(retention, in, now);
    gone.samples += g.samples;
    gone.snapshots += g.snapshots;
    gone.probe_samples += g.probe_samples;
  }
  gather(UINT64_MAX);
  if (gone.probe_samples) in.probe_whole = totals.figures();
  return in;
}

// Bounded memory, the same forks: thinning the series outside the forks' windows changes no fork's
// figure and none of the capture's extremes; the probe's figures over the whole capture stay within
// their stated 1.1%. With nothing recent kept whole, a fork's window before was thinned before the
// fork came: its figures are unknown (null), never read from what was left.
TEST_P(GoldenCapture, SeriesThinnedAsTheyComeGiveTheSameForks) {
  const auto recorded = read_inputs(GetParam() + ".inputs.json");
  report::SeriesLetGo gone;
  const auto in = thinned(recorded, gone);
  EXPECT_GT(gone.samples, 0u);
  EXPECT_GT(gone.snapshots, 0u);
  EXPECT_GT(gone.probe_samples, 50u);
  EXPECT_FALSE(in.series_let_go.empty());
  auto full = report::to_json(report::assemble(recorded));
  // And through the recording's JSON.
  auto kept = report::to_json(report::assemble(report::inputs_from_json(json(report::inputs_to_json(in)))));
  const json whole_full = full["client_latency"]["whole_capture"], whole_kept = kept["client_latency"]["whole_capture"];
  EXPECT_EQ(whole_kept["samples"], whole_full["samples"]);
  EXPECT_EQ(whole_kept["over_timeout"], whole_full["over_timeout"]);
  EXPECT_EQ(whole_kept["max_us"], whole_full["max_us"]);
  for (const char* p : {"p50_us", "p99_us", "p999_us"}) {
    EXPECT_GE(whole_kept[p].get<double>(), whole_full[p].get<double>() * (1 - 1e-9)) << p;
    EXPECT_LE(whole_kept[p].get<double>(), whole_full[p].get<double>() * 1.011) << p;
  }
  ASSERT_EQ(kept["forks"].size(), full["forks"].size());
  size_t unknown = 0;
  for (size_t i = 0; i < full["forks"].size(); ++i) {
    for (auto* r : {&full, &kept}) {
      auto& f = (*r)["forks"][i];
      const auto before =
          decltype(full){{"client", f["client_latency_before"]}, {"main_thread", f["main_thread"]["before"]}};
      f.erase("client_latency_before");
      f["main_thread"].erase("before");
      f["before"] = before;
    }
    const auto& b = kept["forks"][i]["before"];
    for (const char* k : {"client", "main_thread"}) {
      if (b[k].is_null())
        ++unknown;
      else
        EXPECT_EQ(b[k], full["forks"][i]["before"][k]) << "fork " << i << " " << k;
      full["forks"][i]["before"].erase(k);
      kept["forks"][i]["before"].erase(k);
    }
  }
  EXPECT_GT(unknown, 0u);
  // The findings follow from the figures (a window before unknown says so in its sentence).
  full.erase("findings");
  kept.erase("findings");
  full["client_latency"].erase("whole_capture");
  kept["client_latency"].erase("whole_capture");
  EXPECT_EQ(kept.dump(2), full.dump(2)) << json::diff(full, kept).dump(1);
}

// A window before a fork that reaches back past what a long capture keeps whole (a child that lived
// longer than its recent minutes) says nothing of the main thread and the clients there rather than
// reading them from what is left.
TEST(GoldenCaptureSeries, AWindowBeforeWithItemsLetGoIsUnknown) {
  auto in = read_inputs("capture_uprobe.inputs.json");
  const auto full = report::assemble(in);
  ASSERT_EQ(full.forks.size(), 3u);
  const auto before = full.forks[1].window(in.end_ns).before();
  ASSERT_TRUE(before);
  ASSERT_TRUE(full.forks[1].main_thread_before && full.forks[1].client_latency_before);
  in.series_let_go = {{before->from_ns + 1000, before->from_ns + 2000}};
  const auto r = report::assemble(in);
  EXPECT_FALSE(r.forks[1].main_thread_before);
  EXPECT_FALSE(r.forks[1].client_latency_before);
  EXPECT_TRUE(r.forks[1].main_thread_during && r.forks[1].client_latency_during);
  EXPECT_TRUE(r.forks[0].main_thread_before && r.forks[2].client_latency_before);
}

// The host's folio counters around each fork (taken as its records arrive): each fork gets the
// change from the reading after its fork to the reading after its child's exit, the counters that
// changed alone, a gauge's fall negative; through the report's JSON and back; said in its row.
TEST(GoldenCaptureFolios, EachForkHasTheChangeOverItsWindow) {
  auto in = read_inputs("capture_uprobe.inputs.json");
  const auto full = report::assemble(in);
  ASSERT_EQ(full.forks.size(), 3u);
  uint64_t nr_anon = 5000, allocs = 100;
  const auto reading = [&](uint64_t ts) {
    in.folio_readings.push_back(
        {ts, {{64, {{"nr_anon", nr_anon}, {"anon_fault_alloc", allocs}, {"split", 7}}}, {2048, {{"nr_anon", 3}}}}});
  };
  reading(in.start_ns);
  for (size_t i = 0; i < full.forks.size(); ++i) {
    const auto& f = full.forks[i];
    reading(f.fork_ts_ns + 2'000'000);
    // While child i lives the parent writes into 100·(i+1) folios and 10 new ones are made; the
    // folios written into go with the child.
    allocs += 10;
    nr_anon = nr_anon + 10 - 100 * (i + 1);
    reading(f.exit_ts_ns + 2'000'000);
  }
  reading(in.end_ns);
  const auto r = report::assemble(in);
  for (size_t i = 0; i < r.forks.size(); ++i) {
    ASSERT_TRUE(r.forks[i].folios) << i;
    const auto& changed = *r.forks[i].folios;
    ASSERT_EQ(changed.size(), 1u) << "2 MiB and split did not change";
    EXPECT_EQ(changed.at(64).at("nr_anon"), 10 - 100 * static_cast<int64_t>(i + 1));
    EXPECT_EQ(changed.at(64).at("anon_fault_alloc"), 10);
    EXPECT_EQ(changed.at(64).size(), 2u);
  }
  const auto j = report::to_json(r);
  EXPECT_EQ(j["forks"][2]["folios"]["64"]["nr_anon"], -290) << j["forks"][2].dump();
  EXPECT_EQ(report::to_json(report::from_json(json::parse(j.dump()))).dump(), j.dump());
  EXPECT_NE(report::to_text(r).find("folios (host): 64 KiB anon_fault_alloc +10, nr_anon -90 (-5.6 MiB)"),
            std::string::npos)
      << report::to_text(r);
  // Without readings, no such key.
  EXPECT_FALSE(report::to_json(full)["forks"][0].contains("folios"));
  // And the recording carries them.
  EXPECT_EQ(report::inputs_from_json(json::parse(report::inputs_to_json(in).dump())).folio_readings.size(),
            in.folio_readings.size());
}

// The target's memory by folio size, added to a recorded capture: in the report's target section and
// its text, and carried by the recording; a walk that was not made carries its reason.
TEST(GoldenCaptureFolios, TheTargetsWalksAreInTheReportAndTheRecording) {
  auto in = read_inputs("capture_uprobe.inputs.json");
  in.folios_start =
      proc::FolioShares{.kb = {{4, 120000}, {2048, 8192}}, .pages = 32048, .every = 1, .walk_ns = 21'000'000};
  in.folios_end = proc::FolioShares{.kb = {{4, 190000}}, .pages = 47500, .every = 1, .walk_ns = 33'000'000};
  const auto back = report::inputs_from_json(json::parse(report::inputs_to_json(in).dump()));
  ASSERT_TRUE(back.folios_start && back.folios_end);
  EXPECT_EQ(back.folios_start->kb, in.folios_start->kb);
  EXPECT_EQ(back.folios_start->walk_ns, in.folios_start->walk_ns);
  EXPECT_EQ(back.folios_end->pages, in.folios_end->pages);
  const auto r = report::assemble(back);
  const auto j = report::to_json(r);
  EXPECT_EQ(j["target"]["anon_folios"]["start"]["kb"]["2048"], 8192);
  EXPECT_EQ(j["target"]["anon_folios"]["end"]["walk_us"], 33000);
  EXPECT_NE(
      report::to_text(r).find("anonymous memory by folio size, start: 2 MiB: 8.0 MiB (6%), 4 KiB: 117.2 MiB (94%)"),
      std::string::npos)
      << report::to_text(r);
  in.folios_start.reset();
  in.folios_end.reset();
  in.folio_walk_why = "cannot open /proc/kpageflags: Permission denied";
  EXPECT_EQ(report::inputs_from_json(json::parse(report::inputs_to_json(in).dump())).folio_walk_why, in.folio_walk_why);
}

INSTANTIATE_TEST_SUITE_P(Recorded, GoldenCapture, ::testing::Values("capture_uprobe", "capture_fallback"));

// The sum of a histogram's _count series whose labels include every pair of `labels`.
uint64_t histogram_count(const std::string& exposition, const std::string& name,
                         const std::vector<std::string>& labels) {
  uint64_t sum = 0;
  std::istringstream in(exposition);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "_count{", 0) != 0) continue;
    const auto close = line.rfind("} ");
    if (std::all_of(labels.begin(), labels.end(), [&](const std::string& l) { return line.find(l) < close; }))
      sum += std::stoull(line.substr(close + 2));
  }
  return sum;
}

// One fork window (correlate/window.h) for the capture and the daemon: a capture's recorded events and
// probe samples, replayed through the report and through the daemon's exporter, put the same calls
// and requests inside its forks' windows.
TEST(GoldenBoth, OneForkWindowInTheReportAndTheMetrics) {
  const auto in = read_inputs("capture_fallback.inputs.json");
  const auto r = report::assemble(in);
  uint64_t main_fsyncs = 0, bio_fsyncs = 0, aof_writes = 0, requests = 0;
  for (const auto& f : r.forks) {
    if (f.fsync_during && f.fsync_during->main) main_fsyncs += f.fsync_during->main->count;
    if (f.fsync_during && f.fsync_during->bio_aof) bio_fsyncs += f.fsync_during->bio_aof->count;
    if (f.fsync_during && f.fsync_during->aof_write) aof_writes += f.fsync_during->aof_write->count;
    if (f.client_latency_during) requests += f.client_latency_during->samples;
  }
  // Each figure the recording has; a recording without them checks nothing.
  ASSERT_GT(main_fsyncs, 0u);
  ASSERT_GT(bio_fsyncs + aof_writes, 0u);
  ASSERT_GT(requests, 0u);

  daemon::Metrics metrics;
  daemon::Exporter exporter(metrics, in.probes);
  const auto id = exporter.add_target("t", true);
  exporter.follow(id, in.pid, {});
  for (const auto& e : in.events) exporter.on_event(id, e);
  exporter.on_probe_samples(id, in.probe_samples);
  const std::string scrape = metrics.exposition();
  EXPECT_EQ(histogram_count(scrape, "thptrace_fsync_seconds", {"thread=\"main\"", "phase=\"fork\""}), main_fsyncs);
  EXPECT_EQ(histogram_count(scrape, "thptrace_fsync_seconds", {"thread=\"bio_aof\"", "phase=\"fork\""}), bio_fsyncs);
  EXPECT_EQ(histogram_count(scrape, "thptrace_aof_write_seconds", {"phase=\"fork\""}), aof_writes);
  EXPECT_EQ(histogram_count(scrape, "thptrace_redis_client_latency_seconds", {"phase=\"fork\""}), requests);
}

TEST(GoldenDaemon, MetricsAreByteIdentical) {
  // Not rewritten: the recorded scrape keeps the upkeep families the replay cannot make.
  EXPECT_EQ(without_upkeep_families(replay_daemon("daemon.inputs.jsonl")),
            without_upkeep_families(read_text("daemon.metrics.txt")));
}
