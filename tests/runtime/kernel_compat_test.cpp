// The Tracer's answer to a kernel that refuses one family's real programs: that family moves down its
// chain with one warning sentence, the others keep their modes, and the tracer runs. Driven by a real
// refusal: the stand-in probes' answer is overruled to claim fentry for the COW family on a kernel
// where fentry does not load (the CI host refuses it with EPERM, 5.10 with EINVAL).
#include <algorithm>

#include "common/error.h"
#include "harness.h"
#include "tracer/probe.h"
#include "tracer/tracer.h"

using namespace thptrace;
using namespace thptrace::test;

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
