// SPDX-License-Identifier: Apache-2.0
#pragma once
// Parsers for Redis replies. They take text or a reply tree and never trust lengths or formats:
// the fuzzers in tests/fuzz feed them arbitrary bytes.

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/text.h"

struct redisReply;

namespace thptrace::redis {

// INFO: every "key:value" line, sections merged; comments and blank lines skipped.
using InfoMap = std::map<std::string, std::string>;
InfoMap parse_info(std::string_view text);

std::optional<int64_t> info_int(const InfoMap& info, const std::string& key);
std::string info_str(const InfoMap& info, const std::string& key);

// One "slaveN:ip=...,port=...,state=...,offset=...,lag=..." line of INFO replication.
// state: wait_bgsave, send_bulk, online; Redis 8 send_bulk_and_stream (rdb channel); Valkey 8
// bg_transfer (dual channel; its rdb-channel line and main-channel line merged into one entry).
struct ReplicaInfo {
  std::string ip;
  int port = 0;
  std::string state;
  int64_t offset = 0;
  int64_t lag = 0;
  std::string address() const { return ip + ":" + std::to_string(port); }
  bool operator==(const ReplicaInfo&) const = default;
};
// In INFO's order, one entry per replica: the kMaxReplicas lowest-numbered lines at most, in time
// linear in the lines listed. *listed (when given): the replica lines INFO had, read or not.
inline constexpr size_t kMaxReplicas = 256;
std::vector<ReplicaInfo> parse_replicas(const InfoMap& info, size_t* listed = nullptr);

// Text from a server (an error reply, a field) as it may go into a log line or a report
// (common/text.h's ascii_printable, at most kMaxServerText bytes unless told).
inline constexpr size_t kMaxServerText = 200;
inline std::string printable(std::string_view text, size_t max_bytes = kMaxServerText) {
  return text::ascii_printable(text, max_bytes);
}

// LATENCY HISTOGRAM summed over every command, on a fixed grid of power-of-two microsecond upper
// bounds: cumulative[i] = calls that took at most 2^i µs. Redis reports cumulative counts only at
// the buckets it has seen; the grid carries each count forward so histograms of different commands
// (and of different moments) can be added and subtracted bucket by bucket.
struct LatencyHistogram {
  static constexpr size_t kBuckets = 40;  // 2^39 µs ≈ 6 days: beyond any real command
  std::array<uint64_t, kBuckets> cumulative{};
  uint64_t calls = 0;

  // this - earlier, bucket by bucket (clamped at zero: a CONFIG RESETSTAT in between).
  LatencyHistogram minus(const LatencyHistogram& earlier) const;
  // Upper bound in µs of the bucket holding quantile q (0 < q <= 1); nullopt when empty.
  std::optional<double> quantile_us(double q) const;
  uint64_t total() const { return cumulative.back(); }
};

// The RESP2 reply of LATENCY HISTOGRAM: [name, [ "calls", n, "histogram_usec", [b, c, ...] ], ...].
std::optional<LatencyHistogram> parse_latency_histogram(const redisReply* reply);

// CONFIG GET k1 k2 ... reply: flat [key, value, key, value, ...].
std::map<std::string, std::string> parse_config_get(const redisReply* reply);

// The replica class of CONFIG GET client-output-buffer-limit ("normal 0 0 0 slave 268435456
// 67108864 60 pubsub ..."; "replica" in Valkey): hard and soft limits in bytes, soft seconds.
struct OutputBufferLimit {
  uint64_t hard_bytes = 0, soft_bytes = 0;
  uint64_t soft_seconds = 0;
};
std::optional<OutputBufferLimit> parse_replica_output_buffer_limit(std::string_view config);

// The largest output buffer (omem) among the clients of a CLIENT LIST reply; nullopt when it has
// no omem field.
std::optional<uint64_t> max_client_omem(std::string_view client_list);

}  // namespace thptrace::redis
