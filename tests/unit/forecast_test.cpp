// SPDX-License-Identifier: Apache-2.0
// thptrace predict's rules: each figure from the best method at hand (the soft-dirty rehearsal, the
// server's last fork, the model), the rehearsal's curve read at the child's lifetime, and the verdict
// against each limit; the pagemap count and the report's JSON keys.
#include <gtest/gtest.h>

#include <array>

#include "forecast/forecast.h"
#include "forecast/report.h"
#include "proc/soft_dirty.h"

using namespace thptrace;
using forecast::Method;
using forecast::Verdict;

namespace {

constexpr uint64_t kMiB = 1024 * 1024;

forecast::Inputs redis_of_512_mib() {
  forecast::Inputs in;
  in.rss_bytes = 512 * kMiB;
  in.anon_bytes = 500 * kMiB;
  in.page_table_bytes = 1 * kMiB;
  return in;
}

}  // namespace

TEST(Forecast, ModelWithoutHistoryOrRehearsalLeavesCopiesUnknown) {
  const auto p = forecast::predict(redis_of_512_mib(), correlate::Reason::bgsave);
  EXPECT_EQ(p.fork_freeze_ms.method, Method::model);
  EXPECT_DOUBLE_EQ(p.fork_freeze_ms.value, 15.0);  // 30 ms per GiB of RSS
  EXPECT_LT(p.fork_freeze_ms.low, p.fork_freeze_ms.value);
  EXPECT_GT(p.fork_freeze_ms.high, p.fork_freeze_ms.value);
  EXPECT_EQ(p.child_lifetime_s.method, Method::model);
  EXPECT_FALSE(p.copied_bytes);
  EXPECT_FALSE(p.copied_unknown_why.empty());
  EXPECT_FALSE(p.replica_buffer_peak_bytes);  // a BGSAVE feeds no replica
  EXPECT_TRUE(p.limits.empty());
  EXPECT_EQ(p.verdict, Verdict::fits);
}

TEST(Forecast, HistoryIsTheServersLastFork) {
  auto in = redis_of_512_mib();
  in.last_fork_usec = 9400;
  in.last_rdb_cow_bytes = 63 * kMiB;
  in.last_rdb_seconds = 1;
  const auto p = forecast::predict(in, correlate::Reason::bgsave);
  EXPECT_EQ(p.fork_freeze_ms.method, Method::history);
  EXPECT_DOUBLE_EQ(p.fork_freeze_ms.value, 9.4);
  EXPECT_DOUBLE_EQ(p.fork_freeze_ms.low, 4.7);  // ±50%, at least ±2 ms
  EXPECT_DOUBLE_EQ(p.fork_freeze_ms.high, 14.1);
  // The difference of two whole-second clocks: a child of 1 s, between 0 and 2.
  EXPECT_DOUBLE_EQ(p.child_lifetime_s.value, 1.0);
  EXPECT_DOUBLE_EQ(p.child_lifetime_s.low, 0.0);
  EXPECT_DOUBLE_EQ(p.child_lifetime_s.high, 2.0);
  ASSERT_TRUE(p.copied_bytes);
  EXPECT_EQ(p.copied_bytes->method, Method::history);
  EXPECT_DOUBLE_EQ(p.copied_bytes->value, 63.0 * kMiB);
  EXPECT_EQ(p.method, Method::history);
  // A fork of a millisecond keeps a range of ±2 ms.
  in.last_fork_usec = 1000;
  const auto small = forecast::predict(in, correlate::Reason::bgsave);
  EXPECT_DOUBLE_EQ(small.fork_freeze_ms.low, 0);
  EXPECT_DOUBLE_EQ(small.fork_freeze_ms.high, 3);
}

// The save's RDB file gives its life to the millisecond, taken when it agrees with INFO's whole
// seconds (the file is then that save's); a file from another save is left for the whole seconds.
TEST(Forecast, LastSaveLifeFromItsRdbFileWhenItAgreesWithInfo) {
  auto in = redis_of_512_mib();
  in.last_rdb_seconds = 4;  // a save of 3.2 s can read 4
  in.last_rdb_file_seconds = 3.2;
  auto p = forecast::predict(in, correlate::Reason::bgsave);
  EXPECT_EQ(p.child_lifetime_s.method, Method::history);
  EXPECT_DOUBLE_EQ(p.child_lifetime_s.value, 3.2);
  EXPECT_DOUBLE_EQ(p.child_lifetime_s.low, 3.2 * 0.75);
  EXPECT_DOUBLE_EQ(p.child_lifetime_s.high, 3.2 * 1.25);
  EXPECT_NE(p.child_lifetime_s.basis.find("RDB file"), std::string::npos) << p.child_lifetime_s.basis;
  in.last_rdb_file_seconds = 9.5;  // an older save's file, or one touched since
  p = forecast::predict(in, correlate::Reason::bgsave);
  EXPECT_DOUBLE_EQ(p.child_lifetime_s.value, 4.0);
  EXPECT_NE(p.child_lifetime_s.basis.find("whole seconds"), std::string::npos) << p.child_lifetime_s.basis;
}

