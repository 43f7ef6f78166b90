// SPDX-License-Identifier: Apache-2.0
#include "cli/copy_cost.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

namespace thptrace::cli {
namespace {

constexpr size_t kPage = 4096;

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

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
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < pages; ++i) region[i * kPage] = 2;
  const auto end = std::chrono::steady_clock::now();
  ::close(ready[1]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count()) /
         static_cast<double>(pages);
}

}  // namespace

std::optional<double> measure_copy_ns(size_t pages, int rounds, std::string* why) {
  if (pages == 0 || rounds <= 0) {
    *why = "nothing to measure";
    return std::nullopt;
  }
  void* p = ::mmap(nullptr, pages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    *why = errno_text("mmap");
    return std::nullopt;
  }
  // A huge page would be split and copied 4 KiB at a time anyway (Linux 5.8+), but first faulted
  // in whole: small pages measure what a copy costs and nothing else.
  ::madvise(p, pages * kPage, MADV_NOHUGEPAGE);
  auto* region = static_cast<volatile char*>(p);
  for (size_t i = 0; i < pages; ++i) region[i * kPage] = 1;
  std::vector<double> runs;
  for (int r = 0; r < rounds; ++r) {
    const double ns = one_round(region, pages, why);
    if (ns < 0) break;
    runs.push_back(ns);
  }
  ::munmap(p, pages * kPage);
  if (runs.empty()) return std::nullopt;
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

}  // namespace thptrace::cli
