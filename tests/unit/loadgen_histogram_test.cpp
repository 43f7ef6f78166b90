// SPDX-License-Identifier: Apache-2.0
// The log-linear histogram against exact order statistics of generated data.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "loadgen/histogram.h"

namespace thptrace::loadgen {
namespace {

const double checked_percentiles[] = {0, 1, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.99, 99.999, 100};

// The nearest-rank order statistic the histogram promises to approximate.
uint64_t exact_percentile(const std::vector<uint64_t>& sorted, double p) {
  if (p <= 0) return sorted.front();
  if (p >= 100) return sorted.back();
  auto rank = static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size()) - 1e-9));
  rank = std::clamp<uint64_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

void expect_within_one_percent(std::vector<uint64_t> values) {
  LogLinearHistogram h;
  for (uint64_t v : values) h.record(v);
  std::sort(values.begin(), values.end());

  ASSERT_EQ(h.count(), values.size());
  EXPECT_EQ(h.min(), values.front());
  EXPECT_EQ(h.max(), values.back());
  for (double p : checked_percentiles) {
    const uint64_t exact = exact_percentile(values, p);
    const uint64_t got = h.percentile(p);
    const double error = std::abs(static_cast<double>(got) - static_cast<double>(exact));
    EXPECT_LE(error, 0.01 * static_cast<double>(exact)) << "p" << p << ": exact " << exact << ", got " << got;
  }
}

TEST(LoadgenHistogram, UniformMatchesExactPercentilesWithinOnePercent) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<uint64_t> dist(1'000, 5'000'000);  // 1 µs .. 5 ms
  std::vector<uint64_t> values(200'000);
  for (auto& v : values) v = dist(rng);
  expect_within_one_percent(std::move(values));
}

TEST(LoadgenHistogram, LongTailMatchesExactPercentilesWithinOnePercent) {
  // Exponential body around 50 µs plus a Pareto tail reaching seconds: the shape fork stalls give.
  std::mt19937_64 rng(7);
  std::exponential_distribution<double> body(1.0 / 50'000);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<uint64_t> values(300'000);
  for (auto& v : values) {
    v = static_cast<uint64_t>(body(rng)) + 1;
    if (unit(rng) < 0.001) v += static_cast<uint64_t>(1e6 / std::pow(1.0 - unit(rng), 1.0 / 1.2));
  }
  expect_within_one_percent(std::move(values));
}

TEST(LoadgenHistogram, ConstantValueIsReportedExactly) {
  LogLinearHistogram h;
  for (int i = 0; i < 1000; ++i) h.record(123'456);
  for (double p : checked_percentiles) EXPECT_EQ(h.percentile(p), 123'456u) << "p" << p;
  EXPECT_DOUBLE_EQ(h.mean(), 123'456.0);
}

TEST(LoadgenHistogram, SmallValuesAreExact) {
  std::vector<uint64_t> values;
  for (uint64_t v = 0; v < 128; ++v) values.push_back(v);
  LogLinearHistogram h;
  for (uint64_t v : values) h.record(v);
  for (double p : checked_percentiles) EXPECT_EQ(h.percentile(p), exact_percentile(values, p)) << "p" << p;
}

TEST(LoadgenHistogram, BucketsTileTheRangeWithBoundedWidth) {
  // Every bucket starts where the previous ended, and is no wider than 1/128 of its start.
  for (size_t i = 1; i < LogLinearHistogram::bucket_count; ++i) {
    const uint64_t lo = LogLinearHistogram::bucket_lower_bound(i);
    ASSERT_EQ(lo, LogLinearHistogram::bucket_lower_bound(i - 1) + LogLinearHistogram::bucket_width(i - 1)) << i;
    ASSERT_EQ(LogLinearHistogram::bucket_index(lo), i);
    ASSERT_EQ(LogLinearHistogram::bucket_index(lo + LogLinearHistogram::bucket_width(i) - 1), i);
    if (lo >= 128) {
      ASSERT_LE(LogLinearHistogram::bucket_width(i) * 128, lo);
    }
  }
  EXPECT_EQ(LogLinearHistogram::bucket_index(UINT64_MAX), LogLinearHistogram::bucket_count - 1);
}

TEST(LoadgenHistogram, ExtremeValuesDoNotOverflow) {
  LogLinearHistogram h;
  h.record(0);
  h.record(UINT64_MAX);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), UINT64_MAX);
  EXPECT_EQ(h.percentile(50), 0u);
  EXPECT_EQ(h.percentile(100), UINT64_MAX);
  EXPECT_GT(h.mean(), 9e18);
}

TEST(LoadgenHistogram, MergeEqualsRecordingEverythingInOne) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> dist(11.0, 1.5);
  LogLinearHistogram a, b, all;
  for (int i = 0; i < 50'000; ++i) {
    const auto v = static_cast<uint64_t>(dist(rng));
    (i % 3 == 0 ? a : b).record(v);
    all.record(v);
  }
  a.merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.min(), all.min());
  EXPECT_EQ(a.max(), all.max());
  EXPECT_NEAR(a.mean(), all.mean(), 1e-6 * all.mean());
  for (double p : checked_percentiles) EXPECT_EQ(a.percentile(p), all.percentile(p)) << "p" << p;
}

TEST(LoadgenHistogram, RecordNEqualsRepeatedRecord) {
  LogLinearHistogram a, b;
  a.record_n(777'777, 5);
  a.record_n(10, 0);  // no-op: must not touch min
  for (int i = 0; i < 5; ++i) b.record(777'777);
  EXPECT_EQ(a.count(), b.count());
  EXPECT_EQ(a.min(), b.min());
  EXPECT_EQ(a.percentile(50), b.percentile(50));
}

TEST(LoadgenHistogram, EmptyAndResetReportZeros) {
  LogLinearHistogram h;
  EXPECT_TRUE(h.empty());
  EXPECT_EQ(h.percentile(99), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.mean(), 0.0);
  h.record(5'000);
  h.record(9'000);
  h.reset();
  EXPECT_TRUE(h.empty());
  EXPECT_EQ(h.percentile(50), 0u);
  h.record(42);
  EXPECT_EQ(h.min(), 42u);
  EXPECT_EQ(h.max(), 42u);
}

}  // namespace
}  // namespace thptrace::loadgen
