// SPDX-License-Identifier: Apache-2.0
// thptrace predict against known answers and against the fork it predicted: the soft-dirty rehearsal
// counts the pages a program writes on a signal (in the kernel-matrix guests, whose kernels track
// soft-dirty pages; here it must say why it did not run); a loaded Redis's next BGSAVE predicted from
// its last one, then made and captured on the same load; the verdict against a real memory cgroup set
// below and above the need.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "harness.h"
#include "proc/soft_dirty.h"

using namespace std::chrono_literals;
using namespace thptrace;
using namespace thptrace::test;

namespace {

bool in_guest() {
  const char* vm = std::getenv("THPTRACE_VM");
  return vm && std::string(vm) == "1";
}

// A prediction's JSON, held to docs/reference/predict.schema.json (on the host: a guest hides the tree
// under /tmp, and the host run checks the same keys).
nlohmann::json read_prediction(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  if (!in) return {};
  auto j = nlohmann::json::parse(in);
  if (!in_guest()) {
    const std::string check = std::string("/usr/bin/python3 ") + REPORT_SCHEMA_CHECK + " --strict " +
                              THPTRACE_SOURCE_DIR + "/docs/reference/predict.schema.json '" + path + "' >/dev/null";
    EXPECT_EQ(std::system(check.c_str()), 0) << path << " does not match docs/reference/predict.schema.json";
  }
  return j;
}

// `thptrace predict ARGS --json`: its JSON, after a clean exit.
nlohmann::json predict(const std::vector<std::string>& args) {
  const std::string dir = make_temp_dir("thptrace-predict-");
  std::vector<std::string> argv = {thptrace_bin(), "predict"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--json", dir + "/p.json"});
  Process p(argv);
  const auto code = p.wait(120s);
  EXPECT_EQ(code, 0) << p.err();
  auto j = code == 0 ? read_prediction(dir + "/p.json") : nlohmann::json();
  std::filesystem::remove_all(dir);
  return j;
}

}  // namespace

// 3,000 pages written once after the clear, of 8,000 touched before it: the rehearsal's last count
// is those pages and the few of libc and the stack the program touched meanwhile.
TEST(Predict, RehearsalCountsThePagesAKnownWriterWrote) {
  constexpr long kWrites = 3000;
  std::string why;
  const bool supported = proc::soft_dirty_supported(&why);
  if (in_guest()) {
    ASSERT_TRUE(supported) << "Debian's kernels track soft-dirty pages: " << why;
  }
  Process writer({DIRTY_PAGES_BIN, "8000", std::to_string(kWrites)});
  ASSERT_TRUE(writer.wait_stderr_line("ready", 10s)) << writer.err();
  const std::string dir = make_temp_dir("thptrace-predict-");
  Process p(
      {thptrace_bin(), "predict", "--pid", std::to_string(writer.pid()), "--seconds", "3", "--json", dir + "/p.json"});
  const auto line = p.wait_stderr_line("measuring for", 30s);
  ASSERT_TRUE(line) << p.err();
  writer.signal(SIGUSR1);
  ASSERT_EQ(p.wait(60s), 0) << p.err();
  const auto j = read_prediction(dir + "/p.json");
  std::filesystem::remove_all(dir);
  const auto& r = j.at("rehearsal");
  if (!supported) {
    // This host's kernel: said, not guessed, and the prediction still made from the model.
    EXPECT_FALSE(r.at("run").get<bool>());
    EXPECT_NE(r.at("why_not").get<std::string>().find("CONFIG_MEM_SOFT_DIRTY"), std::string::npos) << r.dump();
    EXPECT_NE(line->find("no rehearsal"), std::string::npos) << *line;
    EXPECT_EQ(j.at("predicted").at("fork_freeze_ms").at("method"), "model");
    EXPECT_TRUE(j.at("predicted").at("copied_bytes").is_null());
    return;
  }
  ASSERT_TRUE(r.at("run").get<bool>()) << r.dump();
  EXPECT_GE(r.at("walk_ms").get<double>(), 0);
  ASSERT_FALSE(r.at("curve").empty());
  const auto pages = r.at("curve").back().at("bytes").get<uint64_t>() / 4096;
  EXPECT_GE(pages, static_cast<uint64_t>(kWrites)) << r.dump();
  EXPECT_LE(pages, static_cast<uint64_t>(kWrites) + 64) << r.dump();
  EXPECT_EQ(j.at("predicted").at("method"), "soft_dirty");
  ASSERT_TRUE(writer.wait_stderr_line("written", 10s));
}

// The server's last BGSAVE is the history of its next one under the same load: predicted, then made
// and captured, its bytes copied within 25% of the capture's count and its freeze within 50% or 2 ms.
// Then the same server charged to a memory cgroup: a limit below what the fork needs is the verdict's
// first limit, one well above it fits.
TEST(Predict, NextBgsaveFromTheServersLastOneAndTheCgroupVerdict) {
  REQUIRE_BPF();
  MemoryCgroup cg;  // before the server: its destructor waits for the server to be gone
  RedisServer r({"--save", ""});
  // A million keys: saves of a second or two, whose lengths (and copies) vary less from one to the next
  // than those of a few hundred ms on a shared machine.
  r.cmd({"DEBUG", "POPULATE", "1000000", "key", "400"});
  nlohmann::json prediction, fork;
  {
    WriteLoad load(r, "key:", 1000000);
    // The capture watches every save, so the history and the fork predicted run alike; it only
    // counts (no copy sampling, no latency probe), so that it takes as little CPU from the saves as it
    // can (with a sanitizer, sampling and unwinding copies lengthened a child's life, and its copies).
    const std::string dir = make_temp_dir("thptrace-predict-");
    Process tracer({thptrace_bin(), "--pid", std::to_string(r.pid()), "--redis", r.address(), "--sample-copies", "0",
                    "--latency-probe", "0", "--json", dir + "/report.json"});
    ASSERT_TRUE(tracer.wait_stderr_line("tracing pid", 30s)) << tracer.err();
    const auto bgsave = [&] {
      std::this_thread::sleep_for(1s);
      r.cmd({"BGSAVE"});
      ASSERT_TRUE(wait_info(r, "rdb_bgsave_in_progress", "0", 30s));
    };
    // Two saves: the first, soon after the load began, can run longer and copy twice as much as those
    // that follow (seen here once); the second is the history.
    bgsave();
    bgsave();
    ASSERT_NE(r.info_field("rdb_last_cow_size"), "0");
    prediction =
        predict({"--pid", std::to_string(r.pid()), "--redis", r.address(), "--seconds", "2", "--no-rehearsal"});
    ASSERT_TRUE(prediction.is_object());
    bgsave();  // the fork predicted
    std::this_thread::sleep_for(1500ms);
    tracer.signal(SIGINT);
    ASSERT_EQ(tracer.wait(60s), 0) << tracer.err();
    const auto report = read_json(dir + "/report.json");
    std::filesystem::remove_all(dir);
    ASSERT_EQ(report.at("forks").size(), 3u) << report.at("forks").dump();
    fork = report.at("forks").at(2);
  }
  const auto& p = prediction.at("predicted");
  EXPECT_EQ(p.at("reason"), "bgsave");
  EXPECT_EQ(p.at("method"), "history");
  ASSERT_TRUE(p.at("copied_bytes").is_object()) << p.dump();
  const double copied = p.at("copied_bytes").at("value").get<double>();
  const double captured =
      static_cast<double>(fork.at("cow_faults").get<uint64_t>() + fork.at("child_cow_faults").get<uint64_t>()) * 4096;
  EXPECT_NEAR(copied, captured, captured * 0.25) << "predicted " << p.dump() << "\ncaptured " << fork.dump();
  const double freeze = p.at("fork_freeze_ms").at("value").get<double>();
  const double froze = fork.at("fork_duration_us").get<double>() / 1e3;
  EXPECT_NEAR(freeze, froze, std::max(froze * 0.5, 2.0)) << "predicted " << p.dump() << "\ncaptured " << fork.dump();
  std::cout << "predicted copies " << copied << " freeze " << freeze << " ms; captured " << captured << ", " << froze
            << " ms\n";

  // The need now (the history is the fork just made, the load has stopped), then the server in a
  // memory cgroup whose limit is below it, then well above it.
  const auto now =
      predict({"--pid", std::to_string(r.pid()), "--redis", r.address(), "--seconds", "1", "--no-rehearsal"});
  ASSERT_TRUE(now.is_object());
  const auto rss = now.at("memory").at("rss_bytes").get<double>();
  const auto need = rss + now.at("predicted").at("copied_bytes").at("value").get<double>();
  ASSERT_TRUE(cg.ok()) << "no memory cgroup controller to make a test cgroup in (v1 memory or v2 with +memory)";
  ASSERT_TRUE(cg.add(r.pid()));
  for (const auto& [limit, verdict] : {std::pair{static_cast<uint64_t>(rss + (need - rss) / 2), "will_exceed"},
                                       std::pair{static_cast<uint64_t>(need * 2), "fits"}}) {
    ASSERT_TRUE(cg.set_limit(limit)) << cg.dir();
    const auto j =
        predict({"--pid", std::to_string(r.pid()), "--redis", r.address(), "--seconds", "1", "--no-rehearsal"});
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j.at("memory").at("cgroup_limit_bytes").get<uint64_t>() / 4096, limit / 4096) << j.at("memory").dump();
    EXPECT_EQ(j.at("predicted").at("verdict"), verdict) << j.at("predicted").dump();
    if (std::string(verdict) == "will_exceed") {
      EXPECT_EQ(j.at("predicted").at("first_limit"), "memory cgroup limit");
    }
  }
}
