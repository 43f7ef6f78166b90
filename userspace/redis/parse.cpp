// SPDX-License-Identifier: Apache-2.0
#include "redis/parse.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <unordered_map>

namespace thptrace::redis {
namespace {

template <typename T>
bool to_number(std::string_view s, T& out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size() && !s.empty();
}

std::string_view reply_str(const redisReply* r) {
  if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS) || !r->str) return {};
  return {r->str, r->len};
}

// Counts come from the server: a sum that would wrap saturates instead, which keeps a summed
// histogram monotone (tests/fuzz found three commands near 2^63 calls each breaking it).
uint64_t add_saturating(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

std::optional<long long> reply_int(const redisReply* r) {
  if (!r) return std::nullopt;
  if (r->type == REDIS_REPLY_INTEGER) return r->integer;
  long long v = 0;
  if (to_number(reply_str(r), v)) return v;
  return std::nullopt;
}

}  // namespace

InfoMap parse_info(std::string_view text) {
  InfoMap out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    const auto colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) continue;
    out.insert_or_assign(std::string(line.substr(0, colon)), std::string(line.substr(colon + 1)));
  }
  return out;
}

std::optional<int64_t> info_int(const InfoMap& info, const std::string& key) {
  const auto it = info.find(key);
  if (it == info.end()) return std::nullopt;
  int64_t v = 0;
  if (!to_number(std::string_view(it->second), v)) return std::nullopt;
  return v;
}

std::string info_str(const InfoMap& info, const std::string& key) {
  const auto it = info.find(key);
  return it == info.end() ? std::string{} : it->second;
}

namespace {

struct ReplicaLine {
  unsigned index = 0;
  bool rdb_channel = false;
  ReplicaInfo r;
};

ReplicaLine parse_replica_line(unsigned index, std::string_view rest) {
  ReplicaLine line;
  line.index = index;
  ReplicaInfo& r = line.r;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view field = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const auto eq = field.find('=');
    if (eq == std::string_view::npos) continue;
    const auto k = field.substr(0, eq);
    const auto v = field.substr(eq + 1);
    // Printable at once: an address and a state go into labels, logs and reports.
    if (k == "ip")
      r.ip = printable(v, 64);
    else if (k == "port")
      to_number(v, r.port);
    else if (k == "state")
      r.state = printable(v, 32);
    else if (k == "offset")
      to_number(v, r.offset);
    else if (k == "lag")
      to_number(v, r.lag);
    else if (k == "type")
      line.rdb_channel = v == "rdb-channel";
  }
  return line;
}

}  // namespace

std::vector<ReplicaInfo> parse_replicas(const InfoMap& info, size_t* listed) {
  // The slaveN keys are one run of the sorted map: found by their prefix, not by a walk of all.
  std::vector<std::pair<unsigned, const std::string*>> keys;
  for (auto it = info.lower_bound("slave"); it != info.end() && it->first.rfind("slave", 0) == 0; ++it) {
    unsigned index = 0;
    if (it->first.size() > 5 && to_number(std::string_view(it->first).substr(5), index))
      keys.emplace_back(index, &it->second);
  }
  if (listed) *listed = keys.size();
  // INFO's order (slave10 after slave9, not after slave1), and only the first kMaxReplicas of it.
  const auto by_index = [](const auto& a, const auto& b) { return a.first < b.first; };
  if (keys.size() > kMaxReplicas) {
    std::nth_element(keys.begin(), keys.begin() + kMaxReplicas, keys.end(), by_index);
    keys.resize(kMaxReplicas);
  }
  std::sort(keys.begin(), keys.end(), by_index);
  // Valkey 8's dual-channel replication lists a syncing replica twice under one address: its rdb
  // channel (type=rdb-channel: wait_bgsave, send_bulk) and its main channel (type=main-channel:
  // bg_transfer, the stream buffered until the RDB is loaded). One replica, one entry: in the rdb
  // channel's state while that is listed (the sync's earlier step), with the main channel's offset.
  std::vector<ReplicaInfo> out;
  // An entry's index in out by its address and channel, so a merge is found without a scan.
  std::unordered_map<std::string, size_t> entry_of;
  for (const auto& [index, value] : keys) {
    ReplicaLine line = parse_replica_line(index, *value);
    const std::string address = line.r.address();
    const auto same = entry_of.find(address + (line.rdb_channel ? "/main" : "/rdb"));
    if (same == entry_of.end()) {
      entry_of.emplace(address + (line.rdb_channel ? "/rdb" : "/main"), out.size());
      out.push_back(std::move(line.r));
      continue;
    }
    ReplicaInfo& merged = out[same->second];
    if (line.rdb_channel) {
      merged.state = line.r.state;
    } else {
      merged.offset = line.r.offset;
      merged.lag = line.r.lag;
    }
  }
  return out;
}

