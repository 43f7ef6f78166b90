// SPDX-License-Identifier: Apache-2.0
// `thptrace daemon --redis ADDR` against a server that gives another process_id at every INFO and
// takes 1.5 s to answer CLIENT INFO: the daemon's search for its process runs off the main loop and
// a few seconds apart, so the main loop keeps taking every poll (and ring-buffer record) as it comes.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness.h"

using namespace thptrace::test;
using namespace std::chrono_literals;

namespace {

// A RESP server: INFO answers process_id 90000000+n (no such process) and latest_fork_usec n, n
// the INFO count; CLIENT INFO answers after 1.5 s. The counts of INFO and CLIENT commands are
// written to argv[2] after each command.
constexpr const char* kServer = R"PY(
import os, socket, sys, threading, time
port, path = int(sys.argv[1]), sys.argv[2]
lock = threading.Lock()
counts = {"INFO": 0, "CLIENT": 0}
def bulk(s):
    b = s.encode()
    return b"$%d\r\n%s\r\n" % (len(b), b)
def read_command(f):
    line = f.readline()
    if not line.startswith(b"*"):
        return None
    args = []
    for _ in range(int(line[1:])):
        size = int(f.readline()[1:])
        args.append(f.read(size + 2)[:-2])
    return args
def serve(c):
    f = c.makefile("rb")
    while True:
        args = read_command(f)
        if not args:
            break
        name = args[0].upper().decode(errors="replace")
        with lock:
            if name in counts:
                counts[name] += 1
            n = counts["INFO"]
            with open(path + ".tmp", "w") as out:
                out.write("%d %d\n" % (counts["INFO"], counts["CLIENT"]))
            os.replace(path + ".tmp", path)
        if name == "INFO":
            c.sendall(bulk("# Server\r\nredis_version:7.0.15\r\nprocess_id:%d\r\nlatest_fork_usec:%d\r\n" % (90000000 + n, n)))
        elif name == "CLIENT":
            time.sleep(1.5)
            c.sendall(bulk("id=1 addr=127.0.0.1:1 laddr=127.0.0.1:%d\n" % port))
        elif name == "PING":
            c.sendall(b"+PONG\r\n")
        elif name in ("CONFIG", "LATENCY"):
            c.sendall(b"*0\r\n")
        else:
            c.sendall(b"-ERR unknown command\r\n")
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(64)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
)PY";

std::pair<long, long> counts(const std::string& path) {
  std::ifstream in(path);
  long info = 0, client = 0;
  in >> info >> client;
  return {info, client};
}

}  // namespace

TEST(Locate, AServerChangingItsProcessIdDoesNotHoldTheMainLoop) {
  REQUIRE_BPF();
  const std::string dir = make_temp_dir("thptrace-locate-");
  { std::ofstream(dir + "/server.py") << kServer; }
  const int redis_port = free_port();
  Process server({"python3", dir + "/server.py", std::to_string(redis_port), dir + "/counts"});
  ASSERT_TRUE(server.wait_stdout_line("ready", 10s)) << server.err();
  const std::string target = "127.0.0.1:" + std::to_string(redis_port);
  const int port = free_port();
  Process daemon({thptrace_bin(), "daemon", "--listen", "127.0.0.1:" + std::to_string(port), "--redis", target,
                  "--poll-interval-ms", "100", "--idle-poll-interval-ms", "100"});
  const std::string up = "thptrace_redis_up{target=\"" + target + "\"}";
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < until && metric_value(http_get(port, "/metrics").value_or(""), up) != 1)
    std::this_thread::sleep_for(100ms);
  ASSERT_EQ(metric_value(http_get(port, "/metrics").value_or(""), up), 1) << daemon.err();

  const auto before = counts(dir + "/counts");
  std::this_thread::sleep_for(10s);
  const auto after = counts(dir + "/counts");
  const auto scrape = http_get(port, "/metrics");
  ASSERT_TRUE(scrape);
  // Searches: a few seconds apart whatever process_id says (each would otherwise follow the last).
  EXPECT_LE(after.second - before.second, 3) << daemon.err();
  EXPECT_GE(after.second - before.second, 1) << "the daemon never searched for the server's process";
  // The main loop took the polls as they came: the last one it exported (latest_fork_usec = its
  // INFO count) is within a few polls of the server's count, not seconds of polls behind.
  EXPECT_GT(after.first - before.first, 20);
  const auto seen = metric_value(*scrape, "thptrace_redis_latest_fork_seconds{target=\"" + target + "\"}");
  ASSERT_TRUE(seen);
  EXPECT_GE(*seen * 1e6 + 0.5, static_cast<double>(after.first - 10)) << daemon.err();

  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(30s), 0) << daemon.err();
  server.signal(SIGKILL);
  server.wait(5s);
  std::filesystem::remove_all(dir);
}
