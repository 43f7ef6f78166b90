// SPDX-License-Identifier: Apache-2.0
// The disk family in a report, from recorded-style inputs: fsync calls by thread kind in a fork's
// window and in the window before (exact nearest-rank figures), INFO's aof_delayed_fsync over the
// fork, and the finding that says whether the syncs slowed while the child lived, with the settings
// that trade it.
#include <gtest/gtest.h>

#include "correlate/disk.h"
#include "events.h"
#include "report/report.h"

using namespace thptrace;

namespace {

constexpr uint64_t kS = 1'000'000'000;
constexpr uint64_t kUs = 1'000;
using test::sync_ev;

// A fork at 10 s whose child lives 2 s (reason aof_rewrite), 20 main-thread fsyncs of before_us each in
// [8 s, 10 s) and 20 of during_us in [10 s, 12 s); appendfsync always; aof_delayed_fsync 3 → 7.
report::CaptureInputs inputs(uint64_t before_us, uint64_t during_us) {
  report::CaptureInputs in;
  in.pid = test::kParent;
  in.comm = "redis-server";
  in.start_ns = 0;
  in.end_ns = 15 * kS;
  in.probes.disk = {tracer::Mode::tp_btf, "test"};
  in.redis_address = "127.0.0.1:6379";
  in.events.push_back(test::fork_ev(200, 10 * kS, REASON_AOF_REWRITE));
  for (uint64_t i = 0; i < 20; i++) in.events.push_back(sync_ev(8 * kS + i * kS / 10, before_us, THREAD_MAIN));
  for (uint64_t i = 0; i < 20; i++) in.events.push_back(sync_ev(10 * kS + i * kS / 20, during_us, THREAD_MAIN));
  in.events.push_back(test::exit_ev(test::episode(200, 10 * kS, 12 * kS, 1000, REASON_AOF_REWRITE)));
  redis::ServerFacts f;
  f.version = "7.0.15";
  f.appendonly = "yes";
  f.appendfsync = "always";
  f.no_appendfsync_on_rewrite = "no";
  in.facts = f;
  for (const auto& [ts, delayed] : {std::pair{9 * kS, 3}, std::pair{12 * kS + kS / 2, 7}}) {
    redis::Snapshot s;
    s.ts_ns = ts;
    s.up = true;
    s.aof_delayed_fsync = delayed;
    in.timeline.push_back(s);
  }
  return in;
}

const report::Finding* finding(const std::vector<report::Finding>& all, const std::string& id) {
  for (const auto& f : all)
    if (f.id == id) return &f;
  return nullptr;
}

}  // namespace

TEST(FsyncWindow, NearestRankFiguresByThreadKindAndWindow) {
  std::vector<thptrace_event> events;
  for (uint64_t us = 1; us <= 100; us++) events.push_back(sync_ev(us * kS, us, THREAD_BIO_AOF, 101));
  events.push_back(sync_ev(50 * kS, 7, THREAD_OTHER, 102));
  auto other = sync_ev(50 * kS, 7, THREAD_MAIN);
  other.tgid = 999;  // another process's
  events.push_back(other);
  const auto w = correlate::fsync_window(events, test::kParent, {0, 200 * kS});
  ASSERT_TRUE(w.bio_aof.has_value());
  EXPECT_EQ(w.bio_aof->count, 100u);
  EXPECT_DOUBLE_EQ(w.bio_aof->p50_us, 50);
  EXPECT_DOUBLE_EQ(w.bio_aof->p99_us, 99);
  EXPECT_DOUBLE_EQ(w.bio_aof->max_us, 100);
  ASSERT_TRUE(w.other.has_value());
  EXPECT_EQ(w.other->count, 1u);
  EXPECT_FALSE(w.main.has_value());
  EXPECT_EQ(w.count(), 101u);
  // A call counts where it returned: [from, to) by its end.
  const auto edge = correlate::fsync_window(events, test::kParent, {10 * kS + 10 * kUs, 11 * kS + 11 * kUs});
  ASSERT_TRUE(edge.bio_aof.has_value());
  EXPECT_EQ(edge.bio_aof->count, 1u);
  EXPECT_DOUBLE_EQ(edge.bio_aof->max_us, 10);
}

TEST(DiskReport, ForkWindowsAndTheContentionFinding) {
  const auto r = report::assemble(inputs(1000, 8000));
  ASSERT_EQ(r.forks.size(), 1u);
  const auto& f = r.forks[0];
  ASSERT_TRUE(f.fsync_during && f.fsync_during->main);
  ASSERT_TRUE(f.fsync_before && f.fsync_before->main);
  EXPECT_EQ(f.fsync_during->main->count, 20u);
  EXPECT_EQ(f.fsync_before->main->count, 20u);
  EXPECT_DOUBLE_EQ(f.fsync_during->main->p99_us, 8000);
  EXPECT_DOUBLE_EQ(f.fsync_before->main->p99_us, 1000);
  EXPECT_EQ(f.aof_delayed_fsync, 4);
  ASSERT_TRUE(r.redis && r.redis->persistence);
  EXPECT_EQ(r.redis->persistence->appendfsync, "always");
  EXPECT_EQ(r.redis->persistence->aof_delayed_fsync_delta, 4);
  const auto all = report::findings(r);
  const auto* c = finding(all, "fsync_contention");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->severity, report::Severity::warning);
  EXPECT_NE(c->text.find("p99 8.00 ms against 1.00 ms"), std::string::npos) << c->text;
  EXPECT_NE(c->text.find("no-appendfsync-on-rewrite yes"), std::string::npos) << c->text;
  EXPECT_EQ(finding(all, "fsync_steady"), nullptr);
  // The JSON carries it all and reads back the same.
  const auto j = report::to_json(r);
  EXPECT_EQ(j.at("forks").at(0).at("fsync_during").at("main").at("count"), 20);
  EXPECT_TRUE(j.at("forks").at(0).at("fsync_during").at("bio_aof").is_null());
  EXPECT_EQ(j.at("forks").at(0).at("aof_delayed_fsync"), 4);
  EXPECT_EQ(j.at("redis").at("persistence").at("appendfsync"), "always");
  EXPECT_EQ(report::to_json(report::from_json(j)).dump(), j.dump());
}

