// SPDX-License-Identifier: Apache-2.0
// The main thread's time in a fork window against a known answer (cpu_share.c): a parent and its child
// pinned to one CPU. A parent that spins while its child spins is runnable whenever the child runs, so
// it waits in the run queue at least the child's CPU time (the child's own clock says how much); a
// parent asleep in waitpid is off CPU. Whatever else the host runs only adds to the wait.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "harness.h"

using namespace thptrace::test;
using namespace std::chrono_literals;

namespace {

constexpr int kChildMs = 800;

// The capture's report of one run of cpu_share; child_cpu_ms: the child's CPU time by its own clock;
// wait_pct, when given: the timeline's largest share of an interval between two /proc samples that
// the main thread waited for a CPU (its main-thread panel).
nlohmann::json capture_cpu_share(const std::string& mode, bool force_fallback, double* child_cpu_ms,
                                 double* wait_pct = nullptr) {
  const std::string dir = make_temp_dir("thptrace-main-thread-");
  const std::string json = dir + "/report.json";
  const std::string svg = dir + "/timeline.svg";
  Process work({CPU_SHARE_BIN, mode, std::to_string(kChildMs)});
  EXPECT_TRUE(work.wait_stdout_line("ready", 20s)) << work.err();
  std::vector<std::string> args = {
      thptrace_bin(), "--pid", std::to_string(work.pid()), "--duration", "60", "--json", json, "--svg", svg};
  if (force_fallback) args.emplace_back("--force-fallback");
  Process tracer(args);
  EXPECT_TRUE(tracer.wait_stderr_line("tracing pid", 30s)) << tracer.err();
  // A window before the fork as long as the child's life, with the parent asleep on its stdin.
  std::this_thread::sleep_for(std::chrono::milliseconds(kChildMs + 300));
  work.write_stdin("go\n");
  const auto cpu = work.wait_stdout_line("child_cpu_ns ", 60s);
  EXPECT_TRUE(cpu && work.wait_stdout_line("done", 10s)) << work.err();
  if (cpu) *child_cpu_ms = std::stod(cpu->substr(cpu->find(' ') + 1)) / 1e6;
  std::this_thread::sleep_for(700ms);  // a sample after the child's exit
  tracer.signal(SIGINT);
  EXPECT_EQ(tracer.wait(30s), 0) << tracer.err();
  work.write_stdin("bye\n");
  EXPECT_EQ(work.wait(10s), 0);
  auto report = read_json(json);
  if (wait_pct) {
    std::ifstream in(svg);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::smatch m;
    EXPECT_TRUE(std::regex_search(text, m, std::regex("class=\"thread-wait\" data-max-pct=\"([0-9.]+)\""))) << svg;
    if (!m.empty()) *wait_pct = std::stod(m[1]);
  }
  std::filesystem::remove_all(dir);
  return report;
}

// The fork's main_thread figures, checked for what holds of any: the parts add up to the span, which
// is the child's life to within a tenth (the samples nearest its ends, one taken as each is reported).
nlohmann::json main_thread_during(const nlohmann::json& report) {
  EXPECT_EQ(report.at("forks").size(), 1u) << report.at("forks").dump(1);
  const auto& fork = report.at("forks").at(0);
  const auto& t = fork.at("main_thread").at("during");
  EXPECT_TRUE(t.is_object()) << fork.dump(1);
  if (!t.is_object()) return nullptr;
  std::cout << "main thread during " << t.dump() << " before " << fork.at("main_thread").at("before").dump()
            << " child lived " << fork.at("child_lifetime_ms") << " ms" << std::endl;
  const double span = t.at("span_ms").get<double>();
  EXPECT_NEAR(span, fork.at("child_lifetime_ms").get<double>(), 0.1 * fork.at("child_lifetime_ms").get<double>())
      << t.dump();
  EXPECT_NEAR(t.at("on_cpu_ms").get<double>() + t.at("runqueue_ms").get<double>() + t.at("off_cpu_ms").get<double>(),
              span, span * 0.02)
      << t.dump();
  return t;
}

// The child's own clocks, read by the kernel as it exits, against the child's CPU time by its own clock
// just before it exited: up to a tick short (the kernel adds a running task's time at ticks and
// switches), a little over (its exit's own work).
void expect_child_cpu(const nlohmann::json& report, double child_cpu_ms) {
  const auto& fork = report.at("forks").at(0);
  ASSERT_TRUE(fork.contains("child_cpu")) << fork.dump(1);
  const auto& c = fork.at("child_cpu");
  std::cout << "child_cpu " << c.dump() << " by its own clock " << child_cpu_ms << " ms" << std::endl;
  EXPECT_NEAR(c.at("on_cpu_ms").get<double>(), child_cpu_ms, 0.05 * child_cpu_ms + 10) << c.dump();
  EXPECT_GE(c.at("runqueue_ms").get<double>(), 0.0);
}

// What held the CPU while the main thread waited (the sched family, in the mode the capture's
// attach mode gives it), over the child's life.
nlohmann::json waited_behind(const nlohmann::json& report, bool force_fallback) {
  EXPECT_EQ(report.at("probes").at("sched"), force_fallback ? "raw_tp" : "tp_btf") << report.at("probes").dump(1);
  const auto& w = report.at("forks").at(0).at("main_thread").at("waited_behind");
  EXPECT_TRUE(w.is_object()) << report.at("forks").at(0).dump(1);
  std::cout << "waited behind " << w.dump() << std::endl;
  return w;
}

void expect_waits_for_the_child(bool force_fallback) {
  double child_cpu_ms = 0, wait_pct = -1;
  const auto report = capture_cpu_share("spin", force_fallback, &child_cpu_ms, &wait_pct);
  // The timeline's main-thread panel: in the 100 ms intervals inside the window the parent waited
  // about half of each (the child had the CPU the other half).
  EXPECT_GE(wait_pct, 35.0);
  EXPECT_LE(wait_pct, 100.0);
  ASSERT_TRUE(report.is_object());
  const auto t = main_thread_during(report);
  ASSERT_TRUE(t.is_object());
  ASSERT_GT(child_cpu_ms, 0);
  expect_child_cpu(report, child_cpu_ms);
  // Runnable whenever the child ran on their one CPU: the kernel's scheduler clocks advance at ticks
  // and switches, hence the 5%.
  EXPECT_GE(t.at("runqueue_ms").get<double>(), 0.95 * child_cpu_ms) << t.dump() << " child " << child_cpu_ms;
  // And behind the child for as long as the child ran (by its own clock, read just before its exit:
  // its exit's own work comes after), whatever else the host ran meanwhile.
  const auto w = waited_behind(report, force_fallback);
  ASSERT_TRUE(w.is_object());
  EXPECT_GE(w.at("fork_child_ms").get<double>(), 0.95 * child_cpu_ms) << w.dump() << " child " << child_cpu_ms;
  EXPECT_LE(w.at("fork_child_ms").get<double>(), 1.05 * child_cpu_ms + 20) << w.dump() << " child " << child_cpu_ms;
  const nlohmann::json* finding = nullptr;
  for (const auto& f : report.at("findings"))
    if (f.at("id") == "cpu_wait_in_fork") finding = &f;
  ASSERT_NE(finding, nullptr) << report.at("findings").dump(1);
  EXPECT_EQ(finding->at("evidence").at("runqueue_ms"), t.at("runqueue_ms"));
  // Who ran instead: the child, by the kernel's clock at its exit and by what held the CPU, named by
  // the finding first.
  const auto& child = report.at("forks").at(0).at("child_cpu");
  EXPECT_EQ(finding->at("evidence").at("child_on_cpu_ms"), child.at("on_cpu_ms"));
  EXPECT_EQ(finding->at("evidence").at("behind_fork_child_ms"), w.at("fork_child_ms"));
  EXPECT_NE(finding->at("text").get<std::string>().find("its CPU was held by the fork's child"), std::string::npos)
      << finding->at("text");
}

}  // namespace

