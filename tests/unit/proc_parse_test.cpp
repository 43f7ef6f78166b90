// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "proc/cpu.h"
#include "proc/folios.h"
#include "proc/proc.h"
#include "proc/sampler.h"

using namespace thptrace::proc;

TEST(ProcStatus, ParsesFieldsAndThpEnabled) {
  const char* text =
      "Name:\tredis-server\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4242\n"
      "PPid:\t1\nVmRSS:\t  123456 kB\nTHP_enabled:\t0\nThreads:\t5\n";
  const auto st = parse_status(text);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->name, "redis-server");
  EXPECT_EQ(st->tgid, 4242);
  EXPECT_EQ(st->ppid, 1);
  EXPECT_EQ(st->vm_rss_kb, 123456u);
  ASSERT_TRUE(st->thp_enabled.has_value());
  EXPECT_FALSE(*st->thp_enabled);
  EXPECT_FALSE(st->exited);
}

TEST(ProcStatus, AZombieHasExited) {
  const auto st = parse_status("Name:\tredis-server\nState:\tZ (zombie)\nTgid:\t4242\n");
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->exited);
}

TEST(ProcStatus, ThpEnabledAbsentOnOldKernels) {
  const auto st = parse_status("Name:\tx\nTgid:\t1\n");
  ASSERT_TRUE(st);
  EXPECT_FALSE(st->thp_enabled.has_value());
}

TEST(ProcStatus, RejectsGarbage) {
  EXPECT_FALSE(parse_status(""));
  EXPECT_FALSE(parse_status("Name:\tx\nTgid:\tnotanumber\n"));
  EXPECT_FALSE(parse_status("\n\n::::\n"));
}

TEST(SmapsRollup, ParsesAnonHugePages) {
  const char* text =
      "55d0c0000000-7ffd00000000 ---p 00000000 00:00 0                          [rollup]\n"
      "Rss:              884736 kB\nPss:              884000 kB\nAnonymous:        880000 kB\n"
      "AnonHugePages:    786432 kB\nShmemPmdMapped:        0 kB\n";
  const auto r = parse_smaps_rollup(text);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rss_kb, 884736u);
  EXPECT_EQ(r->anonymous_kb, 880000u);
  EXPECT_EQ(r->anon_huge_pages_kb, 786432u);
  EXPECT_FALSE(parse_smaps_rollup("AnonHugePages: 1 kB\n"));  // no Rss: not a rollup
}

TEST(Smaps, FindsMadvHugepageInVmFlags) {
  const std::string advised =
      "7f0000000000-7f0040000000 rw-p 00000000 00:00 0\nSize:            1048576 kB\n"
      "THPeligible:    1\nVmFlags: rd wr mr mw me ac sd hg\n"
      "7f0040000000-7f0040021000 rw-p 00000000 00:00 0\nSize:                132 kB\nVmFlags: rd wr mr mw me ac sd\n";
  EXPECT_TRUE(parse_smaps_hugepage_advice(advised));
  EXPECT_FALSE(parse_smaps_hugepage_advice("Size: 4 kB\nVmFlags: rd wr mr mw me ac sd nh\n"));
  EXPECT_FALSE(parse_smaps_hugepage_advice("VmFlags: rd wr thg hgx\n"));  // whole words only
  EXPECT_FALSE(parse_smaps_hugepage_advice("Name: hg\n"));
  EXPECT_TRUE(parse_smaps_hugepage_advice("VmFlags:   rd  hg"));  // odd spacing, no final newline
  EXPECT_FALSE(parse_smaps_hugepage_advice(""));
}

TEST(Vmstat, ParsesCountersAndSkipsJunk) {
  const auto m = parse_vmstat("nr_free_pages 100\nthp_split_pmd 32\nbroken\nthp_fault_alloc x\n\nthp_collapse_alloc 7");
  EXPECT_EQ(m.at("nr_free_pages"), 100u);
  EXPECT_EQ(m.at("thp_split_pmd"), 32u);
  EXPECT_EQ(m.at("thp_collapse_alloc"), 7u);
  EXPECT_EQ(m.count("thp_fault_alloc"), 0u);
  EXPECT_EQ(m.count("broken"), 0u);
}

