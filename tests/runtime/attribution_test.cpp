// SPDX-License-Identifier: Apache-2.0
// Attribution of copies (--sample-copies): a workload with two known writers after fork, one writing
// 3/4 of the dirtied pages and the other 1/4, must have its sampled copies attributed 75% / 25%
// (within four binomial standard deviations, ± 8 points at 512 samples) to the right function names,
// in the default attach modes and the fallback ones.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>

#include "harness.h"

using namespace thptrace::test;
using namespace std::chrono_literals;

namespace {

constexpr size_t kPages = 32768;  // 128 MiB: 512 samples at 1 in 64

// The share of the fork's sampled copies whose faulting function is `leaf`.
double leaf_share(const nlohmann::json& copies, const std::string& leaf) {
  double share = 0;
  for (const auto& p : copies.at("paths"))
    if (p.at("leaf") == leaf) share += p.at("share").get<double>();
  return share;
}

void expect_two_writers(bool force_fallback, bool interleaved = false) {
  const std::string dir = make_temp_dir("thptrace-attr-");
  const std::string json = dir + "/report.json";
  std::vector<std::string> work_args = {COPY_WRITERS_BIN, std::to_string(kPages)};
  if (interleaved) work_args.emplace_back("interleaved");
  Process work(work_args);
  ASSERT_TRUE(work.wait_stdout_line("ready", 20s)) << work.err();
  std::vector<std::string> args = {thptrace_bin(), "--pid", std::to_string(work.pid()), "--duration", "60",
                                   "--json",       json,    "--sample-copies",          "64"};
  if (force_fallback) args.emplace_back("--force-fallback");
  Process tracer(args);
  ASSERT_TRUE(tracer.wait_stderr_line("tracing pid", 30s)) << tracer.err();
  work.write_stdin("go\n");
  EXPECT_TRUE(work.wait_stdout_line("done", 120s));
  EXPECT_EQ(work.wait(10s), 0);
  ASSERT_EQ(tracer.wait(30s), 0) << tracer.err();
  const auto report = read_json(json);
  std::filesystem::remove_all(dir);
  if (!force_fallback) expect_modes(report.at("probes"), "two writers");

  ASSERT_EQ(report.at("forks").size(), 1u) << report.dump(1);
  const auto& fork = report.at("forks").at(0);
  ASSERT_TRUE(fork.contains("copies")) << fork.dump(1);
  const auto& copies = fork.at("copies");
  EXPECT_EQ(copies.at("sample_every"), 64);
  EXPECT_EQ(report.at("capture").at("copy_samples_dropped"), 0);
  // At least 90% of the expected samples: the copies are counted and sampled on the same faults.
  const auto samples = copies.at("samples").get<uint64_t>();
  EXPECT_GE(samples, kPages / 64 * 9 / 10) << copies.dump(1);
  const auto cow = fork.at("cow_faults").get<double>();
  EXPECT_NEAR(copies.at("estimated").get<double>(), cow,
              std::max(copies.at("estimated_error").get<double>(), 0.05 * cow));
  // The gaps between samples are random, so a share is a binomial estimate: four standard deviations
  // of it (0.077 at 512 samples) either way.
  const double share_spread = 4 * std::sqrt(0.75 * 0.25 / static_cast<double>(std::max<uint64_t>(samples, 1)));
  EXPECT_NEAR(leaf_share(copies, "write_most"), 0.75, share_spread) << copies.dump(1);
  EXPECT_NEAR(leaf_share(copies, "write_rest"), 0.25, share_spread) << copies.dump(1);
  // Whole stacks: the writers' caller is in the path.
  EXPECT_NE(copies.at("paths").at(0).at("path").get<std::string>().find("write_most ← main"), std::string::npos)
      << copies.dump(1);
  EXPECT_TRUE(copies.at("stacks_partial").is_null()) << copies.dump(1);
  ASSERT_FALSE(copies.at("mappings").empty());
  EXPECT_EQ(copies.at("mappings").at(0).at("mapping"), "anonymous");
  EXPECT_GT(copies.at("mappings").at(0).at("share").get<double>(), 0.9);
  // The copy ratio: 128 MiB copied of a process whose RSS is about that.
  ASSERT_TRUE(copies.at("copy_ratio").is_number()) << copies.dump(1);
  EXPECT_GT(copies.at("copy_ratio").get<double>(), 0.8);
  EXPECT_LT(copies.at("copy_ratio").get<double>(), 1.1);
  // The finding names the dominant path.
  bool named = false;
  for (const auto& f : report.at("findings"))
    named = named || f.at("text").get<std::string>().find("write_most") != std::string::npos;
  EXPECT_TRUE(named) << report.at("findings").dump(1);
}

// The share of the fork's sampled copies whose stack holds `function` (0 when it is not among the
// report's top functions).
double function_share(const nlohmann::json& copies, const std::string& function) {
  for (const auto& f : copies.at("functions"))
    if (f.at("function") == function) return f.at("share").get<double>();
  return 0;
}

// A capture of `binary` (a redis-server) under a SET load during a BGSAVE made to last a few seconds
// (rdb-key-save-delay: 10 µs asked per key, usleep's granularity makes it more), with 20,000 keys
// that expire 1 s into the fork when `expiring`; copies sampled 1 in 4. The load is pipelined (-P 8):
// unpipelined, 2 clients made only about 650 copies in the fork, and 300 with a CPU taken by something
// else, when the copies every fork makes whatever the load (jemalloc's fork handler, libc's memset and
// memmove from code without frame pointers, the cron) are about 100: their share then depends on how
// busy the machine is. The bgsave fork's `copies`, or null after a failed assertion.
nlohmann::json bgsave_copies_under_load(const std::string& binary, bool expiring,
                                        const std::vector<std::string>& flags = {}) {
  RedisServer redis({}, 0, binary);
  redis.cmd({"DEBUG", "POPULATE", "50000", "key", "200"});
  const std::string dir = make_temp_dir("thptrace-attr-redis-");
  const std::string json = dir + "/report.json";
  std::vector<std::string> args = {thptrace_bin(), "--redis", redis.address(),   "--duration", "60",
                                   "--json",       json,      "--sample-copies", "4"};
  args.insert(args.end(), flags.begin(), flags.end());
  Process tracer(args);
  EXPECT_TRUE(tracer.wait_stderr_line("tracing pid", 30s)) << tracer.err();
  if (expiring) redis.cmd({"EVAL", "for i = 1, 20000 do redis.call('SET', 'ttl:' .. i, 'x', 'PX', 1000) end", "0"});
  redis.cmd({"CONFIG", "SET", "rdb-key-save-delay", "10"});
  Process load({"redis-benchmark", "-p", std::to_string(redis.port()), "-t", "set", "-r", "100000", "-d", "100", "-c",
                "2", "-P", "8", "-n", "100000000", "-q"});
  std::this_thread::sleep_for(300ms);
  redis.cmd({"BGSAVE"});
  std::this_thread::sleep_for(500ms);
  for (int i = 0; i < 300 && redis.info_field("rdb_bgsave_in_progress") == "1"; ++i) std::this_thread::sleep_for(100ms);
  load.signal(SIGTERM);
  load.wait(10s);
  tracer.signal(SIGINT);
  EXPECT_EQ(tracer.wait(30s), 0) << tracer.err();
  // What the capture said of its unwinding (nothing when every stack unwound), for a failure below.
  std::istringstream err(tracer.err());
  for (std::string line; std::getline(err, line);)
    if (line.find("unwind") != std::string::npos) std::printf("capture: %s\n", line.c_str());
  const auto report = read_json(json);
  std::filesystem::remove_all(dir);
  for (const auto& f : report.at("forks"))
    if (f.at("reason") == "bgsave" && f.contains("copies")) return f.at("copies");
  ADD_FAILURE() << "no bgsave fork with copies: " << report.at("forks").dump(1);
  return nullptr;
}

// The share of the samples a command (copies.by_command) holds; 0 when it is not there.
double command_share(const nlohmann::json& copies, const std::string& command) {
  for (const auto& c : copies.at("by_command"))
    if (c.at("command") == command) return c.at("share").get<double>();
  return 0;
}

// The shares the Redis tests assert on, and the top functions, on stdout (docs/guide/attribution.md quotes
// runs of them).
void print_shares(const char* test, const nlohmann::json& copies) {
  std::string top;
  for (const auto& f : copies.at("functions")) {
    if (top.size() > 400) break;
    char share[16];
    std::snprintf(share, sizeof(share), " %.2f, ", f.at("share").get<double>());
    top += f.at("function").get<std::string>() + share;
  }
  std::printf(
      "%s: %llu samples; call %.2f, processCommand %.2f, setCommand %.2f, readQueryFromClient %.2f, "
      "activeExpireCycle %.2f; top functions: %s\n",
      test, static_cast<unsigned long long>(copies.at("samples").get<uint64_t>()), function_share(copies, "call"),
      function_share(copies, "processCommand"), function_share(copies, "setCommand"),
      function_share(copies, "readQueryFromClient"), function_share(copies, "activeExpireCycle"), top.c_str());
}

}  // namespace

