// SPDX-License-Identifier: Apache-2.0
#include "cli/copy_cost.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/units.h"

namespace thptrace::cli {
namespace {

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// This thread's CPU time (user and system: a copy is the kernel's work on the thread's behalf).
int64_t thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// One run over a populated region: ns per copy, or a negative value with *why.
double one_round(volatile char* region, size_t pages, std::string* why) {
  int ready[2];
  if (::pipe(ready) != 0) {
    *why = errno_text("pipe");
    return -1;
  }
  const pid_t child = ::fork();
  if (child < 0) {
    *why = errno_text("fork");
    ::close(ready[0]);
    ::close(ready[1]);
    return -1;
  }
  if (child == 0) {
    // Holds the pages shared until the parent has written them all (async-signal-safe calls only).
    ::close(ready[1]);
    char c;
    while (::read(ready[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::_exit(0);
  }
  ::close(ready[0]);
  // Timed by the thread's CPU clock, not the wall's: on a busy host the wall clock also counts the
  // time the thread waited for a CPU, which is the host's load, not a copy's cost.
  const int64_t start = thread_cpu_ns();
  for (size_t i = 0; i < pages; ++i) region[i * kPageBytes] = 2;
  const int64_t end = thread_cpu_ns();
  ::close(ready[1]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return static_cast<double>(end - start) / static_cast<double>(pages);
}

}  // namespace

// A fresh region for each round: one mapping's copies cost the same from round to round, but two
// mappings' differ by up to 1.4x here (where their pages and page tables landed), so a median over
// rounds on one mapping measured the mapping more than the host.
std::optional<double> measure_copy_ns(size_t pages, int rounds, std::string* why) {
  if (pages == 0 || rounds <= 0) {
    *why = "nothing to measure";
    return std::nullopt;
  }
  std::vector<double> runs;
  for (int r = 0; r < rounds; ++r) {
    void* p = ::mmap(nullptr, pages * kPageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      *why = errno_text("mmap");
      break;
    }
    // A huge page would be split and copied 4 KiB at a time anyway (Linux 5.8+), but first faulted
    // in whole: small pages measure what a copy costs and nothing else.
    ::madvise(p, pages * kPageBytes, MADV_NOHUGEPAGE);
    auto* region = static_cast<volatile char*>(p);
    for (size_t i = 0; i < pages; ++i) region[i * kPageBytes] = 1;
    const double ns = one_round(region, pages, why);
    ::munmap(p, pages * kPageBytes);
    if (ns < 0) break;
    runs.push_back(ns);
  }
  if (runs.empty()) return std::nullopt;
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

}  // namespace thptrace::cli