TEST(ThpMode, ReadsBracketedWord) {
  EXPECT_EQ(parse_bracketed_mode("always [madvise] never\n"), "madvise");
  EXPECT_EQ(parse_bracketed_mode("[always] madvise never"), "always");
  EXPECT_EQ(parse_bracketed_mode("always defer defer+madvise [madvise] never"), "madvise");
  EXPECT_EQ(parse_bracketed_mode("no brackets"), "");
  EXPECT_EQ(parse_bracketed_mode("[unterminated"), "");
}

TEST(SampleSeries, VmstatDeltaBracketsTheWindow) {
  SampleSeries s;
  for (uint64_t t : {100u, 200u, 300u, 400u}) {
    Sample x;
    x.ts_ns = t;
    x.thp_vmstat["thp_split_pmd"] = t / 10;  // 10, 20, 30, 40
    s.add(x);
  }
  EXPECT_EQ(s.vmstat_delta("thp_split_pmd", 150, 250).value(), 30u - 10u);
  EXPECT_EQ(s.vmstat_delta("thp_split_pmd", 50, 500).value(), 40u - 10u);
  EXPECT_FALSE(s.vmstat_delta("missing", 150, 250));
}

TEST(Statm, ResidentPagesInKilobytes) {
  EXPECT_EQ(parse_statm_rss_kb("26770 3412 2048 392 0 4203 0\n", 4096), 3412u * 4);
  EXPECT_EQ(parse_statm_rss_kb("26770 3412 2048 392 0 4203 0\n", 65536), 3412u * 64);
  EXPECT_FALSE(parse_statm_rss_kb("", 4096));
  EXPECT_FALSE(parse_statm_rss_kb("26770", 4096));
  EXPECT_FALSE(parse_statm_rss_kb("26770 x 1", 4096));
  EXPECT_FALSE(parse_statm_rss_kb("1 18446744073709551615 1", 4096));
  EXPECT_FALSE(parse_statm_rss_kb("0 0 0 0 0 0 0\n", 4096));  // a zombie's
}

