// SPDX-License-Identifier: Apache-2.0
// The fault programs' fast path (one hot line per watched tgid) and its slow path (the hash maps)
// must count the same: a target whose line another target owns still gets every COW fault, and the
// owner gets none of its faults. Driven through the Tracer directly, in the default and the forced
// fallback modes, with a second target whose pid is chosen to collide.
#include <sys/wait.h>
#include <unistd.h>

#include <optional>

#include "harness.h"
#include "tracer/tracer.h"

using namespace thptrace::test;
using namespace std::chrono_literals;
namespace tracer = thptrace::tracer;

namespace {

constexpr size_t kPages = 8192;  // 32 MiB
constexpr long kChildMs = 600;

// A child blocked on a pipe until destroyed, whose pid has the same hot-line index as `like`.
class Occupant {
 public:
  explicit Occupant(pid_t like) {
    for (int attempt = 0; attempt < 20000 && !pid_; attempt++) {
      int fds[2];
      if (pipe(fds)) return;
      const pid_t p = fork();
      if (p == 0) {
        close(fds[1]);
        char c;
        (void)!read(fds[0], &c, 1);
        _exit(0);
      }
      close(fds[0]);
      if (p > 0 && thptrace_hot_index(static_cast<__u32>(p)) == thptrace_hot_index(static_cast<__u32>(like))) {
        pid_ = p;
        release_fd_ = fds[1];
      } else {
        close(fds[1]);
        if (p > 0) waitpid(p, nullptr, 0);
      }
    }
  }
  ~Occupant() {
    if (!pid_) return;
    close(release_fd_);
    waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = 0;
  int release_fd_ = -1;
};

void expect_slow_path_counts(bool force_fallback) {
  Process work({workload_bin(), std::to_string(kPages), std::to_string(kChildMs), "4k"});
  ASSERT_TRUE(work.wait_stdout_line("ready", 20s)) << work.err();
  Occupant occupant(work.pid());
  ASSERT_NE(occupant.pid(), 0) << "no pid with the workload's hot-line index came up";

  tracer::Tracer t(tracer::choose_modes(force_fallback, ""));
  t.attach();
  t.watch(occupant.pid());  // owns the line
  t.watch(work.pid());      // counted on the slow path
  EXPECT_TRUE(t.owns_hot_line(occupant.pid()));
  EXPECT_FALSE(t.owns_hot_line(work.pid()));
  work.write_stdin("go\n");

  std::optional<thptrace_episode> episode;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!episode && std::chrono::steady_clock::now() < deadline)
    t.poll(100, [&](const thptrace_event& e) {
      if (e.type == EV_CHILD_EXIT && e.tgid == static_cast<__u32>(work.pid())) episode = e.episode;
    });
  ASSERT_TRUE(episode) << "no exit record of the workload's fork child";
  EXPECT_NEAR(static_cast<double>(episode->faults.cow), kPages, 0.02 * kPages);
  const auto target = t.target(work.pid());
  ASSERT_TRUE(target);
  EXPECT_GE(target->faults.cow, episode->faults.cow);
  EXPECT_LT(t.target(occupant.pid()).value_or(thptrace_target{}).faults.cow, 100u);

  EXPECT_TRUE(work.wait_stdout_line("done", 30s));
  EXPECT_EQ(work.wait(10s), 0);

  // Once the owner is unwatched the line is free again, and a new watch takes it with a fresh count
  // (the workload has exited, so nothing adds to it meanwhile).
  t.unwatch(occupant.pid());
  t.unwatch(work.pid());
  t.watch(work.pid());
  EXPECT_TRUE(t.owns_hot_line(work.pid()));
  EXPECT_EQ(t.target(work.pid()).value_or(thptrace_target{}).faults.cow, 0u);
}

}  // namespace

TEST(HotLine, CollidingTargetCountsOnTheSlowPath) {
  REQUIRE_BPF();
  expect_slow_path_counts(false);
}

TEST(HotLine, CollidingTargetCountsOnTheSlowPathForcedFallback) {
  REQUIRE_BPF();
  expect_slow_path_counts(true);
}
