// SPDX-License-Identifier: Apache-2.0
// Attribution of copies: the grouping of sampled copies by code path, function and mapping, the
// estimates, the judgement that stacks stop short, /proc/PID/maps labels, and the report's section.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include "correlate/copies.h"
#include "report/copies.h"
#include "report/report.h"
#include "symbolize/resolver.h"

using namespace thptrace;
using correlate::CopySample;

namespace {

CopySample sample(std::vector<std::string> frames, std::string mapping = "anonymous", bool whole = true) {
  CopySample s;
  s.frames = std::move(frames);
  s.mapping = std::move(mapping);
  s.leaf_module = "redis-server";
  s.whole = whole;
  return s;
}

std::vector<const CopySample*> pointers(const std::vector<CopySample>& v) {
  std::vector<const CopySample*> out;
  out.reserve(v.size());
  for (const auto& s : v) out.push_back(&s);
  return out;
}

}  // namespace

TEST(Copies, GroupsByPathFunctionAndMapping) {
  std::vector<CopySample> v;
  v.reserve(10);
  for (int i = 0; i < 6; ++i) v.push_back(sample({"dictAdd", "setKey", "setCommand", "call", "main"}));
  for (int i = 0; i < 3; ++i) v.push_back(sample({"activeExpireCycle", "serverCron", "aeMain", "main"}, "[heap]"));
  v.push_back(sample({"memcpy", "readQueryFromClient", "readQueryFromClient", "aeMain", "main"}));
  const auto a = correlate::attribute_copies(pointers(v), 64, 700, 4000);
  EXPECT_EQ(a.samples, 10u);
  EXPECT_EQ(a.estimated, 640u);
  EXPECT_EQ(a.estimated_error, correlate::estimate_error(64, 10));
  EXPECT_EQ(a.estimated_error, 397u);  // 1.96 · 64 · √10
  ASSERT_TRUE(a.copy_ratio);
  EXPECT_DOUBLE_EQ(*a.copy_ratio, 700.0 * 4096 / (4000.0 * 1024));
  EXPECT_TRUE(a.stacks_partial.empty());
  ASSERT_EQ(a.paths.size(), 3u);
  EXPECT_EQ(a.paths[0].name, "dictAdd ← setKey ← setCommand");
  EXPECT_EQ(a.paths[0].leaf, "dictAdd");
  EXPECT_DOUBLE_EQ(a.paths[0].share, 0.6);
  EXPECT_EQ(a.paths[0].estimated, 384u);
  EXPECT_EQ(a.paths[1].name, "activeExpireCycle ← serverCron ← aeMain");
  // Recursion adds nothing to a short path.
  EXPECT_EQ(a.paths[2].name, "memcpy ← readQueryFromClient ← aeMain");
  ASSERT_NE(a.dominant_path(), nullptr);
  EXPECT_EQ(a.dominant_path()->leaf, "dictAdd");
  // Functions count once per sample, wherever they are in the stack.
  EXPECT_EQ(a.functions[0].name, "main");
  EXPECT_DOUBLE_EQ(a.functions[0].share, 1.0);
  ASSERT_EQ(a.mappings.size(), 2u);
  EXPECT_EQ(a.mappings[0].name, "anonymous");
  EXPECT_DOUBLE_EQ(a.mappings[0].share, 0.7);
  EXPECT_EQ(a.mappings[1].name, "[heap]");
}

TEST(Copies, NoDominantPathBelowHalf) {
  std::vector<CopySample> v = {sample({"a", "main"}), sample({"b", "main"})};
  const auto a = correlate::attribute_copies(pointers(v), 8, 16, 0);
  EXPECT_EQ(a.dominant_path(), nullptr);
  EXPECT_FALSE(a.copy_ratio);
}

