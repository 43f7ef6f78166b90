// SPDX-License-Identifier: Apache-2.0
// The Tracer's answer to a kernel that refuses one family's real programs: that family moves down its
// chain with one warning sentence, the others keep their modes, and the tracer runs. Driven by a real
// refusal: the stand-in probes' answer is overruled to claim fentry for the COW family on a kernel
// where fentry does not load (the CI host refuses it with EPERM, 5.10 with EINVAL).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "common/error.h"
#include "harness.h"
#include "tracer/probe.h"
#include "tracer/tracer.h"

using namespace thptrace;
using namespace thptrace::test;
using namespace std::chrono_literals;

TEST(Tracer, RefusedFamilyMovesDownItsChainAlone) {
  REQUIRE_BPF();
  const auto chosen = tracer::choose_modes(false, "");
  if (chosen.cow_fault.mode == tracer::Mode::fentry) GTEST_SKIP() << "fentry loads on this kernel: nothing to refuse";
  auto claimed = chosen;
  claimed.cow_fault = {tracer::Mode::fentry, "claimed by the test"};
  testing::internal::CaptureStderr();
  std::string err;
  {
    tracer::Tracer t(claimed);
    err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(t.modes().cow_fault.mode, chosen.cow_fault.mode) << err;
    EXPECT_NE(t.modes().cow_fault.why.find("the real fentry programs were refused"), std::string::npos)
        << t.modes().cow_fault.why;
    EXPECT_EQ(t.modes().fork.mode, chosen.fork.mode);
    EXPECT_EQ(t.modes().thp.mode, chosen.thp.mode);
    EXPECT_EQ(t.modes().stall.mode, chosen.stall.mode);
    t.attach();
    EXPECT_GT(t.link_count(), 0u);
  }
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;  // one sentence
  EXPECT_NE(err.find("cow_fault"), std::string::npos) << err;
  EXPECT_EQ(leftover_thptrace_programs(), std::vector<std::string>{});
}

// The disk family's fentry programs refused at load: without --disk on it goes off, not down to the
// syscall tracepoints (which slow every system call of the host); with it, down its chain.
TEST(Tracer, RefusedDiskFentryGoesOffUnlessTracepointsAreAllowed) {
  REQUIRE_BPF();
  const auto chosen = tracer::choose_modes(false, "", tracer::DiskTracing::on);
  if (chosen.disk.mode == tracer::Mode::fentry) GTEST_SKIP() << "fentry loads on this kernel: nothing to refuse";
  for (const bool allowed : {false, true}) {
    auto claimed = chosen;
    claimed.disk = {tracer::Mode::fentry, "claimed by the test"};
    claimed.disk_tracepoints = allowed;
    testing::internal::CaptureStderr();
    tracer::Tracer t(claimed);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(t.modes().disk.mode, allowed ? chosen.disk.mode : tracer::Mode::unavailable) << err;
    EXPECT_EQ(t.modes().fork.mode, chosen.fork.mode);
  }
  EXPECT_EQ(leftover_thptrace_programs(), std::vector<std::string>{});
}

// Below what a capture needs, the Tracer refuses to start with the one sentence choose_modes wrote.
TEST(Tracer, BelowTheMinimumKernelRefusesWithOneSentence) {
  auto modes = tracer::choose_modes(false, "");
  modes.unsupported = "the kernel has no BPF ring buffer (BPF_MAP_TYPE_RINGBUF): thptrace needs Linux 5.8 or later";
  try {
    tracer::Tracer t(modes);
    FAIL() << "the Tracer started below the minimum kernel";
  } catch (const FatalError& e) {
    EXPECT_EQ(e.code(), kExitRuntime);
    EXPECT_EQ(std::string(e.what()), modes.unsupported + ".");
  }
}

// The fentry COW programs keep each fault's start in task storage; where tracing programs may not use
// it (before 5.13) their *_compat build keeps it in the starts hash. Both must count and time every
// fault, and sample 1 in N of the parent's copies while the child lives with its user stack. The
// default build is what the Cow.* and Attribution.* tests run; this one is forced here, where fentry
// loads (the 6.1 and 6.12 guests; the host refuses fentry).
TEST(Tracer, FentryWithoutTaskStorageCountsAndTimesEveryFault) {
  REQUIRE_BPF();
  auto modes = tracer::choose_modes(false, "");
  if (modes.cow_fault.mode != tracer::Mode::fentry) GTEST_SKIP() << "fentry does not load on this kernel";
  modes.task_storage = false;
  constexpr size_t kPages = 4096;
  const char* vm = std::getenv("THPTRACE_VM");
  const long child_ms = vm && std::string(vm) == "1" ? 4000 : 600;
  Process work({workload_bin(), std::to_string(kPages), std::to_string(child_ms), "4k"});
  ASSERT_TRUE(work.wait_stdout_line("ready", 20s)) << work.err();
  constexpr uint32_t kEvery = 64;
  tracer::Tracer t(modes, tracer::TracerOptions{.sample_every = kEvery});
  ASSERT_EQ(t.modes().cow_fault.mode, tracer::Mode::fentry) << t.modes().cow_fault.why;
  ASSERT_FALSE(t.modes().task_storage);
  t.attach();
  ASSERT_TRUE(t.watch(work.pid()));
  work.write_stdin("go\n");
  std::optional<thptrace_episode> episode;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!episode && std::chrono::steady_clock::now() < deadline)
    t.poll(100, [&](const thptrace_event& e) {
      if (e.type == EV_CHILD_EXIT && e.tgid == static_cast<__u32>(work.pid())) episode = e.episode;
    });
  ASSERT_TRUE(episode) << "no exit record of the workload's fork child";
  EXPECT_NEAR(static_cast<double>(episode->faults.cow), kPages, 0.02 * kPages);
  EXPECT_GE(episode->faults.ns_count, episode->faults.cow) << "every counted fault was timed";
  // The samples were sent before the child's exit record; one more poll takes any still in the ring.
  t.poll(100, [](const thptrace_event&) {});
  size_t samples = 0, with_stack = 0;
  for (const auto& r : t.take_copy_samples()) {
    const auto& s = r.sample;
    if (s.tgid != static_cast<__u32>(work.pid())) continue;
    ++samples;
    if (s.frames > 0 && s.address) ++with_stack;
  }
  // 1 in 64 of the parent's copies on average, ticked on each CPU's count: the gaps between samples are
  // drawn from 1..127, so the count of a 4,096-copy run is 64 with a standard deviation of
  // sqrt(64 / 3) = 4.6 (a renewal count: n·var(gap)/mean(gap)²). Five of them either way, plus the
  // parent's few other copies (its stack, libc's data) while the child lives. A fixed ±4 failed at 55.
  const double expected = static_cast<double>(kPages) / kEvery;
  const double spread = 5 * std::sqrt(expected / 3);
  EXPECT_GE(static_cast<double>(samples), expected - spread);
  EXPECT_LE(static_cast<double>(samples), expected + spread + 8);
  EXPECT_EQ(with_stack, samples) << "every sample has an address and a user stack";
  EXPECT_EQ(t.copy_samples_dropped(), 0u);
  EXPECT_TRUE(work.wait_stdout_line("done", 30s));
  EXPECT_EQ(work.wait(10s), 0);
}
