// SPDX-License-Identifier: Apache-2.0
// Every writer is total: a report whose names hold bytes that are not UTF-8, control characters and
// markup still gives JSON that parses, a text report of printable lines and a timeline with no
// markup but its own; a daemon target so named still gives a scrape that is valid UTF-8.
#include <gtest/gtest.h>

#include "common/text.h"
#include "daemon/metrics.h"
#include "report/report.h"
#include "report/timeline.h"

namespace thptrace::report {
namespace {

// A name a process can give itself (prctl PR_SET_NAME takes any byte but NUL), or a server send.
const std::string kHostile = "\xFF\x01<&\"'>\xC3(\xE2\x82\n\x1b[2J";

Report hostile_report(CaptureInputs& in) {
  in.start_ns = 1'000'000'000;
  in.end_ns = in.start_ns + 2'000'000'000;
  Report r;
  r.version = "0.0-" + kHostile;
  r.system = {kHostile, kHostile, kHostile, {{64, kHostile}}};
  r.pid = 42;
  r.comm = kHostile;
  r.start_monotonic_ns = in.start_ns;
  r.duration_s = 2;
  r.probes.redis.why = kHostile;
  r.huge_alloc.why = kHostile;
  correlate::ForkEpisode f;
  f.child_pid = 43;
  f.fork_ts_ns = in.start_ns + 500'000'000;
  f.exit_ts_ns = in.start_ns + 900'000'000;
  f.reason_source = kHostile;
  f.thp_splits_source = kHostile;
  correlate::ReplicaSync s;
  s.address = kHostile;
  s.first_seen_ns = f.fork_ts_ns;
  s.last_seen_ns = f.exit_ts_ns;
  s.states.push_back({kHostile, f.fork_ts_ns});
  f.replicas.push_back(s);
  correlate::CopyAttribution c;
  c.sample_every = 4;
  c.samples = 1;
  c.stacks_partial = kHostile;
  c.paths.push_back({kHostile, kHostile, 1, 1, 4, 8});
  c.functions.push_back({kHostile, "", 1, 1, 4, 8});
  c.mappings.push_back({kHostile, "", 1, 1, 4, 8});
  f.copies = c;
  r.forks.push_back(f);
  RedisSection redis;
  redis.address = kHostile;
  redis.reachable = true;
  redis.version = kHostile;
  redis.disable_thp = kHostile;
  redis.unanswered.push_back({in.start_ns + 1, 0, kHostile});
  r.redis = redis;
  r.memory.cgroup = CgroupSection{2, kHostile, std::nullopt, 0, std::nullopt, 0};
  r.replication = ReplicationSection{};
  r.replication->loops.push_back({kHostile, 2, 1});
  r.replication->loop_cause = kHostile;
  return r;
}

// No byte below 0x20 but the line breaks the writer put there itself.
bool no_control_bytes(const std::string& s) {
  for (const char c : s)
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') return false;
  return true;
}

TEST(ReportWriters, JsonOfHostileNamesParsesAndKeepsWhatIsValid) {
  CaptureInputs in;
  const Report r = hostile_report(in);
  std::string out;
  ASSERT_NO_THROW(out = json_text(r));
  EXPECT_TRUE(text::is_valid_utf8(out));
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["target"]["comm"], text::valid_utf8(kHostile));
  EXPECT_EQ(j["target"]["comm"].get<std::string>().substr(0, 5), "\xEF\xBF\xBD\x01<");
  EXPECT_EQ(j["forks"][0]["copies"]["paths"][0]["path"], text::valid_utf8(kHostile));
  EXPECT_EQ(j["redis"]["unanswered"][0]["error"], text::valid_utf8(kHostile));
}

TEST(ReportWriters, TextOfHostileNamesIsPrintableLines) {
  CaptureInputs in;
  const std::string out = to_text(hostile_report(in));
  EXPECT_TRUE(text::is_valid_utf8(out));
  EXPECT_TRUE(no_control_bytes(out));
  EXPECT_NE(out.find("(\xEF\xBF\xBD\\x01<&\"'>"), std::string::npos) << out;
}

TEST(ReportWriters, TimelineOfHostileNamesHoldsNoMarkupButItsOwn) {
  CaptureInputs in;
  const Report r = hostile_report(in);
  for (const bool html : {false, true}) {
    const std::string doc = timeline_document(r, in, html);
    EXPECT_TRUE(text::is_valid_utf8(doc));
    EXPECT_TRUE(no_control_bytes(doc));
    EXPECT_EQ(doc.find("<&"), std::string::npos);
    EXPECT_EQ(doc.find("'>"), std::string::npos);
    EXPECT_NE(doc.find("\xEF\xBF\xBD\\x01&lt;&amp;&quot;&#39;&gt;"), std::string::npos);
  }
}

TEST(ReportWriters, MetricLabelsOfAHostileTargetAreValidUtf8) {
  daemon::Metrics metrics;
  metrics.add_target(kHostile);
  metrics.set_untraced(kHostile, true);
  redis::Snapshot up;
  up.up = true;
  up.total_forks = 7;
  metrics.set_redis(kHostile, up);
  const std::string scrape = metrics.exposition();
  EXPECT_TRUE(text::is_valid_utf8(scrape));
  // prometheus-cpp escapes the line break and the quote; the rest is as valid_utf8 made it.
  EXPECT_NE(scrape.find("thptrace_redis_forks_total{target=\"\xEF\xBF\xBD\x01<&\\\"'>"), std::string::npos) << scrape;
  EXPECT_NE(scrape.find("thptrace_target_untraced{target=\"\xEF\xBF\xBD\x01<&\\\"'>"), std::string::npos);
}

}  // namespace
}  // namespace thptrace::report