TEST(Attribution, TwoWritersThreeToOne) {
  REQUIRE_BPF();
  expect_two_writers(false);
}

TEST(Attribution, TwoWritersThreeToOneForcedFallback) {
  REQUIRE_BPF();
  expect_two_writers(true);
}

// The same shares written with a period of four pages (three by write_most, one by write_rest, in
// turn): a sampler that took every 64th fault saw write_most alone; random gaps give 75/25.
TEST(Attribution, InterleavedWritersThreeToOne) {
  REQUIRE_BPF();
  expect_two_writers(false, true);
}

TEST(Attribution, InterleavedWritersThreeToOneForcedFallback) {
  REQUIRE_BPF();
  expect_two_writers(true, true);
}

// Redis 8.0.2 (frame pointers, tests/servers/fetch.sh) under a SET load during a BGSAVE, no keys
// expiring: most copies are made on the commands' write path, processInputBuffer, in its two halves:
// parsing the arguments into objects (processMultibulkBuffer → createStringObject: SET stores the
// value object parsed, so this is where each value is written) and executing them (processCommand →
// call → setCommand: the keyspace's dict entries). Runs here, with a kernel-matrix guest taking a CPU:
// processInputBuffer 90–93% of the samples, call 43–49%, processMultibulkBuffer 40–49%
// (docs/guide/attribution.md). Filling the query buffer (readQueryFromClient's read, outside
// processInputBuffer) made none.
TEST(Attribution, RedisSetLoadDuringBgsave) {
  REQUIRE_BPF();
  REQUIRE_FETCHED_SERVER(server, "redis-8.0.2");
  const auto copies = bgsave_copies_under_load(server->binary, false);
  ASSERT_TRUE(copies.is_object());
  print_shares("RedisSetLoadDuringBgsave", copies);
  EXPECT_GE(copies.at("samples").get<uint64_t>(), 80u) << copies.dump(1);  // 277–498 here
  EXPECT_TRUE(copies.at("stacks_partial").is_null()) << copies.dump(1);
  const double commands = function_share(copies, "processInputBuffer");
  EXPECT_GT(commands, 0.5) << copies.dump(1);
  EXPECT_GT(function_share(copies, "call"), 0.25) << copies.dump(1);
  EXPECT_GT(function_share(copies, "setCommand"), 0.2) << copies.dump(1);
  EXPECT_GT(function_share(copies, "processMultibulkBuffer"), 0.15) << copies.dump(1);
  EXPECT_LT(function_share(copies, "readQueryFromClient") - commands, 0.1) << copies.dump(1);
  // No key expires; the cron's expiry pass still writes its statistics (4% in a run under load).
  EXPECT_LT(function_share(copies, "activeExpireCycle"), 0.1) << copies.dump(1);
  // Frame pointers gave whole stacks, but for a few that start in libc's or jemalloc's code without
  // them (35 of 297 in a run here, unwound from .eh_frame). By command, SET (call() → setCommand) and
  // the parsing of its arguments make nearly all.
  EXPECT_LT(copies.at("dwarf_samples").get<uint64_t>() * 3, copies.at("samples").get<uint64_t>()) << copies.dump(1);
  EXPECT_GT(command_share(copies, "SET"), 0.2) << copies.dump(1);
  EXPECT_GT(command_share(copies, "SET") + command_share(copies, "query-buffer reads"), 0.7) << copies.dump(1);
}

