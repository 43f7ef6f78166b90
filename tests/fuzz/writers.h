// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared by the report writers' fuzz targets: a capture report whose every name and free-text field
// (process name, kernel release, Redis address, version and errors, replica addresses and states,
// symbol and mapping names, cgroup path) is taken from the fuzzer's bytes, with a few forks at
// times inside the capture. The numbers stay small: the writers' escaping is under test here.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "report/inputs.h"
#include "report/report.h"

namespace thptrace::fuzz {

// The fuzzer's bytes read front to back; past their end every read gives zeros and empty strings.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : rest_(reinterpret_cast<const char*>(data), size) {}
  // An integer in [lo, hi], from the next four bytes.
  uint64_t number(uint64_t lo, uint64_t hi) {
    uint64_t v = 0;
    for (int i = 0; i < 4 && !rest_.empty(); ++i) {
      v = (v << 8) | static_cast<uint8_t>(rest_.front());
      rest_.remove_prefix(1);
    }
    return lo + v % (hi - lo + 1);
  }
  bool flag() { return number(0, 1) == 1; }
  // A string of any length up to what is left: a three-byte length, then that many bytes. Long
  // inputs (-max_len in the megabytes) give names of a megabyte.
  std::string name() {
    size_t n = 0;
    for (int i = 0; i < 3 && !rest_.empty(); ++i) {
      n = (n << 8) | static_cast<uint8_t>(rest_.front());
      rest_.remove_prefix(1);
    }
    n = std::min(n, rest_.size());
    std::string out(rest_.substr(0, n));
    rest_.remove_prefix(n);
    return out;
  }

 private:
  std::string_view rest_;
};

inline report::Report fuzzed_report(Bytes& in, report::CaptureInputs& inputs) {
  const auto name = [&] { return in.name(); };
  inputs.start_ns = 1'000'000'000;
  inputs.end_ns = inputs.start_ns + in.number(1, 10) * 1'000'000'000;
  const auto when = [&] { return in.number(inputs.start_ns, inputs.end_ns); };
  report::Report r;
  r.pid = static_cast<int>(in.number(1, 1 << 22));
  r.comm = name();
  r.version = name();
  r.system = {name(), name(), name()};
  r.probes.redis.why = name();
  r.probes.kernel_copies.why = name();
  r.huge_alloc.why = name();
  r.start_monotonic_ns = inputs.start_ns;
  r.duration_s = static_cast<double>(inputs.end_ns - inputs.start_ns) / 1e9;
  const size_t forks = in.number(0, 4);
  for (size_t i = 0; i < forks; ++i) {
    correlate::ForkEpisode f;
    f.child_pid = static_cast<uint32_t>(in.number(0, 65535));
    f.fork_ts_ns = when();
    f.exit_ts_ns = in.flag() ? 0 : when();
    f.cow_faults = in.number(0, 65535);
    f.reason_source = name();
    f.thp_splits_source = name();
    for (size_t k = in.number(0, 3); k > 0; --k) {
      correlate::ReplicaSync s;
      s.address = name();
      s.first_seen_ns = f.fork_ts_ns;
      s.last_seen_ns = std::max(f.fork_ts_ns, when());
      for (size_t m = in.number(0, 3); m > 0; --m)
        s.states.push_back({name(), std::min(s.last_seen_ns, std::max(s.first_seen_ns, when()))});
      s.outcome = in.flag() ? correlate::ReplicaSync::Outcome::dropped : correlate::ReplicaSync::Outcome::online;
      f.replicas.push_back(std::move(s));
    }
    if (in.flag()) {
      correlate::CopyAttribution c;
      c.sample_every = 4;
      c.samples = 1;
      c.stacks_partial = name();
      c.paths.push_back({name(), name(), 1, 1, 4, 8});
      c.functions.push_back({name(), "", 1, 1, 4, 8});
      c.mappings.push_back({name(), "", 1, 1, 4, 8});
      f.copies = std::move(c);
    }
    r.forks.push_back(std::move(f));
  }
  if (in.flag()) {
    report::RedisSection redis;
    redis.address = name();
    redis.reachable = in.flag();
    redis.error = name();
    redis.version = name();
    redis.disable_thp = name();
    redis.repl_diskless_sync = name();
    redis.unanswered.push_back({when(), in.flag() ? 0 : when(), name()});
    r.redis = std::move(redis);
  }
  if (in.flag()) r.memory.cgroup = report::CgroupSection{2, name(), std::nullopt, 0, std::nullopt, 0};
  if (in.flag()) {
    r.replication = report::ReplicationSection{};
    r.replication->loops.push_back({name(), 2, 1});
    r.replication->loop_cause = name();
  }
  r.totals.forks = r.forks.size();
  return r;
}

// True when s holds no byte below 0x20 but line breaks.
inline bool only_line_breaks(const std::string& s) {
  for (const char c : s)
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') return false;
  return true;
}

}  // namespace thptrace::fuzz
