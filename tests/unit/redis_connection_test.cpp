// SPDX-License-Identifier: Apache-2.0
// Address forms, the flags that say how to reach Redis, the listeners read from /proc/PID/net and
// the order --discover tries them in. No server, no privilege.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "daemon/discovery.h"
#include "proc/net.h"
#include "redis/address.h"
#include "redis/credentials.h"

namespace thptrace {
namespace {

using redis::parse_address;

TEST(Address, UnixSocketPaths) {
  const auto a = parse_address("unix:/run/redis/redis-server.sock");
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->is_unix());
  EXPECT_EQ(a->path, "/run/redis/redis-server.sock");
  EXPECT_EQ(a->str(), "unix:/run/redis/redis-server.sock");
  // "unix:6379" is the host named unix; a socket path is absolute.
  const auto host = parse_address("unix:6379");
  ASSERT_TRUE(host);
  EXPECT_FALSE(host->is_unix());
  EXPECT_EQ(host->host, "unix");
  EXPECT_FALSE(parse_address("unix:"));
  EXPECT_FALSE(parse_address("unix:relative.sock"));
  EXPECT_TRUE(parse_address("unix:/" + std::string(redis::kMaxUnixPath - 1, 'x')));
  EXPECT_FALSE(parse_address("unix:/" + std::string(redis::kMaxUnixPath, 'x')));
  EXPECT_FALSE(parse_address(std::string("unix:/a\0b", 9)));
}

TEST(Address, Ipv6PrintsBracketedAndReadsBack) {
  const auto a = parse_address("[::1]:7000");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->str(), "[::1]:7000");
  EXPECT_EQ(parse_address(a->str())->host, "::1");
  EXPECT_FALSE(parse_address("[abc]:1")) << "brackets hold an IPv6 literal";
}

TEST(ConnectionSettings, TlsFilesNeedTlsAndTheKeyNeedsTheCertificate) {
  redis::ConnectionSettings s;
  EXPECT_EQ(redis::check_settings(s), "");
  s.tls_options.cacert = "/ca.crt";
  EXPECT_EQ(redis::check_settings(s), "--redis-cacert applies to TLS connections only: add --redis-tls.");
  s.tls = true;
  EXPECT_EQ(redis::check_settings(s), "");
  s.tls_options.key = "/client.key";
  EXPECT_EQ(redis::check_settings(s), "--redis-cert and --redis-key go together: give both or neither.");
}

TEST(ConnectionSettings, UnreadableTlsFilesAreOneSentenceEach) {
  redis::ConnectionSettings s;
  s.tls = true;
  s.tls_options.cacert = "/nonexistent/ca.crt";
  std::string error;
  EXPECT_FALSE(redis::load_credentials(s, &error));
  EXPECT_EQ(error.rfind("cannot read the CA certificates of --redis-cacert /nonexistent/ca.crt (", 0), 0u) << error;
  s.tls_options.cacert.clear();
  s.tls_options.cert = "/nonexistent/client.crt";
  s.tls_options.key = "/nonexistent/client.key";
  EXPECT_FALSE(redis::load_credentials(s, &error));
  EXPECT_EQ(error.rfind("cannot read the client certificate --redis-cert /nonexistent/client.crt (", 0), 0u) << error;
}

constexpr const char* kTcp =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 0100007F:4267 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 21657 1 0 100 0 0 10 0\n"
    "   1: 00000000:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000   101        0 777 1 0 100 0 0 10 0\n"
    "   2: 0100007F:4267 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 888 1 0 20 4 30 10 -1\n"
    "   3: garbage\n";
constexpr const char* kTcp6 =
    "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 00000000000000000000000001000000:1AE1 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 999 1 0 100 0 0 10 0\n";
constexpr const char* kUnix =
    "Num       RefCount Protocol Flags    Type St Inode Path\n"
    "0000000000000000: 00000002 00000000 00010000 0001 01 47318 /tmp/redis dir/redis.sock\n"
    "0000000000000000: 00000003 00000000 00000000 0001 03 47319 /tmp/redis dir/redis.sock\n"
    "0000000000000000: 00000002 00000000 00010000 0001 01 47320 @abstract\n"
    "0000000000000000: 00000002 00000000 00010000 0002 01 47321 /dgram.sock\n"
    "0000000000000000: 00000002 00000000 00010000 0001 01 47322\n";

