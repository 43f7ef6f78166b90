// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <cstring>
#include <memory>

#include "redis/client.h"
#include "redis/parse.h"
#include "redis/rdb.h"
#include "redis/watcher.h"

using namespace thptrace::redis;

namespace {

// Builds hiredis reply trees by hand, freed with freeReplyObject like real ones.
redisReply* str(const char* s) {
  auto* r = static_cast<redisReply*>(calloc(1, sizeof(redisReply)));
  r->type = REDIS_REPLY_STRING;
  r->len = strlen(s);
  r->str = strdup(s);
  return r;
}
redisReply* num(long long v) {
  auto* r = static_cast<redisReply*>(calloc(1, sizeof(redisReply)));
  r->type = REDIS_REPLY_INTEGER;
  r->integer = v;
  return r;
}
redisReply* arr(std::initializer_list<redisReply*> items) {
  auto* r = static_cast<redisReply*>(calloc(1, sizeof(redisReply)));
  r->type = REDIS_REPLY_ARRAY;
  r->elements = items.size();
  r->element = static_cast<redisReply**>(calloc(items.size() ? items.size() : 1, sizeof(redisReply*)));
  size_t i = 0;
  for (auto* x : items) r->element[i++] = x;
  return r;
}
struct Free {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Owned = std::unique_ptr<redisReply, Free>;

}  // namespace

TEST(Info, ParsesSectionsAndReplicas) {
  const char* text =
      "# Server\r\nredis_version:7.0.15\r\nprocess_id:777\r\n\r\n# Persistence\r\nrdb_bgsave_in_progress:1\r\n"
      "latest_fork_usec:1234\r\ncurrent_fork_perc:12.50\r\n# Replication\r\nrole:master\r\nconnected_slaves:2\r\n"
      "slave0:ip=127.0.0.1,port=7001,state=wait_bgsave,offset=0,lag=0\r\n"
      "slave1:ip=127.0.0.1,port=7002,state=online,offset=99,lag=1\r\n# Stats\r\ntotal_forks:5\r\nsync_full:2\r\n";
  const auto info = parse_info(text);
  EXPECT_EQ(info_str(info, "redis_version"), "7.0.15");
  EXPECT_EQ(info_int(info, "latest_fork_usec").value(), 1234);
  EXPECT_FALSE(info_int(info, "role"));
  const auto replicas = parse_replicas(info);
  ASSERT_EQ(replicas.size(), 2u);
  EXPECT_EQ(replicas[0].port, 7001);
  EXPECT_EQ(replicas[0].state, "wait_bgsave");
  EXPECT_EQ(replicas[1].offset, 99);
  const auto snap = snapshot_from_info(info, 42);
  EXPECT_TRUE(snap.up);
  EXPECT_TRUE(snap.rdb_bgsave_in_progress);
  EXPECT_TRUE(snap.replica_waiting_bgsave);
  EXPECT_EQ(snap.total_forks, 5);
  EXPECT_EQ(snap.sync_full, 2);
  EXPECT_DOUBLE_EQ(snap.current_fork_perc, 12.5);
  EXPECT_EQ(snap.process_id, 777);
}

TEST(Info, IgnoresMalformedLines) {
  const auto info = parse_info(":novalue\nnocolon\n#comment:1\nk:v:w\n");
  EXPECT_EQ(info.size(), 1u);
  EXPECT_EQ(info_str(info, "k"), "v:w");
  EXPECT_TRUE(parse_replicas(parse_info("slave:junk\nslavex:ip=1\n")).empty());
}

// A hostile INFO listing 100,000 replicas: the first kMaxReplicas (by number, not by the map's text
// order) are read, the count listed is kept, and the Valkey channel merge still finds its pairs.
TEST(Info, ReplicaListsAreCappedAndReadInOrder) {
  std::string text = "# Replication\r\nrole:master\r\n";
  for (int k = 99'999; k >= 0; --k)
    text += "slave" + std::to_string(k) + ":ip=10.0." + std::to_string(k / 256 % 256) + "." + std::to_string(k % 256) +
            ",port=" + std::to_string(1000 + k) + ",state=online,offset=" + std::to_string(k) + ",lag=0\r\n";
  const auto info = parse_info(text);
  size_t listed = 0;
  const auto replicas = parse_replicas(info, &listed);
  EXPECT_EQ(listed, 100'000u);
  ASSERT_EQ(replicas.size(), kMaxReplicas);
  for (size_t i = 0; i < replicas.size(); ++i) ASSERT_EQ(replicas[i].offset, static_cast<int64_t>(i));
  EXPECT_EQ(replicas.back().port, 1000 + static_cast<int>(kMaxReplicas) - 1);
  const auto snap = snapshot_from_info(info, 1);
  EXPECT_EQ(snap.replicas.size(), kMaxReplicas);
  EXPECT_EQ(snap.replicas_listed, 100'000u);

  // Dual-channel lines of one address merge, also among many.
  std::string pairs;
  for (int k = 0; k < 100; ++k) {
    const std::string port = std::to_string(2000 + k);
    pairs += "slave" + std::to_string(2 * k) + ":ip=10.1.1.1,port=" + port + ",state=wait_bgsave,type=rdb-channel\n";
    pairs += "slave" + std::to_string(2 * k + 1) + ":ip=10.1.1.1,port=" + port +
             ",state=bg_transfer,offset=7,lag=3,type=main-channel\n";
  }
  const auto merged = parse_replicas(parse_info(pairs), &listed);
  EXPECT_EQ(listed, 200u);
  ASSERT_EQ(merged.size(), 100u);
  EXPECT_EQ(merged[99].port, 2099);
  EXPECT_EQ(merged[99].state, "wait_bgsave");
  EXPECT_EQ(merged[99].offset, 7);
}

TEST(Info, ServerTextIsCutAndEscaped) {
  EXPECT_EQ(printable("NOPERM no"), "NOPERM no");
  EXPECT_EQ(printable(std::string("a\xff\x01\x1b[m\\b\n", 9)), "a\\xff\\x01\\x1b[m\\x5cb\\x0a");
  EXPECT_EQ(printable(std::string(500, 'y')), std::string(kMaxServerText, 'y') + "...");
  EXPECT_EQ(printable("abcdef", 3), "abc...");
  EXPECT_EQ(printable(""), "");
  // Replica fields reach labels and logs: escaped where they are read.
  const auto r = parse_replicas(parse_info("slave0:ip=\xff\x1b,port=1,state=on\x7fline\n"));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].ip, "\\xff\\x1b");
  EXPECT_EQ(r[0].state, "on\\x7fline");
}

TEST(LatencyHistogram, SumsCommandsOnAPowerOfTwoGrid) {
  // SET: 90 calls ≤ 8 µs, 99 ≤ 16 µs, 100 ≤ 1024 µs; GET: 50 calls ≤ 2 µs.
  Owned r(arr({str("set"), arr({str("calls"), num(100), str("histogram_usec"), arr({num(8), num(90), num(16), num(99), num(1024), num(100)})}),
               str("get"), arr({str("calls"), num(50), str("histogram_usec"), arr({num(2), num(50)})})}));
  const auto h = parse_latency_histogram(r.get());
  ASSERT_TRUE(h);
  EXPECT_EQ(h->calls, 150u);
  EXPECT_EQ(h->total(), 150u);
  EXPECT_EQ(h->cumulative[1], 50u);          // ≤ 2 µs: GET only
  EXPECT_EQ(h->cumulative[3], 50u + 90u);    // ≤ 8 µs
  EXPECT_EQ(h->cumulative[9], 50u + 99u);    // ≤ 512 µs: carried forward from 16
  EXPECT_EQ(h->cumulative[10], 150u);        // ≤ 1024 µs
  EXPECT_DOUBLE_EQ(h->quantile_us(0.5).value(), 8.0);
  EXPECT_DOUBLE_EQ(h->quantile_us(0.99).value(), 16.0);
  EXPECT_DOUBLE_EQ(h->quantile_us(1.0).value(), 1024.0);
}

TEST(LatencyHistogram, DiffIsTheWindow) {
  LatencyHistogram a, b;
  for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
    a.cumulative[i] = i >= 3 ? 100 : 0;                  // 100 calls ≤ 8 µs
    b.cumulative[i] = (i >= 3 ? 198 : 0) + (i >= 12 ? 2 : 0);  // +98 fast, +2 at ≤ 4096 µs
  }
  const auto d = b.minus(a);
  EXPECT_EQ(d.total(), 100u);
  EXPECT_DOUBLE_EQ(d.quantile_us(0.5).value(), 8.0);
  EXPECT_DOUBLE_EQ(d.quantile_us(0.999).value(), 4096.0);
  EXPECT_FALSE(LatencyHistogram{}.quantile_us(0.5));
}

TEST(LatencyHistogram, RejectsMalformedReplies) {
  Owned odd(arr({str("set")}));
  EXPECT_FALSE(parse_latency_histogram(odd.get()));
  Owned bad_bucket(arr({str("set"), arr({str("histogram_usec"), arr({num(-1), num(5)})})}));
  EXPECT_FALSE(parse_latency_histogram(bad_bucket.get()));
  Owned not_array(str("ERR"));
  EXPECT_FALSE(parse_latency_histogram(not_array.get()));
  EXPECT_FALSE(parse_latency_histogram(nullptr));
}

TEST(Address, ParsesHostPort) {
  EXPECT_EQ(parse_address("127.0.0.1:6379")->port, 6379);
  EXPECT_EQ(parse_address("[::1]:7000")->host, "::1");
  EXPECT_FALSE(parse_address("localhost"));
  EXPECT_FALSE(parse_address(":6379"));
  EXPECT_FALSE(parse_address("h:0"));
  EXPECT_FALSE(parse_address("h:70000"));
  EXPECT_FALSE(parse_address("h:12x"));
}

// An RDB file's auxiliary fields as Redis 7.0 writes them (its first bytes, from a save of this
// project's tests): used-mem packed as a 4-byte integer; as digits where it does not fit one; and
// files that are not, or stop short.
TEST(RdbHead, UsedMemOfTheLastSave) {
  using namespace std::string_literals;
  const std::string head =
      "REDIS0010"
      "\xfa\x09redis-ver\x06"
      "7.0.15"
      "\xfa\x0aredis-bits\xc0\x40"
      "\xfa\x05"
      "ctime\xc2\x14\xf8\x16\x6b"
      "\xfa\x08used-mem\xc2\x38\xb3\x71\x17"
      "\xfa\x08"
      "aof-base\xc0\x00"
      "\xfe\x00"s;
  EXPECT_EQ(thptrace::redis::rdb_used_mem(head), 393327416u);
  const std::string big =
      "REDIS0011\xfa\x08used-mem\x0a"
      "8589934592\xfe\x00"s;
  EXPECT_EQ(thptrace::redis::rdb_used_mem(big), 8589934592u);
  // An LZF-compressed field before it is skipped.
  const std::string lzf = "REDIS0011\xfa\x01k\xc3\x02\x05xy\xfa\x08used-mem\xc1\x00\x10"s;
  EXPECT_EQ(thptrace::redis::rdb_used_mem(lzf), 4096u);
  EXPECT_EQ(thptrace::redis::rdb_used_mem(head.substr(0, 60)), std::nullopt);    // cut inside it
  EXPECT_EQ(thptrace::redis::rdb_used_mem("REDIS0011\xfe\x00"s), std::nullopt);  // no aux field
  EXPECT_EQ(thptrace::redis::rdb_used_mem("VALKEY080" + head.substr(9)), std::nullopt);
  EXPECT_EQ(thptrace::redis::rdb_used_mem("REDIS0011\xfa\x08used-mem\x03-12"s), std::nullopt);
  EXPECT_EQ(thptrace::redis::rdb_used_mem("REDIS0011\xfa\x08used-mem\xc2\xff\xff\xff\xff"s), std::nullopt);  // -1
  // A length past the bytes there are.
  EXPECT_EQ(thptrace::redis::rdb_used_mem("REDIS0011\xfa\x81\x7f\xff\xff\xff\xff\xff\xff\xffx"s), std::nullopt);
}
