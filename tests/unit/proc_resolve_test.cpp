// SPDX-License-Identifier: Apache-2.0
// The parsers behind mapping a Redis address to its host process (proc/resolve.h, redis/locate.h),
// fed text recorded from a podman container on this machine type (kernel 6.18, netavark bridge).
#include <gtest/gtest.h>

#include "proc/resolve.h"
#include "redis/locate.h"

using namespace thptrace::proc;

namespace {

// /proc/19110/net/tcp of a redis-server in its own network namespace (10.88.0.10), listening on
// *:6379, with one client NATed in from the host (10.88.0.1:52978).
const char* kContainerTcp =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 00000000:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 78580 1 "
    "000000007f57a993 100 0 0 10 0\n"
    "   1: 0A00580A:18EB 0100580A:CEF2 01 00000000:00000000 02:000074B8 00000000     0        0 134811 2 "
    "000000005971f97b 20 4 31 11 -1\n";

}  // namespace

TEST(NetTcp, ParsesListenerAndConnectionOfAContainer) {
  const auto s = parse_net_tcp(kContainerTcp);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].state, kTcpListen);
  EXPECT_EQ(s[0].local, (Endpoint{"0.0.0.0", 6379}));
  EXPECT_TRUE(s[0].local.wildcard());
  EXPECT_EQ(s[0].inode, 78580u);
  EXPECT_EQ(s[1].state, kTcpEstablished);
  EXPECT_EQ(s[1].local, (Endpoint{"10.88.0.10", 6379}));
  EXPECT_EQ(s[1].remote, (Endpoint{"10.88.0.1", 52978}));
  EXPECT_EQ(s[1].inode, 134811u);
}

TEST(NetTcp, ParsesIpv6AndMappedIpv4) {
  const char* text =
      "  sl  local_address                         remote_address                        st tx_queue rx_queue tr "
      "tm->when retrnsmt   uid  timeout inode\n"
      "   0: 00000000000000000000000001000000:18EB 00000000000000000000000000000000:0000 0A 00000000:00000000 "
      "00:00000000 00000000   107        0 5555 1 0000000000000000 100 0 0 10 0\n"
      "   1: 0000000000000000FFFF00000100007F:18EB 0000000000000000FFFF00000100007F:D431 01 00000000:00000000 "
      "00:00000000 00000000   107        0 5556 1 0000000000000000 20 4 30 10 -1\n";
  const auto s = parse_net_tcp(text);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].local, (Endpoint{"::1", 6379}));
  EXPECT_TRUE(s[0].local.loopback());
  EXPECT_EQ(s[0].local.str(), "[::1]:6379");
  EXPECT_EQ(s[1].local, (Endpoint{"127.0.0.1", 6379}));
  EXPECT_EQ(s[1].remote, (Endpoint{"127.0.0.1", 54321}));
}

TEST(NetTcp, SkipsHeaderAndGarbage) {
  EXPECT_TRUE(parse_net_tcp("").empty());
  EXPECT_TRUE(parse_net_tcp("  sl  local_address rem_address st\n").empty());
  EXPECT_TRUE(parse_net_tcp("   0: 0100007F 00000000:0000 0A 0:0 0:0 0 0 0 1\n").empty());
  EXPECT_TRUE(parse_net_tcp("   0: 0100007F:XYZ 00000000:0000 0A 0:0 0:0 0 0 0 1\n").empty());
  EXPECT_TRUE(parse_net_tcp("   0: 0100007F:18EB 00000000:0000 0A 0:0 0:0 0 0 0 notaninode\n").empty());
}

TEST(Endpoint, ParsesRedisAddresses) {
  EXPECT_EQ(parse_endpoint("10.88.0.10:6379"), (Endpoint{"10.88.0.10", 6379}));
  EXPECT_EQ(parse_endpoint("[::1]:6379"), (Endpoint{"::1", 6379}));
  EXPECT_EQ(parse_endpoint("[::ffff:10.88.0.1]:40000"), (Endpoint{"10.88.0.1", 40000}));
  EXPECT_EQ(parse_endpoint("::ffff:10.88.0.1:40000"), (Endpoint{"10.88.0.1", 40000}));
  EXPECT_FALSE(parse_endpoint("localhost:6379"));
  EXPECT_FALSE(parse_endpoint("10.0.0.1"));
  EXPECT_FALSE(parse_endpoint("10.0.0.1:99999"));
  EXPECT_FALSE(parse_endpoint(""));
}

TEST(SocketLink, ParsesOnlySockets) {
  EXPECT_EQ(parse_socket_link("socket:[134811]"), 134811u);
  EXPECT_FALSE(parse_socket_link("pipe:[134811]"));
  EXPECT_FALSE(parse_socket_link("socket:[]"));
  EXPECT_FALSE(parse_socket_link("socket:[12"));
  EXPECT_FALSE(parse_socket_link("/dev/null"));
}