TEST(Forecast, RehearsalCurveReadAtTheLifetimeAndExtendedPastItsEnd) {
  const std::vector<std::pair<double, uint64_t>> curve = {{1, 1000}, {2, 1500}, {3, 1800}, {4, 2000}};
  EXPECT_DOUBLE_EQ(forecast::dirty_pages_at(curve, 0.5, 1'000'000), 500);  // from (0, 0)
  EXPECT_DOUBLE_EQ(forecast::dirty_pages_at(curve, 2.5, 1'000'000), 1650);
  // Past the end at the rate of its last half (2 s -> 4 s: 250 pages a second), capped at every page.
  EXPECT_DOUBLE_EQ(forecast::dirty_pages_at(curve, 6, 1'000'000), 2500);
  EXPECT_DOUBLE_EQ(forecast::dirty_pages_at(curve, 60, 5000), 5000);
  EXPECT_DOUBLE_EQ(forecast::dirty_pages_at({}, 3, 5000), 0);

  auto in = redis_of_512_mib();
  in.last_rdb_cow_bytes = 63 * kMiB;  // the rehearsal wins over the history
  in.last_rdb_seconds = 2;
  in.dirty_curve = curve;
  const auto p = forecast::predict(in, correlate::Reason::bgsave);
  ASSERT_TRUE(p.copied_bytes);
  EXPECT_EQ(p.copied_bytes->method, Method::soft_dirty);
  EXPECT_EQ(p.method, Method::soft_dirty);
  // The parent's pages at the lifetime, and the child's own copies (420 KiB, 256 KiB to 1 MiB).
  EXPECT_DOUBLE_EQ(p.copied_bytes->value, 1500.0 * 4096 + 420 * 1024);  // at 2 s
  EXPECT_DOUBLE_EQ(p.copied_bytes->low, 1000.0 * 4096 + 256 * 1024);    // at 1 s
  EXPECT_DOUBLE_EQ(p.copied_bytes->high, 1800.0 * 4096 + 1024 * 1024);  // at 3 s
}

TEST(Forecast, FullSyncVerdictAgainstTheCgroupAndTheOutputBufferLimit) {
  auto in = redis_of_512_mib();
  in.last_fork_usec = 9400;
  in.last_rdb_cow_bytes = 64 * kMiB;
  in.last_rdb_seconds = 4;           // 4 s: a sync of about 8 s
  in.repl_bytes_per_s = 4.0 * kMiB;  // 32 MiB of stream over it
  in.replica_hard_bytes = 256 * kMiB;
  in.replica_soft_bytes = 64 * kMiB;
  in.replica_soft_seconds = 60;  // longer than the sync: not a limit here
  in.cgroup_limit_bytes = 1024 * kMiB;
  in.mem_available_bytes = 4096 * kMiB;
  auto p = forecast::predict(in, correlate::Reason::full_sync_disk);
  ASSERT_TRUE(p.replica_buffer_peak_bytes);
  EXPECT_DOUBLE_EQ(p.replica_buffer_peak_bytes->value, 4.0 * kMiB * 4 * 2);
  EXPECT_EQ(p.limits.size(), 3u);  // cgroup, MemAvailable, hard
  EXPECT_EQ(p.verdict, Verdict::fits);
  EXPECT_TRUE(p.first_limit.empty());
  EXPECT_FALSE(p.max_replicas);  // one shared buffer: the number of replicas does not change the need

  // The cgroup below what RSS, copies and buffer need: the verdict names it.
  in.cgroup_limit_bytes = 600 * kMiB;
  p = forecast::predict(in, correlate::Reason::full_sync_disk);
  EXPECT_EQ(p.verdict, Verdict::will_exceed);
  EXPECT_EQ(p.first_limit, "memory cgroup limit");
  // Just above the need: tight.
  in.cgroup_limit_bytes = 620 * kMiB;
  p = forecast::predict(in, correlate::Reason::full_sync_disk);
  EXPECT_EQ(p.verdict, Verdict::tight);

  // Redis 6: a buffer per replica, and how many fit.
  in.cgroup_limit_bytes = 1024 * kMiB;
  in.shared_replication_buffer = false;
  in.replicas = 4;
  p = forecast::predict(in, correlate::Reason::full_sync_disk);
  ASSERT_TRUE(p.max_replicas);
  EXPECT_EQ(*p.max_replicas, 14u);  // (1024 - 512 - 64) MiB / 32 MiB
  EXPECT_DOUBLE_EQ(p.peak_extra_memory_bytes->value, 64.0 * kMiB + 4 * 32.0 * kMiB);

  // A slow replica stream past the hard limit drops it.
  in.repl_bytes_per_s = 40.0 * kMiB;
  p = forecast::predict(in, correlate::Reason::full_sync_disk);
  EXPECT_EQ(p.verdict, Verdict::will_exceed);
}

