// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "loadgen/connection.h"

namespace thptrace::loadgen {

// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and fully specified by its seed, which is
// all a reproducible dataset and key sequence need; not for anything cryptographic.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) noexcept : state_(seed) {}
  uint64_t next() noexcept {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) by Lemire's multiply-shift; the bias is below 2^-64 * bound, far
  // under anything a latency run could notice. bound must be > 0.
  uint64_t below(uint64_t bound) noexcept {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * bound) >> 64);
  }

 private:
  uint64_t state_;
};

struct DatasetOptions {
  uint64_t seed = 1;
  uint64_t keys = 100000;
  size_t value_size = 400;
};

// The keys "key:0" .. "key:<keys-1>", each with value_size bytes drawn from a PRNG seeded by
// (seed, key number). Each value can be computed on its own, so writers re-SET a key with its
// own dataset value (the dataset's content never drifts during a run) without anyone keeping
// the dataset in memory. Same options ⇒ byte-identical dataset on any machine.
class Dataset {
 public:
  // Throws LoadgenError if keys is 0 or value_size is 0 or above Redis' 512 MB string limit.
  explicit Dataset(const DatasetOptions& options);

  const DatasetOptions& options() const noexcept { return options_; }
  uint64_t key_count() const noexcept { return options_.keys; }
  size_t value_size() const noexcept { return options_.value_size; }

  // Writes "key:<n>" into `out`, replacing its content; no allocation once `out` has grown.
  static void key(uint64_t n, std::string& out);
  // Writes key n's value into `out`, replacing its content.
  void value(uint64_t n, std::string& out) const;

 private:
  DatasetOptions options_;
};

struct LoadReport {
  uint64_t keys = 0;
  std::chrono::nanoseconds elapsed{0};
};

// Called after every pipelined batch with the keys written so far and the total.
using LoadProgress = std::function<void(uint64_t loaded, uint64_t total)>;

// SETs every key of the dataset over one connection, `batch` commands per pipeline round.
// Stops early (returning what was loaded) when `stop` becomes true. Throws LoadgenError on a
// connection failure or on an error reply (OOM, MISCONF, READONLY...).
LoadReport load_dataset(const ConnectionOptions& connection, const Dataset& dataset, const LoadProgress& progress = {},
                        size_t batch = 1000, const std::atomic<bool>* stop = nullptr);

}  // namespace thptrace::loadgen
