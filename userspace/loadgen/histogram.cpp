// SPDX-License-Identifier: Apache-2.0
#include "loadgen/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace thptrace::loadgen {

LogLinearHistogram::LogLinearHistogram() : counts_(bucket_count, 0) {}

size_t LogLinearHistogram::bucket_index(uint64_t value_ns) noexcept {
  if (value_ns < sub_bucket_count) return static_cast<size_t>(value_ns);
  const unsigned exponent = 63u - static_cast<unsigned>(std::countl_zero(value_ns));  // >= 7
  const unsigned shift = exponent - sub_bucket_bits;
  // The top 8 bits of the value are 1xxxxxxx: the low 7 pick the sub-bucket.
  const uint64_t sub = (value_ns >> shift) - sub_bucket_count;
  return static_cast<size_t>(sub_bucket_count + uint64_t{shift} * sub_bucket_count + sub);
}

uint64_t LogLinearHistogram::bucket_lower_bound(size_t index) noexcept {
  if (index < sub_bucket_count) return index;
  const uint64_t shift = (index - sub_bucket_count) / sub_bucket_count;
  const uint64_t sub = (index - sub_bucket_count) % sub_bucket_count;
  return (sub_bucket_count + sub) << shift;
}

uint64_t LogLinearHistogram::bucket_width(size_t index) noexcept {
  if (index < sub_bucket_count) return 1;
  return uint64_t{1} << ((index - sub_bucket_count) / sub_bucket_count);
}

void LogLinearHistogram::record(uint64_t value_ns) noexcept {
  ++counts_[bucket_index(value_ns)];
  ++count_;
  sum_ += static_cast<long double>(value_ns);
  min_ = std::min(min_, value_ns);
  max_ = std::max(max_, value_ns);
}

void LogLinearHistogram::record_n(uint64_t value_ns, uint64_t times) noexcept {
  if (times == 0) return;
  counts_[bucket_index(value_ns)] += times;
  count_ += times;
  sum_ += static_cast<long double>(value_ns) * static_cast<long double>(times);
  min_ = std::min(min_, value_ns);
  max_ = std::max(max_, value_ns);
}

void LogLinearHistogram::merge(const LogLinearHistogram& other) noexcept {
  if (other.count_ == 0) return;
  for (size_t i = 0; i < bucket_count; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

void LogLinearHistogram::reset() noexcept {
  std::fill(counts_.begin(), counts_.end(), 0);
  count_ = 0;
  min_ = UINT64_MAX;
  max_ = 0;
  sum_ = 0;
}

double LogLinearHistogram::mean() const noexcept {
  return count_ == 0 ? 0.0 : static_cast<double>(sum_ / static_cast<long double>(count_));
}

uint64_t LogLinearHistogram::percentile(double p) const noexcept {
  if (count_ == 0) return 0;
  if (!(p > 0.0)) return min_;  // also catches NaN
  if (p >= 100.0) return max_;
  // Nearest rank; the small epsilon keeps e.g. 99.9% of 1000 at rank 999 despite binary fractions.
  double exact_rank = std::ceil(p / 100.0 * static_cast<double>(count_) - 1e-9);
  const uint64_t rank = std::clamp<uint64_t>(static_cast<uint64_t>(exact_rank), 1, count_);

  uint64_t seen = 0;
  for (size_t i = 0; i < bucket_count; ++i) {
    seen += counts_[i];
    if (seen >= rank) {
      const uint64_t mid = bucket_lower_bound(i) + (bucket_width(i) - 1) / 2;
      return std::clamp(mid, min_, max_);
    }
  }
  return max_;  // unreachable while counts_ and count_ agree
}

}  // namespace thptrace::loadgen