// A fork at the clear copies a page written since only if the page was there to share: backed at
// the clear and in the same frame now.
TEST(Forecast, SoftDirtyPagesCountOnlyInTheFrameTheyHadAtTheClear) {
  constexpr uint64_t sd = 1ull << 55, swapped = 1ull << 62, present = 1ull << 63;
  const uint32_t at = proc::page_at_clear(present | 1234);
  EXPECT_GE(at, 2u);
  EXPECT_EQ(proc::page_at_clear(0), 0u);
  EXPECT_EQ(proc::page_at_clear(swapped | 77), 1u);
  EXPECT_TRUE(proc::copied_since_clear(at, present | sd | 1234));
  EXPECT_FALSE(proc::copied_since_clear(at, present | 1234));      // not written
  EXPECT_FALSE(proc::copied_since_clear(at, present | sd | 99));   // given back, touched again
  EXPECT_FALSE(proc::copied_since_clear(0, present | sd | 1234));  // first touched after the clear
  EXPECT_TRUE(proc::copied_since_clear(at, swapped | sd));         // written, then swapped out
  EXPECT_TRUE(proc::copied_since_clear(1, present | sd | 5));      // swapped at the clear, written
  EXPECT_FALSE(proc::copied_since_clear(at, sd));                  // given back since
  // Without CAP_SYS_ADMIN the frames read 0: every page kept looks kept.
  EXPECT_TRUE(proc::copied_since_clear(proc::page_at_clear(present), present | sd));
}

TEST(Forecast, SoftDirtyCountsOnlyBackedPages) {
  constexpr uint64_t soft = 1ull << 55, present = 1ull << 63, swapped = 1ull << 62;
  const std::array<uint64_t, 5> e = {present | soft, present, swapped | soft, soft, present | soft | 1234};
  EXPECT_EQ(proc::count_soft_dirty(e), 3u);
}

TEST(Forecast, ReportKeysAndText) {
  forecast::PredictReport r;
  r.version = "0.1.0";
  r.pid = 42;
  r.comm = std::string("redis-server\xff", 13);
  r.inputs = redis_of_512_mib();
  r.inputs.last_fork_usec = 9400;
  r.rehearsal.why_not = "this kernel does not track soft-dirty pages (no CONFIG_MEM_SOFT_DIRTY)";
  r.prediction = forecast::predict(r.inputs, correlate::Reason::bgsave);
  const auto j = forecast::to_json(r);
  const auto& p = j.at("predicted");
  EXPECT_DOUBLE_EQ(p.at("fork_freeze_ms").at("value").get<double>(), 9.4);
  EXPECT_EQ(p.at("fork_freeze_ms").at("method"), "history");
  EXPECT_TRUE(p.at("copied_bytes").is_null());
  EXPECT_TRUE(p.at("child_lifetime_s").is_object());
  EXPECT_EQ(p.at("method"), "model");
  EXPECT_EQ(p.at("verdict"), "fits");
  EXPECT_FALSE(j.at("rehearsal").at("run").get<bool>());
  EXPECT_NO_THROW((void)j.dump());  // the process name's byte is made valid
  const auto text = forecast::to_text(r);
  EXPECT_NE(text.find("fork freeze"), std::string::npos) << text;
  EXPECT_NE(text.find("not run: this kernel does not track"), std::string::npos) << text;
  EXPECT_NE(text.find("verdict: fits"), std::string::npos) << text;
  EXPECT_TRUE(j.at("target").at("main_thread_cpu").is_null());
  EXPECT_EQ(text.find("main thread:"), std::string::npos) << text;
  // An event loop busy 95% of a CPU cannot write faster during the fork: the copies are a bound.
  r.main_thread_cpu = 0.95;
  EXPECT_DOUBLE_EQ(forecast::to_json(r).at("target").at("main_thread_cpu").get<double>(), 0.95);
  const auto busy = forecast::to_text(r);
  EXPECT_NE(busy.find("main thread: 95% of a CPU while measured; near saturation"), std::string::npos) << busy;
  EXPECT_NE(busy.find("upper bound"), std::string::npos) << busy;
  r.main_thread_cpu = 0.3;
  const auto idle = forecast::to_text(r);
  EXPECT_NE(idle.find("main thread: 30% of a CPU while measured\n"), std::string::npos) << idle;
}

