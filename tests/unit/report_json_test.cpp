// SPDX-License-Identifier: Apache-2.0
// The JSON report keeps the shape docs/reference/report.schema.json describes.
#include <gtest/gtest.h>

#include <algorithm>

#include "report/report.h"

using namespace thptrace;

namespace {

report::Report sample_report() {
  report::Report r;
  r.version = "0.1.0";
  r.system = {"6.18.0", "always", "madvise", {}};
  r.pid = 42;
  r.comm = "redis-server";
  r.thp_enabled_for_process = false;
  r.duration_s = 3.5;
  correlate::ForkEpisode e;
  e.child_pid = 43;
  e.reason = correlate::Reason::full_sync_disk;
  e.fork_duration_us = 812.5;
  e.child_lifetime_ms = 1500;
  e.cow_faults = 1000;
  e.thp_splits = 3;
  e.thp_splits_source = "kernel";
  r.forks.push_back(e);
  r.totals.cow_faults = 1200;
  report::RedisSection rs;
  rs.address = "127.0.0.1:6379";
  rs.reachable = true;
  rs.version = "7.0.15";
  rs.disable_thp = "yes";
  rs.process_id = 42;
  r.redis = rs;
  return r;
}

}  // namespace

TEST(ReportJson, HasEveryContractKeyWithItsType) {
  const auto j = report::to_json(sample_report());
  EXPECT_TRUE(j["thptrace_version"].is_string());
  for (const char* k : {"kernel_release", "thp_enabled", "thp_defrag"}) EXPECT_TRUE(j["system"][k].is_string()) << k;
  EXPECT_TRUE(j["target"]["pid"].is_number_integer());
  EXPECT_TRUE(j["target"]["comm"].is_string());
  EXPECT_TRUE(j["target"]["thp_enabled_for_process"].is_boolean());
  for (const char* k : {"start", "max", "end"}) EXPECT_TRUE(j["target"]["anon_huge_pages_kb"][k].is_number_integer()) << k;
  for (const char* k : {"fork", "cow_fault", "thp", "stall", "redis"}) EXPECT_TRUE(j["probes"][k].is_string()) << k;
  EXPECT_TRUE(j["capture"]["duration_s"].is_number());
  ASSERT_TRUE(j["forks"].is_array());
  const auto& f = j["forks"][0];
  EXPECT_TRUE(f["child_pid"].is_number_integer());
  EXPECT_EQ(f["reason"], "full_sync_disk");
  EXPECT_TRUE(f["fork_duration_us"].is_number());
  EXPECT_TRUE(f["child_lifetime_ms"].is_number());
  for (const char* k : {"cow_faults", "child_cow_faults", "thp_splits"}) EXPECT_TRUE(f[k].is_number_integer()) << k;
  for (const char* k : {"forks", "cow_faults", "thp_collapses", "compaction_stalls", "reclaim_stalls", "dropped_events"})
    EXPECT_TRUE(j["totals"][k].is_number_integer()) << k;
  for (const char* k : {"address", "version", "disable_thp"}) EXPECT_TRUE(j["redis"][k].is_string()) << k;
  for (const char* k : {"latest_fork_usec", "total_forks_delta"}) EXPECT_TRUE(j["redis"][k].is_number_integer()) << k;
  ASSERT_TRUE(j["findings"].is_array());
  ASSERT_FALSE(j["findings"].empty());
}

TEST(ReportJson, ChildAliveGivesNullLifetime) {
  auto r = sample_report();
  r.forks[0].child_lifetime_ms.reset();
  EXPECT_TRUE(report::to_json(r)["forks"][0]["child_lifetime_ms"].is_null());
}

TEST(Findings, ThpOptOutNamesDisableThpAndDiskSyncsAreAFactNotAdvice) {
  const auto f = report::findings(sample_report());
  const auto opt_out = std::find_if(f.begin(), f.end(), [](const auto& x) { return x.id == "thp_opted_out"; });
  ASSERT_NE(opt_out, f.end());
  EXPECT_NE(opt_out->text.find("disable-thp"), std::string::npos) << opt_out->text;
  EXPECT_EQ(opt_out->severity, report::Severity::info);
  const auto disk = std::find_if(f.begin(), f.end(), [](const auto& x) { return x.id == "full_sync_over_disk"; });
  ASSERT_NE(disk, f.end());
  // The capture measured no diskless sync: it advises none.
  EXPECT_EQ(disk->text.find("repl-diskless-sync"), std::string::npos) << disk->text;
  bool split = false;
  for (const auto& x : f) split = split || x.text.find("split 3 huge PMDs") != std::string::npos;
  EXPECT_TRUE(split);
}

