// SPDX-License-Identifier: Apache-2.0
// Replies a hostile or broken Redis could send to make hiredis 0.14 allocate gigabytes: the bounds
// of redis/reply_limits.h on a bare reader, then the client and the watcher against an impostor
// server on loopback.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "redis/client.h"
#include "redis/reply_limits.h"
#include "redis/watcher.h"

namespace thptrace::redis {
namespace {

using namespace std::chrono_literals;

using ReaderPtr = std::unique_ptr<redisReader, decltype(&redisReaderFree)>;
using ReplyPtr = std::unique_ptr<redisReply, decltype(&freeReplyObject)>;

ReaderPtr fed_reader(const std::string& bytes) {
  ReaderPtr reader(redisReaderCreate(), &redisReaderFree);
  redisReaderFeed(reader.get(), bytes.data(), bytes.size());
  return reader;
}

// What the reader makes of what it was fed: a reply, nothing yet (null), or an error (null, err set).
ReplyPtr next_reply(redisReader* reader) {
  void* raw = nullptr;
  redisReaderGetReply(reader, &raw);
  return ReplyPtr(static_cast<redisReply*>(raw), &freeReplyObject);
}

long resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

TEST(ReplyLimits, RepliesOfTheSizeRedisSendsPass) {
  ReaderPtr reader =
      fed_reader("*2\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:7\r\n$14\r\nhistogram_usec\r\n*2\r\n:1\r\n:7\r\n");
  ReplyLimits limits(reader.get());
  ReplyPtr reply = next_reply(reader.get());
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->type, REDIS_REPLY_ARRAY);
  EXPECT_EQ(reply->element[1]->element[3]->element[1]->integer, 7);
  EXPECT_FALSE(limits.refused());
  EXPECT_EQ(limits.refusal(), "");
}

TEST(ReplyLimits, AnArrayHeaderOverTheBoundFailsTheReply) {
  ReaderPtr reader = fed_reader("*2147483647\r\n");
  ReplyLimits limits(reader.get());
  EXPECT_FALSE(next_reply(reader.get()));
  EXPECT_EQ(reader->err, REDIS_ERR_OOM);  // how hiredis reports a create function's null
  EXPECT_EQ(limits.refusal(), "refused an oversized reply to the command: 2147483647 elements (the limit is 1048576)");
}

TEST(ReplyLimits, ArraysOfOneReplyCountTogether) {
  // Each array alone is within the bound; the nested one takes the reply over it.
  ReaderPtr at_bound = fed_reader("*1048576\r\n");
  ReplyLimits at_bound_limits(at_bound.get());
  EXPECT_FALSE(next_reply(at_bound.get()));
  EXPECT_EQ(at_bound->err, 0);  // admitted; hiredis waits for the elements (freed with the reader)

  ReaderPtr nested = fed_reader("*1\r\n*1048576\r\n");
  ReplyLimits limits(nested.get());
  EXPECT_FALSE(next_reply(nested.get()));
  EXPECT_EQ(nested->err, REDIS_ERR_OOM);
  EXPECT_EQ(limits.refusal(), "refused an oversized reply to the command: 1048577 elements (the limit is 1048576)");
}

TEST(ReplyLimits, ABulkHeaderOverTheBoundIsRefusedBeforeItsData) {
  ReaderPtr reader = fed_reader("*2\r\n:1\r\n$1000000000\r\nxyz");
  ReplyLimits limits(reader.get());
  EXPECT_FALSE(next_reply(reader.get()));
  EXPECT_EQ(reader->err, 0);  // hiredis alone would wait for the gigabyte
  EXPECT_FALSE(limits.pending_within_limits());
  EXPECT_EQ(limits.refusal(), "refused an oversized reply to the command: 1000000000 bytes (the limit is 67108864)");

  ReaderPtr at_bound = fed_reader("$67108864\r\nxyz");
  ReplyLimits at_bound_limits(at_bound.get());
  EXPECT_FALSE(next_reply(at_bound.get()));
  EXPECT_TRUE(at_bound_limits.pending_within_limits());
}

TEST(ReplyLimits, EachReplyStartsAfresh) {
  ReaderPtr reader(redisReaderCreate(), &redisReaderFree);
  ReplyLimits limits(reader.get());
  EXPECT_TRUE(limits.admit_elements(kMaxReplyElements));
  EXPECT_FALSE(limits.admit_elements(1));
  EXPECT_TRUE(limits.refused());
  limits.new_reply();
  EXPECT_FALSE(limits.refused());
  EXPECT_TRUE(limits.admit_elements(1));
  EXPECT_TRUE(limits.admit_bytes(kMaxReplyBytes));
  EXPECT_FALSE(limits.admit_bytes(1));
}

// An impostor Redis on 127.0.0.1:<ephemeral>, served by its own thread: the n-th command it
// receives, on any connection, is answered with replies[n] (the last one once they run out), then
// trailer bytes of 'x' for as long as the client takes them (a connection that takes nothing for
// 100 ms is closed). One recv() is taken as one command, which holds for hiredis's commands.
class FakeRedis {
 public:
  explicit FakeRedis(std::vector<std::string> replies, size_t trailer = 0)
      : replies_(std::move(replies)), trailer_(trailer) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0 && listen(listen_fd_, 16) == 0 &&
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeRedis() {
    stop_ = true;
    thread_.join();
    for (int fd : connections_) close(fd);
    close(listen_fd_);
  }
  FakeRedis(const FakeRedis&) = delete;
  FakeRedis& operator=(const FakeRedis&) = delete;