// A child that will share a CPU lives longer, and the parent copies over that longer life: the high
// ends stretch by the inverse of the child's share; a child with a CPU of its own changes nothing.
TEST(Forecast, AChildThatWillShareACpuStretchesTheRangesHighEnds) {
  auto in = redis_of_512_mib();
  in.last_rdb_cow_bytes = 40 * kMiB;
  in.last_rdb_seconds = 4;
  const auto alone = forecast::predict(in, correlate::Reason::bgsave);
  EXPECT_FALSE(alone.child_cpu_share);

  in.cpu_load = forecast::Inputs::CpuLoad{0.5, 2, 0.01};  // room for the child
  const auto roomy = forecast::predict(in, correlate::Reason::bgsave);
  ASSERT_TRUE(roomy.child_cpu_share);
  EXPECT_DOUBLE_EQ(*roomy.child_cpu_share, 1.0);
  EXPECT_DOUBLE_EQ(roomy.child_lifetime_s.high, alone.child_lifetime_s.high);
  EXPECT_DOUBLE_EQ(roomy.copied_bytes->high, alone.copied_bytes->high);

  in.cpu_load = forecast::Inputs::CpuLoad{3, 2, 0.5};  // the child is the fourth thread on 2 CPUs
  const auto busy = forecast::predict(in, correlate::Reason::bgsave);
  ASSERT_TRUE(busy.child_cpu_share);
  EXPECT_DOUBLE_EQ(*busy.child_cpu_share, 0.5);
  EXPECT_DOUBLE_EQ(busy.child_lifetime_s.value, alone.child_lifetime_s.value);
  EXPECT_DOUBLE_EQ(busy.child_lifetime_s.low, alone.child_lifetime_s.low);
  EXPECT_DOUBLE_EQ(busy.child_lifetime_s.high, 2 * alone.child_lifetime_s.high);
  EXPECT_DOUBLE_EQ(busy.copied_bytes->value, alone.copied_bytes->value);
  EXPECT_DOUBLE_EQ(busy.copied_bytes->high, 2 * alone.copied_bytes->high);
  EXPECT_NE(busy.child_lifetime_s.basis.find("50% of one"), std::string::npos) << busy.child_lifetime_s.basis;

  // Never more copies than the process has anonymous memory.
  in.cpu_load = forecast::Inputs::CpuLoad{39, 2, 0.9};
  EXPECT_DOUBLE_EQ(forecast::predict(in, correlate::Reason::bgsave).copied_bytes->high,
                   static_cast<double>(in.anon_bytes));

  forecast::PredictReport r;
  r.inputs = in;
  r.inputs.cpu_load = forecast::Inputs::CpuLoad{3, 2, 0.5};
  r.prediction = busy;
  EXPECT_NE(forecast::to_text(r).find("about 50% of a CPU and may live up to 2.0x as long"), std::string::npos)
      << forecast::to_text(r);
  const auto j = forecast::to_json(r);
  EXPECT_EQ(j["cpu"]["child_share"], 0.5);
  EXPECT_EQ(j["cpu"]["cpus"], 2);
}

