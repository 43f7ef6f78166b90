// SPDX-License-Identifier: Apache-2.0
// The result files' shape, from a result built by hand.

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "loadgen/output.h"

namespace thptrace::loadgen {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

LoadgenResult sample_result() {
  LoadgenResult r;
  r.open_loop = true;
  r.rate = 1000;
  r.elapsed = 2s;
  for (int i = 0; i < 100; ++i) r.probe_latency.record(100'000);  // 100 µs
  r.probe_latency.record(500'000'000);                            // one 500 ms stall
  r.probe_service_time.record(90'000);
  r.probe_ops = 101;
  r.writer_ops = 8000;
  r.writer_batch_latency.record(250'000);
  TimelineRow busy;
  busy.probe_count = 100;
  busy.p50_ns = 100'000;
  busy.p99_ns = 100'000;
  busy.max_ns = 100'000;
  busy.writer_ops = 4000;
  TimelineRow idle;
  idle.offset = 100ms;
  idle.writer_ops = 4000;
  r.timeline = {busy, idle};
  return r;
}

TEST(LoadgenOutput, PercentilesCsvHasOneRowPerSeriesInMicroseconds) {
  std::ostringstream out;
  write_percentiles_csv(out, sample_result());
  const auto lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0],
            "series,mode,rate,count,error_replies,throughput_ops_per_s,mean_us,min_us,p50_us,p90_us,p99_us,p99_9_us,"
            "p99_99_us,max_us");
  EXPECT_TRUE(lines[1].starts_with("probe,open,1000,101,0,50.5,")) << lines[1];
  EXPECT_TRUE(lines[1].ends_with(",500000.000")) << lines[1];
  EXPECT_TRUE(lines[2].starts_with("probe_service_time,open,1000,1,")) << lines[2];
  EXPECT_TRUE(lines[3].starts_with("writer_batch,open,1000,1,0,4000.0,250.000,")) << lines[3];
}

TEST(LoadgenOutput, TimelineCsvLeavesLatencyCellsEmptyForIdleIntervals) {
  std::ostringstream out;
  write_timeline_csv(out, sample_result());
  const auto lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "offset_ms,probe_count,p50_us,p99_us,max_us,writer_ops");
  EXPECT_EQ(lines[1], "0.0,100,100.000,100.000,100.000,4000");
  EXPECT_EQ(lines[2], "100.0,0,,,,4000");
}

TEST(LoadgenOutput, JsonCarriesPercentilesTimelineAndNoPassword) {
  LoadgenOptions options;
  options.connection.password = "hunter2";
  options.writers = 6;
  const nlohmann::json j = to_json(sample_result(), options);
  EXPECT_EQ(j["mode"], "open");
  EXPECT_EQ(j["probe"]["ops"], 101);
  EXPECT_DOUBLE_EQ(j["probe"]["latency"]["max"].get<double>(), 500'000.0);
  EXPECT_NEAR(j["probe"]["latency"]["p50"].get<double>(), 100.0, 1.0);  // a bucket midpoint, within 1%
  EXPECT_EQ(j["writers"]["connections"], 6);
  ASSERT_EQ(j["timeline"].size(), 2u);
  EXPECT_TRUE(j["timeline"][1]["p99_us"].is_null());
  EXPECT_TRUE(j["failure"].is_null());
  EXPECT_EQ(j.dump().find("hunter2"), std::string::npos);
}

TEST(LoadgenOutput, TimelinePathSitsBesideThePercentiles) {
  EXPECT_EQ(timeline_csv_path("results/latency.csv"), "results/latency_timeline.csv");
  EXPECT_EQ(timeline_csv_path("out"), "out_timeline");
}

TEST(LoadgenOutput, SummaryShowsBothCorrectedAndUncorrected) {
  std::ostringstream out;
  write_summary(out, sample_result());
  EXPECT_NE(out.str().find("open loop at 1000 req/s"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("max 500.0 ms"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("uncorrected"), std::string::npos) << out.str();
}

}  // namespace
}  // namespace thptrace::loadgen
