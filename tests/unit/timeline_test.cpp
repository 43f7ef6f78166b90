// SPDX-License-Identifier: Apache-2.0
// The --svg timeline drawn from hand-made inputs whose answer is known: where the fork window lies,
// how many faults each bucket holds, and a double-counted read that must not make a bucket negative.
#include "report/timeline.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

namespace thptrace::report {
namespace {

constexpr uint64_t kStart = 5'000'000'000, kMs = 1'000'000;

std::string attribute(const std::string& svg, const std::string& element_class, const std::string& name) {
  const std::regex re("class=\"" + element_class + "\"[^>]*?" + name + "=\"([^\"]*)\"");
  std::smatch m;
  return std::regex_search(svg, m, re) ? m[1].str() : std::string("<none>");
}

std::vector<uint64_t> buckets(const std::string& svg, const std::string& element_class) {
  std::vector<uint64_t> out;
  std::istringstream in(attribute(svg, element_class, "data-buckets"));
  for (std::string v; std::getline(in, v, ',');) out.push_back(std::stoull(v));
  return out;
}

// 2 s captured from 2026-12-02T12:00:00Z; a child lives from 500 ms to 1000 ms; every 10 ms read
// inside it finds 100 more parent faults and 10 more child faults, and from 1500 ms to 1600 ms 20 more
// parent faults (writes after the exit: reuse). The fork froze the server 9 ms before 500 ms; the
// probe's requests, one every 10 ms, took 200 µs but the one due at 495 ms, which waited 9 ms.
struct Fixture {
  CaptureInputs in;
  Report r;
  Fixture() {
    in.start_ns = kStart;
    in.end_ns = kStart + 2000 * kMs;
    in.start_realtime_ns = 1796212800'000'000'000;
    uint64_t cow = 0, child = 0;
    for (uint64_t t = 0; t <= 2000; t += 10) {
      if (t > 500 && t <= 1000) cow += 100, child += 10;
      if (t > 1500 && t <= 1600) cow += 20;
      in.counters.push_back({kStart + t * kMs, cow, child, 0});
    }
    in.latency_probe_hz = 100;
    for (uint64_t t = 5; t < 2000; t += 10)
      in.probe_samples.push_back({kStart + t * kMs, (t == 495 ? 9000u : 200u) * 1000u});
    r.pid = 42;
    r.comm = "redis-server";
    correlate::ForkEpisode f;
    f.child_pid = 43;
    f.reason = correlate::Reason::bgsave;
    f.fork_ts_ns = kStart + 500 * kMs;
    f.exit_ts_ns = kStart + 1000 * kMs;
    f.fork_duration_us = 9000;
    f.latency_during = correlate::LatencyWindow{1000, 50, 900, 12000, 15000};
    r.forks.push_back(f);
  }
};

TEST(Timeline, FaultsLandInTheirBucketsAndTheForkWindowWhereItWas) {
  Fixture x;
  const std::string svg = timeline_svg(x.r, x.in);
  // Copies: the faults while the child lived; the writes after its exit are reuse, drawn apart.
  EXPECT_EQ(attribute(svg, "cow-parent", "data-total"), "5000");
  EXPECT_EQ(attribute(svg, "cow-reuse", "data-total"), "200");
  EXPECT_EQ(attribute(svg, "cow-child", "data-total"), "500");
  const auto parent = buckets(svg, "cow-parent");
  ASSERT_EQ(parent.size(), 200u);  // 2 s of 10 ms
  for (size_t i = 0; i < parent.size(); ++i) {
    // The read at t covers (t - 10 ms, t]: it lands in bucket t / 10 ms.
    const bool inside = i > 50 && i <= 100;
    EXPECT_EQ(parent[i], inside ? 100u : 0u) << "bucket " << i;
  }
  EXPECT_EQ(attribute(svg, "fork", "data-start-ms"), "500.000");
  EXPECT_EQ(attribute(svg, "fork", "data-end-ms"), "1000.000");
  EXPECT_EQ(attribute(svg, "fork", "data-reason"), "bgsave");
  // x = left (118) + share of the duration × plot width (858); the fault panel's top is at 232 (the
  // clients' panel, 90 high, is at 100).
  EXPECT_NE(svg.find("x=\"332.5\" y=\"232.0\" width=\"214.5\" height=\"150\" class=\"fork\""), std::string::npos)
      << svg.substr(0, 4000);
  EXPECT_NE(svg.find("bgsave · p99.9 12 ms"), std::string::npos);
  // What the clients felt: the slowest request of the bucket its due time falls in, the freeze at full
  // length where the fork was, marked from 491 ms to 500 ms.
  EXPECT_EQ(attribute(svg, "client", "data-max-us"), "9000");
  const auto client = buckets(svg, "client");
  ASSERT_EQ(client.size(), 200u);
  EXPECT_EQ(client[49], 9000u);
  EXPECT_EQ(client[48], 200u);
  EXPECT_EQ(attribute(svg, "freeze", "data-freeze-ms"), "9.000");
  // x = 118 + 491 / 2000 × 858, 9 ms wide (3.9), in the clients' panel.
  EXPECT_NE(svg.find("<rect x=\"328.6\" y=\"100.0\" width=\"3.9\" height=\"90\" class=\"freeze\""), std::string::npos);
  // The axis is the wall clock, UTC.
  EXPECT_NE(svg.find(">12:00:01.0</text>"), std::string::npos);
  EXPECT_NE(svg.find("time: UTC, from 2026-12-02T12:00:00.000Z"), std::string::npos);
}

TEST(Timeline, ADoubleCountedReadMakesNoNegativeBucket) {
  Fixture x;
  // A read that saw an exiting child's faults both in its episode and in the target: 30 too many,
  // gone at the next read.
  x.in.counters[60].child_cow_faults += 30;
  const std::string svg = timeline_svg(x.r, x.in);
  EXPECT_EQ(attribute(svg, "cow-child", "data-total"), "500");
  for (const auto v : buckets(svg, "cow-child")) EXPECT_LE(v, 40u);
}

TEST(Timeline, ALongCaptureHasWiderBucketsAndWithoutReadsSaysSo) {
  Fixture x;
  x.in.end_ns = kStart + 3600'000 * kMs;  // an hour
  x.in.counters.clear();
  const std::string svg = timeline_svg(x.r, x.in);
  EXPECT_NE(svg.find("data-bucket-ms=\"5000\""), std::string::npos);  // 720 buckets of 5 s
  EXPECT_NE(svg.find("no counter reads in this capture"), std::string::npos);
  const auto html = timeline_document(x.r, x.in, true);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(timeline_document(x.r, x.in, false).rfind("<?xml", 0), 0u);
}

}  // namespace
}  // namespace thptrace::report
