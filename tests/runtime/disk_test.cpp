// SPDX-License-Identifier: Apache-2.0
// The disk family against a known answer (fsync_pair.c): while a fork child lives, exactly N fsyncs
// from the main thread and M fdatasyncs from a thread named "bio_aof"; each call timed by the program
// too. A capture of it must count them exactly by thread kind, and time each no longer than the
// program saw it take (the kernel's timing starts after the program's clock read and ends before the
// next).
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

using namespace thptrace::test;
using namespace std::chrono_literals;

namespace {

constexpr int kFsyncs = 40;
constexpr int kFdatasyncs = 25;

struct Measured {
  int calls = 0;
  double sum_us = 0, max_us = 0;
};

Measured parse(const std::string& line) {
  std::istringstream in(line);
  std::string kind;
  Measured m;
  in >> kind >> m.calls >> m.sum_us >> m.max_us;
  return m;
}

void expect_known_fsyncs(bool force_fallback) {
  const std::string dir = make_temp_dir("thptrace-disk-");
  const std::string json = dir + "/report.json";
  Process work({FSYNC_PAIR_BIN, std::to_string(kFsyncs), std::to_string(kFdatasyncs), dir});
  ASSERT_TRUE(work.wait_stdout_line("ready", 20s)) << work.err();
  std::vector<std::string> args = {thptrace_bin(), "--pid", std::to_string(work.pid()), "--duration", "60",
                                   "--json",       json};
  if (force_fallback) args.emplace_back("--force-fallback");
  Process tracer(args);
  ASSERT_TRUE(tracer.wait_stderr_line("tracing pid", 30s)) << tracer.err();
  work.write_stdin("go\n");
  const auto main_line = work.wait_stdout_line("main ", 120s);
  const auto bio_line = work.wait_stdout_line("bio_aof ", 10s);
  ASSERT_TRUE(main_line && bio_line) << work.err();
  ASSERT_TRUE(work.wait_stdout_line("done", 10s));
  work.write_stdin("bye\n");
  EXPECT_EQ(work.wait(10s), 0);
  ASSERT_EQ(tracer.wait(30s), 0) << tracer.err();
  const auto report = read_json(json);
  std::filesystem::remove_all(dir);
  const std::string mode = force_fallback ? "raw_tp" : expected_mode("disk").empty() ? "tp_btf" : expected_mode("disk");
  EXPECT_EQ(report.at("probes").at("disk"), mode);

  ASSERT_EQ(report.at("forks").size(), 1u) << report.dump(1);
  const auto& fork = report.at("forks").at(0);
  ASSERT_TRUE(fork.contains("fsync_during")) << fork.dump(1);
  const auto& during = fork.at("fsync_during");
  for (const auto& [kind, measured] : {std::pair{"main", parse(*main_line)}, std::pair{"bio_aof", parse(*bio_line)}}) {
    ASSERT_TRUE(during.at(kind).is_object()) << kind << ": " << during.dump(1);
    const auto& k = during.at(kind);
    EXPECT_EQ(k.at("count").get<int>(), measured.calls) << kind;
    EXPECT_GT(k.at("p50_us").get<double>(), 0) << kind;
    EXPECT_LE(k.at("p50_us").get<double>(), k.at("p99_us").get<double>()) << kind;
    EXPECT_LE(k.at("p99_us").get<double>(), k.at("max_us").get<double>()) << kind;
    // The program's own clock brackets each call: the kernel's timing of it is no longer.
    EXPECT_LE(k.at("max_us").get<double>(), measured.max_us + 1) << kind << ": " << k.dump();
    EXPECT_LE(k.at("p50_us").get<double>() * measured.calls / 2, measured.sum_us) << kind << ": " << k.dump();
  }
  EXPECT_EQ(parse(*main_line).calls, kFsyncs);
  EXPECT_EQ(parse(*bio_line).calls, kFdatasyncs);
  EXPECT_TRUE(during.at("other").is_null()) << during.dump(1);
  // Nothing synced before the fork: the window before it is there, and empty.
  if (!fork.at("fsync_before").is_null()) {
    for (const char* kind : {"main", "bio_aof", "other"}) EXPECT_TRUE(fork.at("fsync_before").at(kind).is_null());
  }
}

}  // namespace

TEST(Disk, FsyncsCountedAndTimedByThreadKind) {
  REQUIRE_BPF();
  expect_known_fsyncs(false);
}

TEST(Disk, FsyncsCountedAndTimedByThreadKindForcedFallback) {
  REQUIRE_BPF();
  expect_known_fsyncs(true);
}