  int port() const { return port_; }
  int accepted() const { return accepted_; }

 private:
  void serve() {
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (int fd : connections_) fds.push_back({fd, POLLIN, 0});
      if (poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) accept_one();
      for (size_t i = 1; i < fds.size(); ++i) {
        char command[4096];
        if (fds[i].revents == 0) continue;
        if (recv(fds[i].fd, command, sizeof(command), 0) > 0 && answer(fds[i].fd)) continue;
        close(fds[i].fd);
        connections_.erase(std::find(connections_.begin(), connections_.end(), fds[i].fd));
      }
    }
  }

  void accept_one() {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    const timeval send_timeout{0, 100'000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
    connections_.push_back(fd);
    ++accepted_;
  }

  // False when the connection is done with: the client went away, or was sent a trailer.
  bool answer(int fd) {
    const std::string& reply = replies_[std::min(commands_++, replies_.size() - 1)];
    if (!send_all(fd, reply.data(), reply.size())) return false;
    if (trailer_ == 0) return true;
    const std::string chunk(1 << 16, 'x');
    for (size_t sent = 0; sent < trailer_ && !stop_; sent += chunk.size())
      if (!send_all(fd, chunk.data(), std::min(chunk.size(), trailer_ - sent))) break;
    return false;
  }

  static bool send_all(int fd, const char* data, size_t size) {
    while (size > 0) {
      const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
      if (n <= 0) return false;
      data += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }

  const std::vector<std::string> replies_;
  const size_t trailer_;
  int listen_fd_ = -1;
  int port_ = 0;
  size_t commands_ = 0;
  std::vector<int> connections_;  // touched by the server thread only, then by the destructor
  std::atomic<int> accepted_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(RedisClientLimits, AReplyWithinTheBoundsArrivesWholeOverManyReads) {
  const std::string value(1 << 20, 'v');
  FakeRedis server({"+PONG\r\n", "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n"});
  ASSERT_GT(server.port(), 0);
  std::string error;
  auto client = Client::connect({"127.0.0.1", server.port()}, "", 5000ms, &error);
  ASSERT_TRUE(client) << error;
  EXPECT_EQ(client->command({"PING"}), "PONG");
  EXPECT_EQ(client->command({"GET", "k"}), value);
  EXPECT_FALSE(client->broken());
}

TEST(RedisClientLimits, OversizedRepliesFailAtOnceWithOneClearError) {
  // The array header alone; then the header of a gigabyte string and the first 256 MiB of it, which
  // the client buffered whole before it had these bounds.
  FakeRedis server({"*2147483647\r\n", "$1000000000\r\n"}, 256 << 20);
  ASSERT_GT(server.port(), 0);
  const long resident_before = resident_bytes();
  std::string error;
  for (const char* expected : {"refused an oversized reply to the command: 2147483647 elements (the limit is 1048576)",
                               "refused an oversized reply to the command: 1000000000 bytes (the limit is 67108864)"}) {
    // A fresh client per reply, as the watcher and the bench reconnect after a broken one.
    auto client = Client::connect({"127.0.0.1", server.port()}, "", 5000ms, &error);
    ASSERT_TRUE(client) << error;
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(client->command({"PING"}), std::nullopt);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << "waited for a timeout instead";
    EXPECT_EQ(client->last_error(), expected);
    EXPECT_TRUE(client->broken());
    // Measured while the client lives: what its reader buffered goes when it does.
    EXPECT_LT(resident_bytes() - resident_before, 64L << 20);
    // A broken client fails every later command at once, with the same error.
    EXPECT_EQ(client->command({"PING"}), std::nullopt);
    EXPECT_EQ(client->last_error(), expected);
  }
}

TEST(RedisClientLimits, TheWatcherReportsTheRefusalAndReconnects) {
  FakeRedis server({"*2147483647\r\n"});
  ASSERT_GT(server.port(), 0);
  Watcher::Options options;
  options.address = {"127.0.0.1", server.port()};
  options.interval = 10ms;
  options.retry = 10ms;
  Watcher watcher(options);
  const auto until = std::chrono::steady_clock::now() + 10s;
  // Three connections, and the refusal of one of them reported: a watcher stopped right after an
  // accept has connected again (clearing the error) without having read the reply yet.
  std::string seen;
  while ((server.accepted() < 3 || (seen = watcher.last_error()).empty()) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(10ms);
  watcher.stop();
  EXPECT_GE(server.accepted(), 3);
  EXPECT_FALSE(watcher.ever_up());
  EXPECT_EQ(seen, "lost the connection to Redis at 127.0.0.1:" + std::to_string(server.port()) +
                      ": refused an oversized reply to INFO: 2147483647 elements (the limit is 1)");
}

TEST(ReplyLimits, EachCommandHasItsOwnBudget) {
  EXPECT_EQ(&reply_budget({"INFO"}), &kInfoBudget);
  EXPECT_EQ(&reply_budget({"info", "replication"}), &kInfoBudget);
  EXPECT_EQ(&reply_budget({"CONFIG", "GET", "repl-timeout"}), &kConfigGetBudget);
  EXPECT_EQ(&reply_budget({"config", "set", "x", "y"}), &kDefaultBudget);
  EXPECT_EQ(&reply_budget({"LATENCY", "HISTOGRAM"}), &kLatencyHistogramBudget);
  EXPECT_EQ(&reply_budget({"CLIENT", "LIST", "TYPE", "replica"}), &kClientListBudget);
  EXPECT_EQ(&reply_budget({"Client", "Info"}), &kClientInfoBudget);
  EXPECT_EQ(&reply_budget({"PING"}), &kDefaultBudget);
  EXPECT_EQ(&reply_budget({}), &kDefaultBudget);
  EXPECT_LE(kInfoBudget.bytes, 1LL << 20);
  EXPECT_LE(kConfigGetBudget.bytes, 64LL << 10);
}

TEST(ReplyLimits, AnInfoOverOneMebibyteIsRefusedByItsHeader) {
  ReaderPtr reader = fed_reader("$8388608\r\n# Server\r\n");
  ReplyLimits limits(reader.get());
  limits.new_reply(kInfoBudget);
  EXPECT_FALSE(next_reply(reader.get()));
  EXPECT_FALSE(limits.pending_within_limits());
  EXPECT_EQ(limits.refusal(), "refused an oversized reply to INFO: 8388608 bytes (the limit is 1048576)");

  // The same header is within the bound of a command that may need it.
  ReaderPtr other = fed_reader("$8388608\r\n# Server\r\n");
  ReplyLimits other_limits(other.get());
  other_limits.new_reply(kDefaultBudget);
  EXPECT_FALSE(next_reply(other.get()));
  EXPECT_TRUE(other_limits.pending_within_limits());
}

TEST(ReplyLimits, AConfigGetReplyIsSmall) {
  const std::string value((64 << 10) + 1, 'v');
  ReaderPtr reader = fed_reader("*2\r\n$4\r\nsave\r\n$" + std::to_string(value.size()) + "\r\n" + value + "\r\n");
  ReplyLimits limits(reader.get());
  limits.new_reply(kConfigGetBudget);
  EXPECT_FALSE(next_reply(reader.get()));
  EXPECT_TRUE(limits.refused());
  EXPECT_EQ(limits.refusal(), "refused an oversized reply to CONFIG GET: 65541 bytes (the limit is 65536)");
}

// A server that answers every command with an error: the client sees a refusal (the connection
// still works), its text cut and escaped.
TEST(RedisClientLimits, AnErrorReplyIsARefusalWithPrintableText) {
  FakeRedis server({"-NOPERM \xff\x1b[2J" + std::string(500, 'y') + "\r\n"});
  ASSERT_GT(server.port(), 0);
  std::string error;
  auto client = Client::connect({"127.0.0.1", server.port()}, "", 5000ms, &error);
  ASSERT_TRUE(client) << error;
  EXPECT_EQ(client->info(), std::nullopt);
  EXPECT_TRUE(client->refused());
  EXPECT_FALSE(client->broken());
  EXPECT_EQ(client->last_error(), "NOPERM \\xff\\x1b[2J" + std::string(200 - 12, 'y') + "...");
}

// A server that refuses INFO: the watcher backs off (doubling up to retry_max), counts every failed
// poll, and says why; it does not reconnect in a loop.
TEST(WatcherBackoff, ARefusedInfoWaitsLongerEachTime) {
  FakeRedis server({"-NOPERM this user has no permissions to run the 'info' command\r\n"});
  ASSERT_GT(server.port(), 0);
  Watcher::Options options;
  options.address = {"127.0.0.1", server.port()};
  options.interval = 1ms;
  options.retry = 50ms;
  options.retry_max = 200ms;
  std::atomic<int> down{0};
  options.on_snapshot = [&down](const Snapshot& s) { down += s.up ? 0 : 1; };
  Watcher watcher(options);
  std::this_thread::sleep_for(1500ms);
  watcher.stop();
  // Waits of 50, 100, 200, 200, ... ms: at most 1 + 1500 / 50 tries even on a slow machine, while a
  // loop without a pause makes thousands.
  EXPECT_GE(server.accepted(), 3);
  EXPECT_LE(server.accepted(), 12);
  // Every try but one stopped in flight was counted, and told as a down snapshot.
  EXPECT_GE(watcher.failed_polls() + 1, static_cast<uint64_t>(server.accepted()));
  EXPECT_LE(watcher.failed_polls(), static_cast<uint64_t>(server.accepted()));
  EXPECT_EQ(down.load(), static_cast<int>(watcher.failed_polls()));
  EXPECT_FALSE(watcher.ever_up());
  EXPECT_EQ(watcher.last_error(), "INFO refused: NOPERM this user has no permissions to run the 'info' command");
}

}  // namespace
}  // namespace thptrace::redis