LatencyHistogram LatencyHistogram::minus(const LatencyHistogram& earlier) const {
  LatencyHistogram d;
  for (size_t i = 0; i < kBuckets; ++i)
    d.cumulative[i] = cumulative[i] > earlier.cumulative[i] ? cumulative[i] - earlier.cumulative[i] : 0;
  // Keep the difference monotone: a reset in between can leave it ragged.
  for (size_t i = 1; i < kBuckets; ++i) d.cumulative[i] = std::max(d.cumulative[i], d.cumulative[i - 1]);
  d.calls = calls > earlier.calls ? calls - earlier.calls : 0;
  return d;
}

std::optional<double> LatencyHistogram::quantile_us(double q) const {
  const uint64_t n = total();
  if (n == 0 || q <= 0 || q > 1) return std::nullopt;
  // The rank of the q-quantile, rounded up: p99.9 of 1000 calls is the 999th. It is at most n,
  // which is compared in double first: a total near 2^64 rounds up to 2^64 there, and converting
  // that back is undefined (found by tests/fuzz).
  const double r = std::max(1.0, std::ceil(q * static_cast<double>(n)));
  const uint64_t rank = r >= static_cast<double>(n) ? n : static_cast<uint64_t>(r);
  for (size_t i = 0; i < kBuckets; ++i)
    if (cumulative[i] >= rank) return static_cast<double>(uint64_t{1} << i);
  return static_cast<double>(uint64_t{1} << (kBuckets - 1));
}

std::optional<LatencyHistogram> parse_latency_histogram(const redisReply* reply) {
  if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements % 2 != 0) return std::nullopt;
  LatencyHistogram sum;
  for (size_t i = 0; i + 1 < reply->elements; i += 2) {
    const redisReply* body = reply->element[i + 1];
    if (!body || body->type != REDIS_REPLY_ARRAY || body->elements % 2 != 0) return std::nullopt;
    std::array<uint64_t, LatencyHistogram::kBuckets> cmd{};
    for (size_t j = 0; j + 1 < body->elements; j += 2) {
      const auto key = reply_str(body->element[j]);
      const redisReply* val = body->element[j + 1];
      if (key == "calls") {
        if (const auto c = reply_int(val); c && *c >= 0) sum.calls = add_saturating(sum.calls, static_cast<uint64_t>(*c));
      } else if (key == "histogram_usec") {
        if (!val || val->type != REDIS_REPLY_ARRAY || val->elements % 2 != 0) return std::nullopt;
        for (size_t k = 0; k + 1 < val->elements; k += 2) {
          const auto bound = reply_int(val->element[k]);
          const auto count = reply_int(val->element[k + 1]);
          if (!bound || !count || *bound <= 0 || *count < 0) return std::nullopt;
          // Bucket index of a power-of-two bound; a bound that is not a power of two falls in the
          // next power up, which only coarsens the answer.
          const auto b = static_cast<uint64_t>(*bound);
          size_t idx = static_cast<size_t>(std::bit_width(b - 1));
          idx = std::min(idx, LatencyHistogram::kBuckets - 1);
          cmd[idx] = std::max(cmd[idx], static_cast<uint64_t>(*count));
        }
      }
    }
    // Carry each cumulative count forward to the buckets Redis left out.
    for (size_t b = 1; b < cmd.size(); ++b) cmd[b] = std::max(cmd[b], cmd[b - 1]);
    for (size_t b = 0; b < cmd.size(); ++b) sum.cumulative[b] = add_saturating(sum.cumulative[b], cmd[b]);
  }
  return sum;
}

std::map<std::string, std::string> parse_config_get(const redisReply* reply) {
  std::map<std::string, std::string> out;
  if (!reply || reply->type != REDIS_REPLY_ARRAY) return out;
  for (size_t i = 0; i + 1 < reply->elements; i += 2)
    out.insert_or_assign(std::string(reply_str(reply->element[i])),
                         std::string(reply_str(reply->element[i + 1])));
  return out;
}

std::optional<OutputBufferLimit> parse_replica_output_buffer_limit(std::string_view config) {
  std::vector<std::string_view> words;
  while (!config.empty()) {
    const auto sp = config.find(' ');
    if (sp != 0) words.push_back(config.substr(0, sp));
    config = sp == std::string_view::npos ? std::string_view{} : config.substr(sp + 1);
  }
  for (size_t i = 0; i + 3 < words.size(); i += 4) {
    if (words[i] != "slave" && words[i] != "replica") continue;
    OutputBufferLimit l;
    if (!to_number(words[i + 1], l.hard_bytes) || !to_number(words[i + 2], l.soft_bytes) ||
        !to_number(words[i + 3], l.soft_seconds))
      return std::nullopt;
    return l;
  }
  return std::nullopt;
}

std::optional<uint64_t> max_client_omem(std::string_view client_list) {
  std::optional<uint64_t> out;
  constexpr std::string_view key = " omem=";
  for (auto at = client_list.find(key); at != std::string_view::npos; at = client_list.find(key, at + 1)) {
    const auto from = at + key.size();
    const auto to = client_list.find_first_not_of("0123456789", from);
    uint64_t v = 0;
    if (to_number(client_list.substr(from, (to == std::string_view::npos ? client_list.size() : to) - from), v))
      out = std::max(out.value_or(0), v);
  }
  return out;
}

}  // namespace thptrace::redis