TEST(Copies, PartialStacksKeepTheFaultingFunction) {
  std::vector<CopySample> v;
  v.reserve(4);
  for (int i = 0; i < 3; ++i) v.push_back(sample({"dictAdd", "junk" + std::to_string(i)}, "anonymous", false));
  v.push_back(sample({"dictAdd", "setKey", "setCommand", "call"}));
  const auto a = correlate::attribute_copies(pointers(v), 64, 256, 1024);
  EXPECT_EQ(a.stacks_partial, "redis-server has no frame pointers");
  ASSERT_EQ(a.paths.size(), 1u);
  EXPECT_EQ(a.paths[0].name, "dictAdd");
  EXPECT_DOUBLE_EQ(a.paths[0].share, 1.0);
  ASSERT_EQ(a.functions.size(), 1u);
}

TEST(Copies, NoSamples) {
  const auto a = correlate::attribute_copies({}, 64, 10, 100);
  EXPECT_EQ(a.samples, 0u);
  EXPECT_EQ(a.estimated, 0u);
  EXPECT_TRUE(a.paths.empty());
  EXPECT_EQ(a.dominant_path(), nullptr);
}

TEST(Copies, StackRoots) {
  EXPECT_TRUE(correlate::is_stack_root("main"));
  EXPECT_TRUE(correlate::is_stack_root("start_thread"));
  EXPECT_FALSE(correlate::is_stack_root("call"));
}

TEST(Copies, MapsLinesAndTheirLabels) {
  const auto maps = symbolize::parse_maps(
      "55d0c0a00000-55d0c0a2e000 r--p 00000000 08:01 1234   /usr/bin/redis-server\n"
      "55d0c0a2e000-55d0c0b90000 r-xp 0002e000 08:01 1234   /usr/bin/redis-server\n"
      "55d0c1000000-55d0c1200000 rw-p 00000000 00:00 0      [heap]\n"
      "7f0000000000-7f0000800000 rw-p 00000000 00:00 0 \n"
      "7f1000000000-7f1000001000 rw-p 00000000 08:01 99     /usr/lib/x86_64-linux-gnu/libc.so.6 (deleted)\n"
      "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0      [stack]\n"
      "garbage\n");
  ASSERT_EQ(maps.size(), 6u);
  EXPECT_EQ(maps[1].start, 0x55d0c0a2e000u);
  EXPECT_EQ(maps[1].perms, "r-xp");
  EXPECT_EQ(maps[1].offset, 0x2e000u);
  EXPECT_EQ(maps[1].path, "/usr/bin/redis-server");
  EXPECT_EQ(symbolize::mapping_label(maps[0]), "redis-server");
  EXPECT_EQ(symbolize::mapping_label(maps[2]), "[heap]");
  EXPECT_EQ(symbolize::mapping_label(maps[3]), "anonymous");
  EXPECT_EQ(symbolize::mapping_label(maps[4]), "libc.so.6");
  EXPECT_EQ(symbolize::mapping_label(maps[5]), "[stack]");
}

// The resolver symbolizes this very test binary: a function of ours by name, its mapping by label,
// and an anonymous mapping made after it started (read again on refresh).
TEST(Copies, ResolverNamesAFunctionOfThisProcess) {
  symbolize::Resolver r(getpid());
  const auto code = reinterpret_cast<uint64_t>(&correlate::is_stack_root);
  const __u64 stack[] = {code};
  const auto s = r.resolve(1, code, stack, 1);
  ASSERT_EQ(s.frames.size(), 1u);
  EXPECT_NE(s.frames[0].find("is_stack_root"), std::string::npos) << s.frames[0];
  EXPECT_EQ(s.leaf_module, "unit_tests");
  EXPECT_EQ(s.mapping, "unit_tests");
  void* anon = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(anon, MAP_FAILED);
  r.refresh();
  EXPECT_EQ(r.resolve(1, reinterpret_cast<uint64_t>(anon), stack, 1).mapping, "anonymous");
  munmap(anon, 4096);
}