// A dataset that grew since the last save (used_memory now against the RDB file's used-mem) or
// since the last traced fork (the RSS now against then): the history's figures scaled by the
// growth, each range stretched to hold the last fork's figure and the scaled one; the rehearsal's
// copies, measured now, left alone; a change within 5% left alone.
TEST(Forecast, HistoryScaledByTheDatasetsGrowthSince) {
  auto in = redis_of_512_mib();
  in.anon_bytes = 2048 * kMiB;
  in.last_fork_usec = 10000;
  in.last_rdb_cow_bytes = 100 * kMiB;
  in.last_rdb_seconds = 4;
  in.last_rdb_file_seconds = 4.0;
  in.used_memory_now = 300 * kMiB;
  in.last_save_used_memory = 200 * kMiB;
  auto p = forecast::predict(in, correlate::Reason::bgsave);
  ASSERT_TRUE(p.growth);
  EXPECT_DOUBLE_EQ(p.growth->factor, 1.5);
  EXPECT_DOUBLE_EQ(p.child_lifetime_s.value, 6.0);
  EXPECT_DOUBLE_EQ(p.child_lifetime_s.low, 3.0);   // the last save's low
  EXPECT_DOUBLE_EQ(p.child_lifetime_s.high, 7.5);  // the scaled high
  EXPECT_DOUBLE_EQ(p.fork_freeze_ms.value, 15.0);
  ASSERT_TRUE(p.copied_bytes);
  EXPECT_DOUBLE_EQ(p.copied_bytes->value, 150.0 * kMiB);
  EXPECT_DOUBLE_EQ(p.copied_bytes->low, 75.0 * kMiB);
  EXPECT_DOUBLE_EQ(p.copied_bytes->high, 187.5 * kMiB);
  EXPECT_NE(p.copied_bytes->basis.find("x1.50 for the dataset's growth since (used_memory 300.0 MiB now, 200.0 MiB"),
            std::string::npos)
      << p.copied_bytes->basis;
  forecast::PredictReport report;
  report.inputs = in;
  report.prediction = p;
  const auto j = forecast::to_json(report);
  EXPECT_DOUBLE_EQ(j["predicted"]["growth"]["factor"].get<double>(), 1.5);

  // The copies never above all the process has.
  in.anon_bytes = 160 * kMiB;
  EXPECT_DOUBLE_EQ(forecast::predict(in, correlate::Reason::bgsave).copied_bytes->high, 160.0 * kMiB);

  // The daemon's traced fork: the RSS then against now, ahead of INFO's.
  in.traced = forecast::Inputs::Traced{8000, 2, 64 * kMiB, 256 * kMiB};
  p = forecast::predict(in, correlate::Reason::bgsave);
  ASSERT_TRUE(p.growth);
  EXPECT_DOUBLE_EQ(p.growth->factor, 2.0);
  EXPECT_DOUBLE_EQ(p.child_lifetime_s.value, 4.0);

  // Within 5%: not growth, noise.
  in.traced->rss_bytes = 500 * kMiB;
  EXPECT_FALSE(forecast::predict(in, correlate::Reason::bgsave).growth);
  // The rehearsal measures the process as it is now: its copies are not scaled.
  in.traced->rss_bytes = 256 * kMiB;
  in.dirty_curve = {{1.0, 1000}, {2.0, 2000}};
  p = forecast::predict(in, correlate::Reason::bgsave);
  EXPECT_EQ(p.copied_bytes->method, Method::soft_dirty);
  EXPECT_EQ(p.copied_bytes->basis.find("growth"), std::string::npos);
}

// The model's freeze for a process half in PMD-sized pages: fork copies an entry for 2 MiB of those,
// so that half costs about a fortieth of the other.
TEST(Forecast, ModelFreezeOfMemoryInPmdSizedPages) {
  auto in = redis_of_512_mib();
  in.anon_huge_bytes = 256 * kMiB;
  const auto p = forecast::predict(in, correlate::Reason::bgsave);
  EXPECT_EQ(p.fork_freeze_ms.method, Method::model);
  EXPECT_DOUBLE_EQ(p.fork_freeze_ms.value, 0.25 * 30 + 0.25 * 0.75);
  EXPECT_DOUBLE_EQ(p.fork_freeze_ms.low, 0.25 * 15 + 0.25 * 0.3);
  EXPECT_DOUBLE_EQ(p.fork_freeze_ms.high, 0.25 * 60 + 0.25 * 2);
  EXPECT_NE(p.fork_freeze_ms.basis.find("of the 0.25 GiB in PMD-sized pages"), std::string::npos)
      << p.fork_freeze_ms.basis;
  // All of it in PMD-sized pages (AnonHugePages can read a little over RSS between two reads).
  in.anon_huge_bytes = 600 * kMiB;
  EXPECT_DOUBLE_EQ(forecast::predict(in, correlate::Reason::bgsave).fork_freeze_ms.value, 0.5 * 0.75);
}