// Findings come ranked by what they explain: critical ones first, then by the client-visible ms
// they account for (the fork's freeze, which every client waited), each with its evidence; the
// copies' stall is the server's time, in the evidence.
TEST(Findings, RankedByImpactWithIdsAndEvidence) {
  auto r = sample_report();
  ASSERT_FALSE(r.forks.empty());
  auto& e = r.forks[0];
  e.fork_duration_us = 94'000;         // 94 ms
  e.rss_kb_at_fork = 3 * 1024 * 1024;  // 3 GiB
  e.copy_stall_ms = 12.0;
  e.copy_stall_source = "kernel";
  const auto f = report::findings(r);
  ASSERT_GE(f.size(), 2u);
  EXPECT_EQ(f[0].id, "fork_freeze");
  EXPECT_EQ(f[0].severity, report::Severity::warning);
  ASSERT_TRUE(f[0].impact_ms);
  EXPECT_DOUBLE_EQ(*f[0].impact_ms, 94.0);
  EXPECT_NE(f[0].text.find("froze the server for 94.0 ms, 31.3 ms per GiB of its 3.00 GiB RSS at the fork"),
            std::string::npos)
      << f[0].text;
  EXPECT_DOUBLE_EQ(f[0].evidence["ms_per_gib"].get<double>(), 94.0 / 3);
  const auto copies = std::find_if(f.begin(), f.end(), [](const auto& x) { return x.id == "copies"; });
  ASSERT_NE(copies, f.end());
  EXPECT_GT(copies - f.begin(), 0);
  EXPECT_FALSE(copies->impact_ms);
  EXPECT_DOUBLE_EQ(copies->evidence["stall_ms"].get<double>(), 12.0);
  for (size_t i = 1; i < f.size(); ++i) {
    if (f[i - 1].severity != report::Severity::critical && f[i].severity != report::Severity::critical) {
      EXPECT_GE(f[i - 1].impact_ms.value_or(0), f[i].impact_ms.value_or(0)) << f[i - 1].id << " before " << f[i].id;
    }
  }
  // In the JSON each is an object.
  const auto j = report::to_json(r)["findings"][0];
  EXPECT_EQ(j["id"], "fork_freeze");
  EXPECT_EQ(j["severity"], "warning");
  EXPECT_DOUBLE_EQ(j["impact_ms"].get<double>(), 94.0);
  EXPECT_TRUE(j["evidence"].is_object());
}

TEST(Findings, NoRedisIsSaid) {
  auto r = sample_report();
  r.redis.reset();
  bool said = false;
  for (const auto& s : report::finding_texts(r)) said = said || s.find("No --redis") != std::string::npos;
  EXPECT_TRUE(said);
}