// A child's sync holds the disk for long stretches: few calls wait, far under 1%, but long. The
// slowest call against the slowest before says it when the p99 cannot.
TEST(DiskReport, FewLongWaitsAreContentionToo) {
  auto in = inputs(1000, 1000);
  in.events.push_back(sync_ev(11 * kS, 200'000, THREAD_MAIN));  // 200 ms behind the child's sync
  for (uint64_t i = 0; i < 200; i++) in.events.push_back(sync_ev(10 * kS + i * kS / 400, 1000, THREAD_MAIN));
  for (uint64_t i = 0; i < 200; i++) in.events.push_back(sync_ev(8 * kS + i * kS / 200, 1000, THREAD_MAIN));
  const auto r = report::assemble(in);
  ASSERT_TRUE(r.forks[0].fsync_during->main);
  EXPECT_DOUBLE_EQ(r.forks[0].fsync_during->main->p99_us, 1000);
  const auto all = report::findings(r);
  const auto* c = finding(all, "fsync_contention");
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->text.find("the slowest 200.0 ms against 1.0 ms"), std::string::npos) << c->text;
}

TEST(DiskReport, SteadyFsyncsSayTheDiskWasNotTheCause) {
  const auto r = report::assemble(inputs(1000, 1100));
  const auto all = report::findings(r);
  EXPECT_EQ(finding(all, "fsync_contention"), nullptr);
  const auto* s = finding(all, "fsync_steady");
  ASSERT_NE(s, nullptr);
  EXPECT_NE(s->text.find("the disk was not"), std::string::npos) << s->text;
}

TEST(DiskReport, NoDiskFamilyNoFsyncKeys) {
  auto in = inputs(1000, 8000);
  in.probes.disk = {tracer::Mode::unavailable, "test"};
  const auto j = report::to_json(report::assemble(in));
  EXPECT_FALSE(j.at("forks").at(0).contains("fsync_during"));
  EXPECT_FALSE(j.at("forks").at(0).contains("aof_delayed_fsync"));
}

// A BGSAVE child writing its RDB next to appendfsync everysec: the bio thread's fsyncs slow, the
// finding says what everysec and no-appendfsync-on-rewrite trade, with the child's write rate and the
// event loop's time in its AOF writes; all of it reads back from the JSON.
TEST(DiskReport, BgsaveNextToEverysecSlowsTheBioThread) {
  auto in = inputs(1000, 1000);
  in.events.clear();
  in.events.push_back(test::fork_ev(200, 10 * kS, REASON_BGSAVE));
  for (uint64_t i = 0; i < 20; i++) {
    in.events.push_back(sync_ev(8 * kS + i * kS / 10, 900, THREAD_BIO_AOF, 101));
    in.events.push_back(sync_ev(10 * kS + i * kS / 20, 30'000, THREAD_BIO_AOF, 101));
  }
  for (uint64_t i = 0; i < 50; i++) {
    auto w = sync_ev(10 * kS + i * kS / 50, 40, THREAD_MAIN);
    w.value = DISK_WRITE;
    in.events.push_back(w);
  }
  auto ep = test::episode(200, 10 * kS, 12 * kS, 1000, REASON_BGSAVE);
  ep.child_wchar = 64ull << 20;  // 64 MiB over 2 s
  ep.child_write_bytes = 64ull << 20;
  in.events.push_back(test::exit_ev(ep));
  in.facts->appendfsync = "everysec";
  const auto r = report::assemble(in);
  ASSERT_EQ(r.forks.size(), 1u);
  const auto& f = r.forks[0];
  ASSERT_TRUE(f.fsync_during && f.fsync_during->aof_write);
  EXPECT_EQ(f.fsync_during->aof_write->count, 50u);
  EXPECT_DOUBLE_EQ(f.fsync_during->aof_write->blocked_ms, 2.0);
  EXPECT_EQ(f.fsync_during->count(), 20u);  // the syncs alone
  ASSERT_TRUE(f.child_io);
  EXPECT_EQ(f.child_io->written_bytes, 64ull << 20);
  const auto all = report::findings(r);
  const auto* c = finding(all, "fsync_contention");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->severity, report::Severity::info);  // the bio thread's: clients wait only past 2 s
  EXPECT_NE(c->text.find("appendfsync everysec"), std::string::npos) << c->text;
  EXPECT_NE(c->text.find("the child wrote 64.0 MiB at 32.0 MiB/s"), std::string::npos) << c->text;
  EXPECT_NE(c->text.find("2.0 ms in its AOF writes"), std::string::npos) << c->text;
  const auto j = report::to_json(r);
  const auto& fork = j.at("forks").at(0);
  EXPECT_EQ(fork.at("child_io").at("written_bytes"), 64ull << 20);
  EXPECT_DOUBLE_EQ(fork.at("child_io").at("write_mib_per_s").get<double>(), 32.0);
  EXPECT_EQ(fork.at("fsync_during").at("aof_write").at("count"), 50);
  EXPECT_TRUE(fork.at("fsync_before").at("aof_write").is_null());
  EXPECT_EQ(report::to_json(report::from_json(j)).dump(), j.dump());
}