TEST(Stat, StartAndCpuTimeEvenWithParenthesesInTheName) {
  const std::string rest =
      " S 19097 19110 19110 0 -1 4194560 1900 0 0 0 97 99 0 0 20 0 5 0 105688 62259200 3069 "
      "18446744073709551615 94366240038912 94366241181373 140729473453456 0 0 0 0 12289 17642 0 0 0 17 1 0";
  EXPECT_EQ(parse_stat_start_ticks("19110 (redis-server)" + rest), 105688u);
  EXPECT_EQ(parse_stat_start_ticks("19110 (a) b) (c)" + rest), 105688u);
  EXPECT_FALSE(parse_stat_start_ticks("19110 (x) S 1 2"));
  EXPECT_FALSE(parse_stat_start_ticks("garbage"));
  // utime (97) and stime (99), fields 14 and 15.
  EXPECT_EQ(parse_stat_cpu_ticks("19110 (a) b) (c)" + rest), 196u);
  EXPECT_FALSE(parse_stat_cpu_ticks("19110 (x) S 1 2 3 4 5 6 7 8 9 10"));
  EXPECT_FALSE(parse_stat_cpu_ticks("19110 (x) S 1 2 3 4 5 6 7 8 9 10 11 -12"));
}

TEST(Uptime, FirstNumber) {
  EXPECT_DOUBLE_EQ(*parse_uptime("1234.56 2000.00\n"), 1234.56);
  EXPECT_FALSE(parse_uptime(""));
  EXPECT_FALSE(parse_uptime("x 1\n"));
}

TEST(Nspid, OutermostFirst) {
  EXPECT_EQ(parse_nspid("Name:\tredis-server\nTgid:\t19110\nNSpid:\t19110\t1\n"), (std::vector<pid_t>{19110, 1}));
  EXPECT_EQ(parse_nspid("NSpid:\t42\n"), (std::vector<pid_t>{42}));
  EXPECT_TRUE(parse_nspid("Name:\tx\n").empty());  // before Linux 4.1
  EXPECT_TRUE(parse_nspid("NSpid:\t42 x\n").empty());
}

TEST(FibTrie, LocalAddressesOfAContainer) {
  const char* trie =
      "Main:\n  +-- 0.0.0.0/1 2 0 2\n     +-- 0.0.0.0/4 2 0 2\n        |-- 0.0.0.0\n           /0 universe UNICAST\n"
      "        +-- 10.88.0.0/16 2 0 2\n           +-- 10.88.0.0/28 2 0 2\n              |-- 10.88.0.0\n"
      "                 /16 link UNICAST\n              |-- 10.88.0.10\n                 /32 host LOCAL\n"
      "           |-- 10.88.255.255\n              /32 link BROADCAST\n     +-- 127.0.0.0/8 2 0 2\n"
      "        +-- 127.0.0.0/31 1 0 0\n           |-- 127.0.0.0\n              /8 host LOCAL\n"
      "           |-- 127.0.0.1\n              /32 host LOCAL\n"
      "Local:\n  +-- 0.0.0.0/1 2 0 2\n              |-- 10.88.0.10\n                 /32 host LOCAL\n";
  EXPECT_EQ(parse_local_ipv4(trie), (std::vector<std::string>{"10.88.0.10"}));
  EXPECT_TRUE(parse_local_ipv4("").empty());
}

TEST(StartTime, MatchesUptimeWithinTwoSeconds) {
  EXPECT_TRUE(start_matches_uptime(100.4, 100));
  EXPECT_TRUE(start_matches_uptime(101.9, 100));
  EXPECT_FALSE(start_matches_uptime(3600, 5));
  EXPECT_FALSE(start_matches_uptime(5, 3600));
}

TEST(Claim, FromClientInfoAndInfo) {
  const auto c = thptrace::redis::claim_from_replies(
      "127.0.0.1:16401",
      "id=4 addr=10.88.0.1:57326 laddr=10.88.0.10:6379 fd=7 name= age=0 idle=0 flags=N db=0 sub=0 psub=0 "
      "cmd=client|info user=default redir=-1 resp=2\n",
      "# Server\r\nredis_version:7.0.15\r\nprocess_id:1\r\nuptime_in_seconds:4\r\n");
  EXPECT_EQ(c.address, "127.0.0.1:16401");
  EXPECT_EQ(c.server_side, (Endpoint{"10.88.0.10", 6379}));
  EXPECT_EQ(c.client_side, (Endpoint{"10.88.0.1", 57326}));
  EXPECT_EQ(c.process_id, 1);
  EXPECT_EQ(c.uptime_s, 4);
  // Redis < 6.2: no CLIENT INFO, so no socket pair.
  const auto old = thptrace::redis::claim_from_replies("127.0.0.1:6379", "", "process_id:77\r\n");
  EXPECT_FALSE(old.server_side);
  EXPECT_EQ(old.process_id, 77);
  EXPECT_FALSE(old.uptime_s);
}
