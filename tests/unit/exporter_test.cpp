// SPDX-License-Identifier: Apache-2.0
// The daemon's Exporter takes every input one way: a fork reaped from the kernel map with its exit
// record lost closes as the record would have, and forks whose child is gone are forgotten from the
// liveness the daemon reads, not from questions asked back.
#include <gtest/gtest.h>

#include "correlate/correlator.h"
#include "correlate/disk.h"
#include "daemon/exporter.h"
#include "daemon/metrics.h"
#include "events.h"

using namespace thptrace;

namespace {

constexpr uint64_t kS = 1'000'000'000;

struct Fixture {
  daemon::Metrics metrics;
  daemon::Exporter exporter{metrics, tracer::AttachModes{}};
  daemon::Exporter::TargetId id = exporter.add_target("127.0.0.1:6379", false);
  Fixture() { exporter.follow(id, static_cast<pid_t>(test::kParent)); }
};

}  // namespace

TEST(Exporter, ALostExitRecordClosesTheForkAsTheRecordWould) {
  Fixture f;
  f.exporter.on_event(f.id, test::fork_ev(200, 1 * kS));
  EXPECT_EQ(f.exporter.open_children(f.id), std::vector<uint32_t>{200});
  f.exporter.on_lost_exit(f.id, test::episode(200, 1 * kS, 2 * kS, 512));
  EXPECT_TRUE(f.exporter.open_children(f.id).empty());
  f.exporter.export_settled(10 * kS);
  EXPECT_NE(f.metrics.exposition().find("thptrace_forks_total{"), std::string::npos);
}

TEST(Exporter, ForksWhoseChildIsGoneAreForgottenAndTheLiveOnesKept) {
  Fixture f;
  f.exporter.on_event(f.id, test::fork_ev(200, 1 * kS));
  f.exporter.on_event(f.id, test::fork_ev(201, 2 * kS));
  f.exporter.forget_gone([](uint32_t child) { return child == 201; });
  EXPECT_EQ(f.exporter.open_children(f.id), std::vector<uint32_t>{201});
  f.exporter.forget_gone([](uint32_t) { return true; });
  EXPECT_EQ(f.exporter.open_children(f.id), std::vector<uint32_t>{201});
}

namespace {

daemon::Exporter::Readings counters_at(daemon::Exporter::TargetId id, uint64_t now, uint64_t cow_faults) {
  daemon::Exporter::Readings r;
  r.now_ns = now;
  thptrace_target k{};
  k.faults.cow = cow_faults;
  r.targets.push_back({id, k, {}});
  return r;
}

double series(const std::string& exposition, const std::string& name) {
  const auto at = exposition.find("\n" + name + "{");
  if (at == std::string::npos) return -1;
  const auto value = exposition.find("} ", at);
  return std::stod(exposition.substr(value + 2));
}

}  // namespace

TEST(Exporter, CopiesAreTheForksFaultsAndTheRestIsReuseCountedOnlyWhenNoForkIsOpen) {
  Fixture f;
  f.exporter.on_readings(counters_at(f.id, 1 * kS, 100));  // before any fork: reuse
  f.exporter.on_event(f.id, test::fork_ev(200, 2 * kS));
  f.exporter.on_readings(counters_at(f.id, 3 * kS, 600));  // the child lives: nothing is reuse yet
  const auto ep = test::episode(200, 2 * kS, 4 * kS, 512);
  f.exporter.on_event(f.id, test::exit_ev(ep));
  f.exporter.on_readings(counters_at(f.id, 5 * kS, 650));  // exited, not yet exported
  std::string m = f.metrics.exposition();
  EXPECT_EQ(series(m, "thptrace_reuse_faults_total"), 100);
  EXPECT_EQ(series(m, "thptrace_copies_total"), 0);
  f.exporter.export_settled(20 * kS);
  f.exporter.on_readings(counters_at(f.id, 21 * kS, 700));
  m = f.metrics.exposition();
  EXPECT_EQ(series(m, "thptrace_cow_faults_total"), 700);
  EXPECT_EQ(series(m, "thptrace_copies_total"), 512);
  EXPECT_EQ(series(m, "thptrace_parent_copied_bytes_total"), 512.0 * 4096);
  EXPECT_EQ(series(m, "thptrace_reuse_faults_total"), 700 - 512);
}