TEST(MainThread, WaitsForTheCpuItsChildRanOn) {
  REQUIRE_BPF();
  expect_waits_for_the_child(false);
}

TEST(MainThread, WaitsForTheCpuItsChildRanOnForcedFallback) {
  REQUIRE_BPF();
  expect_waits_for_the_child(true);
}

// Asleep in waitpid while the child spins: off CPU for most of the window, and no finding (a sleeper
// on a busy host waits a little at each wake-up: under the finding's 5% of the window).
TEST(MainThread, AsleepWhileItsChildRanIsOffCpu) {
  REQUIRE_BPF();
  double child_cpu_ms = 0, wait_pct = -1;
  const auto report = capture_cpu_share("sleep", false, &child_cpu_ms, &wait_pct);
  EXPECT_GE(wait_pct, 0.0);
  EXPECT_LT(wait_pct, 20.0);
  ASSERT_TRUE(report.is_object());
  const auto t = main_thread_during(report);
  ASSERT_TRUE(t.is_object());
  EXPECT_LT(t.at("runqueue_ms").get<double>(), 0.05 * t.at("span_ms").get<double>()) << t.dump();
  EXPECT_GE(t.at("off_cpu_ms").get<double>(), 0.9 * kChildMs) << t.dump();
  expect_child_cpu(report, child_cpu_ms);
  // Asleep, it waited behind nothing for long, least of all its child.
  const auto w = waited_behind(report, false);
  ASSERT_TRUE(w.is_object());
  const double waited = w.at("fork_child_ms").get<double>() + w.at("own_threads_ms").get<double>() +
                        w.at("other_processes_ms").get<double>() + w.at("idle_cpu_ms").get<double>();
  EXPECT_LT(waited, 0.05 * t.at("span_ms").get<double>()) << w.dump();
  EXPECT_LT(w.at("fork_child_ms").get<double>(), 5.0) << w.dump();
  for (const auto& f : report.at("findings")) EXPECT_NE(f.at("id"), "cpu_wait_in_fork") << f.dump(1);
}