TEST(ProcNet, TcpSocketsAndUnixListeners) {
  const auto v4 = proc::parse_net_tcp(kTcp);
  ASSERT_EQ(v4.size(), 3u);
  EXPECT_EQ(v4[0].local, (proc::Endpoint{"127.0.0.1", 16999}));
  EXPECT_EQ(v4[0].state, proc::kTcpListen);
  EXPECT_EQ(v4[0].inode, 21657u);
  EXPECT_EQ(v4[1].local, (proc::Endpoint{"0.0.0.0", 6379}));
  EXPECT_EQ(v4[2].state, proc::kTcpEstablished);
  EXPECT_EQ(v4[2].remote, (proc::Endpoint{"127.0.0.1", 50000}));
  const auto v6 = proc::parse_net_tcp(kTcp6);
  ASSERT_EQ(v6.size(), 1u);
  EXPECT_EQ(v6[0].local, (proc::Endpoint{"::1", 6881}));
  EXPECT_EQ(v6[0].state, proc::kTcpListen);
  const auto unix_sockets = proc::parse_unix_listeners(kUnix);
  ASSERT_EQ(unix_sockets.size(), 1u);
  EXPECT_EQ(unix_sockets[0].path, "/tmp/redis dir/redis.sock");
  EXPECT_EQ(unix_sockets[0].inode, 47318u);
  EXPECT_TRUE(proc::parse_net_tcp("").empty());
}

TEST(Discovery, UnixSocketThenPlainLoopbackThenTls) {
  proc::Listeners l;
  l.tcp = {{"10.0.0.5", 6379}, {"0.0.0.0", 16379}, {"0.0.0.0", 6380}, {"::", 6379}};
  l.unix_sockets = {{"/run/redis/redis.sock", 5}};
  std::string error;
  const auto tls = redis::TlsContext::create({}, &error);
  ASSERT_TRUE(tls) << error;
  const auto d = daemon::plan_routes(l, "127.0.0.1:6380", tls);
  std::vector<std::string> order;
  for (const auto& r : d.routes) order.push_back(r.address.str() + (r.tls ? "+tls" : ""));
  EXPECT_EQ(order, (std::vector<std::string>{"unix:/run/redis/redis.sock", "127.0.0.1:6380", "127.0.0.1:16379",
                                             "[::1]:6379", "10.0.0.5:6379", "127.0.0.1:6380+tls",
                                             "127.0.0.1:16379+tls", "[::1]:6379+tls", "10.0.0.5:6379+tls"}));
  EXPECT_EQ(d.label, "127.0.0.1:6380") << "the listener the title names";
  // With a password to send, the TLS routes go first: it is sent only after a certificate is verified.
  const auto first = daemon::plan_routes(l, "127.0.0.1:6380", tls, nullptr, true);
  order.clear();
  for (const auto& r : first.routes) order.push_back(r.address.str() + (r.tls ? "+tls" : ""));
  EXPECT_EQ(order, (std::vector<std::string>{"127.0.0.1:6380+tls", "127.0.0.1:16379+tls", "[::1]:6379+tls",
                                             "10.0.0.5:6379+tls", "unix:/run/redis/redis.sock", "127.0.0.1:6380",
                                             "127.0.0.1:16379", "[::1]:6379", "10.0.0.5:6379"}));
  EXPECT_EQ(first.label, "127.0.0.1:6380");
}

// A label is an address the process was seen to listen on: a title names nothing by itself (any
// process can call itself "redis-server 127.0.0.1:6379" and take a real server's label).
TEST(Discovery, LabelsComeFromListenersNeverFromATitleAlone) {
  proc::Listeners l;
  l.unix_sockets = {{"/tmp/r.sock", 1}};
  EXPECT_EQ(daemon::plan_routes(l, "", nullptr).label, "unix:/tmp/r.sock");
  EXPECT_EQ(daemon::plan_routes(l, "127.0.0.1:6379", nullptr).label, "unix:/tmp/r.sock");
  EXPECT_EQ(daemon::plan_routes({}, "", nullptr).label, "redis-server");
  const auto from_title = daemon::plan_routes({}, "127.0.0.1:7000", nullptr);
  ASSERT_EQ(from_title.routes.size(), 1u);
  EXPECT_EQ(from_title.routes[0].address.str(), "127.0.0.1:7000");
  EXPECT_EQ(from_title.label, "redis-server") << "tried, but not named after its title";
  proc::Listeners other;
  other.tcp = {{"127.0.0.1", 7001}};
  EXPECT_EQ(daemon::plan_routes(other, "127.0.0.1:6379", nullptr).label, "127.0.0.1:7001");
}

// Credentials go to a TLS route (verified before AUTH), to a process running an allowed executable,
// or to a listed address; every other route carries why not.
TEST(Discovery, CredentialsAreWithheldFromRoutesNobodyAllowed) {
  proc::Listeners l;
  l.tcp = {{"127.0.0.1", 6379}, {"127.0.0.1", 6380}};
  l.unix_sockets = {{"/run/redis.sock", 3}};
  std::string error;
  const auto tls = redis::TlsContext::create({}, &error);
  ASSERT_TRUE(tls) << error;
  daemon::CredentialPolicy policy;
  policy.addresses = {*redis::parse_address("127.0.0.1:6380")};
  auto s = daemon::plan_routes(l, "", tls, nullptr, true);
  daemon::withhold_credentials(s, policy, false, "its executable /tmp/redis-server is not allowed");
  std::vector<std::string> allowed, withheld;
  for (const auto& r : s.routes)
    (r.withheld.empty() ? allowed : withheld).push_back(r.address.str() + (r.tls ? "+tls" : ""));
  EXPECT_EQ(allowed, (std::vector<std::string>{"127.0.0.1:6379+tls", "127.0.0.1:6380+tls", "127.0.0.1:6380"}));
  EXPECT_EQ(withheld, (std::vector<std::string>{"unix:/run/redis.sock", "127.0.0.1:6379"}));
  for (const auto& r : s.routes) {
    if (!r.withheld.empty()) {
      EXPECT_NE(r.withheld.find("/tmp/redis-server"), std::string::npos) << r.withheld;
    }
  }
  auto trusted = daemon::plan_routes(l, "", tls, nullptr, true);
  daemon::withhold_credentials(trusted, {}, true, "");
  for (const auto& r : trusted.routes) EXPECT_TRUE(r.withheld.empty()) << r.address.str();
}