// The same with 20,000 keys expiring 1 s into the fork: active expiry's deletions make copies of
// their own, and the path appears by name.
TEST(Attribution, RedisKeysExpiringDuringBgsave) {
  REQUIRE_BPF();
  REQUIRE_FETCHED_SERVER(server, "redis-8.0.2");
  const auto copies = bgsave_copies_under_load(server->binary, true);
  ASSERT_TRUE(copies.is_object());
  print_shares("RedisKeysExpiringDuringBgsave", copies);
  EXPECT_GE(copies.at("samples").get<uint64_t>(), 20u) << copies.dump(1);
  EXPECT_TRUE(copies.at("stacks_partial").is_null()) << copies.dump(1);
  EXPECT_GT(function_share(copies, "activeExpireCycle"), 0.1) << copies.dump(1);
}

// Debian's redis-server 7.0.15 is built without frame pointers, but ships .eh_frame: by default
// (--unwind dwarf) each sample carries its thread's registers and 8 KiB of stack, unwound in userspace,
// and the copies are whole stacks, grouped by the command that wrote: SET under a SET load. In both
// attach modes (the fentry path and the fault tracepoints take the registers differently).
void debian_redis_by_command(const std::vector<std::string>& flags) {
  const auto copies = bgsave_copies_under_load("redis-server", false, flags);
  ASSERT_TRUE(copies.is_object());
  print_shares("DebianRedisCopiesByCommand", copies);
  const auto samples = copies.at("samples").get<uint64_t>();
  EXPECT_GE(samples, 20u) << copies.dump(1);
  EXPECT_TRUE(copies.at("stacks_partial").is_null()) << copies.dump(1);
  EXPECT_GE(copies.at("dwarf_samples").get<uint64_t>() * 10, samples * 9) << copies.dump(1);
  EXPECT_GT(function_share(copies, "call"), 0.2) << copies.dump(1);
  // Down to the event loop (aeProcessEvents is not in Debian's .dynsym: it shows as an offset).
  EXPECT_GT(function_share(copies, "aeMain"), 0.9) << copies.dump(1);
  ASSERT_FALSE(copies.at("by_command").empty()) << copies.dump(1);
  EXPECT_GT(command_share(copies, "SET"), 0.2) << copies.dump(1);
  EXPECT_GT(command_share(copies, "SET") + command_share(copies, "query-buffer reads"), 0.7) << copies.dump(1);
  // The binary is named by its command, as the operator knows it, in frames it cannot symbolize and
  // in the memory the copies were in: never by the file behind Debian's link alone.
  for (const char* list : {"functions", "paths", "mappings"})
    for (const auto& x : copies.at(list)) {
      const auto name = x.dump();
      EXPECT_EQ(name.find("redis-check-rdb"), std::string::npos) << list << ": " << name;
    }
}