TEST(Copies, ReportSectionRoundTripsAndReads) {
  std::vector<CopySample> v(3, sample({"write_most", "main"}));
  v.push_back(sample({"write_rest", "main"}));
  const auto a = correlate::attribute_copies(pointers(v), 64, 256, 1024);
  const auto j = report::copies_json(a);
  EXPECT_EQ(report::copies_json(report::copies_from(nlohmann::json::parse(j.dump()))).dump(), j.dump());
  const auto lines = report::copies_lines(a);
  ASSERT_GE(lines.size(), 3u);
  // The exact count is on the fork's line: the copies line gives the samples the shares rest on, and
  // no estimate beside the exact count.
  EXPECT_NE(lines[0].find("from 4 samples (1 in 64 at random)"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find('~'), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("75.0%  write_most ← main"), std::string::npos) << lines[1];
  report::Report r;
  correlate::ForkEpisode e;
  e.child_pid = 7;
  e.cow_faults = 256;
  e.copies = a;
  r.forks.push_back(e);
  bool named = false;
  for (const auto& f : report::finding_texts(r))
    named = named || f.find("75% of the sampled copies came from write_most") != std::string::npos;
  EXPECT_TRUE(named);
}

// What a Redis was doing when it wrote: the command under call(), call()'s own bookkeeping, the event
// loop's work by its functions, and a stack that stopped short of all of them.
TEST(Copies, ByCommandFromTheFunctionUnderCall) {
  const std::vector<std::string> loop = {"processCommand", "processInputBuffer", "readQueryFromClient", "aeMain",
                                         "main"};
  const auto under = [&](std::vector<std::string> top) {
    top.emplace_back("call");
    top.insert(top.end(), loop.begin(), loop.end());
    return sample(top);
  };
  EXPECT_EQ(correlate::command_of(under({"dictAddRaw", "dbAdd", "setKey", "setGenericCommand", "setCommand"})), "SET");
  EXPECT_EQ(correlate::command_of(under({"zslInsert", "zaddGenericCommand", "zaddCommand"})), "ZADD");
  EXPECT_EQ(correlate::command_of(under({"hdr_record_values", "updateCommandLatencyHistogram"})), "call() bookkeeping");
  EXPECT_EQ(correlate::command_of(sample({"_sdsnewlen", "createStringObject", "processMultibulkBuffer",
                                          "processInputBuffer", "readQueryFromClient", "aeMain", "main"})),
            "query-buffer reads");
  EXPECT_EQ(correlate::command_of(sample({"dictDelete", "deleteExpiredKeyAndPropagate", "activeExpireCycle",
                                          "databasesCron", "serverCron", "aeMain", "main"})),
            "expire cycle");
  EXPECT_EQ(correlate::command_of(sample({"clientsCronTrackExpansiveClients", "clientsCron", "serverCron", "main"})),
            "cron");
  EXPECT_EQ(correlate::command_of(sample({"memcpy", "main"})), "other");
  EXPECT_EQ(correlate::command_of(sample({"_sdsnewlen"}, "anonymous", false)), "unattributed");

  // Grouped only for a Redis: a program with no event loop or call() on any stack gets none.
  std::vector<CopySample> redis = {under({"setKey", "setGenericCommand", "setCommand"}),
                                   under({"setKey", "setGenericCommand", "setCommand"}),
                                   sample({"_sdsnewlen", "processMultibulkBuffer", "aeMain", "main"})};
  const auto a = correlate::attribute_copies(pointers(redis), 64, 1000, 0);
  ASSERT_EQ(a.commands.size(), 2u);
  EXPECT_EQ(a.commands[0].name, "SET");
  EXPECT_NEAR(a.commands[0].share, 2.0 / 3, 1e-9);
  EXPECT_EQ(a.commands[1].name, "query-buffer reads");
  std::vector<CopySample> other = {sample({"writer", "main"})};
  EXPECT_TRUE(correlate::attribute_copies(pointers(other), 64, 1000, 0).commands.empty());
  // In the report: a line of its own, and by_command in the JSON, read back.
  const auto lines = report::copies_lines(a);
  EXPECT_NE(std::find(lines.begin(), lines.end(), "             by command: SET 67%, query-buffer reads 33%"),
            lines.end());
  const auto back = report::copies_from(report::copies_json(a));
  ASSERT_EQ(back.commands.size(), 2u);
  EXPECT_EQ(back.commands[0].name, "SET");
}