// One fork window (correlate/window.h) for the report and the metrics: from the child's creation (the
// fork's record) to its exit. The AOF thread's fsync that returned inside the fork() call but before
// the creation is the window before's in both; the one that returned just after it, the fork's.
TEST(Exporter, AForksWindowIsTheReportsFromTheChildsCreation) {
  auto fork = test::fork_ev(200, 10 * kS);
  fork.start_ns = 10 * kS - 5'000'000;  // inside a fork() call of 5 ms so far
  const auto ep = test::episode(200, 10 * kS, 11 * kS, 0);
  const std::vector<thptrace_event> events = {
      test::sync_ev(10 * kS - 4'000'000, 2000, THREAD_BIO_AOF),        // returned 2 ms before the creation
      fork, test::sync_ev(10 * kS - 1'000'000, 2000, THREAD_BIO_AOF),  // returned 1 ms after it
      test::exit_ev(ep)};

  correlate::Correlator correlator(test::kParent);
  for (const auto& e : events) correlator.on_event(e);
  const auto forks = correlator.take_remaining(true);
  ASSERT_EQ(forks.size(), 1u);
  const correlate::Window window = forks[0].window();
  EXPECT_EQ(window.from_ns, 10 * kS);
  EXPECT_EQ(window.to_ns, 11 * kS);
  const auto during = correlate::fsync_window(events, test::kParent, window);
  const auto before = correlate::fsync_window(events, test::kParent, *window.before());
  ASSERT_TRUE(during.bio_aof && before.bio_aof);
  EXPECT_EQ(during.bio_aof->count, 1u);
  EXPECT_EQ(before.bio_aof->count, 1u);

  Fixture f;
  for (const auto& e : events) f.exporter.on_event(f.id, e);
  const std::string scrape = f.metrics.exposition();
  for (const char* phase : {"fork", "idle"})
    EXPECT_NE(scrape.find(std::string("thptrace_fsync_seconds_count{phase=\"") + phase +
                          R"(",target="127.0.0.1:6379",thread="bio_aof"} 1)"),
              std::string::npos)
        << phase << "\n"
        << scrape;
}

// The main thread's clocks between two readings, split between the phases by how much of the interval
// a fork window covered: half of it here (a child from 2 s, still alive at the reading at 3 s).
TEST(Exporter, TheMainThreadsTimeIsSplitByTheForkWindowsShareOfEachInterval) {
  Fixture f;
  const auto reading = [&](uint64_t now, uint64_t on_cpu, uint64_t runqueue) {
    daemon::Exporter::Readings h;
    h.now_ns = now;
    daemon::Exporter::Readings::Reading r;
    r.target = f.id;
    r.sample.target_alive = true;
    r.sample.main_thread = proc::SchedStat{on_cpu, runqueue};
    h.targets.push_back(r);
    f.exporter.on_readings(h);
  };
  reading(1 * kS, 5 * kS, 1 * kS);
  f.exporter.on_event(f.id, test::fork_ev(200, 2 * kS));
  reading(3 * kS, 5 * kS + 400'000'000, 1 * kS + 1'000'000'000);  // 0.4 s on a CPU, 1 s waiting
  const std::string scrape = f.metrics.exposition();
  const auto value = [&](const std::string& labels) {
    const std::string series = "thptrace_main_thread_seconds_total{" + labels + "} ";
    const auto at = scrape.find(series);
    return at == std::string::npos ? -1.0 : std::stod(scrape.substr(at + series.size()));
  };
  EXPECT_DOUBLE_EQ(value(R"(phase="fork",state="on_cpu",target="127.0.0.1:6379")"), 0.2) << scrape;
  EXPECT_DOUBLE_EQ(value(R"(phase="fork",state="runqueue",target="127.0.0.1:6379")"), 0.5) << scrape;
  EXPECT_DOUBLE_EQ(value(R"(phase="idle",state="on_cpu",target="127.0.0.1:6379")"), 0.2) << scrape;
  EXPECT_DOUBLE_EQ(value(R"(phase="idle",state="runqueue",target="127.0.0.1:6379")"), 0.5) << scrape;
}