// The executable is compared by inode: the running test binary passes as itself, not as a copy of it
// at another path, nor as a different file.
TEST(Discovery, AnAllowedExecutableIsTheSameFileNotTheSameName) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  std::string why;
  EXPECT_TRUE(daemon::runs_allowed_executable(::getpid(), {"/nonexistent/redis-server", self}, &why)) << why;
  const std::string copy = std::filesystem::temp_directory_path() / ("thptrace-exe-copy-" + std::to_string(::getpid()));
  std::filesystem::copy_file(self, copy, std::filesystem::copy_options::overwrite_existing);
  EXPECT_FALSE(daemon::runs_allowed_executable(::getpid(), {copy}, &why));
  EXPECT_NE(why.find(self), std::string::npos) << why;
  EXPECT_NE(why.find("--discover-credentials-exe"), std::string::npos) << why;
  std::filesystem::remove(copy);
  EXPECT_FALSE(daemon::runs_allowed_executable(::getpid(), {}, &why));
}

// A container whose network namespace the daemon cannot enter (no CAP_SYS_ADMIN): its TCP
// listeners are reached from outside by its own addresses; its loopback is out of reach; its unix
// socket still is (through /proc/PID/root, which needs no setns).
TEST(Discovery, ANamespaceThatCannotBeEnteredIsReachedByItsOwnAddresses) {
  proc::Listeners l;
  l.tcp = {{"0.0.0.0", 6379}, {"127.0.0.1", 6380}, {"10.88.0.7", 7000}};
  l.unix_sockets = {{"/run/redis.sock", 4}};
  const std::vector<std::string> ips = {"10.88.0.7", "192.0.2.9"};
  const auto d = daemon::plan_routes(l, "127.0.0.1:6379", nullptr, &ips);
  std::vector<std::string> order;
  for (const auto& r : d.routes) order.push_back(r.address.str() + (r.outside ? " outside" : ""));
  EXPECT_EQ(order, (std::vector<std::string>{"unix:/run/redis.sock", "10.88.0.7:6379 outside", "192.0.2.9:6379 outside",
                                             "10.88.0.7:7000 outside"}));
  EXPECT_EQ(d.label, "10.88.0.7:6379") << "not the title's loopback address, which we cannot reach";
  // Loopback only: nothing reaches it from outside, and the title's address is not tried either.
  proc::Listeners lo;
  lo.tcp = {{"127.0.0.1", 6379}};
  const auto none = daemon::plan_routes(lo, "127.0.0.1:6379", nullptr, &ips);
  EXPECT_TRUE(none.routes.empty());
  EXPECT_EQ(none.label, "redis-server");
}

TEST(Discovery, LocalAddressesFromFibTrie) {
  // /proc/net/fib_trie of a podman bridge container (abridged): each address appears in the Main and
  // the Local table; the network and broadcast leaves are not the interface's own.
  constexpr std::string_view kFibTrie = R"(Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.88.0.0/16 2 0 2
        +-- 10.88.0.0/28 2 0 2
           |-- 10.88.0.0
              /16 link UNICAST
           |-- 10.88.0.7
              /32 host LOCAL
        |-- 10.88.255.255
           /32 link BROADCAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 10.88.0.7
        /32 host LOCAL
     |-- 192.0.2.9
        /24 link UNICAST
        /32 host LOCAL
     |-- garbage
        /32 host LOCAL
)";
  EXPECT_EQ(proc::parse_local_ipv4(kFibTrie), (std::vector<std::string>{"10.88.0.7", "192.0.2.9"}));
  EXPECT_TRUE(proc::parse_local_ipv4("").empty());
  // A NUL inside the leaf: inet_pton would read "10.0.0.9" and stop there.
  constexpr char kNul[] = "|-- 10.0.0.9\0x\n/32 host LOCAL\n";
  EXPECT_TRUE(proc::parse_local_ipv4(std::string_view(kNul, sizeof kNul - 1)).empty());
  EXPECT_EQ(proc::parse_local_ipv4("|-- 010.0.0.9\n/32 host LOCAL\n|-- 10.0.0.9\n/32 host LOCAL\n"),
            (std::vector<std::string>{"10.0.0.9"}));
  EXPECT_TRUE(proc::parse_local_ipv4("/32 host LOCAL\n").empty());
}

}  // namespace
}  // namespace thptrace
