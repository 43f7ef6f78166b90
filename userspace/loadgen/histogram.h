// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace thptrace::loadgen {

// A latency histogram in nanoseconds with log-linear buckets, in the manner of HdrHistogram:
// values below 128 have a bucket each, and every power-of-two range above is cut into 128
// equal sub-buckets. A bucket is therefore never wider than 1/128 of its lower bound, and
// reporting its midpoint is within 0.4% of any value it holds — inside the 1% the reports promise.
//
// The bucket array (59 KiB, the whole uint64 range) is allocated once by the constructor, so
// record() never allocates and costs a bit scan and four stores. Not thread-safe: give each
// thread its own histogram and merge() them afterwards.
class LogLinearHistogram {
 public:
  static constexpr unsigned sub_bucket_bits = 7;
  static constexpr uint64_t sub_bucket_count = uint64_t{1} << sub_bucket_bits;
  // 128 exact buckets below 128, then 128 sub-buckets for each exponent 7..63.
  static constexpr size_t bucket_count = sub_bucket_count + (64 - sub_bucket_bits) * sub_bucket_count;

  LogLinearHistogram();

  void record(uint64_t value_ns) noexcept;
  // Records the same value `times` times (used by merge and by tests).
  void record_n(uint64_t value_ns, uint64_t times) noexcept;
  void merge(const LogLinearHistogram& other) noexcept;
  void reset() noexcept;

  uint64_t count() const noexcept { return count_; }
  bool empty() const noexcept { return count_ == 0; }
  // Exact extremes, not bucket bounds; 0 when empty.
  uint64_t min() const noexcept { return count_ == 0 ? 0 : min_; }
  uint64_t max() const noexcept { return max_; }
  // Exact mean of the recorded values; 0 when empty.
  double mean() const noexcept;

  // The value at percentile `p` (0..100) by the nearest-rank definition — the ceil(p/100 * n)-th
  // smallest value — approximated by its bucket's midpoint clamped to [min, max], so within 0.4%.
  // p <= 0 gives min(), p >= 100 gives max(), and an empty histogram gives 0.
  uint64_t percentile(double p) const noexcept;

  // Bucket arithmetic, public so tests and exporters can reason about resolution.
  static size_t bucket_index(uint64_t value_ns) noexcept;
  static uint64_t bucket_lower_bound(size_t index) noexcept;
  // Width of a bucket: 1 in the exact range, 2^(exponent-7) above.
  static uint64_t bucket_width(size_t index) noexcept;

 private:
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
  // Sum kept in long double: 2^64 ns is 584 years, but a sum of many large samples is not.
  long double sum_ = 0;
};

}  // namespace thptrace::loadgen