TEST(Schedstat, OnCpuAndRunQueueNanoseconds) {
  const auto s = parse_schedstat("2183064114 74181 412\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->on_cpu_ns, 2183064114u);
  EXPECT_EQ(s->runqueue_ns, 74181u);
  EXPECT_TRUE(parse_schedstat("0 0 0\n"));
  EXPECT_FALSE(parse_schedstat(""));
  EXPECT_FALSE(parse_schedstat("12"));
  EXPECT_FALSE(parse_schedstat("12 "));
  EXPECT_FALSE(parse_schedstat(" 12 13 1"));
  EXPECT_FALSE(parse_schedstat("12 x 1"));
  EXPECT_FALSE(parse_schedstat("12 -3 1"));
  EXPECT_FALSE(parse_schedstat("1 184467440737095516150 1"));  // past 64 bits
  EXPECT_FALSE(parse_schedstat(std::string_view("12\0 13 1", 8)));
}

TEST(SampleCadence, FullSamplesWhileAForkLastsAfterACollapseAndEveryIdleInterval) {
  using namespace std::chrono_literals;
  const auto t0 = SampleCadence::Clock::time_point{} + 1000s;
  SampleCadence c(10s);
  EXPECT_TRUE(c.full_due(t0, false, 0));  // the first round
  EXPECT_FALSE(c.full_due(t0 + 1s, false, 0));
  EXPECT_FALSE(c.full_due(t0 + 9s, false, 0));
  EXPECT_TRUE(c.full_due(t0 + 10s, false, 0));
  // A fork: every round while it lasts and the round after it ended.
  EXPECT_TRUE(c.full_due(t0 + 11s, true, 0));
  EXPECT_TRUE(c.full_due(t0 + 12s, true, 0));
  EXPECT_TRUE(c.full_due(t0 + 13s, false, 0));
  EXPECT_FALSE(c.full_due(t0 + 14s, false, 0));
  // khugepaged collapsed some of its memory: AnonHugePages moved.
  EXPECT_TRUE(c.full_due(t0 + 15s, false, 1));
  EXPECT_FALSE(c.full_due(t0 + 16s, false, 1));
  // Another process.
  c.reset();
  EXPECT_TRUE(c.full_due(t0 + 17s, false, 1));
}

TEST(ProcCpu, ProcsRunningAndPressure) {
  EXPECT_EQ(parse_procs_running("cpu  1 2 3\nintr 5\nprocs_running 3\nprocs_blocked 0\n"), 3u);
  EXPECT_FALSE(parse_procs_running("cpu  1 2 3\nprocs_blocked 0\n"));
  EXPECT_FALSE(parse_procs_running("procs_running x\n"));
  EXPECT_FALSE(parse_procs_running("procs_running -1\n"));
  EXPECT_EQ(parse_cpu_pressure_some_us("some avg10=0.09 avg60=3.40 avg300=22.17 total=5263626296\n"
                                       "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
            5263626296u);
  EXPECT_FALSE(parse_cpu_pressure_some_us("full avg10=0.00 total=7\n"));
  EXPECT_FALSE(parse_cpu_pressure_some_us("some avg10=0.09\n"));
  EXPECT_FALSE(
      parse_cpu_pressure_some_us(std::string_view("some total=\0"
                                                  "12",
                                                  14)));
  EXPECT_GE(online_cpus(), 1u);
}

// hugepages-<N>kB/enabled under the THP directory, by N: a size with no enabled file (shmem only) and
// names that are not a size are left out.
TEST(ProcThp, FolioModesReadByteSize) {
  const auto dir = std::filesystem::temp_directory_path() / ("thptrace-folios-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto put = [&](const std::string& sub, const std::string* text) {
    std::filesystem::create_directories(dir / sub);
    if (text) std::ofstream(dir / sub / "enabled") << *text;
  };
  const std::string modes = "always inherit [madvise] never\n", inherit = "always [inherit] madvise never\n";
  put("hugepages-64kB", &modes);
  put("hugepages-2048kB", &inherit);
  put("hugepages-8kB", nullptr);
  put("hugepages-xkB", &modes);
  put("hugepages-kB", &modes);
  put("hugepages-16KB", &modes);
  const auto m = read_folio_modes(dir.string());
  std::filesystem::remove_all(dir);
  EXPECT_EQ(m, (std::map<uint32_t, std::string>{{64, "madvise"}, {2048, "inherit"}}));
  EXPECT_TRUE(read_folio_modes("/nonexistent-thptrace").empty());
}

// A large folio's size from its frames' flags: its head's and its tails', in an aligned block.
TEST(FolioAt, SizesFromHeadAndTails) {
  const uint64_t h = kKpfAnon | kKpfCompoundHead, t = kKpfAnon | kKpfCompoundTail, p = kKpfAnon;
  // 4 pages of their own, a 4-page folio, an 8-page folio cut short by the block's end.
  std::vector<uint64_t> block = {p, p, p, p, h, t, t, t, h, t, t, t, t, t, t, t};
  EXPECT_EQ(folio_at(block, 2).pages, 1u);
  EXPECT_EQ(folio_at(block, 2).head, 2u);
  EXPECT_EQ(folio_at(block, 4).pages, 4u);
  EXPECT_EQ(folio_at(block, 7).pages, 4u);
  EXPECT_EQ(folio_at(block, 7).head, 4u);
  EXPECT_EQ(folio_at(block, 15).pages, 8u);
  EXPECT_EQ(folio_at(block, 15).head, 8u);
  // A tail whose head is before the block, or a tail after a page of its own: not known.
  const std::vector<uint64_t> headless = {t, t, p, t};
  EXPECT_EQ(folio_at(headless, 1).pages, 0u);
  EXPECT_EQ(folio_at(headless, 3).pages, 0u);
  EXPECT_EQ(folio_at(headless, 9).pages, 0u);
}