TEST(Attribution, DebianRedisCopiesByCommandUnwoundFromEhFrame) {
  REQUIRE_BPF();
  debian_redis_by_command({});
}

TEST(Attribution, DebianRedisCopiesByCommandUnwoundFromEhFrameForcedFallback) {
  REQUIRE_BPF();
  debian_redis_by_command({"--force-fallback"});
}

// With --unwind fp, the kernel's frame-pointer walk alone: the report says Debian's stacks are
// partial and still attributes each copy to the code that wrote (a symbol of .dynsym, or
// module+offset inside a function Debian's stripped binary does not name).
TEST(Attribution, DebianRedisStacksArePartialWithFramePointersAlone) {
  REQUIRE_BPF();
  const auto copies = bgsave_copies_under_load("redis-server", false, {"--unwind", "fp"});
  ASSERT_TRUE(copies.is_object());
  EXPECT_GE(copies.at("samples").get<uint64_t>(), 20u) << copies.dump(1);
  ASSERT_TRUE(copies.at("stacks_partial").is_string()) << copies.dump(1);
  // Named as the operator knows the process (Debian's redis-server is a link to redis-check-rdb):
  // "redis-server (/usr/bin/redis-check-rdb) has no frame pointers".
  const auto partial = copies.at("stacks_partial").get<std::string>();
  EXPECT_EQ(partial.rfind("redis-server (", 0), 0u) << partial;
  EXPECT_NE(partial.find("has no frame pointers"), std::string::npos) << partial;
  ASSERT_FALSE(copies.at("paths").empty());
  const auto leaf = copies.at("paths").at(0).at("leaf").get<std::string>();
  EXPECT_NE(leaf, "?") << copies.dump(1);
}
