// SPDX-License-Identifier: Apache-2.0
// LATENCY HISTOGRAM replies: fuzz bytes are read as RESP by hiredis, every reply tree goes to
// parse_latency_histogram, and whatever it accepts must be a usable histogram.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "fuzz_check.h"
#include "redis/parse.h"
#include "resp_reader.h"

using thptrace::redis::LatencyHistogram;

namespace {

void check_histogram(const LatencyHistogram& h) {
  for (size_t i = 1; i < LatencyHistogram::kBuckets; ++i) FUZZ_CHECK(h.cumulative[i] >= h.cumulative[i - 1]);
  FUZZ_CHECK(h.total() == h.cumulative.back());
  FUZZ_CHECK(!h.quantile_us(0) && !h.quantile_us(-1) && !h.quantile_us(1.5));
  double previous = 0;
  for (const double q : {1e-9, 0.5, 0.99, 0.999, 1.0}) {
    const auto v = h.quantile_us(q);
    FUZZ_CHECK(v.has_value() == (h.total() > 0));
    if (!v) continue;
    // A bucket's upper bound: a power of two between 1 µs and 2^39 µs, non-decreasing in q.
    FUZZ_CHECK(*v >= 1 && *v <= static_cast<double>(uint64_t{1} << (LatencyHistogram::kBuckets - 1)));
    FUZZ_CHECK(std::has_single_bit(static_cast<uint64_t>(*v)));
    FUZZ_CHECK(*v >= previous);
    previous = *v;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<LatencyHistogram> earlier;
  thptrace::fuzz::for_each_reply(data, size, [&](const redisReply* reply) {
    const auto h = thptrace::redis::parse_latency_histogram(reply);
    if (!h) return;
    check_histogram(*h);
    const LatencyHistogram none = h->minus(*h);
    FUZZ_CHECK(none.total() == 0 && none.calls == 0);
    const LatencyHistogram same = h->minus(LatencyHistogram{});
    FUZZ_CHECK(same.cumulative == h->cumulative && same.calls == h->calls);
    // Successive replies are how a capture uses it: the window is a later histogram minus an earlier one.
    if (earlier) check_histogram(h->minus(*earlier));
    earlier = h;
  });
  return 0;
}