// Redis answered, stopped for a while, answered again, then stopped to the end: both times are in
// the JSON (the second with a null end), read back as written, and one finding says it.
TEST(ReportJson, TimesRedisDidNotAnswerRoundTripAndAreAFinding) {
  auto r = sample_report();
  r.start_monotonic_ns = 1'000'000'000;
  r.redis->unanswered = {{1'500'000'000, 2'750'000'000, "timeout"}, {3'000'000'000, 0, "connection refused"}};
  const auto j = report::to_json(r);
  const auto& u = j["redis"]["unanswered"];
  ASSERT_EQ(u.size(), 2u);
  EXPECT_DOUBLE_EQ(u[0]["from_ms"].get<double>(), 500.0);
  EXPECT_DOUBLE_EQ(u[0]["to_ms"].get<double>(), 1750.0);
  EXPECT_TRUE(u[1]["to_ms"].is_null());
  const auto back = report::from_json(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back.redis);
  ASSERT_EQ(back.redis->unanswered.size(), 2u);
  EXPECT_EQ(back.redis->unanswered[0].to_ns, 2'750'000'000u);
  EXPECT_EQ(back.redis->unanswered[1].to_ns, 0u);
  EXPECT_EQ(report::to_json(back).dump(), j.dump());
  const auto f = report::finding_texts(r);
  const auto it = std::find_if(f.begin(), f.end(),
                               [](const std::string& s) { return s.find("stopped answering") != std::string::npos; });
  ASSERT_NE(it, f.end());
  EXPECT_NE(it->find("2 times"), std::string::npos) << *it;
  EXPECT_NE(it->find("from +2.0 s to the end (connection refused)"), std::string::npos) << *it;
  // Without times it did not answer, the key is absent (the reports before it stay valid).
  EXPECT_FALSE(report::to_json(sample_report())["redis"].contains("unanswered"));
}

// The probe's figures: exact nearest ranks over the requests answered in a window, a request counted
// over the clients' timeout when slower or unanswered.
TEST(ClientLatency, NearestRanksOfTheRequestsAnsweredInTheWindow) {
  std::vector<redis::ProbeSample> s;
  for (uint64_t i = 0; i < 1000; ++i) s.push_back({i * 1'000'000, (i + 1) * 1000, false});  // 1 µs .. 1000 µs
  s.push_back({2'000'000'000, 50'000'000, true});                                           // answered at 2.05 s
  const auto all = redis::client_latency(s, 0, UINT64_MAX, 300);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->samples, 1001u);
  EXPECT_DOUBLE_EQ(all->p50_us, 501);
  EXPECT_DOUBLE_EQ(all->p999_us, 1000);
  EXPECT_DOUBLE_EQ(all->max_us, 50'000);
  EXPECT_EQ(all->over_timeout, 701u);  // 301 µs .. 1000 µs, and the failure
  // By the time the reply came: the failure's request was due at 2 s and answered at 2.05 s.
  const auto late = redis::client_latency(s, 2'010'000'000, 3'000'000'000, 300);
  ASSERT_TRUE(late);
  EXPECT_EQ(late->samples, 1u);
  EXPECT_FALSE(redis::client_latency(s, 1'100'000'000, 1'900'000'000, 300));
}

// With the probe, each fork carries the two windows and the report the capture's own; the JSON reads
// back to the same document. Without it no key is written (recorded reports stay byte-identical).
TEST(ReportJson, ClientLatencyRoundTripsAndIsAbsentWithoutTheProbe) {
  auto r = sample_report();
  r.client_probe = report::ClientProbeSection{100, 300, 2, redis::ClientLatency{500, 80, 250, 9000, 33000, 7}};
  r.forks[0].client_latency_during = redis::ClientLatency{150, 90, 31000, 33000, 33000, 5};
  const auto j = report::to_json(r);
  EXPECT_EQ(j["client_latency"]["whole_capture"]["max_us"], 33000.0);
  EXPECT_EQ(j["forks"][0]["client_latency_during"]["over_timeout"], 5);
  EXPECT_TRUE(j["forks"][0]["client_latency_before"].is_null());
  const auto back = report::from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(report::to_json(back).dump(), j.dump());
  EXPECT_NE(report::to_text(r).find("clients felt: max 33.00 ms"), std::string::npos) << report::to_text(r);
  const auto without = report::to_json(sample_report());
  EXPECT_FALSE(without.contains("client_latency"));
  EXPECT_FALSE(without["forks"][0].contains("client_latency_during"));
}

// The probe's window during a fork against the window before: a slower window during it is what
// the clients felt (warning past the timeout, impact its slowest request); a window before it that
// was as slow says the fork was not what they felt (info, no impact), with both windows' numbers.
TEST(Findings, ClientsFeltTheForkOnlyWhenItsWindowWasSlowerThanBefore) {
  const auto find = [](const std::vector<report::Finding>& f, const std::string& id) {
    const auto it = std::find_if(f.begin(), f.end(), [&](const auto& x) { return x.id == id; });
    return it == f.end() ? nullptr : &*it;
  };
  auto r = sample_report();
  r.client_probe = report::ClientProbeSection{100, 300, 0, redis::ClientLatency{500, 80, 250, 9000, 33000, 7}};
  r.forks[0].client_latency_during = redis::ClientLatency{115, 140, 900, 3960, 3960, 12};
  r.forks[0].client_latency_before = redis::ClientLatency{116, 177, 2000, 5300, 5300, 12};
  auto f = report::findings(r);
  EXPECT_FALSE(find(f, "clients_felt_fork"));
  const auto* calm = find(f, "fork_not_felt");
  ASSERT_TRUE(calm);
  EXPECT_EQ(calm->severity, report::Severity::info);
  EXPECT_FALSE(calm->impact_ms);
  EXPECT_NE(calm->text.find("p99.9 3.96 ms against 5.30 ms"), std::string::npos) << calm->text;
  EXPECT_EQ(calm->evidence["over_timeout_before"], 12);

  r.forks[0].client_latency_before = redis::ClientLatency{116, 177, 400, 900, 1200, 3};
  f = report::findings(r);
  EXPECT_FALSE(find(f, "fork_not_felt"));
  const auto* felt = find(f, "clients_felt_fork");
  ASSERT_TRUE(felt);
  EXPECT_EQ(felt->severity, report::Severity::warning);
  ASSERT_TRUE(felt->impact_ms);
  EXPECT_DOUBLE_EQ(*felt->impact_ms, 3.96);
}

// For an archive: the report's shape version always; the host, the wall-clock span and the server's
// run id and role when the capture knew them, read back to the same document; none of them made up
// for a recording that lacks them.
TEST(ReportJson, ArchiveFactsRoundTripAndAreAbsentWhenUnknown) {
  auto r = sample_report();
  r.hostname = "db-7";
  r.boot_id = "3f8e0c5a-9d2b-4c61-8a43-0e1f2a3b4c5d";
  r.start_realtime_ns = 1'796'212'800'123'456'789;  // 2026-12-02T12:00:00.123Z
  r.end_realtime_ns = 1'796'212'860'500'000'000;
  r.redis->run_id = "a1b2c3";
  r.redis->role = "master";
  const auto j = report::to_json(r);
  EXPECT_EQ(j.begin().key(), "report_version");
  EXPECT_EQ(j["report_version"], report::kReportVersion);
  EXPECT_EQ(j["host"]["name"], "db-7");
  EXPECT_EQ(j["capture"]["start_utc"], "2026-12-02T12:00:00.123Z");
  EXPECT_EQ(j["capture"]["end_utc"], "2026-12-02T12:01:00.500Z");
  EXPECT_EQ(j["redis"]["run_id"], "a1b2c3");
  EXPECT_EQ(j["redis"]["role"], "master");
  const auto back = report::from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(report::to_json(back).dump(), j.dump());
  EXPECT_NE(report::to_text(r).find("host db-7, from 2026-12-02T12:00:00.123Z to 2026-12-02T12:01:00.500Z"),
            std::string::npos);
  const auto bare = report::to_json(sample_report());
  EXPECT_FALSE(bare.contains("host"));
  EXPECT_FALSE(bare["capture"].contains("start_utc"));
  EXPECT_FALSE(bare["redis"].contains("run_id"));
}

// Multi-size THP: each folio size's mode in the system section, read back as written; with smaller
// sizes enabled and no PMD-sized page, the finding says AnonHugePages does not count them instead of
// saying the process has no huge pages (or that THP `never` leaves it 4 KiB pages only).
TEST(Findings, SmallFoliosAreNotNoHugePages) {
  for (const std::string top : {"never", "madvise"}) {
    auto r = sample_report();
    r.thp_enabled_for_process.reset();
    r.system.thp_enabled = top;
    r.system.folio_modes = {{16, "never"}, {64, "always"}, {128, "inherit"}, {2048, "inherit"}};
    const auto j = report::to_json(r);
    EXPECT_EQ(j["system"]["folio_modes"]["64"], "always");
    EXPECT_EQ(report::to_json(report::from_json(j)), j);
    std::vector<std::string> ids;
    for (const auto& f : j["findings"]) ids.push_back(f["id"]);
    EXPECT_NE(std::find(ids.begin(), ids.end(), "thp_small_folios"), ids.end()) << top;
    EXPECT_EQ(std::find(ids.begin(), ids.end(), "thp_never"), ids.end()) << top;
    EXPECT_EQ(std::find(ids.begin(), ids.end(), "thp_madvise_unused"), ids.end()) << top;
    // 128 KiB inherits: enabled under madvise, not under never. 2048 is the PMD's: not a small folio.
    EXPECT_EQ(r.system.small_folios_enabled(),
              top == "never" ? "64 KiB (always)" : "64 KiB (always), 128 KiB (inherit: madvise)");
  }
  // Every small size off: as before.
  auto r = sample_report();
  r.thp_enabled_for_process.reset();
  r.system.thp_enabled = "never";
  r.system.folio_modes = {{64, "never"}, {2048, "inherit"}};
  const auto j = report::to_json(r);
  bool never = false;
  for (const auto& f : j["findings"]) never = never || f["id"] == "thp_never";
  EXPECT_TRUE(never) << j["findings"].dump();
  EXPECT_EQ(r.system.folio_mode(2048), "never");
}

// The target's memory by folio size (a pagemap walk): written and read back as is, shown in the text
// at the start and the end, and the THP finding says what held the heap, in sizes, from the walk
// rather than from AnonHugePages (which counts PMD-mapped pages only).
TEST(Findings, FolioWalkSaysWhatBacksTheHeap) {
  auto r = sample_report();
  r.thp_enabled_for_process.reset();
  r.system.thp_enabled = "madvise";
  r.system.folio_modes = {{64, "always"}, {2048, "inherit"}};
  r.anon_huge_pages_kb_max = 0;
  r.anon_folios_start = proc::FolioShares{.kb = {{4, 16384}, {64, 49152}}, .pages = 16400, .every = 1, .walk_ns = 7000};
  r.anon_folios_end = proc::FolioShares{.kb = {{4, 65536}}, .pages = 16400, .every = 1, .walk_ns = 6000};
  const auto j = report::to_json(r);
  EXPECT_EQ(j["target"]["anon_folios"]["start"]["kb"]["64"], 49152);
  EXPECT_EQ(j["target"]["anon_folios"]["start"]["walk_us"], 7);
  EXPECT_EQ(report::to_json(report::from_json(j)), j);
  const nlohmann::ordered_json* backed = nullptr;
  for (const auto& f : j["findings"]) {
    EXPECT_NE(f["id"], "thp_small_folios") << f.dump();
    EXPECT_NE(f["id"], "thp_madvise_unused") << f.dump();
    if (f["id"] == "thp_backed") backed = &f;
  }
  ASSERT_NE(backed, nullptr) << j["findings"].dump(1);
  EXPECT_EQ((*backed)["evidence"]["large_folio_kb"], 49152);
  EXPECT_EQ((*backed)["evidence"]["walk"], "start");
  const std::string text = (*backed)["text"];
  EXPECT_NE(text.find("held 48.0 MiB of this process's 64.0 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("64 KiB: 48.0 MiB (75%), 4 KiB: 16.0 MiB (25%)"), std::string::npos) << text;
  EXPECT_EQ(text.find("PMD-sized pages make"), std::string::npos) << text;
  const std::string out = report::to_text(r);
  EXPECT_NE(out.find("anonymous memory by folio size, start: 64 KiB: 48.0 MiB (75%), 4 KiB: 16.0 MiB (25%)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("anonymous memory by folio size, end: 4 KiB: 64.0 MiB (100%)"), std::string::npos) << out;

  // A walk with no large folio leaves the finding to the modes, and says so.
  r.anon_folios_start = r.anon_folios_end;
  bool none = false;
  const auto quiet = report::to_json(r);
  for (const auto& f : quiet["findings"])
    none =
        none || (f["id"] == "thp_small_folios" &&
                 f["text"].get<std::string>().find("None of its memory was in one at the start") != std::string::npos);
  EXPECT_TRUE(none) << quiet["findings"].dump(1);

  // Not walked: why, in the text; nulls in the JSON.
  r.anon_folios_start.reset();
  r.anon_folios_end.reset();
  r.anon_folios_why = "cannot open /proc/kpageflags: Permission denied";
  EXPECT_NE(report::to_text(r).find("anonymous memory by folio size: not read (cannot open /proc/kpageflags"),
            std::string::npos);
  const auto k = report::to_json(r);
  EXPECT_TRUE(k["target"]["anon_folios"]["start"].is_null());
  EXPECT_EQ(report::to_json(report::from_json(k)), k);
}
